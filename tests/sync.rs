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

/// Two machines and a folder between them: the laptop holds the Claude fixtures, the desktop
/// the Codex ones when `desktop_codex`; `key` is where setup writes the key to carry.
struct Machines {
    shared: tempfile::TempDir,
    url: String,
    key: String,
    laptop: Home,
    desktop: Home,
}

fn machines(desktop_codex: bool) -> Machines {
    let shared = tempfile::tempdir().unwrap();
    let url = format!("file://{}", shared.path().join("sync").display());
    let key = shared.path().join("carried.key").display().to_string();
    let laptop = Home::empty();
    copy_dir(
        &fixtures().join("claude/projects"),
        &laptop.path().join(".claude/projects"),
    );
    let desktop = Home::empty();
    if desktop_codex {
        copy_dir(
            &fixtures().join("codex/handwritten/sessions"),
            &desktop.path().join(".codex/sessions"),
        );
    }
    Machines {
        shared,
        url,
        key,
        laptop,
        desktop,
    }
}

#[test]
fn two_machines_share_one_memory_through_a_folder() {
    let Machines {
        shared,
        url,
        key,
        laptop,
        desktop,
    } = machines(true);
    let key_file = key.as_str();
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
    let config = ok(&desktop, &["config"]);
    assert!(
        config.contains(&format!("# sync target in effect: {url} (recorded by")),
        "{config}"
    );
    assert_eq!(desktop.json(&["config", "--json"])["sync_target"], url);
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
    // An id cut too short names no machine, and the note says how machines are named.
    let short = laptop.memex(&[
        "search",
        "token",
        "--mode",
        "fts",
        "--host",
        &desktop_id[..4],
    ]);
    assert!(short.status.success(), "{short:?}");
    let note = String::from_utf8_lossy(&short.stderr);
    assert!(
        note.contains("no session of machine") && note.contains("first 6 characters"),
        "{note}"
    );
    // `memex agents` counts this machine's files and sessions, and the others' apart.
    let agents = laptop.json(&["agents", "--json"]);
    let codex = agents
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == "codex")
        .unwrap();
    assert_eq!(
        (&codex["sessions"], &codex["files"]),
        (&0.into(), &0.into()),
        "{codex}"
    );
    assert!(codex["synced_sessions"].as_u64().unwrap() > 0, "{codex}");
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
    let Machines {
        shared: _shared,
        url,
        key: key_out,
        laptop,
        desktop,
    } = machines(true);
    ok(&laptop, &["import"]);
    ok(&desktop, &["import"]);
    ok(&laptop, &["sync", "setup", &url, "--key-out", &key_out]);
    ok(&desktop, &["sync", "join", &url, "--key", &key_out]);
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

