//! Text extraction and the prompt-classification rules shared by the adapters.

use serde_json::Value;

/// At most `n` characters of `s`.
pub fn truncate_chars(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => s[..i].to_owned(),
        None => s.to_owned(),
    }
}

/// The first non-blank line, trimmed, at most 200 characters: a title.
pub fn first_line(s: &str) -> String {
    truncate_chars(
        s.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or(""),
        200,
    )
}

/// The readable text of a content value: a string, or a list of blocks (Claude `text`,
/// `image`, `document`, `tool_reference`, nested `tool_result`; Codex `input_text` /
/// `output_text` / `input_image`).
pub fn blocks_text(v: &Value) -> String {
    let mut out = String::new();
    push_blocks(v, &mut out);
    out
}

/// [`blocks_text`] of a list of blocks, without building a list value.
pub fn blocks_text_of(blocks: &[Value]) -> String {
    let mut out = String::new();
    for b in blocks {
        push_blocks(b, &mut out);
    }
    out
}

fn push_blocks(v: &Value, out: &mut String) {
    let push = |s: &str, out: &mut String| {
        if s.is_empty() {
            return;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(s);
    };
    match v {
        Value::String(s) => push(s, out),
        Value::Array(a) => {
            for b in a {
                push_blocks(b, out);
            }
        }
        Value::Object(o) => match o.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" | "input_text" | "output_text" | "summary_text" | "reasoning_text" => {
                if let Some(t) = o.get("text").and_then(Value::as_str) {
                    push(t, out);
                }
            }
            "image" | "input_image" => push("[image]", out),
            "document" => push("[document]", out),
            "tool_reference" => {
                if let Some(t) = o.get("tool_name").and_then(Value::as_str) {
                    push(t, out);
                }
            }
            "tool_result" => {
                if let Some(c) = o.get("content") {
                    push_blocks(c, out);
                }
            }
            _ => {
                if let Some(t) = o.get("text").and_then(Value::as_str) {
                    push(t, out);
                }
            }
        },
        _ => {}
    }
}

/// Searchable text for a tool call: the tool's name, then every string in its input.
pub fn tool_call_text(name: &str, input: &Value) -> String {
    let mut out = name.to_owned();
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) if !s.is_empty() => {
                out.push('\n');
                out.push_str(s);
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            // Key order, whatever order the map keeps (serde_json's `preserve_order` may be
            // switched on by any crate in the build): the text must not depend on it.
            Value::Object(o) => {
                let mut keys: Vec<&String> = o.keys().collect();
                keys.sort();
                keys.into_iter().for_each(|k| walk(&o[k], out));
            }
            _ => {}
        }
    }
    walk(input, &mut out);
    out
}

/// Removes every `<tag>…</tag>` element of the given tags, anywhere in `s`: tag by tag, the
/// leftmost `<tag` that has a `</tag>` after it is removed through that `</tag>`, until none is
/// left (the text joined by a removal may form a new `<tag`).
fn strip_elements(s: &str, tags: &[&str]) -> String {
    let mut s = s.to_owned();
    for tag in tags {
        let open = format!("<{tag}");
        if s.contains(&open) {
            s = strip_element(&s, &open, &format!("</{tag}>"));
        }
    }
    s
}

/// One tag of [`strip_elements`], in one pass: a text can be megabytes and hold thousands of
/// elements, so nothing is searched or moved twice. `open` and `close` are ASCII.
fn strip_element(s: &str, open: &str, close: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    loop {
        // `out` holds no `<tag`; the leftmost one either starts in its last bytes and ends in
        // `rest` (formed by the last removal), or lies in `rest`.
        let joined = (out.len().saturating_sub(open.len() - 1)..out.len()).find(|&k| {
            out.is_char_boundary(k)
                && open.starts_with(&out[k..])
                && rest.starts_with(&open[out.len() - k..])
        });
        if let Some(k) = joined {
            let open_end = open.len() - (out.len() - k);
            let Some(j) = rest[open_end..].find(close) else {
                break;
            };
            out.truncate(k);
            rest = &rest[open_end + j + close.len()..];
            continue;
        }
        let Some(i) = rest.find(open) else { break };
        let Some(j) = rest[i..].find(close) else {
            break;
        };
        out.push_str(&rest[..i]);
        rest = &rest[i + j + close.len()..];
    }
    out.push_str(rest);
    out
}

/// A title from a prompt: its first typed line (see [`typed_text`]).
pub fn prompt_title(s: &str) -> String {
    let typed = typed_text(s);
    let line = typed.lines().map(str::trim).find(|l| !l.is_empty());
    truncate_chars(line.unwrap_or_else(|| s.trim()), 200)
}

