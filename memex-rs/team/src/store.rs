//! What a member's machine writes to the team archive: sessions, their items (messages and the
//! compact layers' rows, each with its full-text vector) and their embeddings, and what it
//! takes back when a share is lowered, withdrawn or forgotten. Every write names the member
//! it is for: a machine touches its own member's rows only.

use memex_store::layer::Layer;
use pgvector::Vector;
use tokio_postgres::Client;

use crate::archive::{Member, Team};
use crate::{Level, TeamError};

/// A session as the team sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedSession {
    /// The machine it was archived on (its sync host id, or a name).
    pub host: String,
    pub agent: String,
    pub session_id: String,
    /// Its project's name in the team.
    pub project: String,
    pub title: Option<String>,
    pub level: Level,
    pub started_at: Option<i64>,
    pub updated_at: Option<i64>,
}

/// One shared row: a message (raw) or a compact layer's row, keyed within its session by
/// `item` (a message's id, an observation's tool call, a talk's number, `session`).
#[derive(Debug, Clone, PartialEq)]
pub struct SharedItem {
    pub layer: Layer,
    pub item: String,
    pub prompt_number: i64,
    pub role: String,
    pub kind: String,
    pub ts: Option<i64>,
    /// The text shown and searched (redacted where it was archived).
    pub body: String,
    /// Its embeddings (one per chunk), when this machine has made them.
    pub vectors: Vec<Vec<f32>>,
}

/// At most this much of an item's text is indexed for full text (PostgreSQL's `tsvector`
/// holds at most 1 MB); the whole text is kept.
const TSV_BYTES: usize = 256 * 1024;

