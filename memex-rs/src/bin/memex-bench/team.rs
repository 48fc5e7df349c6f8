//! `memex-bench team`: team memory on a real PostgreSQL with pgvector. One member archive (a
//! generated corpus, imported) is shared in full by `members` simulated members in turn (each
//! push starts from nothing, as a member's first share does), then the same queries are timed
//! on the team archive and on the member's own archive, and the delay from a new talk summary
//! on the member's machine to a team search hit is measured.
//!
//! Every member shares the same archive, so the team archive holds each row `members` times:
//! its posting lists and tables are as long as those of that many members of this size, and
//! every query finds `members` copies of each local hit.

use std::path::Path;
use std::time::Instant;

use memex::search::{self, Mode, Reach, Scope, SearchParams, Semantic};
use memex::store;
use memex_team::Level;
use memex_team::archive::Team;
use memex_team::share::{self, ConfigRule, NoVectors};

pub(crate) struct Options<'a> {
    pub data: &'a Path,
    pub url: String,
    pub members: usize,
    pub runs: usize,
}

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub(crate) fn run(o: Options<'_>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let team = Team::new(&o.url).unwrap();
    let (_, admin_token) = rt.block_on(team.create("admin")).unwrap_or_else(|e| {
        panic!("{e}: the bench makes its own team archive; give it an empty database")
    });
    let admin = rt.block_on(team.authenticate(&admin_token)).unwrap();
    // A copy of the member's archive: a push notes what it sent there.
    let work = tempfile::tempdir().unwrap();
    std::fs::copy(store::db_path(o.data), store::db_path(work.path())).unwrap();
    let conn = store::open(work.path()).unwrap();
    let messages: i64 = conn
        .query_row("SELECT count(*) FROM messages", [], |r| r.get(0))
        .unwrap();
    let rules = vec![ConfigRule {
        path: "/".into(),
        level: Level::Full,
        name: Some("bench".into()),
    }];
    let mut first = None;
    let mut members = Vec::new();
    for n in 0..o.members {
        let name = format!("member{n:02}");
        let token = rt
            .block_on(team.add_token(&admin, &name, false, &["bench".to_owned()]))
            .unwrap();
        let me = rt.block_on(team.authenticate(&token)).unwrap();
        conn.execute_batch("DELETE FROM team_sent; DELETE FROM team_vectors_due;")
            .unwrap();
        let t = Instant::now();
        let pushed = rt
            .block_on(share::push(&conn, &team, &me, &name, &rules, &NoVectors))
            .unwrap();
        let secs = t.elapsed().as_secs_f64();
        println!(
            "{name}: first share of {messages} messages: {} rows of {} sessions in {secs:.1} s ({:.0} rows/s)",
            pushed.items,
            pushed.sessions,
            pushed.items as f64 / secs
        );
        first.get_or_insert((pushed.items, secs));
        members.push(me);
    }
    let me = &members[0];
    rt.block_on(team.vacuum()).unwrap();
    {
        let g = rt.block_on(tokio_postgres::connect(&o.url, tokio_postgres::NoTls));
        let (c, conn_task) = g.unwrap();
        rt.spawn(conn_task);
        rt.block_on(c.batch_execute("ANALYZE")).unwrap();
        let rows: i64 = rt
            .block_on(c.query_one("SELECT count(*) FROM memex_team_items", &[]))
            .unwrap()
            .get(0);
        let size: String = rt
            .block_on(c.query_one(
                "SELECT pg_size_pretty(pg_database_size(current_database()))",
                &[],
            ))
            .unwrap()
            .get(0);
        println!(
            "team archive: {rows} rows from {} members, database {size}",
            o.members
        );
    }

    let local = store::connect(&store::db_path(o.data)).unwrap();
    let off = Semantic::Off("words".into());
    let queries: Vec<&str> = crate::QUERIES
        .iter()
        .chain(crate::QUESTIONS)
        .chain(crate::COMMON_WORDS)
        .copied()
        .collect();
    for (what, level, mode) in [
        ("words, raw", Scope::default(), Mode::Fts),
        ("words, level all", Scope::All, Mode::Fts),
        ("hybrid, level all", Scope::All, Mode::Hybrid),
    ] {
        let (mut team_ms, mut local_ms) = (Vec::new(), Vec::new());
        for q in &queries {
            let p = SearchParams {
                query: q.to_string(),
                limit: 10,
                level,
                mode,
                reach: Reach::Team,
                ..Default::default()
            };
            for _ in 0..o.runs {
                let t = Instant::now();
                rt.block_on(memex::team::search_as(&team, me, &p, None))
                    .unwrap();
                team_ms.push(t.elapsed().as_secs_f64() * 1000.0);
                let t = Instant::now();
                search::search(
                    &local,
                    &off,
                    &SearchParams {
                        reach: Reach::Local,
                        ..p.clone()
                    },
                )
                .unwrap();
                local_ms.push(t.elapsed().as_secs_f64() * 1000.0);
            }
        }
        println!(
            "{what}: team p50 {:.1} ms, local p50 {:.1} ms ({} queries x {} runs; the team's \
             side has no vectors in this run, so hybrid ranks by words on both)",
            p50(team_ms),
            p50(local_ms),
            queries.len(),
            o.runs
        );
    }

    // A new talk summary on the member's machine, to a hit in the team's search: the push the
    // service makes when it sees it (it looks every 2 s), then the search.
    let pk: i64 = conn
        .query_row(
            "SELECT id FROM sessions ORDER BY id DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let word = format!("zebrafinch{}", std::process::id());
    let row = memex_store::compact::Rows::Talk {
        row: memex_store::compact::Stored {
            value: memex_store::compact::TalkSummary {
                prompt_number: 9999,
                user_request: format!("why does {word} fail"),
                summary: format!("{word} failed because the webhook retried without backoff"),
                completed: "yes".into(),
                files_involved: vec![],
            },
            provenance: memex_store::compact::Provenance {
                provider: "heuristic".into(),
                model: None,
                prompt_version: "bench".into(),
                tokens_input: 0,
                tokens_output: 0,
                confidence: 1.0,
                fallback_reason: None,
            },
            created_at: 0,
        },
        raw_tokens: 10,
        summary_tokens: 10,
        ts: Some(0),
    };
    let t = Instant::now();
    let tx = conn.unchecked_transaction().unwrap();
    memex_store::compact::replace(&tx, pk, 9999, &row).unwrap();
    tx.commit().unwrap();
    let pushed = rt
        .block_on(share::push(
            &conn, &team, me, "member00", &rules, &NoVectors,
        ))
        .unwrap();
    let p = SearchParams {
        query: word.clone(),
        limit: 5,
        level: Scope::One(memex::layer::Layer::Talks),
        mode: Mode::Fts,
        reach: Reach::Team,
        ..Default::default()
    };
    let hits = rt
        .block_on(memex::team::search_as(&team, &members[1], &p, None))
        .unwrap()
        .0;
    assert_eq!(hits.len(), 1, "the new summary is found by another member");
    println!(
        "new talk summary to a team search hit: {:.0} ms (push of {} row + search), plus up to \
         2 s until the service looks",
        t.elapsed().as_secs_f64() * 1000.0,
        pushed.items
    );
    if let Some((rows, secs)) = first {
        println!(
            "first share: {rows} rows in {secs:.1} s = {:.0} rows/s",
            rows as f64 / secs
        );
    }
}
