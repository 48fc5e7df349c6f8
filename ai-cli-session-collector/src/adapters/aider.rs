//! Aider: `.aider.chat.history.md` in a project's git root (else the folder aider ran in),
//! FORMATS-MORE §12. There is no global store: the roots are the project folders Memex is
//! configured with, looked into only at [`HISTORY`] (`project_files`), on every platform.
//!
//! **What is read.** An appended Markdown log. Each run starts with `# aider chat started at
//! YYYY-MM-DD HH:MM:SS` (local time, no zone: read in this machine's zone). User input is a run
//! of `#### ` lines, each ended with two spaces (`#### <blank>` for empty input). Status output
//! is a `> ` line ended with two spaces; a multi-line status message has the `> ` on its first
//! line only and ends at the first line that ends with two spaces (a repo-map dump). Assistant
//! replies are the plain text between, written after a blank line; inside a reply only a line
//! after a blank line that ends with two spaces starts user input or status output, so a reply's
//! own `#### heading`, `> quote` or `>>>>>>> REPLACE` stays in the reply. The file is written
//! with `errors="ignore"`; bytes that are not UTF-8 are read with U+FFFD.
//!
//! **Ids.** The file has none. It is read whole as a document; a session is one header up to
//! the next, its id the header's time plus a digest of the project folder (`-2`, `-3` for a
//! header repeated within the second), and a message's id the header's time plus the block's
//! position within its session, so re-reading after an append changes nothing that was there
//! and only adds. An element is a header, a run of `####` lines, one status message or one
//! reply; its raw is its bytes with the blank lines before it, so every byte of the file is in
//! exactly one raw, except blank lines at the very end, which wait for the element after them
//! (an append never changes a raw that was read).
//!
//! **Times.** Only the header has one: every message of a run carries the run's start, and the
//! last run's `updated_at` is the file's modification time.
//!
//! **Prompts.** A run of `####` lines with the prefix and the two trailing spaces stripped,
//! except: slash commands (`/diff`, `/ask …`, `/web …`) and `!` shell commands; aider's echo of
//! a command's question (after `/ask q` a block ` q` with a leading space); the prompt `/help`
//! generates (`# Question: …`); the lint/test loop's `# Fix any errors below…`. Those are kept
//! as Meta.
//!
//! **Model, usage.** `> Model: …`, `> Models: …` or `> Main model: …` names the model (its first
//! word); `> Tokens: N sent, N received. Cost: …` (also `cache write`, `cache hit`, `k`/`M`
//! suffixes) is the usage of the reply before it, carried by that status message. No tool calls
//! are recorded: edits and commands appear only as reply text and status lines.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::adapter::{
    ConversationAdapter, Emit, Env, ParseError, blank, check_project_file, mtime_ms,
};
use crate::document::{Read, drive_document};
use crate::model::{
    Cursor, MessageKind, ParseOutput, ParsedMessage, Role, SessionInfo, TitleSource, Usage,
};
use crate::{SourceKind, reader, text};

const AGENT: &str = "aider";

/// The chat history aider writes into the project folder.
pub const HISTORY: &str = ".aider.chat.history.md";
const HEADER: &str = "# aider chat started at ";

pub struct AiderAdapter;

impl ConversationAdapter for AiderAdapter {
    fn name(&self) -> &'static str {
        AGENT
    }

    /// None: aider keeps its history in each project; the configured project folders are the
    /// roots.
    fn default_roots(&self, _env: &Env) -> Vec<PathBuf> {
        Vec::new()
    }

    fn is_transcript(&self, root: &Path, path: &Path) -> bool {
        path.parent() == Some(root) && path.file_name().is_some_and(|n| n == HISTORY)
    }

    fn source_kind(&self, _path: &Path) -> SourceKind {
        SourceKind::Document
    }

    fn project_files(&self) -> &'static [&'static str] {
        &[HISTORY]
    }

    fn parse(
        &self,
        root: &Path,
        path: &Path,
        cursor: &Cursor,
        _max_bytes: usize,
    ) -> Result<ParseOutput, ParseError> {
        check_project_file(root, path)?;
        let project = path
            .parent()
            .map(|p| p.to_string_lossy().into_owned())
            .filter(|p| !p.is_empty());
        let mtime = std::fs::metadata(path).ok().map(|m| mtime_ms(&m));
        let mut sessions = Vec::new();
        let (mut out, ()) = drive_document::<()>(path, cursor, |_, emit, bytes| {
            sessions = read_history(bytes, project.as_deref(), mtime, emit);
            Read::Whole
        })?;
        out.sessions = sessions;
        Ok(out)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Header,
    User,
    Tool,
    Reply,
}