/// Text PostgreSQL can store: it has no NUL character.
fn storable(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains('\0') {
        std::borrow::Cow::Owned(s.replace('\0', ""))
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

pub(crate) async fn vectors_table_exists(c: &Client) -> Result<bool, tokio_postgres::Error> {
    Ok(
        c.query_one("SELECT to_regclass('memex_team_vectors') IS NOT NULL", &[])
            .await?
            .get(0),
    )
}

fn layer_code(l: Layer) -> i16 {
    l.index() as i16
}

impl Team {
    /// Puts session `s` of `me` (made, or its title, level and times updated) and gives `me`
    /// access to its project; its id in the team archive.
    pub async fn put_session(&self, me: &Member, s: &SharedSession) -> Result<i64, TeamError> {
        crate::check_project(&s.project)?;
        let g = self.pg.client().await?;
        let c = g.as_ref().expect("connected");
        let title = s.title.as_deref().map(storable);
        let row = c
            .query_one(
                "INSERT INTO memex_team_sessions
                     (member_id, host, agent, session_id, project, title, level, started_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                 ON CONFLICT (member_id, agent, session_id) DO UPDATE SET
                     host = $2, project = $5, title = $6, level = $7, started_at = $8, updated_at = $9
                 RETURNING id",
                &[
                    &me.id,
                    &storable(&s.host).as_ref(),
                    &storable(&s.agent).as_ref(),
                    &storable(&s.session_id).as_ref(),
                    &s.project,
                    &title.as_deref(),
                    &s.level.name(),
                    &s.started_at,
                    &s.updated_at,
                ],
            )
            .await
            .map_err(|e| self.sql(&e))?;
        c.execute(
            "INSERT INTO memex_team_access (member_id, project) VALUES ($1, $2)
             ON CONFLICT DO NOTHING",
            &[&me.id, &s.project],
        )
        .await
        .map_err(|e| self.sql(&e))?;
        Ok(row.get(0))
    }

    /// The id of session (`agent`, `session_id`) of `me`, if the team holds it.
    pub async fn session_ref(
        &self,
        me: &Member,
        agent: &str,
        session_id: &str,
    ) -> Result<Option<i64>, TeamError> {
        let g = self.pg.client().await?;
        let c = g.as_ref().expect("connected");
        let row = c
            .query_opt(
                "SELECT id FROM memex_team_sessions
                 WHERE member_id = $1 AND agent = $2 AND session_id = $3",
                &[&me.id, &agent, &session_id],
            )
            .await
            .map_err(|e| self.sql(&e))?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Puts `items` into session `session` (`me`'s), replacing those of the same key, in one
    /// transaction; first removes what the session held of the talks in `replaced` for their
    /// layer (a talk whose observations were written again may have fewer). Their vectors go
    /// too, when the archive's model is `model` (`None`: no vectors are sent).
    pub async fn put_items(
        &self,
        me: &Member,
        session: i64,
        replaced: &[(Layer, i64)],
        items: &[SharedItem],
        model: Option<&str>,
    ) -> Result<(), TeamError> {
        let dims = match model {
            Some(m) => match items.iter().flat_map(|i| &i.vectors).map(Vec::len).next() {
                Some(d) => Some(self.vector_space(m, d).await?),
                None => None,
            },
            None => None,
        };
        let mut g = self.pg.client().await?;
        let c = g.as_mut().expect("connected");
        let tx = c.transaction().await.map_err(|e| self.sql(&e))?;
        let owned = tx
            .query_opt(
                "SELECT project, agent FROM memex_team_sessions
                 WHERE id = $1 AND member_id = $2 FOR UPDATE",
                &[&session, &me.id],
            )
            .await
            .map_err(|e| self.sql(&e))?;
        let Some(owned) = owned else {
            return Err(TeamError::Invalid(format!(
                "session {session} of the team archive is not {}'s",
                me.name
            )));
        };
        let (project, agent): (String, String) = (owned.get(0), owned.get(1));
        for (layer, prompt) in replaced {
            tx.execute(
                "DELETE FROM memex_team_items WHERE session = $1 AND layer = $2 AND prompt_number = $3",
                &[&session, &layer_code(*layer), &(*prompt as i32)],
            )
            .await
            .map_err(|e| self.sql(&e))?;
        }
        let mut layers = Vec::with_capacity(items.len());
        let mut keys = Vec::with_capacity(items.len());
        let mut prompts = Vec::with_capacity(items.len());
        let mut roles = Vec::with_capacity(items.len());
        let mut kinds = Vec::with_capacity(items.len());
        let mut times = Vec::with_capacity(items.len());
        let mut bodies = Vec::with_capacity(items.len());
        let mut indexed = Vec::with_capacity(items.len());
        for i in items {
            layers.push(layer_code(i.layer));
            keys.push(storable(&i.item).into_owned());
            prompts.push(i32::try_from(i.prompt_number).unwrap_or(i32::MAX));
            roles.push(storable(&i.role).into_owned());
            kinds.push(storable(&i.kind).into_owned());
            times.push(i.ts);
            let body = storable(&i.body);
            indexed.push(memex_store::fts::index_text(&body, TSV_BYTES).into_owned());
            bodies.push(body.into_owned());
        }
        let ids = tx
            .query(
                "INSERT INTO memex_team_items
                     (session, member_id, project, agent, layer, item, prompt_number, role, kind,
                      ts, body, tsv)
                 SELECT $1, $10, $11, $12, u.l, u.i, u.p, u.r, u.k, u.t, u.b,
                        to_tsvector('simple', u.x)
                 FROM unnest($2::smallint[], $3::text[], $4::int[], $5::text[], $6::text[],
                             $7::bigint[], $8::text[], $9::text[]) AS u(l, i, p, r, k, t, b, x)
                 ON CONFLICT (session, layer, item) DO UPDATE SET
                     prompt_number = EXCLUDED.prompt_number, role = EXCLUDED.role,
                     kind = EXCLUDED.kind, ts = EXCLUDED.ts, body = EXCLUDED.body,
                     tsv = EXCLUDED.tsv
                 RETURNING id",
                &[
                    &session, &layers, &keys, &prompts, &roles, &kinds, &times, &bodies, &indexed,
                    &me.id, &project, &agent,
                ],
            )
            .await
            .map_err(|e| self.sql(&e))?;
        if let Some(dims) = dims {
            let (mut owners, mut chunks, mut vectors) = (Vec::new(), Vec::new(), Vec::new());
            for (row, item) in ids.iter().zip(items) {
                let id: i64 = row.get(0);
                for (n, v) in item.vectors.iter().enumerate() {
                    if v.len() != dims {
                        return Err(TeamError::MixedVectors {
                            model: model.unwrap_or_default().to_owned(),
                            dims: dims as i32,
                            got: model.unwrap_or_default().to_owned(),
                            got_dims: v.len() as i32,
                        });
                    }
                    owners.push(id);
                    chunks.push(n as i32);
                    vectors.push(Vector::from(v.clone()));
                }
            }
            let all: Vec<i64> = ids.iter().map(|r| r.get(0)).collect();
            tx.execute(
                "DELETE FROM memex_team_vectors WHERE item = ANY($1)",
                &[&all],
            )
            .await
            .map_err(|e| self.sql(&e))?;
            if !owners.is_empty() {
                tx.execute(
                    "INSERT INTO memex_team_vectors (item, chunk, embedding)
                     SELECT * FROM unnest($1::bigint[], $2::int[], $3::vector[])",
                    &[&owners, &chunks, &vectors],
                )
                .await
                .map_err(|e| self.sql(&e))?;
            }
        }
        tx.commit().await.map_err(|e| self.sql(&e))
    }

    /// Adds the vectors of rows the team archive already holds (sent before this machine had
    /// made them): `(session, layer, item, vectors)`, each session `me`'s. Rows the archive no
    /// longer holds are passed over. How many rows got vectors.
    pub async fn put_vectors(
        &self,
        me: &Member,
        model: &str,
        rows: &[(i64, Layer, String, Vec<Vec<f32>>)],
    ) -> Result<u64, TeamError> {
        let Some(dims) = rows.iter().flat_map(|r| &r.3).map(Vec::len).next() else {
            return Ok(0);
        };
        self.vector_space(model, dims).await?;
        let mut g = self.pg.client().await?;
        let c = g.as_mut().expect("connected");
        let tx = c.transaction().await.map_err(|e| self.sql(&e))?;
        let mut done = 0;
        for (session, layer, item, vectors) in rows {
            let found = tx
                .query_opt(
                    "SELECT i.id FROM memex_team_items i JOIN memex_team_sessions s ON s.id = i.session
                     WHERE i.session = $1 AND s.member_id = $2 AND i.layer = $3 AND i.item = $4",
                    &[session, &me.id, &layer_code(*layer), item],
                )
                .await
                .map_err(|e| self.sql(&e))?;
            let Some(found) = found else { continue };
            let id: i64 = found.get(0);
            tx.execute("DELETE FROM memex_team_vectors WHERE item = $1", &[&id])
                .await
                .map_err(|e| self.sql(&e))?;
            for (n, v) in vectors.iter().enumerate() {
                if v.len() != dims {
                    return Err(TeamError::MixedVectors {
                        model: model.to_owned(),
                        dims: dims as i32,
                        got: model.to_owned(),
                        got_dims: v.len() as i32,
                    });
                }
                tx.execute(
                    "INSERT INTO memex_team_vectors (item, chunk, embedding) VALUES ($1, $2, $3)",
                    &[&id, &(n as i32), &Vector::from(v.clone())],
                )
                .await
                .map_err(|e| self.sql(&e))?;
            }
            done += 1;
        }
        tx.commit().await.map_err(|e| self.sql(&e))?;
        Ok(done)
    }

    /// The dimensions of the archive's vectors, made `dims` for `model` by the first vector
    /// sent (with the table and its HNSW index); refused when the archive's vectors come from
    /// another model or have other dimensions.
    pub async fn vector_space(&self, model: &str, dims: usize) -> Result<usize, TeamError> {
        if dims == 0 || dims > 16_000 {
            return Err(TeamError::Invalid(format!(
                "vectors of {dims} dimensions cannot be stored (pgvector takes 1 to 16000)"
            )));
        }
        let mut g = self.pg.client().await?;
        let c = g.as_mut().expect("connected");
        let tx = c.transaction().await.map_err(|e| self.sql(&e))?;
        let row = tx
            .query_one(
                "SELECT vector_model, vector_dims FROM memex_team WHERE id = 1 FOR UPDATE",
                &[],
            )
            .await
            .map_err(|e| self.sql(&e))?;
        let (have_model, have_dims): (Option<String>, Option<i32>) = (row.get(0), row.get(1));
        match (have_model, have_dims) {
            (Some(m), Some(d)) if m == model && d as usize == dims => return Ok(dims),
            (Some(m), Some(d)) => {
                return Err(TeamError::MixedVectors {
                    model: m,
                    dims: d,
                    got: model.to_owned(),
                    got_dims: dims as i32,
                });
            }
            _ => {}
        }
        tx.batch_execute(&format!(
            "CREATE TABLE memex_team_vectors (
                 item      bigint NOT NULL REFERENCES memex_team_items ON DELETE CASCADE,
                 chunk     integer NOT NULL,
                 embedding vector({dims}) NOT NULL,
                 PRIMARY KEY (item, chunk)
             );
             CREATE INDEX memex_team_vectors_hnsw ON memex_team_vectors
                 USING hnsw (embedding vector_cosine_ops);"
        ))
        .await
        .map_err(|e| self.sql(&e))?;
        tx.execute(
            "UPDATE memex_team SET vector_model = $1, vector_dims = $2 WHERE id = 1",
            &[&model, &(dims as i32)],
        )
        .await
        .map_err(|e| self.sql(&e))?;
        tx.commit().await.map_err(|e| self.sql(&e))?;
        Ok(dims)
    }

    /// Removes from session `session` of `me` the rows of `layers`; how many went.
    pub async fn drop_layers(
        &self,
        me: &Member,
        session: i64,
        layers: &[Layer],
    ) -> Result<u64, TeamError> {
        let codes: Vec<i16> = layers.iter().map(|l| layer_code(*l)).collect();
        let g = self.pg.client().await?;
        let c = g.as_ref().expect("connected");
        c.execute(
            "DELETE FROM memex_team_items i USING memex_team_sessions s
             WHERE i.session = $1 AND s.id = i.session AND s.member_id = $2
               AND i.layer = ANY($3)",
            &[&session, &me.id, &codes],
        )
        .await
        .map_err(|e| self.sql(&e))
    }

    /// Removes messages `message_ids` of session (`agent`, `session_id`) of `me` (forgotten
    /// on their machine); how many went.
    pub async fn drop_messages(
        &self,
        me: &Member,
        agent: &str,
        session_id: &str,
        message_ids: &[String],
    ) -> Result<u64, TeamError> {
        let g = self.pg.client().await?;
        let c = g.as_ref().expect("connected");
        c.execute(
            "DELETE FROM memex_team_items i USING memex_team_sessions s
             WHERE s.member_id = $1 AND s.agent = $2 AND s.session_id = $3
               AND i.session = s.id AND i.layer = 0 AND i.item = ANY($4)",
            &[&me.id, &agent, &session_id, &message_ids],
        )
        .await
        .map_err(|e| self.sql(&e))
    }

    /// Removes session (`agent`, `session_id`) of `me` with all it held; whether it was there.
    pub async fn drop_session(
        &self,
        me: &Member,
        agent: &str,
        session_id: &str,
    ) -> Result<bool, TeamError> {
        let g = self.pg.client().await?;
        let c = g.as_ref().expect("connected");
        let n = c
            .execute(
                "DELETE FROM memex_team_sessions
                 WHERE member_id = $1 AND agent = $2 AND session_id = $3",
                &[&me.id, &agent, &session_id],
            )
            .await
            .map_err(|e| self.sql(&e))?;
        Ok(n > 0)
    }

    /// What the team holds of `me`: sessions and items per project.
    pub async fn held(&self, me: &Member) -> Result<Vec<(String, u64, u64)>, TeamError> {
        let g = self.pg.client().await?;
        let c = g.as_ref().expect("connected");
        let rows = c
            .query(
                "SELECT s.project, count(DISTINCT s.id),
                        count(i.id)
                 FROM memex_team_sessions s LEFT JOIN memex_team_items i ON i.session = s.id
                 WHERE s.member_id = $1 GROUP BY s.project ORDER BY s.project",
                &[&me.id],
            )
            .await
            .map_err(|e| self.sql(&e))?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get(0),
                    r.get::<_, i64>(1) as u64,
                    r.get::<_, i64>(2) as u64,
                )
            })
            .collect())
    }
}
