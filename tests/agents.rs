//! The agents beyond Claude Code, Codex and Gemini, end to end: every sample in
//! `../shared/fixtures/more-agents` imported by the real binary into a HOME laid out like a
//! machine running them all, listed by `memex agents`, found by search; and a SQLite source
//! written by the agent while `memex serve` runs (inserted rows, an answer streamed into one
//! row, a deleted session, a kill -9) ending exactly as a clean import of the same database.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;
use serde_json::Value;

fn more() -> PathBuf {
    fixtures().join("more-agents")
}

/// A HOME holding every more-agents sample where its agent keeps it, and the two project
/// folders (Aider, Crush) under `projects/`.
struct AgentsHome {
    home: Home,
}

impl AgentsHome {
    fn new() -> AgentsHome {
        let home = Home::empty();
        let m = more();
        for dir in [
            "cursor/cli/home",
            "cursor/ide/home",
            "copilot/home",
            "opencode/v2-sqlite/home",
            "qwen/home",
            "antigravity/home",
            "roo/home",
            "kiro/home",
            "goose/home",
            "amp/home",
            "pi/home",
        ] {
            copy_dir(&m.join(dir), home.path());
        }
        let cline = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../ai-cli-session-collector/tests/data/more-agents/cline/home");
        copy_dir(&cline, home.path());
        let projects = home.path().join("projects");
        copy_dir(
            &m.join("crush/project/home/dev/demo-app"),
            &projects.join("demo-app"),
        );
        copy_dir(
            &m.join("aider/Users/gauthier/Projects/aider"),
            &projects.join("aider"),
        );
        AgentsHome { home }
    }

    fn project(&self, name: &str) -> PathBuf {
        self.home.path().join("projects").join(name)
    }

