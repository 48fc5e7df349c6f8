//! L2: one talk summary per prompt: what was asked, what was done, what was found, how it
//! ended, and what was left open, each part labelled so the session summary can read it back.

use super::observation::{describe_edit, describe_run, verb};
use super::sentences::{self, Unit, list_heads, score, units};
use super::work::{Change, Kind, Work, of_talk};
use super::{one_line, request, talk_files};
use crate::compact::{Lang, Talk, TalkSummary};

/// The labels of an L2 summary's parts, in the order they are written.
#[derive(Debug, Clone, Copy)]
pub struct Labels {
    pub asked: &'static str,
    pub did: &'static str,
    pub found: &'static str,
    pub result: &'static str,
    pub open: &'static str,
}

pub const EN: Labels = Labels {
    asked: "Asked: ",
    did: "Did: ",
    found: "Found: ",
    result: "Result: ",
    open: "Open: ",
};

pub const ZH: Labels = Labels {
    asked: "请求：",
    did: "完成：",
    found: "发现：",
    result: "结果：",
    open: "未决：",
};

pub fn labels(lang: Lang) -> Labels {
    if lang == Lang::Zh { ZH } else { EN }
}

/// A heuristic L2 cut at its labels: `[("Asked", "…"), ("Did", "…"), …]`, each text as
/// written (its closing stop kept). A summary without labels (a model wrote it) is one part
/// labelled "Summary".
pub fn split_labels(summary: &str) -> Vec<(String, String)> {
    let mut marks: Vec<(usize, &str)> = Vec::new();
    for l in [EN, ZH] {
        for label in [l.asked, l.did, l.found, l.result, l.open] {
            let mut from = 0;
            while let Some(i) = summary[from..].find(label) {
                let at = from + i;
                // A label starts the summary or follows a sentence's end.
                let before = summary[..at].trim_end();
                if at == 0 || before.ends_with(['.', '!', '?', '…', '。', '！', '？']) {
                    marks.push((at, label));
                }
                from = at + label.len();
            }
        }
    }
    marks.sort();
    if marks.first().is_none_or(|m| m.0 != 0) {
        return vec![("Summary".to_owned(), summary.trim().to_owned())];
    }
    marks
        .iter()
        .enumerate()
        .map(|(k, &(at, label))| {
            let end = marks.get(k + 1).map_or(summary.len(), |m| m.0);
            let name = label.trim_end().trim_end_matches([':', '：']).to_owned();
            (name, summary[at + label.len()..end].trim().to_owned())
        })
        .collect()
}

/// At most `max` words of `s`, with `…` when cut.
pub fn words(s: &str, max: usize) -> String {
    let w: Vec<&str> = s.split_whitespace().collect();
    if w.len() <= max {
        w.join(" ")
    } else {
        format!("{}…", w[..max].join(" ").trim_end_matches([',', ';', ':']))
    }
}

/// What a talk did, as short items: "edited renderer.py (f())", "pytest: 80 passed".
pub fn did_items(w: &Work, zh: bool) -> Vec<String> {
    let mut items = Vec::new();
    for change in [
        Change::Created,
        Change::Edited,
        Change::Deleted,
        Change::Proposed,
    ] {
        let files: Vec<String> = w
            .edits
            .iter()
            .filter(|e| e.change == change)
            .map(describe_edit)
            .collect();
        if !files.is_empty() {
            let shown = files.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
            let more = files.len().saturating_sub(5);
            items.push(if more > 0 {
                format!("{} {shown} and {more} more", verb(change, zh))
            } else {
                format!("{} {shown}", verb(change, zh))
            });
        }
    }
    // A command run several times counts once, by its last outcome.
    let mut runs: Vec<&super::work::Run> = Vec::new();
    for r in &w.runs {
        if matches!(r.kind, Kind::Commit | Kind::Merge) && !r.failed {
            continue;
        }
        runs.retain(|x| x.tool != r.tool || x.by_user != r.by_user);
        runs.push(r);
    }
    items.extend(runs.iter().take(5).map(|r| describe_run(r)));
    for c in w.commits.iter().take(6) {
        items.push(format!(
            "committed {} \"{}\"",
            c.hash,
            one_line(&c.message, 70)
        ));
    }
    if !w.undone.is_empty() {
        items.push(format!("undid {}", w.undone.join(", ")));
    }
    for a in w.agents.iter().take(3) {
        items.push(format!("started {a}"));
    }
    if !w.web.is_empty() {
        items.push(format!("looked up {}", w.web.join(", ")));
    }
    items.extend(w.commands.iter().cloned());
    // Questions are told by the answer; the rest by name.
    let tools: Vec<&str> = w
        .tools
        .iter()
        .map(String::as_str)
        .filter(|t| !t.to_ascii_lowercase().contains("question"))
        .collect();
    if !tools.is_empty() {
        items.push(format!("used {}", tools.join(", ")));
    }
    // A talk that only looked says what it looked at.
    if items.is_empty() && !w.looked.is_empty() {
        let looked: Vec<String> = w
            .looked
            .iter()
            .map(|r| match &r.outcome {
                Some(o) => format!("`{}` ({o})", one_line(&r.command, 40)),
                None => format!("`{}`", one_line(&r.command, 40)),
            })
            .collect();
        items.push(format!("ran {}", looked.join(", ")));
    }
    for e in &w.errors {
        items.push(format!("error: {e}"));
    }
    if w.compacted {
        items.push("context compacted".to_owned());
    }
    items
}

