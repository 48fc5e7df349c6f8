//! `memex mcp`: the MCP server on stdio (the official SDK, `rmcp`). It reads the archive
//! directly, so it works whether or not `memex serve` runs. stdout carries only protocol
//! frames; logs go to stderr.
//!
//! Tools: `search_history`, `get_session` (paged, so a huge session never floods a context),
//! `get_recent_sessions`, `list_projects`, `usage_report` (what the agents cost). Bad arguments are protocol errors (invalid params)
//! that name the argument; nothing a client sends can panic the server.

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData, ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::compact::queue;
use crate::search;
use crate::store::{ReadPool, read};

/// Characters of one message's text, tool input or tool output returned by `get_session` (the
/// rest is cut, and says so).
const MESSAGE_CHARS: usize = 4000;

/// The most one tool answer holds, in bytes of JSON (about 50,000 tokens: a quarter of a large
/// context window). A page of messages that would be larger ends early (`next_offset` goes
/// on from there); any other list is shortened and says how much was left out.
pub const MAX_ANSWER_BYTES: usize = 200_000;

/// `t` cut to [`MESSAGE_CHARS`] characters, saying so.
fn cut_text(t: &str) -> Option<String> {
    let n = t.chars().count();
    (n > MESSAGE_CHARS).then(|| {
        let cut: String = t.chars().take(MESSAGE_CHARS).collect();
        format!("{cut} […cut; {n} characters in all]")
    })
}

/// A message for a tool answer: text, tool output and tool input each cut to size.
fn message_value(m: &read::MessageRow) -> Value {
    let mut v = serde_json::to_value(m).unwrap_or(Value::Null);
    for key in ["text", "tool_output"] {
        if let Some(cut) = v[key].as_str().and_then(cut_text) {
            v[key] = json!(cut);
        }
    }
    if let Some(input) = m.tool_input.as_ref() {
        let text = input.to_string();
        if let Some(cut) = cut_text(&text) {
            v["tool_input"] = json!(cut);
        }
    }
    v
}

fn json_len(v: &Value) -> usize {
    serde_json::to_vec(v).map_or(0, |b| b.len())
}