/// A run of lines of one kind. Its raw bytes run from the end of the element before it (so the
/// blank lines before it are its own) to the end of its last non-blank line.
struct Element {
    kind: Kind,
    /// End of its last non-blank line.
    end: usize,
    lines: Vec<String>,
    /// A status message whose last line (ending with two spaces) has not come yet.
    open: bool,
}

fn header_stamp(line: &str) -> Option<chrono::NaiveDateTime> {
    let rest = line.strip_prefix(HEADER)?;
    chrono::NaiveDateTime::parse_from_str(rest.trim(), "%Y-%m-%d %H:%M:%S").ok()
}

fn is_user_line(l: &str) -> bool {
    l.strip_prefix("####")
        .is_some_and(|r| r.is_empty() || r.starts_with(' '))
}

fn is_tool_line(l: &str) -> bool {
    l == ">" || l.starts_with("> ")
}

/// Splits the file into elements (see the module doc for the rules): a header, a run of
/// `####` lines, one status message, or one reply.
fn elements(bytes: &[u8]) -> Vec<Element> {
    let mut els: Vec<Element> = Vec::new();
    let mut prev_blank = true;
    let mut offset = 0usize;
    for raw in bytes.split_inclusive(|&b| b == b'\n') {
        offset += raw.len();
        let end = offset;
        let decoded = String::from_utf8_lossy(raw);
        let l = decoded.trim_end_matches(['\n', '\r']);
        let is_blank = l.trim().is_empty();
        let new = |kind: Kind, open: bool| Element {
            kind,
            end,
            lines: vec![l.to_owned()],
            open,
        };
        let cur_kind = els.last().map(|e| (e.kind, e.open));
        let in_reply = cur_kind.is_some_and(|(k, _)| k == Kind::Reply);
        let open = cur_kind.is_some_and(|(_, o)| o);
        // Inside a reply, only a line after a blank line that ends with two spaces starts
        // user input or status output.
        let may_start = !in_reply || (prev_blank && l.ends_with("  "));
        if header_stamp(l).is_some() {
            els.push(new(Kind::Header, false));
        } else if is_blank {
            // Paragraph breaks of a reply or an unfinished status message.
            if let Some(e) = els.last_mut().filter(|e| e.kind == Kind::Reply || e.open) {
                e.lines.push(String::new());
            }
        } else if open && !(is_user_line(l) && l.ends_with("  ") && prev_blank) {
            if let Some(e) = els.last_mut() {
                e.lines.push(l.to_owned());
                e.end = end;
                e.open = !l.ends_with("  ");
            }
        } else if is_user_line(l) && may_start {
            match els.last_mut() {
                Some(e) if e.kind == Kind::User && !prev_blank => {
                    e.lines.push(l.to_owned());
                    e.end = end;
                }
                _ => els.push(new(Kind::User, false)),
            }
        } else if is_tool_line(l) && may_start {
            els.push(new(Kind::Tool, !l.ends_with("  ")));
        } else {
            match els.last_mut() {
                Some(e) if e.kind == Kind::Reply => {
                    e.lines.push(l.to_owned());
                    e.end = end;
                }
                // A line right after a status line continues it.
                Some(e) if e.kind == Kind::Tool && !prev_blank => {
                    e.lines.push(l.to_owned());
                    e.end = end;
                }
                _ => els.push(new(Kind::Reply, false)),
            }
        }
        prev_blank = is_blank;
    }
    els
}

