//! This machine's membership of a team (`memex team`, `memex share`): where the team archive is
//! and this member's token (files in the data folder, readable by their owner only), and one
//! push of what the share levels allow, with the vectors this archive has (`memex-team`). The
//! CLI and the service (`service::team`) both push through [`push_once`].

use std::collections::HashMap;
use std::path::Path;

use memex_team::TeamError;
use memex_team::archive::Team;
use memex_team::share::{self, ConfigRule, Pushed, VectorSource};
use memex_team::token::Token;

use crate::layer::Layer;

/// The team archive's URL, in the data folder.
pub const URL_FILE: &str = "team.url";
/// This member's token, in the data folder.
pub const TOKEN_FILE: &str = "team.token";

/// What the data folder holds of a team this machine can not use, and why.
#[derive(Debug, thiserror::Error)]
pub enum JoinedError {
    #[error("{file} cannot be read: {why}")]
    Token { file: String, why: String },
    #[error("{0}")]
    Url(TeamError),
}

/// The team this machine joined (`None`: it joined none), from the data folder.
pub fn joined(data_dir: &Path) -> Result<Option<(Team, Token)>, JoinedError> {
    let (Ok(url), Ok(token)) = (
        std::fs::read_to_string(data_dir.join(URL_FILE)),
        std::fs::read_to_string(data_dir.join(TOKEN_FILE)).map(zeroize::Zeroizing::new),
    ) else {
        return Ok(None);
    };
    let token = Token::parse(&token).map_err(|e| JoinedError::Token {
        file: data_dir.join(TOKEN_FILE).display().to_string(),
        why: e.to_string(),
    })?;
    let team = Team::new(url.trim()).map_err(JoinedError::Url)?;
    Ok(Some((team, token)))
}

/// The vectors this archive has (its LanceDB folder and the model that made them), for a push.
pub enum Source {
    Lance {
        store: Box<crate::vector::VectorStore>,
        model: String,
        dims: usize,
    },
    None,
}

impl Source {
    /// The archive's vectors, when it has any.
    pub async fn open(data_dir: &Path, conn: &rusqlite::Connection) -> Source {
        match crate::vector::stored_model(conn) {
            Ok(Some((model, dims))) if dims > 0 && crate::vector::dir(data_dir).is_dir() => {
                match crate::vector::VectorStore::open(data_dir, dims).await {
                    Ok(store) => Source::Lance {
                        store: Box::new(store),
                        model,
                        dims,
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, "the vectors cannot be opened; rows go to the team without them");
                        Source::None
                    }
                }
            }
            _ => Source::None,
        }
    }
}

impl VectorSource for Source {
    fn model(&self) -> Option<(String, usize)> {
        match self {
            Source::Lance { model, dims, .. } => Some((model.clone(), *dims)),
            Source::None => None,
        }
    }

    async fn vectors(&self, layer: Layer, refs: &[i64]) -> HashMap<i64, Vec<Vec<f32>>> {
        match self {
            Source::Lance { store, .. } => store.vectors_of(layer, refs).await.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "vectors could not be read for the team; rows go without");
                HashMap::new()
            }),
            Source::None => HashMap::new(),
        }
    }
}

/// This machine's name in the team.
pub fn host_name() -> String {
    memex_sync::machine_name().unwrap_or_else(|| "unnamed".to_owned())
}

/// One push: the member the token names, then what the levels allow (and no more).
pub async fn push_once(
    data_dir: &Path,
    conn: &rusqlite::Connection,
    team: &Team,
    token: &Token,
    config: &[ConfigRule],
) -> Result<Pushed, TeamError> {
    let me = team.authenticate(token).await?;
    let vectors = Source::open(data_dir, conn).await;
    share::push(conn, team, &me, &host_name(), config, &vectors).await
}
