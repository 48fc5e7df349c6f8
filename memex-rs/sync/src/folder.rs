//! The target that is a directory, for people without a database: a folder that Syncthing,
//! Dropbox, NFS or `rsync` carries between their machines.
//!
//! ```text
//!  <folder>/memex-sync.json                 {"layout": 1, "archive": "…", "key_id": "…"}
//!  <folder>/hosts/<host id>/<seq>.mxb       one sealed batch, seq as 20 digits
//! ```
//!
//! A batch is written beside its place and linked into it, which fails if the place is taken:
//! a batch is never overwritten, and a reader never sees half of one. Whatever else the folder
//! holds (a carrier's temporary files, a stray link, another program's files) is skipped:
//! names are checked, links are not followed, only regular files are read, and no more than
//! [`MAX_BATCH_FILE`] bytes of one.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::key::KeyId;
use crate::target::{ArchiveInfo, LAYOUT, Target, TargetError};

const INFO_FILE: &str = "memex-sync.json";
const HOSTS: &str = "hosts";
const SUFFIX: &str = ".mxb";
/// The largest batch file read (a sealed batch is its compressed payload and 64 bytes).
pub const MAX_BATCH_FILE: u64 = 64 << 20;

/// A folder target.
#[derive(Debug, Clone)]
pub struct Folder {
    root: PathBuf,
}

#[derive(Serialize, Deserialize)]
struct InfoFile {
    layout: u32,
    archive: String,
    key_id: String,
}

impl Folder {
    /// The target at `root` (`file:///path` in the config; the folder need not exist before
    /// [`Target::prepare`]).
    pub fn new(root: impl Into<PathBuf>) -> Folder {
        Folder { root: root.into() }
    }

