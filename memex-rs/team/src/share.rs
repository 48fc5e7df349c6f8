//! This machine's side of team memory: the level each session is shared at, and the push that
//! makes the team archive hold exactly what those levels allow.
//!
//! A session's level is its own rule (`memex share --session`), else the rule of the nearest
//! project folder that holds it (`memex share PATH`, then `[share]` in the config), else
//! `hidden`. A machine shares the sessions it archived itself, not those sync brought from the
//! user's other machines (each shares its own).
//!
//! The push, for every session whose level is not `hidden` or that the team holds:
//! - `hidden` now: the team's copy is removed;
//! - a lower level than sent, or another project name: what the new level does not allow is
//!   removed, then the rest is sent again where needed;
//! - then each allowed layer's rows past the session's mark go up (messages, observations per
//!   talk, talk and session summaries), with their vectors when this machine has them, and the
//!   mark moves once the team archive holds them. A push cut anywhere sends again what it had
//!   not noted, which replaces itself.
//!
//! Forgetting here removes there: a forgotten session's team copy goes at the next push, a
//! forgotten message with it.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;

use memex_store::layer::Layer;
use rusqlite::{Connection, OptionalExtension, params};

use crate::archive::{Member, Team};
use crate::store::{SharedItem, SharedSession};
use crate::{Level, TeamError, check_project};

/// A level set in the config (`[share] projects`), for the sessions of a folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigRule {
    pub path: String,
    pub level: Level,
    /// The project's name in the team (default: the folder's name).
    pub name: Option<String>,
}

/// Where the vectors of this archive's rows come from (its LanceDB folder), for the push.
pub trait VectorSource {
    /// The model that made them and their dimensions (`None`: no vectors are sent).
    fn model(&self) -> Option<(String, usize)>;
    /// The vectors of rows `refs` of `layer` (one per chunk, in chunk order); rows without
    /// vectors yet are left out.
    fn vectors(
        &self,
        layer: Layer,
        refs: &[i64],
    ) -> impl Future<Output = HashMap<i64, Vec<Vec<f32>>>>;
}

/// No vectors: the team archive is searched by words only for this member's rows.
pub struct NoVectors;

impl VectorSource for NoVectors {
    fn model(&self) -> Option<(String, usize)> {
        None
    }
    async fn vectors(&self, _: Layer, _: &[i64]) -> HashMap<i64, Vec<Vec<f32>>> {
        HashMap::new()
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The last part of a folder path: a project's default name in the team.
pub fn folder_name(path: &str) -> String {
    Path::new(path.trim_end_matches('/'))
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| path.to_owned())
}

/// Records that this machine shares with team `team` as `member`.
pub fn record_join(conn: &Connection, team: &str, member: &str) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO team_self (id, team, member, joined_at) VALUES (1, ?1, ?2, ?3)
         ON CONFLICT (id) DO UPDATE SET team = ?1, member = ?2, joined_at = ?3",
        params![team, member, now_ms()],
    )?;
    Ok(())
}

/// The team and member this machine joined as, if it did.
pub fn joined(conn: &Connection) -> rusqlite::Result<Option<(String, String)>> {
    conn.query_row("SELECT team, member FROM team_self WHERE id = 1", [], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .optional()
}

/// Sets the level of the project at folder `path` (and of the folders below it), with its name
/// in the team.
pub fn set_project(
    conn: &Connection,
    path: &str,
    level: Level,
    name: Option<&str>,
) -> Result<(), TeamError> {
    if !path.starts_with('/') {
        return Err(TeamError::Invalid(format!(
            "a project is named by its folder's absolute path, got `{path}`"
        )));
    }
    let path = path.trim_end_matches('/');
    let path = if path.is_empty() { "/" } else { path };
    if let Some(n) = name {
        check_project(n)?;
    }
    conn.execute(
        "INSERT INTO team_rules (project, level, name, set_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (project) DO UPDATE SET level = ?2, name = COALESCE(?3, name), set_at = ?4",
        params![path, level.name(), name, now_ms()],
    )?;
    Ok(())
}

/// Sets the level of one session (by its row), which overrides its project's.
pub fn set_session(conn: &Connection, pk: i64, level: Level) -> Result<(), TeamError> {
    conn.execute(
        "INSERT INTO team_rules (session_pk, level, set_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (session_pk) DO UPDATE SET level = ?2, set_at = ?3",
        params![pk, level.name(), now_ms()],
    )?;
    Ok(())
}

/// A level rule, as `memex share status` lists them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RuleRow {
    /// A folder, or `None` for a session's rule.
    pub project: Option<String>,
    /// `agent:session_id` of a session's rule.
    pub session: Option<String>,
    pub level: &'static str,
    /// The project's name in the team.
    pub name: Option<String>,
    /// `config` or `command`.
    pub from: &'static str,
}

