//! The team archive in PostgreSQL: its tables, its members and their tokens, and who may read
//! which project.
//!
//! ```sql
//! memex_team          (id = 1, layout, team, created_at, vector_model, vector_dims)
//! memex_team_members  (id, name, admin, created_at)
//! memex_team_tokens   (id, member_id, hash, hint, created_at, revoked_at, last_used_at)
//! memex_team_access   (member_id, project)            -- who reads which project
//! memex_team_sessions (id, member_id, host, agent, session_id, project, title, level, ...)
//! memex_team_items    (id, session, member_id, project, agent, layer, item, prompt_number,
//!                      role, kind, ts, body, tsv)
//! memex_team_vectors  (item, chunk, embedding vector(N))  -- made with the first vector
//! ```
//!
//! A member's rows hang from their member row and a session's from its session row
//! (`ON DELETE CASCADE`): withdrawing a session or purging a member is one `DELETE`, and what
//! the indexes held of them goes with the next `VACUUM` (autovacuum's, or the one a purge runs).

use memex_sync::postgres::Postgres;
use tokio_postgres::error::SqlState;

use crate::token::Token;
use crate::{TeamError, check_name};

/// The layout of the tables this build reads and writes.
pub const LAYOUT: i32 = 1;

const SCHEMA: &str = "
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE memex_team (
    id           smallint PRIMARY KEY CHECK (id = 1),
    layout       integer NOT NULL,
    team         text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    vector_model text,
    vector_dims  integer
);
CREATE TABLE memex_team_members (
    id         bigserial PRIMARY KEY,
    name       text NOT NULL UNIQUE,
    admin      boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE memex_team_tokens (
    id           bigserial PRIMARY KEY,
    member_id    bigint NOT NULL REFERENCES memex_team_members ON DELETE CASCADE,
    hash         bytea NOT NULL UNIQUE,
    hint         text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz,
    last_used_at timestamptz
);
CREATE TABLE memex_team_access (
    member_id bigint NOT NULL REFERENCES memex_team_members ON DELETE CASCADE,
    project   text NOT NULL,
    PRIMARY KEY (member_id, project)
);
CREATE INDEX memex_team_access_project ON memex_team_access (project);
CREATE TABLE memex_team_sessions (
    id         bigserial PRIMARY KEY,
    member_id  bigint NOT NULL REFERENCES memex_team_members ON DELETE CASCADE,
    host       text NOT NULL,
    agent      text NOT NULL,
    session_id text NOT NULL,
    project    text NOT NULL,
    title      text,
    level      text NOT NULL CHECK (level IN ('summaries', 'full')),
    started_at bigint,
    updated_at bigint,
    UNIQUE (member_id, agent, session_id)
);
CREATE INDEX memex_team_sessions_project ON memex_team_sessions (project);
CREATE TABLE memex_team_items (
    id            bigserial PRIMARY KEY,
    session       bigint NOT NULL REFERENCES memex_team_sessions ON DELETE CASCADE,
    member_id     bigint NOT NULL,     -- the session's, here so that a search reads one table
    project       text NOT NULL,       -- the session's
    agent         text NOT NULL,       -- the session's
    layer         smallint NOT NULL CHECK (layer BETWEEN 0 AND 3),
    item          text NOT NULL,
    prompt_number integer NOT NULL,
    role          text NOT NULL,
    kind          text NOT NULL,
    ts            bigint,
    body          text NOT NULL,
    tsv           tsvector NOT NULL,
    UNIQUE (session, layer, item)
);
CREATE INDEX memex_team_items_tsv ON memex_team_items USING gin (tsv);
CREATE INDEX memex_team_items_session ON memex_team_items (session, layer, prompt_number);
-- A layer's rows newest first: the words side of a search at a layer of few rows walks these.
CREATE INDEX memex_team_items_layer ON memex_team_items (layer, id);
";

/// What the team archive says of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamInfo {
    /// Its random id.
    pub team: String,
    pub layout: i32,
    /// The embedding model every vector of the archive was made with, and their dimensions
    /// (none until the first vector arrives).
    pub vector_model: Option<String>,
    pub vector_dims: Option<i32>,
}

/// A member, as a token proved them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: i64,
    pub name: String,
    pub admin: bool,
}

/// A member and their tokens, as `memex team token list` shows them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MemberTokens {
    pub name: String,
    pub admin: bool,
    pub projects: Vec<String>,
    pub tokens: Vec<TokenInfo>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct TokenInfo {
    /// The token's first 8 digits.
    pub hint: String,
    pub created_at: String,
    pub last_used_at: Option<String>,
    pub revoked_at: Option<String>,
}

