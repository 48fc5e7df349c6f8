//! What an LLM is asked for each layer, and how its answer is read: JSON requested, parsed
//! tolerantly (code fences, text around the object), every field checked. An answer that does
//! not hold what is needed is `None`: the caller falls back to the heuristic for that item.

use serde_json::Value;

use super::{Call, Lang, Observation, SessionSummary, Talk, TalkSummary};

/// Recorded on every LLM-written row; bump it when a prompt changes, so `regenerate` can find
/// rows written by older prompts.
pub const PROMPT_VERSION: &str = "llm-v2";

/// Characters of tool input / output / message text put into one prompt.
const CLIP: usize = 2000;
/// Characters of a whole talk put into one L2 prompt.
const TALK_BUDGET: usize = 8000;

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        format!("{} […]", s.chars().take(max).collect::<String>())
    }
}

/// The language instruction: the conversation's own unless the settings name one.
pub fn language(lang: Lang, configured: &str) -> String {
    if configured != "auto" {
        return configured.to_owned();
    }
    match lang {
        Lang::Zh => "Chinese (简体中文)".into(),
        Lang::Ja => "Japanese (日本語)".into(),
        Lang::En => "English".into(),
    }
}

pub fn l1_system(language: &str) -> String {
    format!(
        "You compress one step of an AI coding agent's work into an observation for a memory \
         index. Answer with one JSON object with exactly these keys: \"type\" (one of bugfix, \
         feature, refactor, change, discovery, decision), \"title\" (at most 10 words), \
         \"subtitle\" (one short sentence), \"facts\" (an array of up to 5 short strings), \
         \"narrative\" (2 to 4 sentences). Write the text in {language}. No other text."
    )
}

pub fn l1_user(talk: &Talk, group: &[&Call]) -> String {
    let mut s = format!("User request: {}\n\n", clip(&talk.prompt, 600));
    for c in group {
        s.push_str(&format!(
            "Tool: {}\nInput: {}\nOutput{}: {}\n\n",
            c.tool_name,
            clip(&c.input.to_string(), CLIP / group.len().max(1)),
            if c.is_error { " (error)" } else { "" },
            clip(&c.output, CLIP / group.len().max(1))
        ));
    }
    s
}

pub fn l2_system(language: &str) -> String {
    format!(
        "You summarise one exchange between a developer and an AI coding agent for a memory \
         index. Answer with one JSON object with exactly these keys: \"user_request\" (what the \
         developer asked, one sentence), \"summary\" (what happened, 2 to 4 sentences), \
         \"completed\" (what was done or answered, one sentence; empty if nothing). Write the \
         text in {language}. No other text."
    )
}

pub fn l2_user(talk: &Talk) -> String {
    // What the developer typed (no editor context or reminders), then the facts the heuristic
    // reads from the transcript, as grounding.
    let typed = ai_cli_session_collector::text::typed_text(&talk.prompt);
    let mut s = format!("Developer: {}\n\n", clip(&typed, 1500));
    let work = super::heuristic::work::of_talk(talk);
    let facts = super::heuristic::talk::did_items(&work, talk.lang == Lang::Zh);
    if !facts.is_empty() {
        s.push_str("Facts from the transcript (files changed, commands and their outcome):\n");
        for f in facts.iter().take(12) {
            s.push_str(&format!("- {}\n", clip(f, 200)));
        }
        s.push('\n');
    }
    for c in &talk.calls {
        if s.len() > TALK_BUDGET {
            s.push_str("[more steps omitted]\n");
            break;
        }
        s.push_str(&format!(
            "Agent used {}: {}{}\n",
            c.tool_name,
            clip(&c.input.to_string(), 200),
            if c.is_error { " (failed)" } else { "" }
        ));
    }
    for t in &talk.assistant_texts {
        if s.len() > TALK_BUDGET + 2000 {
            break;
        }
        s.push_str(&format!("Agent: {}\n", clip(t, 1000)));
    }
    s
}

pub fn l3_system(language: &str) -> String {
    format!(
        "You summarise a whole working session between a developer and an AI coding agent from \
         the summaries of its exchanges. Answer with one JSON object with exactly these keys: \
         \"summary\" (3 to 5 sentences), \"key_points\" (an array of up to 8 short strings), \
         \"technologies\" (an array of names). Write the text in {language}. No other text."
    )
}

