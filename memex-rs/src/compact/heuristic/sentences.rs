//! What was found or decided: an agent's prose cut into sentences and list items, code left
//! out, each scored by how much it tells (files, symbols, numbers, errors, commits, decisions
//! up; pleasantries, plans to act and questions down), and the wrap-up section of an answer
//! ("Summary", "Changes made", a list after "Here is what I changed:") found.

/// One sentence or list item of an agent's prose.
#[derive(Debug, Clone, PartialEq)]
pub struct Unit {
    pub text: String,
    /// A list item.
    pub bullet: bool,
    /// Under a wrap-up heading ("Summary", "Changes", "What I did").
    pub wrap_up: bool,
    /// The bold lead of a list item ("**Separation of concerns** — …").
    pub head: Option<String>,
}

/// Words that, alone, carry nothing: "Perfect!", "You're absolutely right!".
const PLEASANTRIES: &[&str] = &[
    "perfect",
    "great",
    "excellent",
    "awesome",
    "nice",
    "done",
    "sure",
    "certainly",
    "of course",
    "absolutely",
    "got it",
    "understood",
    "thanks",
    "thank you",
    "you're welcome",
    "you're absolutely right",
    "you're right",
    "good catch",
    "great question",
    "good question",
    "sounds good",
    "no problem",
    "all set",
    "all done",
    "hello",
    "hi",
    "okay",
    "ok",
    "alright",
    "yes",
    "no",
    "good",
    "cool",
    "wonderful",
    "fantastic",
    "ah",
    "oh",
    "hmm",
    "i see",
    "interesting",
    "noted",
    "right",
    "indeed",
];

/// Openings of sentences that close an answer without telling anything.
const CLOSERS: &[&str] = &[
    "let me know",
    "feel free",
    "hope this helps",
    "i hope this helps",
    "happy to help",
    "glad to help",
    "if you have any",
    "if you need",
    "if you'd like",
    "if you want",
    "is there anything else",
    "anything else",
];

/// Openings of a plan to act: what the agent is about to do, not what it did or found.
const PLANS: &[&str] = &[
    "let me ",
    "let's ",
    "i'll ",
    "i will ",
    "i'm going to ",
    "i am going to ",
    "now let me ",
    "now i'll ",
    "now i will ",
    "now, let me ",
    "first, let me ",
    "first, i'll ",
    "first let me ",
    "next, let me ",
    "next, i'll ",
    "next i'll ",
    "then i'll ",
    "i need to ",
    "i should ",
    "i'm now going to ",
    "i can see ",
    "i see ",
    "looking at ",
    "now i need ",
    "now i have ",
    "now i understand ",
    "i understand ",
    "i'll now ",
    "i'm starting ",
    "starting with ",
    "to do this",
    "here's the ",
    "here is the ",
    "here are the ",
    "here's what ",
];

/// Words of a heading that opens an answer's wrap-up.
const WRAP_UP: &[&str] = &[
    "summary",
    "changes",
    "what i did",
    "what was done",
    "what changed",
    "what i changed",
    "results",
    "result",
    "conclusion",
    "recap",
    "key points",
    "findings",
    "fixed",
    "implemented",
    "done",
    "outcome",
    "verdict",
    "overview",
    "architecture",
    "key components",
    "what's working",
    "status",
    "total",
    "总结",
    "修改",
    "变更",
    "结果",
];

fn lower_alnum(s: &str) -> String {
    s.to_lowercase()
        .replace(['’', '‘'], "'")
        .trim_matches(|c: char| !c.is_alphanumeric() && c != '\'')
        .to_owned()
}

/// Whether a sentence is a pleasantry and nothing more ("Perfect!", "Great, thanks!").
pub fn is_pleasantry(s: &str) -> bool {
    let parts: Vec<String> = s
        .split(['.', '!', '?', ',', ';', '…', '—', '-', ':'])
        .map(lower_alnum)
        .filter(|p| !p.is_empty())
        .collect();
    !parts.is_empty() && parts.iter().all(|p| PLEASANTRIES.contains(&p.as_str()))
}

/// Whether a sentence only closes an answer ("Let me know if …").
pub fn is_closer(s: &str) -> bool {
    let l = lower_alnum(s);
    CLOSERS.iter().any(|c| l.starts_with(c))
}

/// Whether a sentence says what the agent is about to do.
pub fn is_plan(s: &str) -> bool {
    let l = s.trim().to_lowercase().replace('’', "'");
    PLANS.iter().any(|p| l.starts_with(p))
}

