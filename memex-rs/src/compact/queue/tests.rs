//! The queue driven step by step on a real SQLite archive, without a service or a provider:
//! what the planner queues, what a claim takes, and how a job ends.

use std::time::Duration;

use rusqlite::{Connection, params};

use super::{Job, Output, claim, commit, defer, plan, regenerate, release};
use crate::compact::{NotNow, Switches};
use crate::layer::Layer;

const ALL: Switches = Switches::ALL;

fn archive() -> (tempfile::TempDir, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let conn = crate::store::open(dir.path()).unwrap();
    (dir, conn)
}

/// A session with `prompts` talks; returns its row id.
fn session(conn: &Connection, id: &str, prompts: i64) -> i64 {
    conn.execute(
        "INSERT INTO sessions (agent, session_id, source_path, prompt_count) VALUES ('claude', ?1, '/x', ?2)",
        params![id, prompts],
    )
    .unwrap();
    conn.last_insert_rowid()
}

/// (level, prompt, state) of every job of a session, in a stable order.
fn jobs(conn: &Connection, pk: i64) -> Vec<(String, i64, String)> {
    let mut st = conn
        .prepare(
            "SELECT level, prompt_number, state FROM compact_jobs WHERE session_pk = ?1
             ORDER BY level, prompt_number",
        )
        .unwrap();
    st.query_map([pk], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn outage() -> NotNow {
    NotNow {
        outage: true,
        reason: "every provider is down".into(),
        retry_after: Some(Duration::from_secs(5)),
    }
}

fn failure() -> NotNow {
    NotNow {
        outage: false,
        reason: "the answer was not JSON".into(),
        retry_after: None,
    }
}

#[test]
fn a_talk_is_planned_once_when_the_next_prompt_starts_and_the_l3_at_the_end() {
    let (_d, conn) = archive();
    let pk = session(&conn, "s1", 3);
    // Talk 3 is still open: only talks 1 and 2 are complete.
    assert_eq!(plan(&conn, pk, false, "ingest", ALL).unwrap(), 4);
    assert_eq!(
        plan(&conn, pk, false, "ingest", ALL).unwrap(),
        0,
        "nothing twice"
    );
    let l2: Vec<i64> = jobs(&conn, pk)
        .into_iter()
        .filter(|j| j.0 == "l2")
        .map(|j| j.1)
        .collect();
    assert_eq!(l2, [1, 2]);
    // The session went idle: its last talk and the L3.
    assert_eq!(plan(&conn, pk, true, "idle", ALL).unwrap(), 3);
    assert_eq!(jobs(&conn, pk).len(), 7);
    // Only the switched-on layers are planned.
    let other = session(&conn, "s2", 2);
    let l1_only = Switches::only(&[Layer::Observations]);
    assert_eq!(plan(&conn, other, true, "idle", l1_only).unwrap(), 2);
    assert!(jobs(&conn, other).iter().all(|j| j.0 == "l1"));
}

#[test]
fn a_claim_takes_one_sessions_ready_jobs_in_talk_order_with_the_l3_last() {
    let (_d, conn) = archive();
    let a = session(&conn, "a", 2);
    let b = session(&conn, "b", 1);
    plan(&conn, a, true, "idle", ALL).unwrap();
    plan(&conn, b, true, "idle", ALL).unwrap();
    let first = claim(&conn).unwrap();
    assert!(
        first.iter().all(|j| j.session_pk == a),
        "the oldest ready job's session"
    );
    let order: Vec<(Layer, i64)> = first.iter().map(|j| (j.layer, j.prompt_number)).collect();
    assert_eq!(
        order,
        [
            (Layer::Observations, 1),
            (Layer::Talks, 1),
            (Layer::Observations, 2),
            (Layer::Talks, 2),
            (Layer::Sessions, 0),
        ]
    );
    assert!(jobs(&conn, a).iter().all(|j| j.2 == "running"));
    let second = claim(&conn).unwrap();
    assert!(second.iter().all(|j| j.session_pk == b));
    assert!(
        claim(&conn).unwrap().is_empty(),
        "running jobs are not claimed again"
    );
}

#[test]
fn a_committed_job_is_done_once_and_a_released_one_runs_again() {
    let (_d, mut conn) = archive();
    let pk = session(&conn, "s", 1);
    plan(&conn, pk, true, "idle", ALL).unwrap();
    let claimed = claim(&conn).unwrap();
    let (done, rest): (Vec<Job>, Vec<Job>) = claimed
        .into_iter()
        .partition(|j| j.layer == Layer::Observations);
    commit(&mut conn, &done[0], &Output::Nothing).unwrap();
    // A commit for a job that is no longer running (forgotten meanwhile) changes nothing.
    commit(&mut conn, &done[0], &Output::Nothing).unwrap();
    let attempts: i64 = conn
        .query_row(
            "SELECT attempts FROM compact_jobs WHERE id = ?1",
            [done[0].id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(attempts, 1);
    let ids: Vec<i64> = rest.iter().map(|j| j.id).collect();
    release(&conn, &ids).unwrap();
    let states = jobs(&conn, pk);
    assert!(states.contains(&("l1".into(), 1, "done".into())));
    assert!(states.contains(&("l2".into(), 1, "pending".into())));
    assert!(states.contains(&("l3".into(), 0, "pending".into())));
    let again = claim(&conn).unwrap();
    assert_eq!(again.len(), 2, "the released jobs, not the done one");
}

#[test]
fn an_outage_waits_without_an_attempt_and_failures_end_in_failed() {
    let (_d, conn) = archive();
    let pk = session(&conn, "s", 1);
    let sw = Switches::only(&[Layer::Talks]);
    plan(&conn, pk, true, "idle", sw).unwrap();
    let mut job = claim(&conn).unwrap().remove(0);
    let id = job.id;
    defer(&conn, &job, &outage(), 3).unwrap();
    let row = |c: &Connection| -> (String, i64, i64, String) {
        c.query_row(
            "SELECT state, attempts, not_before, last_error FROM compact_jobs WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap()
    };
    let (state, attempts, not_before, error) = row(&conn);
    assert_eq!((state.as_str(), attempts), ("pending", 0));
    assert!(not_before > chrono::Utc::now().timestamp_millis() + 3000);
    assert!(error.starts_with("waiting: "), "{error}");
    assert!(
        claim(&conn).unwrap().is_empty(),
        "it waits out the retry time"
    );

    // Failures use attempts, with backoff, up to the limit.
    for n in 1..=3 {
        defer(&conn, &job, &failure(), 3).unwrap();
        job.attempts = n;
        let (state, attempts, _, error) = row(&conn);
        assert_eq!(attempts, n);
        assert_eq!(state, if n < 3 { "pending" } else { "failed" });
        assert_eq!(error, "the answer was not JSON");
    }
}

#[test]
fn regeneration_queues_done_jobs_again_for_the_layers_asked() {
    let (_d, mut conn) = archive();
    let pk = session(&conn, "s", 2);
    plan(&conn, pk, true, "idle", ALL).unwrap();
    for j in claim(&conn).unwrap() {
        commit(&mut conn, &j, &Output::Nothing).unwrap();
    }
    conn.execute(
        "UPDATE sessions SET last_processed_prompt = 2 WHERE id = ?1",
        [pk],
    )
    .unwrap();
    let guard = super::RegenerateGuard {
        paid: Vec::new(),
        confirmed: false,
    };
    let n = regenerate(&mut conn, &[Layer::Talks], Some(pk), None, &guard).unwrap();
    assert_eq!(n, 2, "the two talk summaries");
    let pending: Vec<(String, i64, String)> = jobs(&conn, pk)
        .into_iter()
        .filter(|j| j.2 == "pending")
        .collect();
    assert_eq!(
        pending,
        [
            ("l2".into(), 1, "pending".into()),
            ("l2".into(), 2, "pending".into())
        ]
    );
    // A large regeneration with a paid provider waits for a yes.
    let paid = super::RegenerateGuard {
        paid: vec!["openai".into()],
        confirmed: false,
    };
    let big = session(&conn, "big", 80);
    conn.execute(
        "UPDATE sessions SET last_processed_prompt = 80 WHERE id = ?1",
        [big],
    )
    .unwrap();
    let before = jobs(&conn, big).len();
    assert!(regenerate(&mut conn, &Layer::COMPACT, Some(big), None, &paid).is_err());
    assert_eq!(
        jobs(&conn, big).len(),
        before,
        "nothing queued when refused"
    );
}

#[test]
fn regenerate_reads_the_levels_as_search_names_them() {
    use super::regenerate_levels;
    assert_eq!(regenerate_levels(None).unwrap(), Layer::COMPACT.to_vec());
    assert_eq!(
        regenerate_levels(Some("all")).unwrap(),
        Layer::COMPACT.to_vec()
    );
    for (name, job, layer) in [
        ("observations", "l1", Layer::Observations),
        ("talks", "l2", Layer::Talks),
        ("sessions", "l3", Layer::Sessions),
    ] {
        assert_eq!(regenerate_levels(Some(name)).unwrap(), [layer]);
        assert_eq!(regenerate_levels(Some(job)).unwrap(), [layer]);
    }
    // Raw has nothing to regenerate; unknown names say what is accepted.
    for bad in ["raw", "l4", "Talks", ""] {
        let e = regenerate_levels(Some(bad)).unwrap_err();
        assert_eq!(e.got, bad);
        assert_eq!(e.accepted, ["observations", "talks", "sessions", "all"]);
    }
}
