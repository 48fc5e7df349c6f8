//! Structure-aware fuzzing of the three adapters (issue 12, "Fuzz it").
//!
//! Every case is one generated transcript file. Its records are taken from the real fixtures
//! in `shared/fixtures` (a run of consecutive lines of one file, lines of other files mixed in,
//! shuffled or repeated), and about half of them are mutated as JSON: fields removed, values
//! replaced by another JSON type, ids shared between records or emptied, garbage timestamps,
//! edge-case numbers, nesting far past serde_json's recursion limit, lone `\ud800` escapes,
//! invalid UTF-8, and (rarely) strings of megabytes. The records are then written as lines with
//! line-level damage: lines cut at any byte (also inside a UTF-8 character), CRLF, blank
//! lines, random bytes, two records on one line, a half-written last line. Gemini legacy
//! documents (one JSON object per file) are generated and damaged the same way.
//!
//! Each file is parsed in one pass and checked line by line against what the file holds
//! (`check_jsonl_one_pass`, `check_document_one_pass`): where the cursor stops and why, every
//! non-blank line either stored (exactly one message carries its bytes) or reported skipped,
//! undecodable lines reported with their offset, messages in line order. Every output of every
//! parse call is checked too (`check_common`): the cursor within the file, non-empty session
//! and message ids, prompts numbered from 1, usage totals computable. The file is then parsed
//! again the way the service does, in one of four modes (`run_case`): grown by whole lines
//! between calls (the result must equal the one pass exactly), grown by arbitrary bytes (equal
//! too, bar the documented early read of a complete last record), truncated or rewritten
//! between calls (a change the cursor can see restarts the file: equal to a one pass of the new
//! content), or read in tiny chunks (equal) and then from a cursor made for other content.
//! The cursor never moves back while a file only grows, and is round-tripped through JSON
//! between calls as the store persists it. Any panic, in the adapters or in a check, fails the
//! test and prints how to replay the case.
//!
//! `cargo test` runs a quick pass (`DEFAULT_CASES` over the three formats). The long run:
//!
//! ```text
//! MEMEX_FUZZ_CASES=1000000 cargo test --release -p ai-cli-session-collector --test fuzz -- --nocapture
//! ```
//!
//! `MEMEX_FUZZ_CASES` is the number of generated files over the three formats (split evenly);
//! `MEMEX_FUZZ_SEED` selects another sequence of cases; `MEMEX_FUZZ_REPLAY=<case>` runs one
//! case only (with the seed it was found with; filter the format by test name).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ai_cli_session_collector::{
    AdapterRegistry, ConversationAdapter, Cursor, Edit, MessageKind, ParseOutput, ParsedMessage,
    Role, aggregate_usage, parse_file, reader,
};
use serde_json::{Map, Value};

/// Generated files per `cargo test` run, over the three formats.
const DEFAULT_CASES: u64 = 3000;
const DEFAULT_SEED: u64 = 0x6d65_6d65_785f_667a;

// ---------------------------------------------------------------------------------------------
// Random numbers: SplitMix64, so a case is reproducible from its seed alone.

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    /// A number in `lo..hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo)
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }

    fn shuffle<T>(&mut self, xs: &mut [T]) {
        for i in (1..xs.len()).rev() {
            xs.swap(i, self.below(i + 1));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Formats, their vocabularies and where their files live.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Agent {
    Claude,
    Codex,
    Gemini,
}

impl Agent {
    fn name(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Codex => "codex",
            Agent::Gemini => "gemini",
        }
    }

    /// Keys the adapter reads: mutations add, retype or remove these.
    fn keys(self) -> &'static [&'static str] {
        match self {
            Agent::Claude => &[
                "type",
                "uuid",
                "parentUuid",
                "logicalParentUuid",
                "sessionId",
                "message",
                "content",
                "role",
                "model",
                "usage",
                "input_tokens",
                "output_tokens",
                "cache_read_input_tokens",
                "id",
                "requestId",
                "text",
                "thinking",
                "name",
                "input",
                "tool_use_id",
                "is_error",
                "isSidechain",
                "isMeta",
                "isCompactSummary",
                "isVisibleInTranscriptOnly",
                "isApiErrorMessage",
                "toolUseResult",
                "agentId",
                "timestamp",
                "cwd",
                "gitBranch",
                "subtype",
                "summary",
                "customTitle",
                "aiTitle",
                "agentName",
                "leafUuid",
                "tool_name",
            ],
            Agent::Codex => &[
                "type",
                "payload",
                "id",
                "timestamp",
                "session_id",
                "cwd",
                "git",
                "branch",
                "source",
                "subagent",
                "thread_spawn",
                "parent_thread_id",
                "forked_from_id",
                "model",
                "role",
                "content",
                "text",
                "summary",
                "name",
                "arguments",
                "input",
                "action",
                "call_id",
                "output",
                "message",
                "kind",
                "info",
                "total_token_usage",
                "input_tokens",
                "output_tokens",
                "cached_input_tokens",
                "reasoning_output_tokens",
                "num_turns",
                "thread_name",
                "record_type",
                "metadata",
                "exit_code",
            ],
            Agent::Gemini => &[
                "id",
                "type",
                "content",
                "displayContent",
                "text",
                "thought",
                "thoughts",
                "subject",
                "description",
                "toolCalls",
                "name",
                "args",
                "status",
                "result",
                "functionResponse",
                "response",
                "output",
                "error",
                "tokens",
                "input",
                "cached",
                "model",
                "timestamp",
                "$set",
                "$rewindTo",
                "messages",
                "sessionId",
                "projectHash",
                "kind",
                "startTime",
                "lastUpdated",
                "summary",
                "inlineData",
                "fileData",
            ],
        }
    }

    /// Values of `type`, `role`, `status`, ... the adapter branches on.
    fn words(self) -> &'static [&'static str] {
        match self {
            Agent::Claude => &[
                "user",
                "assistant",
                "system",
                "summary",
                "custom-title",
                "ai-title",
                "agent-name",
                "queue-operation",
                "progress",
                "attachment",
                "file-history-snapshot",
                "text",
                "thinking",
                "redacted_thinking",
                "tool_use",
                "server_tool_use",
                "tool_result",
                "web_search_tool_result",
                "image",
                "document",
                "tool_reference",
                "<synthetic>",
            ],
            Agent::Codex => &[
                "session_meta",
                "turn_context",
                "response_item",
                "event_msg",
                "compacted",
                "message",
                "reasoning",
                "function_call",
                "custom_tool_call",
                "local_shell_call",
                "web_search_call",
                "tool_search_call",
                "function_call_output",
                "custom_tool_call_output",
                "tool_search_output",
                "user_message",
                "agent_message",
                "agent_reasoning",
                "token_count",
                "thread_rolled_back",
                "thread_name_updated",
                "input_text",
                "output_text",
                "user",
                "assistant",
                "developer",
                "plain",
            ],
            Agent::Gemini => &[
                "user",
                "gemini",
                "info",
                "error",
                "warning",
                "subagent",
                "main",
                "success",
                "cancelled",
            ],
        }
    }
}

/// Keys whose values are ids: mutations make records share them, or empty them.
const ID_KEYS: &[&str] = &[
    "uuid",
    "parentUuid",
    "logicalParentUuid",
    "leafUuid",
    "sessionId",
    "session_id",
    "id",
    "requestId",
    "tool_use_id",
    "call_id",
    "agentId",
    "forked_from_id",
    "parent_thread_id",
    "$rewindTo",
];

/// Texts the adapters look into (wrappers, envelopes, markers, exit codes, ...).
const TRICKY: &[&str] = &[
    "",
    " ",
    "\n\n",
    "<system-reminder>hidden</system-reminder>",
    "<system-reminder>",
    "<ide_opened_file>a.ts</ide_opened_file>",
    "<ide_selection></ide_selection><ide_selection>",
    "<command-name>/model</command-name>",
    "<local-command-stdout></local-command-stdout>",
    "<bash-input>ls</bash-input> explain",
    "[Request interrupted by user]",
    "[Request interrupted by user",
    "<environment_context>\n  <cwd>/tmp/x</cwd>\n</environment_context>",
    "<environment_context><cwd>",
    "<cwd></cwd>",
    "<cwd>   </cwd>",
    "# AGENTS.md instructions for /x",
    "<user_shell_command>ls</user_shell_command>",
    "<turn_aborted>",
    "explain @a.ts\n--- Content from referenced files ---\nbody",
    "x\n--- Content from referenced files ---\n--- End of content ---",
    "--- End of content ---",
    "<state_snapshot>summary</state_snapshot>",
    "/compress",
    "?",
    "I ran the following shell command:",
    "Exit code: 1\nboom",
    "Exit code: 99999999999999999999",
    "Process exited with code -1",
    "{\"output\":\"out\",\"metadata\":{\"exit_code\":2}}",
    "{\"output\":5}",
    "{",
    "[1,2",
    "{\"a\":[1,{\"b\":null}]}",
    "<synthetic>",
    "认证失败 🎉 e\u{301} \u{200f}עברית",
    "\u{feff}bom",
    "nul\u{0}byte",
    "\u{2028}\u{2029}",
    "[image]",
    "🎉🎉🎉🎉",
];