/// Every rule in effect: those set by command, then the config's for other folders.
pub fn rules(conn: &Connection, config: &[ConfigRule]) -> Result<Vec<RuleRow>, TeamError> {
    let mut out: Vec<RuleRow> = conn
        .prepare(
            "SELECT r.project, s.agent || ':' || s.session_id, r.level, r.name
             FROM team_rules r LEFT JOIN sessions s ON s.id = r.session_pk
             ORDER BY r.project IS NULL, r.project, r.id",
        )?
        .query_map([], |r| {
            let level: String = r.get(2)?;
            Ok(RuleRow {
                project: r.get(0)?,
                session: r.get(1)?,
                level: level.parse::<Level>().unwrap_or_default().name(),
                name: r.get(3)?,
                from: "command",
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    for c in config {
        let path = c.path.trim_end_matches('/');
        if !out.iter().any(|r| r.project.as_deref() == Some(path)) {
            out.push(RuleRow {
                project: Some(path.to_owned()),
                session: None,
                level: c.level.name(),
                name: c.name.clone(),
                from: "config",
            });
        }
    }
    Ok(out)
}

/// A session of this archive and the level it is shared at.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub pk: i64,
    pub agent: String,
    pub session_id: String,
    pub level: Level,
    /// Its project's name in the team.
    pub project: String,
    pub title: Option<String>,
    pub started_at: Option<i64>,
    pub updated_at: Option<i64>,
}

/// The level of every session this machine archived, by the rules.
pub fn plan(conn: &Connection, config: &[ConfigRule]) -> Result<Vec<Planned>, TeamError> {
    struct ProjectRule {
        path: String,
        level: Level,
        name: String,
    }
    let mut projects: Vec<ProjectRule> = Vec::new();
    let mut sessions: HashMap<i64, Level> = HashMap::new();
    let mut stmt =
        conn.prepare("SELECT project, session_pk, level, name FROM team_rules ORDER BY id")?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, Option<String>>(0)?,
            r.get::<_, Option<i64>>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, Option<String>>(3)?,
        ))
    })?;
    for row in rows {
        let (project, session, level, name) = row?;
        let level = level.parse::<Level>().unwrap_or_default();
        match (project, session) {
            (Some(path), _) => projects.push(ProjectRule {
                name: name.unwrap_or_else(|| folder_name(&path)),
                path,
                level,
            }),
            (None, Some(pk)) => {
                sessions.insert(pk, level);
            }
            (None, None) => {}
        }
    }
    for c in config {
        let path = c.path.trim_end_matches('/').to_owned();
        if !projects.iter().any(|p| p.path == path) {
            projects.push(ProjectRule {
                name: c.name.clone().unwrap_or_else(|| folder_name(&path)),
                path,
                level: c.level,
            });
        }
    }
    // The nearest folder rule holding a session's folder (or its git work tree).
    let nearest = |dir: Option<&str>, root: Option<&str>| -> Option<&ProjectRule> {
        projects
            .iter()
            .filter(|p| {
                [dir, root].into_iter().flatten().any(|d| {
                    d == p.path
                        || p.path == "/"
                        || (d.starts_with(&p.path) && d.as_bytes().get(p.path.len()) == Some(&b'/'))
                })
            })
            .max_by_key(|p| p.path.len())
    };
    let mut out = Vec::new();
    let mut stmt = conn.prepare(
        "SELECT id, agent, session_id, project_path, git_root, title, started_at, updated_at
         FROM sessions WHERE host IS NULL ORDER BY id",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, Option<String>>(3)?,
            r.get::<_, Option<String>>(4)?,
            r.get::<_, Option<String>>(5)?,
            r.get::<_, Option<i64>>(6)?,
            r.get::<_, Option<i64>>(7)?,
        ))
    })?;
    for row in rows {
        let (pk, agent, session_id, dir, root, title, started_at, updated_at) = row?;
        let rule = nearest(dir.as_deref(), root.as_deref());
        let level = sessions
            .get(&pk)
            .copied()
            .or(rule.map(|r| r.level))
            .unwrap_or_default();
        let project = match rule {
            Some(r) => r.name.clone(),
            None => root
                .as_deref()
                .or(dir.as_deref())
                .map(folder_name)
                .unwrap_or_else(|| "(no project)".to_owned()),
        };
        out.push(Planned {
            pk,
            agent,
            session_id,
            level,
            project,
            title,
            started_at,
            updated_at,
        });
    }
    Ok(out)
}

