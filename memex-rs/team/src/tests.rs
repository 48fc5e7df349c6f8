//! The team archive against a real PostgreSQL with pgvector (started in a temporary folder),
//! with members' archives made by importing the fixtures.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ai_cli_session_collector::AdapterRegistry;
use memex_store::compact::{Provenance, Rows, SessionSummary, Stored, TalkSummary};
use memex_store::ingest::{IngestOptions, discover, import};
use memex_store::layer::Layer;
use memex_sync::pg_server::PgServer;
use rusqlite::Connection;

use crate::archive::{Member, Team};
use crate::search::{TeamQuery, TermText};
use crate::share::{self, ConfigRule, NoVectors, VectorSource};
use crate::token::Token;
use crate::{Level, TeamError};

fn fixtures() -> PathBuf {
    std::env::var_os("MEMEX_FIXTURES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"),
        PathBuf::from,
    )
}

/// A member's machine: an archive made from fixture folders.
struct Machine {
    dir: tempfile::TempDir,
    conn: Connection,
}

impl Machine {
    fn new(roots: &[(&str, &str)]) -> Machine {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().to_path_buf();
        {
            let (writer, _handle) = memex_store::Writer::start(&data).unwrap();
            let registry = Arc::new(AdapterRegistry::new());
            let roots: Vec<(String, PathBuf)> = roots
                .iter()
                .map(|(a, p)| (a.to_string(), fixtures().join(p)))
                .collect();
            let jobs = discover(&registry, &roots);
            assert!(!jobs.is_empty());
            let opts = IngestOptions {
                redact: true,
                fts_max_bytes: 1 << 20,
                batch_bytes: 1 << 20,
                threads: 1,
            };
            import(
                &writer,
                &data,
                registry,
                jobs,
                &opts,
                &AtomicBool::new(false),
                &|_| {},
            )
            .unwrap();
        }
        let conn = memex_store::open(&data).unwrap();
        Machine { dir, conn }
    }

