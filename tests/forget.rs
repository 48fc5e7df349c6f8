//! `memex forget` forgets everywhere: the vector files (also through the running service), the
//! original records that held the text, and the paths of a forgotten project. The real binary
//! in a temporary HOME, a real LanceDB folder read back through LanceDB.

use crate::common;

use std::path::Path;

use common::*;
use serde_json::{Value, json};

/// Every version of the LanceDB table `table` under `data`: (deleted rows it marks, rows with
/// `ref_id` = `id`).
fn vector_versions(data: &Path, table: &str, id: i64) -> Vec<(usize, usize)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let db = lancedb::connect(data.join("vectors").to_str().unwrap())
            .execute()
            .await
            .unwrap();
        let t = db.open_table(table).execute().await.unwrap();
        let mut out = Vec::new();
        for v in t.list_versions().await.unwrap() {
            t.checkout(v.version).await.unwrap();
            let deleted = t.stats().await.unwrap().num_deleted_rows.unwrap_or(0);
            let rows = t.count_rows(Some(format!("ref_id = {id}"))).await.unwrap();
            out.push((deleted, rows));
        }
        out
    })
}

/// Files under `dir` whose bytes hold `text`.
fn files_holding(dir: &Path, text: &str) -> Vec<String> {
    walkdir(dir)
        .into_iter()
        .filter(|p| memchr_find(&std::fs::read(p).unwrap_or_default(), text.as_bytes()))
        .map(|p| p.display().to_string())
        .collect()
}

