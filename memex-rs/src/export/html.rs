//! A session as HTML: the same page the web interface shows, as one self-contained file for
//! export (styles inline, no script: `<details>` opens tool calls without one). Every text of a
//! transcript goes through the templates' escaping; nothing of it is ever markup.

use askama::Template;

use super::view::{Entry, SessionView, Talk, one_line};

/// The stylesheet of the web pages and the exported files.
pub const CSS: &str = include_str!("../../assets/web/memex.css");

/// One thing shown in a talk, flattened for the templates.
pub struct Block {
    /// `text`, `user`, `thinking`, `tool`, `compaction` or `meta`.
    pub kind: &'static str,
    pub text: String,
    /// A tool's name, or the model that wrote a text.
    pub label: String,
    pub target: String,
    pub status: &'static str,
    pub output: Option<String>,
}

/// Consecutive blocks of the main agent, or of one sub-agent (`agent`).
pub struct Group {
    pub agent: Option<String>,
    pub blocks: Vec<Block>,
}

/// One labelled part of a talk summary.
pub struct Part {
    pub label: String,
    pub text: String,
}

/// A talk, ready for the templates.
pub struct TalkHtml {
    pub number: i64,
    pub heading: String,
    pub prompt: String,
    pub time: String,
    pub active: bool,
    pub summary: Option<String>,
    /// The summary by its labels (Asked, Did, Found, Result, Open), or one "Summary" part.
    pub summary_parts: Vec<Part>,
    pub tokens: String,
    pub groups: Vec<Group>,
    pub observations: Vec<String>,
}

/// The session, ready for the templates.
pub struct SessionHtml {
    pub id: String,
    pub title: String,
    pub facts: Vec<String>,
    pub summary: Option<String>,
    pub key_points: Vec<String>,
    pub files: Vec<String>,
    pub preamble: Vec<Group>,
    pub talks: Vec<TalkHtml>,
}

/// A text (a tool's input or output, an answer, thinking) longer than `max` bytes, cut there (at a character boundary) with a note of
/// what was left out.
fn capped(text: &str, max: Option<usize>) -> String {
    match max {
        Some(max) if text.len() > max => {
            let mut end = max;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            format!(
                "{}\n… {} more bytes: download the session to read it all",
                &text[..end],
                thousands((text.len() - end) as i64)
            )
        }
        _ => text.to_owned(),
    }
}

fn block(e: &Entry, max_output: Option<usize>) -> Option<Block> {
    let b = |kind, text: &str| Block {
        kind,
        text: capped(text, max_output),
        label: String::new(),
        target: String::new(),
        status: "",
        output: None,
    };
    Some(match e {
        Entry::Text { text, model } => Block {
            label: model.clone().unwrap_or_default(),
            ..b("text", text)
        },
        Entry::User { text } => b("user", text),
        Entry::Thinking { text } => b("thinking", text),
        Entry::Compaction { text } => b("compaction", text),
        Entry::Meta { text } if text.trim().is_empty() => return None,
        Entry::Meta { text } => b("meta", &one_line(text, 200)),
        Entry::Tool(t) => Block {
            kind: "tool",
            text: capped(&t.input, max_output),
            label: t.name.clone(),
            target: t.target.clone(),
            status: t.status(),
            output: t.output.as_deref().map(|o| capped(o, max_output)),
        },
        Entry::SubAgent { .. } => return None,
    })
}

fn groups(entries: &[Entry], max_output: Option<usize>) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    for e in entries {
        match e {
            Entry::SubAgent { agent, entries } => out.push(Group {
                agent: Some(agent.clone()),
                blocks: entries
                    .iter()
                    .filter_map(|e| block(e, max_output))
                    .collect(),
            }),
            other => {
                let Some(b) = block(other, max_output) else {
                    continue;
                };
                match out.last_mut() {
                    Some(g) if g.agent.is_none() => g.blocks.push(b),
                    _ => out.push(Group {
                        agent: None,
                        blocks: vec![b],
                    }),
                }
            }
        }
    }
    out
}