    /// The folder of the session with the most messages, and that session's row.
    fn busiest(&self) -> (String, i64) {
        self.conn
            .query_row(
                "SELECT COALESCE(git_root, project_path), id FROM sessions
                 WHERE project_path LIKE '/%' ORDER BY message_count DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap()
    }

    /// A summary of talk 1 and of the whole session `pk`, as a model would write them.
    fn summarise(&self, pk: i64, word: &str) {
        let provenance = Provenance {
            provider: "openai".into(),
            model: Some("gpt-test".into()),
            prompt_version: "t1".into(),
            tokens_input: 10,
            tokens_output: 5,
            confidence: 0.9,
            fallback_reason: None,
        };
        let talk = Rows::Talk {
            row: Stored {
                value: TalkSummary {
                    prompt_number: 1,
                    user_request: format!("make the {word} retry work"),
                    summary: format!("The {word} handler now retries with backoff."),
                    completed: "yes".into(),
                    files_involved: vec!["src/webhook.rs".into()],
                },
                provenance: provenance.clone(),
                created_at: 1,
            },
            raw_tokens: 100,
            summary_tokens: 10,
            ts: Some(1_700_000_000_000),
        };
        let session = Rows::Session {
            row: Stored {
                value: SessionSummary {
                    summary: format!("Fixed the flaky {word} and its 认证失败 path."),
                    key_points: vec!["retries".into()],
                    files_involved: vec!["src/webhook.rs".into()],
                    technologies: vec!["rust".into()],
                    talks_covered: 1,
                },
                provenance,
                created_at: 1,
            },
            raw_tokens: 100,
            updated_at: 1_700_000_000_000,
        };
        let tx = self.conn.unchecked_transaction().unwrap();
        memex_store::compact::replace(&tx, pk, 1, &talk).unwrap();
        memex_store::compact::replace(&tx, pk, 0, &session).unwrap();
        tx.commit().unwrap();
    }

    /// A word found only in the messages of session `pk` (a tool's output or a message), long
    /// and unusual enough to be told apart in a dump.
    fn message_only_word(&self, pk: i64) -> String {
        let texts: Vec<String> = self
            .conn
            .prepare(
                "SELECT COALESCE(text, memex_unzstd(text_z), '') FROM messages
                 WHERE session_pk = ?1",
            )
            .unwrap()
            .query_map([pk], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let titles: String = self
            .conn
            .prepare("SELECT COALESCE(title, '') FROM sessions")
            .unwrap()
            .query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        texts
            .iter()
            .flat_map(|t| t.split(|c: char| !c.is_ascii_alphanumeric()))
            .find(|w| {
                w.len() >= 8 && w.chars().all(|c| c.is_ascii_lowercase()) && !titles.contains(w)
            })
            .expect("a long word in the session's later messages")
            .to_owned()
    }
}

async fn admin(team: &Team, token: &Token) -> Member {
    team.authenticate(token).await.unwrap()
}

fn words(terms: &[&str]) -> Vec<TermText> {
    terms
        .iter()
        .map(|t| TermText::Phrase(t.to_string()))
        .collect()
}

async fn find(team: &Team, who: &Member, word: &str, layers: &[Layer]) -> usize {
    let terms = words(&[word]);
    let q = TeamQuery {
        terms: &terms,
        min_terms: 1,
        layers,
        limit: 50,
        ..TeamQuery::default()
    };
    team.search(who, &q).await.unwrap().hits.len()
}

/// How many entries the full-text index gives for `word`, read from the index itself (a bitmap
/// scan of the GIN index, before the table is consulted).
async fn index_entries(pg: &PgServer, word: &str) -> i64 {
    let (client, conn) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute("SET enable_seqscan = off; SET enable_indexscan = off")
        .await
        .unwrap();
    assert!(word.chars().all(char::is_alphanumeric));
    let text = client
        .simple_query(&format!(
            "EXPLAIN (ANALYZE, FORMAT JSON) SELECT id FROM memex_team_items
             WHERE tsv @@ to_tsquery('simple', '{word}')"
        ))
        .await
        .unwrap()
        .into_iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        })
        .unwrap();
    let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
    fn index_rows(v: &serde_json::Value) -> Option<i64> {
        if v["Node Type"] == "Bitmap Index Scan" {
            return v["Actual Rows"].as_f64().map(|r| r as i64);
        }
        v["Plans"]
            .as_array()?
            .iter()
            .find_map(index_rows)
            .or_else(|| v["Plan"].as_object().and_then(|_| index_rows(&v["Plan"])))
    }
    index_rows(&plan[0]["Plan"]).expect("a bitmap scan of the full-text index")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_share_what_they_choose_and_read_only_their_projects() {
    let pg = PgServer::start_vector();
    let team = Team::new(&pg.url()).unwrap();
    assert!(matches!(
        team.authenticate(&Token::generate()).await.unwrap_err(),
        TeamError::NoTeam(_)
    ));
    let (info, alice_token) = team.create("alice").await.unwrap();
    assert!(matches!(
        team.create("again").await.unwrap_err(),
        TeamError::Exists(_)
    ));
    assert_eq!(team.checked().await.unwrap(), info);
    let alice = admin(&team, &alice_token).await;
    assert!(alice.admin);
    let bob_token = team.add_token(&alice, "bob", false, &[]).await.unwrap();
    let bob = team.authenticate(&bob_token).await.unwrap();
    assert!(!bob.admin);
    // Only an admin hands out tokens.
    assert!(matches!(
        team.add_token(&bob, "mallory", true, &[])
            .await
            .unwrap_err(),
        TeamError::NotAdmin(_)
    ));

    let laptop = Machine::new(&[("claude", "claude/projects")]);
    let (folder, pk) = laptop.busiest();
    laptop.summarise(pk, "paymentwebhook");
    let secret = laptop.message_only_word(pk);
    let config: Vec<ConfigRule> = vec![];

    // Nothing is shared until asked.
    let p = share::push(&laptop.conn, &team, &alice, "laptop", &config, &NoVectors)
        .await
        .unwrap();
    assert_eq!(p, share::Pushed::default());
    assert!(!pg.dump().contains("paymentwebhook"));

    // Summaries: the summaries and titles go, no message text.
    share::set_project(&laptop.conn, &folder, Level::Summaries, Some("payments")).unwrap();
    let waiting = share::waiting(&laptop.conn, &config).unwrap();
    assert!(waiting.sessions >= 1 && waiting.rows >= 2, "{waiting:?}");
    let p = share::push(&laptop.conn, &team, &alice, "laptop", &config, &NoVectors)
        .await
        .unwrap();
    assert!(p.sessions >= 1 && p.items >= 2, "{p:?}");
    assert_eq!(
        share::waiting(&laptop.conn, &config).unwrap().rows,
        0,
        "nothing waits after a push"
    );
    let dump = pg.dump();
    assert!(dump.contains("paymentwebhook"));
    assert!(!dump.contains(&secret), "`{secret}` is only in messages");
    assert_eq!(find(&team, &alice, "paymentwebhook", &Layer::ALL).await, 2);
    // CJK, as the local archive reads it: a word inside a longer run.
    assert_eq!(find(&team, &alice, "认证", &[Layer::Sessions]).await, 1);
    // Bob does not belong to the project: nothing, at any level, by any word.
    assert_eq!(find(&team, &bob, "paymentwebhook", &Layer::ALL).await, 0);
    team.allow(&alice, "bob", "payments", true).await.unwrap();
    assert_eq!(find(&team, &bob, "paymentwebhook", &Layer::ALL).await, 2);
    // A push with nothing new sends nothing.
    let again = share::push(&laptop.conn, &team, &alice, "laptop", &config, &NoVectors)
        .await
        .unwrap();
    assert_eq!((again.items, again.sessions), (0, 0), "{again:?}");
    // A talk summarised later goes at the next push, alone.
    let later = Rows::Talk {
        row: Stored {
            value: TalkSummary {
                prompt_number: 2,
                user_request: "and the refunds".into(),
                summary: "Refunds now use the narwhalqueue.".into(),
                completed: "yes".into(),
                files_involved: vec![],
            },
            provenance: Provenance {
                provider: "heuristic".into(),
                model: None,
                prompt_version: "t1".into(),
                tokens_input: 0,
                tokens_output: 0,
                confidence: 1.0,
                fallback_reason: None,
            },
            created_at: 2,
        },
        raw_tokens: 10,
        summary_tokens: 5,
        ts: Some(0),
    };
    let tx = laptop.conn.unchecked_transaction().unwrap();
    memex_store::compact::replace(&tx, pk, 2, &later).unwrap();
    tx.commit().unwrap();
    let p = share::push(&laptop.conn, &team, &alice, "laptop", &config, &NoVectors)
        .await
        .unwrap();
    assert_eq!(p.items, 1, "{p:?}");
    assert_eq!(find(&team, &bob, "narwhalqueue", &[Layer::Talks]).await, 1);

    // Full: the messages too.
    share::set_project(&laptop.conn, &folder, Level::Full, None).unwrap();
    let p = share::push(&laptop.conn, &team, &alice, "laptop", &config, &NoVectors)
        .await
        .unwrap();
    assert!(p.items > 10, "{p:?}");
    assert!(find(&team, &bob, &secret, &[Layer::Raw]).await >= 1);
    assert!(index_entries(&pg, &secret).await >= 1);

    // Lowered again: the messages leave the table and, after the vacuum, its index.
    share::set_project(&laptop.conn, &folder, Level::Summaries, None).unwrap();
    let p = share::push(&laptop.conn, &team, &alice, "laptop", &config, &NoVectors)
        .await
        .unwrap();
    assert!(p.removed_items > 10, "{p:?}");
    team.vacuum().await.unwrap();
    assert_eq!(find(&team, &bob, &secret, &Layer::ALL).await, 0);
    assert!(!pg.dump().contains(&secret));
    assert_eq!(index_entries(&pg, &secret).await, 0);
    assert_eq!(find(&team, &bob, "paymentwebhook", &Layer::ALL).await, 2);

    // One session hidden by its own rule, inside a shared project.
    share::set_session(&laptop.conn, pk, Level::Hidden).unwrap();
    let p = share::push(&laptop.conn, &team, &alice, "laptop", &config, &NoVectors)
        .await
        .unwrap();
    assert_eq!(p.removed_sessions, 1, "{p:?}");
    assert_eq!(find(&team, &bob, "paymentwebhook", &Layer::ALL).await, 0);
    share::set_session(&laptop.conn, pk, Level::Full).unwrap();
    share::push(&laptop.conn, &team, &alice, "laptop", &config, &NoVectors)
        .await
        .unwrap();
    assert!(find(&team, &bob, &secret, &[Layer::Raw]).await >= 1);

    // Forgotten here, gone there.
    let session_id: String = laptop
        .conn
        .query_row("SELECT session_id FROM sessions WHERE id = ?1", [pk], |r| {
            r.get(0)
        })
        .unwrap();
    let mut conn = memex_store::open(laptop.dir.path()).unwrap();
    memex_store::forget::forget(
        &mut conn,
        &memex_store::forget::Selector::Session(session_id),
        false,
    )
    .unwrap();
    let p = share::push(&laptop.conn, &team, &alice, "laptop", &config, &NoVectors)
        .await
        .unwrap();
    assert!(p.removed_sessions >= 1, "{p:?}");
    team.vacuum().await.unwrap();
    assert_eq!(find(&team, &bob, &secret, &Layer::ALL).await, 0);
    assert_eq!(find(&team, &bob, "paymentwebhook", &Layer::ALL).await, 0);
    assert_eq!(index_entries(&pg, "paymentwebhook").await, 0);

    // A revoked token is refused at once.
    assert_eq!(team.revoke(&alice, "bob").await.unwrap(), 1);
    assert!(matches!(
        team.authenticate(&bob_token).await.unwrap_err(),
        TeamError::BadToken
    ));
    let listed = team.tokens(&alice).await.unwrap();
    let bob_row = listed.iter().find(|m| m.name == "bob").unwrap();
    assert!(bob_row.tokens[0].revoked_at.is_some());
    assert_eq!(bob_row.projects, ["payments"]);
    assert!(
        !serde_json::to_string(&listed)
            .unwrap()
            .contains(bob_token.expose())
    );
}

/// Vectors: fixed unit vectors per row, as a member's LanceDB would give them.
struct Fixed {
    model: &'static str,
    dims: usize,
}

fn unit(seed: i64, dims: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..dims)
        .map(|i| (((seed as usize * 31 + i * 17) % 97) as f32) - 48.0)
        .collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
    v.iter_mut().for_each(|x| *x /= n);
    v
}

