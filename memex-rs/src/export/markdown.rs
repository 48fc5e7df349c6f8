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
fn inline(s: &str) -> String {
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
/// raw HTML, which is shown as text: `<` outside code spans and fenced blocks is escaped. A
/// fenced block the text leaves open (an answer cut short) is closed, so it cannot swallow the
/// rest of the file.
fn prose(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut open: Option<String> = None;
    for line in s.lines() {
        let t = line.trim_start();
        let first = t.chars().next().unwrap_or(' ');
        let run: String = t.chars().take_while(|c| *c == first).collect();
        let is_fence = (first == '`' || first == '~') && run.chars().count() >= 3;
        match (&open, is_fence) {
            (None, true) => open = Some(run),
            (Some(f), true) if run.len() >= f.len() && t.trim_end() == run => open = None,
            _ => {}
        }
        if open.is_some() || is_fence {
            out.push_str(line);
        } else {
            out.push_str(&outside_code(line));
        }
        out.push('\n');
    }
    if let Some(f) = open {
        out.push_str(&f);
        out.push('\n');
    }
    out
}

/// One line of prose with `<` escaped except inside code spans.
fn outside_code(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '`' {
            let n = chars[i..].iter().take_while(|c| **c == '`').count();
            // The span ends at the next run of exactly as many backticks.
            let mut j = i + n;
            let mut end = None;
            while j < chars.len() {
                if chars[j] == '`' {
                    let m = chars[j..].iter().take_while(|c| **c == '`').count();
                    if m == n {
                        end = Some(j + m);
                        break;
                    }
                    j += m;
                } else {
                    j += 1;
                }
            }
            let stop = end.unwrap_or(i + n);
            out.extend(&chars[i..stop]);
            i = stop;
            continue;
        }
        if chars[i] == '<' {
            out.push_str("&lt;");
        } else {
            out.push(chars[i]);
        }
        i += 1;
    }
    out
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
        format!(" <code>{}</code>", html_text(&t.target))
    };
    let summary = format!("{}{target} — {}", html_text(&t.name), t.status());
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
                    &format!("sub-agent <code>{}</code>", prose(agent)),
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
        inline(&one_line(&t.prompt, 100))
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
    // A value in a code span, unless it holds a backtick (then escaped text).
    let code = |v: &str| {
        if v.contains('`') {
            inline(v)
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
        let _ = writeln!(out, "**Session summary.** {}\n", inline(&sum.text));
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
