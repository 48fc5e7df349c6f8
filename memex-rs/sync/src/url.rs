//! A target named by its URL: `file:///folder` or `postgres://…` (`postgresql://…`).

use std::collections::BTreeMap;

use crate::folder::Folder;
use crate::postgres::Postgres;
use crate::target::{ArchiveInfo, Target, TargetError};

/// Either target, chosen by the URL's scheme.
#[derive(Debug)]
pub enum AnyTarget {
    Folder(Folder),
    Postgres(Box<Postgres>),
}

/// The target `url` names.
pub fn target(url: &str) -> Result<AnyTarget, TargetError> {
    let refused = TargetError::BadUrl;
    if let Some(path) = url.strip_prefix("file://") {
        if !path.starts_with('/') {
            return Err(refused(format!(
                "a folder is named by an absolute path, file:///like/this, got `{url}`"
            )));
        }
        return Ok(AnyTarget::Folder(Folder::new(path)));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(AnyTarget::Postgres(Box::new(Postgres::new(url)?)));
    }
    Err(refused(
        "it must start with postgres:// (a database) or file:/// (a folder)".into(),
    ))
}

impl Target for AnyTarget {
    fn describe(&self) -> String {
        match self {
            AnyTarget::Folder(t) => t.describe(),
            AnyTarget::Postgres(t) => t.describe(),
        }
    }

    async fn archive(&self) -> Result<Option<ArchiveInfo>, TargetError> {
        match self {
            AnyTarget::Folder(t) => t.archive().await,
            AnyTarget::Postgres(t) => t.archive().await,
        }
    }

    async fn prepare(&self, info: &ArchiveInfo) -> Result<(), TargetError> {
        match self {
            AnyTarget::Folder(t) => t.prepare(info).await,
            AnyTarget::Postgres(t) => t.prepare(info).await,
        }
    }

    async fn heads(&self) -> Result<BTreeMap<String, u64>, TargetError> {
        match self {
            AnyTarget::Folder(t) => t.heads().await,
            AnyTarget::Postgres(t) => t.heads().await,
        }
    }

    async fn put(&self, host: &str, seq: u64, sealed: Vec<u8>) -> Result<(), TargetError> {
        match self {
            AnyTarget::Folder(t) => t.put(host, seq, sealed).await,
            AnyTarget::Postgres(t) => t.put(host, seq, sealed).await,
        }
    }

    async fn get(
        &self,
        host: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>, TargetError> {
        match self {
            AnyTarget::Folder(t) => t.get(host, after, limit).await,
            AnyTarget::Postgres(t) => t.get(host, after, limit).await,
        }
    }

    async fn watch(&self) -> Result<Option<tokio::sync::mpsc::Receiver<String>>, TargetError> {
        match self {
            AnyTarget::Folder(t) => t.watch().await,
            AnyTarget::Postgres(t) => t.watch().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_target_or_say_what_is_wrong() {
        assert!(matches!(target("file:///tmp/x"), Ok(AnyTarget::Folder(_))));
        let pg = target("postgres://me:secret@db.example:5433/memex").unwrap();
        assert!(matches!(pg, AnyTarget::Postgres(_)));
        // The password is never shown.
        assert_eq!(pg.describe(), "postgres://me@db.example:5433/memex");
        for bad in ["file://relative/x", "s3://bucket", "/tmp/x", ""] {
            let e = target(bad).unwrap_err().to_string();
            assert!(e.starts_with("the sync URL cannot be used: "), "{bad}: {e}");
        }
    }
}