/// Summaries a paid model wrote on one machine travel with its sync: the other machine
/// stores them, finds them, and does not ask its own model for them again; its own compactor
/// writes free summaries for whatever did not come.
#[test]
fn summaries_a_model_wrote_travel_and_are_not_paid_for_twice() {
    use crate::common::{FakeLlm, db, paid_env};
    let Machines {
        shared: _shared,
        url,
        key,
        laptop,
        desktop,
    } = machines(false);
    let key = key.as_str();
    let (laptop_model, desktop_model) = (
        FakeLlm::start(std::time::Duration::ZERO),
        FakeLlm::start(std::time::Duration::ZERO),
    );
    let paid = |h: &Home, llm: &FakeLlm, args: &[&str]| -> String {
        let mut c = h.command(args);
        for (k, v) in paid_env(&llm.url) {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "memex {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let written = |h: &Home| -> (i64, i64, i64) {
        let conn = db(&h.data_dir());
        conn.query_row(
            "SELECT (SELECT COUNT(*) FROM observations WHERE provider = 'openai'),
                    (SELECT COUNT(*) FROM talk_summaries WHERE provider = 'openai'),
                    (SELECT COUNT(*) FROM session_summaries WHERE provider = 'openai')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
    };

    // The laptop's model summarises its conversations before it ever syncs.
    ok(&laptop, &["import"]);
    paid(&laptop, &laptop_model, &["compact", "trigger"]);
    let asked = laptop_model.requests.lock().unwrap().len();
    let on_laptop = written(&laptop);
    assert!(
        asked > 0 && on_laptop.1 > 0 && on_laptop.2 > 0,
        "{asked} {on_laptop:?}"
    );

    ok(&laptop, &["sync", "setup", &url, "--key-out", key]);
    let pushed = laptop.json(&["sync", "--json"]);
    let sent = pushed["pushed"]["summaries"].as_u64().unwrap();
    assert!(sent > 0, "{pushed}");
    // The key carried by hand: its 24 words, typed into the desktop.
    let words = ok(&laptop, &["sync", "key"]);
    let words = words.lines().next().unwrap();
    assert_eq!(words.split(' ').count(), 24, "{words}");
    let joined = crate::common::hook(
        &desktop,
        env!("CARGO_BIN_EXE_memex"),
        &["sync", "join", &url, "--key", "-"],
        &[],
        &format!("{}\n", words.to_uppercase()),
    );
    assert!(joined.status.success(), "{joined:?}");
    let mut mistyped: Vec<&str> = words.split(' ').collect();
    mistyped[5] = "memexx";
    let mistyped = mistyped.join(" ");
    let refused = crate::common::hook(
        &Home::empty(),
        env!("CARGO_BIN_EXE_memex"),
        &["sync", "join", &url, "--key", "-"],
        &[],
        &mistyped,
    );
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("not in the list"),
        "{refused:?}"
    );
    let pulled: serde_json::Value =
        serde_json::from_str(&paid(&desktop, &desktop_model, &["sync", "--json"])).unwrap();
    assert_eq!(pulled["pulled"]["summaries"], sent, "{pulled}");
    assert_eq!(written(&desktop), on_laptop, "every row the model wrote");

    // The desktop compacts what it took: its model is asked nothing.
    paid(&desktop, &desktop_model, &["compact", "trigger"]);
    assert!(
        desktop_model.requests.lock().unwrap().is_empty(),
        "the desktop paid again for {} summaries",
        desktop_model.requests.lock().unwrap().len()
    );
    assert_eq!(
        written(&desktop),
        on_laptop,
        "none replaced by the heuristic"
    );
    assert_eq!(laptop_model.requests.lock().unwrap().len(), asked);

    // Found at the talks level, as the machine they came from.
    let found = desktop.json(&[
        "search",
        "fake summary",
        "--level",
        "talks",
        "--mode",
        "fts",
        "--json",
    ]);
    let results = found["results"].as_array().unwrap();
    assert!(!results.is_empty(), "{found}");
    let laptop_name = desktop.json(&["hosts", "--json"])["others"][0]["name"].clone();
    assert!(laptop_name.is_string());
    assert!(
        results.iter().all(|r| r["host"] == laptop_name),
        "{found} {laptop_name}"
    );

    // Each summary goes once.
    let again = laptop.json(&["sync", "--push", "--json"]);
    assert_eq!(again["pushed"]["summaries"], 0, "{again}");
}

/// Two machines whose clocks are an hour apart (the desktop's `memex` runs under `faketime`,
/// from Debian's package of that name, an hour ahead): nothing in sync goes by the clock
/// (series go by batch numbers, messages by their ids), so they converge as any two do, and
/// each machine's times are its own.
#[test]
fn machines_whose_clocks_are_an_hour_apart_converge() {
    let Machines {
        shared: _shared,
        url,
        key,
        laptop,
        desktop,
    } = machines(true);
    let key = key.as_str();
    let ahead = |args: &[&str]| -> String {
        let out = std::process::Command::new("faketime")
            .args(["-f", "+1h", env!("CARGO_BIN_EXE_memex")])
            .args(args)
            .env_clear()
            .env("HOME", desktop.path())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .output()
            .expect("faketime runs (Debian's `faketime`; .ci/run installs it)");
        assert!(out.status.success(), "memex {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let started = chrono::Utc::now().timestamp_millis();
    ok(&laptop, &["import"]);
    ahead(&["import"]);
    ok(&laptop, &["sync", "setup", &url, "--key-out", key]);
    ok(&laptop, &["sync"]);
    ahead(&["sync", "join", &url, "--key", key]);
    ahead(&["sync"]);
    ok(&laptop, &["sync"]);
    ahead(&["sync"]);
    let (on_laptop, on_desktop) = (messages(&laptop), messages(&desktop));
    assert!(
        on_laptop.iter().any(|m| m.0 == "claude") && on_laptop.iter().any(|m| m.0 == "codex"),
        "both machines' conversations"
    );
    assert_eq!(on_laptop, on_desktop);
    for h in [&laptop, &desktop] {
        let status = h.json(&["sync", "status", "--json"]);
        assert_eq!(status["others"][0]["behind"], 0, "{status}");
        assert_eq!(status["this"]["unsent_messages"], 0, "{status}");
    }
    // The desktop's clock was an hour ahead while it synced.
    let pushed_at = |h: &Home| -> i64 {
        crate::common::db(&h.data_dir())
            .query_row("SELECT pushed_at FROM sync_self", [], |r| r.get(0))
            .unwrap()
    };
    assert!(pushed_at(&desktop) - started > 50 * 60 * 1000);
    assert!(pushed_at(&laptop) - started < 10 * 60 * 1000);
}