    /// The folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn name(&self) -> String {
        format!("file://{}", self.root.display())
    }

    fn io(&self, what: &str, e: std::io::Error) -> TargetError {
        let detail = format!("{what}: {e}");
        match e.kind() {
            std::io::ErrorKind::PermissionDenied => TargetError::Denied {
                target: self.name(),
                detail,
            },
            _ => TargetError::Unreachable {
                target: self.name(),
                detail,
            },
        }
    }

    fn unexpected(&self, detail: impl Into<String>) -> TargetError {
        TargetError::Unexpected {
            target: self.name(),
            detail: detail.into(),
        }
    }

    fn read_info(&self) -> Result<Option<ArchiveInfo>, TargetError> {
        let path = self.root.join(INFO_FILE);
        let bytes = match read_regular(&path, 64 << 10) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if !self.root.is_dir() {
                    return Err(self.io(
                        "the folder",
                        std::io::Error::new(std::io::ErrorKind::NotFound, "it does not exist"),
                    ));
                }
                return Ok(None);
            }
            Err(e) => return Err(self.io(INFO_FILE, e)),
        };
        let info: InfoFile = serde_json::from_slice(&bytes)
            .map_err(|e| self.unexpected(format!("{INFO_FILE} cannot be read: {e}")))?;
        if info.layout > LAYOUT {
            return Err(TargetError::TooNew {
                target: self.name(),
                found: info.layout,
            });
        }
        let key_id = info
            .key_id
            .parse::<KeyId>()
            .map_err(|e| self.unexpected(format!("{INFO_FILE}: {e}")))?;
        if !crate::is_id(&info.archive) {
            return Err(self.unexpected(format!("{INFO_FILE}: the archive id is malformed")));
        }
        Ok(Some(ArchiveInfo {
            archive: info.archive,
            key_id,
            layout: info.layout,
        }))
    }

    fn write_info(&self, info: &ArchiveInfo) -> Result<(), TargetError> {
        if let Some(found) = self.read_info_or_absent()? {
            return if found.archive == info.archive && found.key_id == info.key_id {
                Ok(())
            } else {
                Err(TargetError::OtherArchive {
                    target: self.name(),
                    found: found.archive,
                    wanted: info.archive.clone(),
                })
            };
        }
        make_private_dir(&self.root.join(HOSTS)).map_err(|e| self.io("creating the folder", e))?;
        let text = serde_json::to_vec_pretty(&InfoFile {
            layout: LAYOUT,
            archive: info.archive.clone(),
            key_id: info.key_id.to_string(),
        })
        .expect("plain fields serialize");
        match place_new(&self.root, INFO_FILE, &text) {
            Ok(()) => Ok(()),
            // Another machine prepared it at the same moment: what it wrote decides.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => self.write_info(info),
            Err(e) => Err(self.io(INFO_FILE, e)),
        }
    }

    fn read_info_or_absent(&self) -> Result<Option<ArchiveInfo>, TargetError> {
        if !self.root.exists() {
            return Ok(None);
        }
        self.read_info()
    }

    fn host_dir(&self, host: &str) -> Result<PathBuf, TargetError> {
        if !crate::is_id(host) {
            return Err(self.unexpected(format!("`{host}` is not a host id")));
        }
        let hosts = self.root.join(HOSTS);
        let dir = hosts.join(host);
        for p in [&hosts, &dir] {
            not_a_link(p).map_err(|e| match e.kind() {
                std::io::ErrorKind::InvalidData => self.unexpected(e.to_string()),
                _ => self.io("the host's folder", e),
            })?;
        }
        Ok(dir)
    }

    fn heads_now(&self) -> Result<BTreeMap<String, u64>, TargetError> {
        let mut out = BTreeMap::new();
        not_a_link(&self.root.join(HOSTS)).map_err(|e| self.unexpected(e.to_string()))?;
        let hosts = match std::fs::read_dir(self.root.join(HOSTS)) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(self.io("listing hosts", e)),
        };
        for entry in hosts {
            let entry = entry.map_err(|e| self.io("listing hosts", e))?;
            let Some(host) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if !crate::is_id(&host) || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let seqs = self.seqs(&entry.path())?;
            if let Some(&last) = seqs.last() {
                out.insert(host, last);
            }
        }
        Ok(out)
    }

    /// The sequence numbers of the batches in a host's folder, ascending.
    fn seqs(&self, dir: &Path) -> Result<Vec<u64>, TargetError> {
        let mut seqs = Vec::new();
        let entries = match std::fs::read_dir(dir) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(seqs),
            Err(e) => return Err(self.io("listing batches", e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| self.io("listing batches", e))?;
            if let Some(seq) = entry.file_name().to_str().and_then(seq_of)
                && entry.file_type().is_ok_and(|t| t.is_file())
            {
                seqs.push(seq);
            }
        }
        seqs.sort_unstable();
        Ok(seqs)
    }

    fn put_now(&self, host: &str, seq: u64, sealed: &[u8]) -> Result<(), TargetError> {
        if seq == 0 {
            return Err(self.unexpected("batches are numbered from 1"));
        }
        let dir = self.host_dir(host)?;
        make_private_dir(&dir).map_err(|e| self.io("creating the host's folder", e))?;
        match place_new(&dir, &file_name(seq), sealed) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(TargetError::Taken {
                target: self.name(),
                host: host.to_owned(),
                seq,
            }),
            Err(e) => Err(self.io("writing a batch", e)),
        }
    }

    fn get_now(
        &self,
        host: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>, TargetError> {
        let dir = self.host_dir(host)?;
        let mut out = Vec::new();
        let later = self.seqs(&dir)?.into_iter().filter(|&s| s > after);
        for (want, seq) in (after + 1..).zip(later) {
            if seq != want || out.len() >= limit {
                break;
            }
            let path = dir.join(file_name(seq));
            let bytes = read_regular(&path, MAX_BATCH_FILE).map_err(|e| {
                if e.kind() == std::io::ErrorKind::InvalidData {
                    self.unexpected(format!("{}: {e}", path.display()))
                } else {
                    self.io("reading a batch", e)
                }
            })?;
            out.push((seq, bytes));
        }
        Ok(out)
    }
}

fn file_name(seq: u64) -> String {
    format!("{seq:020}{SUFFIX}")
}

fn seq_of(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SUFFIX)?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
        .filter(|&s| s > 0)
}