/// Markdown emphasis and link syntax removed, whitespace collapsed.
fn clean(s: &str) -> String {
    let s = s.replace("**", "").replace("__", "");
    let s = s.trim().trim_matches('*').trim();
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A list item's text, if `l` is one.
fn bullet(l: &str) -> Option<&str> {
    let t = l.trim_start();
    for p in ["- ", "* ", "• ", "+ "] {
        if let Some(r) = t.strip_prefix(p) {
            return Some(r);
        }
    }
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 && digits < 3 {
        let r = &t[digits..];
        if let Some(r) = r.strip_prefix(". ").or_else(|| r.strip_prefix(") ")) {
            return Some(r);
        }
    }
    None
}

/// The bold lead of a list item: `**Name**` at its start, or the words before " — " / ": ".
fn head_of(item: &str) -> Option<String> {
    let t = item.trim();
    if let Some(rest) = t.strip_prefix("**")
        && let Some(end) = rest.find("**")
    {
        let h = clean(rest[..end].trim_end_matches([':', '.']));
        return (!h.is_empty()).then_some(h);
    }
    for sep in [" — ", " – ", ": "] {
        if let Some(i) = t.find(sep) {
            let h = &t[..i];
            if h.split_whitespace().count() <= 5 && !h.is_empty() {
                return Some(clean(h));
            }
        }
    }
    None
}

/// A line that names a file on its own (Aider writes one above each edit block).
fn path_label(l: &str) -> bool {
    let t = l.trim();
    !t.contains(' ')
        && t.contains('.')
        && (t.contains('/') || t.rsplit('.').next().is_some_and(|e| e.len() <= 5))
}

/// Splits a paragraph into sentences: after `.`, `!` or `?` followed by a space and a capital,
/// digit, quote or backtick; after `。！？`.
pub fn split_sentences(p: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = 0;
    let b: Vec<(usize, char)> = p.char_indices().collect();
    for (k, &(i, c)) in b.iter().enumerate() {
        let end = i + c.len_utf8();
        let cut = match c {
            '。' | '！' | '？' => true,
            '.' | '!' | '?' => {
                let next = b.get(k + 1).map(|x| x.1);
                let after = b.get(k + 2).map(|x| x.1);
                next == Some(' ')
                    && after.is_some_and(|a| {
                        a.is_uppercase() || a.is_ascii_digit() || "`\"'*([".contains(a)
                    })
                    && !abbreviation(&p[start..i])
            }
            _ => false,
        };
        if cut {
            let s = p[start..end].trim();
            if !s.is_empty() {
                out.push(s.to_owned());
            }
            start = end;
        }
    }
    let s = p[start..].trim();
    if !s.is_empty() {
        out.push(s.to_owned());
    }
    out
}

fn abbreviation(before: &str) -> bool {
    let w = before.rsplit(' ').next().unwrap_or("").to_lowercase();
    matches!(
        w.as_str(),
        "e.g" | "i.e" | "etc" | "vs" | "mr" | "dr" | "no" | "approx" | "cf"
    )
}

/// An agent's text as sentences and list items, code and tables left out.
pub fn units(text: &str) -> Vec<Unit> {
    let mut out = Vec::new();
    let mut fence = false;
    let mut para = String::new();
    // The level of the wrap-up heading we are under (0: none).
    let mut wrap: Option<usize> = None;
    let flush = |para: &mut String, out: &mut Vec<Unit>, wrap: bool| {
        for s in split_sentences(&clean(para)) {
            out.push(Unit {
                text: s,
                bullet: false,
                wrap_up: wrap,
                head: None,
            });
        }
        para.clear();
    };
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("```") || t.starts_with("~~~") {
            fence = !fence;
            flush(&mut para, &mut out, wrap.is_some());
            continue;
        }
        if fence
            || t.starts_with("<<<<<<<")
            || t.starts_with(">>>>>>>")
            || t.starts_with("=======")
            || t.starts_with('|')
            || line.starts_with("    ") && !para.is_empty() && bullet(line).is_none()
        {
            continue;
        }
        if t.is_empty() {
            flush(&mut para, &mut out, wrap.is_some());
            continue;
        }
        let heading = t.starts_with('#')
            || (t.starts_with("**") && t.ends_with("**") && t.len() > 4)
            || (t.starts_with("**") && t.ends_with("**:"));
        if heading {
            flush(&mut para, &mut out, wrap.is_some());
            let level = if t.starts_with('#') {
                t.bytes().take_while(|&b| b == b'#').count()
            } else {
                7
            };
            let h = clean(t.trim_start_matches('#').trim_end_matches(':'));
            let lower = h.to_lowercase();
            if WRAP_UP.iter().any(|w| lower.contains(w)) {
                wrap = Some(level);
            } else if wrap.is_some_and(|w| level <= w) {
                wrap = None;
            }
            continue;
        }
        if let Some(item) = bullet(line) {
            flush(&mut para, &mut out, wrap.is_some());
            let text = clean(item);
            if !text.is_empty() {
                out.push(Unit {
                    head: head_of(item),
                    text,
                    bullet: true,
                    wrap_up: wrap.is_some(),
                });
            }
            continue;
        }
        if path_label(t) && para.is_empty() {
            continue;
        }
        if !para.is_empty() {
            para.push(' ');
        }
        para.push_str(t);
        // A line that introduces a list ("Here's a summary of the changes:") opens a wrap-up.
        if t.ends_with(':') {
            let lower = t.to_lowercase();
            flush(&mut para, &mut out, wrap.is_some());
            if [
                "summary",
                "changes",
                "what i did",
                "i made",
                "i changed",
                "here's what",
                "here is what",
            ]
            .iter()
            .any(|w| lower.contains(w))
            {
                wrap = Some(8);
            }
        }
    }
    flush(&mut para, &mut out, wrap.is_some());
    out
}

