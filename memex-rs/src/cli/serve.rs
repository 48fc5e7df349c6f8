//! `memex serve` (the service: backfill, watch, HTTP API) and `memex mcp` (the MCP server on
//! stdio), with the signal that stops them.

use ai_cli_session_collector::AdapterRegistry;
use anyhow::{Context, Result};

use super::{Ctx, UserError, reader};
use crate::store;

pub(super) fn serve(ctx: &Ctx) -> Result<()> {
    let s = &ctx.resolved.settings;
    let registry = AdapterRegistry::new();
    let bind: std::net::SocketAddr = s.api.bind.parse().context("api.bind")?;
    let cfg = crate::service::ServeConfig {
        settings: s.clone(),
        roots: s.roots_with_projects(&registry, &ctx.env, &{
            let mut p = super::known_projects(ctx);
            p.truncate(crate::service::MAX_PROJECT_ROOTS);
            p
        }),
        env: ctx.env.clone(),
        bind,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("memex-rt")
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let res = runtime.block_on(crate::service::run(cfg, shutdown_signal(), |addr| {
        eprintln!(
            "memex serve: listening on http://{addr} (pid {})",
            std::process::id()
        );
    }));
    // Leave without waiting for stray blocking reads of the API.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    res.map_err(|e| match e {
        crate::service::ServeError::Lock(store::lock::LockError::Held { .. }) => UserError {
            message: e.to_string(),
            hint: Some("stop that process first, or give this one another --data-dir".into()),
            code: 3,
        }
        .into(),
        crate::service::ServeError::NoToken(_) => UserError {
            message: e.to_string(),
            hint: Some(
                "set MEMEX_API_TOKEN (clients then send `Authorization: Bearer <token>`), or bind to 127.0.0.1"
                    .into(),
            ),
            code: 2,
        }
        .into(),
        crate::service::ServeError::Bind { .. } => UserError {
            hint: Some("another program uses that port: pick another with --bind 127.0.0.1:PORT".into()),
            message: format!("{e}: {}", std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_default()),
            code: 2,
        }
        .into(),
        other => anyhow::Error::from(other),
    })
}

pub(super) fn mcp(ctx: &Ctx) -> Result<()> {
    use rmcp::ServiceExt;
    // Creates and migrates the archive when needed; then only reads.
    reader(ctx)?;
    let pool = store::ReadPool::new(&ctx.resolved.settings.data_dir());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let settings = ctx.resolved.settings.clone();
    runtime.block_on(async {
        let vectors = {
            let conn = reader(ctx)?;
            crate::vector::for_search(&settings, &conn).await
        };
        let service = crate::mcp::MemexMcp::new(pool, vectors)
            .serve(rmcp::transport::stdio())
            .await
            .context("the MCP client did not initialise")?;
        service.waiting().await.context("the MCP session failed")?;
        Ok::<_, anyhow::Error>(())
    })?;
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    Ok(())
}

/// SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let int = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => {
                    let _ = int.await;
                    return;
                }
            };
        tokio::select! {
            _ = int => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = int.await;
    }
}
