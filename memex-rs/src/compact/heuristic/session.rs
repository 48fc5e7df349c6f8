//! L3 from the session's L2s (never from raw): a title-quality line about the talks that did
//! the most, then key points of the work done and decided, commits, checks, and what was left
//! open, at most [`MAX_WORDS`] words in all.

use std::collections::BTreeMap;

use super::request::{as_title, cut};
use super::sentences::split_sentences;
use super::talk::words;
use super::technologies;
use crate::compact::{Lang, SessionSummary, TalkSummary};

/// Words of an L3 (summary and key points together).
pub const MAX_WORDS: usize = 120;

/// One L2 read back into its parts.
#[derive(Debug, Default)]
struct Parts {
    number: i64,
    asked: String,
    did: Vec<String>,
    found: Vec<String>,
    result: String,
    open: Vec<String>,
    weight: f64,
}

/// Splits a heuristic L2 summary at its labels; a summary without labels (written by a model)
/// is all findings.
fn parse(t: &TalkSummary) -> Parts {
    let mut p = Parts {
        number: t.prompt_number,
        asked: t.user_request.clone(),
        result: t.completed.clone(),
        ..Parts::default()
    };
    let parts = super::talk::split_labels(&t.summary);
    if parts.len() == 1 && parts[0].0 == "Summary" {
        p.found = split_sentences(&t.summary);
        return p;
    }
    for (label, whole) in parts {
        let text = whole
            .strip_suffix(['.', '。'])
            .unwrap_or(&whole)
            .trim()
            .to_owned();
        match label.as_str() {
            "Did" | "完成" => p.did = text.split("; ").map(str::to_owned).collect(),
            "Found" | "发现" => p.found = split_sentences(&whole),
            "Result" | "结果" if p.result.is_empty() => p.result = text,
            "Open" | "未决" => p.open = text.split("; ").map(str::to_owned).collect(),
            _ => {}
        }
    }
    p
}

/// The verbs an L2 "Did" item about files starts with.
const CHANGE_VERBS: &[&str] = &[
    "created ",
    "edited ",
    "deleted ",
    "proposed changes to ",
    "新建 ",
    "修改 ",
    "删除 ",
    "建议修改 ",
];

/// `d` without its code samples: "edited a.py (`x = 1`), b.py (f())" → "edited a.py, b.py (f())".
fn without_samples(d: &str) -> String {
    let mut out = String::new();
    let mut rest = d;
    while let Some(i) = rest.find(" (`") {
        out.push_str(&rest[..i]);
        rest = match rest[i..].find("`)") {
            Some(j) => &rest[i + j + 2..],
            None => "",
        };
    }
    out.push_str(rest);
    out
}

/// The files of a change item, split at the commas outside parentheses.
fn change_files(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    let b = list.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'(' => depth += 1,
            b')' => depth -= 1,
            b',' if depth == 0 && b.get(i + 1) == Some(&b' ') => {
                out.push(list[start..i].trim().to_owned());
                start = i + 2;
            }
            _ => {}
        }
    }
    let last = list[start..].trim();
    // "… and 3 more" closes a long list: not a file.
    let last = last.split(" and ").next().unwrap_or(last).trim();
    if !last.is_empty() {
        out.push(last.to_owned());
    }
    out
}

/// A request that only carries the talk on ("go ahead", "yes", "continue"): not a title.
fn is_continuation(asked: &str) -> bool {
    let t = as_title(asked, 200);
    let words: Vec<&str> = t.split_whitespace().collect();
    words.len() <= 3 && !words.iter().any(|w| super::sentences::is_file_token(w))
}

fn count(s: &str) -> usize {
    s.split_whitespace().count()
}

/// Key points in the order they are shown, each with the priority it is kept by.
struct Points {
    items: Vec<(u8, usize, String)>,
}

impl Points {
    fn push(&mut self, priority: u8, s: String) {
        let s = s.trim().to_owned();
        if s.is_empty()
            || self
                .items
                .iter()
                .any(|(_, _, x)| x.contains(s.as_str()) || s.contains(x.as_str()))
        {
            return;
        }
        let order = self.items.len();
        self.items.push((priority, order, s));
    }

