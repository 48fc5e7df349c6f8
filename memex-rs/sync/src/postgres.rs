//! The target that is a PostgreSQL database (`postgres://…`): an engine people already run and
//! back up, reached directly, with no Memex server in front of it. Two tables, both holding
//! only what the target may know (ids, numbers, sealed bytes, times):
//!
//! ```sql
//! memex_sync_archive (id = 1, layout, archive, key_id)
//! memex_sync_batches (host, seq, data bytea, stored_at)   primary key (host, seq)
//! ```
//!
//! A batch goes in with `ON CONFLICT DO NOTHING`: a place is filled once. The client keeps one
//! connection and opens a new one after the server went away (a restart, a network cut).

use std::collections::BTreeMap;

use tokio::sync::Mutex;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

use crate::key::KeyId;
use crate::seal::MAX_SEALED;
use crate::target::{ArchiveInfo, LAYOUT, Target, TargetError};

/// A PostgreSQL target.
pub struct Postgres {
    config: tokio_postgres::Config,
    shown: String,
    client: Mutex<Option<Client>>,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Postgres({})", self.shown)
    }
}

impl Postgres {
    /// The target at `url` (`postgres://user:password@host:port/database`, or PostgreSQL's
    /// key=value form). Nothing is connected until it is used.
    pub fn new(url: &str) -> Result<Postgres, TargetError> {
        let config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| TargetError::BadUrl(format!("it cannot be read as PostgreSQL's: {e}")))?;
        let host = config
            .get_hosts()
            .first()
            .map(|h| match h {
                tokio_postgres::config::Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
            })
            .unwrap_or_else(|| "localhost".into());
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let shown = format!(
            "postgres://{}{host}:{port}/{}",
            config
                .get_user()
                .map(|u| format!("{u}@"))
                .unwrap_or_default(),
            config.get_dbname().unwrap_or_default()
        );
        Ok(Postgres {
            config,
            shown,
            client: Mutex::new(None),
        })
    }

    fn err(&self, e: &tokio_postgres::Error) -> TargetError {
        let detail = match e.as_db_error() {
            Some(db) => db.message().to_owned(),
            None => e.to_string(),
        };
        match e.code() {
            Some(c) if *c == SqlState::INSUFFICIENT_PRIVILEGE => TargetError::Denied {
                target: self.shown.clone(),
                detail,
            },
            Some(c)
                if *c == SqlState::INVALID_PASSWORD
                    || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
            {
                TargetError::Denied {
                    target: self.shown.clone(),
                    detail,
                }
            }
            Some(_) => TargetError::Unexpected {
                target: self.shown.clone(),
                detail,
            },
            None => TargetError::Unreachable {
                target: self.shown.clone(),
                detail,
            },
        }
    }

    /// The connection, opened when there is none or the last one closed.
    async fn client(&self) -> Result<tokio::sync::MutexGuard<'_, Option<Client>>, TargetError> {
        let mut guard = self.client.lock().await;
        if guard.as_ref().is_none_or(Client::is_closed) {
            let (client, connection) =
                self.config.connect(NoTls).await.map_err(|e| self.err(&e))?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "the sync database connection ended");
                }
            });
            *guard = Some(client);
        }
        Ok(guard)
    }

    fn unexpected(&self, detail: impl Into<String>) -> TargetError {
        TargetError::Unexpected {
            target: self.shown.clone(),
            detail: detail.into(),
        }
    }
}

