//! A session as Markdown that reads well on GitHub: the talks as headings, what the agent said
//! as text, tool calls and thinking in collapsible `<details>` blocks whose contents are fenced
//! (so nothing in a transcript is taken for Markdown or HTML there).

use std::fmt::Write as _;

use super::html::thousands;
use super::view::{Entry, SessionView, Talk, Tool, one_line};

/// The fence that encloses `text`: one backtick more than the longest run inside it.
fn fence(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    "`".repeat((longest + 1).max(3))
}

/// `text` in a fenced block.
fn fenced(out: &mut String, lang: &str, text: &str) {
    let f = fence(text);
    let _ = writeln!(out, "{f}{lang}\n{}\n{f}\n", text.trim_end_matches('\n'));
}

/// Text for a line of Markdown outside any block: HTML and Markdown that would be taken for
/// markup are escaped.
pub(super) fn inline(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '#' | '|' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// Text inside the HTML of a `<details>` summary.
fn html_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Prose the agent wrote, kept as Markdown (agents answer in Markdown; code stays code), except
/// what a Markdown renderer would let through as markup of its own: raw HTML (a tag, a comment,
/// an HTML block) is shown as text, and a link to a script (`javascript:`, `vbscript:`,
/// `data:`) is shown as the text it is. The text is parsed as GitHub parses it (CommonMark with
/// tables, strikethrough and task lists), so an escaped backtick, a fence indented four spaces
/// or a fence whose info string holds a backtick is what the renderer sees, not what it looks
/// like. A fenced block the text leaves open (an answer cut short) is closed, so it cannot
/// swallow the rest of the file.
fn prose(s: &str) -> String {
    let mut text = s.replace("\r\n", "\n");
    if !text.ends_with('\n') {
        text.push('\n');
    }
    // Each pass makes the first `<` (or `[`) of every piece of markup text; what that reveals
    // (an HTML block read again as a paragraph) is found by the next pass.
    for _ in 0..16 {
        let spots = markup_in(&text);
        if spots.is_empty() {
            close_open_fence(&mut text);
            return text;
        }
        text = defuse(&text, &spots);
    }
    // Not reached on any text seen so far: every `<` becomes text, fences included.
    let mut out = text.replace('<', "&lt;");
    close_open_fence(&mut out);
    out
}

/// GitHub's flavour of CommonMark, as far as it decides what is markup.
fn gfm() -> pulldown_cmark::Options {
    use pulldown_cmark::Options;
    Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS
}

/// Where `text` holds markup a renderer would pass on: the byte offset of the `<` of each raw
/// HTML piece, and of the `[` (or `<`) that opens a link or image to a script.
fn markup_in(text: &str) -> Vec<usize> {
    use pulldown_cmark::{Event, Parser, Tag};
    let mut spots = Vec::new();
    for (ev, range) in Parser::new_ext(text, gfm()).into_offset_iter() {
        let piece = &text[range.clone()];
        let at = match ev {
            Event::Html(_) | Event::InlineHtml(_) => piece.find('<'),
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. })
                if runs_script(&dest_url) =>
            {
                piece.find(['[', '<'])
            }
            _ => None,
        };
        if let Some(i) = at {
            spots.push(range.start + i);
        }
    }
    spots.sort_unstable();
    spots.dedup();
    spots
}

/// Whether a link's target runs code when followed.
fn runs_script(url: &str) -> bool {
    let u: String = url
        .trim_start()
        .chars()
        .filter(|c| !c.is_whitespace() && !c.is_control())
        .take(16)
        .collect::<String>()
        .to_ascii_lowercase();
    ["javascript:", "vbscript:", "data:"]
        .iter()
        .any(|p| u.starts_with(p))
}

/// `text` with the `<` at each spot written `&lt;` and the `[` written `\[`.
fn defuse(text: &str, spots: &[usize]) -> String {
    let mut out = String::with_capacity(text.len() + spots.len() * 4);
    let mut last = 0;
    for &i in spots {
        out.push_str(&text[last..i]);
        match text.as_bytes()[i] {
            b'<' => out.push_str("&lt;"),
            b'[' => out.push_str("\\["),
            _ => out.push(text.as_bytes()[i] as char),
        }
        last = i + 1;
    }
    out.push_str(&text[last..]);
    out
}

/// Closes a fenced block that runs to the end of `text` without its closing fence (a cut
/// answer): left open, it would take in everything written after it.
fn close_open_fence(text: &mut String) {
    use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag};
    let mut depth = 0usize;
    let mut open: Option<String> = None;
    for (ev, range) in Parser::new_ext(text, gfm()).into_offset_iter() {
        match ev {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(_))) if depth == 0 => {
                let block = &text[range.clone()];
                let first = block.trim_start_matches(' ');
                let c = first.chars().next().unwrap_or('`');
                let fence: String = first.chars().take_while(|x| *x == c).collect();
                let last = block.trim_end().lines().last().unwrap_or("").trim();
                let closed = block.lines().count() > 1
                    && last.len() >= fence.len()
                    && last.chars().all(|x| x == c);
                open = (!closed && range.end >= text.trim_end().len()).then_some(fence);
            }
            Event::Start(_) => depth += 1,
            Event::End(_) => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if let Some(f) = open {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&f);
        text.push('\n');
    }
}

