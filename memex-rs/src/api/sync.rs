//! `POST /api/sync`: a sync now, asked of the running service (what `memex sync` does while
//! `memex serve` holds the archive). Body `{}` (push, then pull), `{"push": true}` or
//! `{"pull": true}`; the answer is what was sent and taken.

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Json;

use super::{ApiError, ApiResult, ApiState, Params, bool_field, json_body};

pub(super) async fn sync_handler(
    State(st): State<ApiState>,
    RawQuery(q): RawQuery,
    body: axum::body::Bytes,
) -> ApiResult {
    Params::parse(q, &[])?;
    let v = json_body(&body)?;
    let Some(o) = v.as_object() else {
        return Err(ApiError::bad_parameter("the body must be a JSON object"));
    };
    if let Some(k) = o.keys().find(|k| !matches!(k.as_str(), "push" | "pull")) {
        return Err(ApiError::bad_parameter(format!(
            "unknown field `{k}`: the body takes `push` and `pull`"
        )));
    }
    let push = bool_field(o, "push").map_err(ApiError::bad_parameter)?;
    let pull = bool_field(o, "pull").map_err(ApiError::bad_parameter)?;
    let Some(sync) = &st.sync else {
        return Err(ApiError {
            status: StatusCode::CONFLICT,
            code: "sync_off",
            message: "this service does not sync: run `memex sync setup URL` or `memex sync join \
                      URL --key FILE`, then restart `memex serve`"
                .into(),
        });
    };
    let (push, pull) = (push || !pull, pull || !push);
    let done = sync.now(push, pull).await.map_err(|e| ApiError {
        status: StatusCode::BAD_GATEWAY,
        code: "sync_failed",
        message: e,
    })?;
    Ok(Json(
        serde_json::to_value(done).map_err(ApiError::internal)?,
    ))
}
