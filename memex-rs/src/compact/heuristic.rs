//! The `heuristic` compactor: every field of L1, L2 and L3 filled deterministically from the raw
//! messages, with zero tokens (SPEC principle 2). It is the default, the last resort of every
//! provider chain, and what an LLM's malformed output falls back to.
//!
//! Also the deterministic parts every provider shares: pruning and merging tool calls, the
//! files read and modified (straight from tool inputs), the conversation's language.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Call, Lang, Observation, SessionSummary, Talk, TalkSummary};
use crate::config::L1Settings;

/// Confidence of heuristic rows: structure is exact, meaning is guessed.
pub const CONFIDENCE: f64 = 0.3;

/// What kind of operation a tool call is; runs of the same kind are merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    Search,
    Edit,
    Shell,
    Web,
    Agent,
    Plan,
    Other,
}

pub fn op_of(tool: &str) -> Op {
    let t = tool.to_ascii_lowercase();
    match t.as_str() {
        "read" | "read_file" | "view" | "cat" | "readfile" | "read_many_files" | "notebookread" => {
            Op::Read
        }
        "grep"
        | "glob"
        | "ls"
        | "list_directory"
        | "search_file_content"
        | "find"
        | "toolsearch" => Op::Search,
        "edit"
        | "multiedit"
        | "write"
        | "write_file"
        | "replace"
        | "apply_patch"
        | "notebookedit"
        | "str_replace_based_edit_tool"
        | "edit_file"
        | "create_file" => Op::Edit,
        "bash" | "shell" | "exec_command" | "run_shell_command" | "local_shell" | "bashoutput"
        | "write_stdin" | "killshell" | "unified_exec" => Op::Shell,
        "webfetch" | "websearch" | "web_fetch" | "google_web_search" | "web_search" => Op::Web,
        "task" | "agent" | "spawn_agent" | "subagent" => Op::Agent,
        "todowrite" | "exitplanmode" | "update_plan" | "enterplanmode" => Op::Plan,
        _ if t.contains("edit") || t.contains("write") || t.contains("patch") => Op::Edit,
        _ if t.contains("read") => Op::Read,
        _ if t.contains("search") || t.contains("grep") || t.contains("find") => Op::Search,
        _ => Op::Other,
    }
}

/// The conversation's language, from the text the user wrote.
pub fn detect_lang(text: &str) -> Lang {
    let mut cjk = 0usize;
    let mut kana = 0usize;
    let mut letters = 0usize;
    for c in text.chars() {
        match c as u32 {
            0x3040..=0x30FF => kana += 1,
            0x4E00..=0x9FFF | 0x3400..=0x4DBF => cjk += 1,
            _ if c.is_alphabetic() => letters += 1,
            _ => {}
        }
    }
    // A CJK character carries about as much as a short word.
    if kana > 0 && kana * 3 >= cjk {
        Lang::Ja
    } else if cjk * 3 >= letters / 4 && cjk > 0 {
        Lang::Zh
    } else {
        Lang::En
    }
}

/// Estimated tokens of a text: a token per 4 bytes of Latin text, one per CJK character.
pub fn estimate_tokens(text: &str) -> u64 {
    let mut ascii = 0u64;
    let mut wide = 0u64;
    for c in text.chars() {
        if c.is_ascii() {
            ascii += 1;
        } else if (c as u32) >= 0x2E80 {
            wide += 1;
        } else {
            ascii += 2;
        }
    }
    ascii.div_ceil(4) + wide
}

fn str_field<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| v.get(*k).and_then(Value::as_str))
}

