//! What was done: each tool call read for what it changed or learned (files created and edited
//! with the definitions they added, commands that matter with their outcome, commits, sub-agents,
//! web lookups, errors), for every agent's tool names and result shapes; and the lines an agent
//! program writes itself (Aider's commits and lint runs, an API error, a command the person ran,
//! an interruption).

use ai_cli_session_collector::text::element;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::request::error_line;
use super::{Op, files_of, one_line, op_of};
use crate::compact::{Call, Note, NoteKind, Talk};

/// How a file was changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Created,
    Edited,
    Deleted,
    /// Code the agent proposed for the file in its answer (Cursor's editor, Aider before it
    /// applied), not a tool call.
    Proposed,
}

/// A file the talk changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    pub path: String,
    pub change: Change,
    /// Definitions the change added (`fn parse()`, `class Spinner`, `details:not([open])`).
    pub symbols: Vec<String>,
    /// When it added no definition: its first added line of substance.
    pub sample: Option<String>,
}

/// What a command was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Test,
    Build,
    Typecheck,
    Lint,
    Format,
    Commit,
    Merge,
    Push,
    PullRequest,
    Migrate,
    Deploy,
    Install,
    Other,
}

impl Kind {
    fn matters(self) -> bool {
        self != Kind::Other
    }
}

/// A command and what came of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub kind: Kind,
    /// The program, short: `pytest`, `cargo test`, `ruff format`.
    pub tool: String,
    /// The command line, on one line and short.
    pub command: String,
    /// Counts or the first error line: "80 passed", "exit code 1: error[E0308]: …".
    pub outcome: Option<String>,
    pub failed: bool,
    /// The person ran it themselves (Claude's bash mode, `!` in OpenCode and Pi).
    pub by_user: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Commit {
    pub hash: String,
    pub message: String,
}

/// Everything a talk did, in the order it happened.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Work {
    pub edits: Vec<Edit>,
    pub runs: Vec<Run>,
    pub commits: Vec<Commit>,
    /// Commits taken back (Aider's `/undo`).
    pub undone: Vec<String>,
    /// What went wrong, first lines, at most a few.
    pub errors: Vec<String>,
    /// Sub-agents started: "Explore agent (haiku): overview of the code".
    pub agents: Vec<String>,
    /// Slash commands the person ran with what they printed: "/model: Kept model as opusplan".
    pub commands: Vec<String>,
    /// Web searches and pages fetched.
    pub web: Vec<String>,
    /// Other tools used (MCP servers, questions), by short name.
    pub tools: Vec<String>,
    /// Commands that only looked (`git status`, `git diff`, `ls`), kept for talks that did
    /// nothing else.
    pub looked: Vec<Run>,
    pub interrupted: bool,
    pub compacted: bool,
    pub files_read: usize,
    /// Commits and merges made with `-m`, waiting for a `git log` line that names their hash.
    unhashed: Vec<String>,
    /// A command the person ran, waiting for its output.
    user_command: Option<String>,
    /// A slash command, waiting for what it printed.
    slash: Option<String>,
}

fn re(s: &str) -> Regex {
    Regex::new(s).expect("a valid pattern")
}

/// A definition on one added line: what a person would name as "added".
static DEFINITION: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    vec![
        (
            re(
                r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+([A-Za-z_]\w*)",
            ),
            "()",
        ),
        (re(r"^\s*(?:async\s+)?def\s+([A-Za-z_]\w*)"), "()"),
        (
            re(
                r"^\s*(?:export\s+)?(?:default\s+)?(?:async\s+)?function\s*\*?\s*([A-Za-z_$][\w$]*)",
            ),
            "()",
        ),
        (re(r"^\s*func\s+(?:\([^)]*\)\s*)?([A-Za-z_]\w*)"), "()"),
        (
            re(
                r"^\s*(?:export\s+)?(?:const|let)\s+([A-Za-z_$][\w$]*)\s*=\s*(?:async\s*)?(?:\([^)]*\)|[A-Za-z_$][\w$]*)\s*=>",
            ),
            "()",
        ),
        (
            re(
                r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:export\s+)?(?:default\s+)?(?:abstract\s+)?(?:data\s+)?(?:class|struct|enum|trait|interface|type|mod|module|protocol)\s+([A-Za-z_]\w*)",
            ),
            "",
        ),
        (
            re(
                r"(?i)^\s*create\s+(?:unique\s+)?(?:table|index|view|trigger|virtual\s+table)\s+(?:if\s+not\s+exists\s+)?([A-Za-z_][\w.]*)",
            ),
            "",
        ),
        (
            re(
                r"^\s{2,8}(?:public|private|protected|static|async|\s)*([a-z_]\w*)\s*\([^)]*\)\s*(?::\s*[\w<>\[\]|, ]+)?\s*\{\s*$",
            ),
            "()",
        ),
    ]
});

/// A CSS rule's selector: `details:not([open]) {`.
static SELECTOR: LazyLock<Regex> =
    LazyLock::new(|| re(r"^\s*([^{}@/;][^{};]*?)\s*\{\s*(?:[^{}]*\}\s*)?$"));

