//! A search as it arrives from outside, checked in one place for every surface: the CLI's
//! flags, the HTTP query string and the MCP tool's arguments all become a [`SearchRequest`],
//! and [`SearchRequest::check`] turns it into [`SearchParams`] or names what was wrong.

use super::{Mode, Scope, SearchParams, parse_time};
use crate::store::read::Filter;

/// The longest query accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 2000;

/// A search's parameters as a surface received them; empty texts count as not given.
#[derive(Debug, Clone, Default)]
pub struct SearchRequest {
    pub query: String,
    pub limit: Option<u64>,
    pub agent: Option<String>,
    pub project: Option<String>,
    pub session: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub level: Option<String>,
    pub mode: Option<String>,
}

/// A parameter that cannot be used: its name (as [`SearchRequest`] spells it; each surface
/// shows it its own way, `--since` or `` `since` ``) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{name}` {reason}")]
pub struct BadParam {
    pub name: &'static str,
    pub reason: String,
}

fn bad(name: &'static str, reason: impl Into<String>) -> BadParam {
    BadParam {
        name,
        reason: reason.into(),
    }
}

/// Whether `name` is an agent Memex reads; the error lists the ones it does.
pub fn check_agent(name: &str) -> Result<(), String> {
    let names = ai_cli_session_collector::AdapterRegistry::new().names();
    if names.contains(&name) {
        Ok(())
    } else {
        Err(format!("must be one of {}, got `{name}`", names.join(", ")))
    }
}

fn given(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

impl SearchRequest {
    /// Checks every parameter. `limit` defaults to 10 and may be at most `max_limit`.
    pub fn check(self, max_limit: u64) -> Result<SearchParams, BadParam> {
        if self.query.len() > MAX_QUERY_BYTES {
            return Err(bad(
                "query",
                format!(
                    "is {} bytes; at most {MAX_QUERY_BYTES} are accepted",
                    self.query.len()
                ),
            ));
        }
        let limit = match self.limit {
            None => 10,
            Some(n) if (1..=max_limit).contains(&n) => n as usize,
            Some(n) => {
                return Err(bad(
                    "limit",
                    format!("must be from 1 to {max_limit}, got {n}"),
                ));
            }
        };
        let agent = given(self.agent);
        if let Some(a) = &agent {
            check_agent(a).map_err(|e| bad("agent", e))?;
        }
        let time = |v: Option<String>, name: &'static str| {
            given(v)
                .map(|t| parse_time(&t).map_err(|e| bad(name, e.to_string())))
                .transpose()
        };
        let level: Scope = match given(self.level) {
            None => Scope::default(),
            Some(l) => l.parse().map_err(|e| bad("level", e))?,
        };
        let mode: Mode = match given(self.mode) {
            None => Mode::default(),
            Some(m) => m.parse().map_err(|e| bad("mode", e))?,
        };
        Ok(SearchParams {
            query: self.query,
            limit,
            level,
            mode,
            filter: Filter {
                agent,
                project: given(self.project),
                session: given(self.session),
                since: time(self.since, "since")?,
                until: time(self.until, "until")?,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::Layer;

    fn req() -> SearchRequest {
        SearchRequest {
            query: "deadline".into(),
            ..Default::default()
        }
    }

    #[test]
    fn defaults_and_every_field_checked_once() {
        let p = req().check(100).unwrap();
        assert_eq!(
            (p.limit, p.level, p.mode),
            (10, Scope::default(), Mode::Hybrid)
        );
        let p = SearchRequest {
            limit: Some(100),
            agent: Some("codex".into()),
            project: Some("  ".into()),
            since: Some("2026-06-01".into()),
            level: Some("talks".into()),
            mode: Some("fts".into()),
            ..req()
        }
        .check(100)
        .unwrap();
        assert_eq!(p.level, Scope::One(Layer::Talks));
        assert_eq!(p.filter.agent.as_deref(), Some("codex"));
        assert_eq!(p.filter.project, None, "blank is not given");
        assert_eq!(p.filter.since, Some(1_780_272_000_000));

        let name = |r: SearchRequest| r.check(100).unwrap_err().name;
        assert_eq!(
            name(SearchRequest {
                limit: Some(101),
                ..req()
            }),
            "limit"
        );
        assert_eq!(
            name(SearchRequest {
                limit: Some(0),
                ..req()
            }),
            "limit"
        );
        let cursor = SearchRequest {
            agent: Some("cursor-ish".into()),
            ..req()
        };
        assert!(cursor.check(100).unwrap_err().reason.contains("claude"));
        assert_eq!(
            name(SearchRequest {
                until: Some("soon".into()),
                ..req()
            }),
            "until"
        );
        assert_eq!(
            name(SearchRequest {
                level: Some("l2".into()),
                ..req()
            }),
            "level"
        );
        assert_eq!(
            name(SearchRequest {
                mode: Some("semantic".into()),
                ..req()
            }),
            "mode"
        );
        let long = SearchRequest {
            query: "x".repeat(MAX_QUERY_BYTES + 1),
            ..req()
        };
        assert_eq!(name(long), "query");
    }
}