/// A directory (and its parents) that only its owner can enter, where Memex makes it.
fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

/// Writes `bytes` as `dir/name`, all or nothing: a private temporary file, synced, then put in
/// its place without replacing anything there (`AlreadyExists` when the name is taken), then
/// the folder synced.
fn place_new(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = tempfile::Builder::new()
        .prefix(".memex-sync-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist_noclobber(dir.join(name)).map_err(|e| e.error)?;
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// Refuses a folder of the layout that is a link (only the target's own root may be one: a
/// synced folder is often reached through a link): writing through it would write elsewhere.
fn not_a_link(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is a link", path.display()),
        )),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Reads a regular file of at most `max` bytes, without following a link at its name and
/// without blocking on a FIFO.
fn read_regular(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let mut open = std::fs::OpenOptions::new();
    open.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut open, libc::O_NOFOLLOW | libc::O_NONBLOCK);
    let file = open.open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    if meta.len() > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} bytes, more than a batch may hold", meta.len()),
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Runs blocking file work off the async runtime.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, TargetError> + Send + 'static,
) -> Result<T, TargetError> {
    tokio::task::spawn_blocking(f)
        .await
        .expect("a folder operation panicked")
}

impl Target for Folder {
    fn describe(&self) -> String {
        self.name()
    }

    async fn archive(&self) -> Result<Option<ArchiveInfo>, TargetError> {
        let me = self.clone();
        blocking(move || me.read_info()).await
    }

    async fn prepare(&self, info: &ArchiveInfo) -> Result<(), TargetError> {
        let (me, info) = (self.clone(), info.clone());
        blocking(move || me.write_info(&info)).await
    }

    async fn heads(&self) -> Result<BTreeMap<String, u64>, TargetError> {
        let me = self.clone();
        blocking(move || me.heads_now()).await
    }

    async fn put(&self, host: &str, seq: u64, sealed: Vec<u8>) -> Result<(), TargetError> {
        let (me, host) = (self.clone(), host.to_owned());
        blocking(move || me.put_now(&host, seq, &sealed)).await
    }