/// What the team archive holds of a session, as this machine noted it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sent {
    agent: String,
    session_id: String,
    project: String,
    level: Level,
    /// The last row of each layer it has ([`Layer::index`]).
    through: [i64; 4],
}

fn sent_of(conn: &Connection) -> rusqlite::Result<HashMap<i64, Sent>> {
    conn.prepare(
        "SELECT session_pk, agent, session_id, project, level,
                raw_through, l1_through, l2_through, l3_through FROM team_sent",
    )?
    .query_map([], |r| {
        let level: String = r.get(4)?;
        Ok((
            r.get::<_, i64>(0)?,
            Sent {
                agent: r.get(1)?,
                session_id: r.get(2)?,
                project: r.get(3)?,
                level: level.parse().unwrap_or_default(),
                through: [r.get(5)?, r.get(6)?, r.get(7)?, r.get(8)?],
            },
        ))
    })?
    .collect()
}

fn note_sent(conn: &Connection, pk: i64, s: &Sent) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO team_sent (session_pk, agent, session_id, project, level, raw_through,
                                l1_through, l2_through, l3_through, sent_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
         ON CONFLICT (session_pk) DO UPDATE SET agent = ?2, session_id = ?3, project = ?4,
             level = ?5, raw_through = ?6, l1_through = ?7, l2_through = ?8, l3_through = ?9,
             sent_at = ?10",
        params![
            pk,
            s.agent,
            s.session_id,
            s.project,
            s.level.name(),
            s.through[0],
            s.through[1],
            s.through[2],
            s.through[3],
            now_ms()
        ],
    )?;
    Ok(())
}

/// What a push did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Pushed {
    /// Sessions the team archive received rows of.
    pub sessions: u64,
    /// Rows sent (messages and compact rows).
    pub items: u64,
    /// Of them, rows that went with their vectors.
    pub with_vectors: u64,
    /// Sessions removed from the team archive (hidden now, forgotten, or moved).
    pub removed_sessions: u64,
    /// Rows removed (a level lowered, messages forgotten or rewound).
    pub removed_items: u64,
}

/// How many rows a push reads and sends at once.
const BATCH: usize = 500;

/// The next rows of one layer of a session past its mark.
struct Next {
    /// (row id, item) of the rows to send.
    items: Vec<(i64, SharedItem)>,
    /// Messages the team may no longer hold (rewound, copies, emptied): their ids.
    gone: Vec<String>,
    /// The last row read: the new mark.
    last: i64,
}