/// Files a tool call reads and modifies, straight from its input.
pub fn files_of(call: &Call) -> (Vec<String>, Vec<String>) {
    let op = op_of(&call.tool_name);
    let mut paths: Vec<String> = Vec::new();
    for k in [
        "file_path",
        "path",
        "notebook_path",
        "filePath",
        "absolute_path",
        "file",
    ] {
        if let Some(p) = call.input.get(k).and_then(Value::as_str)
            && !p.is_empty()
        {
            paths.push(p.to_owned());
        }
    }
    for k in ["paths", "file_paths", "files"] {
        if let Some(a) = call.input.get(k).and_then(Value::as_array) {
            paths.extend(a.iter().filter_map(Value::as_str).map(str::to_owned));
        }
    }
    // Codex's apply_patch: the patch names its files.
    let patch = call
        .input
        .get("input")
        .or_else(|| call.input.get("patch"))
        .and_then(Value::as_str)
        .or_else(|| call.input.as_str());
    let mut modified = Vec::new();
    if let Some(patch) = patch {
        for line in patch.lines() {
            for prefix in ["*** Update File: ", "*** Add File: ", "*** Delete File: "] {
                if let Some(p) = line.strip_prefix(prefix) {
                    modified.push(p.trim().to_owned());
                }
            }
        }
    }
    match op {
        Op::Edit => {
            modified.extend(paths);
            (Vec::new(), dedup(modified))
        }
        Op::Read | Op::Search => (dedup(paths), dedup(modified)),
        _ => (Vec::new(), dedup(modified)),
    }
}

fn dedup(mut v: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    v.retain(|x| seen.insert(x.clone()));
    v
}

/// The calls of a talk after pruning and merging: each group becomes one observation.
pub fn group_calls<'a>(calls: &'a [Call], s: &L1Settings) -> Vec<Vec<&'a Call>> {
    let kept: Vec<&Call> = calls
        .iter()
        .filter(|c| !s.prune_empty || c.is_error || !c.output.trim().is_empty())
        .collect();
    let mut groups: Vec<Vec<&Call>> = Vec::new();
    let mut i = 0;
    while i < kept.len() {
        let op = op_of(&kept[i].tool_name);
        let mut j = i + 1;
        while j < kept.len() && op_of(&kept[j].tool_name) == op && op != Op::Other {
            j += 1;
        }
        if s.merge_consecutive && j - i >= s.merge_threshold {
            groups.push(kept[i..j].to_vec());
        } else {
            groups.extend(kept[i..j].iter().map(|c| vec![*c]));
        }
        i = j;
    }
    groups
}

/// The first `max` characters of `s` on one line, with `…` when cut.
pub fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        format!("{}…", flat.chars().take(max).collect::<String>())
    } else {
        flat
    }
}

fn first_line(s: &str, max: usize) -> String {
    one_line(s.lines().find(|l| !l.trim().is_empty()).unwrap_or(""), max)
}

/// The observation type, guessed from the operation and the user's request.
pub fn guess_type(op: Op, request: &str) -> &'static str {
    let r = request.to_lowercase();
    let any = |words: &[&str]| words.iter().any(|w| r.contains(w));
    match op {
        Op::Edit
            if any(&[
                "fix", "bug", "error", "fail", "broken", "crash", "修复", "错误", "失败", "バグ",
                "修正",
            ]) =>
        {
            "bugfix"
        }
        Op::Edit
            if any(&[
                "refactor",
                "rename",
                "clean",
                "simplify",
                "extract",
                "重构",
                "整理",
                "リファクタ",
            ]) =>
        {
            "refactor"
        }
        Op::Edit
            if any(&[
                "add",
                "implement",
                "create",
                "feature",
                "support",
                "new ",
                "新增",
                "实现",
                "添加",
                "追加",
                "実装",
            ]) =>
        {
            "feature"
        }
        Op::Edit => "change",
        Op::Plan | Op::Agent => "decision",
        _ => "discovery",
    }
}

fn short_target(call: &Call) -> String {
    let v = &call.input;
    if let Some(p) = str_field(
        v,
        &[
            "file_path",
            "path",
            "notebook_path",
            "filePath",
            "absolute_path",
        ],
    ) {
        return p.rsplit('/').next().unwrap_or(p).to_owned();
    }
    if let Some(c) = str_field(v, &["command", "cmd"]) {
        return format!("`{}`", one_line(c, 60));
    }
    if let Some(a) = v.get("command").and_then(Value::as_array) {
        let joined: Vec<&str> = a.iter().filter_map(Value::as_str).collect();
        return format!("`{}`", one_line(&joined.join(" "), 60));
    }
    if let Some(p) = str_field(v, &["pattern", "query", "url", "description", "prompt"]) {
        return one_line(p, 60);
    }
    String::new()
}

