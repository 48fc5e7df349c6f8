//! The generated corpus: realistic Claude Code, Codex CLI and Gemini CLI transcripts from a
//! fixed seed, the same on every machine.

use std::io::Write;
use std::path::Path;

use crate::dir_bytes;

/// Deterministic xorshift: the same corpus on every machine.
pub(crate) struct Rng(pub(crate) u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub(crate) fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

pub(crate) const WORDS: &[&str] = &[
    "the",
    "test",
    "function",
    "returns",
    "error",
    "because",
    "timezone",
    "parser",
    "config",
    "value",
    "database",
    "migration",
    "webhook",
    "signature",
    "retry",
    "backoff",
    "request",
    "response",
    "cache",
    "invalidate",
    "session",
    "token",
    "refresh",
    "handler",
    "router",
    "middleware",
    "component",
    "state",
    "render",
    "build",
    "deploy",
    "pipeline",
    "docker",
    "image",
    "layer",
    "index",
    "query",
    "latency",
    "throughput",
    "memory",
    "leak",
    "allocation",
    "thread",
    "lock",
    "mutex",
    "async",
    "await",
    "future",
    "stream",
    "buffer",
    "encoding",
    "utf8",
    "json",
    "schema",
    "field",
    "type",
    "struct",
    "enum",
    "trait",
    "module",
    "crate",
    "package",
    "dependency",
    "version",
    "upgrade",
    "regression",
    "flaky",
    "timeout",
    "assert",
    "expected",
    "received",
    "null",
    "undefined",
    "promise",
    "callback",
    "closure",
    "iterator",
];
pub(crate) const FILES: &[&str] = &[
    "src/date.ts",
    "src/api/webhook.rs",
    "src/db/migrate.py",
    "lib/parser.go",
    "app/models/user.rb",
    "src/components/Header.tsx",
    "tests/test_auth.py",
    "Cargo.toml",
    "package.json",
    "src/cache.rs",
];
pub(crate) const PROMPTS: &[&str] = &[
    "Fix the failing timezone test in the date formatter",
    "Why does the webhook signature check fail in production?",
    "Refactor the parser so that it streams instead of buffering",
    "Add a database migration for the new sessions table",
    "The retry backoff is too aggressive, tone it down",
    "Investigate the memory leak in the cache layer",
    "Upgrade the dependency and fix the TypeError it causes",
    "Write tests for the refresh token handler",
    "请帮我修复用户认证失败的问题",
    "Explain how the router middleware chain works",
];

pub(crate) fn sentence(r: &mut Rng, words: usize) -> String {
    let mut s = String::new();
    for i in 0..words {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(r.pick(WORDS));
    }
    s.push('.');
    s
}

pub(crate) fn paragraph(r: &mut Rng, sentences: usize) -> String {
    (0..sentences)
        .map(|_| {
            let n = 6 + r.below(12);
            sentence(r, n)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn tool_output(r: &mut Rng) -> String {
    // Mostly short, sometimes long (file reads, test logs).
    let lines = if r.below(10) == 0 {
        60 + r.below(120)
    } else {
        2 + r.below(12)
    };
    (0..lines)
        .map(|i| {
            let file = r.pick(FILES);
            let n = 4 + r.below(8);
            format!("{:>4}  {file} {}", i + 1, sentence(r, n))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ts(base: i64, i: usize) -> String {
    chrono::DateTime::from_timestamp_millis(base + i as i64 * 4000)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Writes one Claude session (and sometimes a sub-agent file); returns messages written.
fn claude_session(r: &mut Rng, root: &Path, n: usize, target: usize, base: i64) -> usize {
    let project = format!("/home/dev/proj{}", n % 40);
    let dir = root.join(project.replace('/', "-"));
    std::fs::create_dir_all(&dir).unwrap();
    let sid = format!(
        "{:08x}-0000-4000-8000-{:012x}",
        n,
        r.next() & 0xffff_ffff_ffff
    );
    let mut f =
        std::io::BufWriter::new(std::fs::File::create(dir.join(format!("{sid}.jsonl"))).unwrap());
    let mut count = 0;
    let mut i = 0;
    let env = |uuid: &str, parent: &str, i: usize| {
        serde_json::json!({"uuid": uuid, "parentUuid": parent, "sessionId": sid, "cwd": project,
            "gitBranch": "main", "version": "2.1.120", "timestamp": ts(base, i), "isSidechain": false, "userType": "external"})
    };
    let mut parent = String::new();
    while count < target {
        let uuid = format!("{sid}-{i}");
        let mut l = env(&uuid, &parent, i);
        l["type"] = "user".into();
        l["message"] = serde_json::json!({"role": "user", "content": format!("{} ({})", r.pick(PROMPTS), sentence(r, 8))});
        writeln!(f, "{l}").unwrap();
        parent = uuid;
        count += 1;
        i += 1;
        let msg_id = format!("msg_{n}_{i}");
        // thinking, text, then a few tool calls with results
        for (kind, body) in [("thinking", paragraph(r, 2)), ("text", paragraph(r, 3))] {
            let uuid = format!("{sid}-{i}");
            let mut l = env(&uuid, &parent, i);
            l["type"] = "assistant".into();
            let block = if kind == "thinking" {
                serde_json::json!({"type": "thinking", "thinking": body, "signature": "EpwBCkYIBRgCKkDemo"})
            } else {
                serde_json::json!({"type": "text", "text": body})
            };
            l["message"] = serde_json::json!({"id": msg_id, "model": "claude-opus-4-7", "role": "assistant", "type": "message",
                "content": [block], "usage": {"input_tokens": 6, "output_tokens": 40 + i, "cache_read_input_tokens": 9000}});
            writeln!(f, "{l}").unwrap();
            parent = uuid;
            count += 1;
            i += 1;
        }
        for _ in 0..(1 + r.below(4)) {
            let call = format!("toolu_{n}_{i}");
            let uuid = format!("{sid}-{i}");
            let mut l = env(&uuid, &parent, i);
            l["type"] = "assistant".into();
            let (name, input) = match r.below(3) {
                0 => (
                    "Read",
                    serde_json::json!({"file_path": format!("{project}/{}", r.pick(FILES))}),
                ),
                1 => (
                    "Bash",
                    serde_json::json!({"command": format!("npm test -- {}", r.pick(WORDS)), "description": sentence(r, 5)}),
                ),
                _ => (
                    "Edit",
                    serde_json::json!({"file_path": format!("{project}/{}", r.pick(FILES)), "old_string": sentence(r, 6), "new_string": sentence(r, 6)}),
                ),
            };
            l["message"] = serde_json::json!({"id": format!("msg_{n}_{i}"), "model": "claude-opus-4-7", "role": "assistant",
                "content": [{"type": "tool_use", "id": call, "name": name, "input": input}], "usage": {"input_tokens": 3, "output_tokens": 20}});
            writeln!(f, "{l}").unwrap();
            parent = uuid;
            count += 1;
            i += 1;
            let uuid = format!("{sid}-{i}");
            let mut l = env(&uuid, &parent, i);
            l["type"] = "user".into();
            let out = tool_output(r);
            l["message"] = serde_json::json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": out}]});
            l["toolUseResult"] = serde_json::json!({"stdout": out.len(), "interrupted": false});
            writeln!(f, "{l}").unwrap();
            parent = uuid;
            count += 1;
            i += 1;
        }
    }
    count
}

fn codex_session(r: &mut Rng, root: &Path, n: usize, target: usize, base: i64) -> usize {
    let dir = root.join("2026/06/05");
    std::fs::create_dir_all(&dir).unwrap();
    let sid = format!("019e9a10-0000-7000-8000-{:012x}", n);
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(dir.join(format!("rollout-2026-06-05T10-00-00-{sid}.jsonl")))
            .unwrap(),
    );
    let line = |f: &mut dyn Write, i: usize, ty: &str, p: serde_json::Value| {
        writeln!(
            f,
            "{}",
            serde_json::json!({"timestamp": ts(base, i), "type": ty, "payload": p})
        )
        .unwrap();
    };
    line(
        &mut f,
        0,
        "session_meta",
        serde_json::json!({"id": sid, "timestamp": ts(base, 0), "cwd": format!("/home/dev/proj{}", n % 40), "originator": "codex_cli_rs", "cli_version": "0.135.0", "source": "cli"}),
    );
    let mut count = 1;
    let mut i = 1;
    let mut total = 0u64;
    while count < target {
        let prompt = format!("{} ({})", r.pick(PROMPTS), sentence(r, 6));
        line(
            &mut f,
            i,
            "event_msg",
            serde_json::json!({"type": "task_started", "turn_id": format!("t{i}")}),
        );
        line(
            &mut f,
            i,
            "response_item",
            serde_json::json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}),
        );
        line(
            &mut f,
            i,
            "event_msg",
            serde_json::json!({"type": "user_message", "message": prompt}),
        );
        line(
            &mut f,
            i,
            "response_item",
            serde_json::json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": paragraph(r, 1)}], "encrypted_content": "gAAAAA"}),
        );
        let call = format!("call_{n}_{i}");
        line(
            &mut f,
            i,
            "response_item",
            serde_json::json!({"type": "function_call", "name": "exec_command", "arguments": format!("{{\"cmd\":\"npm test -- {}\"}}", r.pick(WORDS)), "call_id": call}),
        );
        line(
            &mut f,
            i,
            "response_item",
            serde_json::json!({"type": "function_call_output", "call_id": call, "output": format!("Process exited with code 0\nOutput:\n{}", tool_output(r))}),
        );
        line(
            &mut f,
            i,
            "response_item",
            serde_json::json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": paragraph(r, 3)}]}),
        );
        total += 20_000;
        line(
            &mut f,
            i,
            "event_msg",
            serde_json::json!({"type": "token_count", "info": {"total_token_usage": {"input_tokens": total, "output_tokens": total / 50}}}),
        );
        count += 8;
        i += 1;
    }
    count
}

fn gemini_session(r: &mut Rng, root: &Path, n: usize, target: usize, base: i64) -> usize {
    let dir = root.join(format!("proj{}", n % 40)).join("chats");
    std::fs::create_dir_all(&dir).unwrap();
    let sid = format!("3f2a9c1b-0000-4000-8000-{:012x}", n);
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(dir.join(format!("session-2026-06-10T07-15-{n:08x}.jsonl"))).unwrap(),
    );
    writeln!(f, "{}", serde_json::json!({"sessionId": sid, "projectHash": "0".repeat(64), "startTime": ts(base, 0), "lastUpdated": ts(base, 0), "kind": "main"})).unwrap();
    let mut count = 1;
    let mut i = 1;
    while count < target {
        writeln!(f, "{}", serde_json::json!({"id": format!("u{i}"), "timestamp": ts(base, i), "type": "user", "content": [{"text": format!("{} ({})", r.pick(PROMPTS), sentence(r, 6))}]})).unwrap();
        let call = format!("read_file_{i}");
        let g = serde_json::json!({"id": format!("g{i}"), "timestamp": ts(base, i), "type": "gemini", "content": paragraph(r, 3), "model": "gemini-2.5-pro",
            "thoughts": [{"subject": "Plan", "description": sentence(r, 10)}],
            "tokens": {"input": 9000, "output": 120, "cached": 8000, "thoughts": 40, "total": 9160},
            "toolCalls": [{"id": call, "name": "read_file", "args": {"file_path": r.pick(FILES)}, "status": "success",
                "result": [{"functionResponse": {"id": call, "name": "read_file", "response": {"output": tool_output(r)}}}]}]});
        writeln!(f, "{g}").unwrap();
        writeln!(
            f,
            "{}",
            serde_json::json!({"$set": {"lastUpdated": ts(base, i)}})
        )
        .unwrap();
        count += 7;
        i += 1;
    }
    count
}

pub(crate) fn generate(out: &Path, messages: usize) {
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    let base = 1_780_000_000_000i64;
    let (claude, codex, gemini) = (out.join("claude"), out.join("codex"), out.join("gemini"));
    let mut written = 0;
    let mut n = 0;
    while written < messages {
        let target = 50 + r.below(400);
        written += match n % 10 {
            0..=6 => claude_session(&mut r, &claude, n, target, base + n as i64 * 3_600_000),
            7 | 8 => codex_session(&mut r, &codex, n, target, base + n as i64 * 3_600_000),
            _ => gemini_session(&mut r, &gemini, n, target, base + n as i64 * 3_600_000),
        };
        n += 1;
    }
    let bytes = dir_bytes(out);
    println!(
        "generated {written} records in {n} sessions, {:.1} MB",
        bytes as f64 / 1e6
    );
}