/// `dims` 0: the model is known, but no row has its vectors yet.
impl VectorSource for Fixed {
    fn model(&self) -> Option<(String, usize)> {
        Some((self.model.to_owned(), self.dims.max(8)))
    }
    async fn vectors(&self, layer: Layer, refs: &[i64]) -> HashMap<i64, Vec<Vec<f32>>> {
        if self.dims == 0 {
            return HashMap::new();
        }
        refs.iter()
            .map(|r| (*r, vec![unit(*r * 4 + layer.index() as i64, self.dims)]))
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vectors_are_searched_and_one_model_per_archive_and_a_purge_leaves_nothing() {
    let pg = PgServer::start_vector();
    let team = Team::new(&pg.url()).unwrap();
    let (_, admin_token) = team.create("admin").await.unwrap();
    let admin = team.authenticate(&admin_token).await.unwrap();
    let carol_token = team
        .add_token(&admin, "carol", false, &["codex-work".to_owned()])
        .await
        .unwrap();
    let carol = team.authenticate(&carol_token).await.unwrap();
    let dave_token = team.add_token(&admin, "dave", false, &[]).await.unwrap();
    let dave = team.authenticate(&dave_token).await.unwrap();

    let desk = Machine::new(&[("codex", "codex/handwritten/sessions")]);
    let config = vec![ConfigRule {
        path: "/".into(),
        level: Level::Full,
        name: Some("codex-work".into()),
    }];
    let source = Fixed {
        model: "minilm-test",
        dims: 8,
    };
    // Sent before this machine embedded them: the rows go, their vectors follow.
    let not_yet = Fixed {
        model: "minilm-test",
        dims: 0,
    };
    let p = share::push(&desk.conn, &team, &carol, "desk", &config, &not_yet)
        .await
        .unwrap();
    assert!(p.items > 5 && p.with_vectors == 0, "{p:?}");
    let due: i64 = desk
        .conn
        .query_row("SELECT count(*) FROM team_vectors_due", [], |r| r.get(0))
        .unwrap();
    assert_eq!(due as u64, p.items);
    let later = share::push(&desk.conn, &team, &carol, "desk", &config, &source)
        .await
        .unwrap();
    assert_eq!((later.items, later.with_vectors), (0, p.items), "{later:?}");
    let due: i64 = desk
        .conn
        .query_row("SELECT count(*) FROM team_vectors_due", [], |r| r.get(0))
        .unwrap();
    assert_eq!(due, 0);
    assert_eq!(
        team.checked().await.unwrap().vector_model.as_deref(),
        Some("minilm-test")
    );

    // A row's own vector finds it first, by meaning alone.
    let (id, ref_id): (i64, i64) = {
        let (client, conn) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let row = client
            .query_one(
                "SELECT i.id, i.item, s.session_id FROM memex_team_items i
                 JOIN memex_team_sessions s ON s.id = i.session
                 WHERE i.layer = 0 ORDER BY i.id LIMIT 1",
                &[],
            )
            .await
            .unwrap();
        let (id, item, session): (i64, String, String) = (row.get(0), row.get(1), row.get(2));
        let ref_id: i64 = desk
            .conn
            .query_row(
                "SELECT m.id FROM messages m JOIN sessions s ON s.id = m.session_pk
                 WHERE m.message_id = ?1 AND s.session_id = ?2",
                [&item, &session],
                |r| r.get(0),
            )
            .unwrap();
        (id, ref_id)
    };
    let q = unit(ref_id * 4, 8);
    let query = TeamQuery {
        vector: Some(("minilm-test", &q)),
        layers: &[Layer::Raw],
        limit: 5,
        ..TeamQuery::default()
    };
    let answer = team.search(&carol, &query).await.unwrap();
    assert_eq!(answer.hits[0].item, id);
    assert_eq!(answer.hits[0].matched, "vector");
    assert_eq!(answer.hits[0].member, "carol");
    // Dave may not read the project: not by meaning either.
    assert!(team.search(&dave, &query).await.unwrap().hits.is_empty());
    // A query of another model is searched by words only, and says so.
    let other = TeamQuery {
        vector: Some(("another-model", &q)),
        ..query.clone()
    };
    let a = team.search(&carol, &other).await.unwrap();
    assert!(a.hits.is_empty() && a.notice.unwrap().contains("minilm-test"));

    // A member whose vectors come from another model is refused, with both named.
    let laptop = Machine::new(&[("claude", "claude/projects")]);
    let wide = Fixed {
        model: "e5-test",
        dims: 16,
    };
    let err = share::push(&laptop.conn, &team, &dave, "laptop", &config, &wide)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, TeamError::MixedVectors { model, got, .. } if model == "minilm-test" && got == "e5-test"),
        "{err}"
    );

    // Purged: no session, no row, no vector, no token of carol's; the indexes hold none.
    let removed = team.purge(&admin, "carol").await.unwrap();
    assert!(removed.items > 5, "{removed:?}");
    assert!(matches!(
        team.authenticate(&carol_token).await.unwrap_err(),
        TeamError::BadToken
    ));
    let (client, conn) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    for table in [
        "memex_team_sessions",
        "memex_team_items",
        "memex_team_vectors",
    ] {
        let n: i64 = client
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 0, "{table}");
        let dead: i64 = client
            .query_one(
                "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = $1",
                &[&table],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(dead, 0, "{table} after the vacuum");
    }
    assert!(!pg.dump().contains("carol"));
}
