//! `memex agents`: every agent Memex knows, whether it is installed here, where Memex looks for
//! it, and what the archive holds of it — the first thing a new user runs.

use std::io::Write;
use std::path::PathBuf;

use ai_cli_session_collector::{AdapterRegistry, SourceKind};
use anyhow::Result;
use serde::Serialize;

use super::{Ctx, reader, short_time};
use crate::store::read::{self, AgentArchive, FileProblem};

/// One agent as `memex agents --json` reports it.
#[derive(Debug, Serialize)]
struct AgentView {
    agent: &'static str,
    enabled: bool,
    /// Some folder of its exists on this machine.
    installed: bool,
    roots: Vec<RootView>,
    #[serde(flatten)]
    archive: AgentArchive,
    problems: Vec<FileProblem>,
}

#[derive(Debug, Serialize)]
struct RootView {
    path: PathBuf,
    exists: bool,
}

/// How many of an agent's recorded problems are listed.
const PROBLEMS_SHOWN: u32 = 5;

pub(super) fn agents(ctx: &Ctx, json: bool) -> Result<()> {
    let s = &ctx.resolved.settings;
    let registry = AdapterRegistry::new();
    let conn = reader(ctx)?;
    let projects = read::known_projects(&conn)?;
    let roots = s.roots_with_projects(&registry, &ctx.env, &projects);
    let mut archive = read::agents(&conn)?;
    let mut views = Vec::new();
    for a in registry.all() {
        let settings = s.agent(a.name());
        // Project folders are listed only where the agent's file is.
        let mine: Vec<RootView> = roots
            .iter()
            .filter(|(n, _)| n == a.name())
            .filter(|(_, r)| {
                a.project_files().is_empty() || a.project_files().iter().any(|f| r.join(f).exists())
            })
            .map(|(_, r)| RootView {
                path: r.clone(),
                exists: r.is_dir(),
            })
            .collect();
        let mut problems = read::agent_problems(&conn, a.name(), PROBLEMS_SHOWN)?;
        // A database that cannot be opened now is a problem the archive has not recorded.
        for r in mine.iter().filter(|r| r.exists) {
            for f in a.discover(&r.path) {
                if a.source_kind(&f) == SourceKind::Database
                    && let Err(e) = ai_cli_session_collector::sqlite::Db::open(&f)
                {
                    problems.insert(
                        0,
                        FileProblem {
                            file: f.display().to_string(),
                            line: 0,
                            reason: error_chain(&e),
                            kept: false,
                        },
                    );
                }
            }
        }
        views.push(AgentView {
            agent: a.name(),
            enabled: settings.enabled,
            installed: mine.iter().any(|r| r.exists),
            roots: mine,
            archive: archive.remove(a.name()).unwrap_or_default(),
            problems,
        });
    }
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string(&views)?)?;
        return Ok(());
    }
    let width = views.iter().map(|v| v.agent.len()).max().unwrap_or(6);
    for v in &views {
        let state = match (v.enabled, v.installed) {
            (false, _) => "disabled",
            (true, true) => "installed",
            (true, false) => "not found",
        };
        let a = &v.archive;
        writeln!(
            out,
            "{:<width$}  {state:<9}  {} sessions, {} messages, {} prompts, {} files, last {}{}",
            v.agent,
            a.sessions,
            a.messages,
            a.prompts,
            a.files,
            short_time(a.last_activity.as_deref()),
            match a.synced_sessions {
                0 => String::new(),
                n => format!(
                    "; {n} more sessions ({} messages) from your other machines",
                    a.synced_messages
                ),
            },
        )?;
        // Where it is: the folders that exist; for an agent not found, how many were tried.
        let present: Vec<&RootView> = v.roots.iter().filter(|r| r.exists).collect();
        for r in &present {
            writeln!(out, "{:<width$}    {}", "", r.path.display())?;
        }
        if present.is_empty() && !v.roots.is_empty() {
            writeln!(
                out,
                "{:<width$}    looked in {} folder{} (`memex agents --json` lists them)",
                "",
                v.roots.len(),
                if v.roots.len() == 1 { "" } else { "s" }
            )?;
        }
        if a.bad_records + a.records_with_issues > 0 || !v.problems.is_empty() {
            writeln!(
                out,
                "{:<width$}    problems: {} records skipped, {} stored with issues",
                "", a.bad_records, a.records_with_issues
            )?;
            for p in &v.problems {
                writeln!(
                    out,
                    "{:<width$}      {}:{}: {}",
                    "", p.file, p.line, p.reason
                )?;
            }
        }
    }
    Ok(())
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}