/// `####` lines as typed: prefix and the two trailing spaces removed, `<blank>` empty.
fn user_text(lines: &[String]) -> String {
    lines
        .iter()
        .map(|l| {
            let t = l.strip_prefix("####").unwrap_or(l);
            let t = t.strip_prefix(' ').unwrap_or(t);
            let t = t.strip_suffix("  ").unwrap_or(t);
            if t == "<blank>" { "" } else { t }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Status lines without their `> ` and trailing two spaces.
fn tool_text(lines: &[String]) -> String {
    lines
        .iter()
        .map(|l| {
            let t = l
                .strip_prefix("> ")
                .or_else(|| l.strip_prefix('>'))
                .unwrap_or(l);
            t.strip_suffix("  ").unwrap_or(t).trim_end()
        })
        .collect::<Vec<_>>()
        .join("\n")
        .trim_end()
        .to_owned()
}

/// The model a `Model: x with …` / `Models: x with …` / `Main model: x with …` line names.
fn model_line(line: &str) -> Option<String> {
    let rest = ["Main model: ", "Models: ", "Model: "]
        .iter()
        .find_map(|p| line.strip_prefix(p))?;
    let name = rest.split(" with ").next().unwrap_or(rest);
    let name = name.split([',', ' ']).next().unwrap_or(name).trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// `… Cost: $0.02 request, $0.02 session.`: the request's price in dollars (older Aider says
/// `message`).
fn cost_line(line: &str) -> Option<f64> {
    let rest = line.split("Cost: $").nth(1)?;
    let (num, tail) = rest.split_once(' ')?;
    if !(tail.starts_with("request") || tail.starts_with("message")) {
        return None;
    }
    num.parse::<f64>()
        .ok()
        .filter(|c| c.is_finite() && (0.0..1e6).contains(c))
}

/// `Tokens: 5,244 sent, 604 received. Cost: …` (also `1.2k cache write, 3.4k cache hit`).
fn tokens_line(line: &str) -> Option<Usage> {
    let rest = line.strip_prefix("Tokens: ")?;
    let rest = rest
        .split(". Cost")
        .next()
        .unwrap_or(rest)
        .trim_end_matches('.');
    let mut u = Usage::default();
    let mut any = false;
    for part in rest.split(", ") {
        let Some((num, label)) = part.trim().split_once(' ') else {
            continue;
        };
        let num = num.replace(',', "");
        let (digits, scale) = match num.as_bytes().last() {
            Some(b'k') => (&num[..num.len() - 1], 1e3),
            Some(b'M') => (&num[..num.len() - 1], 1e6),
            _ => (num.as_str(), 1.0),
        };
        let Ok(n) = digits.parse::<f64>() else {
            continue;
        };
        let n = (n * scale).round().max(0.0) as u64;
        let field = match label.trim() {
            "sent" => &mut u.input_tokens,
            "received" => &mut u.output_tokens,
            "cache write" => &mut u.cache_creation_tokens,
            "cache hit" => &mut u.cache_read_tokens,
            _ => continue,
        };
        *field = field.saturating_add(n);
        any = true;
    }
    any.then_some(u)
}

/// A header's local time in epoch ms (read in this machine's zone; UTC when the local time
/// does not exist, in a DST gap).
fn local_ms(t: chrono::NaiveDateTime) -> i64 {
    use chrono::TimeZone;
    chrono::Local
        .from_local_datetime(&t)
        .earliest()
        .map_or_else(|| t.and_utc().timestamp_millis(), |d| d.timestamp_millis())
}

/// What kind of user block a `####` run is.
fn classify(t: &str, last_command: Option<&(String, String)>) -> MessageKind {
    let trimmed = t.trim();
    if trimmed.is_empty() || t.starts_with('/') || t.starts_with('!') {
        return MessageKind::Meta;
    }
    if let Some((cmd, args)) = last_command {
        // `/ask q` → ` q`, `/code q`, `/architect q` alike.
        if t.starts_with(' ') && trimmed == args.trim() {
            return MessageKind::Meta;
        }
        if cmd == "/help" && trimmed.starts_with("# Question:") {
            return MessageKind::Meta;
        }
    }
    if trimmed.starts_with("# Fix any errors below") {
        return MessageKind::Meta;
    }
    // `--watch-files`: the prompt aider writes itself from `AI!` comments in the code.
    if trimmed.starts_with("I've written your instructions in comments")
        || trimmed.starts_with("Find the \"AI\" comments below")
    {
        return MessageKind::Meta;
    }
    // A confirmation answered at aider's own question: `Add file to the chat? (Y)es/(N)o … [Yes]: all`.
    if is_confirmation(trimmed) {
        return MessageKind::Meta;
    }
    MessageKind::UserPrompt
}

/// An answer to one of aider's yes/no questions, as aider logs it: the question, its
/// `(Y)es/(N)o…` choices, the default in brackets, then the answer.
fn is_confirmation(t: &str) -> bool {
    !t.contains('\n')
        && t.contains("(Y)es/(N)o")
        && t.rsplit_once("]: ")
            .or_else(|| t.strip_suffix("]:").map(|a| (a, "")))
            .is_some_and(|(q, a)| {
                let default = q.rsplit_once('[').map(|(_, d)| d.to_ascii_lowercase());
                matches!(default.as_deref(), Some("yes" | "no" | "y" | "n"))
                    && matches!(
                        a.trim().to_ascii_lowercase().as_str(),
                        "" | "y"
                            | "yes"
                            | "n"
                            | "no"
                            | "a"
                            | "all"
                            | "s"
                            | "skip"
                            | "skip all"
                            | "d"
                            | "don't ask again"
                    )
            })
}

fn read_history(
    bytes: &[u8],
    project: Option<&str>,
    mtime: Option<i64>,
    emit: &mut Emit,
) -> Vec<SessionInfo> {
    let els = elements(bytes);
    let digest = Sha256::digest(project.unwrap_or("").as_bytes());
    let tag = reader::hex(&digest[..4]);
    let mut sessions: Vec<SessionInfo> = Vec::new();
    let mut repeats: HashMap<String, u32> = HashMap::new();

    struct Current {
        sid: String,
        stamp: String,
        ts: Option<i64>,
        k: u32,
        prompt: u32,
        model: Option<String>,
        last_command: Option<(String, String)>,
    }
    let mut cur: Option<Current> = None;

    let mut from = 0usize;
    for e in &els {
        let raw = &bytes[from..e.end];
        from = e.end;
        if e.kind == Kind::Header {
            let t = header_stamp(&e.lines[0]);
            let stamp = t.map_or_else(String::new, |t| t.format("%Y-%m-%dT%H:%M:%S").to_string());
            let n = repeats.entry(stamp.clone()).or_insert(0);
            *n += 1;
            let compact = t.map_or_else(String::new, |t| t.format("%Y%m%dT%H%M%S").to_string());
            let sid = if *n == 1 {
                format!("{compact}-{tag}")
            } else {
                format!("{compact}-{tag}-{n}")
            };
            let stamp = if *n == 1 {
                stamp
            } else {
                format!("{stamp}-{n}")
            };
            let ts = t.map(local_ms);
            sessions.push(SessionInfo {
                session_id: sid.clone(),
                project_path: project.map(str::to_owned),
                started_at: ts,
                updated_at: ts,
                ..Default::default()
            });
            cur = Some(Current {
                sid,
                stamp,
                ts,
                k: 0,
                prompt: 0,
                model: None,
                last_command: None,
            });
        }
        let c = cur.get_or_insert_with(|| {
            // Text before the first header (an editor's mode line, a cut file).
            let sid = format!("preamble-{tag}");
            sessions.push(SessionInfo {
                session_id: sid.clone(),
                project_path: project.map(str::to_owned),
                ..Default::default()
            });
            Current {
                sid,
                stamp: "preamble".into(),
                ts: None,
                k: 0,
                prompt: 0,
                model: None,
                last_command: None,
            }
        });
        let Some(info) = sessions.last_mut() else {
            continue;
        };
        let mid = format!("{}#{}", c.stamp, c.k);
        c.k += 1;
        let (role, kind, body) = match e.kind {
            Kind::Header => (Role::System, MessageKind::Meta, e.lines[0].clone()),
            Kind::User => {
                let t = user_text(&e.lines);
                let kind = if c.stamp == "preamble" {
                    MessageKind::Meta
                } else {
                    classify(&t, c.last_command.as_ref())
                };
                c.last_command = if t.starts_with('/') {
                    let (cmd, args) = t.split_once(char::is_whitespace).unwrap_or((&t, ""));
                    Some((cmd.to_owned(), args.to_owned()))
                } else {
                    None
                };
                if kind == MessageKind::UserPrompt {
                    c.prompt += 1;
                    if info.title.is_none() {
                        info.title = Some((TitleSource::FirstPrompt, text::prompt_title(&t)));
                    }
                }
                (Role::User, kind, t)
            }
            Kind::Tool => (Role::System, MessageKind::Meta, tool_text(&e.lines)),
            Kind::Reply => {
                let t = e.lines.join("\n").trim().to_owned();
                let kind = if c.stamp == "preamble" {
                    MessageKind::Meta
                } else {
                    MessageKind::AssistantText
                };
                (Role::Assistant, kind, t)
            }
        };
        let mut usage: Option<Usage> = None;
        let mut cost: Option<f64> = None;
        if e.kind == Kind::Tool {
            for line in body.lines() {
                if let Some(m) = model_line(line) {
                    c.model = Some(m.clone());
                    if info.model.is_none() {
                        info.model = Some(m);
                    }
                }
                if let Some(c) = cost_line(line) {
                    *cost.get_or_insert(0.0) += c;
                }
                if let Some(u) = tokens_line(line) {
                    let sum = usage.get_or_insert_with(Usage::default);
                    sum.input_tokens = sum.input_tokens.saturating_add(u.input_tokens);
                    sum.output_tokens = sum.output_tokens.saturating_add(u.output_tokens);
                    sum.cache_read_tokens =
                        sum.cache_read_tokens.saturating_add(u.cache_read_tokens);
                    sum.cache_creation_tokens = sum
                        .cache_creation_tokens
                        .saturating_add(u.cache_creation_tokens);
                }
            }
        }
        let mut m: ParsedMessage = blank(AGENT, &c.sid, mid.clone(), role, kind);
        m.prompt_number = c.prompt;
        m.timestamp = c.ts;
        m.cwd = project.map(str::to_owned);
        m.model.clone_from(&c.model);
        m.text = body;
        m.usage = usage;
        m.cost_usd = usage.and(cost);
        m.usage_key = usage.map(|_| mid);
        m.raw = Some(raw.to_vec());
        emit.push(m);
    }
    // The last session was written to until the file's last change.
    if let (Some(last), Some(mt)) = (sessions.last_mut(), mtime) {
        last.updated_at = Some(last.updated_at.map_or(mt, |u| u.max(mt)));
    }
    sessions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_lines() {
        let u =
            tokens_line("Tokens: 5,244 sent, 604 received. Cost: $0.02 request, $0.02 session.")
                .unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (5244, 604));
        let u = tokens_line(
            "Tokens: 2.5k sent, 1.2k cache write, 3.4k cache hit, 120 received. Cost: $0.01 message, $0.02 session.",
        )
        .unwrap();
        assert_eq!(
            (
                u.input_tokens,
                u.cache_creation_tokens,
                u.cache_read_tokens,
                u.output_tokens
            ),
            (2500, 1200, 3400, 120)
        );
        assert_eq!(tokens_line("Tokens: many"), None);
    }

    #[test]
    fn model_lines() {
        assert_eq!(
            model_line("Models: claude-3-5-sonnet-20240620 with diff edit format, weak model claude-3-haiku-20240307").as_deref(),
            Some("claude-3-5-sonnet-20240620")
        );
        assert_eq!(
            model_line("Model: gpt-4o-mini with whole edit format").as_deref(),
            Some("gpt-4o-mini")
        );
        assert_eq!(
            model_line(
                "Main model: anthropic/claude-sonnet-4 with diff edit format, infinite output"
            )
            .as_deref(),
            Some("anthropic/claude-sonnet-4")
        );
    }

    #[test]
    fn replies_keep_their_own_markup() {
        let s = "# aider chat started at 2024-08-05 19:33:02\n\n#### fix it  \n\nSure.\n\n#### Heading\n> quote\n>>>>>>> REPLACE\n\n> Tokens: 1 sent, 2 received.  \n\n#### /ask q  \n\n####  q  \n\nA.\n";
        let els = elements(s.as_bytes());
        let kinds: Vec<Kind> = els.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                Kind::Header,
                Kind::User,
                Kind::Reply,
                Kind::Tool,
                Kind::User,
                Kind::User,
                Kind::Reply
            ]
        );
        assert!(els[2].lines.iter().any(|l| l == ">>>>>>> REPLACE"));
    }

    #[test]
    fn what_aider_wrote_itself_is_not_a_prompt() {
        for t in [
            "Add file to the chat? (Y)es/(N)o/(A)ll/(S)kip all/(D)on't ask again [Yes]: all",
            "Create new file? (Y)es/(N)o [Yes]: n",
            "Run shell command? (Y)es/(N)o/(D)on't ask again [Yes]:",
            "I've written your instructions in comments in the code and marked them with \"ai\"\n\
             You can see the \"AI\" comments shown below (marked with █).",
            "/ask\nFind the \"AI\" comments below (marked with █) in the code files",
        ] {
            assert_eq!(classify(t, None), MessageKind::Meta, "{t}");
        }
        for t in [
            "use FileSource to paginate the diff",
            "should (Y)es/(N)o questions default to yes? [like git]: why not",
        ] {
            assert_eq!(classify(t, None), MessageKind::UserPrompt, "{t}");
        }
    }

    #[test]
    fn multi_line_status_ends_at_two_spaces() {
        let s = "# aider chat started at 2024-08-05 19:33:02\n\n> Repo-map: x  \n> Here are summaries\nfile.py\n\nother.py  \n\n#### go  \n\n";
        let els = elements(s.as_bytes());
        let kinds: Vec<Kind> = els.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [Kind::Header, Kind::Tool, Kind::Tool, Kind::User]);
        assert_eq!(
            tool_text(&els[2].lines),
            "Here are summaries\nfile.py\n\nother.py"
        );
        // The blank line at the end belongs to no element yet.
        assert_eq!(els[3].end, s.len() - 1);
    }
}