/// L1 for one group of calls.
pub fn observation(group: &[&Call], talk: &Talk) -> Observation {
    let first = group[0];
    let last = group[group.len() - 1];
    let op = op_of(&first.tool_name);
    let mut files_read = Vec::new();
    let mut files_modified = Vec::new();
    for c in group {
        let (r, m) = files_of(c);
        files_read.extend(r);
        files_modified.extend(m);
    }
    let files_read = dedup(files_read);
    let files_modified = dedup(files_modified);
    let n = group.len();
    let zh = talk.lang == Lang::Zh;
    // A call without a path or command of its own (Codex's apply_patch) is named by its files.
    let target = Some(short_target(first))
        .filter(|t| !t.is_empty())
        .or_else(|| {
            files_modified
                .first()
                .or(files_read.first())
                .map(|f| f.rsplit('/').next().unwrap_or(f).to_owned())
        })
        .unwrap_or_default();
    let title = match (op, n > 1, zh) {
        (Op::Read, true, false) => format!("Read {n} files"),
        (Op::Read, true, true) => format!("读取 {n} 个文件"),
        (Op::Edit, true, false) => {
            format!("Edited {} files in {n} steps", files_modified.len().max(1))
        }
        (Op::Edit, true, true) => format!("分 {n} 步修改 {} 个文件", files_modified.len().max(1)),
        (Op::Shell, true, false) => format!("Ran {n} commands"),
        (Op::Shell, true, true) => format!("运行 {n} 条命令"),
        (Op::Search, true, false) => format!("{n} searches"),
        (Op::Search, true, true) => format!("{n} 次搜索"),
        (_, true, false) => format!("{} ×{n}", first.tool_name),
        (_, true, true) => format!("{} ×{n}", first.tool_name),
        (Op::Read, false, false) => format!("Read {target}"),
        (Op::Read, false, true) => format!("读取 {target}"),
        (Op::Edit, false, false) => format!("Edited {target}"),
        (Op::Edit, false, true) => format!("修改 {target}"),
        (Op::Shell, false, false) => format!("Ran {target}"),
        (Op::Shell, false, true) => format!("运行 {target}"),
        (Op::Search, false, false) => format!("Searched {target}"),
        (Op::Search, false, true) => format!("搜索 {target}"),
        (_, false, _) => format!("{} {target}", first.tool_name),
    };
    let errors = group.iter().filter(|c| c.is_error).count();
    let subtitle = first_line(&last.output, 120);
    let mut facts = Vec::new();
    if errors > 0 {
        facts.push(if zh {
            format!("{errors} 次调用出错")
        } else {
            format!("{errors} of {n} calls failed")
        });
    }
    for f in files_modified.iter().take(5) {
        facts.push(if zh {
            format!("修改 {f}")
        } else {
            format!("modified {f}")
        });
    }
    for f in files_read.iter().take(5) {
        facts.push(if zh {
            format!("读取 {f}")
        } else {
            format!("read {f}")
        });
    }
    let narrative = if zh {
        format!(
            "为“{}”调用 {}（{} 次）。结果：{}",
            one_line(&talk.prompt, 80),
            first.tool_name,
            n,
            one_line(&last.output, 200)
        )
    } else {
        format!(
            "For \"{}\": {} ×{}. Result: {}",
            one_line(&talk.prompt, 80),
            first.tool_name,
            n,
            one_line(&last.output, 200)
        )
    };
    Observation {
        first_message_id: first.message_id.clone(),
        last_message_id: last.message_id.clone(),
        tool_name: first.tool_name.clone(),
        call_count: n as i64,
        kind: guess_type(op, &talk.prompt).to_owned(),
        title: one_line(title.trim(), 120),
        subtitle,
        facts,
        narrative,
        files_read,
        files_modified,
        ts: first.ts,
    }
}

/// Files a talk touched, modified first.
pub fn talk_files(talk: &Talk) -> Vec<String> {
    let mut modified = Vec::new();
    let mut read = Vec::new();
    for c in &talk.calls {
        let (r, m) = files_of(c);
        read.extend(r);
        modified.extend(m);
    }
    modified.extend(read);
    dedup(modified).into_iter().take(30).collect()
}