/// Whether a token looks like a file name or path.
pub fn is_file_token(w: &str) -> bool {
    let w = w.trim_matches(|c: char| "`'\"(),;:[]{}<>*".contains(c));
    let w = w.trim_end_matches('.');
    if w.len() < 3 || w.starts_with("http") {
        return false;
    }
    if w.contains('/') && w.chars().any(char::is_alphabetic) {
        return true;
    }
    match w.rsplit_once('.') {
        Some((stem, ext)) => {
            // "e.g", "i.e": a one-letter stem is an abbreviation, not a file.
            (stem.len() > 1 || stem.starts_with('.'))
                && (1..=5).contains(&ext.len())
                && ext.chars().all(|c| c.is_ascii_alphanumeric())
                && ext.chars().any(|c| c.is_ascii_alphabetic())
                && !ext.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && !stem.ends_with('.')
        }
        None => false,
    }
}

/// Whether a token is a commit hash (7 to 40 hex digits, letters and digits both).
pub fn is_hash(w: &str) -> bool {
    let w = w.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    (7..=40).contains(&w.len())
        && w.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        && w.chars().any(|c| c.is_ascii_digit())
        && w.chars().any(|c| c.is_ascii_alphabetic())
}

/// Whether a token is code: `snake_case`, `camelCase`, `Name()`, `a.b`, `--flag`, `#E2F0FF`.
fn is_code_token(w: &str) -> bool {
    let w = w.trim_matches(|c: char| ",;:.!?\"'".contains(c));
    if w.len() < 3 {
        return false;
    }
    let inner_upper =
        w.chars().skip(1).any(|c| c.is_uppercase()) && w.chars().any(char::is_lowercase);
    w.contains('_')
        || w.contains("()")
        || w.starts_with("--")
        || (w.starts_with('#') && w.len() >= 4 && w[1..].chars().all(|c| c.is_ascii_hexdigit()))
        || inner_upper
        || (w.contains('.')
            && w.chars()
                .all(|c| c.is_alphanumeric() || c == '.' || c == '_')
            && !w.ends_with('.'))
}

const FINDINGS: &[&str] = &[
    "error",
    "fail",
    "bug",
    "because",
    "cause",
    "broke",
    "fixed",
    "resolved",
    "unresolved",
    "not found",
    "missing",
    "instead",
    "found",
    "exists",
    "doesn't",
    "does not",
    "didn't",
    "did not",
    "cannot",
    "can't",
    "won't",
    "still",
    "only",
    "recommend",
    "decided",
    "should",
    "works",
    "passed",
    "passes",
];

const DONE: &[&str] = &[
    "added",
    "created",
    "updated",
    "changed",
    "removed",
    "renamed",
    "replaced",
    "implemented",
    "moved",
    "switched",
    "merged",
    "committed",
    "wrote",
    "refactored",
    "deleted",
    "extracted",
    "now ",
    "successfully",
    "modified",
    "configured",
    "installed",
    "launched",
    "picked",
    "chose",
];

