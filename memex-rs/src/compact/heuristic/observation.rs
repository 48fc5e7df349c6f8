//! L1: one observation per merged operation, saying what changed or was learned ("Edited
//! renderer.py: get_project_display_name()", "pytest: 5 failed, 6 passed"), never a tool's
//! stock text.

use serde_json::Value;

use super::work::{Change, Edit, Run, Work, short_path, short_tool};
use super::{Op, dedup, files_of, guess_type, one_line, op_of, request};
use crate::compact::{Call, Lang, Observation, Talk};

/// Lines tools print about themselves rather than about the work.
const STOCK: &[&str] = &[
    "has been updated",
    "here's the result of running",
    "todos have been modified",
    "continue to use the todo list",
    "file created successfully",
    "has been modified successfully",
    "successfully modified file",
    "successfully updated the todo list",
    "successfully wrote",
    "successfully created",
    "applied ",
    "the file ",
    "index: ",
    "(no output)",
    "command: ",
    "directory: ",
    "<system-reminder>",
    "whenever you read a file",
    "tool_use_error",
    "updated task #",
    "agentid:",
    "to continue this agent",
    "you can now continue with the user's answers",
];

/// The sentence of an agent's report that tells most (a sub-agent's answer opens with
/// "Perfect! Now I have a comprehensive understanding." as often as with its finding).
pub fn best_sentence(output: &str, max: usize) -> Option<String> {
    use super::sentences::{score, units};
    let clean = ai_cli_session_collector::text::typed_text(output);
    let us: Vec<_> = units(&clean)
        .into_iter()
        .filter(|u| !is_stock(&u.text))
        .collect();
    let mut cands: Vec<(f32, String)> = Vec::new();
    for (i, u) in us.iter().enumerate() {
        if !u.bullet && u.text.trim_end().ends_with(':') {
            // A lead and its list read as one finding: "Two tests depend on the local
            // timezone: src/date.test.ts:14, src/report.test.ts:88".
            let items: Vec<&str> = us[i + 1..]
                .iter()
                .take_while(|b| b.bullet)
                .map(|b| b.text.as_str())
                .collect();
            if !items.is_empty() {
                let best = items.iter().map(|t| score(t)).fold(0.0f32, f32::max);
                cands.push((
                    best + 1.0,
                    format!("{} {}", u.text.trim(), items.join(", ")),
                ));
            }
        } else {
            cands.push((score(&u.text), u.text.clone()));
        }
    }
    cands
        .into_iter()
        .filter(|(sc, _)| *sc > 0.0)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, t)| one_line(&t, max))
        .or_else(|| informative_line(output, max))
}

/// A task-list tool's call ("Added task: Research plan mode", "Task 1: in progress, owner
/// alice"), from its input.
fn task_change(call: &Call) -> Option<String> {
    let v = &call.input;
    let field = |k: &str| v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    if let Some(subject) = field("subject") {
        return Some(format!("Added task: {}", one_line(subject, 80)));
    }
    let id = field("taskId")
        .or_else(|| field("task_id"))
        .or_else(|| field("id"))?;
    let mut parts: Vec<String> = Vec::new();
    if let Some(st) = field("status") {
        parts.push(st.replace('_', " "));
    }
    if let Some(o) = field("owner") {
        parts.push(format!("owner {o}"));
    }
    Some(if parts.is_empty() {
        format!("Task {id}")
    } else {
        format!("Task {id}: {}", parts.join(", "))
    })
}

/// A question put to the user and the answer, from the tool's input and result
/// (`User has answered your questions: "Which color?"="Green".`).
fn question_answer(call: &Call) -> Option<(String, Option<String>)> {
    let out = &call.output;
    let pairs: Vec<(String, String)> = out
        .split("\"=\"")
        .collect::<Vec<_>>()
        .windows(2)
        .filter_map(|w| {
            let q = w[0].rsplit('"').next()?;
            let a = w[1].split('"').next()?;
            (!q.trim().is_empty()).then(|| (q.trim().to_owned(), a.trim().to_owned()))
        })
        .collect();
    if let Some((q, a)) = pairs.first() {
        return Some((one_line(q, 100), Some(one_line(a, 80))));
    }
    let v = &call.input;
    let q = v.get("question").and_then(Value::as_str).or_else(|| {
        v.get("questions")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(|q| q.get("question").and_then(Value::as_str))
    })?;
    Some((one_line(q, 100), informative_line(out, 80)))
}