/// L2 for one talk.
pub fn talk_summary(talk: &Talk) -> TalkSummary {
    let zh = talk.lang == Lang::Zh;
    let files = talk_files(talk);
    let count = |op: Op| {
        talk.calls
            .iter()
            .filter(|c| op_of(&c.tool_name) == op)
            .count()
    };
    let (reads, edits, shells) = (
        count(Op::Read) + count(Op::Search),
        count(Op::Edit),
        count(Op::Shell),
    );
    let answer = talk
        .assistant_texts
        .last()
        .map(|t| first_sentence(t, 300))
        .unwrap_or_default();
    // What the work found or did is often said before the closing message (which tends to be
    // a wrap-up: "Added tests."): the longest earlier text, its first sentence.
    let found = match talk.assistant_texts.split_last() {
        Some((_, earlier)) => earlier
            .iter()
            .max_by_key(|t| t.chars().count())
            .map(|t| first_sentence(t, 200))
            .filter(|f| !f.is_empty() && *f != answer)
            .unwrap_or_default(),
        None => String::new(),
    };
    let request = one_line(&talk.prompt, 300);
    let mut summary = if zh {
        format!("用户请求：{}", sentence(&one_line(&talk.prompt, 120), "。"))
    } else {
        format!("Asked: {}", sentence(&one_line(&talk.prompt, 120), "."))
    };
    if !talk.calls.is_empty() {
        summary.push(' ');
        summary.push_str(&if zh {
            format!(
                "共 {} 次工具调用（读取/搜索 {reads}，修改 {edits}，命令 {shells}）。",
                talk.calls.len()
            )
        } else {
            format!(
                "{} tool call{} ({reads} reads/searches, {edits} edits, {shells} commands).",
                talk.calls.len(),
                if talk.calls.len() == 1 { "" } else { "s" }
            )
        });
    }
    if !files.is_empty() {
        let shown: Vec<&str> = files.iter().take(5).map(String::as_str).collect();
        summary.push(' ');
        summary.push_str(&if zh {
            format!("涉及文件：{}。", shown.join("、"))
        } else {
            format!("Files: {}.", shown.join(", "))
        });
    }
    // A sentence that introduces a list ("… depend on the local timezone:") ends there.
    let found = found.trim_end_matches([':', '：']);
    if !found.is_empty() {
        summary.push(' ');
        summary.push_str(&if zh {
            format!("过程：{}", sentence(found, "。"))
        } else {
            format!("Found: {}", sentence(found, "."))
        });
    }
    if !answer.is_empty() {
        summary.push(' ');
        summary.push_str(&if zh {
            format!("回答：{answer}")
        } else {
            format!("Answer: {answer}")
        });
    }
    TalkSummary {
        prompt_number: talk.prompt_number,
        user_request: request,
        summary,
        completed: answer,
        files_involved: files,
    }
}

/// `s` ending as a sentence: `stop` is added unless it already ends in punctuation.
fn sentence(s: &str, stop: &str) -> String {
    if s.ends_with(['.', '!', '?', '…', '。', '！', '？']) {
        s.to_owned()
    } else {
        format!("{s}{stop}")
    }
}

/// The first sentence (or line) of a text, at most `max` characters.
fn first_sentence(t: &str, max: usize) -> String {
    let line = t
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let end = line
        .char_indices()
        .find(|(i, c)| {
            matches!(c, '。' | '！' | '？')
                || (matches!(c, '.' | '!' | '?') && line[i + c.len_utf8()..].starts_with(' '))
        })
        .map_or(line.len(), |(i, c)| i + c.len_utf8());
    one_line(&line[..end], max)
}

