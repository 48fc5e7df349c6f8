//! MCP over the Streamable HTTP transport on the team server (`/mcp`): the team archive for a
//! member's agents, with the member the request's token named (the guard puts them in the
//! request, which the transport hands to each tool). Tools: `search_history`, `get_session`,
//! `list_projects`, each over the projects the member belongs to only.

use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData, ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};

use memex_team::archive::Member;

use super::team::TeamServer;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct TeamSessionArgs {
    /// The session's id, as a search gave it.
    pub session_id: String,
    /// The member who shared it, when two members shared sessions of the same id.
    pub member: Option<String>,
    /// The first row to return (default 0).
    pub offset: Option<u32>,
    /// Rows per page, 1 to 200 (default 50).
    pub limit: Option<u32>,
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub struct NoArgs {}

#[derive(Clone)]
pub struct TeamMcp {
    st: Arc<TeamServer>,
    tool_router: ToolRouter<Self>,
}

fn bad(msg: impl Into<String>) -> ErrorData {
    ErrorData::invalid_params(msg.into(), None)
}

fn ok(v: Value) -> Result<CallToolResult, ErrorData> {
    Ok(CallToolResult::success(vec![ContentBlock::text(
        v.to_string(),
    )]))
}

/// The member the team server's guard found for this request.
fn member(parts: &axum::http::request::Parts) -> Result<Arc<Member>, ErrorData> {
    parts
        .extensions
        .get::<Arc<Member>>()
        .cloned()
        .ok_or_else(|| ErrorData::invalid_request("a member's token is needed", None))
}

fn failed(e: memex_team::TeamError) -> ErrorData {
    tracing::warn!(error = %e, "team MCP: the team archive failed");
    ErrorData::internal_error(format!("the team archive could not be read: {e}"), None)
}

impl TeamMcp {
    pub fn new(st: Arc<TeamServer>) -> TeamMcp {
        TeamMcp {
            st,
            tool_router: Self::tool_router(),
        }
    }
}

#[tool_router]
impl TeamMcp {
    #[tool(
        description = "Search what your team shared: past AI coding-agent conversations of the projects you belong to (messages, observations, talk and session summaries). A natural-language question works. Each hit names the member who shared it; use get_session to read one."
    )]
    async fn search_history(
        &self,
        Extension(parts): Extension<axum::http::request::Parts>,
        Parameters(a): Parameters<crate::search::SearchRequest>,
    ) -> Result<CallToolResult, ErrorData> {
        let me = member(&parts)?;
        if a.query.trim().is_empty() {
            return Err(bad("`query` must not be empty"));
        }
        if a.host.is_some() || a.session.is_some() {
            return Err(bad(
                "`host` and `session` are not served by the team server; filter by project or member",
            ));
        }
        if a.scope.as_deref().is_some_and(|s| s != "team") {
            return Err(bad("`scope` is team on the team server"));
        }
        let params = crate::search::SearchRequest {
            scope: Some("team".into()),
            ..a
        }
        .check(100)
        .map_err(|e| bad(e.to_string()))?;
        let vector = self.st.query_vector(&params).await;
        let found = crate::team::search_as(
            &self.st.team,
            &me,
            &params,
            vector.as_ref().map(|(m, v)| (m.as_str(), v.as_slice())),
        )
        .await
        .map_err(failed)?;
        ok(crate::team::answer(&params, None, Ok(found), vector.is_some()).map_err(failed)?)
    }

    #[tool(
        description = "Read one session your team shared (rows in order: messages if it was shared in full, then observations, talk summaries, the session summary), a page at a time."
    )]
    async fn get_session(
        &self,
        Extension(parts): Extension<axum::http::request::Parts>,
        Parameters(a): Parameters<TeamSessionArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let me = member(&parts)?;
        let id = a.session_id.trim();
        if id.is_empty() || id.len() > 256 {
            return Err(bad("`session_id` must be 1 to 256 characters"));
        }
        if let Some(m) = &a.member {
            memex_team::check_name(m).map_err(|e| bad(format!("`member` {e}")))?;
        }
        let limit = a.limit.unwrap_or(50);
        if !(1..=200).contains(&limit) {
            return Err(bad(format!("`limit` must be from 1 to 200, got {limit}")));
        }
        let offset = a.offset.unwrap_or(0);
        match self
            .st
            .team
            .session(&me, id, a.member.as_deref(), limit.into(), offset.into())
            .await
            .map_err(failed)?
        {
            Some((s, items)) => ok(json!({"session": s, "items": items})),
            None => Err(bad(format!(
                "no shared session `{id}` in your projects; search_history gives ids"
            ))),
        }
    }

    #[tool(description = "The projects you belong to in the team, with how much was shared.")]
    async fn list_projects(
        &self,
        Extension(parts): Extension<axum::http::request::Parts>,
        Parameters(_): Parameters<NoArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let me = member(&parts)?;
        let p = self.st.team.projects(&me).await.map_err(failed)?;
        ok(json!({"member": me.name, "projects": p}))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TeamMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("memex-team", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Memex team: what your team shared of its AI coding-agent conversations, for the \
                 projects you belong to. search_history finds them, get_session reads one, \
                 list_projects lists your projects.",
            )
    }
}