/// The sentence that says how the talk ended: the first of the final answer that tells
/// something, else its most telling one.
fn result_of(last: &[Unit]) -> Option<String> {
    let telling = |u: &&Unit| {
        !sentences::is_pleasantry(&u.text)
            && !sentences::is_closer(&u.text)
            && !sentences::is_plan(&u.text)
            && !u.text.trim_end().ends_with(':')
    };
    // A sentence before a list item: items are often fragments ("`/a/b` (4 parts)").
    let first = last
        .iter()
        .filter(telling)
        .find(|u| !u.bullet && score(&u.text) >= 1.0)
        .or_else(|| last.iter().filter(telling).find(|u| score(&u.text) >= 1.0));
    let best = || {
        last.iter()
            .filter(telling)
            .max_by(|a, b| score(&a.text).total_cmp(&score(&b.text)))
    };
    first.or_else(best).map(|u| request::cut(&u.text, 220))
}

/// The most telling sentences of a talk's answers, in order, at most `max_words` together.
fn found_of(texts: &[Vec<Unit>], result: Option<&str>, max_words: usize) -> Vec<String> {
    let mut cands: Vec<(f32, usize, String)> = Vec::new();
    let mut k = 0;
    let n = texts.len();
    for (i, us) in texts.iter().enumerate() {
        // A list answer is named by its items' heads.
        if let Some(h) = list_heads(us) {
            cands.push((6.0, k, h));
            k += 1;
        }
        for u in us {
            k += 1;
            if Some(u.text.as_str()) == result {
                continue;
            }
            let mut s = score(&u.text);
            if u.wrap_up {
                s += 2.0;
            }
            if i + 1 == n {
                s += 0.5;
            }
            if u.bullet && u.head.is_some() && list_heads(us).is_some() {
                continue;
            }
            if s >= 2.5 {
                cands.push((s, k, request::cut(&u.text, 200)));
            }
        }
    }
    cands.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut picked: Vec<(usize, String)> = Vec::new();
    let mut used = 0;
    for (_, k, s) in cands {
        let w = s.split_whitespace().count();
        if used + w > max_words {
            continue;
        }
        if picked
            .iter()
            .any(|(_, p)| p.contains(s.as_str()) || s.contains(p.as_str()))
        {
            continue;
        }
        used += w;
        picked.push((k, s));
    }
    picked.sort_by_key(|p| p.0);
    picked.into_iter().map(|p| p.1).collect()
}

/// What the talk left open: an interruption, no answer, a check still failing, a question.
fn open_of(talk: &Talk, w: &Work, last: Option<&[Unit]>) -> Vec<String> {
    let mut open = Vec::new();
    if w.interrupted {
        open.push("interrupted by the user".to_owned());
    }
    if talk.assistant_texts.is_empty() {
        open.push(if talk.calls.is_empty() {
            "no answer".to_owned()
        } else {
            "unfinished, no final answer".to_owned()
        });
    } else if talk.notes_after > 0 && !w.errors.is_empty() {
        open.push(format!(
            "ended on an error: {}",
            w.errors[w.errors.len() - 1]
        ));
    }
    if let Some(r) = w.runs.iter().rev().find(|r| {
        matches!(
            r.kind,
            Kind::Test | Kind::Build | Kind::Lint | Kind::Typecheck
        )
    }) && r.failed
    {
        open.push(format!("still failing: {}", describe_run(r)));
    }
    if let Some(q) = last
        .and_then(|us| us.last())
        .filter(|u| u.text.trim_end().ends_with('?') && !sentences::is_closer(&u.text))
    {
        open.push(format!("asked the user: {}", request::cut(&q.text, 160)));
    }
    open
}

