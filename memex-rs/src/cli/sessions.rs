//! `memex sessions list` and `memex sessions show` (messages, raw records or the summary).

use std::io::Write;

use ai_cli_session_collector::AdapterRegistry;
use anyhow::Result;
use serde_json::json;

use super::{Ctx, SessionsCommand, UserError, check_agent, filter, reader, short_time};
use crate::compact::heuristic::one_line;
use crate::store::read;

pub(super) fn sessions(ctx: &Ctx, cmd: SessionsCommand) -> Result<()> {
    let conn = reader(ctx)?;
    let mut out = std::io::stdout().lock();
    match cmd {
        SessionsCommand::List {
            agent,
            project,
            host,
            limit,
            json,
        } => {
            check_agent(&AdapterRegistry::new(), &agent)?;
            let f = filter(agent, project, None, host, None, None)?;
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
                let host = r
                    .host
                    .as_deref()
                    .map(|h| format!("  @{h}"))
                    .unwrap_or_default();
                writeln!(
                    out,
                    "{:<16}  {:<6} {:>5} msgs {:>3} prompts  {}  {title}{host}",
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
                    writeln!(out, "{}", serde_json::to_string(&v)?)?;
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

fn print_summary(out: &mut impl Write, v: &crate::compact::queue::SummaryView) -> Result<()> {
    match &v.session_summary {
        Some(s) => {
            writeln!(out, "# session {}\n", v.session_id)?;
            let l3 = &s.summary;
            writeln!(out, "{}\n", l3.summary)?;
            for k in &l3.key_points {
                writeln!(out, "- {k}")?;
            }
            writeln!(out, "\ntechnologies: {}", l3.technologies.join(", "))?;
            writeln!(out, "files: {}", l3.files_involved.join(", "))?;
            let w = &s.written_by;
            writeln!(
                out,
                "written by {} ({}), {} in / {} out tokens\n",
                w.provider, w.prompt_version, w.tokens_input, w.tokens_output
            )?;
        }
        None => writeln!(out, "# session {} (no session summary yet)\n", v.session_id)?,
    }
    for t in v.talks.iter().map(|t| &t.talk) {
        let p = t.prompt_number;
        writeln!(out, "## [{p}] {}", t.user_request)?;
        writeln!(out, "{}", t.summary)?;
        for o in v.observations.iter().filter(|o| o.prompt_number == p) {
            let o = &o.observation;
            writeln!(out, "  · {} [{}] {}", o.title, o.kind, o.subtitle)?;
        }
        writeln!(out)?;
    }
    Ok(())
}
