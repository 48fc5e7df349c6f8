//! What was asked: the typed part of a prompt (no editor context, reminders or `@file`
//! expansions), pasted logs and code named rather than copied, on one line and cut where a
//! sentence or clause ends.

use ai_cli_session_collector::text::typed_text;

/// The request of a prompt as a person would write it down, at most `max` characters.
pub fn request(prompt: &str, max: usize) -> String {
    let typed = typed_text(prompt);
    // A line continued with a backslash (how some terminals send a newline) is one line.
    let typed = typed.replace("\\\n", "\n");
    let (prose, pasted) = split_pasted(&typed);
    let prose = without_markup(&prose);
    let mut s = prose;
    if let Some(p) = pasted {
        if s.is_empty() {
            s = format!("pasted {p}");
        } else {
            s = format!("{} (pasted {p})", end_clause(&s));
        }
    }
    cut(&s, max)
}

/// `s` without pasted markup: elements with attributes (`<ion-icon slot="x">`), closing tags
/// and zero-width spaces. A tag named in prose (`<details>`) stays.
fn without_markup(s: &str) -> String {
    static TAG: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r#"<[A-Za-z][\w:-]*\s[^<>]*=[^<>]*>|</[A-Za-z][\w:-]*>|[\u{200B}\u{FEFF}]"#,
        )
        .expect("a valid pattern")
    });
    if !s.contains('<') && !s.contains('\u{200B}') {
        return s.to_owned();
    }
    let out = TAG.replace_all(s, " ");
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `s` without its closing colon, so a pasted block's label reads as a clause.
fn end_clause(s: &str) -> &str {
    s.trim_end().trim_end_matches([':', '：']).trim_end()
}

/// A line of a pasted log, trace, diff or code rather than of what the person wrote.
fn pasted_line(l: &str) -> bool {
    let t = l.trim();
    if t.is_empty() {
        return false;
    }
    let lower = t.to_ascii_lowercase();
    // Code punctuation makes up much of the line: `import('./x').then((m) => m.X),`.
    let punct = t.chars().filter(|c| "(){}[];=<>|\\".contains(*c)).count();
    let code_like = (punct * 8 > t.chars().count() && t.chars().count() > 6)
        || ["=>", "();", ").", "import(", "require("]
            .iter()
            .any(|m| t.contains(m) && !t.contains('`'));
    code_like
        || t.starts_with("./")
        || t.starts_with("../")
        || t.chars()
            .all(|c| "~^-=_*#".contains(c) || c.is_whitespace())
        || t.starts_with("at ")
        || t.starts_with("diff --git")
        || t.starts_with("@@")
        || t.starts_with("+++")
        || t.starts_with("---")
        || t.starts_with("Traceback")
        || t.starts_with("File \"")
        || (t.starts_with(['+', '-']) && !t.starts_with("- ") && !t.starts_with("+ "))
        || t.contains(" @ ") && t.contains(".js:")
        || t.contains('│')
        || t.starts_with('^')
        || t.ends_with(['{', '}', ';'])
        || (t.starts_with('<') && t.ends_with('>'))
        || lower.starts_with("error")
        || lower.starts_with("warning")
        || lower.contains("error ts")
        || lower.contains("error:")
        || lower.contains("module build failed")
        || has_location(t)
}