/// Technologies named by file extensions and commands.
pub fn technologies(files: &[String], texts: &[&str]) -> Vec<String> {
    const BY_EXT: &[(&str, &str)] = &[
        (".rs", "Rust"),
        (".ts", "TypeScript"),
        (".tsx", "React"),
        (".js", "JavaScript"),
        (".jsx", "React"),
        (".py", "Python"),
        (".go", "Go"),
        (".java", "Java"),
        (".kt", "Kotlin"),
        (".rb", "Ruby"),
        (".php", "PHP"),
        (".cs", "C#"),
        (".cpp", "C++"),
        (".c", "C"),
        (".swift", "Swift"),
        (".sql", "SQL"),
        (".vue", "Vue"),
        (".svelte", "Svelte"),
        (".tf", "Terraform"),
        ("Dockerfile", "Docker"),
        (".yml", "YAML"),
        (".yaml", "YAML"),
        ("Cargo.toml", "Rust"),
        ("package.json", "Node.js"),
        (".sh", "Shell"),
    ];
    const BY_WORD: &[(&str, &str)] = &[
        ("cargo ", "Rust"),
        ("npm ", "Node.js"),
        ("pnpm ", "Node.js"),
        ("yarn ", "Node.js"),
        ("pytest", "Python"),
        ("pip ", "Python"),
        ("docker", "Docker"),
        ("kubectl", "Kubernetes"),
        ("git ", "Git"),
        ("go test", "Go"),
        ("sqlite", "SQLite"),
        ("postgres", "PostgreSQL"),
        ("redis", "Redis"),
        ("react", "React"),
        ("django", "Django"),
        ("fastapi", "FastAPI"),
    ];
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for f in files {
        for (ext, name) in BY_EXT {
            if f.ends_with(ext) {
                *counts.entry(name).or_default() += 1;
            }
        }
    }
    for t in texts {
        let t = t.to_lowercase();
        for (w, name) in BY_WORD {
            if t.contains(w) {
                *counts.entry(name).or_default() += 1;
            }
        }
    }
    let mut v: Vec<(&str, usize)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    v.into_iter().take(8).map(|(n, _)| n.to_owned()).collect()
}