fn is_style(path: &str) -> bool {
    [".css", ".scss", ".sass", ".less"]
        .iter()
        .any(|e| path.ends_with(e))
}

/// A file as a person names it: its name, with its folder when the name alone says little.
pub fn short_path(p: &str) -> String {
    let p = p.trim_end_matches('/');
    let mut parts = p.rsplit('/');
    let name = parts.next().unwrap_or(p);
    let stem = name.split('.').next().unwrap_or(name);
    const GENERIC: &[&str] = &[
        "index", "mod", "main", "__init__", "lib", "page", "layout", "route", "routes", "utils",
        "util", "types", "config", "settings", "app", "server", "client", "README", "readme",
        "package", "Cargo", "test", "tests", "globals",
    ];
    match parts.next() {
        Some(dir) if GENERIC.contains(&stem) && !dir.is_empty() => format!("{dir}/{name}"),
        _ => name.to_owned(),
    }
}

/// The first value of these keys that is a string.
fn text_field<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| v.get(*k).and_then(Value::as_str))
}

/// What an edit call removed and added, as text (every agent's key names).
fn edit_texts(call: &Call) -> (String, String) {
    let v = &call.input;
    let mut old = String::new();
    let mut new = String::new();
    if let Some(n) = text_field(
        v,
        &[
            "new_string",
            "new_str",
            "newString",
            "newText",
            "new_text",
            "content",
            "contents",
            "file_text",
            "text",
            "code_edit",
        ],
    ) {
        new.push_str(n);
    }
    if let Some(o) = text_field(
        v,
        &["old_string", "old_str", "oldString", "oldText", "old_text"],
    ) {
        old.push_str(o);
    }
    if let Some(edits) = v.get("edits").and_then(Value::as_array) {
        for e in edits {
            if let Some(o) = text_field(e, &["old_string", "oldText", "old_str"]) {
                old.push_str(o);
                old.push('\n');
            }
            if let Some(n) = text_field(e, &["new_string", "newText", "new_str"]) {
                new.push_str(n);
                new.push('\n');
            }
        }
    }
    let patch = text_field(v, &["input", "patch"]).or_else(|| v.as_str());
    if let Some(patch) = patch {
        for l in patch.lines() {
            if l.starts_with("+++") || l.starts_with("---") || l.starts_with("***") {
                continue;
            }
            if let Some(a) = l.strip_prefix('+') {
                new.push_str(a);
                new.push('\n');
            } else if let Some(r) = l.strip_prefix('-') {
                old.push_str(r);
                old.push('\n');
            }
        }
    }
    (old, new)
}

/// The definitions and, failing those, the first line of substance that `new` adds to `old`.
fn added(path: &str, old: &str, new: &str) -> (Vec<String>, Option<String>) {
    let before: std::collections::HashSet<&str> = old.lines().map(str::trim).collect();
    let mut symbols: Vec<String> = Vec::new();
    let mut sample = None;
    for line in new.lines() {
        if before.contains(line.trim()) {
            continue;
        }
        let mut found = None;
        for (r, suffix) in DEFINITION.iter() {
            if let Some(c) = r.captures(line) {
                let name = &c[1];
                if !matches!(name, "if" | "for" | "while" | "switch" | "catch" | "return") {
                    found = Some(format!("{name}{suffix}"));
                    break;
                }
            }
        }
        if found.is_none()
            && is_style(path)
            && let Some(c) = SELECTOR.captures(line)
        {
            found = Some(c[1].trim().to_owned());
        }
        match found {
            Some(f) if !symbols.contains(&f) && symbols.len() < 4 => symbols.push(f),
            Some(_) => {}
            None if sample.is_none() => {
                let t = line.trim();
                let alnum = t.chars().filter(|c| c.is_alphanumeric()).count();
                let comment = t.starts_with("//") || t.starts_with('#') || t.starts_with("/*");
                if alnum >= 6 && !comment && !t.starts_with("import ") && !t.starts_with("use ") {
                    sample = Some(one_line(t.trim_end_matches([';', ',']), 70));
                }
            }
            None => {}
        }
    }
    (symbols, sample)
}

/// Whether an edit call's result says it did not apply.
fn edit_failed(call: &Call) -> bool {
    let o = call.output.trim_start();
    call.is_error
        || o.starts_with("Failed")
        || o.starts_with("Error")
        || o.starts_with("<tool_use_error>")
        || o.contains("No changes to make")
}

/// A tool's name without its MCP server prefix.
pub fn short_tool(name: &str) -> &str {
    if let Some(i) = name.rfind("__") {
        return &name[i + 2..];
    }
    if let Some(i) = name.find("-mcp-server-") {
        return &name[i + "-mcp-server-".len()..];
    }
    name
}

/// A command line of a shell call (a string, or an argument list).
pub fn command_of(call: &Call) -> Option<String> {
    let v = &call.input;
    if let Some(c) = text_field(v, &["command", "cmd", "script"]) {
        return Some(c.to_owned());
    }
    let a = v
        .get("command")
        .or_else(|| v.get("cmd"))
        .or_else(|| v.get("argv"))
        .and_then(Value::as_array)?;
    let parts: Vec<&str> = a.iter().filter_map(Value::as_str).collect();
    // `["bash", "-lc", "cargo test"]`: the script is the command.
    match parts.as_slice() {
        [sh, flag, script] if sh.ends_with("sh") && flag.starts_with('-') => {
            Some((*script).to_owned())
        }
        _ => Some(parts.join(" ")),
    }
}

