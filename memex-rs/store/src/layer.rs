//! The archive's layers: every stored message (L0) and the three compact layers built on it
//! (L1 observations, L2 talk summaries, L3 session summaries). Each part of Memex that names a
//! layer (search, the vector tables and their outbox, the compaction queue, injection) asks
//! this type; its names reach the wire (JSON, SQL, config) only through the methods below.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layer {
    /// Every stored message (L0).
    Raw,
    /// L1: one observation per tool call.
    Observations,
    /// L2: one summary per user prompt.
    Talks,
    /// L3: one summary per session.
    Sessions,
}

/// A compact layer's SQL, over its table aliased `x`: what a hit shows and what is embedded.
pub struct Columns {
    /// The talk a row belongs to (0 for a whole session).
    pub prompt: &'static str,
    /// When the row's content happened.
    pub ts: &'static str,
    /// The text that is indexed, shown and embedded.
    pub text: &'static str,
    /// The `kind` column of its vectors.
    pub vector_kind: &'static str,
    /// Everything of a row its full-text index holds (fed through `fts::index_text`).
    pub fts_body: &'static str,
}

impl Layer {
    pub const ALL: [Layer; 4] = [
        Layer::Raw,
        Layer::Observations,
        Layer::Talks,
        Layer::Sessions,
    ];
    /// The layers compaction writes.
    pub const COMPACT: [Layer; 3] = [Layer::Observations, Layer::Talks, Layer::Sessions];

    /// Its place in [`Layer::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The name at the wire: search's `level`, a hit's `level`, the vector table.
    pub const fn name(self) -> &'static str {
        match self {
            Layer::Raw => "raw",
            Layer::Observations => "observations",
            Layer::Talks => "talks",
            Layer::Sessions => "sessions",
        }
    }

    /// Its SQLite table.
    pub const fn table(self) -> &'static str {
        match self {
            Layer::Raw => "messages",
            Layer::Observations => "observations",
            Layer::Talks => "talk_summaries",
            Layer::Sessions => "session_summaries",
        }
    }

    /// Its full-text index (an FTS5 table whose rowid is the row's id).
    pub const fn fts_table(self) -> &'static str {
        match self {
            Layer::Raw => "messages_fts",
            Layer::Observations => "observations_fts",
            Layer::Talks => "talk_summaries_fts",
            Layer::Sessions => "session_summaries_fts",
        }
    }

    /// Its code in `vector_outbox.tbl` (migration 0004).
    pub const fn outbox_code(self) -> i64 {
        match self {
            Layer::Raw => 0,
            Layer::Observations => 1,
            Layer::Talks => 2,
            Layer::Sessions => 3,
        }
    }

    /// The compaction job that writes it (`compact_jobs.level`); none for the raw layer.
    pub const fn job(self) -> Option<&'static str> {
        match self {
            Layer::Raw => None,
            Layer::Observations => Some("l1"),
            Layer::Talks => Some("l2"),
            Layer::Sessions => Some("l3"),
        }
    }

    /// The layer a compaction job level writes.
    pub fn from_job(level: &str) -> Option<Layer> {
        Layer::COMPACT.into_iter().find(|l| l.job() == Some(level))
    }

    /// What one of its rows is called where a person reads it (injected memory).
    pub const fn item(self) -> &'static str {
        match self {
            Layer::Raw => "message",
            Layer::Observations => "observation",
            Layer::Talks => "talk",
            Layer::Sessions => "session",
        }
    }

    /// The `kind` of a search hit from a compact layer (a raw hit carries its message's kind).
    pub const fn hit_kind(self) -> &'static str {
        match self {
            Layer::Raw => "message",
            Layer::Observations => "observation",
            Layer::Talks => "talk_summary",
            Layer::Sessions => "session_summary",
        }
    }

    /// A compact layer's columns; `None` for the raw layer, whose rows are messages.
    pub const fn columns(self) -> Option<&'static Columns> {
        match self {
            Layer::Raw => None,
            Layer::Observations => Some(&Columns {
                prompt: "x.prompt_number",
                ts: "x.ts",
                text: "x.title || ' — ' || x.subtitle || char(10) || x.narrative",
                vector_kind: "x.type",
                fts_body: "x.title || char(10) || x.subtitle || char(10) || x.narrative || char(10)
                    || (SELECT COALESCE(group_concat(value, char(10)), '') FROM json_each(x.facts))
                    || char(10)
                    || (SELECT COALESCE(group_concat(value, ' '), '') FROM json_each(x.files_modified))
                    || ' '
                    || (SELECT COALESCE(group_concat(value, ' '), '') FROM json_each(x.files_read))",
            }),
            Layer::Talks => Some(&Columns {
                prompt: "x.prompt_number",
                ts: "x.ts",
                text: "x.user_request || char(10) || x.summary",
                vector_kind: "'talk'",
                fts_body: "x.user_request || char(10) || x.summary || char(10) || x.completed
                    || char(10)
                    || (SELECT COALESCE(group_concat(value, ' '), '') FROM json_each(x.files_involved))",
            }),
            Layer::Sessions => Some(&Columns {
                prompt: "0",
                ts: "x.updated_at",
                text: "x.summary",
                vector_kind: "'session'",
                fts_body: "x.summary || char(10)
                    || (SELECT COALESCE(group_concat(value, char(10)), '') FROM json_each(x.key_points))
                    || char(10)
                    || (SELECT COALESCE(group_concat(value, ' '), '') FROM json_each(x.technologies))
                    || char(10)
                    || (SELECT COALESCE(group_concat(value, ' '), '') FROM json_each(x.files_involved))",
            }),
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is none of those accepted (a layer, a search level or mode, an agent): the
/// error of every parser of a closed set of names. Its text follows the name of whatever held
/// it: "`level` must be one of …, got `…`".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be one of {}, got `{got}`", .accepted.join(", "))]
pub struct UnknownName {
    pub got: String,
    pub accepted: Vec<&'static str>,
}

impl UnknownName {
    pub fn new(got: &str, accepted: impl IntoIterator<Item = &'static str>) -> UnknownName {
        UnknownName {
            got: got.to_owned(),
            accepted: accepted.into_iter().collect(),
        }
    }
}

impl FromStr for Layer {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Layer, UnknownName> {
        Layer::ALL
            .into_iter()
            .find(|l| l.name() == s)
            .ok_or_else(|| UnknownName::new(s, Layer::ALL.map(Layer::name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_as_its_layer() {
        for l in Layer::ALL {
            assert_eq!(l.name().parse::<Layer>(), Ok(l));
            assert_eq!(Layer::ALL[l.outbox_code() as usize], l);
            assert_eq!(Layer::ALL[l.index()], l);
            assert_eq!(l.job().and_then(Layer::from_job), l.job().map(|_| l));
            assert_eq!(l.columns().is_none(), l == Layer::Raw);
        }
        let e = "all".parse::<Layer>().unwrap_err();
        assert_eq!(e.got, "all");
        assert_eq!(e.accepted, ["raw", "observations", "talks", "sessions"]);
        assert_eq!(
            e.to_string(),
            "must be one of raw, observations, talks, sessions, got `all`"
        );
        assert_eq!(Layer::from_job("l4"), None);
    }
}