pub fn l3_user(talks: &[TalkSummary], project: Option<&str>) -> String {
    let mut s = format!("Project: {}\n\n", project.unwrap_or("unknown"));
    for t in talks {
        if s.len() > TALK_BUDGET {
            s.push_str("[later exchanges omitted]\n");
            break;
        }
        s.push_str(&format!(
            "#{} {}\n{}\n\n",
            t.prompt_number,
            clip(&t.user_request, 300),
            clip(&t.summary, 600)
        ));
    }
    s
}

/// An object of these string keys (with their longest length) and string-array keys (with
/// their most items and each item's longest length), every key required, nothing else. The
/// limits are those the parser keeps, smaller where a small model's budget of 1,024 tokens
/// needs them to be.
fn object(
    strings: &[(&str, usize)],
    lists: &[(&str, usize, usize)],
    kinds: Option<&[&str]>,
) -> serde_json::Value {
    let mut props = serde_json::Map::new();
    for (k, max) in strings {
        props.insert(
            (*k).into(),
            serde_json::json!({"type": "string", "maxLength": max}),
        );
    }
    for (k, items, max) in lists {
        props.insert(
            (*k).into(),
            serde_json::json!({"type": "array", "maxItems": items,
                               "items": {"type": "string", "maxLength": max}}),
        );
    }
    if let Some(kinds) = kinds {
        props.insert(
            "type".into(),
            serde_json::json!({"type": "string", "enum": kinds}),
        );
    }
    let required: Vec<&String> = props.keys().collect();
    serde_json::json!({
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": false,
    })
}

/// The shape of an L1 answer, for the providers' structured output ([`l1_system`] says it too).
pub fn l1_schema() -> crate::llm::Schema {
    crate::llm::Schema {
        name: "observation",
        schema: object(
            &[("title", 100), ("subtitle", 160), ("narrative", 600)],
            &[("facts", 5, 120)],
            Some(TYPES),
        ),
    }
}

/// The shape of an L2 answer ([`l2_system`]).
pub fn l2_schema() -> crate::llm::Schema {
    crate::llm::Schema {
        name: "talk_summary",
        schema: object(
            &[("user_request", 300), ("summary", 800), ("completed", 300)],
            &[],
            None,
        ),
    }
}

/// The shape of an L3 answer ([`l3_system`]).
pub fn l3_schema() -> crate::llm::Schema {
    crate::llm::Schema {
        name: "session_summary",
        schema: object(
            &[("summary", 900)],
            &[("key_points", 6, 120), ("technologies", 8, 40)],
            None,
        ),
    }
}

/// File extensions by which a word of a summary is taken for a file name.
const FILE_EXTENSIONS: &[&str] = &[
    "rs", "py", "ts", "tsx", "js", "jsx", "mjs", "cjs", "go", "java", "kt", "kts", "rb", "c", "h",
    "cc", "cpp", "hpp", "cs", "swift", "php", "vue", "svelte", "scala", "sh", "bash", "zsh", "ps1",
    "sql", "md", "rst", "txt", "json", "jsonl", "toml", "yaml", "yml", "xml", "html", "htm", "css",
    "scss", "less", "lock", "ini", "cfg", "conf", "env", "proto", "gradle", "tf", "lua", "ex",
    "exs", "erl", "hs", "ml", "dart", "jl", "zig", "nim",
];

/// The file names `text` mentions: words with a path or a stem before a known extension.
/// `Node.js`-style names (a capitalised stem, no folder, `.js`) are technologies, not files.
pub fn file_names(text: &str) -> Vec<&str> {
    static WORD: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"[A-Za-z0-9_\-./~]*[A-Za-z0-9_\-]\.([A-Za-z0-9]{1,6})\b")
            .expect("a valid pattern")
    });
    WORD.captures_iter(text)
        .filter_map(|c| {
            let (all, ext) = (c.get(0)?.as_str(), c.get(1)?.as_str());
            let ext = ext.to_ascii_lowercase();
            let technology = ext == "js"
                && !all.contains('/')
                && all.starts_with(|ch: char| ch.is_ascii_uppercase());
            (FILE_EXTENSIONS.contains(&ext.as_str()) && !technology).then_some(all)
        })
        .collect()
}

