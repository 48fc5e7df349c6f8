//! What Memex reads is bounded and stays inside the agents' folders: a crafted transcript cannot
//! make an import allocate gigabytes, and a link inside an agent's folder is not followed to
//! files outside it. The real `memex` binary in a temporary HOME.

use crate::common;

use std::path::Path;
use std::process::Stdio;

use common::*;
use serde_json::{Value, json};

/// Runs `cmd` to its end: its exit status, its peak memory (RSS, bytes) and its stdout.
fn run_measured(cmd: &mut std::process::Command) -> (std::process::ExitStatus, u64, Vec<u8>) {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    // Reaped by wait4 below, which also gives its peak memory.
    #[allow(clippy::zombie_processes)]
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child's pid, which has not been reaped, with valid pointers.
    let rc = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(rc, child.id() as i32, "wait4 failed");
    let stdout = reader.join().unwrap();
    (
        std::process::ExitStatus::from_raw(status),
        usage.ru_maxrss as u64 * 1024,
        stdout,
    )
}

fn codex_lines(id: &str, marker: &str) -> String {
    [
        json!({"timestamp": "2026-06-05T10:00:00.000Z", "type": "session_meta", "payload": {
            "id": id, "timestamp": "2026-06-05T10:00:00.000Z", "cwd": "/work/bomb",
            "originator": "codex_cli_rs", "cli_version": "0.135.0"}}),
        json!({"timestamp": "2026-06-05T10:00:01.000Z", "type": "response_item", "payload": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": format!("what does {marker} do?")}]}}),
    ]
    .iter()
    .map(|v| format!("{v}\n"))
    .collect()
}

fn fts(h: &Home, word: &str) -> usize {
    h.json(&["search", "--json", "--mode", "fts", word])["results"]
        .as_array()
        .unwrap()
        .len()
}

/// A small `.jsonl.zst` whose second record never ends: a few hundred kilobytes that expand to
/// 4 GiB of one line. The import stores what comes before it, reports the record, stays within
/// a small, fixed amount of memory, and the next import does not read it again.
#[test]
fn a_compressed_line_bomb_is_skipped_in_bounded_memory() {
    let h = Home::empty();
    let dir = h.path().join(".codex/sessions/2026/06/05");
    std::fs::create_dir_all(&dir).unwrap();
    let id = "019eb0b0-0000-7000-8000-00000000b0b0";
    let path = dir.join(format!("rollout-2026-06-05T10-00-00-{id}.jsonl.zst"));
    let mut bytes = zstd::encode_all(codex_lines(id, "quokkabomb").as_bytes(), 3).unwrap();
    let frame = zstd::encode_all(&vec![b'a'; 1 << 20][..], 19).unwrap();
    for _ in 0..4096 {
        bytes.extend_from_slice(&frame);
    }
    assert!(bytes.len() < 2 << 20, "{} bytes", bytes.len());
    std::fs::write(&path, &bytes).unwrap();

    let (status, peak, stdout) = run_measured(&mut h.command(&["import", "--json"]));
    assert!(status.success(), "{status:?}");
    assert!(peak < 600 << 20, "peak RSS {} MB", peak >> 20);
    let report: Value = serde_json::from_slice(&stdout).unwrap();
    let errors = report["errors"].as_array().unwrap();
    assert!(
        errors
            .iter()
            .any(|e| e["reason"].as_str().unwrap_or("").contains("64 MiB")),
        "{report}"
    );
    assert_eq!(fts(&h, "quokkabomb"), 1);
    // Recorded as read: the next import skips the file rather than decompressing it again.
    let again = h.json(&["import", "--json"]);
    assert_eq!(again["files_skipped_unchanged"], 1, "{again}");
}

/// A plain transcript with a 100 MiB line between two good ones: the line is reported and
/// passed over, the next record is stored.
#[test]
fn an_over_long_line_is_reported_and_passed_over() {
    use std::io::Write;
    let h = Home::empty();
    let dir = h.path().join(".codex/sessions/2026/06/06");
    std::fs::create_dir_all(&dir).unwrap();
    let id = "019eb0b0-0000-7000-8000-00000000b0b1";
    let path = dir.join(format!("rollout-2026-06-06T10-00-00-{id}.jsonl"));
    let mut f = std::fs::File::create(&path).unwrap();
    let lines = codex_lines(id, "wombatfirst");
    let (meta, first) = lines.split_once('\n').unwrap();
    writeln!(f, "{meta}").unwrap();
    let big = vec![b'x'; 100 << 20];
    f.write_all(br#"{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":""#)
        .unwrap();
    f.write_all(&big).unwrap();
    f.write_all(b"\"}]}}\n").unwrap();
    f.write_all(first.as_bytes()).unwrap();
    drop(f);
    let (status, peak, stdout) = run_measured(&mut h.command(&["import", "--json"]));
    assert!(status.success(), "{status:?}");
    assert!(peak < 600 << 20, "peak RSS {} MB", peak >> 20);
    let report: Value = serde_json::from_slice(&stdout).unwrap();
    let skipped: Vec<&Value> = report["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["reason"]
                .as_str()
                .unwrap_or("")
                .contains("over the 64 MiB limit")
        })
        .collect();
    assert_eq!(skipped.len(), 1, "{report}");
    assert_eq!(skipped[0]["line"], 2, "{report}");
    assert_eq!(fts(&h, "wombatfirst"), 1, "the record after it is stored");
}

/// A transcript that is a link to a file outside the agent's folder, and a project folder that
/// is a link to a folder outside it: neither is read, by an import or by the service.
#[test]
fn links_inside_an_agents_folder_are_not_followed() {
    let h = Home::empty();
    let outside = h.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let session = |id: &str, word: &str| -> Vec<Value> {
        vec![
            claude_prompt(id, "u1", "/work/x", &format!("tell me about {word}")),
            claude_answer(id, "a1", "/work/x", "noted"),
        ]
    };
    let write = |p: &Path, lines: &[Value]| {
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(p, text).unwrap();
    };
    write(
        &outside.join("private.jsonl"),
        &session("0b0b0b0b-1111-4000-8000-000000000001", "okapisecret"),
    );
    std::fs::create_dir_all(outside.join("dir")).unwrap();
    write(
        &outside.join("dir/0b0b0b0b-1111-4000-8000-000000000002.jsonl"),
        &session("0b0b0b0b-1111-4000-8000-000000000002", "okapifolder"),
    );
    let projects = h.path().join(".claude/projects");
    std::fs::create_dir_all(projects.join("-work-l")).unwrap();
    std::os::unix::fs::symlink(
        outside.join("private.jsonl"),
        projects.join("-work-l/0b0b0b0b-1111-4000-8000-000000000001.jsonl"),
    )
    .unwrap();
    std::os::unix::fs::symlink(outside.join("dir"), projects.join("-work-d")).unwrap();
    h.write_claude(
        "-work-ok",
        "0b0b0b0b-1111-4000-8000-000000000003",
        &session("0b0b0b0b-1111-4000-8000-000000000003", "okapiplain"),
    );
    let report = h.json(&["import", "--json"]);
    assert_eq!(fts(&h, "okapiplain"), 1, "{report}");
    assert_eq!(fts(&h, "okapisecret"), 0, "{report}");
    assert_eq!(fts(&h, "okapifolder"), 0, "{report}");
    let linked = count(
        &db(&h.data_dir()),
        "SELECT COUNT(*) FROM source_files WHERE path LIKE '%-work-l%' OR path LIKE '%-work-d%'",
    );
    assert_eq!(linked, 0);

    // The service, when a link appears while it watches.
    let s = h.serve(&[("MEMEX_VECTOR_PROVIDER", "off")]);
    s.wait_watching();
    write(
        &outside.join("later.jsonl"),
        &session("0b0b0b0b-1111-4000-8000-000000000004", "okapilater"),
    );
    std::os::unix::fs::symlink(
        outside.join("later.jsonl"),
        projects.join("-work-ok/0b0b0b0b-1111-4000-8000-000000000004.jsonl"),
    )
    .unwrap();
    h.write_claude(
        "-work-ok",
        "0b0b0b0b-1111-4000-8000-000000000005",
        &session("0b0b0b0b-1111-4000-8000-000000000005", "okapiafter"),
    );
    s.wait_for(30, "the plain file written after the link", |s| {
        let v = s.ok("/api/search?q=okapiafter&mode=fts");
        (!v["results"].as_array().unwrap().is_empty()).then_some(())
    });
    let v = s.ok("/api/search?q=okapilater&mode=fts");
    assert!(v["results"].as_array().unwrap().is_empty(), "{v}");
}