/// Elements other programs add around or after what a person typed: an editor's selection and
/// open file, a hook's output, a harness reminder, a timestamp, a notification.
const INJECTED_ELEMENTS: &[&str] = &[
    "system-reminder",
    "ide_opened_file",
    "ide_selection",
    "user-prompt-submit-hook",
    "current_datetime",
    "system_notification",
];

/// What a person typed in a prompt, without what programs added to it: the elements of
/// [`INJECTED_ELEMENTS`], Cursor's `<user_query>` wrapper (its content is the typed text),
/// Gemini CLI's expansion of `@file` references, Codex's IDE context before "My request for
/// Codex:", and attachment placeholders on lines of their own. A prompt that holds nothing
/// else is returned trimmed, as it is.
pub fn typed_text(s: &str) -> String {
    if let Some(cmd) = command_template(s) {
        return cmd.to_owned();
    }
    let mut t: &str = s;
    // Codex IDE / Desktop context: everything before the request is context.
    const CODEX_REQUEST: &str = "## My request for Codex:";
    if (t.trim_start().starts_with("# Context from my IDE setup:")
        || t.trim_start().starts_with("# Files mentioned by the user:"))
        && let Some(i) = t.find(CODEX_REQUEST)
    {
        t = &t[i + CODEX_REQUEST.len()..];
    }
    let mut out = strip_elements(t, INJECTED_ELEMENTS);
    if let (Some(i), Some(j)) = (out.find("<user_query>"), out.rfind("</user_query>"))
        && i + "<user_query>".len() <= j
    {
        out = out[i + "<user_query>".len()..j].to_owned();
    }
    // Gemini CLI and Qwen Code append the files a prompt names with `@`.
    out = strip_file_expansion(&out);
    let kept: Vec<&str> = out
        .lines()
        .filter(|l| !matches!(l.trim(), "[image]" | "[document]" | "[attachment]"))
        .collect();
    let typed = kept.join("\n").trim().to_owned();
    if typed.is_empty() {
        s.trim().to_owned()
    } else {
        typed
    }
}

/// The first lines of prompts that agents write themselves when a person types one of their
/// built-in slash commands, with the command: OpenCode stores the expanded template of
/// `/review` and `/init` as a plain user message, Codex CLI the text of `/init`.
const COMMAND_TEMPLATES: &[(&str, &str)] = &[
    (
        "You are a code reviewer. Your job is to review code changes and provide actionable feedback.",
        "/review",
    ),
    (
        "Please analyze this codebase and create an AGENTS.md file containing:",
        "/init",
    ),
    (
        "Generate a file named AGENTS.md that serves as a contributor guide for this repository.",
        "/init",
    ),
];

/// The slash command whose built-in template `s` is, if it is one.
pub fn command_template(s: &str) -> Option<&'static str> {
    let t = s.trim_start();
    COMMAND_TEMPLATES
        .iter()
        .find(|(opener, _)| t.starts_with(opener))
        .map(|(_, cmd)| *cmd)
}

/// Whether a user message holds nothing a person typed: only the elements other programs add
/// (an editor's context, a reminder, a notification) and attachment placeholders.
pub fn only_injected(s: &str) -> bool {
    let out = strip_elements(s, INJECTED_ELEMENTS);
    out.lines()
        .map(str::trim)
        .all(|l| l.is_empty() || matches!(l, "[image]" | "[document]" | "[attachment]"))
        && !s.trim().is_empty()
}

/// A bare slash command (`/mode`, `/model`): one word after a slash, nothing else. Agents that
/// keep such inputs as user messages ran them locally; they ask the model nothing.
pub fn is_bare_command(s: &str) -> bool {
    let t = s.trim();
    t.strip_prefix('/').is_some_and(|w| {
        !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'))
    })
}

/// A prompt without the contents of the files it names with `@`, which Gemini CLI and Qwen
/// Code append between `--- Content from referenced files ---` and `--- End of content ---`.
pub fn strip_file_expansion(s: &str) -> String {
    const START: &str = "--- Content from referenced files ---";
    const END: &str = "--- End of content ---";
    if !s.contains(START) {
        return s.to_owned();
    }
    let mut out = s.to_owned();
    while let Some(i) = out.find(START) {
        let end = out[i..].find(END).map_or(out.len(), |j| i + j + END.len());
        out.replace_range(i..end, "");
    }
    out.trim().to_owned()
}

/// The text inside the first `<tag>…</tag>` of `s`.
pub fn element<'a>(s: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let i = s.find(&open)? + open.len();
    let j = s[i..].find(&format!("</{tag}>"))?;
    Some(&s[i..i + j])
}

