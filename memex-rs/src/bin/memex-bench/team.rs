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
use memex_team::share::{self, ConfigRule, NoVectors, VectorSource};

pub(crate) struct Options<'a> {
    pub data: &'a Path,
    pub url: String,
    pub members: usize,
    pub runs: usize,
    /// The first member's push sends the vectors of `data`'s vector folder (made beforehand
    /// with `memex-bench vectors --data D --provider hashing`), and hybrid searches embed the
    /// query with the hashing embedder those vectors came from.
    pub vectors: bool,
    /// Only the searches, on the team archive an earlier run left (each member gets a new
    /// token, written straight into its table).
    pub reuse: bool,
}

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub(crate) fn run(o: Options<'_>) {
    // Two workers: LanceDB (the local side of hybrid) is driven by them while a search waits.
    let rt = crate::runtime();
    let team = Team::new(&o.url).unwrap();
    let pg = {
        let (c, conn_task) = rt
            .block_on(tokio_postgres::connect(&o.url, tokio_postgres::NoTls))
            .unwrap();
        rt.spawn(conn_task);
        c
    };
    if o.reuse {
        // New tokens for the members an earlier run made, straight into their table.
        let token_for = |name: &str| {
            let token = memex_team::token::Token::generate();
            rt.block_on(pg.execute(
                "INSERT INTO memex_team_tokens (member_id, hash, hint)
                 SELECT id, $1, $2 FROM memex_team_members WHERE name = $3",
                &[&token.hash(), &token.hint(), &name],
            ))
            .unwrap();
            token
        };
        let token = token_for("member00");
        let me = rt.block_on(team.authenticate(&token)).unwrap();
        time_searches(&rt, &team, &me, &o);
        // The member's machine as it stands after its first share (sent again: every row
        // replaces itself), then one more summary.
        let other_token = token_for("member01");
        let other = rt.block_on(team.authenticate(&other_token)).unwrap();
        let work = tempfile::tempdir().unwrap();
        std::fs::copy(store::db_path(o.data), store::db_path(work.path())).unwrap();
        let conn = store::open(work.path()).unwrap();
        let rules = vec![ConfigRule {
            path: "/".into(),
            level: Level::Full,
            name: Some("bench".into()),
        }];
        rt.block_on(share::push(
            &conn, &team, &me, "member00", &rules, &NoVectors,
        ))
        .unwrap();
        delay(&rt, &team, &conn, &me, &other, &rules);
        return;
    }
    let (_, admin_token) = rt.block_on(team.create("admin")).unwrap_or_else(|e| {
        panic!("{e}: the bench makes its own team archive; give it an empty database (or --reuse)")
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
        let pushed = if o.vectors && n == 0 {
            let source = rt.block_on(memex::team::Source::open(o.data, &conn));
            assert!(
                source.model().is_some(),
                "--vectors: {} has no vectors (memex-bench vectors --data D --provider hashing)",
                o.data.display()
            );
            rt.block_on(share::push(&conn, &team, &me, &name, &rules, &source))
                .unwrap()
        } else {
            rt.block_on(share::push(&conn, &team, &me, &name, &rules, &NoVectors))
                .unwrap()
        };
        let secs = t.elapsed().as_secs_f64();
        println!(
            "{name}: first share of {messages} messages: {} rows of {} sessions ({} with vectors) in {secs:.1} s ({:.0} rows/s)",
            pushed.items,
            pushed.sessions,
            pushed.with_vectors,
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

    time_searches(&rt, &team, me, &o);

    delay(&rt, &team, &conn, me, &members[1], &rules);
    if let Some((rows, secs)) = first {
        println!(
            "first share: {rows} rows in {secs:.1} s = {:.0} rows/s",
            rows as f64 / secs
        );
    }
}

/// The same queries on the team archive (as `me`) and on the member's own archive, per kind.
fn time_searches(
    rt: &tokio::runtime::Runtime,
    team: &Team,
    me: &memex_team::archive::Member,
    o: &Options<'_>,
) {
    let local = store::connect(&store::db_path(o.data)).unwrap();
    // The member's own vectors (the hashing embedder's), for the local side of hybrid.
    let mut settings = crate::settings_for(o.data);
    settings.vector.provider = memex::config::VECTOR_HASHING.into();
    let vectors = rt.block_on(memex::vector::for_search(&settings, &local));
    let queries: Vec<&str> = crate::QUERIES
        .iter()
        .chain(crate::QUESTIONS)
        .chain(crate::COMMON_WORDS)
        .copied()
        .collect();
    let hashing = memex::embed::hashing::Hashing::new(None);
    let model = memex::embed::Embedder::id(&hashing).to_owned();
    for (what, level, mode) in [
        ("words, raw", Scope::default(), Mode::Fts),
        ("words, level all", Scope::All, Mode::Fts),
        ("hybrid, level all", Scope::All, Mode::Hybrid),
    ] {
        if mode == Mode::Hybrid && !o.vectors {
            continue;
        }
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
                // The query's vector is made as a member's machine makes it, timed with the search.
                let v = (mode == Mode::Hybrid).then(|| {
                    memex::embed::Embedder::embed_queries(&hashing, &[q.to_string()])
                        .unwrap()
                        .pop()
                        .unwrap()
                });
                rt.block_on(memex::team::search_as(
                    team,
                    me,
                    &p,
                    v.as_deref().map(|v| (model.as_str(), v)),
                ))
                .unwrap();
                team_ms.push(t.elapsed().as_secs_f64() * 1000.0);
                let t = Instant::now();
                let sem = if mode == Mode::Hybrid {
                    Semantic::of(&vectors, rt.handle())
                } else {
                    Semantic::Off("words".into())
                };
                search::search(
                    &local,
                    &sem,
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
            "{what}: team p50 {:.1} ms, local p50 {:.1} ms ({} queries x {} runs)",
            p50(team_ms),
            p50(local_ms),
            queries.len(),
            o.runs
        );
    }
}

/// A new talk summary on the member's machine, to a hit in another member's search: the push
/// the service makes when it sees it (it looks every 2 s), then the search.
fn delay(
    rt: &tokio::runtime::Runtime,
    team: &Team,
    conn: &rusqlite::Connection,
    me: &memex_team::archive::Member,
    other: &memex_team::archive::Member,
    rules: &[ConfigRule],
) {
    let pk: i64 = conn
        .query_row(
            "SELECT session_pk FROM team_sent ORDER BY session_pk DESC LIMIT 1",
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
        .block_on(share::push(conn, team, me, "member00", rules, &NoVectors))
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
        .block_on(memex::team::search_as(team, other, &p, None))
        .unwrap()
        .0;
    assert_eq!(hits.len(), 1, "the new summary is found by another member");
    println!(
        "new talk summary to a team search hit: {:.0} ms (push of {} row + search), plus up to \
         2 s until the service looks",
        t.elapsed().as_secs_f64() * 1000.0,
        pushed.items
    );
}