/// Rows of one layer of session `pk` past `after`, at most [`BATCH`].
fn layer_rows(conn: &Connection, layer: Layer, pk: i64, after: i64) -> rusqlite::Result<Next> {
    let mut items = Vec::new();
    let mut gone = Vec::new();
    let mut last = after;
    match layer.columns() {
        None => {
            let mut stmt = conn.prepare_cached(
                "SELECT id, message_id, prompt_number, role, kind, ts,
                        COALESCE(text, memex_unzstd(text_z), ''), tool_input,
                        active = 1 AND inherited = 0 AND duplicate = 0
                 FROM messages WHERE session_pk = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
            )?;
            let rows = stmt.query_map(params![pk, after, BATCH as i64], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, Option<i64>>(5)?,
                    r.get::<_, String>(6)?,
                    r.get::<_, Option<String>>(7)?,
                    r.get::<_, bool>(8)?,
                ))
            })?;
            for row in rows {
                let (id, message_id, prompt, role, kind, ts, text, input, kept) = row?;
                last = id;
                if !kept {
                    gone.push(message_id);
                    continue;
                }
                let body = match input.filter(|i| !i.is_empty()) {
                    Some(i) if text.is_empty() => i,
                    Some(i) => format!("{text}\n{i}"),
                    None => text,
                };
                if body.trim().is_empty() {
                    gone.push(message_id);
                    continue;
                }
                items.push((
                    id,
                    SharedItem {
                        layer,
                        item: message_id,
                        prompt_number: prompt,
                        role,
                        kind,
                        ts,
                        body,
                        vectors: Vec::new(),
                    },
                ));
            }
        }
        Some(cols) => {
            // An observation is keyed by its tool call; a talk by its number; a session
            // summary is the session's one.
            let key = match layer {
                Layer::Observations => "x.first_message_id",
                Layer::Talks => "CAST(x.prompt_number AS TEXT)",
                _ => "'session'",
            };
            let sql = format!(
                "SELECT x.id, {key}, {prompt}, {kind}, {ts}, {body}
                 FROM {table} x WHERE x.session_pk = ?1 AND x.id > ?2 ORDER BY x.id LIMIT ?3",
                prompt = cols.prompt,
                kind = cols.vector_kind,
                ts = cols.ts,
                body = cols.fts_body,
                table = layer.table(),
            );
            let mut stmt = conn.prepare_cached(&sql)?;
            let rows = stmt.query_map(params![pk, after, BATCH as i64], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                    r.get::<_, String>(5)?,
                ))
            })?;
            for row in rows {
                let (id, item, prompt, kind, ts, body) = row?;
                last = id;
                items.push((
                    id,
                    SharedItem {
                        layer,
                        item,
                        prompt_number: prompt,
                        role: layer.item().to_owned(),
                        kind,
                        ts,
                        body,
                        vectors: Vec::new(),
                    },
                ));
            }
        }
    }
    Ok(Next { items, gone, last })
}