/// The words of one command of a pipeline or `&&` chain, runners (`uv run`, `npx`,
/// `poetry run`, env assignments) left out.
fn program_words(segment: &str) -> Vec<&str> {
    let mut w: Vec<&str> = segment.split_whitespace().collect();
    loop {
        match w.as_slice() {
            [first, ..] if first.contains('=') && !first.starts_with('-') => {
                w.remove(0);
            }
            [
                "uv" | "poetry" | "pdm" | "hatch" | "pipenv" | "bundle" | "rye",
                "run" | "exec",
                ..,
            ] => {
                w.drain(..2);
            }
            [
                "npx" | "bunx" | "pnpx" | "sudo" | "time" | "exec" | "env" | "nice",
                ..,
            ] => {
                w.remove(0);
            }
            ["python" | "python3" | "py", "-m", ..] => {
                w.drain(..2);
            }
            _ => break,
        }
    }
    w
}

/// What a command is for, and its program named short.
pub fn classify(command: &str) -> (Kind, String) {
    let mut best: (Kind, String) = (Kind::Other, String::new());
    for segment in command.split(['&', ';', '|', '\n']) {
        let w = program_words(segment.trim());
        let Some(&p) = w.first() else { continue };
        let p = p.rsplit('/').next().unwrap_or(p);
        let sub = w.get(1).copied().unwrap_or("");
        let has = |x: &str| w.contains(&x);
        let script = |names: &[&str]| {
            matches!(p, "npm" | "pnpm" | "yarn" | "bun")
                && (names.contains(&sub)
                    || (sub == "run"
                        && w.get(2)
                            .is_some_and(|s| names.iter().any(|n| s.starts_with(n)))))
        };
        let kind = match p {
            "pytest" | "jest" | "vitest" | "mocha" | "rspec" | "phpunit" | "tox" | "nox"
            | "ctest" | "unittest" | "playwright" | "cypress" => Kind::Test,
            "cargo" if matches!(sub, "test" | "nextest") => Kind::Test,
            "go" if sub == "test" => Kind::Test,
            "dotnet" | "mvn" | "gradle" | "./gradlew" | "make" | "rake" | "mix" | "swift"
                if has("test") || has("check") && p != "make" =>
            {
                Kind::Test
            }
            "deno" | "bun" if sub == "test" => Kind::Test,
            _ if script(&["test", "test:unit", "test:e2e", "e2e"]) => Kind::Test,
            "pyright" | "mypy" | "tsc" => Kind::Typecheck,
            "cargo" if sub == "check" => Kind::Typecheck,
            "cargo" if sub == "clippy" => Kind::Lint,
            "ruff" if sub == "format" => Kind::Format,
            "ruff" | "flake8" | "eslint" | "pylint" | "golangci-lint" | "shellcheck"
            | "markdownlint" | "stylelint" | "rubocop" | "biome" | "hadolint" => Kind::Lint,
            _ if script(&["lint", "lint:fix"]) => Kind::Lint,
            "black" | "prettier" | "gofmt" | "rustfmt" | "isort" => Kind::Format,
            "cargo" if sub == "fmt" => Kind::Format,
            _ if script(&["format", "fmt"]) => Kind::Format,
            "cargo" if matches!(sub, "build" | "run") => Kind::Build,
            "go" if sub == "build" => Kind::Build,
            "make" | "cmake" | "ninja" | "gcc" | "clang" | "javac" | "webpack" | "vite" | "ng"
            | "next"
                if p != "ng" || sub == "build" =>
            {
                Kind::Build
            }
            "docker" if sub == "build" => Kind::Build,
            _ if script(&["build", "compile"]) => Kind::Build,
            "git" if sub == "commit" => Kind::Commit,
            "git" if sub == "merge" => Kind::Merge,
            "git" if sub == "push" => Kind::Push,
            "gh" if sub == "pr" && w.get(2) == Some(&"create") => Kind::PullRequest,
            "alembic" | "flyway" | "liquibase" if has("upgrade") || has("migrate") => Kind::Migrate,
            "diesel" | "sqlx" | "prisma" | "knex" | "sequelize"
                if has("migrate") || has("migration") || has("run") =>
            {
                Kind::Migrate
            }
            "rails" | "rake" | "manage.py" | "./manage.py" | "artisan"
                if w.iter().any(|x| x.contains("migrate")) =>
            {
                Kind::Migrate
            }
            "kubectl" if matches!(sub, "apply" | "rollout" | "set") => Kind::Deploy,
            "helm" if matches!(sub, "upgrade" | "install") => Kind::Deploy,
            "terraform" | "tofu" | "pulumi" if matches!(sub, "apply" | "up") => Kind::Deploy,
            "fly" | "flyctl" | "vercel" | "netlify" | "serverless" | "sls" | "wrangler"
                if has("deploy") || sub == "--prod" =>
            {
                Kind::Deploy
            }
            "cargo" | "npm" | "twine" | "gem"
                if sub == "publish" || (p == "twine" && sub == "upload") =>
            {
                Kind::Deploy
            }
            "docker" if sub == "push" => Kind::Deploy,
            "gcloud" | "aws" | "az" if has("deploy") => Kind::Deploy,
            "npm" | "pnpm" | "yarn" | "bun"
                if matches!(sub, "install" | "i" | "add") && w.len() > 2 =>
            {
                Kind::Install
            }
            "pip" | "pip3" | "uv" | "poetry" | "cargo" | "go" | "gem" | "brew" | "apt"
            | "apt-get"
                if matches!(sub, "install" | "add" | "get") =>
            {
                Kind::Install
            }
            _ => Kind::Other,
        };
        if kind < best.0 || best.1.is_empty() {
            let tool = match (p, sub) {
                (
                    "cargo" | "go" | "git" | "gh" | "npm" | "pnpm" | "yarn" | "bun" | "ruff"
                    | "docker" | "kubectl" | "helm" | "terraform" | "ng",
                    s,
                ) if !s.is_empty() && !s.starts_with('-') => {
                    if sub == "run" && matches!(p, "npm" | "pnpm" | "yarn" | "bun") {
                        format!("{p} run {}", w.get(2).copied().unwrap_or(""))
                    } else {
                        format!("{p} {s}")
                    }
                }
                _ => p.to_owned(),
            };
            best = (kind, tool);
        }
    }
    best
}