/// L3 from the session's L2s (never from raw).
pub fn session_summary(talks: &[TalkSummary], lang: Lang, project: Option<&str>) -> SessionSummary {
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
    let key_points: Vec<String> = talks
        .iter()
        .filter(|t| !t.user_request.is_empty())
        .take(8)
        .map(|t| one_line(&t.user_request, 120))
        .collect();
    let project = project
        .and_then(|p| p.rsplit('/').find(|s| !s.is_empty()))
        .unwrap_or("");
    let first = talks
        .first()
        .map(|t| one_line(&t.user_request, 120))
        .unwrap_or_default();
    let last = talks
        .last()
        .map(|t| {
            if t.completed.is_empty() {
                one_line(&t.user_request, 120)
            } else {
                one_line(&t.completed, 160)
            }
        })
        .unwrap_or_default();
    let summary = if zh {
        let mut s = format!(
            "{} 中的会话，共 {} 个请求。",
            if project.is_empty() {
                "项目"
            } else {
                project
            },
            talks.len()
        );
        if !first.is_empty() {
            s.push_str(&format!("首先：{}", sentence(&first, "。")));
        }
        if talks.len() > 1 && !last.is_empty() {
            s.push_str(&format!("最后：{last}"));
        }
        s
    } else {
        let mut s = format!(
            "Session{} with {} request{}.",
            if project.is_empty() {
                String::new()
            } else {
                format!(" in {project}")
            },
            talks.len(),
            if talks.len() == 1 { "" } else { "s" }
        );
        if !first.is_empty() {
            s.push_str(&format!(" First: {}", sentence(&first, ".")));
        }
        if talks.len() > 1 && !last.is_empty() {
            s.push_str(&format!(" Last: {last}"));
        }
        s
    };
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
    use serde_json::json;

    fn call(id: &str, tool: &str, input: Value, output: &str) -> Call {
        Call {
            message_id: id.into(),
            tool_name: tool.into(),
            input,
            output: output.into(),
            is_error: false,
            ts: None,
        }
    }

    #[test]
    fn prune_then_merge_runs_of_the_threshold() {
        let s = L1Settings {
            prune_empty: true,
            merge_consecutive: true,
            merge_threshold: 3,
        };
        let calls = vec![
            call("1", "Read", json!({"file_path": "/a.rs"}), "x"),
            call("2", "Read", json!({"file_path": "/b.rs"}), "x"),
            call("3", "Read", json!({"file_path": "/c.rs"}), "x"),
            call("4", "Bash", json!({"command": "true"}), "   "),
            call("5", "Edit", json!({"file_path": "/a.rs"}), "ok"),
            call("6", "Grep", json!({"pattern": "x"}), "a"),
            call("7", "Glob", json!({"pattern": "*"}), "b"),
        ];
        let groups = group_calls(&calls, &s);
        let ids: Vec<Vec<&str>> = groups
            .iter()
            .map(|g| g.iter().map(|c| c.message_id.as_str()).collect())
            .collect();
        // Three reads merged; the empty Bash pruned; two searches stay apart (below 3).
        assert_eq!(
            ids,
            vec![vec!["1", "2", "3"], vec!["5"], vec!["6"], vec!["7"]]
        );
        let no_merge = L1Settings {
            merge_consecutive: false,
            ..s
        };
        assert_eq!(group_calls(&calls, &no_merge).len(), 6);
    }

    #[test]
    fn files_come_from_tool_inputs() {
        let (r, m) = files_of(&call("1", "Edit", json!({"file_path": "/src/a.ts"}), ""));
        assert_eq!((r, m), (vec![], vec!["/src/a.ts".to_owned()]));
        let patch = "*** Begin Patch\n*** Update File: src/date.ts\n@@\n*** Add File: src/new.ts\n*** End Patch";
        let (_, m) = files_of(&call("2", "apply_patch", json!({"input": patch}), ""));
        assert_eq!(m, vec!["src/date.ts", "src/new.ts"]);
        let (r, _) = files_of(&call("3", "read_file", json!({"path": "README.md"}), ""));
        assert_eq!(r, vec!["README.md"]);
    }

    #[test]
    fn requests_end_as_one_sentence_and_patches_are_named_by_their_files() {
        let talk = Talk {
            prompt_number: 1,
            prompt: "Can you find out why?".into(),
            assistant_texts: vec![],
            calls: vec![call(
                "1",
                "apply_patch",
                json!({"input": "*** Begin Patch\n*** Update File: src/date.ts\n*** End Patch"}),
                "Success.",
            )],
            raw_tokens: 0,
            lang: Lang::En,
            ts: None,
        };
        let t = talk_summary(&talk);
        assert!(
            t.summary
                .starts_with("Asked: Can you find out why? 1 tool call ("),
            "{}",
            t.summary
        );
        let groups = group_calls(&talk.calls, &L1Settings::default());
        assert_eq!(observation(&groups[0], &talk).title, "Edited date.ts");
    }

    #[test]
    fn a_talk_keeps_what_it_found_before_its_closing_message() {
        let mut talk = Talk {
            prompt_number: 1,
            prompt: "The orders page is slow. Fix the N+1.".into(),
            assistant_texts: vec![
                "Looking.".into(),
                "The index now preloads customers with includes(:customer). The page went from \
                 214 queries to 3."
                    .into(),
                "Added a Bullet assertion so it cannot regress.".into(),
            ],
            calls: vec![],
            raw_tokens: 0,
            lang: Lang::En,
            ts: None,
        };
        let t = talk_summary(&talk);
        assert!(
            t.summary.ends_with(
                "Found: The index now preloads customers with includes(:customer). \
                 Answer: Added a Bullet assertion so it cannot regress."
            ),
            "{}",
            t.summary
        );
        assert_eq!(
            t.completed,
            "Added a Bullet assertion so it cannot regress."
        );
        // A sentence that introduces a list loses its colon.
        talk.assistant_texts[1] = "Two tests depend on the local timezone:\n- a.ts".into();
        let t = talk_summary(&talk);
        assert!(
            t.summary
                .contains("Found: Two tests depend on the local timezone. Answer:"),
            "{}",
            t.summary
        );
        // One message is the answer alone.
        talk.assistant_texts.drain(..2);
        let t = talk_summary(&talk);
        assert!(!t.summary.contains("Found:"), "{}", t.summary);
    }

    #[test]
    fn language_and_tokens() {
        assert_eq!(detect_lang("请帮我修复登录认证的错误"), Lang::Zh);
        assert_eq!(detect_lang("fix the failing test in src/date.ts"), Lang::En);
        assert_eq!(detect_lang("テストを修正してください"), Lang::Ja);
        assert_eq!(estimate_tokens("abcdefgh"), 2);
        assert_eq!(estimate_tokens("认证"), 2);
    }
}
