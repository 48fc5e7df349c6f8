//! The endpoints that rewrite the archive: forget and scrub, one at a time.

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Json;
use serde_json::{Value, json};

use super::{ApiError, ApiResult, ApiState, Params, bool_field, json_body, read};
use crate::input::BadField;
use crate::search;
use crate::store::forget;

/// Reads the selector of a forget request: exactly one of `session`, `project`, `before`,
/// `match`, each a string, and `dry_run`. Shared by `memex forget` and `POST /api/forget`.
pub fn forget_request(body: &Value) -> Result<(forget::Selector, bool), BadField> {
    let Some(obj) = body.as_object() else {
        return Err(BadField::request("the body must be a JSON object"));
    };
    const FIELDS: &[&str] = &["session", "project", "before", "match", "dry_run"];
    if let Some(k) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(BadField::new(
            k.as_str(),
            format!("is an unknown field; accepted: {}", FIELDS.join(", ")),
        ));
    }
    let mut chosen = Vec::new();
    for key in ["session", "project", "before", "match"] {
        match obj.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if !s.trim().is_empty() => chosen.push((key, s.trim())),
            Some(_) => return Err(BadField::new(key, "must be a non-empty string")),
        }
    }
    let dry_run = bool_field(obj, "dry_run")?;
    let [(key, v)] = chosen[..] else {
        return Err(BadField::request(
            "say what to forget with exactly one of `session`, `project`, `before`, `match`",
        ));
    };
    let sel = match key {
        "session" => forget::Selector::Session(v.to_owned()),
        "project" => forget::Selector::Project(v.to_owned()),
        "before" => forget::Selector::Before(
            search::parse_time(v)
                .map_err(|e| BadField::new("before", format!("cannot be read: {e}")))?,
        ),
        _ => forget::Selector::Match(v.to_owned()),
    };
    Ok((sel, dry_run))
}

pub(super) fn archive_writer(st: &ApiState) -> Result<crate::store::Writer, ApiError> {
    st.writer.clone().ok_or_else(|| ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        code: "read_only",
        message: "this server cannot write to the archive".into(),
    })
}

/// Forget and scrub rewrite the archive file on the one writer: one at a time, others are
/// told to come back instead of queueing behind it.
pub(super) fn one_rewrite() -> Result<RewriteGuard, ApiError> {
    use std::sync::atomic::Ordering;
    if REWRITING.swap(true, Ordering::AcqRel) {
        return Err(ApiError {
            status: StatusCode::CONFLICT,
            code: "busy",
            message: "a forget or scrub is already running; try again when it has finished".into(),
        });
    }
    Ok(RewriteGuard)
}

static REWRITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(super) struct RewriteGuard;

impl Drop for RewriteGuard {
    fn drop(&mut self) {
        REWRITING.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// `POST /api/forget`: body as [`forget_request`]. Answers what was (or, with `dry_run`, would
/// be) removed.
pub(super) async fn forget_handler(
    State(st): State<ApiState>,
    RawQuery(q): RawQuery,
    body: axum::body::Bytes,
) -> ApiResult {
    Params::parse(q, &[])?;
    let _one = one_rewrite()?;
    let w = archive_writer(&st)?;
    let (sel, dry_run) = forget_request(&json_body(&body)?).map_err(ApiError::bad_parameter)?;
    let report = w
        .run(move |c| forget::forget(c, &sel, dry_run))
        .await
        .map_err(ApiError::internal)?
        .map_err(|e| match e {
            forget::ForgetError::NoSession(_) => ApiError {
                status: StatusCode::NOT_FOUND,
                code: "session_not_found",
                message: e.to_string(),
            },
            forget::ForgetError::Sqlite(e) => ApiError::internal(e),
            other => ApiError::bad_parameter(other.to_string()),
        })?;
    if !dry_run {
        tracing::info!(
            sessions = report.sessions,
            messages = report.messages,
            "forgotten on request"
        );
    }
    let mut v = serde_json::to_value(&report).map_err(ApiError::internal)?;
    if !dry_run && !report.gone.is_empty() {
        v["vector_files"] = json!(purge_vectors(&st, &report.gone).await);
    }
    Ok(Json(v))
}

/// How long `POST /api/forget` waits for the indexer to rewrite the vector files that held
/// what was forgotten (it does so as soon as the deletions are through, then removes the
/// older versions a few seconds later).
const PURGE_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Removes the forgotten rows' vectors from the files of the vector folder, not only from the
/// table (where a deletion only marks them): `rewritten`, `pending` (the indexer is busy; it
/// does it when free), `failed` (logged) or `none` (no vectors).
async fn purge_vectors(st: &ApiState, gone: &[(i64, i64)]) -> &'static str {
    if let Some(v) = &st.vectors.vectors {
        return match tokio::time::timeout(PURGE_WAIT, v.request_purge()).await {
            Ok(Ok(Ok(()))) => "rewritten",
            Ok(Ok(Err(_)) | Err(_)) => "failed",
            Err(_) => "pending",
        };
    }
    // No indexer runs (the vector layer is off): nothing else writes the folder.
    let dim = match read(st, |c| {
        crate::vector::stored_model(c)
            .map(|m| m.map(|(_, d)| d))
            .map_err(ApiError::internal)
    })
    .await
    {
        Ok(d) => d,
        Err(_) => return "failed",
    };
    match crate::vector::forget_without_indexer(&st.settings.data_dir(), dim, gone).await {
        Ok(true) => "rewritten",
        Ok(false) => "none",
        Err(e) => {
            tracing::warn!(error = %e, "cannot remove the vectors of forgotten rows");
            "failed"
        }
    }
}

/// `POST /api/scrub` (body `{}`): the current redaction rules over everything stored.
pub(super) async fn scrub_handler(
    State(st): State<ApiState>,
    RawQuery(q): RawQuery,
    body: axum::body::Bytes,
) -> ApiResult {
    Params::parse(q, &[])?;
    let v = json_body(&body)?;
    if v.as_object().is_none_or(|o| !o.is_empty()) {
        return Err(ApiError::bad_parameter(
            "the body must be an empty JSON object",
        ));
    }
    let _one = one_rewrite()?;
    let w = archive_writer(&st)?;
    let fts_max = st.settings.store.fts_max_bytes;
    let logs = st.settings.data_dir().join("logs");
    let report = w
        .run(move |c| crate::store::scrub::scrub(c, fts_max, Some(&logs), &|_, _| {}))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::internal)?;
    serde_json::to_value(report)
        .map(Json)
        .map_err(ApiError::internal)
}
