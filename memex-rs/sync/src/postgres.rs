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
use std::path::PathBuf;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use tokio::sync::{Mutex, mpsc, oneshot};
use tokio_postgres::config::SslMode;
use tokio_postgres::error::SqlState;
use tokio_postgres::{AsyncMessage, Client, NoTls};

use crate::key::KeyId;
use crate::seal::MAX_SEALED;
use crate::target::{ArchiveInfo, LAYOUT, Target, TargetError};

/// A PostgreSQL target.
pub struct Postgres {
    config: tokio_postgres::Config,
    shown: String,
    /// `sslrootcert`: the authorities a TLS server's certificate must chain to (instead of the
    /// system's).
    root_cert: Option<PathBuf>,
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
        let (url, root_cert) = libpq_tls_options(url);
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
            root_cert,
            client: Mutex::new(None),
        })
    }

    /// What a failed statement or connection means to the user ([`TargetError`]).
    pub fn err(&self, e: &tokio_postgres::Error) -> TargetError {
        let detail = match e.as_db_error() {
            Some(db) => db.message().to_owned(),
            None => {
                // What went wrong below ("invalid peer certificate: UnknownIssuer", "connection
                // refused") is in the chain of sources.
                let mut text = e.to_string();
                let mut cause = std::error::Error::source(e);
                while let Some(c) = cause {
                    let c_text = c.to_string();
                    if !text.contains(&c_text) {
                        text = format!("{text}: {c_text}");
                    }
                    cause = c.source();
                }
                text
            }
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

    /// The connection, opened when there is none or the last one closed (also the team
    /// archive's, `memex-team`).
    pub async fn client(&self) -> Result<tokio::sync::MutexGuard<'_, Option<Client>>, TargetError> {
        let mut guard = self.client.lock().await;
        if guard.as_ref().is_none_or(Client::is_closed) {
            let (client, _) = self.connect(None).await?;
            *guard = Some(client);
        }
        Ok(guard)
    }

    /// A new connection, with TLS when the URL asks for it (`sslmode=require`). Its driver runs
    /// on a task of its own; with `notices`, the notifications it receives go there, and the
    /// future returned with the client ends when the connection does or nobody reads them.
    async fn connect(
        &self,
        notices: Option<mpsc::Sender<String>>,
    ) -> Result<(Client, oneshot::Receiver<()>), TargetError> {
        let (ended_tx, ended) = oneshot::channel();
        let client = match self.tls()? {
            None => {
                let (c, conn) = self.config.connect(NoTls).await.map_err(|e| self.err(&e))?;
                tokio::spawn(drive(conn, notices, ended_tx));
                c
            }
            Some(tls) => {
                let (c, conn) = self.config.connect(tls).await.map_err(|e| self.err(&e))?;
                tokio::spawn(drive(conn, notices, ended_tx));
                c
            }
        };
        Ok((client, ended))
    }

    /// The TLS connector `sslmode=require` asks for: the server's certificate must chain to an
    /// authority this system trusts (its store, or the file `SSL_CERT_FILE` names) and name
    /// the host. Other modes connect without TLS.
    fn tls(&self) -> Result<Option<tokio_postgres_rustls::MakeRustlsConnect>, TargetError> {
        if self.config.get_ssl_mode() != SslMode::Require {
            return Ok(None);
        }
        let mut roots = rustls::RootCertStore::empty();
        let certs: Vec<CertificateDer<'static>> = match &self.root_cert {
            Some(file) => CertificateDer::pem_file_iter(file)
                .and_then(|certs| certs.collect::<Result<_, _>>())
                .map_err(|e| {
                    TargetError::BadUrl(format!(
                        "sslrootcert {} cannot be read as PEM certificates: {e}",
                        file.display()
                    ))
                })?,
            None => rustls_native_certs::load_native_certs().certs,
        };
        for cert in certs {
            // A certificate rustls cannot use is left out, as browsers do.
            let _ = roots.add(cert);
        }
        if roots.is_empty() {
            return Err(TargetError::BadUrl(
                "sslmode=require, but no certificate authority is trusted: install \
                 ca-certificates, or name your server's with sslrootcert=FILE"
                    .into(),
            ));
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| self.unexpected(format!("TLS cannot be set up: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Some(tokio_postgres_rustls::MakeRustlsConnect::new(config)))
    }

    fn unexpected(&self, detail: impl Into<String>) -> TargetError {
        TargetError::Unexpected {
            target: self.shown.clone(),
            detail: detail.into(),
        }
    }
}

/// Takes what libpq accepts and `tokio-postgres` does not out of a connection string:
/// `sslrootcert=FILE` (returned), and `sslmode=verify-ca` or `verify-full` (read as `require`,
/// which verifies the certificate and the host name here). Both URL (`?a=b&c=d`) and
/// key=value forms.
fn libpq_tls_options(url: &str) -> (String, Option<PathBuf>) {
    let mut root = None;
    let mut keep = |pair: &str| -> Option<String> {
        let (k, v) = pair.split_once('=')?;
        match k {
            "sslrootcert" => {
                root = Some(PathBuf::from(percent_decode(v)));
                None
            }
            "sslmode" if matches!(v, "verify-ca" | "verify-full") => {
                Some("sslmode=require".to_owned())
            }
            _ => Some(pair.to_owned()),
        }
    };
    let out = if url.contains("://") {
        match url.split_once('?') {
            Some((base, query)) => {
                let kept: Vec<String> = query
                    .split('&')
                    .filter_map(|p| keep(p).or_else(|| (!p.contains('=')).then(|| p.to_owned())))
                    .collect();
                if kept.is_empty() {
                    base.to_owned()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
            None => url.to_owned(),
        }
    } else {
        url.split_whitespace()
            .filter_map(|p| keep(p).or_else(|| (!p.contains('=')).then(|| p.to_owned())))
            .collect::<Vec<_>>()
            .join(" ")
    };
    (out, root)
}

/// `%XX` escapes of a URL's query value decoded (a path may hold `%2F` or `%20`).
fn percent_decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(h) = v
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(h);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Drives a connection until it ends: its notifications go to `notices` (when given, and as
/// long as someone reads them); `ended` is told at the end.
async fn drive<S, T>(
    mut conn: tokio_postgres::Connection<S, T>,
    notices: Option<mpsc::Sender<String>>,
    ended: oneshot::Sender<()>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let closed = async {
        match &notices {
            Some(tx) => tx.closed().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(closed);
    loop {
        tokio::select! {
            m = std::future::poll_fn(|cx| conn.poll_message(cx)) => match m {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if let Some(tx) = &notices {
                        // A full channel already says "look now".
                        let _ = tx.try_send(n.payload().to_owned());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "the sync database connection ended");
                    break;
                }
                None => break,
            },
            () = &mut closed => break,
        }
    }
    let _ = ended.send(());
}

/// The notification channel a new batch is announced on.
const CHANNEL: &str = "memex_sync";

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
        // The machines that listen pull now rather than at their next look. The channel
        // carries the host id only; a failure here loses nothing (they look on an interval).
        if let Err(e) = c
            .execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &host])
            .await
        {
            tracing::debug!(error = %e, "cannot notify the other machines of a new batch");
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

    async fn watch(&self) -> Result<Option<mpsc::Receiver<String>>, TargetError> {
        let (tx, rx) = mpsc::channel(64);
        let (client, listening) = self.connect(Some(tx)).await?;
        let sql = format!("LISTEN {CHANNEL}");
        client.batch_execute(&sql).await.map_err(|e| self.err(&e))?;
        // The connection lives as long as its client: kept until nobody listens any more or
        // the server goes away.
        tokio::spawn(async move {
            let _ = listening.await;
            drop(client);
        });
        Ok(Some(rx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg_server::PgServer;

    #[test]
    fn libpq_tls_options_are_taken_out_of_the_url() {
        let (url, root) = libpq_tls_options(
            "postgres://me@db/memex?sslmode=verify-full&sslrootcert=%2Fetc%2Fmy%20ca.pem&application_name=x",
        );
        assert_eq!(
            url,
            "postgres://me@db/memex?sslmode=require&application_name=x"
        );
        assert_eq!(root, Some(PathBuf::from("/etc/my ca.pem")));
        let (url, root) = libpq_tls_options("host=db sslrootcert=/ca.pem user=me");
        assert_eq!(
            (url.as_str(), root),
            ("host=db user=me", Some(PathBuf::from("/ca.pem")))
        );
        let (url, root) = libpq_tls_options("postgres://db/x?sslrootcert=/ca.pem");
        assert_eq!(
            (url.as_str(), root),
            ("postgres://db/x", Some(PathBuf::from("/ca.pem")))
        );
        assert_eq!(libpq_tls_options("postgres://db/x").0, "postgres://db/x");
    }

    /// `sslmode=require` speaks TLS and checks the server: its authority named by
    /// `sslrootcert` works; another authority, or a server without TLS, is a clear error.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tls_when_the_url_asks_for_it_with_the_certificate_checked() {
        let (pg, ca) = PgServer::start_tls();
        let url = |extra: &str| format!("{}?sslmode=require{extra}", pg.url());
        let info = ArchiveInfo {
            archive: crate::new_id(),
            key_id: crate::key::SyncKey::generate().id(),
            layout: LAYOUT,
        };
        let t = Postgres::new(&url(&format!("&sslrootcert={}", ca.display()))).unwrap();
        t.prepare(&info).await.unwrap();
        let host = crate::new_id();
        t.put(&host, 1, b"sealed".to_vec()).await.unwrap();
        assert_eq!(
            t.get(&host, 0, 10).await.unwrap(),
            vec![(1, b"sealed".to_vec())]
        );
        // The server saw this session encrypted.
        let g = t.client().await.unwrap();
        let ssl: bool = g
            .as_ref()
            .unwrap()
            .query_one(
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(ssl);
        drop(g);

        // Another authority: refused before anything is sent.
        let other = pg_other_ca(&ca);
        let e = Postgres::new(&url(&format!("&sslrootcert={}", other.display())))
            .unwrap()
            .heads()
            .await
            .unwrap_err();
        assert!(matches!(e, TargetError::Unreachable { .. }), "{e}");
        assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
        // A certificate file that is not one.
        let e = Postgres::new(&url("&sslrootcert=/dev/null"))
            .unwrap()
            .heads()
            .await
            .unwrap_err();
        assert!(e.to_string().contains("sslrootcert"), "{e}");

        // A server without TLS, asked for it.
        let plain = PgServer::start();
        let e = Postgres::new(&format!("{}?sslmode=require", plain.url()))
            .unwrap()
            .heads()
            .await
            .unwrap_err();
        assert!(
            e.to_string().to_lowercase().contains("tls") || e.to_string().contains("SSL"),
            "{e}"
        );
    }

    /// A self-signed authority beside `ca` that signed nothing the server holds.
    fn pg_other_ca(ca: &std::path::Path) -> PathBuf {
        let dir = ca.parent().unwrap();
        let out = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "other.key",
                "-out",
                "other.pem",
                "-days",
                "2",
                "-subj",
                "/CN=someone else",
            ])
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success());
        dir.join("other.pem")
    }
}
