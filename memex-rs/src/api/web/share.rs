//! The sharing page (`/share`): what this machine shares with its team, at which level, what
//! waits to go, and what the team archive holds of it (what `memex share status` prints).

use askama::Template;
use axum::extract::{RawQuery, State};
use axum::response::Response;

use super::{ApiError, ApiState, Params, error_page, page, read};
use memex_team::share;

#[derive(Template)]
#[template(path = "web/share.html")]
struct SharePage {
    nav: &'static str,
    title: &'static str,
    member: Option<String>,
    rules: Vec<share::RuleRow>,
    /// Sessions at hidden, summaries, full.
    counts: [u64; 3],
    waiting: share::Waiting,
    /// (project, sessions, rows) the team holds, or why it cannot be asked.
    held: Result<Vec<(String, u64, u64)>, String>,
}

pub(super) async fn share_page(State(st): State<ApiState>, RawQuery(q): RawQuery) -> Response {
    if let Err(e) = Params::parse(q, &[]) {
        return error_page(e);
    }
    let config = st.settings.share.rules();
    let local = read(&st, move |c| {
        let rules = share::rules(c, &config).map_err(ApiError::internal)?;
        let counts = share::counts(c, &config).map_err(ApiError::internal)?;
        let waiting = share::waiting(c, &config).map_err(ApiError::internal)?;
        let member = share::joined(c).map_err(ApiError::internal)?.map(|j| j.1);
        Ok((rules, counts, waiting, member))
    })
    .await;
    let (rules, counts, waiting, member) = match local {
        Ok(v) => v,
        Err(e) => return error_page(e),
    };
    let held = match &st.team {
        None => Err("this machine is in no team: memex team join URL --token FILE".to_owned()),
        Some(j) => async {
            let me = j.team.authenticate(&j.token).await?;
            j.team.held(&me).await
        }
        .await
        .map_err(|e| e.to_string()),
    };
    page(SharePage {
        nav: "share",
        title: "Sharing",
        member,
        rules,
        counts,
        waiting,
        held,
    })
}