/// Through the running service, as without it: the forgotten message's vector row is gone from
/// every file and every version of the vector folder, not only marked deleted in one.
#[test]
fn forget_through_the_service_leaves_no_vector_of_it() {
    let h = Home::empty();
    for i in 0..40 {
        let sid = format!("f0f0f0f0-0000-4000-8000-{i:012}");
        let text = if i == 17 {
            "quixotic zeppelin calibration of the flux capacitor".to_owned()
        } else {
            format!("ordinary question number {i} about the build")
        };
        h.write_claude(
            "-work-vec",
            &sid,
            &[
                claude_prompt(&sid, "u1", "/work/vec", &text),
                claude_answer(&sid, "a1", "/work/vec", "answered"),
            ],
        );
    }
    let s = h.serve(&[("MEMEX_VECTOR_PROVIDER", "hashing")]);
    s.wait_watching();
    s.wait_for(120, "every message embedded", |s| {
        let st = s.ok("/api/stats");
        (st["vectors"]["backlog"] == 0 && st["vectors"]["rows"]["raw"].as_u64() >= Some(40))
            .then_some(())
    });
    let id: i64 = db(&h.data_dir())
        .query_row(
            "SELECT id FROM messages WHERE text LIKE '%quixotic zeppelin%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let vectors = h.data_dir().join("vectors");
    assert!(
        vector_versions(&h.data_dir(), "raw", id)
            .iter()
            .any(|(_, rows)| *rows == 1)
    );
    let out = h.json(&["forget", "--match", "quixotic zeppelin", "--yes", "--json"]);
    assert_eq!(out["messages"], 1, "{out}");
    assert_eq!(out["vector_files"], "rewritten", "{out}");
    for (deleted, rows) in vector_versions(&h.data_dir(), "raw", id) {
        assert_eq!((deleted, rows), (0, 0), "a version still holds the row");
    }
    assert_eq!(
        files_holding(&vectors, "quixotic zeppelin"),
        Vec::<String>::new()
    );
    // The others are still found by meaning.
    let v = s.ok("/api/search?q=ordinary+question+build&mode=vector");
    assert!(!v["results"].as_array().unwrap().is_empty(), "{v}");
}

/// The text only an original record holds (Claude Code's record of an edit carries the whole
/// file before it): `forget --match` finds it there, and nothing prints it afterwards.
#[test]
fn forget_match_reaches_text_held_only_in_original_records() {
    let h = Home::empty();
    let sid = "e0e0e0e0-0000-4000-8000-000000000001";
    let marker = "ORIGINAL-ONLY-7f3a";
    let original = format!("fn main() {{\n    let key = \"{marker}\";\n}}\n");
    h.write_claude(
        "-work-edit",
        sid,
        &[
            claude_prompt(sid, "u1", "/work/edit", "rename the key in main.rs"),
            json!({
                "type": "assistant", "uuid": "a1", "parentUuid": "u1", "sessionId": sid,
                "cwd": "/work/edit", "timestamp": "2026-06-05T10:00:03.000Z",
                "message": {"id": "msg_a1", "role": "assistant", "model": "claude-opus-4-7",
                    "content": [{"type": "tool_use", "id": "toolu_1", "name": "Edit",
                        "input": {"file_path": "/work/edit/main.rs", "old_string": "key", "new_string": "name"}}],
                    "usage": {"input_tokens": 10, "output_tokens": 5}}
            }),
            json!({
                "type": "user", "uuid": "u2", "parentUuid": "a1", "sessionId": sid,
                "cwd": "/work/edit", "timestamp": "2026-06-05T10:00:05.000Z",
                "message": {"role": "user", "content": [{"type": "tool_result",
                    "tool_use_id": "toolu_1", "content": "The file /work/edit/main.rs has been updated."}]},
                "toolUseResult": {"filePath": "/work/edit/main.rs", "originalFile": original,
                    "oldString": "key", "newString": "name"}
            }),
            claude_answer(sid, "a2", "/work/edit", "Renamed."),
        ],
    );
    assert!(h.memex(&["import"]).status.success());
    let raw = h.memex(&["sessions", "show", sid, "--raw"]);
    assert!(String::from_utf8_lossy(&raw.stdout).contains(marker));
    let done = h.json(&["forget", "--match", marker, "--yes", "--json"]);
    assert!(done["messages"].as_u64().unwrap() >= 1, "{done}");
    let raw = h.memex(&["sessions", "show", sid, "--raw"]);
    assert!(
        !String::from_utf8_lossy(&raw.stdout).contains(marker),
        "sessions show --raw still prints it"
    );
    assert_eq!(where_in_db(&h.data_dir(), marker), Vec::<String>::new());
    assert_eq!(files_holding(&h.data_dir(), marker), Vec::<String>::new());
    // The rest of the session stays.
    let left = h.json(&["search", "--json", "--mode", "fts", "Renamed"]);
    let ids: Vec<&str> = left["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["message_id"].as_str())
        .collect();
    assert!(ids.contains(&"a2") && ids.contains(&"u1"), "{left}");
    // Read again from the start: still forgotten.
    db(&h.data_dir())
        .execute_batch("UPDATE source_files SET cursor = '{}', size = -1, mtime = -1")
        .unwrap();
    assert!(h.memex(&["import"]).status.success());
    assert_eq!(where_in_db(&h.data_dir(), marker), Vec::<String>::new());
}

/// After `forget --project`, no row of the archive names the project's path, not even the
/// transcript files' paths, and an import of the unchanged files brings none back; a new
/// session in the project is archived like any other.
#[test]
fn forget_project_leaves_no_path_of_it() {
    let h = Home::empty();
    let project = "/work/secret-proj";
    let dir = "-work-secret-proj";
    for i in 0..3 {
        let sid = format!("d0d0d0d0-0000-4000-8000-{i:012}");
        h.write_claude(
            dir,
            &sid,
            &[
                claude_prompt(&sid, "u1", project, &format!("plan step {i} of the launch")),
                claude_answer(&sid, "a1", project, "planned"),
            ],
        );
    }
    let keep = "d0d0d0d0-0000-4000-8000-00000000ffff";
    h.write_claude(
        "-work-other",
        keep,
        &[
            claude_prompt(keep, "u1", "/work/other", "unrelated work"),
            claude_answer(keep, "a1", "/work/other", "done"),
        ],
    );
    assert!(h.memex(&["import"]).status.success());
    assert!(!where_in_db(&h.data_dir(), "secret-proj").is_empty());
    let done = h.json(&["forget", "--project", project, "--yes", "--json"]);
    assert_eq!(done["sessions"], 3, "{done}");
    assert_eq!(done["files"], 3, "{done}");
    for needle in ["secret-proj", dir] {
        assert_eq!(
            where_in_db(&h.data_dir(), needle),
            Vec::<String>::new(),
            "{needle}"
        );
        assert_eq!(
            files_holding(&h.data_dir(), needle),
            Vec::<String>::new(),
            "{needle}"
        );
    }
    // The transcripts are still there: imports skip them and name them nowhere.
    let again: Value = h.json(&["import", "--json"]);
    assert_eq!(again["messages"], 0, "{again}");
    assert!(
        again["files_skipped_unchanged"].as_u64().unwrap() >= 3,
        "{again}"
    );
    db(&h.data_dir())
        .execute_batch("UPDATE source_files SET cursor = '{}', size = -1, mtime = -1")
        .unwrap();
    // One of them changed (touched): read again, still all forgotten, still unnamed.
    let first = h
        .path()
        .join(".claude/projects")
        .join(dir)
        .join("d0d0d0d0-0000-4000-8000-000000000000.jsonl");
    let f = std::fs::File::options().write(true).open(&first).unwrap();
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
        .unwrap();
    drop(f);
    assert!(h.memex(&["import"]).status.success());
    assert_eq!(
        where_in_db(&h.data_dir(), "secret-proj"),
        Vec::<String>::new()
    );
    assert_eq!(
        h.json(&["search", "--json", "--mode", "fts", "unrelated"])["results"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // New work in the project is archived as usual.
    let new = "d0d0d0d0-0000-4000-8000-000000000009";
    h.write_claude(
        dir,
        new,
        &[
            claude_prompt(new, "u1", project, "a fresh start on the launch"),
            claude_answer(new, "a1", project, "ok"),
        ],
    );
    assert!(h.memex(&["import"]).status.success());
    let found = h.json(&["search", "--json", "--mode", "fts", "fresh start"]);
    assert_eq!(found["results"].as_array().unwrap().len(), 1, "{found}");
    let old = h.json(&["search", "--json", "--mode", "fts", "launch"]);
    assert_eq!(old["results"].as_array().unwrap().len(), 1, "{old}");
}