fn seq_param(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

impl Target for Postgres {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    async fn archive(&self) -> Result<Option<ArchiveInfo>, TargetError> {
        let g = self.client().await?;
        let c = g.as_ref().expect("connected");
        let row = match c
            .query_opt(
                "SELECT layout, archive, key_id FROM memex_sync_archive WHERE id = 1",
                &[],
            )
            .await
        {
            Ok(r) => r,
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => return Ok(None),
            Err(e) => return Err(self.err(&e)),
        };
        let Some(row) = row else { return Ok(None) };
        let layout: i32 = row.get(0);
        let layout = u32::try_from(layout).map_err(|_| self.unexpected("a negative layout"))?;
        if layout > LAYOUT {
            return Err(TargetError::TooNew {
                target: self.shown.clone(),
                found: layout,
            });
        }
        let archive: String = row.get(1);
        let key_id: String = row.get(2);
        if !crate::is_id(&archive) {
            return Err(self.unexpected("the archive id is malformed"));
        }
        let key_id = key_id
            .parse::<KeyId>()
            .map_err(|e| self.unexpected(e.to_string()))?;
        Ok(Some(ArchiveInfo {
            archive,
            key_id,
            layout,
        }))
    }

    async fn prepare(&self, info: &ArchiveInfo) -> Result<(), TargetError> {
        {
            let g = self.client().await?;
            let c = g.as_ref().expect("connected");
            c.batch_execute(
                "CREATE TABLE IF NOT EXISTS memex_sync_archive (
                     id INTEGER PRIMARY KEY CHECK (id = 1),
                     layout INTEGER NOT NULL,
                     archive TEXT NOT NULL,
                     key_id TEXT NOT NULL);
                 CREATE TABLE IF NOT EXISTS memex_sync_batches (
                     host TEXT NOT NULL,
                     seq BIGINT NOT NULL CHECK (seq > 0),
                     data BYTEA NOT NULL,
                     stored_at TIMESTAMPTZ NOT NULL DEFAULT now(),
                     PRIMARY KEY (host, seq));",
            )
            .await
            .map_err(|e| self.err(&e))?;
            c.execute(
                "INSERT INTO memex_sync_archive (id, layout, archive, key_id) VALUES (1, $1, $2, $3)
                 ON CONFLICT (id) DO NOTHING",
                &[&(LAYOUT as i32), &info.archive, &info.key_id.to_string()],
            )
            .await
            .map_err(|e| self.err(&e))?;
        }
        match self.archive().await? {
            Some(found) if found.archive == info.archive && found.key_id == info.key_id => Ok(()),
            Some(found) => Err(TargetError::OtherArchive {
                target: self.shown.clone(),
                found: found.archive,
                wanted: info.archive.clone(),
            }),
            None => Err(self.unexpected("the archive row is missing after it was written")),
        }
    }

    async fn heads(&self) -> Result<BTreeMap<String, u64>, TargetError> {
        let g = self.client().await?;
        let c = g.as_ref().expect("connected");
        let rows = c
            .query(
                "SELECT host, max(seq) FROM memex_sync_batches GROUP BY host",
                &[],
            )
            .await
            .map_err(|e| self.err(&e))?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let host: String = r.get(0);
                let seq: i64 = r.get(1);
                (crate::is_id(&host) && seq > 0).then_some((host, seq as u64))
            })
            .collect())
    }

    async fn put(&self, host: &str, seq: u64, sealed: Vec<u8>) -> Result<(), TargetError> {
        if !crate::is_id(host) || seq == 0 {
            return Err(self.unexpected(format!("batch {seq} of `{host}` has no valid place")));
        }
        let g = self.client().await?;
        let c = g.as_ref().expect("connected");
        let n = c
            .execute(
                "INSERT INTO memex_sync_batches (host, seq, data) VALUES ($1, $2, $3)
                 ON CONFLICT (host, seq) DO NOTHING",
                &[&host, &seq_param(seq), &sealed],
            )
            .await
            .map_err(|e| self.err(&e))?;
        if n == 0 {
            return Err(TargetError::Taken {
                target: self.shown.clone(),
                host: host.to_owned(),
                seq,
            });
        }
        Ok(())
    }

    async fn get(
        &self,
        host: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>, TargetError> {
        if !crate::is_id(host) {
            return Err(self.unexpected(format!("`{host}` is not a host id")));
        }
        let g = self.client().await?;
        let c = g.as_ref().expect("connected");
        let rows = c
            .query(
                "SELECT seq, data FROM memex_sync_batches WHERE host = $1 AND seq > $2
                 ORDER BY seq LIMIT $3",
                &[&host, &seq_param(after), &(limit.min(1000) as i64)],
            )
            .await
            .map_err(|e| self.err(&e))?;
        let mut out = Vec::with_capacity(rows.len());
        for (want, r) in (after + 1..).zip(rows) {
            let seq: i64 = r.get(0);
            if seq as u64 != want {
                break;
            }
            let data: Vec<u8> = r.get(1);
            if data.len() > MAX_SEALED {
                return Err(self.unexpected(format!(
                    "batch {seq} of host {host} is {} bytes, more than a batch may hold",
                    data.len()
                )));
            }
            out.push((want, data));
        }
        Ok(out)
    }
}