/// The `<cwd>` of a Codex `<environment_context>` block.
pub fn environment_cwd(s: &str) -> Option<String> {
    let i = s.find("<cwd>")? + 5;
    let j = s[i..].find("</cwd>")?;
    Some(s[i..i + j].trim().to_owned()).filter(|c| !c.is_empty())
}

/// Wrappers the Claude harness attaches to a real prompt (FORMATS §1.8 rule 5).
const CLAUDE_WRAPPERS: &[&str] = &[
    "system-reminder",
    "ide_opened_file",
    "ide_selection",
    "user-prompt-submit-hook",
];

/// Whether a Claude user content list has something the human wrote: text left after removing
/// harness wrappers, or an image / document.
pub fn has_content_beyond_wrappers(content: &[Value]) -> bool {
    content
        .iter()
        .any(|b| match b.get("type").and_then(Value::as_str) {
            Some("text") => b
                .get("text")
                .and_then(Value::as_str)
                .is_some_and(|t| !strip_elements(t, CLAUDE_WRAPPERS).trim().is_empty()),
            Some("image") | Some("document") => true,
            _ => false,
        })
}

/// Local-command envelopes (FORMATS §1.8 rule 6).
const CLAUDE_ENVELOPES: &[&str] = &[
    "command-name",
    "command-message",
    "command-args",
    "command-contents",
    "local-command-stdout",
    "local-command-stderr",
    "local-command-caveat",
    "bash-input",
    "bash-stdout",
    "bash-stderr",
];

/// Whether the *whole* text is a slash command, command output, bash-mode echo or an
/// interruption marker. Texts that merely quote such tags are not envelopes.
pub fn is_claude_envelope(text: &str) -> bool {
    let t = text.trim();
    if t.starts_with("[Request interrupted by user") && t.ends_with(']') {
        return true;
    }
    if !t.starts_with('<') {
        return false;
    }
    let stripped = strip_elements(t, CLAUDE_ENVELOPES);
    let rest = strip_elements(&stripped, CLAUDE_WRAPPERS);
    rest.trim().is_empty()
}

/// Text the Claude harness sends as a `user` line on its own: a background task's
/// `<task-notification>`, a Stop hook's feedback.
pub fn is_claude_notice(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with("<task-notification>") || t.starts_with("Stop hook feedback:")
}

