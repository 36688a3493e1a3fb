//! Operations: liveness, readiness, metrics and the OpenAPI description.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use pack_protocol::paths;

use crate::error::{ApiError, ErrorBody, ErrorDetail};
use crate::state::SharedState;

/// Liveness: the process answers.
#[utoipa::path(get, path = paths::HEALTHZ, tag = "ops", responses((status = 200, description = "ok", body = String)))]
pub async fn healthz() -> &'static str {
    "ok\n"
}

/// Readiness: the storage takes a write, gives it back and deletes it (a probe answered
/// within the last 2 s stands).
#[utoipa::path(
    get,
    path = paths::READYZ,
    tag = "ops",
    responses(
        (status = 200, description = "ready", body = String),
        (status = 503, description = "`not_ready`: the message says why and what to do", body = ErrorBody),
    )
)]
pub async fn readyz(State(state): State<SharedState>) -> Response {
    match state.readiness.check().await {
        Ok(()) => "ready\n".into_response(),
        Err(message) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(ErrorBody {
                error: ErrorDetail {
                    code: "not_ready".to_string(),
                    message,
                    missing: None,
                    current_sequence: None,
                },
            }),
        )
            .into_response(),
    }
}

/// Prometheus metrics (text exposition format).
#[utoipa::path(
    get,
    path = paths::METRICS,
    tag = "ops",
    responses((status = 200, description = "Prometheus text", content_type = "text/plain", body = String))
)]
pub async fn metrics(
    State(state): State<SharedState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    state.settings.tokens.authorize_read(&headers)?;
    let fleet = state.fleet.metrics_text(&state.storage).await?;
    for (family, folded) in &fleet.folded {
        state.metrics.set_folded(family, *folded);
    }
    let mut text = state
        .metrics
        .render()
        .map_err(|e| ApiError::Internal(format!("rendering metrics: {e}")))?;
    text.push_str(&fleet.text);
    Ok((
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        text,
    )
        .into_response())
}

/// This OpenAPI description.
#[utoipa::path(
    get,
    path = paths::OPENAPI,
    tag = "ops",
    responses((status = 200, description = "OpenAPI 3.1 JSON", content_type = "application/json", body = Object))
)]
pub async fn openapi(State(state): State<SharedState>) -> Json<serde_json::Value> {
    Json(state.openapi.clone())
}
