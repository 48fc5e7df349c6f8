//! `memex sync` (setup, join, push and pull, status) and `memex hosts`: this archive and the
//! archives of the user's other machines, through a target that keeps sealed batches
//! (`memex-sync`). The key stays on the user's machines: `sync.key` in the data folder.

use std::io::Read;
use std::path::{Path, PathBuf};

use ai_cli_session_collector::AdapterRegistry;
use anyhow::{Context, Result};
use clap::Subcommand;
use serde_json::json;

use memex_sync::engine::{Engine, Step};
use memex_sync::key::SyncKey;
use memex_sync::target::{ArchiveInfo, LAYOUT, Target};
use memex_sync::url::{AnyTarget, target};

use super::{Ctx, reader, user_error, write_access};
use crate::config::without_password;
use crate::store::sync as archive;

use crate::service::sync::TARGET_FILE;
use crate::state::Synced;

#[derive(Subcommand, Debug)]
pub enum SyncCommand {
    /// Prepare a target (a PostgreSQL database or a folder) and make the key, on your first
    /// machine. URL: `postgres://user:password@host/db` or `file:///path/to/folder`.
    Setup {
        url: String,
        /// Also write the key to FILE, to carry to your other machines.
        #[arg(long, value_name = "FILE")]
        key_out: Option<PathBuf>,
    },
    /// Sync this machine through the target another machine set up, with its key (a key file,
    /// or `-` to read it from stdin: the file's text or the key's 24 words).
    Join {
        url: String,
        #[arg(long, value_name = "FILE")]
        key: String,
    },
    /// What was sent and taken, what waits, and which batches did not open.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Print this machine's sync key as 24 words, to write down or to type into `memex sync
    /// join URL --key -` on another machine. Whoever sees them can read what you sync.
    Key,
}