/// Makes the team archive hold what the levels allow of this archive's sessions: sends what is
/// new, removes what may no longer be there. `host`: this machine's name in the team.
pub async fn push(
    conn: &Connection,
    team: &Team,
    me: &Member,
    host: &str,
    config: &[ConfigRule],
    vectors: &impl VectorSource,
) -> Result<Pushed, TeamError> {
    let mut done = Pushed::default();
    let model = vectors.model();
    // Vectors of another model are refused before anything is sent.
    if let Some((m, dims)) = &model {
        team.vector_space(m, *dims).await?;
    }
    let planned = plan(conn, config)?;
    let mut sent = sent_of(conn)?;
    // Forgotten here: their copies go.
    let alive: HashMap<i64, &Planned> = planned.iter().map(|p| (p.pk, p)).collect();
    let gone: Vec<i64> = sent
        .iter()
        .filter(|(pk, s)| {
            alive
                .get(pk)
                .is_none_or(|p| p.agent != s.agent || p.session_id != s.session_id)
        })
        .map(|(pk, _)| *pk)
        .collect();
    for pk in gone {
        let s = sent.remove(&pk).expect("listed");
        if team.drop_session(me, &s.agent, &s.session_id).await? {
            done.removed_sessions += 1;
        }
        conn.execute("DELETE FROM team_sent WHERE session_pk = ?1", [pk])?;
        conn.execute("DELETE FROM team_vectors_due WHERE session_pk = ?1", [pk])?;
    }
    // Messages forgotten from sessions the team holds.
    let forgets: Vec<(i64, String, String, String)> = conn
        .prepare("SELECT id, agent, session_id, message_id FROM team_forgets ORDER BY id")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for chunk in forgets.chunk_by(|a, b| a.1 == b.1 && a.2 == b.2) {
        let ids: Vec<String> = chunk.iter().map(|f| f.3.clone()).collect();
        done.removed_items += team
            .drop_messages(me, &chunk[0].1, &chunk[0].2, &ids)
            .await?;
        let last = chunk.last().expect("a chunk is not empty").0;
        conn.execute(
            "DELETE FROM team_forgets WHERE id <= ?1 AND agent = ?2 AND session_id = ?3",
            params![last, chunk[0].1, chunk[0].2],
        )?;
    }
    if let Some((m, _)) = &model {
        done.with_vectors += send_due_vectors(conn, team, me, m, vectors).await?;
    }
    for p in &planned {
        let before = sent.get(&p.pk).cloned();
        if p.level == Level::Hidden {
            if let Some(s) = before {
                if team.drop_session(me, &s.agent, &s.session_id).await? {
                    done.removed_sessions += 1;
                }
                conn.execute("DELETE FROM team_sent WHERE session_pk = ?1", [p.pk])?;
                conn.execute("DELETE FROM team_vectors_due WHERE session_pk = ?1", [p.pk])?;
            }
            continue;
        }
        let mut state = match before {
            // Moved to another project name: sent again whole under it.
            Some(s) if s.project != p.project => {
                if team.drop_session(me, &s.agent, &s.session_id).await? {
                    done.removed_sessions += 1;
                }
                None
            }
            other => other,
        }
        .unwrap_or(Sent {
            agent: p.agent.clone(),
            session_id: p.session_id.clone(),
            project: p.project.clone(),
            level: p.level,
            through: [0; 4],
        });
        let pending = has_pending(conn, p.pk, p.level, &state.through)?;
        if !pending && state.level == p.level && sent.contains_key(&p.pk) {
            continue;
        }
        let session = team
            .put_session(
                me,
                &SharedSession {
                    host: host.to_owned(),
                    agent: p.agent.clone(),
                    session_id: p.session_id.clone(),
                    project: p.project.clone(),
                    title: p.title.clone(),
                    level: p.level,
                    started_at: p.started_at,
                    updated_at: p.updated_at,
                },
            )
            .await?;
        // Lowered: what the level no longer allows goes.
        if sent.contains_key(&p.pk) && state.level > p.level {
            let dropped: Vec<Layer> = Layer::ALL
                .into_iter()
                .filter(|l| !p.level.layers().contains(l))
                .collect();
            done.removed_items += team.drop_layers(me, session, &dropped).await?;
            for l in &dropped {
                state.through[l.index()] = 0;
            }
        }
        state.level = p.level;
        let mut sent_any = false;
        for &layer in p.level.layers() {
            loop {
                let Next {
                    items: mut rows,
                    gone,
                    last,
                } = layer_rows(conn, layer, p.pk, state.through[layer.index()])?;
                if last == state.through[layer.index()] {
                    break;
                }
                if !gone.is_empty() {
                    done.removed_items += team
                        .drop_messages(me, &p.agent, &p.session_id, &gone)
                        .await?;
                }
                // A talk whose observations were written again is sent whole.
                let mut replaced = Vec::new();
                if layer == Layer::Observations {
                    let prompts: std::collections::BTreeSet<i64> =
                        rows.iter().map(|(_, i)| i.prompt_number).collect();
                    rows.clear();
                    let mut stmt = conn.prepare_cached(&format!(
                        "SELECT x.id, x.first_message_id, x.prompt_number, x.type, x.ts, {}
                         FROM observations x WHERE x.session_pk = ?1 AND x.prompt_number = ?2
                         ORDER BY x.id",
                        layer.columns().expect("a compact layer").fts_body
                    ))?;
                    for prompt in prompts {
                        replaced.push((layer, prompt));
                        let found = stmt.query_map(params![p.pk, prompt], |r| {
                            Ok((
                                r.get::<_, i64>(0)?,
                                SharedItem {
                                    layer,
                                    item: r.get(1)?,
                                    prompt_number: r.get(2)?,
                                    role: layer.item().to_owned(),
                                    kind: r.get(3)?,
                                    ts: r.get(4)?,
                                    body: r.get(5)?,
                                    vectors: Vec::new(),
                                },
                            ))
                        })?;
                        for f in found {
                            rows.push(f?);
                        }
                    }
                }
                if model.is_some() && !rows.is_empty() {
                    let refs: Vec<i64> = rows.iter().map(|(id, _)| *id).collect();
                    let mut found = vectors.vectors(layer, &refs).await;
                    for (id, item) in &mut rows {
                        if let Some(v) = found.remove(id) {
                            item.vectors = v;
                            done.with_vectors += 1;
                        } else if !indexed(conn, layer, *id)? {
                            // Not embedded yet: its vectors follow with a later push.
                            conn.execute(
                                "INSERT OR REPLACE INTO team_vectors_due (layer, ref, session_pk, item)
                                 VALUES (?1, ?2, ?3, ?4)",
                                params![layer.index() as i64, *id, p.pk, item.item],
                            )?;
                        }
                    }
                }
                let items: Vec<SharedItem> = rows.into_iter().map(|(_, i)| i).collect();
                if !items.is_empty() || !replaced.is_empty() {
                    team.put_items(
                        me,
                        session,
                        &replaced,
                        &items,
                        model.as_ref().map(|(m, _)| m.as_str()),
                    )
                    .await?;
                    done.items += items.len() as u64;
                    sent_any = true;
                }
                state.through[layer.index()] = last;
                note_sent(conn, p.pk, &state)?;
            }
        }
        note_sent(conn, p.pk, &state)?;
        if sent_any {
            done.sessions += 1;
        }
    }
    Ok(done)
}