    async fn get(
        &self,
        host: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>, TargetError> {
        let (me, host) = (self.clone(), host.to_owned());
        blocking(move || me.get_now(&host, after, limit)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::SyncKey;

    fn info() -> ArchiveInfo {
        ArchiveInfo {
            archive: crate::new_id(),
            key_id: SyncKey::generate().id(),
            layout: LAYOUT,
        }
    }

    #[tokio::test]
    async fn batches_go_in_once_and_come_back_in_order_up_to_a_gap() {
        let dir = tempfile::tempdir().unwrap();
        let f = Folder::new(dir.path().join("sync"));
        assert!(matches!(
            f.archive().await,
            Err(TargetError::Unreachable { .. })
        ));
        let i = info();
        f.prepare(&i).await.unwrap();
        f.prepare(&i).await.unwrap();
        assert_eq!(f.archive().await.unwrap(), Some(i.clone()));
        assert!(matches!(
            f.prepare(&info()).await,
            Err(TargetError::OtherArchive { .. })
        ));
        let (a, b) = (crate::new_id(), crate::new_id());
        for seq in [1, 2, 3, 5] {
            f.put(&a, seq, vec![seq as u8; 10]).await.unwrap();
        }
        f.put(&b, 1, b"b1".to_vec()).await.unwrap();
        assert!(matches!(
            f.put(&a, 2, b"again".to_vec()).await,
            Err(TargetError::Taken { seq: 2, .. })
        ));
        assert_eq!(f.get(&a, 0, 100).await.unwrap()[1], (2, vec![2; 10]));
        // 4 is still on its way: the list stops before it.
        let got: Vec<u64> = f
            .get(&a, 1, 100)
            .await
            .unwrap()
            .iter()
            .map(|b| b.0)
            .collect();
        assert_eq!(got, [2, 3]);
        assert_eq!(f.get(&a, 0, 2).await.unwrap().len(), 2);
        assert_eq!(
            f.heads().await.unwrap(),
            BTreeMap::from([(a.clone(), 5), (b, 1)])
        );
        f.put(&a, 4, vec![4; 10]).await.unwrap();
        assert_eq!(f.get(&a, 3, 100).await.unwrap().len(), 2);
        // No temporary file is left behind, and files are private.
        let hd = dir.path().join("sync/hosts").join(&a);
        let names: Vec<String> = std::fs::read_dir(&hd)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| n.ends_with(SUFFIX)), "{names:?}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&hd), 0o700);
            assert_eq!(mode(&hd.join(file_name(1))), 0o600);
        }
    }

    #[tokio::test]
    async fn what_is_not_memex_s_is_skipped_or_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let f = Folder::new(&root);
        f.prepare(&info()).await.unwrap();
        let a = crate::new_id();
        f.put(&a, 1, b"one".to_vec()).await.unwrap();
        let hd = root.join(HOSTS).join(&a);
        // A carrier's temporary file, a badly named one, a folder not named as a host.
        std::fs::write(hd.join(".syncthing.00000000000000000002.mxb.tmp"), b"x").unwrap();
        std::fs::write(hd.join("2.mxb"), b"x").unwrap();
        std::fs::create_dir(root.join(HOSTS).join("not-a-host")).unwrap();
        assert_eq!(f.heads().await.unwrap(), BTreeMap::from([(a.clone(), 1)]));
        // A link in a batch's place is not followed.
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc/passwd", hd.join(file_name(2))).unwrap();
            assert_eq!(f.get(&a, 0, 10).await.unwrap().len(), 1);
        }
        // A host's folder that is a link is neither read nor written through, and a FIFO in
        // a batch's place does not block the reader.
        #[cfg(unix)]
        {
            let elsewhere = tempfile::tempdir().unwrap();
            let linked = crate::new_id();
            std::os::unix::fs::symlink(elsewhere.path(), root.join(HOSTS).join(&linked)).unwrap();
            assert!(matches!(
                f.put(&linked, 1, b"x".to_vec()).await,
                Err(TargetError::Unexpected { .. })
            ));
            assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
            assert!(matches!(
                f.get(&linked, 0, 10).await,
                Err(TargetError::Unexpected { .. })
            ));
            std::fs::remove_file(root.join(HOSTS).join(&linked)).unwrap();
            let fifo_host = crate::new_id();
            let fd = root.join(HOSTS).join(&fifo_host);
            std::fs::create_dir(&fd).unwrap();
            let fifo =
                std::ffi::CString::new(fd.join(file_name(1)).into_os_string().into_encoded_bytes())
                    .unwrap();
            // SAFETY: a valid C string for the path; mkfifo only creates the node.
            assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
            assert!(f.get(&fifo_host, 0, 10).await.unwrap().is_empty());
            std::fs::remove_dir_all(&fd).unwrap();
        }
        // A host id that could climb out of the folder is refused.
        assert!(matches!(
            f.put("../../etc", 1, vec![]).await,
            Err(TargetError::Unexpected { .. })
        ));
        // An oversized batch file is refused, not read.
        let big = std::fs::File::create(hd.join(file_name(3))).unwrap();
        big.set_len(MAX_BATCH_FILE + 1).unwrap();
        std::fs::remove_file(hd.join(file_name(2))).ok();
        f.put(&a, 2, b"two".to_vec()).await.unwrap();
        assert!(matches!(
            f.get(&a, 0, 10).await,
            Err(TargetError::Unexpected { .. })
        ));
        // A newer layout is named.
        std::fs::write(
            root.join(INFO_FILE),
            format!(
                r#"{{"layout": 9, "archive": "{}", "key_id": "0011223344556677"}}"#,
                crate::new_id()
            ),
        )
        .unwrap();
        assert!(matches!(
            f.archive().await,
            Err(TargetError::TooNew { found: 9, .. })
        ));
        std::fs::write(root.join(INFO_FILE), b"not json").unwrap();
        assert!(matches!(
            f.archive().await,
            Err(TargetError::Unexpected { .. })
        ));
    }
}