/// Timestamps that are not timestamps, or are extreme ones.
fn garbage_timestamp(rng: &mut Rng) -> Value {
    const S: &[&str] = &[
        "",
        "not a date",
        "2026-13-45T99:99:99Z",
        "2026-06-05T10:28:20.123Z",
        "2026-06-05T10:28:20",
        "2026-06-05",
        "9999-12-31T23:59:59.999Z",
        "0000-01-01T00:00:00Z",
        "+275760-09-13T00:00:00Z",
        "1970-01-01T00:00:00+25:00",
        "2026-06-05T10:28:20.123456789123Z",
        "１９７０",
    ];
    match rng.below(3) {
        0 => Value::from(*rng.pick(S)),
        1 => edge_number(rng),
        _ => Value::from(rng.next() as i64),
    }
}

fn edge_number(rng: &mut Rng) -> Value {
    match rng.below(14) {
        0 => Value::from(u64::MAX),
        1 => Value::from(i64::MIN),
        2 => Value::from(i64::MAX),
        3 => Value::from(1e308),
        4 => Value::from(-1e308),
        5 => Value::from(0.5),
        6 => Value::from(-1),
        7 => Value::from(0),
        8 => Value::from(4_294_967_297u64),
        9 => Value::from(99_999_999_999i64),
        10 => Value::from(1e11),
        11 => Value::from(-0.0),
        12 => Value::from(u64::MAX / 2 + 1),
        _ => Value::from(rng.below(5000)),
    }
}

fn short_string(rng: &mut Rng) -> String {
    const C: &[char] = &[
        'a', 'Z', ' ', '\n', '\t', '\\', '"', '<', '>', '/', '{', '}', '认', '🎉', 'é', '\u{0}',
        '\u{7f}', '\u{2028}', '\u{feff}', '\u{301}', ':', '#',
    ];
    (0..rng.below(17)).map(|_| *rng.pick(C)).collect()
}

