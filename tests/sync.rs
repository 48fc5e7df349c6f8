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