/// `file.ext:12` or `file.ext:12:5`: a compiler's or a stack trace's location.
fn has_location(t: &str) -> bool {
    t.split_whitespace().any(|w| {
        let mut parts = w.trim_matches(|c: char| "()[],".contains(c)).split(':');
        let file = parts.next().unwrap_or("");
        file.contains('.')
            && parts
                .next()
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// The first line of a log that says what went wrong, else its first line.
pub fn error_line(text: &str) -> Option<String> {
    const WORDS: &[&str] = &[
        "error",
        "failed",
        "failure",
        "exception",
        "cannot",
        "can't",
        "not found",
        "panicked",
        "undefined",
        "fatal",
        "denied",
        "refused",
        "timed out",
        "timeout",
        "must ",
        "invalid",
    ];
    let lines = || {
        text.lines()
            .map(|l| {
                l.trim()
                    .trim_start_matches(['✖', '×', '✗', '!', '*', '>', '#'])
            })
            .map(str::trim)
            .filter(|l| l.chars().filter(|c| c.is_alphanumeric()).count() >= 6)
    };
    // A line that states the error ("Error: x is missing …") before one that only says
    // something failed ("Module build failed (from …):").
    let stated = lines().find(|l| {
        let lower = l.to_lowercase();
        ["error:", "error ts", "exception:", "panicked at", "fatal:"]
            .iter()
            .any(|w| lower.contains(w))
            && !l.trim_end().ends_with(':')
    });
    let hit = stated.or_else(|| {
        lines().find(|l| {
            let lower = l.to_lowercase();
            WORDS.iter().any(|w| lower.contains(w))
        })
    });
    hit.or_else(|| lines().next())
        .map(|l| super::one_line(l, 160))
}

/// Splits typed text into what the person wrote and a short name for what they pasted: code
/// fences, diffs and logs (lines that read like a log, in a run of three or more, or making up
/// most of the prompt).
fn split_pasted(typed: &str) -> (String, Option<String>) {
    let mut prose: Vec<&str> = Vec::new();
    let mut pasted: Vec<&str> = Vec::new();
    let mut fence = false;
    let mut run: Vec<&str> = Vec::new();
    let lines: Vec<&str> = typed.lines().collect();
    let total = lines.iter().filter(|l| !l.trim().is_empty()).count();
    let loggy = lines.iter().filter(|l| pasted_line(l)).count();
    let mostly_pasted = total >= 3 && loggy * 2 > total;
    fn flush<'a>(
        run: &mut Vec<&'a str>,
        prose: &mut Vec<&'a str>,
        pasted: &mut Vec<&'a str>,
        mostly_pasted: bool,
    ) {
        if run.len() >= 3 || (mostly_pasted && !run.is_empty()) {
            pasted.append(run);
        } else {
            prose.append(run);
        }
    }
    for l in &lines {
        if l.trim_start().starts_with("```") {
            fence = !fence;
            flush(&mut run, &mut prose, &mut pasted, mostly_pasted);
            continue;
        }
        if fence {
            pasted.push(l);
        } else if pasted_line(l) {
            run.push(l);
        } else if l.trim().is_empty() {
            // A blank line neither breaks a run nor joins prose.
        } else {
            flush(&mut run, &mut prose, &mut pasted, mostly_pasted);
            prose.push(l);
        }
    }
    flush(&mut run, &mut prose, &mut pasted, mostly_pasted);
    let prose = prose
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if pasted.is_empty() {
        return (prose, None);
    }
    let block = pasted.join("\n");
    let what = if block
        .lines()
        .any(|l| l.starts_with("diff --git") || l.starts_with("@@"))
    {
        "a diff".to_owned()
    } else {
        match error_line(&block) {
            Some(e) if e.to_lowercase().contains("error") || e.contains("failed") => {
                format!("error: {e}")
            }
            _ => "code".to_owned(),
        }
    };
    (prose, Some(what))
}

/// `s` on one line, at most `max` characters: whole if it fits, else up to the last sentence
/// or clause end that keeps at least half of it, else at a word, with `…`.
pub fn cut(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let limit = flat.char_indices().nth(max).map_or(flat.len(), |(i, _)| i);
    let head = &flat[..limit];
    let ends = |stops: &[char]| {
        head.char_indices()
            .filter(|(i, c)| {
                stops.contains(c) && (head[i + c.len_utf8()..].starts_with(' ') || c.len_utf8() > 1)
            })
            .map(|(i, c)| i + c.len_utf8())
            .next_back()
            .filter(|&e| e * 2 >= head.len())
    };
    if let Some(e) = ends(&['.', '!', '?', '。', '！', '？']) {
        return head[..e].to_owned();
    }
    if let Some(e) = ends(&[',', ';', ':', '，', '；', '：', ')']) {
        return format!(
            "{}…",
            head[..e].trim_end_matches([',', ';', ':', '，', '；', '：'])
        );
    }
    let word = head
        .rfind(' ')
        .filter(|&i| i * 2 >= head.len())
        .unwrap_or(head.len());
    format!("{}…", head[..word].trim_end())
}

/// A request as a title: "can you please", "I want you to" and the like dropped, its first
/// letter upper case, at most `max` characters.
pub fn as_title(request: &str, max: usize) -> String {
    const POLITE: &[&str] = &[
        "ok so ",
        "ok, so ",
        "ok, ",
        "ok ",
        "okay, ",
        "so ",
        "so, ",
        "hey, ",
        "hi, ",
        "can you please ",
        "could you please ",
        "would you please ",
        "can you ",
        "could you ",
        "would you ",
        "will you ",
        "please ",
        "i want you to ",
        "i'd like you to ",
        "i would like you to ",
        "i need you to ",
        "help me ",
        "now ",
        "then ",
    ];
    let mut s = request.trim();
    loop {
        let lower = s.to_lowercase();
        match POLITE.iter().find(|p| lower.starts_with(*p)) {
            Some(p) => s = s[p.len()..].trim_start(),
            None => break,
        }
    }
    let s = s.trim_end_matches(['?', '.', '!']);
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    if let Some(c) = chars.next() {
        out.extend(c.to_uppercase());
        out.push_str(chars.as_str());
    }
    cut(&out, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_lose_injected_context_and_name_pasted_logs() {
        let p = "<ide_opened_file>The user opened the file /a/post.mdx in the IDE. This may or \
                 may not be related to the current task.</ide_opened_file>I keep getting build \
                 errors from MD034, how can I disable that?";
        assert_eq!(
            request(p, 300),
            "I keep getting build errors from MD034, how can I disable that?"
        );
        let log = "./src/app/settings/settings.page.ts\nModule build failed (from \
                   ./node_modules/@ngtools/webpack/src/ivy/index.js):\nError: \
                   /x/src/app/settings/settings.page.ts is missing from the TypeScript \
                   compilation.\n    at AngularWebpackPlugin.getCompilation (/x/plugin.js:12:5)";
        let r = request(log, 300);
        assert!(r.starts_with("pasted error: "), "{r}");
        assert!(
            r.contains("is missing from the TypeScript compilation"),
            "{r}"
        );
        let mixed = "Please have a look at this patch, I changed my mind:\ndiff --git a/r.py \
                     b/r.py\n@@ -1,3 +1,3 @@\n-    old()\n+    new()";
        assert_eq!(
            request(mixed, 300),
            "Please have a look at this patch, I changed my mind (pasted a diff)"
        );
    }

    #[test]
    fn pasted_code_markup_and_continuations_are_not_the_request() {
        let log = "./src/app/settings/settings.page.ts\n22 import('./settings/settings.page')\
                   .then((m) => m.SettingsPage),\n~~~~~~~~~~~~~~\nModule build failed (from \
                   ./node_modules/@ngtools/webpack/src/ivy/index.js):\nError: C:\\a\\settings.page.ts \
                   is missing from the TypeScript compilation.";
        assert_eq!(
            request(log, 300),
            "pasted error: Error: C:\\a\\settings.page.ts is missing from the TypeScript compilation."
        );
        let html = "with name \"send-sharp\". Ensure that the icon is registered. <ion-icon \
                    _ngcontent-ng-c1 slot=\u{200B}\"icon-only\" md=\"send-sharp\">\u{200B}…</ion-icon>";
        let r = request(html, 300);
        assert!(
            !r.contains("_ngcontent") && !r.contains("</ion-icon>"),
            "{r}"
        );
        assert!(
            r.starts_with("with name \"send-sharp\". Ensure that the icon is registered."),
            "{r}"
        );
        // A tag named in prose, inline code and a continued line stay as typed.
        assert_eq!(
            request(
                "why is `<details>` open? \\\nand why does `f(x)` return `[]`?",
                300
            ),
            "why is `<details>` open? and why does `f(x)` return `[]`?"
        );
    }

    #[test]
    fn cuts_fall_on_sentences_clauses_or_words() {
        let s = "Add a settings page. It should store the API key in localStorage and toggle \
                 the theme";
        assert_eq!(cut(s, 36), "Add a settings page.");
        let c = "Use the Explore task in sub-agents with Haiku model, to give me an overview of \
                 the code organization";
        assert_eq!(
            cut(c, 90),
            "Use the Explore task in sub-agents with Haiku model…"
        );
        let w = "supercalifragilistic expialidocious wordy words that keep going and going";
        let out = cut(w, 40);
        assert!(out.ends_with('…') && !out.contains("goin…"), "{out}");
        assert_eq!(cut("short", 40), "short");
    }

    #[test]
    fn titles_drop_politeness() {
        assert_eq!(
            as_title("Can you please update the top level index.html?", 80),
            "Update the top level index.html"
        );
        assert_eq!(as_title("ok so, add a test", 80), "Add a test");
        assert_eq!(as_title("make it green", 80), "Make it green");
    }
}