/// The first file name that a model wrote into `written` and that is nowhere in `shown` (what
/// it was given), compared by the name's last part without case: a model that names a file
/// it was not shown invents it, and a memory must not hold invented facts.
pub fn invented_file(written: &[&str], shown: &str) -> Option<String> {
    let shown = shown.to_lowercase();
    written.iter().flat_map(|w| file_names(w)).find_map(|f| {
        let base = f.trim_end_matches('.').rsplit('/').next().unwrap_or(f);
        (!shown.contains(&base.to_lowercase())).then(|| f.to_owned())
    })
}

/// A text that is only a placeholder: one snake_case word (`user_request`, `user_summary`)
/// that the prompt does not hold, written where a sentence belongs. Small models fill a
/// schema's field with a name like its own.
pub fn placeholder<'a>(written: &[&'a str], shown: &str) -> Option<&'a str> {
    written.iter().map(|w| w.trim()).find(|w| {
        w.contains('_')
            && w.starts_with(|c: char| c.is_ascii_lowercase())
            && w.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && !shown.contains(w)
    })
}

/// Why a row a model wrote cannot be stored as its memory of what it was `shown`, if it
/// cannot: it names a file that is not there, or holds a placeholder for a sentence.
pub fn ungrounded(written: &[&str], shown: &str) -> Option<String> {
    if let Some(f) = invented_file(written, shown) {
        return Some(format!("named `{f}`, which is not in what it summarised"));
    }
    placeholder(written, shown).map(|w| format!("wrote `{w}` where a summary belongs"))
}

/// The JSON object in a model's answer: the whole text, or inside a code fence, or the span
/// from the first `{` to the last `}`.
pub fn extract_json(text: &str) -> Option<Value> {
    let t = text.trim();
    if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(t) {
        return Some(v);
    }
    if let Some(start) = t.find("```") {
        let rest = &t[start + 3..];
        let rest = rest.trim_start_matches(|c: char| c.is_ascii_alphabetic());
        if let Some(end) = rest.find("```")
            && let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(rest[..end].trim())
        {
            return Some(v);
        }
    }
    let (a, b) = (t.find('{')?, t.rfind('}')?);
    match serde_json::from_str::<Value>(t.get(a..=b)?) {
        Ok(v @ Value::Object(_)) => Some(v),
        _ => None,
    }
}

fn text(v: &Value, key: &str, max: usize) -> Option<String> {
    let s = v.get(key)?.as_str()?.trim();
    (!s.is_empty()).then(|| clip(s, max))
}

fn list(v: &Value, key: &str, max_items: usize) -> Vec<String> {
    match v.get(key) {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::trim).filter(|s| !s.is_empty()))
            .take(max_items)
            .map(|s| clip(s, 200))
            .collect(),
        Some(Value::String(s)) if !s.trim().is_empty() => vec![clip(s.trim(), 200)],
        _ => Vec::new(),
    }
}

const TYPES: &[&str] = &[
    "bugfix",
    "feature",
    "refactor",
    "change",
    "discovery",
    "decision",
];

/// Fills an observation's written fields from the answer; the deterministic ones (ids, files)
/// stay. `None` when the answer lacks a title or narrative or names no valid type.
pub fn parse_l1(answer: &str, base: &Observation) -> Option<Observation> {
    let v = extract_json(answer)?;
    let kind = v.get("type")?.as_str()?.trim().to_lowercase();
    if !TYPES.contains(&kind.as_str()) {
        return None;
    }
    Some(Observation {
        kind,
        title: text(&v, "title", 120)?,
        subtitle: text(&v, "subtitle", 200).unwrap_or_default(),
        facts: list(&v, "facts", 5),
        narrative: text(&v, "narrative", 1200)?,
        ..base.clone()
    })
}

pub fn parse_l2(answer: &str, base: &TalkSummary) -> Option<TalkSummary> {
    let v = extract_json(answer)?;
    Some(TalkSummary {
        user_request: text(&v, "user_request", 400).unwrap_or_else(|| base.user_request.clone()),
        summary: text(&v, "summary", 1500)?,
        completed: text(&v, "completed", 600).unwrap_or_default(),
        ..base.clone()
    })
}

