//! `memex sync` as a user runs it: two machines (two HOMEs, two archives) through a shared
//! folder, the key carried as a file; and the ways it refuses (wrong key, a key file others
//! can read, a target set up twice, no target).

use crate::common::{Home, copy_dir, fixtures};

fn ok(h: &Home, args: &[&str]) -> String {
    let out = h.memex(args);
    assert!(
        out.status.success(),
        "memex {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn refused(h: &Home, args: &[&str]) -> String {
    let out = h.memex(args);
    assert_eq!(out.status.code(), Some(2), "memex {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn two_machines_share_one_memory_through_a_folder() {
    let shared = tempfile::tempdir().unwrap();
    let url = format!("file://{}", shared.path().join("sync").display());
    let key_out = shared.path().join("carried.key");
    let key_file = key_out.to_str().unwrap();
    let laptop = Home::empty();
    copy_dir(
        &fixtures().join("claude/projects"),
        &laptop.path().join(".claude/projects"),
    );
    let desktop = Home::empty();
    copy_dir(
        &fixtures().join("codex/handwritten/sessions"),
        &desktop.path().join(".codex/sessions"),
    );
    ok(&laptop, &["import"]);
    ok(&desktop, &["import"]);
    assert!(refused(&laptop, &["sync"]).contains("no sync target"));

    // The first machine: three commands.
    let said = ok(&laptop, &["sync", "setup", &url, "--key-out", key_file]);
    assert!(said.contains("memex sync join"), "{said}");
    let pushed = laptop.json(&["sync", "--json"]);
    assert!(
        pushed["pushed"]["messages"].as_u64().unwrap() > 300,
        "{pushed}"
    );
    assert!(refused(&laptop, &["sync", "setup", &url]).contains("already"));

    // The next machine: two.
    ok(&desktop, &["sync", "join", &url, "--key", key_file]);
    let both = desktop.json(&["sync", "--json"]);
    assert_eq!(
        both["pulled"]["messages"], pushed["pushed"]["messages"],
        "{both}"
    );
    ok(&laptop, &["sync"]);

    // Both find the same messages for a question, from either machine's conversations (the
    // order of equally ranked hits follows each archive's own row ids).
    for q in ["timezone test", "token usage"] {
        let a = laptop.json(&["search", q, "--mode", "fts", "--json", "--limit", "200"]);
        let b = desktop.json(&["search", q, "--mode", "fts", "--json", "--limit", "200"]);
        let ids = |v: &serde_json::Value| -> Vec<(String, String)> {
            let mut ids: Vec<(String, String)> = v["results"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    let s = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
                    (s("session_id"), s("message_id"))
                })
                .collect();
            ids.sort();
            ids
        };
        assert!(!ids(&a).is_empty(), "{q}");
        assert!(ids(&a).len() < 200, "{q}: every match fits");
        assert_eq!(ids(&a), ids(&b), "{q}");
        // The same best hit (its score may differ in the last digits: each archive's
        // full-text index keeps its own statistics).
        for k in ["session_id", "message_id"] {
            assert_eq!(a["results"][0][k], b["results"][0][k], "{q}: the best hit");
        }
    }
    let hosts = laptop.json(&["hosts", "--json"]);
    assert_eq!(hosts["others"].as_array().unwrap().len(), 1, "{hosts}");
    assert_eq!(hosts["others"][0]["behind"], 0, "{hosts}");
    assert!(
        hosts["others"][0]["sessions"].as_u64().unwrap() > 0,
        "{hosts}"
    );
    // Each machine's conversations, apart: by the other's id (or its first characters), or
    // `local`; the lists name the machine a session came from.
    let desktop_id = hosts["others"][0]["host"].as_str().unwrap().to_owned();
    let agents_of = |args: &[&str]| -> Vec<String> {
        let v = laptop.json(args);
        let mut a: Vec<String> = v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["agent"].as_str().unwrap().to_owned())
            .collect();
        a.dedup();
        a
    };
    let q = ["search", "the", "--mode", "fts", "--json", "--limit", "100"];
    assert_eq!(
        agents_of(&[&q[..], &["--host", &desktop_id[..8]]].concat()),
        ["codex"]
    );
    assert_eq!(
        agents_of(&[&q[..], &["--host", "local"]].concat()),
        ["claude"]
    );
    let other = laptop.json(&[&q[..], &["--host", &desktop_id]].concat());
    assert!(other["results"][0]["host"].is_string(), "{other}");
    let listed = laptop.json(&["sessions", "list", "--host", &desktop_id, "--json"]);
    let rows = listed["sessions"].as_array().unwrap();
    assert!(
        !rows.is_empty()
            && rows
                .iter()
                .all(|r| r["agent"] == "codex" && r["host"].is_string())
    );
    let text = ok(&laptop, &["sessions", "list", "--limit", "100"]);
    assert!(text.lines().any(|l| l.contains(" @")), "{text}");
    assert!(refused(&laptop, &["search", "x", "--host", "bad\u{7}name"]).contains("host"));
    let status = desktop.json(&["sync", "status", "--json"]);
    assert_eq!(status["reachable"], true, "{status}");
    assert_eq!(status["this"]["unsent_messages"], 0, "{status}");

    // The folder holds no word of the conversations.
    for f in crate::common::walkdir(&shared.path().join("sync")) {
        let bytes = std::fs::read(&f).unwrap();
        for word in [&b"timezone"[..], b"Traceback", b"/Users/"] {
            assert!(
                !bytes.windows(word.len()).any(|w| w == word),
                "{} holds {}",
                f.display(),
                String::from_utf8_lossy(word)
            );
        }
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let key = laptop.data_dir().join("sync.key");
        assert_eq!(
            std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    // A third machine with the wrong key, or a key file others can read, is refused.
    let stranger = Home::empty();
    let wrong = stranger.path().join("wrong.key");
    std::fs::write(&wrong, format!("memex-sync-key-1 {}\n", "0".repeat(64))).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(
            refused(
                &stranger,
                &["sync", "join", &url, "--key", wrong.to_str().unwrap()]
            )
            .contains("is not the one")
        );
        std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(
            refused(
                &stranger,
                &["sync", "join", &url, "--key", wrong.to_str().unwrap()]
            )
            .contains("can be read by other users")
        );
    }
    assert!(
        refused(
            &stranger,
            &["sync", "join", "s3://bucket/x", "--key", key_file]
        )
        .contains("sync URL cannot be used")
    );
}

/// Two machines whose services run: a prompt typed on one is found on the other without a
/// command; `memex sync` asks the running service; what one forgets, the other forgets; and
/// `POST /api/sync` refuses what a hostile caller sends.
#[test]
fn running_services_carry_new_prompts_and_forgets_between_machines() {
    use std::io::Write;
    let shared = tempfile::tempdir().unwrap();
    let url = format!("file://{}", shared.path().join("sync").display());
    let key_out = shared.path().join("carried.key");
    let laptop = Home::empty();
    copy_dir(
        &fixtures().join("claude/projects"),
        &laptop.path().join(".claude/projects"),
    );
    let desktop = Home::empty();
    copy_dir(
        &fixtures().join("codex/handwritten/sessions"),
        &desktop.path().join(".codex/sessions"),
    );
    ok(&laptop, &["import"]);
    ok(&desktop, &["import"]);
    ok(
        &laptop,
        &[
            "sync",
            "setup",
            &url,
            "--key-out",
            key_out.to_str().unwrap(),
        ],
    );
    ok(
        &desktop,
        &["sync", "join", &url, "--key", key_out.to_str().unwrap()],
    );
    let env = [
        ("MEMEX_VECTOR_PROVIDER", "off"),
        ("MEMEX_SYNC_INTERVAL_SECS", "5"),
    ];
    let a = laptop.serve(&env);
    let b = desktop.serve(&env);
    a.wait_watching();
    b.wait_watching();
    let found = |s: &crate::common::Server, q: &str| -> usize {
        s.ok(&format!("/api/search?q={q}&mode=fts&limit=50"))["results"]
            .as_array()
            .unwrap()
            .len()
    };
    // Each service pushes what it archived and pulls the other's on its own.
    b.wait_for(60, "the laptop's sessions on the desktop", |s| {
        (found(s, "timezone") > 0).then_some(())
    });

    // A prompt typed on the laptop.
    let session = "5e55a0e0-1111-4222-8333-000000000044";
    let file = laptop
        .path()
        .join(".claude/projects/-work-live")
        .join(format!("{session}.jsonl"));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let line = serde_json::json!({
        "type": "user", "uuid": "u1", "sessionId": session, "cwd": "/work/live",
        "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "message": {"role": "user", "content": "why does the quokkazanzibar upload flake"}
    });
    writeln!(std::fs::File::create(&file).unwrap(), "{line}").unwrap();
    let started = std::time::Instant::now();
    b.wait_for(60, "the new prompt on the desktop", |s| {
        (found(s, "quokkazanzibar") == 1).then_some(())
    });
    eprintln!("typed on A, found on B after {:?}", started.elapsed());
    let hit = &b.ok("/api/search?q=quokkazanzibar&mode=fts")["results"][0];
    assert_eq!(hit["session_id"], session, "{hit}");

    // `memex sync` while the service runs: the service syncs now and says what it did.
    let now = desktop.json(&["sync", "--json"]);
    assert!(
        now["pushed"].is_object() && now["pulled"].is_object(),
        "{now}"
    );
    let pulled_only = desktop.json(&["sync", "--pull", "--json"]);
    assert!(pulled_only["pushed"].is_null(), "{pulled_only}");

    // A hostile caller of POST /api/sync.
    for (body, says) in [
        (r#"{"push": true, "wipe": true}"#, "unknown field `wipe`"),
        (r#"{"push": "yes"}"#, "push"),
        ("[1]", "JSON object"),
        ("{", "not JSON"),
    ] {
        let (status, v) = b.post("/api/sync", body);
        assert_eq!(status, 400, "{body}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(says),
            "{body}: {v}"
        );
    }
    let res = b
        .client()
        .post(b.url("/api/sync"))
        .header("content-type", "application/json")
        .header("origin", "http://evil.example")
        .body("{}")
        .send()
        .unwrap();
    assert_eq!(res.status().as_u16(), 403, "a cross-site sync is refused");

    // Forgotten on the laptop (through its service): gone from the desktop too.
    let out = laptop.json(&["forget", "--session", session, "--yes", "--json"]);
    assert_eq!(out["sessions"], 1, "{out}");
    b.wait_for(60, "the forget on the desktop", |s| {
        (found(s, "quokkazanzibar") == 0).then_some(())
    });
    let (status, _) = b.get(&format!("/api/sessions/{session}"));
    assert_eq!(status, 404);
    let status = desktop.json(&["sync", "status", "--json"]);
    assert_eq!(status["this"]["unsent_forgets"], 0, "{status}");
    drop((a, b));
}

/// Every message of an archive: (agent, session, message id, text), sorted.
fn messages(h: &Home) -> Vec<(String, String, String, String)> {
    let conn = crate::common::db(&h.data_dir());
    let mut st = conn
        .prepare(
            "SELECT s.agent, s.session_id, m.message_id, COALESCE(m.text, memex_unzstd(m.text_z))
             FROM messages m JOIN sessions s ON s.id = m.session_pk ORDER BY 1, 2, 3",
        )
        .unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// `memex sync` killed (SIGKILL) at random points of its push and of its pull, again and
/// again: the next sync completes, nothing is lost and nothing is applied twice.
#[test]
fn a_sync_killed_anywhere_loses_nothing_and_applies_nothing_twice() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("seed {seed}");
    let mut rng = crate::common::Rng(seed | 1);
    let shared = tempfile::tempdir().unwrap();
    let url = format!("file://{}", shared.path().join("sync").display());
    let key_out = shared.path().join("carried.key");
    let laptop = Home::with_fixtures();
    ok(&laptop, &["import"]);
    let desktop = Home::empty();
    ok(
        &laptop,
        &[
            "sync",
            "setup",
            &url,
            "--key-out",
            key_out.to_str().unwrap(),
        ],
    );
    ok(
        &desktop,
        &["sync", "join", &url, "--key", key_out.to_str().unwrap()],
    );
    let killed = |h: &Home, args: &[&str], rng: &mut crate::common::Rng| {
        let mut child = h
            .command(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(rng.below(600)));
        let _ = child.kill();
        child.wait().unwrap();
    };
    for _ in 0..10 {
        killed(&laptop, &["sync", "--push"], &mut rng);
    }
    let pushed = laptop.json(&["sync", "--push", "--json"]);
    assert!(pushed["pushed"].is_object(), "{pushed}");
    let status = laptop.json(&["sync", "status", "--json"]);
    assert_eq!(status["this"]["unsent_messages"], 0, "{status}");
    for _ in 0..10 {
        killed(&desktop, &["sync", "--pull"], &mut rng);
    }
    ok(&desktop, &["sync"]);
    let (a, b) = (messages(&laptop), messages(&desktop));
    assert!(a.len() > 500, "{}", a.len());
    assert_eq!(a, b, "seed {seed}");
    // Nothing applied twice: each session's counters are as where it was archived.
    let counters = |h: &Home| -> Vec<(String, String, i64, i64)> {
        let conn = crate::common::db(&h.data_dir());
        let mut st = conn
            .prepare(
                "SELECT agent, session_id, message_count, prompt_count FROM sessions
                 WHERE message_count > 0 ORDER BY 1, 2",
            )
            .unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(counters(&laptop), counters(&desktop), "seed {seed}");
}
