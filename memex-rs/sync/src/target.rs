//! Where sealed batches are kept: one archive, each host's series of batches numbered from 1.
//! A target never reads a batch; it stores, lists and returns bytes. [`crate::folder`] is the
//! target that is a directory; PostgreSQL and object storage implement the same trait.

use std::collections::BTreeMap;
use std::future::Future;

use crate::key::KeyId;

/// The layout of what a target holds (its tables or files), which this build reads and writes.
pub const LAYOUT: u32 = 1;

/// What a target says about the archive it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveInfo {
    /// The archive's id ([`crate::new_id`]).
    pub archive: String,
    /// The id of the key every batch is sealed with.
    pub key_id: KeyId,
    /// The layout the target was prepared with.
    pub layout: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("cannot reach {target}: {detail}")]
    Unreachable { target: String, detail: String },
    #[error("{target}: permission denied ({detail})")]
    Denied { target: String, detail: String },
    #[error(
        "{target} holds no Memex sync archive yet: run `memex sync setup` on your first machine"
    )]
    NoArchive { target: String },
    #[error(
        "{target} was prepared by a newer Memex (layout {found}; this one knows {LAYOUT}): update Memex"
    )]
    TooNew { target: String, found: u32 },
    #[error("{target} holds another archive ({found}); it cannot be prepared again for {wanted}")]
    OtherArchive {
        target: String,
        found: String,
        wanted: String,
    },
    /// Batches are never overwritten: this place was filled before (by an earlier run that
    /// stopped before it could note it).
    #[error("{target} already holds batch {seq} of host {host}")]
    Taken {
        target: String,
        host: String,
        seq: u64,
    },
    #[error("the sync URL cannot be used: {0}")]
    BadUrl(String),
    #[error("{target} holds something that is not Memex's: {detail}")]
    Unexpected { target: String, detail: String },
}

/// A place that keeps an archive's batches. Every method is safe to retry after a failure.
pub trait Target: Send + Sync {
    /// The target as the user named it, without a password.
    fn describe(&self) -> String;

    /// The archive the target holds, if it was prepared.
    fn archive(&self) -> impl Future<Output = Result<Option<ArchiveInfo>, TargetError>> + Send;

    /// Prepares the target for `info` (nothing to do if it already holds that archive).
    fn prepare(&self, info: &ArchiveInfo) -> impl Future<Output = Result<(), TargetError>> + Send;

    /// Each host's highest stored sequence number.
    fn heads(&self) -> impl Future<Output = Result<BTreeMap<String, u64>, TargetError>> + Send;

    /// Stores batch `seq` of `host`; [`TargetError::Taken`] if that place holds one already.
    fn put(
        &self,
        host: &str,
        seq: u64,
        sealed: Vec<u8>,
    ) -> impl Future<Output = Result<(), TargetError>> + Send;

    /// Batches of `host` after `after`, in order and without gaps (a batch still on its way
    /// ends the list there), at most `limit`.
    fn get(
        &self,
        host: &str,
        after: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(u64, Vec<u8>)>, TargetError>> + Send;

    /// Tells of the batches stored from now on, where the target can (PostgreSQL's `LISTEN`):
    /// one message, the host's id, per batch, until the connection ends and the receiver
    /// closes. `None`: it cannot; look on an interval instead.
    fn watch(
        &self,
    ) -> impl Future<Output = Result<Option<tokio::sync::mpsc::Receiver<String>>, TargetError>> + Send
    {
        async { Ok(None) }
    }
}