pub(super) fn show_words(ctx: &Ctx) -> Result<()> {
    let key = SyncKey::read_file(&key_path(ctx)).map_err(|e| {
        user_error(
            e.to_string(),
            "this machine has no sync key yet: `memex sync setup URL` or `memex sync join URL --key FILE`",
        )
    })?;
    println!(
        "{}\n(key id {}; type these words into `memex sync join URL --key -` on another machine; \
         whoever sees them can read everything you sync)",
        key.to_words().as_str(),
        key.id()
    );
    Ok(())
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

fn key_path(ctx: &Ctx) -> PathBuf {
    crate::service::sync::key_path(&ctx.resolved.settings)
}

/// The target in effect: `[sync] url`, else the one setup or join recorded.
pub(super) fn configured_url(ctx: &Ctx) -> Result<Option<String>> {
    crate::service::sync::configured_url(&ctx.resolved.settings)
        .context("cannot read the recorded sync target")
}

/// Records the target in the data folder, readable by its owner only.
fn record_url(data_dir: &Path, url: &str) -> Result<()> {
    super::write_private(data_dir, TARGET_FILE, &format!("{url}\n"))
}

fn target_of(url: &str) -> Result<AnyTarget> {
    target(url).map_err(|e| {
        user_error(
            e.to_string(),
            "for example file:///srv/memex-sync or postgres://me@db.example/memex",
        )
    })
}

pub(super) fn setup(ctx: &Ctx, url: &str, key_out: Option<&Path>) -> Result<()> {
    let t = target_of(url)?;
    let rt = runtime()?;
    // A folder that does not exist yet is made by `prepare`.
    let new_folder = matches!(&t, AnyTarget::Folder(f) if !f.root().exists());
    if !new_folder && rt.block_on(t.archive())?.is_some() {
        return Err(user_error(
            format!("{} holds a Memex sync archive already", t.describe()),
            format!(
                "to sync this machine with it: memex sync join {} --key FILE (the key file made by \
                 `memex sync setup` on your first machine)",
                without_password(url)
            ),
        ));
    }
    let path = key_path(ctx);
    if path.exists() {
        return Err(user_error(
            format!("a sync key exists already at {}", path.display()),
            "this machine was set up or joined before; `memex sync status` says with what",
        ));
    }
    let key = SyncKey::generate();
    crate::store::private_dir(&ctx.resolved.settings.data_dir())
        .context("cannot make the data folder")?;
    if let Some(out) = key_out {
        key.write_file(out)?;
    }
    key.write_file(&path)?;
    let info = ArchiveInfo {
        archive: memex_sync::new_id(),
        key_id: key.id(),
        layout: LAYOUT,
    };
    rt.block_on(t.prepare(&info))?;
    if ctx.resolved.settings.sync.url.is_empty() {
        record_url(&ctx.resolved.settings.data_dir(), url)?;
    }
    let carry = key_out.map_or_else(|| path.display().to_string(), |p| p.display().to_string());
    println!(
        "prepared {} (archive {}, key id {})\n\
         the key is in {} (only its owner can read it); without it nothing synced can be read\n\
         now: memex sync   (sends this machine's archive)\n\
         on each other machine, with a copy of {carry}:\n  memex sync join {} --key FILE && memex sync\n\
         (or type the words `memex sync key` prints into `memex sync join … --key -`)",
        t.describe(),
        info.archive,
        info.key_id,
        path.display(),
        without_password(url)
    );
    Ok(())
}

pub(super) fn join(ctx: &Ctx, url: &str, key_from: &str) -> Result<()> {
    let key = if key_from == "-" {
        let mut text = SyncKey::buffer();
        std::io::stdin()
            .take(4096)
            .read_to_string(&mut text)
            .context("cannot read the key from stdin")?;
        SyncKey::from_text(&text)
    } else {
        SyncKey::read_file(Path::new(key_from))
    }
    .map_err(|e| {
        user_error(
            e.to_string(),
            "the key file `memex sync setup` wrote, or the 24 words `memex sync key` prints",
        )
    })?;
    let t = target_of(url)?;
    let rt = runtime()?;
    let Some(info) = rt.block_on(t.archive())? else {
        return Err(user_error(
            format!("{} holds no Memex sync archive yet", t.describe()),
            "run `memex sync setup URL` on your first machine",
        ));
    };
    if info.key_id != key.id() {
        return Err(user_error(
            format!(
                "this key (id {}) is not the one {} was set up with (id {})",
                key.id(),
                t.describe(),
                info.key_id
            ),
            "use the key file `memex sync setup` wrote on your first machine",
        ));
    }
    let path = key_path(ctx);
    match SyncKey::read_file(&path) {
        Ok(have) if have.id() == key.id() => {}
        Ok(_) => {
            return Err(user_error(
                format!("another sync key is at {}", path.display()),
                "this machine syncs with another archive; move that file away to join this one",
            ));
        }
        Err(_) if path.exists() => {
            return Err(user_error(
                format!("{} is not a usable sync key", path.display()),
                "move it away to join",
            ));
        }
        Err(_) => {
            crate::store::private_dir(&ctx.resolved.settings.data_dir())
                .context("cannot make the data folder")?;
            key.write_file(&path)?;
        }
    }
    if ctx.resolved.settings.sync.url.is_empty() {
        record_url(&ctx.resolved.settings.data_dir(), url)?;
    }
    println!(
        "joined {} (archive {}); run `memex sync` to send this machine's archive and take the others'",
        t.describe(),
        info.archive
    );
    Ok(())
}

/// `memex sync [--push | --pull]`.
pub(super) fn sync(ctx: &Ctx, push: bool, pull: bool, json: bool) -> Result<()> {
    let s = &ctx.resolved.settings;
    let Some(url) = configured_url(ctx)? else {
        return Err(user_error(
            "no sync target",
            "run `memex sync setup URL` on your first machine, `memex sync join URL --key FILE` on the others",
        ));
    };
    let key = SyncKey::read_file(&key_path(ctx)).map_err(|e| {
        user_error(
            e.to_string(),
            "the key `memex sync setup` made, taken with `memex sync join URL --key FILE`",
        )
    })?;
    let t = target_of(&url)?;
    let data_dir = s.data_dir();
    let (push, pull) = (push || !pull, pull || !push);
    // A running service syncs on its own; asked, it syncs now and says what it did.
    if let Some(addr) = crate::store::lock::serving_addr(&data_dir) {
        let v = super::post_service_within(
            ctx,
            &addr,
            "/api/sync",
            json!({"push": push, "pull": pull}),
            SYNC_TIMEOUT,
        )?;
        let done: Synced =
            serde_json::from_value(v).context("the service's answer cannot be read")?;
        return report(&done, json);
    }
    let (_lock, writer, handle) = write_access(
        &data_dir,
        "memex sync",
        "try again in a moment (another memex command holds the archive)",
    )?;
    let pool = crate::store::ReadPool::new(&data_dir);
    let opts = crate::service::sync::ingest_options(s);
    let rt = runtime()?;
    let agents = AdapterRegistry::new().names();
    let bar = progress_bar();
    let done = rt.block_on(async {
        let mut engine = Engine::open(t, key, &writer, agents, opts).await?;
        if let Some(b) = &bar {
            let b = b.clone();
            engine.on_step(std::sync::Arc::new(move |s| match s {
                Step::PushStarts { messages } => {
                    b.reset();
                    b.set_length(messages);
                    b.set_message("sending");
                }
                Step::Pushed { messages } => b.inc(messages),
                Step::PullStarts { batches } => {
                    b.reset();
                    b.set_length(batches);
                    b.set_message("taking batches");
                }
                Step::Pulled => b.inc(1),
            }));
        }
        let pushed = match push {
            true => Some(engine.push(&pool, &writer).await?),
            false => None,
        };
        let pulled = match pull {
            true => Some(engine.pull(&pool, &writer).await?),
            false => None,
        };
        Ok::<_, memex_sync::engine::SyncError>(Synced { pushed, pulled })
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    drop(writer);
    let _ = handle.join();
    if let Some(p) = &done.pulled {
        // What the other machines forgot goes from the vector index too.
        super::forget::remove_vectors(s, &p.gone)?;
    }
    report(&done, json)
}

/// A bar on stderr for a long push or pull, when stderr is a terminal.
fn progress_bar() -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(
            indicatif::ProgressStyle::with_template("{msg} {bar:30} {pos}/{len} ({eta})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    })
}

/// How long `memex sync` waits for a running service's sync (a first pull of a large archive
/// takes minutes).
const SYNC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3600);

/// `n` and its noun, singular or plural.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn report(done: &Synced, json: bool) -> Result<()> {
    let Synced { pushed, pulled } = done;
    if json {
        println!("{}", json!({"pushed": pushed, "pulled": pulled}));
        return Ok(());
    }
    if let Some(p) = &pushed {
        let forgets = match (p.forgets, p.summaries) {
            (0, 0) => String::new(),
            (f, 0) => format!(" and {f} forgotten sessions or messages"),
            (0, s) => format!(" and {s} summaries"),
            (f, s) => format!(", {s} summaries and {f} forgotten sessions or messages"),
        };
        if p.batches == 0 {
            println!(
                "nothing new to send; this machine's series ends at batch {}",
                p.seq
            );
        } else {
            println!(
                "sent {}{forgets} in {} ({} bytes sealed); this machine's series ends at batch {}",
                count(p.messages, "message", "messages"),
                count(p.batches, "batch", "batches"),
                p.bytes,
                p.seq
            );
        }
    }
    if let Some(p) = &pulled {
        let mut forgot = match p.forgotten {
            0 => String::new(),
            n => format!("; forgot {n} messages the other machines forgot"),
        };
        if p.summaries > 0 {
            forgot = format!("; {} summaries their models wrote{forgot}", p.summaries);
        }
        println!(
            "took {} ({} new) in {}{forgot}",
            count(p.messages, "message", "messages"),
            count(p.sessions, "session", "sessions"),
            count(p.batches, "batch", "batches")
        );
        for (host, seq, why) in &p.failed {
            eprintln!("memex: batch {seq} of host {host} was skipped: {why}");
        }
        for (host, why) in &p.unreadable {
            eprintln!("memex: the batches of host {host} could not be read: {why}");
        }
        if p.skipped > 0 {
            eprintln!(
                "memex: {} messages of agents this version does not read were left out",
                p.skipped
            );
        }
    }
    Ok(())
}

/// `memex sync status` and `memex hosts`: what the archive knows, and the target's heads
/// when it can be reached.
pub(super) fn status(ctx: &Ctx, json: bool, hosts_only: bool) -> Result<()> {
    let conn = reader(ctx)?;
    let state = archive::state(&conn)?;
    let url = configured_url(ctx)?;
    let heads = url.as_deref().and_then(|u| {
        let t = target(u).ok()?;
        runtime().ok()?.block_on(t.heads()).ok()
    });
    let lag = |host: &str, have: u64| {
        heads
            .as_ref()
            .and_then(|h| h.get(host))
            .map(|head| head.saturating_sub(have))
    };
    if json {
        let peers: Vec<_> = state
            .peers
            .iter()
            .map(|p| {
                json!({"host": p.host, "name": p.name, "applied_seq": p.applied_seq, "pulled_at": crate::store::read::iso(p.pulled_at),
                       "sessions": p.sessions, "behind": lag(&p.host, p.applied_seq)})
            })
            .collect();
        let this = json!({"host": state.host, "name": state.name, "pushed_seq": state.pushed_seq,
            "pushed_at": crate::store::read::iso(state.pushed_at), "unsent_messages": state.unsent,
            "unsent_forgets": state.unsent_forgets, "unsent_summaries": state.unsent_summaries});
        let v = if hosts_only {
            json!({"this": this, "others": peers})
        } else {
            json!({"target": url.as_deref().map(without_password), "archive": state.archive,
                   "key_id": state.key_id, "reachable": heads.is_some(), "this": this,
                   "others": peers, "failed": state.failures.iter().map(|(h, s, w, at)| json!({
                       "host": h, "seq": s, "why": w, "at": crate::store::read::iso(Some(*at))})).collect::<Vec<_>>()})
        };
        println!("{v}");
        return Ok(());
    }
    if !hosts_only {
        match &url {
            Some(u) => println!(
                "target: {}{}",
                without_password(u),
                if heads.is_some() {
                    ""
                } else {
                    " (not reachable now)"
                }
            ),
            None => println!(
                "target: none (`memex sync setup URL` or `memex sync join URL --key FILE`)"
            ),
        }
    }
    let when = |ms: Option<i64>| crate::store::read::iso(ms).unwrap_or_else(|| "never".into());
    let forgets = match (state.unsent_forgets, state.unsent_summaries) {
        (0, 0) => String::new(),
        (f, 0) => format!(" and {f} forgets"),
        (0, s) => format!(" and {s} summaries"),
        (f, s) => format!(", {f} forgets and {s} summaries"),
    };
    let who = match (&state.name, &state.host) {
        (_, None) => "(no sync yet)".to_owned(),
        (Some(n), Some(h)) => format!("{n} ({h})"),
        (None, Some(h)) => format!("({h})"),
    };
    println!(
        "this machine  {who}  sent through batch {} ({}), {} messages{forgets} waiting",
        state.pushed_seq,
        when(state.pushed_at),
        state.unsent
    );
    for p in &state.peers {
        let behind = match lag(&p.host, p.applied_seq) {
            Some(0) => "up to date".to_owned(),
            Some(n) => format!("{n} batches behind"),
            None => "target not reached".to_owned(),
        };
        println!(
            "{} ({})  took through batch {} ({}), {} sessions, {behind}",
            p.name.as_deref().unwrap_or("unnamed"),
            p.host,
            p.applied_seq,
            when(p.pulled_at),
            p.sessions
        );
    }
    if !hosts_only {
        for (host, seq, why, _) in &state.failures {
            println!("skipped: batch {seq} of {host}: {why} (tried again at each sync)");
        }
    }
    Ok(())
}