    /// The points that fit in `budget` words, by priority, shown in their order.
    fn fit(mut self, budget: usize) -> Vec<String> {
        self.items.sort_by_key(|x| (x.0, x.1));
        let mut used = 0;
        let mut kept: Vec<(usize, String)> = Vec::new();
        for (_, order, s) in self.items {
            let n = count(&s);
            if used + n <= budget {
                used += n;
                kept.push((order, s));
            } else if budget.saturating_sub(used) >= 8 {
                let left = budget - used;
                let short = words(&s, left - 1);
                used += count(&short);
                kept.push((order, short));
            }
        }
        kept.sort_by_key(|k| k.0);
        kept.into_iter().map(|k| k.1).collect()
    }
}

/// L3 from the session's L2s and their raw sizes (the talks that did the most lead).
pub fn session_summary(
    talks: &[TalkSummary],
    raw_tokens: &[u64],
    lang: Lang,
    project: Option<&str>,
) -> SessionSummary {
    let zh = lang == Lang::Zh;
    let mut file_counts: BTreeMap<&str, usize> = BTreeMap::new();
    for t in talks {
        for f in &t.files_involved {
            *file_counts.entry(f.as_str()).or_default() += 1;
        }
    }
    let mut files: Vec<(&str, usize)> = file_counts.into_iter().collect();
    files.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let files: Vec<String> = files
        .into_iter()
        .take(20)
        .map(|(f, _)| f.to_owned())
        .collect();
    let texts: Vec<&str> = talks
        .iter()
        .flat_map(|t| [t.user_request.as_str(), t.summary.as_str()])
        .collect();
    let technologies = technologies(&files, &texts);

    let mut parts: Vec<Parts> = talks.iter().map(parse).collect();
    let total: u64 = raw_tokens.iter().sum::<u64>().max(1);
    for (i, p) in parts.iter_mut().enumerate() {
        let raw = raw_tokens.get(i).copied().unwrap_or(0) as f64 / total as f64;
        p.weight = raw + 0.1 * p.did.len().min(5) as f64;
    }
    let main = parts
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.weight.total_cmp(&b.1.weight).then(b.0.cmp(&a.0)))
        .map_or(0, |m| m.0);
    let Some(lead) = parts.get(main) else {
        return SessionSummary {
            summary: String::new(),
            key_points: Vec::new(),
            files_involved: files,
            technologies,
            talks_covered: 0,
        };
    };
    let project_name = project
        .and_then(|p| p.rsplit('/').find(|s| !s.is_empty()))
        .unwrap_or("");
    // The line: what the main talk asked, as a title, and what came of it. A talk that only
    // carried on ("go ahead") is titled by the request it carried on.
    let asked = if is_continuation(&lead.asked) {
        (0..main)
            .rev()
            .chain(main + 1..parts.len())
            .map(|i| parts[i].asked.as_str())
            .find(|a| !is_continuation(a))
            .unwrap_or(&lead.asked)
    } else {
        &lead.asked
    };
    // A pasted error is titled by the error.
    let asked = asked.strip_prefix("pasted error: ").unwrap_or(asked);
    let title = if asked.is_empty() {
        cut(&lead.result, 120)
    } else {
        as_title(asked, 140)
    };
    let stop = if zh { "。" } else { "." };
    // A title cut short keeps its `…`; a whole one ends as a sentence.
    let mut summary = title.trim_end_matches(['.', '。']).to_owned();
    if !summary.ends_with(['…', '?', '!', '？', '！']) {
        summary.push_str(stop);
    }
    let outcome = if !lead.result.is_empty() {
        words(&lead.result, 22)
    } else {
        words(
            &lead
                .did
                .iter()
                .take(2)
                .cloned()
                .collect::<Vec<_>>()
                .join("; "),
            22,
        )
    };
    if !outcome.is_empty() {
        summary.push(' ');
        summary.push_str(&outcome);
        if !outcome.ends_with(['.', '!', '?', '…', '。']) {
            summary.push_str(stop);
        }
    }
    if talks.len() > 1 {
        summary.push_str(&if zh {
            format!(" 共 {} 个请求", talks.len())
        } else {
            format!(
                " ({} requests{})",
                talks.len(),
                if project_name.is_empty() {
                    String::new()
                } else {
                    format!(" in {project_name}")
                }
            )
        });
        if zh {
            summary.push('。');
        }
    }
    let summary = summary.trim().to_owned();

    // Key points: work done across the session (the main talk's first), talks' own outcomes,
    // findings, and what the last talk left open.
    let mut points = Points { items: Vec::new() };
    let mut by_weight: Vec<usize> = (0..parts.len()).collect();
    by_weight.sort_by(|&a, &b| parts[b].weight.total_cmp(&parts[a].weight).then(a.cmp(&b)));
    let last = parts.len() - 1;
    for o in &parts[last].open {
        points.push(1, format!("{}{o}", if zh { "未决：" } else { "Open: " }));
    }
    for p in parts.iter().take(last) {
        for o in p.open.iter().filter(|o| o.starts_with("still failing")) {
            points.push(3, format!("Open after #{}: {o}", p.number));
        }
    }
    // Files changed across the session, one point per kind of change, the main talk's first.
    let mut changes: Vec<(&str, Vec<(String, String)>)> = Vec::new();
    let mut errors = 0;
    let mut checks: Vec<String> = Vec::new();
    for &i in &by_weight {
        let p = &parts[i];
        let rank = if i == main { 2 } else { 4 };
        for d in &p.did {
            let d = without_samples(d);
            if let Some(verb) = CHANGE_VERBS.iter().find(|v| d.starts_with(**v)) {
                let at = match changes.iter().position(|c| c.0 == *verb) {
                    Some(k) => k,
                    None => {
                        changes.push((verb, Vec::new()));
                        changes.len() - 1
                    }
                };
                for f in change_files(&d[verb.len()..]) {
                    let name = f.split(" (").next().unwrap_or(&f).to_owned();
                    if !changes[at].1.iter().any(|(n, _)| *n == name) {
                        changes[at].1.push((name, f));
                    }
                }
                continue;
            }
            let pri = if d.starts_with("committed")
                || d.starts_with("undid")
                || d.starts_with("the user ran")
            {
                rank.min(3)
            } else if d.starts_with("error") {
                errors += 1;
                if errors > 2 {
                    continue;
                }
                7
            } else {
                // A check run in many talks ("pytest: 80 passed") is told once, by the talk
                // that did the most.
                if let Some((tool, _)) = d.split_once(": ")
                    && tool.split_whitespace().count() <= 3
                {
                    if checks.contains(&tool.to_owned()) {
                        continue;
                    }
                    checks.push(tool.to_owned());
                }
                rank + 1
            };
            points.push(pri, words(&d, 30));
        }
    }
    for (verb, files) in changes {
        let shown: Vec<&str> = files.iter().take(6).map(|(_, f)| f.as_str()).collect();
        let more = files.len().saturating_sub(6);
        let mut line = format!("{verb}{}", shown.join(", "));
        if more > 0 {
            line.push_str(&format!(" and {more} more"));
        }
        points.push(2, words(&line, 40));
    }
    let multi = parts.len() > 1;
    for (i, p) in parts.iter().enumerate() {
        if multi && i != main {
            let asked = as_title(&p.asked, 80);
            let what = if !p.result.is_empty() {
                words(&p.result, 16)
            } else if let Some(f) = p.found.first() {
                words(f, 16)
            } else {
                p.did.first().map(|d| words(d, 16)).unwrap_or_default()
            };
            let line = match (asked.is_empty(), what.is_empty()) {
                (false, false) => format!("#{} {}: {what}", p.number, words(&asked, 12)),
                (false, true) => format!("#{} {}", p.number, words(&asked, 14)),
                (true, false) => format!("#{} {what}", p.number),
                (true, true) => continue,
            };
            points.push(5, line);
        }
    }
    for &i in &by_weight {
        let p = &parts[i];
        let pri = if i == main { 4 } else { 6 };
        for f in p.found.iter().take(3) {
            points.push(pri, words(f, 28));
        }
        if i == main && !p.result.is_empty() && words(&p.result, 22) != outcome {
            points.push(pri, words(&p.result, 28));
        }
    }
    let key_points = points.fit(MAX_WORDS.saturating_sub(count(&summary)));

    SessionSummary {
        summary,
        key_points,
        files_involved: files,
        technologies,
        talks_covered: talks.iter().map(|t| t.prompt_number).max().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l2(n: i64, request: &str, summary: &str, completed: &str) -> TalkSummary {
        TalkSummary {
            prompt_number: n,
            user_request: request.into(),
            summary: summary.into(),
            completed: completed.into(),
            files_involved: vec![],
        }
    }

    #[test]
    fn the_talk_that_did_the_most_leads_and_the_open_end_is_kept() {
        let talks = vec![
            l2(
                1,
                "hi",
                "Asked: hi. Result: Hello! What are we working on?",
                "Hello! What are we working on?",
            ),
            l2(
                2,
                "Can you please add token totals to the index page?",
                "Asked: Can you please add token totals to the index page? Did: edited \
                 converter.py (process_projects_hierarchy()), renderer.py; pytest: 80 passed; \
                 committed 1b6c52f \"Add token totals\". Found: Tokens are deduplicated by \
                 request id. Result: The index now shows token totals per project.",
                "The index now shows token totals per project.",
            ),
            l2(
                3,
                "thanks",
                "Asked: thanks. Result: You're welcome! Open: interrupted by the user.",
                "",
            ),
        ];
        let s = session_summary(
            &talks,
            &[10, 5000, 10],
            Lang::En,
            Some("/w/claude-code-log"),
        );
        assert!(
            s.summary.starts_with(
                "Add token totals to the index page. The index now shows token totals per project."
            ),
            "{}",
            s.summary
        );
        assert!(
            s.summary.ends_with("(3 requests in claude-code-log)"),
            "{}",
            s.summary
        );
        let all = s.key_points.join("\n");
        for want in [
            "edited converter.py (process_projects_hierarchy()), renderer.py",
            "pytest: 80 passed",
            "committed 1b6c52f",
            "Open: interrupted by the user",
            "Tokens are deduplicated by request id.",
        ] {
            assert!(all.contains(want), "{want} in {all}");
        }
        let n: usize = count(&s.summary) + s.key_points.iter().map(|k| count(k)).sum::<usize>();
        assert!(n <= MAX_WORDS, "{n} words");
    }

    #[test]
    fn a_long_session_stays_within_its_words() {
        let talks: Vec<TalkSummary> = (1..=40)
            .map(|i| {
                l2(
                    i,
                    &format!("change number {i} of the parser module and its tests"),
                    &format!(
                        "Asked: change number {i}. Did: edited parser{i}.rs (parse_{i}()); cargo \
                         test: {i} passed. Found: The parser {i} now handles the case {i} of the \
                         grammar properly."
                    ),
                    "",
                )
            })
            .collect();
        let raw: Vec<u64> = (1..=40).collect();
        let s = session_summary(&talks, &raw, Lang::En, None);
        let n: usize = count(&s.summary) + s.key_points.iter().map(|k| count(k)).sum::<usize>();
        assert!(n <= MAX_WORDS, "{n} words: {s:?}");
        assert!(
            s.summary
                .starts_with("Change number 40 of the parser module"),
            "{}",
            s.summary
        );
    }

    #[test]
    fn a_model_written_l2_is_read_as_findings() {
        let talks = vec![l2(
            1,
            "why is the build slow?",
            "The build was slow because of LTO. Turning it off for dev builds cut it to 40 s.",
            "Turned LTO off for dev builds.",
        )];
        let s = session_summary(&talks, &[100], Lang::En, None);
        assert_eq!(
            s.summary,
            "Why is the build slow. Turned LTO off for dev builds."
        );
        assert!(
            s.key_points.iter().any(|k| k.contains("because of LTO")),
            "{:?}",
            s.key_points
        );
    }
}
