//! What a member may read of the team archive besides search: the projects they belong to with
//! their counts, the sessions shared there, and one session's rows. Every query is filtered by
//! the member's access, so a project they do not belong to gives no row and no count, whatever
//! id is asked for.

use crate::TeamError;
use crate::archive::{Member, Team};

/// A project the member reads, with what the team shared of it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProjectCount {
    pub project: String,
    pub members: i64,
    pub sessions: i64,
    pub rows: i64,
}

/// A shared session, as lists show it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SessionRow {
    pub member: String,
    pub host: String,
    pub agent: String,
    pub session_id: String,
    pub project: String,
    pub title: Option<String>,
    pub level: String,
    pub started_at: Option<i64>,
    pub updated_at: Option<i64>,
}

/// One row of a shared session.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ItemRow {
    pub level: &'static str,
    pub prompt_number: i64,
    pub role: String,
    pub kind: String,
    pub ts: Option<i64>,
    pub text: String,
}

/// Which sessions a list shows.
#[derive(Debug, Clone, Default)]
pub struct SessionFilter<'a> {
    pub project: Option<&'a str>,
    pub member: Option<&'a str>,
    pub agent: Option<&'a str>,
    pub limit: i64,
    pub offset: i64,
}

const ACCESS: &str = "s.project IN (SELECT project FROM memex_team_access WHERE member_id = $1)";

fn session_row(r: &tokio_postgres::Row) -> SessionRow {
    SessionRow {
        member: r.get(0),
        host: r.get(1),
        agent: r.get(2),
        session_id: r.get(3),
        project: r.get(4),
        title: r.get(5),
        level: r.get(6),
        started_at: r.get(7),
        updated_at: r.get(8),
    }
}

const SESSION_COLUMNS: &str = "m.name, s.host, s.agent, s.session_id, s.project, s.title, s.level, s.started_at, s.updated_at";

impl Team {
    /// The projects `me` reads, with their members, sessions and rows.
    pub async fn projects(&self, me: &Member) -> Result<Vec<ProjectCount>, TeamError> {
        let g = self.pg.client().await?;
        let c = g.as_ref().expect("connected");
        let rows = c
            .query(
                "SELECT a.project,
                        (SELECT count(DISTINCT s.member_id) FROM memex_team_sessions s WHERE s.project = a.project),
                        (SELECT count(*) FROM memex_team_sessions s WHERE s.project = a.project),
                        (SELECT count(*) FROM memex_team_items i JOIN memex_team_sessions s ON s.id = i.session
                         WHERE s.project = a.project)
                 FROM memex_team_access a WHERE a.member_id = $1 ORDER BY a.project",
                &[&me.id],
            )
            .await
            .map_err(|e| self.sql(&e))?;
        Ok(rows
            .iter()
            .map(|r| ProjectCount {
                project: r.get(0),
                members: r.get(1),
                sessions: r.get(2),
                rows: r.get(3),
            })
            .collect())
    }

    /// The shared sessions `me` reads, most recently active first.
    pub async fn sessions(
        &self,
        me: &Member,
        f: &SessionFilter<'_>,
    ) -> Result<Vec<SessionRow>, TeamError> {
        let g = self.pg.client().await?;
        let c = g.as_ref().expect("connected");
        let rows = c
            .query(
                &format!(
                    "SELECT {SESSION_COLUMNS} FROM memex_team_sessions s
                     JOIN memex_team_members m ON m.id = s.member_id
                     WHERE {ACCESS}
                       AND ($2::text IS NULL OR s.project = $2)
                       AND ($3::text IS NULL OR m.name = $3)
                       AND ($4::text IS NULL OR s.agent = $4)
                     ORDER BY s.updated_at DESC NULLS LAST, s.id DESC
                     LIMIT $5 OFFSET $6"
                ),
                &[&me.id, &f.project, &f.member, &f.agent, &f.limit, &f.offset],
            )
            .await
            .map_err(|e| self.sql(&e))?;
        Ok(rows.iter().map(session_row).collect())
    }

    /// One shared session `me` reads (by its id; `member` when two members share one id) and
    /// its rows, in order (at most `limit` from `offset`); `None` when there is none `me` may
    /// read, whether it exists or not.
    pub async fn session(
        &self,
        me: &Member,
        session_id: &str,
        member: Option<&str>,
        limit: i64,
        offset: i64,
    ) -> Result<Option<(SessionRow, Vec<ItemRow>)>, TeamError> {
        let g = self.pg.client().await?;
        let c = g.as_ref().expect("connected");
        let row = c
            .query_opt(
                &format!(
                    "SELECT {SESSION_COLUMNS}, s.id FROM memex_team_sessions s
                     JOIN memex_team_members m ON m.id = s.member_id
                     WHERE {ACCESS} AND s.session_id = $2 AND ($3::text IS NULL OR m.name = $3)
                     ORDER BY s.id LIMIT 1"
                ),
                &[&me.id, &session_id, &member],
            )
            .await
            .map_err(|e| self.sql(&e))?;
        let Some(row) = row else { return Ok(None) };
        let id: i64 = row.get(9);
        let items = c
            .query(
                "SELECT layer, prompt_number, role, kind, ts, body FROM memex_team_items
                 WHERE session = $1 ORDER BY layer, prompt_number, ts NULLS FIRST, id
                 LIMIT $2 OFFSET $3",
                &[&id, &limit, &offset],
            )
            .await
            .map_err(|e| self.sql(&e))?;
        Ok(Some((
            session_row(&row),
            items
                .iter()
                .map(|r| ItemRow {
                    level: memex_store::layer::Layer::ALL[r.get::<_, i16>(0) as usize & 3].name(),
                    prompt_number: r.get::<_, i32>(1).into(),
                    role: r.get(2),
                    kind: r.get(3),
                    ts: r.get(4),
                    text: r.get(5),
                })
                .collect(),
        )))
    }
}