/// The first line of a tool's output that says something of the work.
pub fn informative_line(output: &str, max: usize) -> Option<String> {
    let clean = ai_cli_session_collector::text::typed_text(output);
    clean
        .lines()
        .map(|l| l.trim().trim_start_matches("Output:").trim())
        .filter(|l| l.chars().filter(|c| c.is_alphanumeric()).count() >= 3)
        .filter(|l| !l.starts_with("```") && !l.starts_with("===") && !l.starts_with("---"))
        .find(|l| !is_stock(l))
        .map(|l| one_line(l, max))
}

/// Whether a line or sentence is a tool's stock text ([`STOCK`]).
fn is_stock(t: &str) -> bool {
    let lower = t.to_lowercase();
    STOCK.iter().any(|s| lower.contains(s))
}

/// "renderer.py (get_project_display_name())", "index.ts: added `console.log('hello bob')`".
pub fn describe_edit(e: &Edit) -> String {
    let name = short_path(&e.path);
    if !e.symbols.is_empty() {
        format!("{name} ({})", e.symbols.join(", "))
    } else if let Some(s) = &e.sample {
        format!("{name} (`{s}`)")
    } else {
        name
    }
}

/// "pytest: 80 passed", "git commit", "`make deploy`: exit code 2".
pub fn describe_run(r: &Run) -> String {
    let who = if r.by_user { "the user ran " } else { "" };
    let what = if r.tool.is_empty() || (r.by_user && r.kind == super::work::Kind::Other) {
        format!("`{}`", one_line(&r.command, 50))
    } else {
        r.tool.clone()
    };
    match &r.outcome {
        Some(o) => format!("{who}{what}: {o}"),
        None if r.failed => format!("{who}{what}: failed"),
        None => format!("{who}{what}"),
    }
}

/// The verb of a change.
pub fn verb(c: Change, zh: bool) -> &'static str {
    match (c, zh) {
        (Change::Created, false) => "created",
        (Change::Edited, false) => "edited",
        (Change::Deleted, false) => "deleted",
        (Change::Proposed, false) => "proposed changes to",
        (Change::Created, true) => "新建",
        (Change::Edited, true) => "修改",
        (Change::Deleted, true) => "删除",
        (Change::Proposed, true) => "建议修改",
    }
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// A plan tool's list: "3 of 6 done".
fn plan_state(call: &Call) -> Option<String> {
    let items = call
        .input
        .get("todos")
        .or_else(|| call.input.get("plan"))
        .or_else(|| call.input.get("items"))
        .and_then(Value::as_array)?;
    let done = items
        .iter()
        .filter(|t| {
            t.get("status")
                .and_then(Value::as_str)
                .is_some_and(|s| s == "completed" || s == "done")
        })
        .count();
    let doing = items.iter().find_map(|t| {
        (t.get("status").and_then(Value::as_str) == Some("in_progress"))
            .then(|| {
                t.get("content")
                    .or_else(|| t.get("step"))
                    .or_else(|| t.get("description"))
                    .and_then(Value::as_str)
            })
            .flatten()
    });
    let mut s = format!("{done} of {} done", items.len());
    if let Some(d) = doing {
        s.push_str(&format!("; now: {}", one_line(d, 60)));
    }
    Some(s)
}

/// A call's target when nothing else names it: a path, a pattern, a query.
fn target(call: &Call) -> String {
    let v = &call.input;
    for &k in super::PATH_KEYS {
        if let Some(p) = v.get(k).and_then(Value::as_str) {
            return short_path(p);
        }
    }
    for k in [
        "pattern",
        "query",
        "search_term",
        "url",
        "description",
        "skill",
        "name",
        "prompt",
    ] {
        if let Some(p) = v.get(k).and_then(Value::as_str) {
            return one_line(p, 60);
        }
    }
    String::new()
}

