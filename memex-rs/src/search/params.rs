//! A search as it arrives from outside, defined and checked in one place for every surface:
//! the CLI's flags (clap reads [`SearchRequest`]'s fields and doc comments), the MCP tool's
//! arguments (serde, and its JSON schema from the same comments), the HTTP query string
//! ([`SearchRequest::from_query`]) and the CLI's request to the service
//! ([`SearchRequest::to_query`]) all hold a [`SearchRequest`], and [`SearchRequest::check`]
//! turns it into [`SearchParams`] or names what was wrong.

use rmcp::schemars;

use super::{Mode, Reach, Scope, SearchParams, parse_time};
use crate::layer::UnknownName;
use crate::store::read::Filter;

/// The longest query accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 2000;

// A search's parameters as a surface received them; empty texts count as not given. A field
// added here is a CLI flag and an MCP argument at once; the query string names it in
// `QUERY_NAMES`.
/// A search of the archive.
#[derive(Debug, Clone, Default, clap::Args, serde::Deserialize, schemars::JsonSchema)]
pub struct SearchRequest {
    /// What to look for, in words or as a question. Rows with every significant word rank first,
    /// then rows with at least half of them; a bare word also matches its plural and -ed/-ing
    /// forms; "quoted phrases" stay together and match exactly; word* is a prefix.
    pub query: String,
    /// How many results (default 10; at most 100 through MCP, 1000 elsewhere).
    #[arg(long, value_name = "N")]
    // Signed, so that a negative number from a client is refused by `check`, which names
    // `limit`, instead of by the deserializer, which would not.
    pub limit: Option<i64>,
    /// The agent by name: claude, codex, gemini, cursor, cursor-ide, copilot, opencode, qwen,
    /// antigravity, cline, roo, kiro, goose, crush, aider, amp or pi.
    #[arg(long)]
    pub agent: Option<String>,
    /// A project path (matches its cwd, git root or sub-folders) or part of a project name.
    #[arg(long)]
    pub project: Option<String>,
    /// Only this session (its id).
    #[arg(long)]
    pub session: Option<String>,
    /// Only what this machine archived (with sync): its name or id as `memex hosts` shows
    /// them, or `local` for this machine.
    #[arg(long)]
    pub host: Option<String>,
    /// Only messages at or after this time: RFC 3339, a date (2026-06-01) or an age (7d, 12h).
    #[arg(long)]
    pub since: Option<String>,
    /// Only messages before this time (as `since`).
    #[arg(long)]
    pub until: Option<String>,
    /// raw (every message, the default), observations (L1), talks (L2), sessions (L3) or all
    /// (fused).
    #[arg(long)]
    pub level: Option<String>,
    /// hybrid (full text and meaning fused, the default), fts (full text only) or vector
    /// (meaning only).
    #[arg(long)]
    pub mode: Option<String>,
    /// local (this archive, the default), team (what your team shared with you: `memex team
    /// join`) or all (both, fused by rank).
    #[arg(long)]
    pub scope: Option<String>,
    /// Only what this member of the team shared (with scope team or all).
    #[arg(long)]
    pub member: Option<String>,
}

/// The names of a search's parameters in a query string (`GET /api/search`):
/// [`SearchRequest`]'s fields, with the query as `q`.
pub const QUERY_NAMES: [&str; 12] = [
    "q", "limit", "agent", "project", "session", "host", "since", "until", "level", "mode",
    "scope", "member",
];

/// A parameter that cannot be used: its name (as [`SearchRequest`] spells it; each surface
/// shows it its own way, `--since` or `` `since` ``) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{name}` {reason}")]
pub struct BadParam {
    pub name: &'static str,
    pub reason: String,
}

fn bad(name: &'static str, reason: impl ToString) -> BadParam {
    BadParam {
        name,
        reason: reason.to_string(),
    }
}

/// Whether `name` is an agent Memex reads; the error lists the ones it does.
pub fn check_agent(name: &str) -> Result<(), UnknownName> {
    let names = ai_cli_session_collector::AdapterRegistry::new().names();
    if names.contains(&name) {
        Ok(())
    } else {
        Err(UnknownName::new(name, names))
    }
}

/// Whether `name` can name a machine (see [`SearchRequest::host`]); why not.
pub fn check_host(name: &str) -> Result<(), &'static str> {
    if memex_store::sync::valid_name(name) {
        Ok(())
    } else {
        Err("must be a machine's name or id as `memex hosts` shows them, or `local`")
    }
}

