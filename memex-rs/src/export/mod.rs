//! Sessions out of the archive, to read elsewhere: Markdown (GitHub-friendly), one
//! self-contained HTML file that looks like the web page, or JSON (the unified messages, as
//! `GET /api/sessions/{id}` gives them). Used by `memex export`, by
//! `GET /api/sessions/{id}/export` and by the web page's download button. What is stored was
//! redacted on the way in, so an export holds nothing the archive does not.

pub mod html;
pub mod markdown;
pub mod view;

use rusqlite::Connection;
use serde_json::{Value, json};

use crate::layer::UnknownName;
use crate::store::read::{self, SessionRow};
pub use view::SessionView;

/// What an export is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Html,
    Json,
}

impl Format {
    pub const NAMES: &'static [&'static str] = &["md", "html", "json"];

    pub fn parse(s: &str) -> Result<Format, UnknownName> {
        match s {
            "md" | "markdown" => Ok(Format::Markdown),
            "html" => Ok(Format::Html),
            "json" => Ok(Format::Json),
            other => Err(UnknownName::new(other, Format::NAMES.iter().copied())),
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            Format::Markdown => "md",
            Format::Html => "html",
            Format::Json => "json",
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Markdown => "text/markdown; charset=utf-8",
            Format::Html => "text/html; charset=utf-8",
            Format::Json => "application/json",
        }
    }
}

/// A session's view: messages, usage (whole and per talk) and compact layers.
pub fn view(conn: &Connection, s: &SessionRow) -> rusqlite::Result<SessionView> {
    view_of_talks(conn, s, None)
}

/// The view of talks `from..=to` only (`None`: all), with the session's whole usage and layers:
/// what a page of a long session shows.
pub fn view_of_talks(
    conn: &Connection,
    s: &SessionRow,
    talks: Option<(i64, i64)>,
) -> rusqlite::Result<SessionView> {
    let messages = match talks {
        None => read::session_messages(conn, s.pk)?,
        Some((from, to)) => read::session_messages_of_talks(conn, s.pk, from, to)?,
    };
    let usage = read::session_usage(conn, s.pk)?;
    let per_talk = read::talk_usage(conn, s.pk)?;
    let layers = crate::compact::queue::summary_view(conn, s.pk, &s.session_id)?;
    Ok(SessionView::new(
        s.clone(),
        usage,
        messages,
        per_talk,
        &layers,
    ))
}

/// The unified messages of a session, as the API gives them.
pub fn session_json(conn: &Connection, s: &SessionRow) -> rusqlite::Result<Value> {
    let messages = read::session_messages(conn, s.pk)?;
    let usage = read::session_usage(conn, s.pk)?;
    let mut sv = serde_json::to_value(s).unwrap_or(Value::Null);
    sv["usage"] = serde_json::to_value(&usage).unwrap_or(Value::Null);
    Ok(json!({"session": sv, "messages": messages}))
}

/// One session in `format`.
pub fn render(conn: &Connection, s: &SessionRow, format: Format) -> rusqlite::Result<String> {
    Ok(match format {
        Format::Json => {
            serde_json::to_string_pretty(&session_json(conn, s)?).unwrap_or_default() + "\n"
        }
        Format::Markdown => markdown::render(&view(conn, s)?),
        Format::Html => html::render(&view(conn, s)?),
    })
}

/// The file name of a session's export: agent, date and id, with nothing that could leave the
/// folder it is written to.
pub fn file_name(s: &SessionRow, format: Format) -> String {
    let safe = |t: &str| -> String {
        t.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .take(80)
            .collect()
    };
    let day = s
        .started_at
        .as_deref()
        .and_then(|t| t.get(..10))
        .unwrap_or("undated");
    format!(
        "{}-{}-{}.{}",
        safe(day),
        safe(&s.agent),
        safe(&s.session_id),
        format.extension()
    )
}

/// The index of many exported sessions: a list linking each file.
pub fn index(sessions: &[(SessionRow, String)], format: Format) -> String {
    match format {
        Format::Json => {
            let list: Vec<Value> = sessions
                .iter()
                .map(|(s, f)| json!({"file": f, "session": s}))
                .collect();
            serde_json::to_string_pretty(&json!({"sessions": list})).unwrap_or_default() + "\n"
        }
        Format::Markdown => {
            let mut out = String::from(
                "# Sessions\n\n| when | agent | project | session |\n|---|---|---|---|\n",
            );
            // Every cell is text from the archive: on one line, its markup escaped.
            let cell = |v: &str| markdown::inline(&markdown::flat(v));
            for (s, f) in sessions {
                let title = s.title.clone().unwrap_or_else(|| s.session_id.clone());
                out.push_str(&format!(
                    "| {} | {} | {} | [{}]({}) |\n",
                    cell(s.started_at.as_deref().unwrap_or("")),
                    cell(&s.agent),
                    cell(s.project.as_deref().unwrap_or("")),
                    cell(&view::one_line(&title, 80)),
                    f
                ));
            }
            out
        }
        Format::Html => html::index(sessions),
    }
}