/// L1 for one group of calls.
pub fn observation(group: &[&Call], talk: &Talk) -> Observation {
    let first = group[0];
    let last = group[group.len() - 1];
    let op = op_of(&first.tool_name);
    let zh = talk.lang == Lang::Zh;
    let mut files_read = Vec::new();
    let mut files_modified = Vec::new();
    let mut work = Work::default();
    for c in group {
        let (r, m) = files_of(c);
        files_read.extend(r);
        files_modified.extend(m);
        work.add_call(c);
    }
    let files_read = dedup(files_read);
    let files_modified = dedup(files_modified);
    let n = group.len();
    let errors = group.iter().filter(|c| c.is_error).count();
    let names = |files: &[String]| {
        let shown: Vec<String> = files.iter().take(4).map(|f| short_path(f)).collect();
        let more = files.len().saturating_sub(4);
        if more > 0 {
            format!("{} and {more} more", shown.join(", "))
        } else {
            shown.join(", ")
        }
    };
    let (title, detail): (String, Option<String>) = match op {
        Op::Edit if !work.edits.is_empty() => {
            let e = &work.edits[0];
            let mut t = format!("{} {}", capitalised(verb(e.change, zh)), describe_edit(e));
            if work.edits.len() > 1 {
                let rest: Vec<String> = work.edits[1..].iter().map(describe_edit).collect();
                t.push_str(&format!(", {}", rest.join(", ")));
            }
            (t, work.errors.first().cloned())
        }
        Op::Edit => (
            work.errors
                .first()
                .cloned()
                .unwrap_or_else(|| format!("{} {}", first.tool_name, target(first))),
            None,
        ),
        Op::Shell if !work.runs.is_empty() => {
            let runs: Vec<String> = work.runs.iter().map(describe_run).collect();
            (capitalised(&runs.join("; ")), work.errors.first().cloned())
        }
        Op::Shell => {
            let cmds: Vec<String> = group
                .iter()
                .filter_map(|c| super::work::command_of(c))
                .map(|c| format!("`{}`", one_line(&c, 60)))
                .take(3)
                .collect();
            let t = if cmds.is_empty() {
                format!("{} ×{n}", first.tool_name)
            } else if zh {
                format!("运行 {}", cmds.join("、"))
            } else {
                format!("Ran {}", cmds.join(", "))
            };
            let d = work
                .errors
                .first()
                .cloned()
                .or_else(|| informative_line(&last.output, 120));
            (t, d)
        }
        Op::Read => {
            let t = if zh {
                format!("读取 {}", names(&files_read))
            } else {
                format!("Read {}", names(&files_read))
            };
            (t, work.errors.first().cloned())
        }
        Op::Search => {
            let what: Vec<String> = group
                .iter()
                .map(|c| target(c))
                .filter(|t| !t.is_empty())
                .take(3)
                .collect();
            let t = if zh {
                format!("搜索 {}", what.join("、"))
            } else {
                format!("Searched {}", what.join(", "))
            };
            let hits = last.output.lines().filter(|l| !l.trim().is_empty()).count();
            let d = work.errors.first().cloned().or_else(|| {
                (hits > 0 && !last.is_error).then(|| {
                    if zh {
                        format!("{hits} 行结果")
                    } else {
                        format!("{hits} result line{}", if hits == 1 { "" } else { "s" })
                    }
                })
            });
            (t, d)
        }
        Op::Agent => {
            let t = work
                .agents
                .iter()
                .map(|a| capitalised(a))
                .collect::<Vec<_>>()
                .join("; ");
            (t, best_sentence(&last.output, 160))
        }
        Op::Web => {
            let t = if zh {
                format!("网络：{}", work.web.join("、"))
            } else {
                format!("Web: {}", work.web.join(", "))
            };
            (
                t,
                work.errors
                    .first()
                    .cloned()
                    .or_else(|| informative_line(&last.output, 120)),
            )
        }
        Op::Plan => {
            let t = match plan_state(last) {
                Some(s) if zh => format!("更新计划：{s}"),
                Some(s) => format!("Updated the plan: {s}"),
                None => format!("{} ×{n}", first.tool_name),
            };
            (t, None)
        }
        Op::Other
            if first.tool_name.to_ascii_lowercase().starts_with("task")
                && task_change(last).is_some() =>
        {
            let changes: Vec<String> = dedup(group.iter().filter_map(|c| task_change(c)).collect());
            let t = changes.join("; ");
            (t, work.errors.first().cloned())
        }
        Op::Other if first.tool_name.to_ascii_lowercase().contains("question") => {
            match question_answer(last) {
                Some((q, a)) => {
                    let t = if zh {
                        format!("问用户：{q}")
                    } else {
                        format!("Asked the user: {q}")
                    };
                    let d = a.map(|a| {
                        if zh {
                            format!("回答：{a}")
                        } else {
                            format!("answer: {a}")
                        }
                    });
                    (t, d)
                }
                None => (
                    short_tool(&first.tool_name).to_owned(),
                    informative_line(&last.output, 160),
                ),
            }
        }
        Op::Other => {
            let tool = short_tool(&first.tool_name);
            let t = match target(first) {
                x if x.is_empty() => tool.to_owned(),
                x => format!("{tool} {x}"),
            };
            let d = work
                .errors
                .first()
                .cloned()
                .or_else(|| informative_line(&last.output, 160));
            (t, d)
        }
    };
    let title = one_line(
        if title.trim().is_empty() {
            &first.tool_name
        } else {
            title.trim()
        },
        120,
    );
    let subtitle = detail.clone().unwrap_or_default();
    let mut facts = Vec::new();
    if errors > 0 {
        facts.push(if zh {
            format!("{errors} 次调用出错")
        } else {
            format!("{errors} of {n} calls failed")
        });
    }
    for e in work.edits.iter().take(5) {
        facts.push(format!("{} {}", verb(e.change, zh), describe_edit(e)));
    }
    for r in work.runs.iter().take(3) {
        facts.push(describe_run(r));
    }
    for c in work.commits.iter().take(3) {
        facts.push(format!("commit {} {}", c.hash, c.message));
    }
    for f in files_read.iter().take(5) {
        facts.push(if zh {
            format!("读取 {f}")
        } else {
            format!("read {f}")
        });
    }
    let asked = request::request(&talk.prompt, 200);
    let narrative = match (&detail, zh) {
        (Some(d), false) => format!("For \"{asked}\": {title}. {d}"),
        (None, false) => format!("For \"{asked}\": {title}."),
        (Some(d), true) => format!("为“{asked}”：{title}。{d}"),
        (None, true) => format!("为“{asked}”：{title}。"),
    };
    Observation {
        first_message_id: first.message_id.clone(),
        last_message_id: last.message_id.clone(),
        tool_name: first.tool_name.clone(),
        call_count: n as i64,
        kind: guess_type(op, &talk.prompt).to_owned(),
        title,
        subtitle,
        facts,
        narrative,
        files_read,
        files_modified,
        ts: first.ts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::L1Settings;
    use serde_json::json;

    fn call(id: &str, tool: &str, input: Value, output: &str, is_error: bool) -> Call {
        Call {
            message_id: id.into(),
            tool_name: tool.into(),
            input,
            output: output.into(),
            is_error,
            ts: None,
        }
    }

    fn talk(calls: Vec<Call>) -> Talk {
        Talk {
            prompt_number: 1,
            prompt: "<ide_selection>The user selected the lines 1 to 2</ide_selection>fix it"
                .into(),
            assistant_texts: vec![],
            calls,
            notes: vec![],
            notes_after: 0,
            raw_tokens: 0,
            lang: Lang::En,
            ts: None,
        }
    }

    fn observe(calls: Vec<Call>) -> Observation {
        let t = talk(calls);
        let groups = super::super::group_calls(&t.calls, &L1Settings::default());
        observation(&groups[0], &t)
    }

    #[test]
    fn an_edit_says_what_it_added_not_the_tools_stock_text() {
        let o = observe(vec![call(
            "1",
            "Edit",
            json!({"file_path": "/p/claude_code_log/renderer.py",
                   "old_string": "def old():\n    pass",
                   "new_string": "def get_project_display_name(dirs):\n    return min(dirs)"}),
            "The file /p/claude_code_log/renderer.py has been updated. Here's the result of \
             running `cat -n` on a snippet of the edited file:\n  1→def x",
            false,
        )]);
        assert_eq!(o.title, "Edited renderer.py (get_project_display_name())");
        let all = format!("{} {} {} {:?}", o.title, o.subtitle, o.narrative, o.facts);
        assert!(!all.contains("has been updated"), "{all}");
        assert!(!all.contains("ide_selection"), "{all}");
        assert!(
            o.narrative.starts_with("For \"fix it\": "),
            "{}",
            o.narrative
        );
    }

    #[test]
    fn a_test_run_says_its_counts_and_a_failed_edit_its_error() {
        let o = observe(vec![call(
            "1",
            "Bash",
            json!({"command": "uv run pytest test/test_x.py"}),
            "collected 11 items\n\ntest_x.py ..FFF\n=== 5 failed, 6 passed in 0.31s ===",
            true,
        )]);
        assert_eq!(o.title, "Pytest: 5 failed, 6 passed");
        let o = observe(vec![call(
            "1",
            "replace",
            json!({"file_path": "/p/index.ts", "old_string": "a", "new_string": "b"}),
            "Failed to edit, Expected 1 occurrence but found 4 for old_string in file: /p/index.ts",
            true,
        )]);
        assert!(
            o.title
                .starts_with("replace failed: Failed to edit, Expected 1 occurrence but found 4"),
            "{}",
            o.title
        );
        let o = observe(vec![call(
            "1",
            "TodoWrite",
            json!({"todos": [{"content": "a", "status": "completed"},
                              {"content": "b", "status": "in_progress"}]}),
            "Todos have been modified successfully. Ensure that you continue to use the todo list",
            false,
        )]);
        assert_eq!(o.title, "Updated the plan: 1 of 2 done; now: b");
        assert!(!o.narrative.contains("Todos have been"), "{}", o.narrative);
    }
}
