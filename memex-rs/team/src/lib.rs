//! Team memory (issue 45): each member chooses what the team sees of their archive, per project
//! and per session, and the team searches it in one PostgreSQL database.
//!
//! ```text
//!  member's archive (SQLite) ──share::push──▶ team archive (PostgreSQL: text, tsvector, pgvector)
//!        rules: hidden | summaries | full        ▲ search (words + vectors, RRF), per member
//! ```
//!
//! - [`archive`][]: the team archive's tables, members, tokens and who reads which project.
//! - [`store`][]: what a member's machine writes there and takes back.
//! - [`search`][]: a member's search of the projects they may read.
//! - [`read`][]: the projects, sessions and rows a member may read.
//! - [`share`][]: this machine's side: the levels it shares at, and the push that makes the
//!   team archive hold what they allow and nothing more.
//! - [`token`][]: members' tokens, kept hashed.
//!
//! Unlike personal sync, what is shared is stored readable (it is redacted where it was
//! archived): the team's database must search it.

pub mod archive;
pub mod read;
pub mod search;
pub mod share;
pub mod store;
pub mod token;

use memex_sync::target::TargetError;

/// How much of a session the team sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Level {
    /// Nothing leaves the machine (the default).
    #[default]
    Hidden,
    /// Titles, talk summaries and session summaries (with the files and commands they name);
    /// no message text, no tool output.
    Summaries,
    /// Messages as archived (redacted) and every compact layer.
    Full,
}

/// What `--level` accepts.
pub const LEVELS: &[&str] = &["hidden", "summaries", "full"];

impl Level {
    pub const fn name(self) -> &'static str {
        match self {
            Level::Hidden => "hidden",
            Level::Summaries => "summaries",
            Level::Full => "full",
        }
    }

    /// The layers a session shared at this level sends.
    pub fn layers(self) -> &'static [memex_store::layer::Layer] {
        use memex_store::layer::Layer;
        match self {
            Level::Hidden => &[],
            Level::Summaries => &[Layer::Talks, Layer::Sessions],
            Level::Full => &Layer::ALL,
        }
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Level {
    type Err = memex_store::layer::UnknownName;

    fn from_str(s: &str) -> Result<Level, Self::Err> {
        Ok(match s {
            "hidden" => Level::Hidden,
            "summaries" => Level::Summaries,
            "full" => Level::Full,
            other => {
                return Err(memex_store::layer::UnknownName::new(
                    other,
                    LEVELS.iter().copied(),
                ));
            }
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TeamError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error("the team URL cannot be used: {0}")]
    BadUrl(String),
    #[error("{0} holds no Memex team archive: `memex team create URL` prepares one")]
    NoTeam(String),
    #[error("{0} holds a Memex team archive already")]
    Exists(String),
    #[error(
        "{target} was prepared by a newer Memex (team layout {found}; this one knows {}): update Memex",
        archive::LAYOUT
    )]
    TooNew { target: String, found: i32 },
    #[error(
        "{target} cannot hold vectors: the PostgreSQL extension `vector` (pgvector) is not available \
         ({detail}); install it on the server (for example Debian's postgresql-NN-pgvector) or ask \
         its administrator to run CREATE EXTENSION vector"
    )]
    NoPgvector { target: String, detail: String },
    #[error("the token is not valid for this team: unknown, revoked or mistyped")]
    BadToken,
    #[error("{0} is not an admin of the team")]
    NotAdmin(String),
    #[error("the team has no member named `{0}`")]
    NoMember(String),
    #[error(
        "the team's vectors were made by {model} ({dims} dimensions); these are {got} \
         ({got_dims}): one archive holds one model's vectors"
    )]
    MixedVectors {
        model: String,
        dims: i32,
        got: String,
        got_dims: i32,
    },
    #[error("the local archive: {0}")]
    Local(#[from] rusqlite::Error),
    #[error("{0}")]
    Invalid(String),
}

/// A member's name: 1 to 64 letters, digits and `.`, `_`, `-`, `@`.
pub fn check_name(name: &str) -> Result<(), TeamError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@'));
    if ok {
        Ok(())
    } else {
        Err(TeamError::Invalid(format!(
            "a member's name is 1 to 64 letters, digits and . _ - @ (got {} characters{})",
            name.chars().count(),
            if name.len() <= 64 {
                format!(": `{}`", name.escape_default())
            } else {
                String::new()
            }
        )))
    }
}

/// A project's name in the team: 1 to 200 characters, none of them a control character.
pub fn check_project(name: &str) -> Result<(), TeamError> {
    let ok = !name.trim().is_empty()
        && name.chars().count() <= 200
        && !name.chars().any(char::is_control);
    if ok {
        Ok(())
    } else {
        Err(TeamError::Invalid(
            "a project's name in the team is 1 to 200 characters, with no control characters"
                .into(),
        ))
    }
}

#[cfg(test)]
mod tests;
