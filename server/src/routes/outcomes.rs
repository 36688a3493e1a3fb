//! `/v1/channels/{channel}/outcomes`: how the turns of each pack version went, as clients
//! count them (`POST`), merged over the fleet with rates and intervals (`GET`).

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use pack_protocol::outcomes::MAX_OUTCOME_BYTES;
use pack_protocol::paths;
use pack_protocol::{OutcomeReport, OutcomesAccepted, OutcomesView};
use serde::Deserialize;
use time::OffsetDateTime;
use utoipa::IntoParams;

use crate::error::{ApiError, ErrorBody};
use crate::fleet::outcomes::Refusal;
use crate::routes::channels::live;
use crate::routes::{ClientPost, Peer, accept_client_post, authorize_fleet_view, window_days};
use crate::state::SharedState;

/// Seconds a client waits after a node refused a report for being full: the node's memory
/// frees as days leave the window, and another node may have room.
const FULL_RETRY_SECS: u64 = 3600;

const OUTCOME_POST: ClientPost<OutcomeReport> = ClientPost {
    max_bytes: MAX_OUTCOME_BYTES,
    needs: "outcome counts need",
    expected: "an outcome report",
    channel: |report| &report.channel,
};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OutcomesQuery {
    /// UTC days to cover, today included: 1 to 7 (default 7).
    pub days: Option<u32>,
}

/// Outcome counts of a channel per pack version × client release over the last `days` UTC
/// days, merged from every packd node, with each rate's 95 % Wilson score interval.
///
/// Each install counts once per day and row: its latest report of that day. Rates:
/// `tool_error_rate` and `denial_rate` per tool call, `model_error_rate`, `aborted_rate` and
/// `fallback_rate` per turn (model call), `exec_failure_rate` per `agent exec` run.
#[utoipa::path(
    get,
    path = paths::OUTCOMES_ROUTE,
    tag = "outcomes",
    params(("channel" = String, Path, description = "Channel name"), OutcomesQuery),
    responses(
        (status = 200, description = "The merged outcome counts", body = OutcomesView),
        (status = 400, description = "`invalid_name` or `invalid_body` (days out of range)", body = ErrorBody),
        (status = 401, description = "`unauthorized`: a private deployment, or `[fleet] view = \"publish\"`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 404, description = "`not_found` (nothing published on this channel) or `fleet_disabled`", body = ErrorBody),
    )
)]
pub async fn get_outcomes(
    State(state): State<SharedState>,
    Path(channel): Path<String>,
    Query(query): Query<OutcomesQuery>,
    headers: HeaderMap,
) -> Result<Json<OutcomesView>, ApiError> {
    authorize_fleet_view(&state, &headers)?;
    if !state.fleet.settings().enabled {
        return Err(ApiError::FleetDisabled);
    }
    let days = window_days(query.days)?;
    live(&state, &channel, &headers).await?;
    let view = state
        .fleet
        .outcomes()
        .view(&state.storage, &channel, days, OffsetDateTime::now_utc())
        .await?;
    Ok(Json(view))
}

/// One install's outcome counts of one UTC day for one pack version and client release.
///
/// Body: an `OutcomeReport` and nothing else, at most 1024 bytes, with the sender's install
/// hash in `X-Promptpack-Install`. Counts only: no field carries text. A later report of the
/// same install, day, pack and release replaces the earlier one; each count is taken at most
/// at a day's plausible use (the whole scaled down with its parts). The client release must
/// be in an entry of the channel's live document. On a private deployment it needs a `read`
/// token, like every read. Bounded per node like failure reports (`[fleet]
/// reports_per_install_per_hour`, `reports_per_address_per_hour`, `reports_per_second`; 429
/// `rate_limited` with `Retry-After`), and by the rows and installs a node keeps per day (429).
#[utoipa::path(
    post,
    path = paths::OUTCOMES_ROUTE,
    tag = "outcomes",
    params(
        ("channel" = String, Path, description = "Channel name"),
        ("X-Promptpack-Install" = String, Header, description = "The sender's install hash, 32 lowercase hex digits"),
    ),
    request_body(content = OutcomeReport, content_type = "application/json"),
    responses(
        (status = 202, description = "Counted", body = OutcomesAccepted),
        (status = 400, description = "`invalid_name` or `invalid_body` (no install hash, unknown field, a count over its cap or over its whole, a bad name, release or day, a day outside the window, a client release no entry of the live document is for)", body = ErrorBody),
        (status = 401, description = "`unauthorized` (private deployment)", body = ErrorBody),
        (status = 404, description = "`not_found` (nothing published on this channel) or `fleet_disabled`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: over 1024 bytes", body = ErrorBody),
        (status = 422, description = "`channel_mismatch`", body = ErrorBody),
        (status = 429, description = "`rate_limited`", body = ErrorBody),
    )
)]
pub async fn post_outcomes(
    State(state): State<SharedState>,
    Path(channel): Path<String>,
    headers: HeaderMap,
    peer: Peer,
    body: Body,
) -> Result<(StatusCode, Json<OutcomesAccepted>), ApiError> {
    let (install, report, record) = accept_client_post(
        &state,
        &channel,
        &headers,
        peer,
        body,
        &state.outcome_limiter,
        &OUTCOME_POST,
    )
    .await?;
    // A row for a release no entry serves is evidence of nothing the guard weighs, and
    // made-up releases would fill the day's rows.
    if let Some(ranges) = client_ranges(&record.document)
        && !ranges.iter().any(|r| r.matches(&report.client_version))
    {
        return Err(ApiError::InvalidBody {
            reason: format!(
                "client release {} is in no entry of channel {channel}'s live document \
                 (sequence {}), whose entries are for {}; outcome counts are taken only for \
                 releases the channel serves",
                report.client_version,
                record.summary.sequence,
                ranges
                    .iter()
                    .map(|r| format!("\"{r}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    match state
        .fleet
        .outcomes()
        .record(&report, &install, OffsetDateTime::now_utc())
    {
        Ok(()) => {}
        Err(refusal @ Refusal::OutOfWindow { .. }) => {
            return Err(ApiError::InvalidBody {
                reason: refusal.to_string(),
            });
        }
        Err(refusal @ Refusal::Full { .. }) => {
            return Err(ApiError::RateLimited {
                reason: refusal.to_string(),
                retry_after_secs: FULL_RETRY_SECS,
            });
        }
    }
    tracing::debug!(
        channel,
        day = report.day,
        pack_version = %report.pack_version,
        client_version = %report.client_version,
        "outcome counts"
    );
    Ok((
        StatusCode::ACCEPTED,
        Json(OutcomesAccepted { accepted: true }),
    ))
}

/// The client ranges of a live document's entries (`None` if it does not parse, which a
/// document verified when it was published does).
fn client_ranges(document: &str) -> Option<Vec<semver::VersionReq>> {
    let doc = serde_json::from_str::<pack_format::ChannelDocument>(document).ok()?;
    // A stop order carries no entries: the ranges are those of the document it restricts.
    let doc = pack_format::guard::effective(&doc).unwrap_or(doc);
    Some(doc.entries.into_iter().map(|e| e.clients).collect())
}