static COUNT: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)\b(\d[\d,]*)\s+(passed|failed|failing|passing|errors?|warnings?|skipped|xfailed|xpassed|ignored|problems?|files? reformatted|files? changed|tests?|examples?|failures?)\b",
    )
});
static CARGO_RESULT: LazyLock<Regex> =
    LazyLock::new(|| re(r"test result: (?:ok|FAILED)\. (\d+) passed; (\d+) failed"));
static EXIT: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)(?:exit(?:ed with)? code|exit status|exited with code|process exited with code)[:\s]*(-?\d+)",
    )
});
static GIT_COMMIT: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?m)^\[[^\]\s]+(?: \(root-commit\))? ([0-9a-f]{7,40})\] (.+)$"));

/// Counts from a test or check run's output: "5 failed, 6 passed", summed over `cargo test`'s
/// per-crate lines.
fn counts(output: &str) -> Option<String> {
    let cargo: Vec<(u64, u64)> = CARGO_RESULT
        .captures_iter(output)
        .filter_map(|c| Some((c[1].parse().ok()?, c[2].parse().ok()?)))
        .collect();
    if !cargo.is_empty() {
        let passed: u64 = cargo.iter().map(|c| c.0).sum();
        let failed: u64 = cargo.iter().map(|c| c.1).sum();
        return Some(if failed > 0 {
            format!("{failed} failed, {passed} passed")
        } else {
            format!("{passed} passed")
        });
    }
    // The last line that holds counts is the summary (pytest, jest, mocha, pyright, ruff).
    output
        .lines()
        .rev()
        .find(|l| COUNT.is_match(l) && !l.trim_start().starts_with("collected"))
        .map(|l| {
            COUNT
                .captures_iter(l)
                .map(|c| format!("{} {}", &c[1], c[2].to_lowercase()))
                .collect::<Vec<_>>()
                .join(", ")
        })
}

/// What came of a command: counts, a check's verdict, or the exit code and first error line.
fn outcome(kind: Kind, output: &str, is_error: bool) -> (Option<String>, bool) {
    let exit = EXIT
        .captures_iter(output)
        .last()
        .and_then(|c| c[1].parse::<i64>().ok());
    let lower = output.to_lowercase();
    let counted = if matches!(
        kind,
        Kind::Test | Kind::Lint | Kind::Typecheck | Kind::Format | Kind::Build
    ) {
        counts(output)
    } else {
        None
    };
    let failed_count = counted.as_deref().is_some_and(|c| {
        c.split(", ").any(|p| {
            let mut it = p.split(' ');
            let n = it.next().unwrap_or("0").replace(',', "");
            let what = it.next().unwrap_or("");
            n != "0"
                && matches!(
                    what,
                    "failed" | "failing" | "error" | "errors" | "failures" | "failure"
                )
        })
    });
    let failed = is_error || exit.is_some_and(|e| e != 0) || failed_count;
    if let Some(c) = counted.filter(|c| !c.is_empty()) {
        return (Some(c), failed);
    }
    if !failed {
        for ok in [
            "all checks passed",
            "no issues found",
            "0 errors",
            "compiled successfully",
            "build succeeded",
        ] {
            if lower.contains(ok) {
                return (Some(ok.to_owned()), false);
            }
        }
        return (exit.map(|e| format!("exit code {e}")), false);
    }
    let first = error_line(output).unwrap_or_default();
    let text = match exit {
        Some(e) if e != 0 && !first.is_empty() => format!("exit code {e}: {first}"),
        Some(e) if e != 0 => format!("exit code {e}"),
        _ if first.is_empty() => "failed".to_owned(),
        _ => first,
    };
    (Some(text), true)
}