/// What a purge removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Removed {
    pub sessions: u64,
    pub items: u64,
}

/// The team archive at one PostgreSQL URL.
#[derive(Debug)]
pub struct Team {
    pub(crate) pg: Postgres,
}

impl Team {
    /// The team archive at `url` (`postgres://…`). Nothing is connected until it is used.
    pub fn new(url: &str) -> Result<Team, TeamError> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(TeamError::BadUrl(
                "a team archive is a PostgreSQL database: postgres://user@host/db".into(),
            ));
        }
        Ok(Team {
            pg: Postgres::new(url).map_err(|e| match e {
                memex_sync::target::TargetError::BadUrl(why) => TeamError::BadUrl(why),
                other => other.into(),
            })?,
        })
    }

    /// The database, as the user named it, without a password.
    pub fn describe(&self) -> String {
        use memex_sync::target::Target;
        self.pg.describe()
    }

    pub(crate) fn sql(&self, e: &tokio_postgres::Error) -> TeamError {
        TeamError::Target(self.pg.err(e))
    }

    /// What the database holds of a team archive (`None`: none was made there).
    pub async fn info(&self) -> Result<Option<TeamInfo>, TeamError> {
        let g = self.pg.client().await?;
        let c = g.as_ref().expect("connected");
        let row = match c
            .query_opt(
                "SELECT team, layout, vector_model, vector_dims FROM memex_team WHERE id = 1",
                &[],
            )
            .await
        {
            Ok(r) => r,
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => return Ok(None),
            Err(e) => return Err(self.sql(&e)),
        };
        Ok(row.map(|r| TeamInfo {
            team: r.get(0),
            layout: r.get(1),
            vector_model: r.get(2),
            vector_dims: r.get(3),
        }))
    }

    /// The team archive, refused when there is none or a newer Memex made it.
    pub async fn checked(&self) -> Result<TeamInfo, TeamError> {
        let info = self
            .info()
            .await?
            .ok_or_else(|| TeamError::NoTeam(self.describe()))?;
        if info.layout > LAYOUT {
            return Err(TeamError::TooNew {
                target: self.describe(),
                found: info.layout,
            });
        }
        Ok(info)
    }

    /// Makes the team archive (its tables and the `vector` extension) and its first member,
    /// an admin named `admin`, whose token is returned. Refused where one exists.
    pub async fn create(&self, admin: &str) -> Result<(TeamInfo, Token), TeamError> {
        check_name(admin)?;
        if self.info().await?.is_some() {
            return Err(TeamError::Exists(self.describe()));
        }
        let team = memex_sync::new_id();
        let token = Token::generate();
        let mut g = self.pg.client().await?;
        let c = g.as_mut().expect("connected");
        let tx = c.transaction().await.map_err(|e| self.sql(&e))?;
        if let Err(e) = tx.batch_execute(SCHEMA).await {
            let db = e.as_db_error();
            return Err(match e.code() {
                Some(c) if *c == SqlState::DUPLICATE_TABLE => TeamError::Exists(self.describe()),
                Some(c)
                    if db.is_some_and(|d| d.message().contains("extension \"vector\""))
                        || *c == SqlState::UNDEFINED_FILE =>
                {
                    TeamError::NoPgvector {
                        target: self.describe(),
                        detail: db.map(|d| d.message().to_owned()).unwrap_or_default(),
                    }
                }
                _ => self.sql(&e),
            });
        }
        tx.execute(
            "INSERT INTO memex_team (id, layout, team) VALUES (1, $1, $2)",
            &[&LAYOUT, &team],
        )
        .await
        .map_err(|e| self.sql(&e))?;
        self.member_with_token(&tx, admin, true, &token).await?;
        tx.commit().await.map_err(|e| self.sql(&e))?;
        Ok((
            TeamInfo {
                team,
                layout: LAYOUT,
                vector_model: None,
                vector_dims: None,
            },
            token,
        ))
    }

    /// Member `name` (made when new; `admin` is only ever added) with `token`, in `tx`; their id.
    async fn member_with_token(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
        name: &str,
        admin: bool,
        token: &Token,
    ) -> Result<i64, TeamError> {
        let id: i64 = tx
            .query_one(
                "INSERT INTO memex_team_members (name, admin) VALUES ($1, $2)
                 ON CONFLICT (name) DO UPDATE SET admin = memex_team_members.admin OR $2
                 RETURNING id",
                &[&name, &admin],
            )
            .await
            .map_err(|e| self.sql(&e))?
            .get(0);
        tx.execute(
            "INSERT INTO memex_team_tokens (member_id, hash, hint) VALUES ($1, $2, $3)",
            &[&id, &token.hash(), &token.hint()],
        )
        .await
        .map_err(|e| self.sql(&e))?;
        Ok(id)
    }

    /// The member `token` belongs to; [`TeamError::BadToken`] for a token that is unknown or
    /// revoked (the two are not told apart).
    pub async fn authenticate(&self, token: &Token) -> Result<Member, TeamError> {
        self.checked().await?;
        let g = self.pg.client().await?;
        let c = g.as_ref().expect("connected");
        let hash = token.hash();
        let row = c
            .query_opt(
                "SELECT m.id, m.name, m.admin,
                        t.last_used_at IS NULL OR t.last_used_at < now() - interval '1 minute'
                 FROM memex_team_tokens t JOIN memex_team_members m ON m.id = t.member_id
                 WHERE t.hash = $1 AND t.revoked_at IS NULL",
                &[&hash],
            )
            .await
            .map_err(|e| self.sql(&e))?;
        let r = row.ok_or(TeamError::BadToken)?;
        // When it was last used, to the minute: a write per request would cost every search
        // a flush of the database's log.
        if r.get::<_, bool>(3) {
            c.execute(
                "UPDATE memex_team_tokens SET last_used_at = now() WHERE hash = $1",
                &[&hash],
            )
            .await
            .map_err(|e| self.sql(&e))?;
        }
        Ok(Member {
            id: r.get(0),
            name: r.get(1),
            admin: r.get(2),
        })
    }

    fn need_admin(by: &Member) -> Result<(), TeamError> {
        if by.admin {
            Ok(())
        } else {
            Err(TeamError::NotAdmin(by.name.clone()))
        }
    }

    /// A new token for member `name` (made, with `admin` and access to `projects`, when the
    /// team has no member of that name). Admins only.
    pub async fn add_token(
        &self,
        by: &Member,
        name: &str,
        admin: bool,
        projects: &[String],
    ) -> Result<Token, TeamError> {
        Self::need_admin(by)?;
        check_name(name)?;
        for p in projects {
            crate::check_project(p)?;
        }
        let token = Token::generate();
        let mut g = self.pg.client().await?;
        let c = g.as_mut().expect("connected");
        let tx = c.transaction().await.map_err(|e| self.sql(&e))?;
        let id = self.member_with_token(&tx, name, admin, &token).await?;
        for p in projects {
            tx.execute(
                "INSERT INTO memex_team_access (member_id, project) VALUES ($1, $2)
                 ON CONFLICT DO NOTHING",
                &[&id, p],
            )
            .await
            .map_err(|e| self.sql(&e))?;
        }
        tx.commit().await.map_err(|e| self.sql(&e))?;
        Ok(token)
    }

    /// Every member, their projects and their tokens (hints only). Admins only.
    pub async fn tokens(&self, by: &Member) -> Result<Vec<MemberTokens>, TeamError> {
        Self::need_admin(by)?;
        let g = self.pg.client().await?;
        let c = g.as_ref().expect("connected");
        let rows = c
            .query(
                "SELECT m.name, m.admin,
                        ARRAY(SELECT project FROM memex_team_access a
                              WHERE a.member_id = m.id ORDER BY project),
                        t.hint,
                        to_char(t.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
                        to_char(t.last_used_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
                        to_char(t.revoked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')
                 FROM memex_team_members m
                 LEFT JOIN memex_team_tokens t ON t.member_id = m.id
                 ORDER BY m.name, t.id",
                &[],
            )
            .await
            .map_err(|e| self.sql(&e))?;
        let mut out: Vec<MemberTokens> = Vec::new();
        for r in rows {
            let name: String = r.get(0);
            if out.last().is_none_or(|m| m.name != name) {
                out.push(MemberTokens {
                    name,
                    admin: r.get(1),
                    projects: r.get(2),
                    tokens: Vec::new(),
                });
            }
            if let Some(hint) = r.get::<_, Option<String>>(3) {
                out.last_mut().expect("pushed").tokens.push(TokenInfo {
                    hint,
                    created_at: r.get(4),
                    last_used_at: r.get(5),
                    revoked_at: r.get(6),
                });
            }
        }
        Ok(out)
    }

    /// Revokes every token of member `name`; how many were still valid. Admins only; an admin
    /// cannot revoke their own (the team would be left without a way in).
    pub async fn revoke(&self, by: &Member, name: &str) -> Result<u64, TeamError> {
        Self::need_admin(by)?;
        if by.name == name {
            return Err(TeamError::Invalid(
                "an admin cannot revoke their own tokens: another admin can".into(),
            ));
        }
        let g = self.pg.client().await?;
        let c = g.as_ref().expect("connected");
        let known = c
            .query_opt("SELECT 1 FROM memex_team_members WHERE name = $1", &[&name])
            .await
            .map_err(|e| self.sql(&e))?;
        if known.is_none() {
            return Err(TeamError::NoMember(name.to_owned()));
        }
        c.execute(
            "UPDATE memex_team_tokens SET revoked_at = now()
             WHERE revoked_at IS NULL
               AND member_id = (SELECT id FROM memex_team_members WHERE name = $1)",
            &[&name],
        )
        .await
        .map_err(|e| self.sql(&e))
    }

    /// Gives member `name` access to `project` (or takes it away). Admins only.
    pub async fn allow(
        &self,
        by: &Member,
        name: &str,
        project: &str,
        allowed: bool,
    ) -> Result<(), TeamError> {
        Self::need_admin(by)?;
        crate::check_project(project)?;
        let g = self.pg.client().await?;
        let c = g.as_ref().expect("connected");
        let sql = if allowed {
            "INSERT INTO memex_team_access (member_id, project)
             SELECT id, $2 FROM memex_team_members WHERE name = $1 ON CONFLICT DO NOTHING"
        } else {
            "DELETE FROM memex_team_access
             WHERE project = $2 AND member_id = (SELECT id FROM memex_team_members WHERE name = $1)"
        };
        let n = c
            .execute(sql, &[&name, &project])
            .await
            .map_err(|e| self.sql(&e))?;
        if n == 0 && allowed {
            return Err(TeamError::NoMember(name.to_owned()));
        }
        Ok(())
    }

    /// The projects `member` may read.
    pub async fn projects_of(&self, member: &Member) -> Result<Vec<String>, TeamError> {
        let g = self.pg.client().await?;
        let c = g.as_ref().expect("connected");
        let rows = c
            .query(
                "SELECT project FROM memex_team_access WHERE member_id = $1 ORDER BY project",
                &[&member.id],
            )
            .await
            .map_err(|e| self.sql(&e))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Removes member `name` from the team with everything they shared (sessions, messages,
    /// summaries, vectors), their tokens and their access, then vacuums the tables so that
    /// their indexes hold nothing of it. Admins only, and not themselves.
    pub async fn purge(&self, by: &Member, name: &str) -> Result<Removed, TeamError> {
        Self::need_admin(by)?;
        if by.name == name {
            return Err(TeamError::Invalid(
                "an admin cannot purge themselves: another admin can".into(),
            ));
        }
        let removed = {
            let mut g = self.pg.client().await?;
            let c = g.as_mut().expect("connected");
            let tx = c.transaction().await.map_err(|e| self.sql(&e))?;
            let Some(row) = tx
                .query_opt(
                    "SELECT id, (SELECT count(*) FROM memex_team_sessions s WHERE s.member_id = m.id),
                            (SELECT count(*) FROM memex_team_items i
                             JOIN memex_team_sessions s ON s.id = i.session
                             WHERE s.member_id = m.id)
                     FROM memex_team_members m WHERE name = $1 FOR UPDATE",
                    &[&name],
                )
                .await
                .map_err(|e| self.sql(&e))?
            else {
                return Err(TeamError::NoMember(name.to_owned()));
            };
            let id: i64 = row.get(0);
            tx.execute("DELETE FROM memex_team_members WHERE id = $1", &[&id])
                .await
                .map_err(|e| self.sql(&e))?;
            tx.commit().await.map_err(|e| self.sql(&e))?;
            Removed {
                sessions: row.get::<_, i64>(1) as u64,
                items: row.get::<_, i64>(2) as u64,
            }
        };
        self.vacuum().await?;
        Ok(removed)
    }

    /// `VACUUM` of the tables that hold shared text and vectors: what was deleted leaves their
    /// indexes now, not at autovacuum's next turn.
    pub async fn vacuum(&self) -> Result<(), TeamError> {
        let g = self.pg.client().await?;
        let c = g.as_ref().expect("connected");
        let vectors = crate::store::vectors_table_exists(c)
            .await
            .map_err(|e| self.sql(&e))?;
        let tables = if vectors {
            "memex_team_sessions, memex_team_items, memex_team_vectors"
        } else {
            "memex_team_sessions, memex_team_items"
        };
        c.batch_execute(&format!("VACUUM {tables}"))
            .await
            .map_err(|e| self.sql(&e))
    }
}