/// A value on one line: line breaks and other control characters become spaces.
pub(super) fn flat(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

fn details(out: &mut String, summary: &str, body: impl FnOnce(&mut String)) {
    let _ = writeln!(out, "<details><summary>{summary}</summary>\n");
    body(out);
    out.push_str("</details>\n\n");
}

fn tool(out: &mut String, t: &Tool) {
    let target = if t.target.is_empty() {
        String::new()
    } else {
        format!(" <code>{}</code>", html_text(&flat(&t.target)))
    };
    let summary = format!("{}{target} — {}", html_text(&flat(&t.name)), t.status());
    details(out, &summary, |out| {
        if !t.input.is_empty() {
            fenced(out, "json", &t.input);
        }
        if let Some(o) = &t.output {
            fenced(out, "", o);
        }
    });
}

fn entries(out: &mut String, list: &[Entry]) {
    for e in list {
        match e {
            Entry::Text { text, .. } => {
                let _ = writeln!(out, "{}\n", prose(text).trim_end());
            }
            Entry::User { text } => {
                for line in text.trim_end().lines() {
                    let _ = writeln!(out, "> {}", inline(line));
                }
                out.push('\n');
            }
            Entry::Thinking { text } => details(out, "thinking", |out| fenced(out, "", text)),
            Entry::Tool(t) => tool(out, t),
            Entry::Compaction { text } => {
                details(out, "context compacted here", |out| fenced(out, "", text))
            }
            Entry::Meta { text } if !text.trim().is_empty() => {
                let _ = writeln!(out, "<sub>{}</sub>\n", inline(&one_line(text, 200)));
            }
            Entry::Meta { .. } => {}
            Entry::SubAgent {
                agent,
                entries: inner,
            } => {
                details(
                    out,
                    &format!("sub-agent <code>{}</code>", html_text(&flat(agent))),
                    |out| entries(out, inner),
                );
            }
        }
    }
}

fn talk(out: &mut String, t: &Talk) {
    let rewound = if t.active { "" } else { " (rewound)" };
    let _ = writeln!(
        out,
        "## {}. {}{rewound}\n",
        t.number,
        inline(&one_line(
            &ai_cli_session_collector::text::typed_text(&t.prompt),
            100
        ))
    );
    let mut facts = Vec::new();
    if let Some(time) = &t.time {
        facts.push(time.clone());
    }
    if let Some(u) = &t.tokens {
        facts.push(format!(
            "{} in / {} out tokens",
            thousands(u.input_tokens + u.cache_read_tokens + u.cache_creation_tokens),
            thousands(u.output_tokens)
        ));
    }
    if !facts.is_empty() {
        let _ = writeln!(out, "<sub>{}</sub>\n", facts.join(" · "));
    }
    if let Some(s) = &t.summary {
        let _ = writeln!(out, "*Summary:* {}\n", inline(s));
    }
    let _ = writeln!(out, "**Prompt**\n");
    fenced(out, "", &t.prompt);
    entries(out, &t.entries);
}

/// The whole session as one Markdown document.
pub fn render(v: &SessionView) -> String {
    let mut out = String::new();
    let s = &v.session;
    let _ = writeln!(out, "# {}\n", inline(&one_line(&v.title(), 160)));
    // A value in a code span on one line, unless it holds a backtick (then escaped text).
    let code = |v: &str| {
        let v = flat(v);
        if v.contains('`') || v.trim().is_empty() {
            inline(&v)
        } else {
            format!("`{v}`")
        }
    };
    let mut facts = vec![
        format!("agent {}", code(&s.agent)),
        format!("session {}", code(&s.session_id)),
    ];
    if let Some(p) = &s.project {
        facts.push(format!("project {}", code(p)));
    }
    facts.extend(v.span_and_size());
    for f in facts {
        let _ = writeln!(out, "- {f}");
    }
    out.push('\n');
    if let Some(sum) = &v.summary {
        let _ = writeln!(out, "**Session summary.** {}\n", inline(&sum.summary));
        for p in &sum.key_points {
            let _ = writeln!(out, "- {}", inline(p));
        }
        if !sum.key_points.is_empty() {
            out.push('\n');
        }
    }
    if !v.preamble.is_empty() {
        details(&mut out, "before the first prompt", |out| {
            entries(out, &v.preamble)
        });
    }
    for t in &v.talks {
        talk(&mut out, t);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_outgrow_the_backticks_inside() {
        assert_eq!(fence("plain"), "```");
        assert_eq!(fence("a ```` b"), "`````");
        let mut out = String::new();
        fenced(&mut out, "", "```\ninside\n```");
        assert!(
            out.starts_with("````\n") && out.ends_with("````\n\n"),
            "{out}"
        );
    }

    #[test]
    fn markup_in_a_line_is_text() {
        assert_eq!(
            inline("<script>alert(1)</script> **bold** [x](y)"),
            "&lt;script&gt;alert(1)&lt;/script&gt; \\*\\*bold\\*\\* \\[x\\](y)"
        );
        assert_eq!(prose("a <img src=x> b"), "a &lt;img src=x> b\n");
        // Code stays code; a fence left open is closed.
        assert_eq!(prose("use `Vec<u8>` here"), "use `Vec<u8>` here\n");
        assert_eq!(
            prose("```rust\nlet v: Vec<u8> = x;"),
            "```rust\nlet v: Vec<u8> = x;\n```\n"
        );
        assert_eq!(prose("``a ` <b> ``<c>"), "``a ` <b> ``&lt;c>\n");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(-1000), "-1,000");
    }
}