    fn run(&self, args: &[&str]) -> Output {
        self.home
            .command(args)
            .env("MEMEX_AGENTS_AIDER_ROOTS", self.project("aider"))
            .env("MEMEX_AGENTS_CRUSH_ROOTS", self.project("demo-app"))
            .output()
            .unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "memex {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

/// Agent → (sessions at least, a word of a prompt or an answer that search finds).
const EXPECTED: &[(&str, i64, &str)] = &[
    ("cursor", 3, "Tintin"),
    ("cursor-ide", 2, "timezone"),
    ("copilot", 2, "octocat"),
    ("opencode", 2, "Green"),
    ("qwen", 5, "cedar"),
    ("antigravity", 1, "toISOString"),
    ("cline", 1, "utc"),
    ("roo", 2, "formatDate"),
    ("kiro", 1, "date"),
    ("goose", 3, "makefile"),
    ("crush", 2, "date"),
    ("aider", 17, "Spinner"),
    ("amp", 2, "jokes"),
    ("pi", 3, "README"),
];

#[test]
fn every_agent_is_imported_listed_and_found() {
    let h = AgentsHome::new();
    let report = h.json(&["import", "--json"]);
    assert!(
        report["errors"].as_array().unwrap().is_empty(),
        "import errors: {report}"
    );
    let agents = h.json(&["agents", "--json"]);
    let list = agents.as_array().unwrap();
    let names: BTreeSet<&str> = list.iter().map(|a| a["agent"].as_str().unwrap()).collect();
    assert!(names.len() >= 17, "{names:?}");
    for (agent, sessions, word) in EXPECTED {
        let a = list
            .iter()
            .find(|a| a["agent"] == *agent)
            .unwrap_or_else(|| panic!("{agent} is not listed"));
        assert_eq!(a["installed"], true, "{agent}: {a}");
        assert!(
            a["sessions"].as_i64().unwrap() >= *sessions,
            "{agent}: expected at least {sessions} sessions: {a}"
        );
        assert!(a["messages"].as_i64().unwrap() > 0, "{agent}: {a}");
        assert!(
            a["last_activity"].is_string() || *agent == "aider",
            "{agent}: {a}"
        );
        let hits = h.json(&["search", word, "--agent", agent, "--json"]);
        assert!(
            !hits["results"].as_array().unwrap().is_empty(),
            "{agent}: `{word}` not found"
        );
    }
    // The first three are not installed in this HOME, and say so.
    for agent in ["claude", "codex", "gemini"] {
        let a = list.iter().find(|a| a["agent"] == agent).unwrap();
        assert_eq!(a["installed"], false, "{a}");
        assert_eq!(a["sessions"], 0, "{a}");
    }
    // A second import finds nothing new: every source kind is read incrementally.
    let again = h.json(&["import", "--json"]);
    assert_eq!(again["messages"], 0, "{again}");
    assert_eq!(again["messages_updated"], 0, "{again}");
    // The human listing names every agent too, with the folder it was found in, and says of
    // an agent not found where it was looked for.
    let text = String::from_utf8(h.run(&["agents"]).stdout).unwrap();
    for (agent, _, _) in EXPECTED {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(agent))
            .unwrap_or_else(|| panic!("{agent} missing from:\n{text}"));
        assert!(line.contains("installed"), "{line}");
    }
    assert!(
        text.contains(&h.project("aider").display().to_string()),
        "{text}"
    );
    let claude = text
        .lines()
        .skip_while(|l| !l.starts_with("claude"))
        .nth(1)
        .unwrap();
    assert!(claude.contains("looked in 2 folders"), "{text}");
}

#[test]
fn an_unknown_agent_names_the_known_ones() {
    let h = AgentsHome::new();
    let out = h.run(&["search", "x", "--agent", "windsurf"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for known in ["cursor-ide", "opencode", "aider", "pi"] {
        assert!(err.contains(known), "{err}");
    }
}

#[test]
fn a_corrupt_database_is_a_problem_named_by_memex_agents_not_a_failure() {
    let h = AgentsHome::new();
    let db = h.project("demo-app").join(".crush/crush.db");
    std::fs::write(&db, vec![0x5a_u8; 8192]).unwrap();
    let report = h.json(&["import", "--json"]);
    let errors = report["errors"].as_array().unwrap();
    assert!(
        errors
            .iter()
            .any(|e| e["file"].as_str().unwrap().ends_with("crush.db")),
        "{report}"
    );
    // Every other agent was still imported.
    assert!(report["messages"].as_i64().unwrap() > 100, "{report}");
    let agents = h.json(&["agents", "--json"]);
    let crush = agents
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == "crush")
        .unwrap();
    let problems = crush["problems"].as_array().unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p["file"].as_str().unwrap().ends_with("crush.db")),
        "{crush}"
    );
}

// ---- a SQLite source written while the service runs ----

const CRUSH_SESSION: &str = "b7a1c2d3-e4f5-4a6b-8c7d-9e0f1a2b3c4d";

/// The agent's own connection to its database, in WAL mode as it runs.
fn agent_db(path: &Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(path).unwrap();
    c.pragma_update(None, "journal_mode", "wal").unwrap();
    c.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
    c
}

fn insert_message(c: &rusqlite::Connection, id: &str, session: &str, role: &str, text: &str) {
    let parts = serde_json::json!([{"type": "text", "data": {"text": text}}]).to_string();
    let now = chrono::Utc::now().timestamp();
    c.execute(
        "INSERT INTO messages (id, session_id, role, parts, model, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, 'claude-sonnet-4-5', ?5, ?5)",
        rusqlite::params![id, session, role, parts, now],
    )
    .unwrap();
}

fn stream_into(c: &rusqlite::Connection, id: &str, text: &str) {
    let parts = serde_json::json!([{"type": "text", "data": {"text": text}}]).to_string();
    c.execute(
        "UPDATE messages SET parts = ?2, updated_at = ?3 WHERE id = ?1",
        rusqlite::params![id, parts, chrono::Utc::now().timestamp()],
    )
    .unwrap();
}