pub fn parse_l3(answer: &str, base: &SessionSummary) -> Option<SessionSummary> {
    let v = extract_json(answer)?;
    let technologies = list(&v, "technologies", 10);
    Some(SessionSummary {
        summary: text(&v, "summary", 2000)?,
        key_points: list(&v, "key_points", 8),
        technologies: if technologies.is_empty() {
            base.technologies.clone()
        } else {
            technologies
        },
        ..base.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_the_model_was_not_shown_is_found() {
        assert_eq!(
            file_names("Fixed src/billing/webhooks.rs and README.md; Node.js 20, v1.2, e.g. foo"),
            vec!["src/billing/webhooks.rs", "README.md"]
        );
        let shown = "Tool: Edit\nInput: {\"file_path\": \"/home/dev/pay/src/billing/Webhooks.rs\"}";
        // Named as shown, or by another path to the same name: grounded.
        assert_eq!(invented_file(&["Updated webhooks.rs."], shown), None);
        assert_eq!(
            invented_file(&["Updated pay/src/billing/webhooks.rs"], shown),
            None
        );
        // A file the talk never mentions: invented, and named.
        assert_eq!(
            invented_file(&["Updated webhooks.rs", "also fixed settings.py"], shown),
            Some("settings.py".into())
        );
        // Prose without file names passes.
        assert_eq!(
            invented_file(&["Tuned the retry policy of Node.js"], shown),
            None
        );
        // A field's name where its sentence belongs is no summary; a real identifier from the
        // talk, or a sentence, is.
        assert_eq!(
            ungrounded(&["Fixed it", " user_summary "], shown).as_deref(),
            Some("wrote `user_summary` where a summary belongs")
        );
        assert_eq!(placeholder(&["file_path"], shown), None);
        assert_eq!(
            placeholder(&["Renamed user_id", "date", "修复了"], shown),
            None
        );
        assert_eq!(
            ungrounded(&["settings.py", "user_request"], shown).as_deref(),
            Some("named `settings.py`, which is not in what it summarised")
        );
    }

    #[test]
    fn a_talk_prompt_carries_what_was_typed_and_the_facts() {
        let talk = Talk {
            prompt_number: 1,
            prompt: "<ide_selection>The user selected the lines 1 to 2 from /r/secret_notes.md\
                     </ide_selection>add tar support"
                .into(),
            assistant_texts: vec!["Added it.".into()],
            calls: vec![Call {
                message_id: "m".into(),
                tool_name: "Bash".into(),
                input: serde_json::json!({"command": "pytest -q"}),
                output: "3 failed, 39 passed in 1.2s".into(),
                is_error: true,
                ts: None,
            }],
            notes: vec![],
            notes_after: 0,
            raw_tokens: 0,
            lang: Lang::En,
            ts: None,
        };
        let p = l2_user(&talk);
        assert!(p.starts_with("Developer: add tar support\n"), "{p}");
        assert!(!p.contains("secret_notes"), "{p}");
        assert!(p.contains("- pytest: 3 failed, 39 passed\n"), "{p}");
    }

    #[test]
    fn json_is_found_in_fences_and_chatter() {
        let want = serde_json::json!({"summary": "ok"});
        assert_eq!(extract_json(r#"{"summary": "ok"}"#), Some(want.clone()));
        assert_eq!(
            extract_json("Sure! Here it is:\n```json\n{\"summary\": \"ok\"}\n```\nAnything else?"),
            Some(want.clone())
        );
        assert_eq!(
            extract_json("The answer: {\"summary\": \"ok\"} — hope that helps"),
            Some(want)
        );
        assert_eq!(extract_json("no json here"), None);
        assert_eq!(extract_json("{\"summary\": \"unterminated"), None);
        assert_eq!(extract_json("[1, 2]"), None);
    }

    #[test]
    fn a_summary_without_its_required_field_is_rejected() {
        let base = TalkSummary {
            prompt_number: 1,
            user_request: "fix it".into(),
            summary: "h".into(),
            completed: String::new(),
            files_involved: vec!["a.rs".into()],
        };
        assert!(parse_l2(r#"{"user_request": "x"}"#, &base).is_none());
        let t = parse_l2(r#"{"summary": "Fixed the parser.", "completed": 3}"#, &base).unwrap();
        assert_eq!(t.summary, "Fixed the parser.");
        assert_eq!(t.user_request, "fix it");
        assert_eq!(t.files_involved, vec!["a.rs"]);
    }
}
