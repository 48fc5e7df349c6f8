//! The `heuristic` compactor: every field of L1, L2 and L3 filled deterministically from the raw
//! messages, with zero tokens (SPEC principle 2). It is the default, the last resort of every
//! provider chain, and what an LLM's malformed output falls back to.
//!
//! It writes down the facts a person would, from what the transcript states:
//! - [`request`]: what was asked (the typed text, cut where a sentence or clause ends);
//! - [`work`]: what was done (files changed and what they gained, commands that matter and
//!   their outcome, commits, sub-agents, errors, interruptions), for every agent's tools;
//! - [`sentences`]: what was found or decided (an answer's sentences ranked by information,
//!   its wrap-up section);
//! - [`observation`], [`talk`], [`session`]: L1, L2 and L3 built from those.
//!
//! Also the deterministic parts every provider shares: pruning and merging tool calls, the
//! files read and modified (straight from tool inputs), the conversation's language.

pub mod observation;
pub mod request;
pub mod sentences;
pub mod session;
pub mod talk;
pub mod work;

pub use observation::observation;
pub use session::session_summary;
pub use talk::talk_summary;

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Call, Lang};
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
        "read" | "read_file" | "view" | "cat" | "readfile" | "read_many_files" | "notebookread"
        | "fs_read" => Op::Read,
        "grep"
        | "glob"
        | "ls"
        | "list_directory"
        | "search_file_content"
        | "find"
        | "toolsearch"
        | "list_dir"
        | "list_files"
        | "codebase_search"
        | "file_search" => Op::Search,
        "edit"
        | "multiedit"
        | "write"
        | "write_file"
        | "replace"
        | "apply_patch"
        | "notebookedit"
        | "str_replace_based_edit_tool"
        | "edit_file"
        | "create"
        | "create_file"
        | "search_replace"
        | "strreplace"
        | "apply_diff"
        | "replace_in_file"
        | "insert_content"
        | "fs_write"
        | "developer__text_editor" => Op::Edit,
        "bash" | "shell" | "exec_command" | "run_shell_command" | "local_shell" | "bashoutput"
        | "write_stdin" | "killshell" | "unified_exec" | "execute_command" | "execute_bash"
        | "run_terminal_cmd" | "developer__shell" | "run_command" => Op::Shell,
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

/// The keys under which agents' tools name the one file they work on.
pub const PATH_KEYS: &[&str] = &[
    "file_path",
    "path",
    "notebook_path",
    "filePath",
    "absolute_path",
    "file",
];

/// Files a tool call reads and modifies, straight from its input.
pub fn files_of(call: &Call) -> (Vec<String>, Vec<String>) {
    let op = op_of(&call.tool_name);
    let mut paths: Vec<String> = Vec::new();
    for &k in PATH_KEYS {
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

/// Files a talk touched, modified first.
pub fn talk_files(talk: &super::Talk) -> Vec<String> {
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
    fn language_and_tokens() {
        assert_eq!(detect_lang("请帮我修复登录认证的错误"), Lang::Zh);
        assert_eq!(detect_lang("fix the failing test in src/date.ts"), Lang::En);
        assert_eq!(detect_lang("テストを修正してください"), Lang::Ja);
        assert_eq!(estimate_tokens("abcdefgh"), 2);
        assert_eq!(estimate_tokens("认证"), 2);
    }
}