/// Shortens the answer's longest lists until it fits in [`MAX_ANSWER_BYTES`], noting what was
/// left out under `omitted`.
fn fit(v: &mut Value) {
    let mut size = json_len(v);
    if size <= MAX_ANSWER_BYTES {
        return;
    }
    let Some(obj) = v.as_object_mut() else { return };
    // Each list's items' sizes, measured once; the longest list gives up its last item.
    let mut lists: Vec<(String, Vec<usize>)> = obj
        .iter()
        .filter_map(|(k, x)| {
            let items = x.as_array()?;
            Some((k.clone(), items.iter().map(|i| json_len(i) + 1).collect()))
        })
        .collect();
    let mut omitted = serde_json::Map::new();
    while size > MAX_ANSWER_BYTES {
        let Some((key, sizes)) = lists
            .iter_mut()
            .filter(|(_, sizes)| !sizes.is_empty())
            .max_by_key(|(_, sizes)| sizes.iter().sum::<usize>())
        else {
            break;
        };
        size = size.saturating_sub(sizes.pop().unwrap_or(0));
        let n = omitted
            .get(key.as_str())
            .and_then(Value::as_u64)
            .unwrap_or(0);
        omitted.insert(key.clone(), json!(n + 1));
    }
    for (key, sizes) in &lists {
        if let Some(items) = obj.get_mut(key).and_then(Value::as_array_mut) {
            items.truncate(sizes.len());
        }
    }
    if !omitted.is_empty() {
        omitted.insert(
            "why".into(),
            json!(format!(
                "tool answers are limited to {MAX_ANSWER_BYTES} bytes; narrow the request"
            )),
        );
        obj.insert("omitted".into(), Value::Object(omitted));
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct GetSessionArgs {
    /// A session id, or a prefix of one that only one session has.
    pub session_id: String,
    /// raw (the messages, the default) or summary (session summary, talk summaries, observations).
    pub format: Option<String>,
    /// Only this talk (prompt number).
    pub prompt_number: Option<i64>,
    /// raw: the first message to return (default 0).
    pub offset: Option<u32>,
    /// raw: messages per page, 1 to 200 (default 50).
    pub limit: Option<u32>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RecentArgs {
    /// A project path or part of a project name.
    pub project: Option<String>,
    /// Sessions, 1 to 100 (default 10).
    pub limit: Option<u32>,
}

#[derive(Clone)]
pub struct MemexMcp {
    pool: ReadPool,
    vectors: std::sync::Arc<crate::vector::ForSearch>,
    /// The team this machine joined, for `scope` team and all.
    team: Option<std::sync::Arc<crate::team::Joined>>,
    /// The settings `usage_report` prices with (`[usage]`, the data folder's price table).
    settings: std::sync::Arc<crate::config::Settings>,
    tool_router: ToolRouter<Self>,
}

fn bad(msg: impl Into<String>) -> ErrorData {
    ErrorData::invalid_params(msg.into(), None)
}

fn internal(e: impl std::fmt::Display) -> ErrorData {
    tracing::error!(error = %e, "mcp tool failed");
    ErrorData::internal_error("the archive could not be read", None)
}

fn ok(mut v: Value) -> Result<CallToolResult, ErrorData> {
    fit(&mut v);
    Ok(CallToolResult::success(vec![ContentBlock::json(v)?]))
}

fn bounded(v: Option<u32>, default: u32, max: u32, name: &str) -> Result<u32, ErrorData> {
    match v {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(bad(format!("`{name}` must be from 1 to {max}, got {n}"))),
    }
}

fn non_empty(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

impl MemexMcp {
    /// The server over the archive `pool` reads; `settings` are the ones it runs with (the
    /// data folder, `[usage]` for `usage_report`).
    pub fn new(
        pool: ReadPool,
        vectors: crate::vector::ForSearch,
        settings: crate::config::Settings,
    ) -> MemexMcp {
        MemexMcp {
            pool,
            vectors: std::sync::Arc::new(vectors),
            team: None,
            settings: std::sync::Arc::new(settings),
            tool_router: Self::tool_router(),
        }
    }

    /// Searches at scope team and all read this team's archive.
    pub fn with_team(mut self, team: Option<crate::team::Joined>) -> MemexMcp {
        self.team = team.map(std::sync::Arc::new);
        self
    }

    /// Runs a read on the blocking pool.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&rusqlite::Connection) -> Result<T, ErrorData> + Send + 'static,
    ) -> Result<T, ErrorData> {
        let pool = self.pool.clone();
        tokio::task::spawn_blocking(move || pool.with(f))
            .await
            .map_err(internal)?
            .map_err(internal)?
    }
}

#[tool_router]
impl MemexMcp {
    #[tool(
        description = "Search past AI coding-agent conversations on this machine (Claude Code, Codex CLI, Gemini CLI, Cursor, Copilot CLI, OpenCode and every other agent Memex archives). A natural-language question works: its significant words are searched, rows with all of them first, then rows with some (`terms` names the words each has), plus meaning. Returns matches with session id, prompt number, snippet, score, level; `notice` says when filters (agent, project, time) hid matches or match no session. Use get_session to read one. scope=team searches what the user's team shared (each hit names its `member`), scope=all both."
    )]
    async fn search_history(
        &self,
        Parameters(a): Parameters<search::SearchRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        if a.query.trim().is_empty() {
            return Err(bad("`query` must not be empty"));
        }
        let params = a.check(100).map_err(|e| bad(e.to_string()))?;
        if params.reach != search::Reach::Local {
            use crate::team::ScopedError;
            let res = crate::team::scoped_search(
                self.pool.clone(),
                self.vectors.clone(),
                self.team.clone(),
                params,
            )
            .await
            .map_err(|e| match e {
                ScopedError::NoTeam
                | ScopedError::Team(_)
                | ScopedError::Local(
                    search::SearchError::TooManyTerms(_) | search::SearchError::NoVectors(_),
                ) => bad(e.to_string()),
                other => internal(other),
            })?;
            return ok(res);
        }
        let (vectors, rt) = (self.vectors.clone(), tokio::runtime::Handle::current());
        let res = self
            .read(move |c| {
                search::search(c, &search::Semantic::of(&vectors, &rt), &params).map_err(
                    |e| match e {
                        search::SearchError::TooManyTerms(_)
                        | search::SearchError::NoVectors(_) => bad(e.to_string()),
                        other => internal(other),
                    },
                )
            })
            .await?;
        ok(serde_json::to_value(res).map_err(internal)?)
    }

    #[tool(
        description = "Read one past session: format=raw gives its messages a page at a time (offset, limit; optionally one prompt_number), format=summary its session summary, talk summaries and observations."
    )]
    async fn get_session(
        &self,
        Parameters(a): Parameters<GetSessionArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let id = a.session_id.trim().to_owned();
        if id.is_empty() || id.len() > 256 {
            return Err(bad("`session_id` must be 1 to 256 characters"));
        }
        let summary = match non_empty(a.format).as_deref() {
            None | Some("raw") => false,
            Some("summary") => true,
            Some(other) => {
                return Err(bad(format!(
                    "`format` must be raw or summary, got `{other}`"
                )));
            }
        };
        let limit = bounded(a.limit, 50, 200, "limit")? as usize;
        let offset = a.offset.unwrap_or(0) as usize;
        let prompt = a.prompt_number;
        let v = self
            .read(move |c| {
                let s = read::find_session(c, &id)
                    .map_err(internal)?
                    .ok_or_else(|| {
                        bad(format!(
                            "no session `{id}`; search_history or get_recent_sessions give ids"
                        ))
                    })?;
                if summary {
                    let mut v = queue::summary_view(c, s.pk, &s.session_id).map_err(internal)?;
                    if let Some(p) = prompt {
                        v.only_talk(p);
                    }
                    return serde_json::to_value(v).map_err(internal);
                }
                let (rows, total) = read::session_messages_page(c, s.pk, prompt, offset, limit)
                    .map_err(internal)?;
                // The page ends early rather than exceed the answer's size; the next one goes on
                // from there.
                let budget = MAX_ANSWER_BYTES.saturating_sub(2 * json_len(&json!(s)) + 512);
                let mut page: Vec<Value> = Vec::new();
                let mut used = 0;
                for m in &rows {
                    let v = message_value(m);
                    let n = json_len(&v) + 1;
                    if !page.is_empty() && used + n > budget {
                        break;
                    }
                    used += n;
                    page.push(v);
                }
                let next = (offset + page.len() < total).then_some(offset + page.len());
                Ok(json!({
                    "session": s, "messages": page, "offset": offset, "total": total,
                    "next_offset": next,
                }))
            })
            .await?;
        ok(v)
    }

    #[tool(
        description = "What the user's AI coding agents cost: tokens and US dollars per day (report=daily), week, month, per session (report=session: the most expensive first) or per 5-hour billing window (report=blocks), each broken down by model, and by agent or project with breakdown. Filters: since/until (2026-06-01, 7d), agent, project, host, timezone. Models the price table does not know are listed under `unpriced`, their tokens counted, their cost not. `memex` lists Memex's own model spend."
    )]
    async fn usage_report(
        &self,
        Parameters(a): Parameters<crate::usage::UsageRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        let pricing =
            crate::usage::Pricing::load(&self.settings).map_err(|e| internal(e.to_string()))?;
        let plan = a.check(pricing.zone).map_err(|e| bad(e.to_string()))?;
        let mut v = self
            .read(move |c| {
                crate::usage::run(c, &pricing, &plan)
                    .map(|a| a.to_json())
                    .map_err(internal)
            })
            .await?;
        fit(&mut v);
        ok(v)
    }

    #[tool(description = "The most recently active sessions, optionally of one project.")]
    async fn get_recent_sessions(
        &self,
        Parameters(a): Parameters<RecentArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let limit = bounded(a.limit, 10, 100, "limit")?;
        let filter = read::Filter {
            project: non_empty(a.project),
            ..read::Filter::default()
        };
        let rows = self
            .read(move |c| read::list_sessions(c, &filter, limit, 0).map_err(internal))
            .await?;
        ok(json!({ "sessions": rows }))
    }

    #[tool(description = "Every project in the archive, with its session count and last activity.")]
    async fn list_projects(&self) -> Result<CallToolResult, ErrorData> {
        let v = self
            .read(|c| {
                let mut st = c
                    .prepare(
                        "SELECT COALESCE(git_root, project_path) AS p, COUNT(*), MAX(updated_at),
                                GROUP_CONCAT(DISTINCT agent)
                         FROM sessions WHERE message_count > 0 AND p IS NOT NULL
                         GROUP BY p ORDER BY MAX(updated_at) DESC",
                    )
                    .map_err(internal)?;
                let rows = st
                    .query_map([], |r| {
                        Ok(json!({
                            "project": r.get::<_, String>(0)?, "sessions": r.get::<_, i64>(1)?,
                            "last_activity": read::iso(r.get(2)?),
                            "agents": r.get::<_, String>(3)?.split(',').collect::<Vec<_>>(),
                        }))
                    })
                    .map_err(internal)?
                    .collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(internal)?;
                Ok(json!({ "projects": rows }))
            })
            .await?;
        ok(v)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for MemexMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("memex", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Memex: the memory of past AI coding-agent conversations on this machine. \
                 search_history finds them (raw messages or compact summaries), get_session \
                 reads one, get_recent_sessions and list_projects browse, usage_report says what \
                 the agents cost.",
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(text: &str, input: Value, output: Option<String>) -> read::MessageRow {
        read::MessageRow {
            message_id: "m".into(),
            role: "assistant".into(),
            kind: "tool_call".into(),
            prompt_number: 1,
            timestamp: None,
            text: text.into(),
            tool_name: Some("Bash".into()),
            tool_input: Some(input),
            tool_output: output,
            tool_call_id: None,
            is_error: false,
            model: None,
            parent_id: None,
            agent_id: None,
            sidechain: false,
            inherited: false,
            duplicate: false,
            active: true,
            line: 1,
        }
    }

    #[test]
    fn tool_input_and_output_are_cut_like_text() {
        let huge = "x".repeat(1_000_000);
        let v = message_value(&row(
            &huge,
            json!({"command": huge.clone()}),
            Some(huge.clone()),
        ));
        let size = json_len(&v);
        assert!(size < 4 * MESSAGE_CHARS, "{size}");
        for key in ["text", "tool_output", "tool_input"] {
            assert!(
                v[key].as_str().unwrap().contains("characters in all"),
                "{key}"
            );
        }
        let small = message_value(&row("hi", json!({"command": "ls"}), Some("a".into())));
        assert_eq!(small["tool_input"], json!({"command": "ls"}));
    }

    #[test]
    fn no_answer_exceeds_the_budget() {
        let item = json!({"summary": "y".repeat(3000)});
        let mut v = json!({"talks": vec![item.clone(); 200], "observations": vec![item; 100], "session": "s"});
        assert!(json_len(&v) > MAX_ANSWER_BYTES);
        fit(&mut v);
        assert!(json_len(&v) <= MAX_ANSWER_BYTES, "{}", json_len(&v));
        let omitted = v["omitted"]["talks"].as_u64().unwrap()
            + v["omitted"]["observations"].as_u64().unwrap_or(0);
        assert!(omitted > 0);
        assert_eq!(v["session"], "s");
    }
}