fn given(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

/// A query string's `limit` as a whole number (its range is the request's `check`'s).
pub fn limit_of(get: &impl Fn(&str) -> Option<String>) -> Result<Option<i64>, BadParam> {
    get("limit")
        .map(|v| {
            v.trim()
                .parse::<i64>()
                .map_err(|_| bad("limit", format!("must be a whole number, got `{v}`")))
        })
        .transpose()
}

impl SearchRequest {
    /// A search from a query string's values (`get` gives one by its name in [`QUERY_NAMES`]).
    /// `limit` must be a whole number here; [`check`](Self::check) checks its range.
    pub fn from_query(get: impl Fn(&str) -> Option<String>) -> Result<SearchRequest, BadParam> {
        let limit = limit_of(&get)?;
        Ok(SearchRequest {
            query: get("q").unwrap_or_default(),
            limit,
            agent: get("agent"),
            project: get("project"),
            session: get("session"),
            host: get("host"),
            since: get("since"),
            until: get("until"),
            level: get("level"),
            mode: get("mode"),
            scope: get("scope"),
            member: get("member"),
        })
    }

    /// The query string [`from_query`](Self::from_query) reads back: the parameters given.
    pub fn to_query(&self) -> Vec<(&'static str, String)> {
        let [
            q,
            limit,
            agent,
            project,
            session,
            host,
            since,
            until,
            level,
            mode,
            scope,
            member,
        ] = QUERY_NAMES;
        let mut out = vec![(q, self.query.clone())];
        if let Some(n) = self.limit {
            out.push((limit, n.to_string()));
        }
        for (name, value) in [
            (agent, &self.agent),
            (project, &self.project),
            (session, &self.session),
            (host, &self.host),
            (since, &self.since),
            (until, &self.until),
            (level, &self.level),
            (mode, &self.mode),
            (scope, &self.scope),
            (member, &self.member),
        ] {
            if let Some(v) = value {
                out.push((name, v.clone()));
            }
        }
        out
    }

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
            Some(n) if n >= 1 && n.unsigned_abs() <= max_limit => n.unsigned_abs() as usize,
            Some(n) => {
                return Err(bad(
                    "limit",
                    format!("must be from 1 to {max_limit}, got {n}"),
                ));
            }
        };
        let host = given(self.host);
        if let Some(h) = &host {
            check_host(h).map_err(|e| bad("host", e))?;
        }
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
        let reach: Reach = match given(self.scope) {
            None => Reach::default(),
            Some(r) => r.parse().map_err(|e| bad("scope", e))?,
        };
        let member = given(self.member);
        if let Some(m) = &member {
            memex_team::check_name(m).map_err(|e| bad("member", e))?;
            if reach == Reach::Local {
                return Err(bad(
                    "member",
                    "reads the team's archive: add scope team or all",
                ));
            }
        }
        Ok(SearchParams {
            query: self.query,
            limit,
            level,
            mode,
            reach,
            member,
            filter: Filter {
                agent,
                project: given(self.project),
                session: given(self.session),
                host,
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
        assert_eq!(
            name(SearchRequest {
                host: Some("lap\ntop".into()),
                ..req()
            }),
            "host"
        );
        assert_eq!(
            name(SearchRequest {
                host: Some("x".repeat(65)),
                ..req()
            }),
            "host"
        );
        let long = SearchRequest {
            query: "x".repeat(MAX_QUERY_BYTES + 1),
            ..req()
        };
        assert_eq!(name(long), "query");
        assert_eq!(
            name(SearchRequest {
                scope: Some("everyone".into()),
                ..req()
            }),
            "scope"
        );
        for (scope, member) in [(None, "bob"), (Some("team"), "bob\n; drop")] {
            assert_eq!(
                name(SearchRequest {
                    scope: scope.map(Into::into),
                    member: Some(member.into()),
                    ..req()
                }),
                "member"
            );
        }
        let p = SearchRequest {
            scope: Some("team".into()),
            member: Some("bob".into()),
            ..req()
        }
        .check(100)
        .unwrap();
        assert_eq!((p.reach, p.member.as_deref()), (Reach::Team, Some("bob")));
    }

    #[test]
    fn a_query_string_reads_back_what_was_written() {
        let r = SearchRequest {
            query: "flaky upload".into(),
            limit: Some(20),
            agent: Some("codex".into()),
            project: Some("/work/app".into()),
            session: Some("abc".into()),
            host: Some("laptop".into()),
            since: Some("7d".into()),
            until: Some("2026-06-01".into()),
            level: Some("talks".into()),
            mode: Some("fts".into()),
            scope: Some("all".into()),
            member: Some("bob".into()),
        };
        let pairs = r.to_query();
        assert_eq!(pairs.len(), QUERY_NAMES.len(), "every field is written");
        let get = |k: &str| pairs.iter().find(|p| p.0 == k).map(|p| p.1.clone());
        let back = SearchRequest::from_query(get).unwrap();
        assert_eq!(format!("{back:?}"), format!("{r:?}"));
        let only_q = req().to_query();
        assert_eq!(only_q, vec![("q", "deadline".to_owned())]);
        let bad_limit = SearchRequest::from_query(|k| (k == "limit").then(|| "ten".to_owned()));
        assert_eq!(bad_limit.unwrap_err().name, "limit");
    }
}
