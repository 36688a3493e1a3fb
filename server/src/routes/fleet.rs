//! `/v1/channels/{channel}/fleet` and `/v1/channels/{channel}/reports`: what the fleet
//! runs, and what fails on it.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use pack_protocol::fleet::MAX_REPORT_BYTES;
use pack_protocol::paths;
use pack_protocol::{FailureReport, FleetView, ReportAccepted};
use serde::Deserialize;
use time::OffsetDateTime;
use utoipa::IntoParams;

use crate::error::{ApiError, ErrorBody};
use crate::routes::channels::live;
use crate::routes::{ClientPost, Peer, accept_client_post, authorize_fleet_view, window_days};
use crate::state::SharedState;

const REPORT_POST: ClientPost<FailureReport> = ClientPost {
    max_bytes: MAX_REPORT_BYTES,
    needs: "a report needs",
    expected: r#"{"channel", "pack", "reason", "client_version"}"#,
    channel: |report| &report.channel,
};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FleetQuery {
    /// UTC days to cover, today included: 1 to 7 (default 7).
    pub days: Option<u32>,
}

/// Distinct installs of a channel by client release × installed pack, and failure reports,
/// over the last `days` UTC days, merged from every packd node.
///
/// Counts are exact up to 512 installs per cell, then HyperLogLog estimates (about 1.6 %
/// relative standard error). An install that changed release or pack inside the window is
/// counted in each cell it was seen in; `days=1` shows the current picture.
#[utoipa::path(
    get,
    path = paths::FLEET_ROUTE,
    tag = "fleet",
    params(("channel" = String, Path, description = "Channel name"), FleetQuery),
    responses(
        (status = 200, description = "The fleet view", body = FleetView),
        (status = 400, description = "`invalid_name` or `invalid_body` (days out of range)", body = ErrorBody),
        (status = 401, description = "`unauthorized`: a private deployment, or `[fleet] view = \"publish\"`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 404, description = "`not_found` (nothing published on this channel) or `fleet_disabled`", body = ErrorBody),
    )
)]
pub async fn get_fleet(
    State(state): State<SharedState>,
    Path(channel): Path<String>,
    Query(query): Query<FleetQuery>,
    headers: HeaderMap,
) -> Result<Json<FleetView>, ApiError> {
    authorize_fleet_view(&state, &headers)?;
    if !state.fleet.settings().enabled {
        return Err(ApiError::FleetDisabled);
    }
    let days = window_days(query.days)?;
    let record = live(&state, &channel, &headers).await?;
    // The document was verified when it was published; here only its ranges are read.
    let ranges: Vec<semver::VersionReq> =
        serde_json::from_str::<pack_format::ChannelDocument>(&record.document)
            .map(|doc| doc.entries.into_iter().map(|e| e.clients).collect())
            .unwrap_or_default();
    let view = state
        .fleet
        .view(
            &state.storage,
            &channel,
            days,
            Some(&record.summary.pack),
            &ranges,
            OffsetDateTime::now_utc(),
        )
        .await?;
    Ok(Json(view))
}

/// A client's failure report: it refused a pack or fell back to its built-in one.
///
/// Body: exactly `{"channel", "pack", "reason", "client_version"}`, at most 512 bytes, with
/// the sender's install hash in `X-Promptpack-Install`. On a private deployment it needs a
/// `read` token, like every read. Bounded per node: `[fleet]
/// reports_per_install_per_hour` and `reports_per_second` (429 `rate_limited` with
/// `Retry-After`).
#[utoipa::path(
    post,
    path = paths::REPORTS_ROUTE,
    tag = "fleet",
    params(
        ("channel" = String, Path, description = "Channel name"),
        ("X-Promptpack-Install" = String, Header, description = "The sender's install hash, 32 lowercase hex digits"),
    ),
    request_body(content = FailureReport, content_type = "application/json"),
    responses(
        (status = 202, description = "Counted", body = ReportAccepted),
        (status = 400, description = "`invalid_name` or `invalid_body` (no install hash, unknown field or reason, bad pack or release)", body = ErrorBody),
        (status = 401, description = "`unauthorized` (private deployment)", body = ErrorBody),
        (status = 404, description = "`not_found` (nothing published on this channel) or `fleet_disabled`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: over 512 bytes", body = ErrorBody),
        (status = 422, description = "`channel_mismatch`", body = ErrorBody),
        (status = 429, description = "`rate_limited`", body = ErrorBody),
    )
)]
pub async fn post_report(
    State(state): State<SharedState>,
    Path(channel): Path<String>,
    headers: HeaderMap,
    peer: Peer,
    body: Body,
) -> Result<(StatusCode, Json<ReportAccepted>), ApiError> {
    let (install, report, _) = accept_client_post(
        &state,
        &channel,
        &headers,
        peer,
        body,
        &state.report_limiter,
        &REPORT_POST,
    )
    .await?;
    state
        .fleet
        .record_report(&report, &install, OffsetDateTime::now_utc());
    tracing::debug!(
        channel,
        pack = report.pack,
        reason = %report.reason,
        client_version = %report.client_version,
        "failure report"
    );
    Ok((
        StatusCode::ACCEPTED,
        Json(ReportAccepted { accepted: true }),
    ))
}