/// A JSON value of any type (a few levels deep at most), with the format's keys.
fn random_value(rng: &mut Rng, agent: Agent, depth: usize) -> Value {
    match rng.below(if depth >= 2 { 6 } else { 8 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.one_in(2)),
        2 => edge_number(rng),
        3 => Value::from(short_string(rng)),
        4 => Value::from(*rng.pick(agent.words())),
        5 => Value::from(*rng.pick(TRICKY)),
        6 => Value::Array(
            (0..rng.below(4))
                .map(|_| random_value(rng, agent, depth + 1))
                .collect(),
        ),
        _ => {
            let mut m = Map::new();
            for _ in 0..rng.below(4) {
                m.insert(
                    (*rng.pick(agent.keys())).to_owned(),
                    random_value(rng, agent, depth + 1),
                );
            }
            Value::Object(m)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Payloads that cannot be built as a `serde_json::Value`: they are spliced into the serialized
// record in place of a marker string.

/// Nesting: inside serde_json's limit of 128, around it, far past it, or never closed.
fn deep_nesting(rng: &mut Rng) -> Vec<u8> {
    let n = match rng.below(8) {
        0 | 1 => rng.range(1, 120),
        2 | 3 => rng.range(118, 136),
        4 => rng.range(136, 1000),
        5 => rng.range(1000, 6000),
        6 => rng.range(6000, 60_000),
        _ => rng.range(1, 8),
    };
    let (open, leaf, close): (&[u8], &[u8], &[u8]) = match rng.below(5) {
        0 => (b"[", b"1", b"]"),
        1 => (b"{\"a\":", b"null", b"}"),
        // Content blocks inside content blocks: what `blocks_text` recurses into.
        2 => (
            b"[{\"type\":\"tool_result\",\"content\":",
            b"\"deep\"",
            b"}]",
        ),
        3 => (
            b"{\"text\":\"t\",\"content\":[",
            b"{\"type\":\"text\",\"text\":\"x\"}",
            b"]}",
        ),
        _ => (b"[", b"", b""), // never closed
    };
    let mut v = Vec::with_capacity(n * (open.len() + close.len()) + leaf.len());
    for _ in 0..n {
        v.extend_from_slice(open);
    }
    v.extend_from_slice(leaf);
    for _ in 0..n {
        v.extend_from_slice(close);
    }
    v
}

/// A JSON string with UTF-16 escapes: lone and paired surrogates, bad escapes.
fn surrogate_string(rng: &mut Rng) -> Vec<u8> {
    const P: &[&str] = &[
        "text ",
        "\\ud800",
        "\\udbff",
        "\\udc00",
        "\\udfff",
        "\\ud83d\\ude00",
        "\\uD83D\\uDE00",
        "\\ud83d",
        "\\\\ud800",
        "\\ud800\\ud800",
        "\\udc00\\ud800",
        "\\u0000",
        "\\uffff",
        "\\ud83d\\u0041",
        "🎉",
        "认",
        "\\n",
        "\\\"",
    ];
    // Escapes JSON does not allow, now and then.
    const BAD: &[&str] = &["\\ud8", "\\uZZZZ", "\\u+d80", "\\x41"];
    let mut v = b"\"".to_vec();
    for _ in 0..rng.range(1, 6) {
        let p = if rng.one_in(12) {
            rng.pick(BAD)
        } else {
            rng.pick(P)
        };
        v.extend_from_slice(p.as_bytes());
    }
    if !rng.one_in(20) {
        v.push(b'"');
    }
    v
}

/// A JSON string holding bytes that are not UTF-8 (or control bytes JSON forbids).
fn invalid_utf8_string(rng: &mut Rng) -> Vec<u8> {
    const P: &[&[u8]] = &[
        b"caf\xe9",
        b"\xff\xfe",
        b"\xe8\xaa",
        b"\xc0\xaf",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\xf0\x9f\x8e",
        b"\x80",
        "认证".as_bytes(),
        b"plain",
        b"\x01",
        b"\\ud83d",
    ];
    let mut v = b"\"".to_vec();
    for _ in 0..rng.range(1, 5) {
        v.extend_from_slice(rng.pick::<&[u8]>(P));
    }
    v.push(b'"');
    v
}

/// Numbers and literals at and past the edge of what JSON allows.
fn odd_number(rng: &mut Rng) -> Vec<u8> {
    const P: &[&str] = &[
        "1e400",
        "-1e400",
        "1e-400",
        "18446744073709551616",
        "18446744073709551615",
        "-9223372036854775809",
        "123456789012345678901234567890",
        "-0",
        "1E+2",
        "0.0000000000000000000000000001",
        "01",
        "1.",
        ".5",
        "+1",
        "NaN",
        "Infinity",
        "-",
        "1e",
        "0x10",
        "tru",
        "nul",
    ];
    rng.pick(P).as_bytes().to_vec()
}

/// A string of 64 KiB to 3 MiB made of one repeated unit.
fn huge_string(rng: &mut Rng) -> Vec<u8> {
    const UNITS: &[&[u8]] = &[
        b"a",
        "认".as_bytes(),
        "🎉".as_bytes(),
        b"\\n",
        b"\\\"",
        b"\\ud83d\\ude00",
        b"\\ud800",
        b"\xe9",
        b"<system-reminder>x</system-reminder>",
        b"<ide_selection></ide_selection>",
        b"<command-name>/x</command-name>",
        b"\\n--- Content from referenced files ---",
        b"Exit code: 1\\n",
        b"<cwd>",
    ];
    let size = *rng.pick(&[64 << 10, 256 << 10, 1 << 20, 3 << 20]);
    let unit = *rng.pick(UNITS);
    let mut v = Vec::with_capacity(size + unit.len() + 2);
    v.push(b'"');
    if rng.one_in(2) {
        v.extend_from_slice(rng.pick(TRICKY).as_bytes());
    }
    while v.len() < size {
        v.extend_from_slice(unit);
    }
    v.push(b'"');
    v
}

/// State of one case's generator: the ids records may share, and the spliced payloads.
struct Gen<'a> {
    agent: Agent,
    seeds: &'a Seeds,
    ids: Vec<String>,
    payloads: Vec<Vec<u8>>,
    /// Whether this case may hold megabyte strings (rare, to keep cases small on average).
    huge: bool,
}

const MARK: &str = "@@FUZZ";

impl Gen<'_> {
    /// A marker string, replaced by `payload` when the record is written.
    fn splice(&mut self, payload: Vec<u8>) -> Value {
        self.payloads.push(payload);
        Value::from(format!("{MARK}{}@@", self.payloads.len() - 1))
    }

    fn odd_payload(&mut self, rng: &mut Rng) -> Value {
        let p = match rng.below(10) {
            0..=2 => deep_nesting(rng),
            3 | 4 => surrogate_string(rng),
            5 | 6 => invalid_utf8_string(rng),
            7 => odd_number(rng),
            _ if self.huge => huge_string(rng),
            _ => surrogate_string(rng),
        };
        self.splice(p)
    }

    fn id(&mut self, rng: &mut Rng) -> Value {
        match rng.below(8) {
            0 => Value::from(""),
            1 => Value::from(format!("{:016x}-fuzz", rng.next())),
            _ if self.ids.is_empty() => Value::from("shared-id"),
            _ => Value::from(rng.pick(&self.ids).clone()),
        }
    }

    /// A value a field of this format plausibly holds, or plausibly must not.
    fn vocab_value(&mut self, rng: &mut Rng) -> Value {
        match rng.below(7) {
            0 => Value::from(*rng.pick(self.agent.words())),
            1 => Value::from(*rng.pick(TRICKY)),
            2 => self.id(rng),
            3 => garbage_timestamp(rng),
            4 => edge_number(rng),
            5 => random_value(rng, self.agent, 0),
            _ => Value::Bool(rng.one_in(2)),
        }
    }

    /// Renders a (mutated) record, splicing in the payloads of its markers.
    fn render(&self, v: &Value, pretty: bool) -> Vec<u8> {
        let text = if pretty {
            serde_json::to_vec_pretty(v).unwrap()
        } else {
            serde_json::to_vec(v).unwrap()
        };
        if self.payloads.is_empty() {
            return text;
        }
        let pat = format!("\"{MARK}").into_bytes();
        let mut out = Vec::with_capacity(text.len());
        let mut i = 0;
        while i < text.len() {
            if text[i..].starts_with(&pat) {
                let rest = &text[i + pat.len()..];
                let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
                if digits > 0 && rest[digits..].starts_with(b"@@\"") {
                    let n: usize = std::str::from_utf8(&rest[..digits])
                        .unwrap()
                        .parse()
                        .unwrap();
                    out.extend_from_slice(&self.payloads[n]);
                    i += pat.len() + digits + 3;
                    continue;
                }
            }
            out.push(text[i]);
            i += 1;
        }
        out
    }
}

#[derive(Clone, Debug)]
enum Seg {
    Key(String),
    Idx(usize),
}

/// Paths to the nodes of `v` (the root first), at most a few hundred.
fn nodes(v: &Value) -> Vec<Vec<Seg>> {
    fn walk(v: &Value, path: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
        if out.len() >= 400 || path.len() > 16 {
            return;
        }
        out.push(path.clone());
        match v {
            Value::Object(o) => {
                for (k, x) in o {
                    path.push(Seg::Key(k.clone()));
                    walk(x, path, out);
                    path.pop();
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    path.push(Seg::Idx(i));
                    walk(x, path, out);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

fn node<'a>(v: &'a Value, path: &[Seg]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, s| match (s, cur) {
        (Seg::Key(k), Value::Object(o)) => o.get(k),
        (Seg::Idx(i), Value::Array(a)) => a.get(*i),
        _ => None,
    })
}

fn node_mut<'a>(v: &'a mut Value, path: &[Seg]) -> Option<&'a mut Value> {
    let mut cur = v;
    for s in path {
        cur = match (s, cur) {
            (Seg::Key(k), Value::Object(o)) => o.get_mut(k)?,
            (Seg::Idx(i), Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// Removes the node at `path` from its parent.
fn remove_node(v: &mut Value, path: &[Seg]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    match (last, node_mut(v, parent)) {
        (Seg::Key(k), Some(Value::Object(o))) => {
            o.remove(k);
        }
        (Seg::Idx(i), Some(Value::Array(a))) if *i < a.len() => {
            a.remove(*i);
        }
        _ => {}
    }
}

/// Paths to the objects of `v`.
fn object_nodes(v: &Value) -> Vec<Vec<Seg>> {
    fn walk(v: &Value, path: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
        let Value::Object(o) = v else {
            if let Value::Array(a) = v {
                for (i, x) in a.iter().enumerate().take(64) {
                    path.push(Seg::Idx(i));
                    walk(x, path, out);
                    path.pop();
                }
            }
            return;
        };
        if out.len() >= 200 || path.len() > 16 {
            return;
        }
        out.push(path.clone());
        for (k, x) in o {
            path.push(Seg::Key(k.clone()));
            walk(x, path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

/// One structural mutation of a record.
fn mutate(rng: &mut Rng, g: &mut Gen<'_>, v: &mut Value) {
    let paths = nodes(v);
    let path = rng.pick(&paths).clone();
    match rng.below(13) {
        // A field (or list element) goes missing.
        0 | 1 => remove_node(v, &path),
        // A value of another type.
        2 | 3 => {
            let x = random_value(rng, g.agent, 0);
            if let Some(n) = node_mut(v, &path) {
                *n = x;
            }
        }
        // A value from the format's vocabulary, or a tricky one.
        4 => {
            let x = g.vocab_value(rng);
            if let Some(n) = node_mut(v, &path) {
                *n = x;
            }
        }
        // Something serde_json cannot even hold: deep nesting, lone surrogates, bad UTF-8,
        // out-of-range numbers, megabytes.
        5 => {
            let x = g.odd_payload(rng);
            if let Some(n) = node_mut(v, &path) {
                *n = x;
            }
        }
        // A key the adapter reads, set on some object of the record.
        6 | 7 => {
            let objs = object_nodes(v);
            if objs.is_empty() {
                return;
            }
            let p = rng.pick(&objs).clone();
            let key = *rng.pick(g.agent.keys());
            let x = match rng.below(4) {
                0 => g.odd_payload(rng),
                1 => random_value(rng, g.agent, 0),
                _ => g.vocab_value(rng),
            };
            if let Some(Value::Object(o)) = node_mut(v, &p) {
                o.insert(key.to_owned(), x);
            }
        }
        // Ids shared with other records, fresh, or empty.
        8 => {
            let objs = object_nodes(v);
            if objs.is_empty() {
                return;
            }
            let p = rng.pick(&objs).clone();
            let key = *rng.pick(ID_KEYS);
            let x = g.id(rng);
            if let Some(Value::Object(o)) = node_mut(v, &p) {
                o.insert(key.to_owned(), x);
            }
        }
        // Garbage timestamps.
        9 => {
            let objs = object_nodes(v);
            if objs.is_empty() {
                return;
            }
            let p = rng.pick(&objs).clone();
            let key = *rng.pick(&["timestamp", "startTime", "lastUpdated"]);
            let x = garbage_timestamp(rng);
            if let Some(Value::Object(o)) = node_mut(v, &p) {
                o.insert(key.to_owned(), x);
            }
        }
        // Lists: elements repeated (past 1024 blocks now and then), reordered or cut;
        // strings: cut (maybe mid-character), extended, repeated.
        10 => {
            let big = rng.one_in(40);
            let Some(n) = node_mut(v, &path) else { return };
            match n {
                Value::Array(a) if !a.is_empty() => match rng.below(3) {
                    0 => {
                        let x = a[rng.below(a.len())].clone();
                        let times = if big { 1030 } else { rng.range(1, 20) };
                        // At most 256 KiB more (payloads of markers included): repeats of
                        // repeats would grow without bound.
                        let size = g.render(&x, false).len();
                        if size * times <= 256 << 10 {
                            for _ in 0..times {
                                a.push(x.clone());
                            }
                        }
                    }
                    1 => rng.shuffle(a),
                    _ => a.truncate(rng.below(a.len())),
                },
                Value::String(s) => {
                    let cut = s
                        .char_indices()
                        .map(|(i, _)| i)
                        .nth(rng.below(s.chars().count() + 1))
                        .unwrap_or(s.len());
                    let mut t = match rng.below(3) {
                        0 => s[..cut].to_owned(),
                        1 => format!("{}{}", rng.pick(TRICKY), s),
                        _ => format!("{}{}", s, rng.pick(TRICKY)),
                    };
                    if t.len() < 1024 && rng.one_in(8) {
                        t = t.repeat(rng.range(2, 50));
                    }
                    *s = t;
                }
                other => *other = random_value(rng, g.agent, 0),
            }
        }
        // A subtree of another record of the format put in place of this node.
        11 => {
            let file = rng.pick(&g.seeds.files);
            let line = rng.pick(file);
            let Ok(d) = reader::decode_json(line) else {
                return;
            };
            let donor_paths = nodes(&d.value);
            let dp = rng.pick(&donor_paths).clone();
            let mut d = d.value;
            let x = node_mut(&mut d, &dp).map(std::mem::take);
            if let (Some(x), Some(n)) = (x, node_mut(v, &path)) {
                *n = x;
            }
        }
        // The whole record turned into another kind.
        _ => {
            if let Value::Object(o) = v {
                let k = if rng.one_in(3) { "role" } else { "type" };
                o.insert(k.to_owned(), Value::from(*rng.pick(g.agent.words())));
            }
        }
    }
}

/// Some node of the record (a leaf mostly) replaced by a megabyte string.
fn put_huge(rng: &mut Rng, g: &mut Gen<'_>, v: &mut Value) {
    let paths = nodes(v);
    let leaves: Vec<&Vec<Seg>> = paths
        .iter()
        .filter(|p| node(v, p).is_some_and(|n| !n.is_object() && !n.is_array()))
        .collect();
    let path = if leaves.is_empty() || rng.one_in(5) {
        rng.pick(&paths).clone()
    } else {
        (*rng.pick(&leaves)).clone()
    };
    let x = g.splice(huge_string(rng));
    if let Some(n) = node_mut(v, &path) {
        *n = x;
    }
}

/// Byte-level damage to one line.
fn damage_line(rng: &mut Rng, g: &Gen<'_>, line: &mut Vec<u8>) {
    match rng.below(20) {
        // Cut at any byte, also inside a UTF-8 character.
        0..=4 => line.truncate(rng.below(line.len() + 1)),
        // Random bytes, or bytes JSON is made of.
        5 | 6 => {
            const ALPHA: &[u8] = b"{}[]\":,\\ud80nultrefas0123456789\xff\xe8\xaa\r\t ";
            let n = rng.below(80);
            *line = if rng.one_in(2) {
                (0..n).map(|_| rng.next() as u8).collect()
            } else {
                (0..n).map(|_| *rng.pick(ALPHA)).collect()
            };
        }
        // Valid JSON that is not an object.
        7 | 8 => {
            const NOT_OBJECTS: &[&str] = &[
                "[]",
                "null",
                "1",
                "\"x\"",
                "true",
                "[{\"type\":\"user\"}]",
                "\"\\ud800\"",
                "-0",
            ];
            *line = rng.pick(NOT_OBJECTS).as_bytes().to_vec();
        }
        // Two records on one line.
        9 | 10 => {
            let file = rng.pick(&g.seeds.files);
            let other = rng.pick(file);
            if rng.one_in(2) {
                line.push(b' ');
            }
            line.extend_from_slice(other);
        }
        // Whitespace around the record (JSON's, and form feed, which JSON does not allow).
        11..=13 => {
            let ws: &[u8] = rng.pick::<&[u8]>(&[&b"  "[..], b"\t", b"\x0c", b" \r"]);
            if rng.one_in(2) {
                *line = [ws, line].concat();
            } else {
                line.extend_from_slice(ws);
            }
        }
        // A byte flipped or a control byte inserted.
        14..=16 => {
            if !line.is_empty() {
                let i = rng.below(line.len());
                if rng.one_in(2) {
                    line[i] ^= 1 << rng.below(8);
                } else {
                    line.insert(i, *rng.pick(&[0u8, 1, 0x1b, 0x7f, 0xc0]));
                }
            }
        }
        // Written with its own newlines inside (pretty-printed by some other tool): many bad
        // lines at once, so rarely.
        17 => {
            if rng.one_in(5)
                && let Ok(d) = reader::decode_json(line)
                && let Ok(p) = serde_json::to_vec_pretty(&d.value)
            {
                *line = p;
            }
        }
        // A byte order mark.
        18 => *line = ["\u{feff}".as_bytes(), line].concat(),
        _ => line.extend_from_slice(&line.clone()),
    }
}

// ---------------------------------------------------------------------------------------------
// Seeds: the records of the real fixtures.

struct Seeds {
    /// Per fixture file, its non-blank lines (the huge ones made smaller).
    files: Vec<Vec<Vec<u8>>>,
    /// Gemini: legacy whole-file documents.
    docs: Vec<Value>,
    /// Gemini: message objects (from JSONL lines and documents).
    messages: Vec<Value>,
}

fn fixtures() -> PathBuf {
    std::env::var_os("MEMEX_FIXTURES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures"),
        PathBuf::from,
    )
}

fn shrink_strings(v: &mut Value, max: usize) {
    match v {
        Value::String(s) if s.len() > max => {
            let cut = (0..=max).rev().find(|&i| s.is_char_boundary(i)).unwrap();
            s.truncate(cut);
        }
        Value::Array(a) => a.iter_mut().for_each(|x| shrink_strings(x, max)),
        Value::Object(o) => o.values_mut().for_each(|x| shrink_strings(x, max)),
        _ => {}
    }
}

fn load_seeds(agent: Agent) -> Seeds {
    let root = fixtures().join(agent.name());
    assert!(root.is_dir(), "no fixtures at {}", root.display());
    let mut paths: Vec<PathBuf> = walkdir::WalkDir::new(&root)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(walkdir::DirEntry::into_path)
        .collect();
    paths.sort();
    let mut seeds = Seeds {
        files: Vec::new(),
        docs: Vec::new(),
        messages: Vec::new(),
    };
    for p in paths {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(&p).unwrap();
        if name.ends_with(".jsonl") {
            let mut lines = Vec::new();
            for l in bytes.split(|&b| b == b'\n') {
                if l.trim_ascii().is_empty() {
                    continue;
                }
                let mut l = l.to_vec();
                if l.len() > 32 << 10 {
                    l = match reader::decode_json(&l) {
                        Ok(mut d) => {
                            shrink_strings(&mut d.value, 2048);
                            serde_json::to_vec(&d.value).unwrap()
                        }
                        Err(_) => l[..32 << 10].to_vec(),
                    };
                }
                if let Ok(d) = reader::decode_json(&l)
                    && d.value.get("id").is_some_and(Value::is_string)
                    && d.value.get("type").is_some()
                {
                    seeds.messages.push(d.value);
                }
                lines.push(l);
            }
            if !lines.is_empty() {
                seeds.files.push(lines);
            }
        } else if agent == Agent::Gemini
            && name.ends_with(".json")
            && let Ok(d) = reader::decode_json(&bytes)
        {
            if let Some(m) = d.value.get("messages").and_then(Value::as_array) {
                seeds.messages.extend(m.iter().cloned());
            }
            seeds.docs.push(d.value);
        }
    }
    assert!(
        seeds.files.iter().map(Vec::len).sum::<usize>() >= 20,
        "too few {} fixture records",
        agent.name()
    );
    if agent == Agent::Gemini {
        assert!(!seeds.docs.is_empty() && seeds.messages.len() >= 10);
    }
    seeds
}

/// Ids found in the chosen records, for records to share.
fn collect_ids(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                match x {
                    Value::String(s) if ID_KEYS.contains(&k.as_str()) && !s.is_empty() => {
                        if out.len() < 16 {
                            out.push(s.clone());
                        }
                    }
                    _ => collect_ids(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_ids(x, out)),
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Generating whole files.

/// A JSONL transcript of the agent's format.
fn gen_jsonl(rng: &mut Rng, agent: Agent, seeds: &Seeds, huge: bool) -> Vec<u8> {
    let n = match rng.below(20) {
        0 => rng.below(2),
        1..=12 => rng.range(1, 8),
        13..=17 => rng.range(8, 24),
        _ => rng.range(24, 70),
    };
    let file = rng.pick(&seeds.files);
    let start = rng.below(file.len());
    let mut recs: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            if rng.one_in(5) {
                let other = rng.pick(&seeds.files);
                rng.pick(other).clone()
            } else {
                file[(start + i) % file.len()].clone()
            }
        })
        .collect();
    let mut g = Gen {
        agent,
        seeds,
        ids: Vec::new(),
        payloads: Vec::new(),
        huge,
    };
    for r in &recs {
        if let Ok(d) = reader::decode_json(r) {
            collect_ids(&d.value, &mut g.ids);
        }
    }
    if agent == Agent::Gemini && rng.one_in(3) {
        // Rewinds and checkpoints, pointing at ids of this file.
        for _ in 0..rng.range(1, 4) {
            let rec = if rng.one_in(2) {
                serde_json::json!({ "$rewindTo": g.id(rng) })
            } else {
                let k = rng.below(6);
                let msgs: Vec<Value> = (0..k).map(|_| rng.pick(&seeds.messages).clone()).collect();
                serde_json::json!({ "$set": { "messages": msgs, "lastUpdated": garbage_timestamp(rng) } })
            };
            let at = rng.below(recs.len() + 1);
            recs.insert(at, serde_json::to_vec(&rec).unwrap());
        }
    }
    if rng.one_in(6) {
        rng.shuffle(&mut recs);
    }
    if rng.one_in(8) && !recs.is_empty() {
        for _ in 0..rng.range(1, 4) {
            let x = rng.pick(&recs).clone();
            let at = rng.below(recs.len() + 1);
            recs.insert(at, x);
        }
    }
    for r in &mut recs {
        if rng.one_in(2) {
            continue;
        }
        let Ok(d) = reader::decode_json(r) else {
            continue;
        };
        let mut v = d.value;
        for _ in 0..rng.range(1, 5) {
            mutate(rng, &mut g, &mut v);
        }
        *r = g.render(&v, false);
    }
    if huge && !recs.is_empty() {
        // At least one megabyte string in a case meant to have them.
        let i = rng.below(recs.len());
        if let Ok(d) = reader::decode_json(&recs[i]) {
            let mut v = d.value;
            put_huge(rng, &mut g, &mut v);
            recs[i] = g.render(&v, false);
        }
    }
    // Lines.
    let crlf = rng.one_in(10);
    let mut out = Vec::new();
    if rng.one_in(60) {
        out.extend_from_slice("\u{feff}".as_bytes());
    }
    for mut r in recs {
        if rng.one_in(12) {
            damage_line(rng, &g, &mut r);
        }
        out.extend_from_slice(&r);
        out.extend_from_slice(if crlf || rng.one_in(40) {
            b"\r\n"
        } else {
            b"\n"
        });
        if rng.one_in(20) {
            let blank: &[u8] = rng.pick::<&[u8]>(&[&b"\n"[..], b"   \n", b"\r\n", b"\t\n\n"]);
            out.extend_from_slice(blank);
        }
    }
    match rng.below(12) {
        // The writer has not written the last newline yet.
        0 | 1 if out.last() == Some(&b'\n') => {
            out.pop();
            if out.last() == Some(&b'\r') {
                out.pop();
            }
        }
        // ... or is in the middle of a line (maybe of a character).
        2 | 3 => out.truncate(rng.below(out.len() + 1)),
        // Only noise.
        4 if rng.one_in(4) => {
            out = (0..rng.below(300)).map(|_| rng.next() as u8).collect();
        }
        _ => {}
    }
    out
}

/// A Gemini legacy whole-file session document.
fn gen_document(rng: &mut Rng, seeds: &Seeds, huge: bool) -> Vec<u8> {
    let mut g = Gen {
        agent: Agent::Gemini,
        seeds,
        ids: Vec::new(),
        payloads: Vec::new(),
        huge,
    };
    let mut doc = if rng.one_in(3) {
        rng.pick(&seeds.docs).clone()
    } else {
        let mut d = rng.pick(&seeds.docs).clone();
        if let Value::Object(o) = &mut d {
            let msgs: Vec<Value> = (0..rng.below(14))
                .map(|_| rng.pick(&seeds.messages).clone())
                .collect();
            o.insert("messages".into(), Value::Array(msgs));
        }
        d
    };
    collect_ids(&doc, &mut g.ids);
    for _ in 0..rng.below(7) {
        mutate(rng, &mut g, &mut doc);
    }
    if huge {
        put_huge(rng, &mut g, &mut doc);
    }
    let mut out = g.render(&doc, rng.one_in(2));
    match rng.below(16) {
        // Half-written: Gemini rewrites the file in place.
        0..=2 => out.truncate(rng.below(out.len() + 1)),
        3 => out.extend_from_slice(b"\n}garbage"),
        4 => {
            out = rng
                .pick(&[&b"[]"[..], b"null", b"\"doc\"", b"", b"  \n"])
                .to_vec()
        }
        5 => out = ["\u{feff}".as_bytes(), &out].concat(),
        6 => {
            let mut crlf = Vec::with_capacity(out.len() + out.len() / 8);
            for &b in &out {
                if b == b'\n' {
                    crlf.push(b'\r');
                }
                crlf.push(b);
            }
            out = crlf;
        }
        7 => {
            let mut line = std::mem::take(&mut out);
            damage_line(rng, &g, &mut line);
            out = line;
        }
        _ => {}
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Checks.

/// Lines of a file as a one-pass parse numbers them: `(start offset, bytes without '\n')`.
struct Lines<'a> {
    complete: Vec<(u64, &'a [u8])>,
    tail_start: u64,
    tail: &'a [u8],
}

fn split_lines(b: &[u8]) -> Lines<'_> {
    let mut complete = Vec::new();
    let mut start = 0usize;
    for (i, &c) in b.iter().enumerate() {
        if c == b'\n' {
            complete.push((start as u64, &b[start..i]));
            start = i + 1;
        }
    }
    Lines {
        complete,
        tail_start: start as u64,
        tail: &b[start..],
    }
}

/// Whether an unterminated last line is complete enough to be read before its newline.
fn tail_is_taken(tail: &[u8]) -> bool {
    let t = tail.trim_ascii();
    t.starts_with(b"{") && reader::decode_json(t).is_ok()
}

/// A message without its raw bytes and long texts, for failure messages.
fn brief(m: &ParsedMessage) -> String {
    let text: String = m.text.chars().take(80).collect();
    format!(
        "line {} seq {} session {:?} id {:?} {:?}/{:?} prompt {} text {:?}",
        m.line, m.seq, m.session_id, m.message_id, m.role, m.kind, m.prompt_number, text
    )
}

fn non_empty(s: &Option<String>, what: &str, m: &ParsedMessage) {
    assert!(
        s.as_deref().is_none_or(|s| !s.is_empty()),
        "empty {what}: {}",
        brief(m)
    );
}

/// What every parse output must satisfy, whatever the input.
fn check_common(agent: Agent, out: &ParseOutput, len: u64) {
    assert!(
        out.cursor.offset <= len,
        "cursor offset {} beyond the file's {len} bytes",
        out.cursor.offset
    );
    assert!(out.bytes <= len, "consumed {} of {len} bytes", out.bytes);
    for m in &out.messages {
        assert_eq!(m.agent, agent.name());
        assert!(!m.session_id.is_empty(), "empty session id: {}", brief(m));
        assert!(!m.message_id.is_empty(), "empty message id: {}", brief(m));
        non_empty(&m.parent_id, "parent id", m);
        non_empty(&m.agent_id, "agent id", m);
        non_empty(&m.usage_key, "usage key", m);
        non_empty(
            &m.tool_call.as_ref().and_then(|c| c.call_id.clone()),
            "tool call id",
            m,
        );
        non_empty(
            &m.tool_result.as_ref().and_then(|c| c.call_id.clone()),
            "tool result id",
            m,
        );
        if m.kind == MessageKind::UserPrompt {
            assert_eq!(m.role, Role::User, "{}", brief(m));
            assert!(m.prompt_number >= 1, "prompt numbered 0: {}", brief(m));
        }
        assert_eq!(
            m.kind == MessageKind::ToolCall,
            m.tool_call.is_some(),
            "tool call without its call (or the reverse): {}",
            brief(m)
        );
        if m.tool_result.is_some() {
            assert_eq!(m.kind, MessageKind::ToolResult, "{}", brief(m));
        }
    }
    for s in &out.sessions {
        assert!(!s.session_id.is_empty(), "session without an id: {s:?}");
        if let Some((_, t)) = &s.title {
            assert!(!t.is_empty(), "empty title: {s:?}");
        }
    }
    for e in &out.edits {
        match e {
            Edit::Deactivate {
                session_id,
                message_ids,
            } => {
                assert!(!session_id.is_empty());
                assert!(!message_ids.is_empty(), "{e:?}");
                assert!(message_ids.iter().all(|i| !i.is_empty()), "{e:?}");
            }
            Edit::DeactivateTalks {
                session_id,
                from_prompt,
                to_prompt,
            } => {
                assert!(!session_id.is_empty());
                assert!(1 <= *from_prompt && from_prompt <= to_prompt, "{e:?}");
            }
        }
    }
    // Usage totals as the store and `memex stats` compute them: never less than any one
    // reported usage.
    let total = aggregate_usage(&out.messages);
    for u in out.messages.iter().filter(|m| m.usage_key.is_some()) {
        let u = u.usage.unwrap_or_default();
        assert!(total.input_tokens >= u.input_tokens && total.output_tokens >= u.output_tokens);
    }
}

/// A one-pass parse of a JSONL file against the file itself, line by line.
fn check_jsonl_one_pass(agent: Agent, bytes: &[u8], out: &ParseOutput) {
    check_common(agent, out, bytes.len() as u64);
    let lines = split_lines(bytes);
    let taken = tail_is_taken(lines.tail);
    let expect_offset = if taken {
        bytes.len() as u64
    } else {
        lines.tail_start
    };
    assert_eq!(out.cursor.offset, expect_offset, "cursor offset");
    assert_eq!(
        out.pending_tail,
        !lines.tail.is_empty() && !taken,
        "pending tail"
    );
    let mut records = lines.complete.clone();
    if taken {
        records.push((lines.tail_start, lines.tail));
    }
    assert_eq!(out.cursor.line, records.len() as u64, "lines consumed");

    // Messages per line: contiguous, in line order, numbered within the line.
    let mut by_line: BTreeMap<u64, Vec<&ParsedMessage>> = BTreeMap::new();
    let mut last = (0u64, 0u64);
    for m in &out.messages {
        assert!(
            (m.line, m.seq) > last || (m.line == last.0 && m.seq == last.1 && m.seq & 1023 == 1023),
            "messages out of order: line {} seq {} after line {} seq {}",
            m.line,
            m.seq,
            last.0,
            last.1
        );
        last = (m.line, m.seq);
        assert!(
            m.line >= 1 && m.line as usize <= records.len(),
            "message on line {} of {}",
            m.line,
            records.len()
        );
        assert_eq!(m.seq >> 10, m.line, "seq of {}", m.message_id);
        by_line.entry(m.line).or_default().push(m);
    }
    let mut issues: BTreeMap<u64, Vec<&ai_cli_session_collector::ParseIssue>> = BTreeMap::new();
    for i in &out.issues {
        assert!(
            i.line >= 1 && i.line as usize <= records.len(),
            "issue on line {} of {}",
            i.line,
            records.len()
        );
        assert_eq!(
            i.byte_offset,
            records[i.line as usize - 1].0,
            "issue offset: {i:?}"
        );
        issues.entry(i.line).or_default().push(i);
    }
    for (n, (_, raw)) in records.iter().enumerate() {
        let n = n as u64 + 1;
        let msgs = by_line.remove(&n).unwrap_or_default();
        let iss = issues.remove(&n).unwrap_or_default();
        let trimmed = raw.trim_ascii();
        if trimmed.is_empty() {
            assert!(
                msgs.is_empty() && iss.is_empty(),
                "blank line {n} produced output"
            );
            continue;
        }
        for (i, m) in msgs.iter().enumerate() {
            assert_eq!(m.seq & 1023, (i as u64).min(1023), "seq within line {n}");
            assert_eq!(m.raw.is_some(), i == 0, "raw bytes on line {n}");
        }
        let skipped: Vec<_> = iss.iter().filter(|i| !i.kept).collect();
        let kept: Vec<_> = iss.iter().filter(|i| i.kept).collect();
        match reader::decode_json(trimmed) {
            Err(reason) => {
                assert!(msgs.is_empty(), "undecodable line {n} produced messages");
                assert_eq!(iss.len(), 1, "issues of undecodable line {n}: {iss:?}");
                assert!(
                    !iss[0].kept && iss[0].reason == reason.to_string(),
                    "{iss:?}"
                );
            }
            Ok(d) => {
                // Stored (one message carries the line, byte for byte) or skipped, never both,
                // never neither.
                if let Some(first) = msgs.first() {
                    assert_eq!(first.raw.as_deref(), Some(*raw), "raw of line {n}");
                    assert!(skipped.is_empty(), "line {n} stored and skipped: {iss:?}");
                    let lossy = kept
                        .iter()
                        .filter(|i| i.reason.starts_with("invalid UTF-8"))
                        .count();
                    assert_eq!(
                        lossy,
                        usize::from(d.lossy_utf8),
                        "UTF-8 issues of line {n}: {iss:?}"
                    );
                } else {
                    assert_eq!(skipped.len(), 1, "line {n} neither stored nor skipped");
                    assert!(
                        kept.is_empty(),
                        "line {n} skipped but reported kept: {iss:?}"
                    );
                }
                if !d.value.is_object() {
                    assert!(msgs.is_empty(), "line {n} is not an object");
                }
            }
        }
    }
    assert!(by_line.is_empty() && issues.is_empty());
}

/// A one-pass parse of a Gemini document against the document.
fn check_document_one_pass(bytes: &[u8], out: &ParseOutput) {
    check_common(Agent::Gemini, out, bytes.len() as u64);
    let decoded = reader::decode_json(bytes);
    match &decoded {
        Ok(d) if d.value.is_object() && !bytes.trim_ascii().is_empty() => {
            assert_eq!(out.cursor.offset, bytes.len() as u64);
            assert!(out.cursor.head.is_some() && !out.pending_tail);
            assert!(out.issues.iter().all(|i| i.kept), "{:?}", out.issues);
            let first = out.messages.first().expect("the document message");
            assert_eq!(first.message_id, "document");
            assert_eq!(first.raw.as_deref(), Some(bytes), "document raw");
            for (i, m) in out.messages.iter().enumerate() {
                assert_eq!((m.seq, m.line), (i as u64, 0));
                assert_eq!(m.raw.is_some(), i == 0);
            }
        }
        _ => {
            assert!(out.messages.is_empty() && out.edits.is_empty());
            assert_eq!(out.cursor, Cursor::default());
            let blank = bytes.trim_ascii().is_empty();
            assert_eq!(out.pending_tail, !blank && decoded.is_err());
            assert_eq!(
                out.issues.len(),
                usize::from(!blank && decoded.is_ok()),
                "{:?}",
                out.issues
            );
        }
    }
}

/// Message lists equal, or a failure naming the first difference.
#[track_caller]
fn assert_same(a: &[ParsedMessage], b: &[ParsedMessage], what: &str) {
    if a == b {
        return;
    }
    let i = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let show = |l: &[ParsedMessage]| {
        l.get(i).map_or("(none)".to_owned(), |m| {
            format!(
                "{}; raw {:?}",
                brief(m),
                m.raw
                    .as_ref()
                    .map(|r| String::from_utf8_lossy(&r[..r.len().min(120)]).into_owned())
            )
        })
    };
    let fields = match (a.get(i), b.get(i)) {
        (Some(x), Some(y)) => {
            let mut f = Vec::new();
            let mut x = x.clone();
            for (name, same) in [
                ("raw", x.raw == y.raw),
                ("text", x.text == y.text),
                (
                    "ids",
                    x.message_id == y.message_id && x.session_id == y.session_id,
                ),
                ("line/seq", (x.line, x.seq) == (y.line, y.seq)),
                (
                    "prompt",
                    (x.kind, x.prompt_number) == (y.kind, y.prompt_number),
                ),
            ] {
                if !same {
                    f.push(name);
                }
            }
            x.raw.clone_from(&y.raw);
            if f.is_empty() && x != *y {
                f.push("other fields");
            }
            f.join(", ")
        }
        _ => "length".to_owned(),
    };
    panic!(
        "{what}: {} vs {} messages, first difference at {i} ({fields}):\n  got  {}\n  want {}",
        a.len(),
        b.len(),
        show(a),
        show(b)
    );
}

fn without_raw_padding(msgs: &[ParsedMessage]) -> Vec<ParsedMessage> {
    msgs.iter()
        .cloned()
        .map(|mut m| {
            m.raw = m.raw.map(|r| r.trim_ascii_end().to_vec());
            m
        })
        .collect()
}

fn session_ids(sessions: &[ai_cli_session_collector::SessionInfo]) -> BTreeSet<String> {
    sessions.iter().map(|s| s.session_id.clone()).collect()
}

// ---------------------------------------------------------------------------------------------
// Driving the adapters the way the service does.

#[derive(Default)]
struct Stats {
    cases: u64,
    bytes: u64,
    largest: u64,
    parse_calls: u64,
    messages: u64,
    prompts: u64,
    invalid_json: u64,
    too_deep: u64,
    lossy: u64,
    skipped: u64,
    documents: u64,
    huge_cases: u64,
    zstd_cases: u64,
    rewrites_detected: u64,
    /// Cuts that left a complete record whose line the rest then spoiled (excluded).
    spoiled_tails: u64,
    /// Parses that read a record before its newline was written.
    owed_newlines: u64,
    /// The slowest case (all its parses) and its number.
    slowest: (Duration, u64),
}

struct Harness {
    agent: Agent,
    adapter: &'static dyn ConversationAdapter,
    seeds: Seeds,
    dir: tempfile::TempDir,
    root: PathBuf,
    stats: Stats,
    /// `false` while a cursor the adapter did not make is in use: then only bounds are checked.
    trusted: bool,
}

static REGISTRY: std::sync::LazyLock<AdapterRegistry> =
    std::sync::LazyLock::new(AdapterRegistry::new);

/// The file a case writes, and how.
struct Target {
    path: PathBuf,
    zstd: bool,
    document: bool,
}

impl Harness {
    fn new(agent: Agent) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join(match agent {
            Agent::Claude => "projects",
            Agent::Codex => "sessions",
            Agent::Gemini => "tmp",
        });
        std::fs::create_dir_all(&root).unwrap();
        if agent == Agent::Gemini {
            // What the adapter reads besides the transcript: a project root file (one valid, one
            // not UTF-8) and the slug registry.
            std::fs::create_dir_all(root.join("demo-app/chats")).unwrap();
            std::fs::write(root.join("demo-app/.project_root"), "/home/dev/demo-app").unwrap();
            std::fs::create_dir_all(root.join("bad/chats")).unwrap();
            std::fs::write(root.join("bad/.project_root"), b"\xff\xfe\n").unwrap();
            std::fs::write(
                dir.path().join("projects.json"),
                r#"{"projects":{"/home/dev/slug":"slug","/x":7}}"#,
            )
            .unwrap();
        }
        Harness {
            agent,
            adapter: REGISTRY.get(agent.name()).unwrap(),
            seeds: load_seeds(agent),
            dir,
            root,
            stats: Stats::default(),
            trusted: true,
        }
    }

    fn target(&self, rng: &mut Rng) -> Target {
        let rel = match self.agent {
            Agent::Claude => *rng.pick(&[
                "-p/0e9d8c7b-6a5f-4e3d-8c2b-1a0f9e8d7c6b.jsonl",
                "-p/not-a-uuid.jsonl",
                "-p/agent-c3d572ee.jsonl",
                "-p/7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c/subagents/agent-a1b2c3d4e5f60718.jsonl",
            ]),
            Agent::Codex => *rng.pick(&[
                "2026/06/05/rollout-2026-06-05T10-28-20-019e9a10-2c4b-7d21-9f3e-6a1b2c3d4e5f.jsonl",
                "2026/06/05/rollout-2026-06-05T10-28-20-019e9a10-2c4b-7d21-9f3e-6a1b2c3d4e5f.jsonl",
                "2026/06/05/rollout-2026-06-05T10-28-20-019e9a10-2c4b-7d21-9f3e-6a1b2c3d4e5f.jsonl",
                "rollout-x.jsonl",
                // The last 36 bytes of the name start inside a character.
                "rollout-认01234567890123456789012345678901234.jsonl",
            ]),
            Agent::Gemini => {
                if rng.one_in(4) {
                    *rng.pick(&[
                        "demo-app/chats/session-2025-11-02T14-05-7d3c2a10.json",
                        "254cb6c43af8df29db159b576f51396662bd28293277c6acd5b51d78fcb88194/chats/session-1.json",
                        "bad/chats/session-2.json",
                    ])
                } else {
                    *rng.pick(&[
                        "demo-app/chats/session-2026-06-10T07-15-3f2a9c1b.jsonl",
                        "slug/chats/session-3.jsonl",
                        "bad/chats/session-4.jsonl",
                        "demo-app/chats/3f2a9c1b-8d7e-4c6b-a5f4-e3d2c1b0a9f8/9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b.jsonl",
                    ])
                }
            }
        };
        let zstd = self.agent == Agent::Codex && rng.one_in(16);
        let mut path = self.root.join(rel);
        if zstd {
            path = path.with_extension("jsonl.zst");
        }
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        Target {
            document: rel.ends_with(".json"),
            path,
            zstd,
        }
    }

    fn write(&self, t: &Target, bytes: &[u8]) {
        if t.zstd {
            std::fs::write(&t.path, zstd::encode_all(bytes, 1).unwrap()).unwrap();
        } else {
            std::fs::write(&t.path, bytes).unwrap();
        }
    }

    fn append(&self, t: &Target, all: &[u8], from: usize, to: usize) {
        if t.zstd {
            self.write(t, &all[..to]);
        } else {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&t.path)
                .unwrap();
            f.write_all(&all[from..to]).unwrap();
        }
    }

    /// One parse call, with the cursor round-tripped through JSON as the store keeps it.
    fn parse(&mut self, t: &Target, cursor: &Cursor, max_bytes: usize, len: u64) -> ParseOutput {
        let text = serde_json::to_string(cursor).unwrap();
        let c: Cursor = serde_json::from_str(&text).unwrap();
        assert_eq!(&c, cursor, "cursor changed through JSON");
        self.stats.parse_calls += 1;
        let out = self
            .adapter
            .parse(&self.root, &t.path, &c, max_bytes)
            .unwrap_or_else(|e| panic!("parse failed on a readable file: {e:?}"));
        if self.trusted {
            check_common(self.agent, &out, len);
        } else {
            assert!(out.cursor.offset <= len && out.bytes <= len);
        }
        out
    }

    /// Parses until the end of what is there, like the service after a change: returns
    /// everything produced, and the last cursor.
    fn drain(
        &mut self,
        t: &Target,
        cursor: &mut Cursor,
        max_bytes: usize,
        len: u64,
        acc: &mut ParseOutput,
    ) {
        for _ in 0..=len + 2 {
            let out = self.parse(t, cursor, max_bytes, len);
            // After a restart the cursor may land where it was: bytes were read all the same.
            let progressed = out.cursor.offset != cursor.offset || out.bytes > 0;
            acc.messages.extend(out.messages);
            acc.sessions.extend(out.sessions);
            acc.edits.extend(out.edits);
            acc.issues.extend(out.issues);
            acc.pending_tail = out.pending_tail;
            self.stats.owed_newlines += u64::from(out.cursor.unterminated);
            *cursor = out.cursor;
            if out.at_end || !progressed {
                return;
            }
        }
        panic!("parsing never reached the end of a {len}-byte file");
    }

    fn one_pass(&mut self, t: &Target) -> ParseOutput {
        self.stats.parse_calls += 1;
        parse_file(self.adapter, &self.root, &t.path)
            .unwrap_or_else(|e| panic!("parse_file failed on a readable file: {e:?}"))
    }

    fn generate(&self, rng: &mut Rng, t: &Target, huge: bool) -> Vec<u8> {
        if t.document {
            gen_document(rng, &self.seeds, huge)
        } else {
            gen_jsonl(rng, self.agent, &self.seeds, huge)
        }
    }
}

/// One case: a generated file, parsed in one pass and then in steps.
fn run_case(h: &mut Harness, seed: u64) {
    let mut rng = Rng(seed);
    let t = h.target(&mut rng);
    let huge = rng.one_in(400);
    let bytes = h.generate(&mut rng, &t, huge);
    let len = bytes.len() as u64;
    h.write(&t, &bytes);

    let whole = h.one_pass(&t);
    if t.document {
        check_document_one_pass(&bytes, &whole);
    } else {
        check_jsonl_one_pass(h.agent, &bytes, &whole);
    }
    // Nothing changed: nothing new.
    let again = h.parse(&t, &whole.cursor, 1 << 20, len);
    assert!(
        again.messages.is_empty() && again.edits.is_empty(),
        "an unchanged file produced messages again"
    );
    if !t.document {
        assert!(again.issues.is_empty() && again.cursor.offset == whole.cursor.offset);
    }
    if t.zstd {
        // The same content, plain: the same parse.
        let plain = Target {
            path: t.path.with_extension(""),
            zstd: false,
            document: false,
        };
        h.write(&plain, &bytes);
        let p = h.one_pass(&plain);
        assert_same(&p.messages, &whole.messages, "zstd and plain differ");
        assert_eq!(p.issues, whole.issues);
        assert_eq!(p.edits, whole.edits);
        assert_eq!(p.cursor.offset, whole.cursor.offset);
        std::fs::remove_file(&plain.path).unwrap();
    }

    let max_bytes = *rng.pick(&[1, 7, 64, 300, 4096, 1 << 20]);
    match rng.below(4) {
        0 if !t.document => grow_by_lines(h, &mut rng, &t, &bytes, &whole, max_bytes),
        0 | 1 => grow_by_bytes(h, &mut rng, &t, &bytes, &whole, max_bytes),
        2 => rewrite(h, &mut rng, &t, &bytes, max_bytes, huge),
        _ => chunks_and_foreign_cursors(h, &mut rng, &t, &bytes, &whole),
    }

    // Statistics, and a sanity check of the generator itself (see `assert_coverage`).
    let s = &mut h.stats;
    s.cases += 1;
    s.bytes += len;
    s.largest = s.largest.max(len);
    s.messages += whole.messages.len() as u64;
    s.prompts += whole
        .messages
        .iter()
        .filter(|m| m.kind == MessageKind::UserPrompt)
        .count() as u64;
    for i in &whole.issues {
        if i.reason.contains("recursion limit") {
            s.too_deep += 1;
        } else if i.reason.starts_with("invalid JSON") {
            s.invalid_json += 1;
        } else if i.reason.starts_with("invalid UTF-8") {
            s.lossy += 1;
        } else if !i.kept {
            s.skipped += 1;
        }
    }
    s.documents += u64::from(t.document && !whole.messages.is_empty());
    s.huge_cases += u64::from(huge);
    s.zstd_cases += u64::from(t.zstd);
}

/// The file grows by whole lines between parses: the same messages, issues, edits and line
/// numbers as one pass.
fn grow_by_lines(
    h: &mut Harness,
    rng: &mut Rng,
    t: &Target,
    bytes: &[u8],
    whole: &ParseOutput,
    max_bytes: usize,
) {
    let ends: Vec<usize> = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i + 1)
        .collect();
    let mut cuts: Vec<usize> = if ends.is_empty() {
        Vec::new()
    } else {
        (0..rng.range(1, 5)).map(|_| *rng.pick(&ends)).collect()
    };
    cuts.push(bytes.len());
    cuts.sort_unstable();
    cuts.dedup();
    let (cursor, acc) = grow(h, t, bytes, &cuts, max_bytes);
    assert_same(
        &acc.messages,
        &whole.messages,
        &format!("grown by lines at {cuts:?}"),
    );
    assert_eq!(acc.edits, whole.edits, "grown by lines at {cuts:?}");
    assert_eq!(acc.issues, whole.issues, "grown by lines at {cuts:?}");
    // Chunks report the session as they know it so far (a Codex file's name until its
    // `session_meta`): every session of the one pass, and none no message belongs to.
    let (step, one) = (session_ids(&acc.sessions), session_ids(&whole.sessions));
    let used: BTreeSet<String> = whole
        .messages
        .iter()
        .map(|m| m.session_id.clone())
        .collect();
    assert!(one.is_subset(&step), "sessions {one:?} not in {step:?}");
    assert!(
        step.difference(&one).all(|s| used.contains(s)),
        "sessions {step:?} vs {one:?}"
    );
    assert_eq!(cursor.line, whole.cursor.line);
    assert_eq!(cursor.offset, whole.cursor.offset);
}

/// Writes `bytes` in pieces ending at `cuts`, parsing after each: the cursor never moves back.
fn grow(
    h: &mut Harness,
    t: &Target,
    bytes: &[u8],
    cuts: &[usize],
    max_bytes: usize,
) -> (Cursor, ParseOutput) {
    h.write(t, &[]);
    let mut cursor = Cursor::default();
    let mut acc = ParseOutput::default();
    let mut prev = 0;
    for &c in cuts {
        h.append(t, bytes, prev, c);
        prev = c;
        let before = cursor.offset;
        h.drain(t, &mut cursor, max_bytes, c as u64, &mut acc);
        assert!(
            cursor.offset >= before,
            "cursor moved back from {before} to {} on an append-only file",
            cursor.offset
        );
    }
    (cursor, acc)
}

/// The file grows by arbitrary bytes (a writer caught mid-line, mid-character). Equal to one
/// pass unless a cut left a complete JSON object that the rest of its line then spoiled (read
/// early by design, see `drive_jsonl`), and then raw bytes may lack the line's trailing blanks.
fn grow_by_bytes(
    h: &mut Harness,
    rng: &mut Rng,
    t: &Target,
    bytes: &[u8],
    whole: &ParseOutput,
    max_bytes: usize,
) {
    // Anywhere, or where a writer is likely caught: before a newline, after a closing brace.
    let at = |rng: &mut Rng, b: u8, shift: usize| {
        let ps: Vec<usize> = (0..bytes.len()).filter(|&i| bytes[i] == b).collect();
        (!ps.is_empty()).then(|| rng.pick(&ps) + shift)
    };
    let mut cuts: Vec<usize> = (0..rng.range(1, 5))
        .filter_map(|_| match rng.below(3) {
            0 => at(rng, b'\n', 0),
            1 => at(rng, b'}', 1),
            _ => Some(rng.below(bytes.len() + 1)),
        })
        .collect();
    cuts.push(bytes.len());
    cuts.sort_unstable();
    cuts.dedup();
    let hazard = cuts[..cuts.len() - 1].iter().any(|&c| {
        if t.document {
            let p = &bytes[..c];
            !p.trim_ascii().is_empty() && reader::decode_json(p).is_ok()
        } else {
            let start = bytes[..c]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            let end = bytes[c..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |i| c + i);
            tail_is_taken(&bytes[start..c]) && !bytes[c..end].trim_ascii().is_empty()
        }
    });
    let (cursor, acc) = grow(h, t, bytes, &cuts, max_bytes);
    if hazard {
        h.stats.spoiled_tails += 1;
        return;
    }
    assert_same(
        &without_raw_padding(&acc.messages),
        &without_raw_padding(&whole.messages),
        &format!("grown by bytes at {cuts:?}"),
    );
    assert_eq!(acc.edits, whole.edits, "grown by bytes at {cuts:?}");
    assert_eq!(acc.issues, whole.issues, "grown by bytes at {cuts:?}");
    // A record read before its newline may leave blanks after it unread (they wait for the
    // newline, and then end that line).
    let (o, w) = (cursor.offset as usize, whole.cursor.offset as usize);
    assert!(
        o == w
            || (o < w
                && cursor.unterminated
                && bytes[o..w].iter().all(|&b| b" \t\r\x0c".contains(&b))),
        "cursor at {o}, one pass at {w}; grown by bytes at {cuts:?}"
    );
    if !t.document {
        assert_eq!(cursor.line, whole.cursor.line);
    }
}

/// The file is truncated or rewritten after a parse. A change the cursor can see (a shorter
/// file, a different head) restarts from the beginning: then the result is a one-pass parse
/// of the new file.
fn rewrite(h: &mut Harness, rng: &mut Rng, t: &Target, bytes: &[u8], max_bytes: usize, huge: bool) {
    let first = rng.below(bytes.len() + 1);
    let f1 = &bytes[..first];
    h.write(t, f1);
    let mut cursor = Cursor::default();
    let mut acc = ParseOutput::default();
    h.drain(t, &mut cursor, max_bytes, first as u64, &mut acc);

    let f2: Vec<u8> = match rng.below(5) {
        0 => f1[..rng.below(f1.len() + 1)].to_vec(),
        1 => {
            let huge = huge && rng.one_in(2);
            h.generate(rng, t, huge)
        }
        2 | 3 if !f1.is_empty() => {
            // One byte changed, in the fingerprinted head or after it.
            let mut f = bytes.to_vec();
            let i = if rng.one_in(2) {
                rng.below(f1.len().min(1024))
            } else {
                rng.below(f.len())
            };
            f[i] = f[i].wrapping_add(1);
            f
        }
        _ => [bytes, bytes].concat(),
    };
    h.write(t, &f2);
    let old_cursor = cursor.clone();
    let mut after = ParseOutput::default();
    h.drain(t, &mut cursor, max_bytes, f2.len() as u64, &mut after);
    let fresh = h.one_pass(t);
    if t.document {
        // A document is read again whenever its size or head changed; the state carried over
        // keeps earlier prompt numbers, but the ids are those of the new document.
        let unchanged = old_cursor.offset == f2.len() as u64
            && old_cursor
                .head
                .as_deref()
                .is_some_and(|hd| reader::head_matches(&t.path, hd).unwrap());
        let ids = |o: &ParseOutput| -> Vec<String> {
            o.messages.iter().map(|m| m.message_id.clone()).collect()
        };
        if unchanged {
            assert!(after.messages.is_empty(), "unchanged document read again");
        } else {
            assert_eq!(ids(&after), ids(&fresh), "rewritten document");
        }
        return;
    }
    let off = old_cursor.offset as usize;
    let n = off.min(1024);
    if f2.len() < off || f1.get(..n) != f2.get(..n) {
        h.stats.rewrites_detected += 1;
        assert_same(
            &after.messages,
            &fresh.messages,
            "rewritten file read again",
        );
        assert_eq!(after.edits, fresh.edits);
        assert_eq!(after.issues, fresh.issues);
        assert_eq!(cursor.offset, fresh.cursor.offset);
        assert_eq!(cursor.line, fresh.cursor.line);
    }
}

/// Tiny chunks give what one pass gives; a cursor that does not fit the file (from another
/// version, a damaged database) is survived.
fn chunks_and_foreign_cursors(
    h: &mut Harness,
    rng: &mut Rng,
    t: &Target,
    bytes: &[u8],
    whole: &ParseOutput,
) {
    let len = bytes.len() as u64;
    let mut cursor = Cursor::default();
    let mut acc = ParseOutput::default();
    h.drain(t, &mut cursor, rng.range(1, 40), len, &mut acc);
    assert_same(&acc.messages, &whole.messages, "parsed in tiny chunks");
    assert_eq!(acc.edits, whole.edits);
    assert_eq!(acc.issues, whole.issues);
    assert_eq!(cursor, whole.cursor);

    let mut state = whole.cursor.state.clone();
    let agent = h.agent;
    if rng.one_in(2) {
        let mut g = Gen {
            agent,
            seeds: &h.seeds,
            ids: Vec::new(),
            payloads: Vec::new(),
            huge: false,
        };
        for _ in 0..rng.range(1, 4) {
            // Wrong types, missing fields; no splices (a cursor is always valid JSON).
            let paths = nodes(&state);
            let p = rng.pick(&paths).clone();
            match rng.below(3) {
                0 => remove_node(&mut state, &p),
                1 => {
                    let x = random_value(rng, agent, 0);
                    if let Some(n) = node_mut(&mut state, &p) {
                        *n = x;
                    }
                }
                _ => {
                    let x = g.id(rng);
                    if let Some(n) = node_mut(&mut state, &p) {
                        *n = x;
                    }
                }
            }
        }
    } else if rng.one_in(2) {
        state = random_value(rng, agent, 0);
    }
    let foreign = Cursor {
        offset: rng.below(bytes.len() + 10) as u64,
        line: rng.below(100) as u64,
        head: match rng.below(4) {
            0 => None,
            1 => whole.cursor.head.clone(),
            2 => Some(
                rng.pick(&["", "x", "5:zz", "99999999999999999999:x", ":"])
                    .to_string(),
            ),
            _ => Some(reader::head_fingerprint(&t.path, rng.below(2000) as u64).unwrap()),
        },
        state,
        unterminated: rng.one_in(2),
    };
    // Its state may hold what the adapter never writes (an empty session id, ...): only
    // bounds are checked.
    let mut acc = ParseOutput::default();
    let mut c = foreign;
    h.trusted = false;
    h.drain(t, &mut c, *rng.pick(&[1, 64, 1 << 20]), len, &mut acc);
    h.trusted = true;
}

// ---------------------------------------------------------------------------------------------
// The three runs.

struct Config {
    cases: u64,
    seed: u64,
    replay: Option<u64>,
}

fn config() -> Config {
    let var = |k: &str| {
        std::env::var(k).ok().map(|v| {
            let v = v.replace(['_', ','], "");
            match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            }
            .unwrap_or_else(|_| panic!("{k} must be a number"))
        })
    };
    Config {
        cases: var("MEMEX_FUZZ_CASES").unwrap_or(DEFAULT_CASES),
        seed: var("MEMEX_FUZZ_SEED").unwrap_or(DEFAULT_SEED),
        replay: var("MEMEX_FUZZ_REPLAY"),
    }
}

fn case_seed(seed: u64, agent: Agent, case: u64) -> u64 {
    let mut r = Rng(seed ^ ((agent as u64 + 1) << 56) ^ case.wrapping_mul(0x2545_f491_4f6c_dd1d));
    r.next()
}

fn run(agent: Agent) {
    let cfg = config();
    let mut h = Harness::new(agent);
    let range = match cfg.replay {
        Some(c) => c..c + 1,
        None => 0..cfg.cases.div_ceil(3),
    };
    let started = Instant::now();
    for case in range.clone() {
        let t0 = Instant::now();
        let r = catch_unwind(AssertUnwindSafe(|| {
            run_case(&mut h, case_seed(cfg.seed, agent, case))
        }));
        if let Err(e) = r {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let kept = h.dir.keep();
            panic!(
                "{} case {case} failed: {msg}\n  files kept in {}\n  replay: MEMEX_FUZZ_SEED={:#x} MEMEX_FUZZ_REPLAY={case} cargo test -p ai-cli-session-collector --test fuzz {}",
                agent.name(),
                kept.display(),
                cfg.seed,
                agent.name()
            );
        }
        h.stats.slowest = h.stats.slowest.max((t0.elapsed(), case));
    }
    let s = &h.stats;
    eprintln!(
        "fuzz {}: {} inputs ({:.1} MB, largest {:.1} MB; {} parse calls) in {:.1?}, 0 panics; \
         {} messages, {} prompts, \
         issues: {} invalid JSON, {} too deep, {} lossy UTF-8, {} skipped records; \
         {} documents, {} huge, {} zstd, {} rewrites seen, {} records read before their newline, \
         {} spoiled tails; slowest case {:.1?} (case {}) \
         (seed {:#x}, cases {:?})",
        agent.name(),
        s.cases,
        s.bytes as f64 / 1e6,
        s.largest as f64 / 1e6,
        s.parse_calls,
        started.elapsed(),
        s.messages,
        s.prompts,
        s.invalid_json,
        s.too_deep,
        s.lossy,
        s.skipped,
        s.documents,
        s.huge_cases,
        s.zstd_cases,
        s.rewrites_detected,
        s.owed_newlines,
        s.spoiled_tails,
        s.slowest.0,
        s.slowest.1,
        cfg.seed,
        range,
    );
    assert_coverage(agent, s);
}

/// The generator must keep producing what it is meant to: otherwise a passing run would prove
/// little. Only judged on runs long enough for every kind to show up.
fn assert_coverage(agent: Agent, s: &Stats) {
    if s.cases < 900 {
        return;
    }
    assert!(s.messages > s.cases, "too few messages: generator broken?");
    assert!(s.prompts > s.cases / 20, "too few prompts");
    assert!(s.invalid_json > s.cases / 20, "too few undecodable lines");
    assert!(s.too_deep > s.cases / 100, "too few too-deep records");
    assert!(s.lossy > s.cases / 200, "too few invalid UTF-8 records");
    assert!(s.skipped > s.cases / 50, "too few skipped records");
    assert!(s.rewrites_detected > s.cases / 50, "too few rewrites");
    assert!(
        s.owed_newlines > s.cases / 50,
        "too few records read before their newline"
    );
    if agent == Agent::Gemini {
        assert!(s.documents > s.cases / 20, "too few documents");
    }
    if agent == Agent::Codex {
        assert!(s.zstd_cases > s.cases / 50, "too few zstd files");
    }
}

#[test]
fn fuzz_claude() {
    run(Agent::Claude);
}

#[test]
fn fuzz_codex() {
    run(Agent::Codex);
}

#[test]
fn fuzz_gemini() {
    run(Agent::Gemini);
}