/// L2 for one talk.
pub fn talk_summary(talk: &Talk) -> TalkSummary {
    let zh = talk.lang == Lang::Zh;
    let l = labels(talk.lang);
    let w = of_talk(talk);
    let request = request::request(&talk.prompt, 300);
    let texts: Vec<Vec<Unit>> = talk.assistant_texts.iter().map(|t| units(t)).collect();
    let last = texts.last().map(Vec::as_slice);
    let result = last.and_then(result_of);
    let found = found_of(&texts, result.as_deref(), 45);
    let did = did_items(&w, zh);
    let open = open_of(talk, &w, last);
    let stop = if zh { "。" } else { "." };
    let end = |s: &str| {
        let s = s.trim_end_matches([',', ';', ':', '，', '；', '：']);
        if s.ends_with(['.', '!', '?', '…', '。', '！', '？']) {
            s.to_owned()
        } else {
            format!("{s}{stop}")
        }
    };
    let mut parts: Vec<String> = Vec::new();
    if !request.is_empty() {
        parts.push(format!(
            "{}{}",
            l.asked,
            end(&words(&request::cut(&request, 200), 30))
        ));
    }
    if !did.is_empty() {
        parts.push(format!("{}{}", l.did, end(&words(&did.join("; "), 60))));
    }
    if !found.is_empty() {
        let found: Vec<String> = found.iter().map(|f| end(f)).collect();
        parts.push(format!("{}{}", l.found, found.join(" ")));
    }
    if let Some(r) = &result {
        parts.push(format!("{}{}", l.result, end(&words(r, 35))));
    }
    if !open.is_empty() {
        parts.push(format!("{}{}", l.open, end(&open.join("; "))));
    }
    let completed = result
        .clone()
        .or_else(|| did.first().cloned())
        .unwrap_or_default();
    TalkSummary {
        prompt_number: talk.prompt_number,
        user_request: request,
        summary: parts.join(" "),
        completed,
        files_involved: {
            // Edits an answer states (Aider, Cursor's editor) before the files tools touched.
            let mut files: Vec<String> = w.edits.iter().map(|e| e.path.clone()).collect();
            files.extend(talk_files(talk));
            super::dedup(files).into_iter().take(30).collect()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compact::{Call, Note, NoteKind};
    use serde_json::json;

    fn talk(prompt: &str, texts: &[&str], calls: Vec<Call>, notes: Vec<Note>) -> Talk {
        Talk {
            prompt_number: 1,
            prompt: prompt.into(),
            assistant_texts: texts.iter().map(|t| (*t).to_owned()).collect(),
            calls,
            notes_after: notes.len(),
            notes,
            raw_tokens: 0,
            lang: Lang::En,
            ts: None,
        }
    }

    fn call(tool: &str, input: serde_json::Value, output: &str, is_error: bool) -> Call {
        Call {
            message_id: "m".into(),
            tool_name: tool.into(),
            input,
            output: output.into(),
            is_error,
            ts: None,
        }
    }

    #[test]
    fn a_talk_says_what_was_done_and_found_not_its_pleasantries() {
        let t = talk(
            "<ide_opened_file>The user opened the file /x.md in the IDE.</ide_opened_file>\
             Can you add tar support to the manifest tool?",
            &[
                "Let me look at the current code first.",
                "Perfect! Both features are now committed: 70f2781 adds tar archive support to \
                 deep_manifest.py, and the tests cover .tar.gz files.",
                "Perfect!",
            ],
            vec![
                call(
                    "Edit",
                    json!({"file_path": "/r/deep_manifest.py", "old_string": "",
                           "new_string": "def process_tar(path):\n    pass"}),
                    "The file /r/deep_manifest.py has been updated.",
                    false,
                ),
                call(
                    "Bash",
                    json!({"command": "pytest -q"}),
                    "........\n42 passed in 1.20s",
                    false,
                ),
                call(
                    "Bash",
                    json!({"command": "git commit -am 'Add tar support'"}),
                    "[main 70f2781] Add tar support\n 1 file changed",
                    false,
                ),
            ],
            vec![],
        );
        let s = talk_summary(&t);
        assert_eq!(
            s.user_request,
            "Can you add tar support to the manifest tool?"
        );
        assert!(
            s.summary.contains("Did: edited deep_manifest.py (process_tar()); pytest: 42 passed; committed 70f2781 \"Add tar support\"."),
            "{}",
            s.summary
        );
        assert!(
            s.summary
                .contains("Found: Both features are now committed: 70f2781"),
            "{}",
            s.summary
        );
        assert!(!s.summary.contains("Perfect"), "{}", s.summary);
        assert!(!s.summary.contains("ide_opened_file"), "{}", s.summary);
        assert!(!s.summary.contains("Let me"), "{}", s.summary);
    }

    #[test]
    fn a_summary_reads_back_by_its_labels() {
        let parts = split_labels(
            "Asked: fix the date test. Did: edited date.ts (parse()); npm test: 3 passed. \
             Found: The parser dropped the zone: see Did: above. Open: asked the user: ship it?",
        );
        let names: Vec<&str> = parts.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(names, ["Asked", "Did", "Found", "Open"]);
        assert_eq!(parts[1].1, "edited date.ts (parse()); npm test: 3 passed.");
        assert_eq!(parts[2].1, "The parser dropped the zone: see Did: above.");
        let zh = split_labels("请求：修复测试。完成：修改 a.rs。");
        assert_eq!(zh[1], ("完成".to_owned(), "修改 a.rs。".to_owned()));
        let model = split_labels("The build was slow because of LTO.");
        assert_eq!(
            model,
            [(
                "Summary".to_owned(),
                "The build was slow because of LTO.".to_owned()
            )]
        );
    }

    #[test]
    fn an_interrupted_or_failing_talk_says_what_is_open() {
        let t = talk(
            "make the tests pass",
            &["The parser now keeps the date."],
            vec![call(
                "Bash",
                json!({"command": "uv run pytest"}),
                "=== 5 failed, 6 passed in 0.3s ===",
                true,
            )],
            vec![Note {
                kind: NoteKind::User,
                text: "[Request interrupted by user]".into(),
            }],
        );
        let s = talk_summary(&t);
        assert!(
            s.summary.contains(
                "Open: interrupted by the user; still failing: pytest: 5 failed, 6 passed."
            ),
            "{}",
            s.summary
        );
        assert_eq!(s.completed, "The parser now keeps the date.");
        // No answer at all.
        let s = talk_summary(&talk("summarize it now", &[], vec![], vec![]));
        assert_eq!(s.summary, "Asked: summarize it now. Open: no answer.");
    }

    #[test]
    fn aider_notes_give_commits_undos_and_lint_failures() {
        let notes = [
            "Applied edit to aider/commands.py",
            "Commit a27fbf1 feat: Use AnsiSource in cmd_diff",
            "flake8...................................................................Failed",
            "aider/commands.py:148:22: F821 undefined name 'StringSource'",
            "/undo",
            "Removed: a27fbf1 feat: Use AnsiSource in cmd_diff",
            "^C KeyboardInterrupt",
        ];
        let t = talk(
            "in cmd_diff, use AnsiSource",
            &[
                "I'll change it:\n\naider/commands.py\n```python\n<<<<<<< SEARCH\n\
               source = StringSource(diff)\n=======\nsource = AnsiSource(diff)\n>>>>>>> REPLACE\n```\n\
               This keeps git's colours in the pager.",
            ],
            vec![],
            notes
                .iter()
                .map(|n| Note {
                    kind: if n.starts_with('/') {
                        NoteKind::User
                    } else {
                        NoteKind::Program
                    },
                    text: (*n).into(),
                })
                .collect(),
        );
        let s = talk_summary(&t);
        for want in [
            "edited commands.py (`source = AnsiSource(diff)`)",
            "flake8: aider/commands.py:148:22: F821 undefined name 'StringSource'",
            "committed a27fbf1 \"feat: Use AnsiSource in cmd_diff\"",
            "undid a27fbf1",
            "interrupted by the user",
        ] {
            assert!(s.summary.contains(want), "{want} in {}", s.summary);
        }
    }
}