/// What `git status` showed: "modified hello.py; untracked farewell.py, notes.md".
fn git_status(output: &str) -> Option<String> {
    let mut modified: Vec<&str> = Vec::new();
    let mut added: Vec<&str> = Vec::new();
    let mut deleted: Vec<&str> = Vec::new();
    let mut untracked: Vec<&str> = Vec::new();
    let mut in_untracked = false;
    for l in output.lines() {
        let t = l.trim();
        if t.is_empty() {
            continue;
        }
        // Short format: two status letters, a space, the path (the leading space of ` M`
        // may have been trimmed).
        let b = l.as_bytes();
        let short = if b.len() > 3 && b[2] == b' ' && l.is_char_boundary(2) {
            Some((&l[..2], &l[3..]))
        } else if b.len() > 2 && b[1] == b' ' && b"MADRCU".contains(&b[0]) {
            Some((&l[..1], &l[2..]))
        } else {
            None
        };
        if let Some((code, path)) = short {
            let path = path.trim();
            match code {
                "??" => untracked.push(path),
                x if x.contains('M') => modified.push(path),
                x if x.contains('A') => added.push(path),
                x if x.contains('D') => deleted.push(path),
                _ => {}
            }
            continue;
        }
        // Long format.
        if t.starts_with("Untracked files:") {
            in_untracked = true;
        } else if let Some(p) = t.strip_prefix("modified:") {
            modified.push(p.trim());
        } else if let Some(p) = t.strip_prefix("new file:") {
            added.push(p.trim());
        } else if let Some(p) = t.strip_prefix("deleted:") {
            deleted.push(p.trim());
        } else if in_untracked && l.starts_with('\t') {
            untracked.push(t);
        }
    }
    let mut parts = Vec::new();
    for (what, files) in [
        ("modified", modified),
        ("added", added),
        ("deleted", deleted),
        ("untracked", untracked),
    ] {
        if !files.is_empty() {
            let shown: Vec<&str> = files.iter().take(4).copied().collect();
            let more = files.len().saturating_sub(4);
            let mut p = format!("{what} {}", shown.join(", "));
            if more > 0 {
                p.push_str(&format!(" and {more} more"));
            }
            parts.push(p);
        }
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// A shell call read as a [`Run`].
fn run_of(command: &str, output: &str, is_error: bool, by_user: bool) -> Run {
    let (kind, tool) = classify(command);
    let (mut outcome, failed) = outcome(kind, output, is_error);
    if !failed && command.trim_start().starts_with("git status") {
        outcome = git_status(output).or(outcome);
    }
    if !failed && kind == Kind::Other && outcome.as_deref() == Some("exit code 0") {
        outcome = None;
    }
    Run {
        kind,
        tool,
        command: one_line(command, 80),
        outcome,
        failed,
        by_user,
    }
}

/// `git commit -m "message"` / `git merge -m 'message'`: the message.
fn message_flag(command: &str) -> Option<String> {
    static M: LazyLock<Regex> =
        LazyLock::new(|| re(r#"(?:-m|--message)[= ]\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)')"#));
    let c = M.captures(command)?;
    let m = c.get(1).or_else(|| c.get(2))?.as_str();
    Some(one_line(m.lines().next().unwrap_or(m), 100))
}

impl Work {
    fn edit(&mut self, path: &str, change: Change, symbols: Vec<String>, sample: Option<String>) {
        if let Some(e) = self.edits.iter_mut().find(|e| e.path == path) {
            if e.change == Change::Proposed || change == Change::Deleted {
                e.change = change;
            }
            for s in symbols {
                if !e.symbols.contains(&s) && e.symbols.len() < 4 {
                    e.symbols.push(s);
                }
            }
            if e.sample.is_none() && e.symbols.is_empty() {
                e.sample = sample;
            }
        } else {
            self.edits.push(Edit {
                path: path.to_owned(),
                change,
                symbols,
                sample,
            });
        }
    }

    fn error(&mut self, e: String) {
        let e = one_line(&e, 160);
        if !e.is_empty() && self.errors.len() < 4 && !self.errors.contains(&e) {
            self.errors.push(e);
        }
    }

    fn commit(&mut self, hash: &str, message: &str) {
        if !self.commits.iter().any(|c| c.hash == hash) {
            self.commits.push(Commit {
                hash: hash.to_owned(),
                message: one_line(message, 100),
            });
        }
    }

    /// Reads one tool call.
    pub fn add_call(&mut self, call: &Call) {
        let op = op_of(&call.tool_name);
        match op {
            Op::Edit => {
                let (_, modified) = files_of(call);
                if edit_failed(call) {
                    let lower = call.output.to_lowercase();
                    // The person said no to the edit: a decision, not a failure.
                    if lower.contains("doesn't want to proceed")
                        || lower.contains("rejected by the user")
                        || lower.contains("user rejected")
                    {
                        let target = modified.first().map(|p| short_path(p)).unwrap_or_default();
                        self.error(format!("the user rejected the edit of {target}"));
                        return;
                    }
                    let what = error_line(&strip_tags(&call.output))
                        .unwrap_or_else(|| "did not apply".to_owned());
                    self.error(format!("{} failed: {what}", short_tool(&call.tool_name)));
                    return;
                }
                let (old, new) = edit_texts(call);
                let t = call.tool_name.to_ascii_lowercase();
                let patch = text_field(&call.input, &["input", "patch"]).unwrap_or("");
                for path in &modified {
                    let change = if patch.contains(&format!("*** Delete File: {path}")) {
                        Change::Deleted
                    } else if patch.contains(&format!("*** Add File: {path}"))
                        || matches!(t.as_str(), "create" | "create_file")
                        || text_field(&call.input, &["command"]) == Some("create")
                        || (old.is_empty() && call.output.to_lowercase().contains("created"))
                    {
                        Change::Created
                    } else {
                        Change::Edited
                    };
                    let (symbols, sample) = added(path, &old, &new);
                    self.edit(path, change, symbols, sample);
                }
            }
            Op::Shell => {
                let Some(command) = command_of(call) else {
                    return;
                };
                let run = run_of(&command, &clean_output(&call.output), call.is_error, false);
                self.add_run(run, &command, &call.output);
            }
            Op::Read | Op::Search => {
                let (read, _) = files_of(call);
                self.files_read += read.len().max(usize::from(op == Op::Read));
                if call.is_error {
                    let what = error_line(&strip_tags(&call.output)).unwrap_or_default();
                    let target = read.first().map(|p| short_path(p)).unwrap_or_default();
                    self.error(format!(
                        "{} {target} failed: {what}",
                        short_tool(&call.tool_name)
                    ));
                }
            }
            Op::Agent => {
                let v = &call.input;
                let who = text_field(v, &["name", "subagent_type", "agent_type", "agent"])
                    .unwrap_or("sub-agent");
                let model = text_field(v, &["model"]);
                let what = text_field(v, &["description", "prompt", "task"]).unwrap_or("");
                let mut s = match model {
                    Some(m) => format!("{who} agent ({m})"),
                    None => format!("{who} agent"),
                };
                if !what.is_empty() {
                    s.push_str(": ");
                    s.push_str(&one_line(what, 70));
                }
                if self.agents.len() < 6 {
                    self.agents.push(s);
                }
            }
            Op::Web => {
                let v = &call.input;
                if let Some(u) = text_field(v, &["url", "query", "search_term", "q", "prompt"])
                    && self.web.len() < 4
                {
                    self.web.push(one_line(u, 80));
                }
                if call.is_error {
                    self.error(format!(
                        "{} failed: {}",
                        short_tool(&call.tool_name),
                        error_line(&call.output).unwrap_or_default()
                    ));
                }
            }
            Op::Plan => {}
            Op::Other => {
                let mut name = short_tool(&call.tool_name).to_owned();
                // A skill is named by the skill it loaded.
                if name.eq_ignore_ascii_case("skill")
                    && let Some(skill) = text_field(&call.input, &["skill", "name", "command"])
                {
                    name = format!("skill {}", one_line(skill, 40));
                }
                if call.is_error {
                    let what = error_line(&strip_tags(&call.output)).unwrap_or_default();
                    self.error(format!("{name} failed: {what}"));
                }
                if !self.tools.contains(&name) && self.tools.len() < 8 {
                    self.tools.push(name);
                }
            }
        }
    }

    fn add_run(&mut self, run: Run, command: &str, output: &str) {
        for c in GIT_COMMIT.captures_iter(output) {
            self.commit(&c[1], &c[2]);
        }
        if matches!(run.kind, Kind::Commit | Kind::Merge)
            && !run.failed
            && let Some(m) = message_flag(command)
        {
            self.unhashed.push(m);
        }
        if run.failed
            && !run.kind.matters()
            && let Some(o) = &run.outcome
        {
            self.error(format!("`{}`: {o}", one_line(&run.command, 50)));
        }
        if run.kind.matters() || run.by_user {
            self.runs.push(run);
        } else if !run.failed
            && self.looked.len() < 4
            && !self.looked.iter().any(|r| r.command == run.command)
        {
            self.looked.push(run);
        }
    }

    /// Reads a line the agent program wrote itself, or a command the person ran.
    pub fn add_note(&mut self, note: &Note) {
        match note.kind {
            NoteKind::Compaction => {
                self.compacted = true;
                return;
            }
            NoteKind::Program | NoteKind::User => {}
        }
        let text = note.text.trim();
        if text.is_empty() {
            return;
        }
        // A command the person ran: Claude's bash mode, `$ cmd` in OpenCode and Pi.
        if let Some(cmd) = element(text, "bash-input") {
            self.user_command = Some(cmd.trim().to_owned());
            return;
        }
        if text.contains("<bash-stdout>") || text.contains("<bash-stderr>") {
            let out = format!(
                "{}\n{}",
                element(text, "bash-stdout").unwrap_or_default(),
                element(text, "bash-stderr").unwrap_or_default()
            );
            if let Some(cmd) = self.user_command.take() {
                let run = run_of(&cmd, &strip_ansi(&out), false, true);
                self.add_run(run, &cmd, &out);
            }
            return;
        }
        if let Some(rest) = text.strip_prefix("$ ")
            && note.kind == NoteKind::User
        {
            let (cmd, out) = rest.split_once('\n').unwrap_or((rest, ""));
            let run = run_of(cmd, out, false, true);
            self.add_run(run, cmd, out);
            return;
        }
        // A slash command and what it printed (Claude).
        if let Some(name) = element(text, "command-name") {
            self.slash = Some(name.trim().to_owned());
            return;
        }
        if let Some(out) = element(text, "local-command-stdout") {
            let out = strip_ansi(out.trim());
            if let Some(cmd) = self.slash.take()
                && !out.is_empty()
                && !matches!(cmd.as_str(), "/exit" | "/quit" | "/clear")
                && self.commands.len() < 4
            {
                self.commands.push(format!("{cmd}: {}", one_line(&out, 80)));
            }
            return;
        }
        if text.starts_with("[Request interrupted by user") {
            self.interrupted = true;
            return;
        }
        for line in text.lines() {
            self.note_line(line.trim(), note.kind == NoteKind::User);
        }
    }

    /// One line of a note: Aider's commits, undos, lint runs and errors; an API error.
    fn note_line(&mut self, l: &str, by_user: bool) {
        static AIDER_COMMIT: LazyLock<Regex> =
            LazyLock::new(|| re(r"^Commit ([0-9a-f]{7,40}) (.+)$"));
        static REMOVED: LazyLock<Regex> = LazyLock::new(|| re(r"^Removed: ([0-9a-f]{7,40}) "));
        static CHECK: LazyLock<Regex> =
            LazyLock::new(|| re(r"^([\w][\w .-]*?)\.{3,}\s*(Passed|Failed)\s*$"));
        static LOCATED: LazyLock<Regex> = LazyLock::new(|| re(r"^\S+\.\w+:\d+(?::\d+)?:?\s+\S.*$"));
        if l.is_empty() {
            return;
        }
        if let Some(c) = AIDER_COMMIT.captures(l) {
            self.commit(&c[1], &c[2]);
            return;
        }
        if let Some(c) = REMOVED.captures(l) {
            if !self.undone.contains(&c[1].to_owned()) {
                self.undone.push(c[1].to_owned());
            }
            return;
        }
        if l.contains("KeyboardInterrupt") || l == "^C" {
            self.interrupted = true;
            return;
        }
        if let Some(c) = CHECK.captures(l) {
            if &c[2] == "Failed" {
                let tool = c[1].trim().to_owned();
                if !self.runs.iter().any(|r| r.tool == tool && r.failed) {
                    self.runs.push(Run {
                        kind: Kind::Lint,
                        tool: tool.clone(),
                        command: tool,
                        outcome: None,
                        failed: true,
                        by_user: false,
                    });
                }
            }
            return;
        }
        // The located error of a failed check ("aider/commands.py:148:22: F821 undefined name").
        if LOCATED.is_match(l)
            && let Some(r) = self
                .runs
                .iter_mut()
                .rev()
                .find(|r| r.failed && r.outcome.is_none())
        {
            r.outcome = Some(one_line(l, 120));
            return;
        }
        if by_user {
            return;
        }
        let lower = l.to_lowercase();
        const BAD: &[&str] = &[
            "error",
            "failed",
            "exception",
            "timeout",
            "timed out",
            "token limit",
            "exhausted",
            "not found",
            "denied",
            "refused",
            "unable to",
            "did not conform",
            "failed to match",
            "reflections allowed",
        ];
        const CHATTER: &[&str] = &[
            "you can use",
            "use /",
            "for more info",
            "to reduce",
            "https://aider.chat",
        ];
        if BAD.iter().any(|b| lower.contains(b)) && !CHATTER.iter().any(|c| lower.starts_with(c)) {
            self.error(api_message(l).unwrap_or_else(|| l.to_owned()));
        }
    }

    /// Reads an agent's answer for the edits it states (Aider's SEARCH/REPLACE blocks, code
    /// blocks Cursor's editor applies, labelled `lang:path`).
    pub fn add_text(&mut self, text: &str, applied: &[String]) {
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let t = lines[i].trim();
            let Some(info) = t.strip_prefix("```") else {
                i += 1;
                continue;
            };
            // The block: up to its closing fence.
            let end = (i + 1..lines.len())
                .find(|&j| lines[j].trim_start().starts_with("```"))
                .unwrap_or(lines.len());
            let body = &lines[i + 1..end];
            let label = info
                .split_once(':')
                .map(|(_, p)| p.trim())
                .filter(|p| p.contains('.'));
            let above = (i > 0).then(|| lines[i - 1].trim()).filter(|p| {
                !p.is_empty() && !p.contains(' ') && super::sentences::is_file_token(p)
            });
            let search = body.iter().position(|l| l.starts_with("<<<<<<< SEARCH"));
            let path = label.or(above);
            if let Some(path) = path {
                let (old, new) = match search {
                    Some(s) => {
                        let mid = body
                            .iter()
                            .position(|l| l.starts_with("======="))
                            .unwrap_or(body.len());
                        let fin = body
                            .iter()
                            .position(|l| l.starts_with(">>>>>>> REPLACE"))
                            .unwrap_or(body.len());
                        (
                            body[s + 1..mid.max(s + 1)].join("\n"),
                            body[(mid + 1).min(fin)..fin].join("\n"),
                        )
                    }
                    None => (String::new(), body.join("\n")),
                };
                if search.is_some() || label.is_some() {
                    let done = applied
                        .iter()
                        .any(|a| a == path || a.ends_with(&format!("/{path}")));
                    let change = if done {
                        Change::Edited
                    } else {
                        Change::Proposed
                    };
                    let (symbols, sample) = added(path, &old, &new);
                    self.edit(path, change, symbols, sample);
                }
            }
            i = end + 1;
        }
    }
}

/// Terminal colour codes removed.
fn strip_ansi(s: &str) -> String {
    static ANSI: LazyLock<Regex> = LazyLock::new(|| re(r"\x1b\[[0-9;]*[A-Za-z]"));
    ANSI.replace_all(s, "").into_owned()
}

/// The message of an API error's JSON body: `400 {"error":{"message":"…"}}` → `400: …`.
fn api_message(l: &str) -> Option<String> {
    let i = l.find('{')?;
    let v: Value = serde_json::from_str(&l[i..]).ok()?;
    let m = v
        .pointer("/error/message")
        .or_else(|| v.get("message"))
        .and_then(Value::as_str)?;
    let first = super::sentences::split_sentences(m).into_iter().next()?;
    let status = l[..i].trim();
    Some(if status.is_empty() {
        first
    } else {
        format!("{status}: {first}")
    })
}

/// Tags an agent wraps results in (`<tool_use_error>`, `<system-reminder>…`) removed.
fn strip_tags(s: &str) -> String {
    ai_cli_session_collector::text::typed_text(s)
        .replace("<tool_use_error>", "")
        .replace("</tool_use_error>", "")
}

/// A command's output without a harness's wrapping.
fn clean_output(s: &str) -> String {
    strip_ansi(&strip_tags(s))
}

/// Everything a talk did.
pub fn of_talk(talk: &Talk) -> Work {
    let mut w = Work::default();
    for c in &talk.calls {
        w.add_call(c);
    }
    // Aider says which files its edit blocks were applied to.
    let applied: Vec<String> = talk
        .notes
        .iter()
        .flat_map(|n| n.text.lines())
        .filter_map(|l| l.trim().strip_prefix("Applied edit to "))
        .map(|p| p.trim().to_owned())
        .collect();
    for t in &talk.assistant_texts {
        w.add_text(t, &applied);
    }
    for n in &talk.notes {
        w.add_note(n);
    }
    w.resolve_merges(talk);
    w
}

impl Work {
    /// Finds the hash of a commit or merge made with `-m` in a later `git log` of the talk.
    fn resolve_merges(&mut self, talk: &Talk) {
        let pending = std::mem::take(&mut self.unhashed);
        for m in pending {
            if self.commits.iter().any(|c| c.message == m) {
                continue;
            }
            let found = talk.calls.iter().find_map(|c| {
                c.output.lines().find_map(|l| {
                    let i = l.find(m.as_str())?;
                    l[..i]
                        .split_whitespace()
                        .rev()
                        .find(|w| super::sentences::is_hash(w))
                        .map(str::to_owned)
                })
            });
            if let Some(h) = found {
                self.commit(&h, &m);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_status_names_what_changed() {
        assert_eq!(
            git_status(" M hello.py\n?? farewell.py\n?? notes.md\n").as_deref(),
            Some("modified hello.py; untracked farewell.py, notes.md")
        );
        // The leading space trimmed, and the long format.
        assert_eq!(
            git_status("M hello.py\nA  new.rs\n").as_deref(),
            Some("modified hello.py; added new.rs")
        );
        let long = "On branch main\nChanges not staged for commit:\n\tmodified:   src/a.rs\n\n\
                    Untracked files:\n\tb.txt\n";
        assert_eq!(
            git_status(long).as_deref(),
            Some("modified src/a.rs; untracked b.txt")
        );
        assert_eq!(git_status("nothing to commit, working tree clean"), None);
    }

    #[test]
    fn runs_that_only_look_are_kept_apart() {
        let mut w = Work::default();
        let r = run_of("git status --short", " M hello.py\n", false, false);
        assert_eq!(r.outcome.as_deref(), Some("modified hello.py"));
        w.add_run(r, "git status --short", " M hello.py\n");
        let r = run_of(
            "cargo test",
            "test result: ok. 3 passed; 0 failed",
            false,
            false,
        );
        w.add_run(r, "cargo test", "");
        assert_eq!(w.runs.len(), 1);
        assert_eq!(w.looked.len(), 1);
        // A command the person ran is told by its command line.
        let r = run_of("echo hi && ls *.py", "hi\na.py", false, true);
        assert_eq!(r.outcome, None);
        assert_eq!(
            super::super::observation::describe_run(&r),
            "the user ran `echo hi && ls *.py`"
        );
    }
}
