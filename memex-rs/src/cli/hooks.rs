//! The Claude Code hook commands (`memex inject`, `memex hook stop`) and `memex hooks`
//! (install, uninstall, status of Memex's hooks in settings.json).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};

use super::{Cli, Command, Ctx, HookCommand, HooksArgs, HooksCommand, UserError, load, user_error};
use crate::store;

/// `memex inject` and `memex hook stop`, run by Claude Code: whatever happens (a bad config, a
/// stopped service, a panic) the exit code is 0 and stdout holds only what the agent should
/// get. With `--explain`, stderr says what was done and why.
pub fn run_hook(cli: &Cli) {
    use crate::inject::{self, client};
    let explain = match &cli.command {
        Command::Inject { explain, .. } => *explain,
        Command::Hook {
            command: HookCommand::Stop { explain, .. },
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
        let host = |agent: &str| inject::Host::parse(agent).unwrap_or(inject::Host::Claude);
        match &cli.command {
            Command::Inject { mode, agent, .. } => {
                let mode = mode.parse().unwrap_or(inject::Mode::Smart);
                client::inject(
                    settings,
                    mode,
                    host(agent),
                    stdin,
                    client::headless(&ctx.env.vars),
                    explain,
                )
            }
            Command::Hook {
                command: HookCommand::Stop { agent, .. },
            } => client::stop(settings, host(agent), stdin),
            _ => client::Outcome::nothing("not a hook command"),
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

/// OpenCode's plugin: its hooks run `memex inject` and `memex hook stop` (`__MEMEX__` stands for
/// the binary's path).
const OPENCODE_PLUGIN: &str = include_str!("../../assets/opencode-plugin.js");

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
        let k = crate::inject::hooks::Kind::parse(m).map_err(|e| {
            user_error(
                format!("--modes: {e}"),
                "for example --modes full,smart,stop",
            )
        })?;
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

pub(super) fn hooks(
    ctx: &Ctx,
    globals: &(Option<PathBuf>, Option<PathBuf>),
    cmd: HooksCommand,
) -> Result<()> {
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
        HooksCommand::Plugin { agent: _ } => {
            // The plugin runs this binary by its full path: OpenCode's PATH may not have it.
            let exe = std::env::current_exe().context("cannot find the memex binary")?;
            let exe = exe.canonicalize().unwrap_or(exe);
            let quoted = serde_json::to_string(&exe.display().to_string())?;
            print!("{}", OPENCODE_PLUGIN.replace("__MEMEX__", &quoted));
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