/// Whether the indexer has passed row `id` of `layer` (made its vectors, or left it out): a
/// row it has not reached yet gets its vectors later.
fn indexed(conn: &Connection, layer: Layer, id: i64) -> rusqlite::Result<bool> {
    let queued: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM vector_outbox WHERE tbl = ?1 AND ref = ?2)")?
        .query_row(params![layer.outbox_code(), id], |r| r.get(0))?;
    if queued {
        return Ok(false);
    }
    if layer == Layer::Raw {
        let mark: i64 = conn
            .prepare_cached("SELECT COALESCE((SELECT messages_through FROM vector_progress), 0)")?
            .query_row([], |r| r.get(0))?;
        return Ok(id <= mark);
    }
    Ok(true)
}

/// At most this many rows waiting for their vectors are looked at per push.
const DUE_PER_PUSH: i64 = 2000;

/// Sends the vectors made since of rows sent without them; forgets the rows the indexer passed
/// without making any. How many rows got their vectors.
async fn send_due_vectors(
    conn: &Connection,
    team: &Team,
    me: &Member,
    model: &str,
    vectors: &impl VectorSource,
) -> Result<u64, TeamError> {
    let due: Vec<(i64, i64, i64, String, String, String)> = conn
        .prepare(
            "SELECT d.layer, d.ref, d.session_pk, d.item, t.agent, t.session_id
             FROM team_vectors_due d JOIN team_sent t ON t.session_pk = d.session_pk
             ORDER BY d.layer, d.ref LIMIT ?1",
        )?
        .query_map([DUE_PER_PUSH], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut sent = 0;
    let mut sessions: HashMap<i64, Option<i64>> = HashMap::new();
    let mut settled = Vec::new();
    for chunk in due.chunk_by(|a, b| a.0 == b.0) {
        let layer = Layer::ALL[(chunk[0].0 as usize) & 3];
        let refs: Vec<i64> = chunk.iter().map(|d| d.1).collect();
        let mut found = vectors.vectors(layer, &refs).await;
        let mut rows = Vec::new();
        for (_, id, pk, item, agent, session_id) in chunk {
            match found.remove(id) {
                Some(v) => {
                    let team_session = match sessions.get(pk) {
                        Some(s) => *s,
                        None => {
                            let s = team.session_ref(me, agent, session_id).await?;
                            sessions.insert(*pk, s);
                            s
                        }
                    };
                    if let Some(s) = team_session {
                        rows.push((s, layer, item.clone(), v));
                    }
                }
                None if indexed(conn, layer, *id)? => {}
                None => continue,
            }
            settled.push(*id);
        }
        if !rows.is_empty() {
            sent += team.put_vectors(me, model, &rows).await?;
        }
        // Noted once the team archive has them.
        for id in settled.drain(..) {
            conn.execute(
                "DELETE FROM team_vectors_due WHERE layer = ?1 AND ref = ?2",
                params![layer.index() as i64, id],
            )?;
        }
    }
    Ok(sent)
}

/// Whether session `pk` has rows past `through` in a layer `level` shares.
fn has_pending(
    conn: &Connection,
    pk: i64,
    level: Level,
    through: &[i64; 4],
) -> rusqlite::Result<bool> {
    for &l in level.layers() {
        let more: bool = conn
            .prepare_cached(&format!(
                "SELECT EXISTS (SELECT 1 FROM {} WHERE session_pk = ?1 AND id > ?2)",
                l.table()
            ))?
            .query_row(params![pk, through[l.index()]], |r| r.get(0))?;
        if more {
            return Ok(true);
        }
    }
    Ok(false)
}

/// What waits to go, per level: sessions and rows past their marks.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Waiting {
    pub sessions: u64,
    pub rows: u64,
    /// Sessions the team holds that must be removed or lowered.
    pub to_remove: u64,
}

