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
    let res = runtime.block_on(crate::service::run(cfg, shutdown_signal(), |l| {
        let pid = std::process::id();
        match l.tcp {
            Some(addr) => eprintln!("memex serve: listening on http://{addr} (pid {pid})"),
            None => eprintln!(
                "memex serve: another program listens on {bind}: the web pages wait until it is free (pid {pid})"
            ),
        }
        if let Some(p) = &l.socket {
            eprintln!("memex serve: the CLI and the hooks reach it at {}", p.display());
        }
        // A sign-in link is a credential: shown on the owner's terminal, never written to a log
        // or a journal that stderr may be.
        use std::io::IsTerminal;
        if l.tcp.is_some() {
            let terminal = std::io::stderr().is_terminal();
            match terminal.then(|| l.signins.link()).flatten() {
                Some(link) => eprintln!(
                    "memex serve: sign a browser in with {link} (works once, for 10 minutes; `memex open` makes another)"
                ),
                _ => eprintln!("memex serve: `memex open` signs a browser in"),
            }
        }
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
        crate::service::ServeError::Secret(crate::owner::SecretError::TooShort(_)) => UserError {
            message: e.to_string(),
            hint: Some("or leave api.token empty: the service then makes its own".into()),
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

/// `memex open [--print]`: a one-time sign-in link from the running service (asked over its
/// socket), opened in the browser or printed.
pub(super) fn open(ctx: &Ctx, print: bool) -> Result<()> {
    let s = &ctx.resolved.settings;
    let dir = s.data_dir();
    let Some(addr) = store::lock::serving_addr(&dir) else {
        return Err(UserError {
            message: format!("no service is running for {}", dir.display()),
            hint: Some("start it with `memex serve`".into()),
            code: 3,
        }
        .into());
    };
    let answer = super::post_service(ctx, &addr, "/api/signin", serde_json::json!({}))?;
    let Some(url) = answer["url"].as_str() else {
        anyhow::bail!("the service answered without a link: {answer}");
    };
    if print {
        println!("{url}");
        return Ok(());
    }
    // The browser is given a private file that forwards to the link, not the link itself: a
    // command line is visible to every user of the machine, and the link signs in whoever uses
    // it first.
    let page = dir.join("open.html");
    let html = format!(
        "<!doctype html><meta charset=\"utf-8\"><meta name=\"referrer\" content=\"no-referrer\">\
         <meta http-equiv=\"refresh\" content=\"0; url={url}\"><title>Memex</title>\
         <p><a href=\"{url}\">Open Memex</a></p>\n"
    );
    write_private(&page, &html).with_context(|| format!("cannot write {}", page.display()))?;
    match opener::open_browser(&page) {
        Ok(()) => {
            eprintln!("memex open: opened the web pages in your browser");
            Ok(())
        }
        Err(e) => {
            eprintln!(
                "memex open: could not start a browser ({e}); open this link (it works once, for 10 minutes):"
            );
            println!("{url}");
            Ok(())
        }
    }
}

/// Writes `text` to `path` (replacing it), readable by this user only.
fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
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
        let service = crate::mcp::MemexMcp::new(pool, vectors, settings.clone())
            .with_team(crate::team::Joined::of(&settings.data_dir()))
            .serve(rmcp::transport::stdio())
            .await
            .context("the MCP client did not initialise")?;
        service.waiting().await.context("the MCP session failed")?;
        Ok::<_, anyhow::Error>(())
    })?;
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    Ok(())
}

/// `memex serve --team URL`: the team server (`api::team`), until SIGINT or SIGTERM.
pub(super) fn serve_team(ctx: &Ctx, url: &str) -> Result<()> {
    let s = &ctx.resolved.settings;
    let bind: std::net::SocketAddr = s.api.bind.parse().context("api.bind")?;
    let team = memex_team::archive::Team::new(url).map_err(super::team::explained)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("memex-team")
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let info = runtime
        .block_on(team.checked())
        .map_err(super::team::explained)?;
    // The query embedder, when its model made the team's vectors.
    let embedder = crate::embed::from_settings(&s.vector, &s.compact, &s.data_dir())
        .ok()
        .filter(|e| e.fallback_reason().is_none());
    let embedder = match (&info.vector_model, embedder) {
        (Some(m), Some(e)) if e.id() == m => Some(e),
        (Some(m), _) => {
            eprintln!(
                "memex serve --team: the team's vectors were made by {m}, which this machine does not                  have loaded: searches go by words"
            );
            None
        }
        _ => None,
    };
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .map_err(|e| UserError {
                message: format!("cannot listen on {bind}: {e}"),
                hint: Some("pick another address with --bind HOST:PORT".into()),
                code: 2,
            })?;
        let bound = listener.local_addr()?;
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).context("the random generator")?;
        let policy = crate::api::guard::Policy::new(
            crate::api::guard::Channel::Tcp,
            bound,
            &s.api,
            crate::owner::Secret::new(secret.iter().map(|b| format!("{b:02x}")).collect::<String>()),
        );
        let st = std::sync::Arc::new(crate::api::team::TeamServer::new(
            team,
            policy,
            embedder,
            s.api.max_body_bytes,
        ));
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let cancel = tokio_util::sync::CancellationToken::new();
        let app = crate::api::team::router(st, cancel.clone());
        eprintln!(
            "memex serve --team: serving the team archive {} on http://{bound} (pid {}); members sign in with their token",
            crate::config::without_password(url),
            std::process::id()
        );
        let server = tokio::spawn(crate::api::listen::serve(listener, app, stop_rx, "team"));
        shutdown_signal().await;
        cancel.cancel();
        let _ = stop_tx.send(true);
        let _ = server.await;
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