/// Text that Codex injects as a `user` message without the human typing it (FORMATS §2.10).
pub fn is_codex_injected(text: &str) -> bool {
    let t = text.trim_start();
    const MARKERS: &[&str] = &[
        "<environment_context>",
        "# AGENTS.md instructions for",
        "<user_instructions>",
        "<user_shell_command>",
        "<turn_aborted>",
        "<skill>",
        "<plugins>",
        "<INSTRUCTIONS>",
        "<permissions instructions>",
        "<collaboration_mode>",
        "<apps_instructions>",
        "<personality_spec>",
    ];
    MARKERS.iter().any(|m| t.starts_with(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_text_leaves_out_what_programs_added() {
        let claude = "<ide_opened_file>The user opened the file /a/b.mdx in the IDE. This may or \
                      may not be related to the current task.</ide_opened_file>I keep getting \
                      build errors – how can I disable that?";
        assert_eq!(
            typed_text(claude),
            "I keep getting build errors – how can I disable that?"
        );
        let sel = "<ide_selection>The user selected the lines 508 to 508 from /x.rs:\nfoo\n\
                   </ide_selection>\nwhy does this panic?\n<user-prompt-submit-hook>ctx\
                   </user-prompt-submit-hook>";
        assert_eq!(typed_text(sel), "why does this panic?");
        assert_eq!(
            typed_text("<user_query>\nGenerate a file with all the HBO shows\n</user_query>"),
            "Generate a file with all the HBO shows"
        );
        let gemini = "add another hello bob console log to @index.ts\n--- Content from referenced \
                      files ---\nContent from @index.ts:\nconsole.log('x');\n--- End of content ---";
        assert_eq!(
            typed_text(gemini),
            "add another hello bob console log to @index.ts"
        );
        let codex = "# Context from my IDE setup:\n\n## Active file: src/a.ts\n\n## Open tabs:\n\
                     - a.ts\n\n## My request for Codex:\nfix the date parsing\n";
        assert_eq!(typed_text(codex), "fix the date parsing");
        assert_eq!(
            typed_text("<current_datetime>2026-10-09T19:22:04</current_datetime>Please use tools"),
            "Please use tools"
        );
        assert_eq!(
            typed_text("[image]\n[Image #1] Can you add margin-bottom?"),
            "[Image #1] Can you add margin-bottom?"
        );
        // Nothing typed: the text stays, so nothing is lost.
        assert_eq!(typed_text("  [image]  "), "[image]");
        // A prompt that merely mentions a tag keeps it.
        assert_eq!(
            typed_text("what does <ide_selection> mean?"),
            "what does <ide_selection> mean?"
        );
    }

    #[test]
    fn what_is_not_typed_is_told_apart() {
        // A built-in command's template reads as the command the person typed.
        let review = "You are a code reviewer. Your job is to review code changes and provide \
                      actionable feedback.\n\n---\n\nInput: \n\n---\n## Determining What to Review";
        assert_eq!(typed_text(review), "/review");
        assert_eq!(prompt_title(review), "/review");
        assert_eq!(command_template("please review my code changes"), None);
        // Only what programs add: no prompt.
        assert!(only_injected(
            "<system_notification>Background task finished</system_notification>\n[image]"
        ));
        assert!(!only_injected(
            "<system_notification>x</system_notification> fix it"
        ));
        assert!(!only_injected("   "));
        // Bare commands, not paths or sentences.
        for c in ["/mode", "/model", "/plan:on", "  /thinking  "] {
            assert!(is_bare_command(c), "{c}");
        }
        for c in ["/etc/hosts", "/ask why?", "mode", "/", "/fix the bug"] {
            assert!(!is_bare_command(c), "{c}");
        }
        assert!(is_claude_notice(
            "<task-notification>\n<task-id>b1</task-id></task-notification>"
        ));
        assert!(is_claude_notice("Stop hook feedback:\n- tests fail"));
        assert!(!is_claude_notice(
            "why does the Stop hook feedback: line appear?"
        ));
    }

    #[test]
    fn envelopes_must_be_whole() {
        assert!(is_claude_envelope(
            "<command-name>/model</command-name>\n  <command-message>model</command-message>\n  <command-args>opus</command-args>"
        ));
        assert!(is_claude_envelope(
            "<local-command-stdout></local-command-stdout>"
        ));
        assert!(is_claude_envelope(
            "[Request interrupted by user for tool use]"
        ));
        assert!(!is_claude_envelope(
            "why does <command-name>/x</command-name> show up in the log?"
        ));
        assert!(!is_claude_envelope(
            "<bash-input>ls</bash-input> and explain it"
        ));
    }

    #[test]
    fn wrappers_alone_are_not_content() {
        let only =
            serde_json::json!([{"type":"text","text":"<ide_opened_file>a.ts</ide_opened_file>"}]);
        assert!(!has_content_beyond_wrappers(only.as_array().unwrap()));
        let img = serde_json::json!([{"type":"image","source":{}}]);
        assert!(has_content_beyond_wrappers(img.as_array().unwrap()));
    }

    /// The removal as first written (quadratic: each removal rescanned and moved the text).
    fn strip_elements_reference(s: &str, tags: &[&str]) -> String {
        let mut s = s.to_owned();
        for tag in tags {
            let open = format!("<{tag}");
            let close = format!("</{tag}>");
            while let Some(i) = s.find(&open) {
                match s[i..].find(&close) {
                    Some(j) => s.replace_range(i..i + j + close.len(), ""),
                    None => break,
                }
            }
        }
        s
    }

    #[test]
    fn stripping_matches_the_reference_on_joins_and_nesting() {
        let tags = &["ab", "a"];
        for s in [
            "<a</a>b>x</ab>y",
            "<<ab></ab>ab>1</ab>2",
            "<a<a></a>></a>",
            "认<a>认</a>认<ab",
            "</ab><ab>",
            "<ab>x</ab><ab>y",
        ] {
            assert_eq!(
                strip_elements(s, tags),
                strip_elements_reference(s, tags),
                "{s}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn stripping_matches_the_reference(
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    "<", ">", "/", "a", "b", "ab", "<a", "<ab", "</a>", "</ab>", "<a>", "<ab>",
                    "x", "认", " ",
                ]),
                0..40,
            )
        ) {
            let s = parts.concat();
            let tags = &["ab", "a", "b"];
            proptest::prop_assert_eq!(strip_elements(&s, tags), strip_elements_reference(&s, tags));
        }
    }

    #[test]
    fn stripping_many_elements_is_fast() {
        let s = "<ide_selection>x</ide_selection>".repeat(200_000) + "keep";
        let t = std::time::Instant::now();
        assert_eq!(strip_elements(&s, CLAUDE_WRAPPERS), "keep");
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate_chars("认证失败", 2), "认证");
        assert_eq!(first_line("\n  hello \nworld"), "hello");
    }
}