/// What the next push would do, without doing it.
pub fn waiting(conn: &Connection, config: &[ConfigRule]) -> Result<Waiting, TeamError> {
    let planned = plan(conn, config)?;
    let sent = sent_of(conn)?;
    let mut w = Waiting::default();
    let alive: HashMap<i64, &Planned> = planned.iter().map(|p| (p.pk, p)).collect();
    w.to_remove += sent
        .iter()
        .filter(|(pk, s)| {
            alive.get(pk).is_none_or(|p| {
                p.agent != s.agent
                    || p.session_id != s.session_id
                    || p.level < s.level
                    || p.project != s.project
            })
        })
        .count() as u64;
    for p in &planned {
        if p.level == Level::Hidden {
            continue;
        }
        let through = sent.get(&p.pk).map_or([0; 4], |s| s.through);
        let mut rows = 0u64;
        for &l in p.level.layers() {
            let n: i64 = conn
                .prepare_cached(&format!(
                    "SELECT count(*) FROM {} WHERE session_pk = ?1 AND id > ?2",
                    l.table()
                ))?
                .query_row(params![p.pk, through[l.index()]], |r| r.get(0))?;
            rows += n as u64;
        }
        if rows > 0 || !sent.contains_key(&p.pk) {
            w.sessions += 1;
            w.rows += rows;
        }
    }
    Ok(w)
}

/// Per level, how many of this archive's sessions are shared at it.
pub fn counts(conn: &Connection, config: &[ConfigRule]) -> Result<[u64; 3], TeamError> {
    let mut c = [0u64; 3];
    for p in plan(conn, config)? {
        c[p.level as usize] += 1;
    }
    Ok(c)
}
