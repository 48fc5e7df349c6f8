//! The compaction endpoints: trigger, one session (the Stop hook), regenerate, status.

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Json;
use serde_json::{Value, json};

use super::{ApiError, ApiResult, ApiState, Params, bool_field, check_id, find, json_body, read};
use crate::compact::queue::{self, Compactor};
use crate::input::BadField;
use crate::layer::Layer;
use crate::search;

pub(super) fn compactor(st: &ApiState) -> Result<&Compactor, ApiError> {
    st.compactor.as_ref().ok_or_else(|| ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        code: "compaction_unavailable",
        message: "this server does not run the compact queue".into(),
    })
}

/// Queues everything pending: complete talks never summarised, idle sessions without L3.
pub(super) async fn compact_trigger(
    State(st): State<ApiState>,
    RawQuery(q): RawQuery,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    Params::parse(q, &[])?;
    let c = compactor(&st)?.clone();
    c.engine.reset_circuits();
    let sw = c.switches;
    let idle_before = c.idle_before();
    let queued = c
        .writer
        .run(move |conn| queue::plan_pending(conn, sw, idle_before, "api"))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)?;
    c.wake.notify_waiters();
    let ready = read(&st, |conn| {
        queue::ready_count(conn).map_err(ApiError::internal)
    })
    .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"queued": queued, "ready": ready})),
    ))
}

/// Compacts one session now: its last talk counts as complete, and its L3 is (re)built.
pub(super) async fn compact_session(
    State(st): State<ApiState>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    Params::parse(q, &[])?;
    check_id(&id)?;
    let c = compactor(&st)?.clone();
    let s = read(&st, move |conn| find(conn, &id)).await?;
    // The Stop hook calls this right after the agent wrote its last message: let the watcher
    // see that write and the ingester store it first (bounded), so the last talk is complete.
    // In a task of its own, so a caller that hangs up early (a hook at the end of its budget)
    // does not cancel it.
    let (state, pk) = (st.state.clone(), s.pk);
    let queued = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        let until = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
        while !state.ingest_settled() && tokio::time::Instant::now() < until {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        c.plan(vec![pk], true, "api").await
    })
    .await
    .map_err(ApiError::internal)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"session_id": s.session_id, "queued": queued})),
    ))
}

/// Queues regeneration: body `{"level": "l1"|"l2"|"l3"|"all", "session": ID, "since": TIME,
/// "confirm": BOOL}`, every field optional. Over more than
/// [`queue::REGENERATE_CONFIRM_ABOVE`] talks with a paid provider in the chain, it is a 409
/// `confirmation_required` (nothing queued) unless `confirm` is true.
pub(super) async fn compact_regenerate(
    State(st): State<ApiState>,
    RawQuery(q): RawQuery,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    Params::parse(q, &[])?;
    let c = compactor(&st)?.clone();
    let v = json_body(&body)?;
    let Some(obj) = v.as_object() else {
        return Err(ApiError::bad_parameter("the body must be a JSON object"));
    };
    const FIELDS: &[&str] = &["level", "session", "since", "confirm"];
    if let Some(k) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(ApiError::bad_parameter(BadField::new(
            k.as_str(),
            format!("is an unknown field; accepted: {}", FIELDS.join(", ")),
        )));
    }
    let field = |k: &str| -> Result<Option<String>, ApiError> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(ApiError::bad_parameter(format!("`{k}` must be a string"))),
        }
    };
    let confirmed = bool_field(obj, "confirm").map_err(ApiError::bad_parameter)?;
    let levels = queue::regenerate_levels(field("level")?.as_deref())
        .map_err(|e| ApiError::bad_parameter(BadField::new("level", e)))?;
    let since = field("since")?
        .map(|t| {
            search::parse_time(&t).map_err(|e| ApiError::bad_parameter(format!("`since`: {e}")))
        })
        .transpose()?;
    let session = match field("session")? {
        Some(id) => {
            check_id(&id)?;
            Some(read(&st, move |conn| find(conn, &id)).await?.pk)
        }
        None => None,
    };
    let guard = queue::RegenerateGuard::new(&c.engine, confirmed);
    let queued = c
        .writer
        .run(move |conn| queue::regenerate(conn, &levels, session, since, &guard))
        .await
        .map_err(ApiError::internal)?
        .map_err(|e| match e {
            queue::RegenerateError::Confirmation(e) => ApiError {
                status: StatusCode::CONFLICT,
                code: "confirmation_required",
                message: format!("{e}: send it again with \"confirm\": true to queue them"),
            },
            queue::RegenerateError::Store(e) => ApiError::internal(e),
        })?;
    c.wake.notify_waiters();
    Ok((StatusCode::ACCEPTED, Json(json!({"queued": queued}))))
}

pub(super) async fn compact_status(State(st): State<ApiState>, RawQuery(q): RawQuery) -> ApiResult {
    Params::parse(q, &[])?;
    let status = read(&st, |c| queue::status(c).map_err(ApiError::internal)).await?;
    let mut v = serde_json::to_value(status).map_err(ApiError::internal)?;
    let cs = &st.settings.compact;
    v["chain"] = json!(cs.chain());
    v["daily_token_budget"] = json!(cs.daily_token_budget);
    if let Some(c) = &st.compactor {
        v["layers"] = Layer::COMPACT
            .into_iter()
            .filter_map(|l| Some((l.job()?.to_owned(), json!(c.switches.on(l)))))
            .collect::<serde_json::Map<_, _>>()
            .into();
        v["budget"] = json!(
            c.engine
                .budget_state()
                .into_iter()
                .map(|b| {
                    let mut e = serde_json::to_value(&b).unwrap_or_default();
                    e["why"] = json!(b.why());
                    e
                })
                .collect::<Vec<_>>()
        );
        v["paid_providers"] = json!(c.engine.paid_providers());
    }
    Ok(Json(v))
}