/// How much a sentence tells: positive for sentences a person would write down.
pub fn score(s: &str) -> f32 {
    if is_pleasantry(s) || is_closer(s) {
        return -10.0;
    }
    let lower = s.to_lowercase();
    let words: Vec<&str> = s.split_whitespace().collect();
    let mut sc = 0.0f32;
    let files = words.iter().filter(|w| is_file_token(w)).count();
    sc += (files as f32 * 2.0).min(4.0);
    let code = s.matches('`').count() / 2 + words.iter().filter(|w| is_code_token(w)).count();
    sc += (code as f32 * 1.0).min(3.0);
    let numbers = words
        .iter()
        .filter(|w| w.chars().any(|c| c.is_ascii_digit()) && !is_hash(w))
        .count();
    sc += (numbers as f32 * 0.75).min(2.0);
    if words.iter().any(|w| is_hash(w)) {
        sc += 2.0;
    }
    if FINDINGS.iter().any(|w| lower.contains(w)) {
        sc += 1.0;
    }
    if DONE.iter().any(|w| lower.contains(w)) {
        sc += 1.0;
    }
    if is_plan(s) {
        sc -= 4.0;
    }
    if s.trim_end().ends_with('?') {
        sc -= 2.0;
    }
    if s.trim_end().ends_with(':') {
        sc -= 2.0;
    }
    let n = words.len();
    // A fragment that is only code and a note ("`/a/b` (4 parts, index 0)") tells little.
    if s.trim_start().starts_with('`') && n <= 6 {
        sc -= 3.0;
    }
    if n < 4 {
        sc -= 2.0;
    } else if n > 45 {
        sc -= 1.5;
    }
    sc
}

/// A list answer's items by their heads, when most items have one: "A; B; C".
pub fn list_heads(units: &[Unit]) -> Option<String> {
    let bullets: Vec<&Unit> = units.iter().filter(|u| u.bullet).collect();
    let heads: Vec<&str> = bullets.iter().filter_map(|u| u.head.as_deref()).collect();
    (heads.len() >= 3 && heads.len() * 3 >= bullets.len() * 2).then(|| heads.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pleasantries_plans_and_closers_are_recognised() {
        for p in [
            "Perfect!",
            "You’re absolutely right!",
            "Great, thanks.",
            "Done.",
        ] {
            assert!(is_pleasantry(p), "{p}");
        }
        assert!(!is_pleasantry("Done: 3 files changed."));
        assert!(is_plan("Let me read the file first."));
        assert!(is_plan("I'll add the margin now."));
        assert!(!is_plan("I added the margin."));
        assert!(is_closer("Let me know if you'd like any changes!"));
    }

    #[test]
    fn informative_sentences_outscore_filler() {
        let good = "Both features are now committed: 70f2781 adds tar archive support to \
                    deep_manifest.py.";
        let plan = "Let me check the current state of the file.";
        assert!(score(good) > 5.0, "{}", score(good));
        assert!(score(plan) < 0.0, "{}", score(plan));
        assert!(score("Perfect!") < -5.0);
        assert!(score("All 80 tests passed and pyright reports 0 errors.") > score(plan));
    }

    #[test]
    fn units_skip_code_and_find_the_wrap_up() {
        let t = "Perfect! I have updated the index. Here's a summary of the changes I made:\n\n\
                 ## Changes Made\n\n### 1. Updated `converter.py`:\n- Added token aggregation \
                 in `process_projects_hierarchy`\n- Used `seen_request_ids` to avoid double \
                 counting\n\n```python\nx = 1\n```\n\naider/commands.py\n```python\n<<<<<<< \
                 SEARCH\nold\n=======\nnew\n>>>>>>> REPLACE\n```\nAll tests pass.";
        let u = units(t);
        let texts: Vec<&str> = u.iter().map(|u| u.text.as_str()).collect();
        assert_eq!(
            texts,
            vec![
                "Perfect!",
                "I have updated the index.",
                "Here's a summary of the changes I made:",
                "Added token aggregation in `process_projects_hierarchy`",
                "Used `seen_request_ids` to avoid double counting",
                "All tests pass."
            ]
        );
        assert!(u[3].wrap_up && u[3].bullet && u[4].wrap_up);
        assert!(!u[1].wrap_up);
    }

    #[test]
    fn list_answers_are_named_by_their_heads() {
        let t = "Strengths:\n1. **Separation of concerns** — docs split.\n2. **Lifecycle \
                 management** — archive.\n3. **Low adoption cost** — just folders.";
        assert_eq!(
            list_heads(&units(t)).as_deref(),
            Some("Separation of concerns; Lifecycle management; Low adoption cost")
        );
        assert_eq!(
            split_sentences("See e.g. Foo. It works."),
            vec!["See e.g. Foo.", "It works."]
        );
        assert!(is_file_token("src/app/copilot.page.ts,"));
        assert!(is_file_token("`renderer.py`"));
        assert!(!is_file_token("e.g."));
        assert!(!is_file_token("3.5"));
        assert!(is_hash("fd43cd4"));
        assert!(!is_hash("deadbeef"));
    }
}