/// `1,234,567`.
pub fn thousands(n: i64) -> String {
    let s = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

fn talk(v: &SessionView, t: &Talk, max_output: Option<usize>) -> TalkHtml {
    TalkHtml {
        number: t.number,
        // What the person typed, not what an editor added around it.
        heading: one_line(&ai_cli_session_collector::text::typed_text(&t.prompt), 100),
        prompt: capped(&t.prompt, max_output),
        time: t.time.clone().unwrap_or_default(),
        active: t.active,
        summary: t.summary.clone(),
        summary_parts: t
            .summary
            .as_deref()
            .map(crate::compact::heuristic::talk::split_labels)
            .unwrap_or_default()
            .into_iter()
            .map(|(label, text)| Part { label, text })
            .collect(),
        tokens: t
            .tokens
            .as_ref()
            .map(|u| {
                format!(
                    "{} in / {} out tokens",
                    thousands(u.input_tokens + u.cache_read_tokens + u.cache_creation_tokens),
                    thousands(u.output_tokens)
                )
            })
            .unwrap_or_default(),
        groups: groups(&t.entries, max_output),
        observations: v
            .observations_of(t.number)
            .map(|o| {
                if o.subtitle.is_empty() {
                    o.title.clone()
                } else {
                    format!("{} — {}", o.title, o.subtitle)
                }
            })
            .collect(),
    }
}

impl SessionHtml {
    /// The whole session, every output whole (an export).
    pub fn new(v: &SessionView) -> SessionHtml {
        SessionHtml::with_outputs_cut(v, None)
    }

    /// The session with tool outputs longer than `max_output` bytes cut (a web page: a
    /// multi-megabyte log would make it slow to open; the download has them whole).
    pub fn with_outputs_cut(v: &SessionView, max_output: Option<usize>) -> SessionHtml {
        let s = &v.session;
        let mut facts = vec![s.agent.clone()];
        if let Some(p) = &s.project {
            facts.push(p.clone());
        }
        if let Some(b) = &s.git_branch {
            facts.push(format!("branch {b}"));
        }
        if let Some(m) = &s.model {
            facts.push(m.clone());
        }
        facts.extend(v.span_and_size());
        SessionHtml {
            id: s.session_id.clone(),
            title: one_line(&v.title(), 160),
            facts,
            summary: v.summary.as_ref().map(|x| x.summary.clone()),
            key_points: v
                .summary
                .as_ref()
                .map(|x| x.key_points.clone())
                .unwrap_or_default(),
            files: v
                .summary
                .as_ref()
                .map(|x| x.files_involved.clone())
                .unwrap_or_default(),
            preamble: groups(&v.preamble, max_output),
            talks: v.talks.iter().map(|t| talk(v, t, max_output)).collect(),
        }
    }
}

/// The exported file: the session page, standalone.
#[derive(Template)]
#[template(path = "export.html")]
struct ExportPage<'a> {
    s: &'a SessionHtml,
    css: &'a str,
}

/// The whole session as one self-contained HTML file.
pub fn render(v: &SessionView) -> String {
    let s = SessionHtml::new(v);
    ExportPage { s: &s, css: CSS }
        .render()
        .unwrap_or_else(|e| format!("<!doctype html><p>cannot render: {e}</p>"))
}

/// One line of the index of exported sessions.
pub struct IndexRow {
    pub file: String,
    pub when: String,
    pub agent: String,
    pub project: String,
    pub title: String,
}

#[derive(Template)]
#[template(path = "export_index.html")]
struct IndexPage<'a> {
    rows: &'a [IndexRow],
    css: &'a str,
}

/// The index page of many exported sessions, linking each file.
pub fn index(sessions: &[(crate::store::read::SessionRow, String)]) -> String {
    let rows: Vec<IndexRow> = sessions
        .iter()
        .map(|(s, f)| IndexRow {
            file: f.clone(),
            when: s.started_at.clone().unwrap_or_default(),
            agent: s.agent.clone(),
            project: s.project.clone().unwrap_or_default(),
            title: one_line(s.title.as_deref().unwrap_or(&s.session_id), 100),
        })
        .collect();
    IndexPage {
        rows: &rows,
        css: CSS,
    }
    .render()
    .unwrap_or_else(|e| format!("<!doctype html><p>cannot render: {e}</p>"))
}