/// (session, message id, text) of every crush message in an archive.
fn crush_rows(data_dir: &Path) -> BTreeSet<(String, String, String)> {
    let c = db(data_dir);
    let mut st = c
        .prepare(
            "SELECT s.session_id, m.message_id, COALESCE(m.text, memex_unzstd(m.text_z))
             FROM messages m JOIN sessions s ON s.id = m.session_pk
             WHERE s.agent = 'crush' AND m.active = 1",
        )
        .unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn crush_hits(s: &Server, word: &str) -> usize {
    s.ok(&format!("/api/search?q={word}&agent=crush&limit=50"))["results"]
        .as_array()
        .unwrap()
        .len()
}

/// The service reading the Crush project, which Aider reads too (as it does once the archive
/// knows the project): a change must still reach the agent whose file it is.
fn serve_crush(h: &AgentsHome) -> Server {
    let root = h.project("demo-app");
    let s = h.home.serve(&[
        ("MEMEX_AGENTS_CRUSH_ROOTS", root.to_str().unwrap()),
        ("MEMEX_AGENTS_AIDER_ROOTS", root.to_str().unwrap()),
        ("MEMEX_VECTOR_PROVIDER", "off"),
    ]);
    s.wait_watching();
    s
}

/// `memex import` into `home` of the Crush project folder `project`; it must succeed.
fn import_crush(home: &Home, project: &Path) {
    let out = home
        .command(&["import", "--json"])
        .env("MEMEX_AGENTS_CRUSH_ROOTS", project)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `size` stamp `source_files` holds for a file (-1 while none is recorded), and when the
/// file was last read.
fn stored_stamp(data_dir: &Path, file: &Path) -> (i64, i64) {
    db(data_dir)
        .query_row(
            "SELECT size, updated_at FROM source_files WHERE path = ?1",
            [file.to_string_lossy()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
}

/// SQLite writes a commit into the `-wal` file before it publishes it: a database whose log was
/// written just now may have been read without its last commit, so its stamp is not recorded
/// and it is read again (the service does so a second later); once the log has been left alone,
/// the stamp is recorded and an unchanged database is skipped.
#[test]
fn a_database_written_just_now_is_read_again_until_it_settles() {
    let h = AgentsHome::new();
    let db_path = h.project("demo-app").join(".crush/crush.db");
    let agent = agent_db(&db_path);
    insert_message(
        &agent,
        "live-u1",
        CRUSH_SESSION,
        "user",
        "Does zanzibarite parse?",
    );
    let import = || import_crush(&h.home, &h.project("demo-app"));
    let data = h.home.data_dir();
    let wal = db_path.with_file_name("crush.db-wal");
    let wal_times = |t: std::time::SystemTime| {
        for f in [&db_path, &wal] {
            std::fs::File::options()
                .write(true)
                .open(f)
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
    };
    // Written "just now" for each of the first two imports, however slow they start.
    let now = std::time::SystemTime::now;

    wal_times(now());
    import();
    let first = crush_rows(&data);
    assert!(first.iter().any(|(_, _, t)| t.contains("zanzibarite")));
    let (size, read_at) = stored_stamp(&data, &db_path);
    assert_eq!(size, -1, "written just now: no stamp yet");
    std::thread::sleep(std::time::Duration::from_millis(5));
    wal_times(now());
    import();
    assert_eq!(crush_rows(&data), first, "read again, nothing doubled");
    let (size, read_again_at) = stored_stamp(&data, &db_path);
    assert_eq!(size, -1);
    assert!(read_again_at > read_at, "read again");

    // The log left alone for a while (its files' times moved back ten seconds).
    wal_times(now() - std::time::Duration::from_secs(10));
    import();
    let settled = stored_stamp(&data, &db_path);
    assert!(settled.0 > 0, "settled: the stamp is recorded");
    std::thread::sleep(std::time::Duration::from_millis(5));
    import();
    assert_eq!(crush_rows(&data), first);
    assert_eq!(
        stored_stamp(&data, &db_path),
        settled,
        "unchanged: not read again"
    );
}

/// A database in WAL mode that no connection has open has no `-wal` or `-shm` beside it; a
/// read-only reader would create both and could not remove them. Memex reads such a database
/// as an immutable file and leaves the agent's folder as it found it.
#[test]
fn reading_a_wal_database_leaves_no_files_in_the_agents_folder() {
    let h = AgentsHome::new();
    let crush = h.project("demo-app").join(".crush");
    let db_path = crush.join("crush.db");
    {
        let agent = agent_db(&db_path);
        insert_message(
            &agent,
            "wal-u1",
            CRUSH_SESSION,
            "user",
            "Is quillwort stored?",
        );
    }
    let names = || {
        let mut v: Vec<String> = std::fs::read_dir(&crush)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    // The agent closed it: WAL mode in the header, no log beside it.
    let head = std::fs::read(&db_path).unwrap();
    assert_eq!((head[18], head[19]), (2, 2));
    assert_eq!(names(), ["crush.db"]);
    import_crush(&h.home, &h.project("demo-app"));
    assert!(
        crush_rows(&h.home.data_dir())
            .iter()
            .any(|(_, _, t)| t.contains("quillwort"))
    );
    assert_eq!(names(), ["crush.db"], "files left in the agent's folder");
}

#[test]
fn a_database_written_while_serving_ends_as_a_clean_import() {
    let h = AgentsHome::new();
    let db_path = h.project("demo-app").join(".crush/crush.db");
    let agent = agent_db(&db_path);
    let s = serve_crush(&h);
    s.wait_for(30, "the fixture rows", |s| {
        (crush_hits(s, "timezone") > 0).then_some(())
    });

    // A new prompt, then an answer streamed into one row, as the agent writes them.
    insert_message(
        &agent,
        "live-u1",
        CRUSH_SESSION,
        "user",
        "Does zanzibarite parse?",
    );
    s.wait_for(30, "the inserted prompt", |s| {
        (crush_hits(s, "zanzibarite") == 1).then_some(())
    });
    insert_message(&agent, "live-a1", CRUSH_SESSION, "assistant", "");
    let mut text = String::new();
    for i in 0..20 {
        text.push_str(&format!("token{i} "));
        stream_into(&agent, "live-a1", &text);
        std::thread::sleep(std::time::Duration::from_millis(15));
    }
    text.push_str("quokkaverse");
    stream_into(&agent, "live-a1", &text);
    s.wait_for(30, "the streamed answer's last word", |s| {
        (crush_hits(s, "quokkaverse") == 1).then_some(())
    });
    // One message for the streamed row, with its final text.
    assert_eq!(crush_hits(&s, "token0"), 1);

    // The agent deletes its sub-agent session: the archive keeps what it had.
    let before = crush_rows(&h.home.data_dir());
    let sub: BTreeSet<_> = before
        .iter()
        .filter(|(sid, _, _)| sid != CRUSH_SESSION)
        .cloned()
        .collect();
    assert!(!sub.is_empty(), "the fixture has a second session");
    agent
        .execute(
            "DELETE FROM messages WHERE session_id != ?1",
            [CRUSH_SESSION],
        )
        .unwrap();
    agent
        .execute("DELETE FROM sessions WHERE id != ?1", [CRUSH_SESSION])
        .unwrap();
    insert_message(&agent, "live-u2", CRUSH_SESSION, "user", "and wombatique?");
    s.wait_for(30, "the prompt after the delete", |s| {
        (crush_hits(s, "wombatique") == 1).then_some(())
    });
    s.terminate();
    let live = crush_rows(&h.home.data_dir());
    assert!(
        sub.is_subset(&live),
        "a deleted session's messages are kept"
    );

    // A clean import of the database as it is now holds exactly the live rows of its sessions.
    drop(agent);
    let clean = Home::empty();
    import_crush(&clean, &h.project("demo-app"));
    let fresh = crush_rows(&clean.data_dir());
    let live_now: BTreeSet<_> = live.difference(&sub).cloned().collect();
    assert_eq!(live_now, fresh);
}

#[test]
fn a_project_first_seen_while_serving_is_followed_for_the_agents_that_write_there() {
    let home = Home::empty();
    let project = home.path().join("work/okapi-app");
    std::fs::create_dir_all(&project).unwrap();
    let cwd = project.to_str().unwrap();
    let s = home.serve(&[("MEMEX_VECTOR_PROVIDER", "off")]);
    s.wait_watching();
    let hits = |s: &Server, q: &str, agent: &str| {
        s.ok(&format!("/api/search?q={q}&agent={agent}"))["results"]
            .as_array()
            .unwrap()
            .len()
    };

    // Aider wrote in the project before the archive knew it: not looked at yet.
    std::fs::write(
        project.join(".aider.chat.history.md"),
        "# aider chat started at 2026-11-30 10:00:00\n\n#### Rename the xylocarp helper\n\n\
         Renamed it to xylocarp_v2.\n",
    )
    .unwrap();
    // A Claude Code session in that project: the service learns of the folder.
    home.write_claude(
        cwd,
        "sess-okapi",
        &[
            claude_prompt("sess-okapi", "u1", cwd, "Set up the okapiformat parser"),
            claude_answer("sess-okapi", "a1", cwd, "The okapiformat parser is set up."),
        ],
    );
    s.wait_for(30, "the Claude Code session", |s| {
        (hits(s, "okapiformat", "claude") > 0).then_some(())
    });
    // The project folder becomes a root of Aider (and Crush): what is there is read, and what
    // is written there later follows.
    s.wait_for(30, "Aider's history in the new project", |s| {
        (hits(s, "xylocarp", "aider") > 0).then_some(())
    });
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(project.join(".aider.chat.history.md"))
        .unwrap();
    std::io::Write::write_all(
        &mut f,
        b"\n#### Now add the quetzalcoatl test\n\nAdded it.\n",
    )
    .unwrap();
    drop(f);
    s.wait_for(30, "a later prompt in that history", |s| {
        (hits(s, "quetzalcoatl", "aider") > 0).then_some(())
    });
    let health = s.ok("/api/health");
    let roots = health["watcher"]["roots"].as_array().unwrap();
    for agent in ["aider", "crush"] {
        assert!(
            roots
                .iter()
                .any(|r| r["agent"] == agent && r["path"].as_str() == Some(cwd)),
            "{agent} follows the project: {roots:?}"
        );
    }
}

#[test]
fn kill_9_while_a_database_streams_loses_and_repeats_nothing() {
    let h = AgentsHome::new();
    let db_path = h.project("demo-app").join(".crush/crush.db");
    let agent = agent_db(&db_path);
    let mut rng = Rng(0x005e_edd8);
    let mut text = String::new();
    insert_message(&agent, "kill-a1", CRUSH_SESSION, "assistant", "");
    for round in 0..3 {
        let s = serve_crush(&h);
        for i in 0..(5 + rng.below(10)) {
            text.push_str(&format!("r{round}w{i} "));
            stream_into(&agent, "kill-a1", &text);
            insert_message(
                &agent,
                &format!("kill-u{round}-{i}"),
                CRUSH_SESSION,
                "user",
                &format!("prompt {round} {i}"),
            );
            std::thread::sleep(std::time::Duration::from_millis(rng.below(40)));
        }
        s.kill9();
    }
    let s = serve_crush(&h);
    let last = text.split_whitespace().last().unwrap().to_owned();
    s.wait_for(30, "the last streamed word", |s| {
        (crush_hits(s, &last) == 1).then_some(())
    });
    s.terminate();
    drop(agent);
    let clean = Home::empty();
    import_crush(&clean, &h.project("demo-app"));
    assert_eq!(
        crush_rows(&h.home.data_dir()),
        crush_rows(&clean.data_dir())
    );
}
