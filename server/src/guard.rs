//! The guard: packd holding a channel's guard key watches each rollout the publisher asked it
//! to watch (`watch` in the signed rollout), compares the rolling-out pack with the one it
//! replaces on the named outcome rates with an always-valid sequential test
//! ([`sequential`]), and on a regression signs, with the guard key, the freeze or rollback
//! the release asked for. The guard key can do nothing else: clients refuse a guard document
//! that widens, names a new version or extends the expiry (see `pack_format::guard`).
//!
//! Every node holding the key looks; the channel's sequence lets one publish win. What each
//! look saw is kept in memory for `GET /v1/channels/{c}/guard`; every decision is stored
//! (`guard/{channel}/{sequence}.json`), so any node and the console can say why it acted.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use pack_format::channel::SignedChannel;
use pack_format::guard::{GuardAction, guard_document};
use pack_format::{ChannelDocument, EntryTarget, WatchAction};
use pack_protocol::guard::{Decision, EntryLook, GuardLook, GuardView, MetricLook};
use pack_protocol::outcomes::{OutcomeCounts, OutcomeRates};
use pack_protocol::paths;

use time::OffsetDateTime;

use crate::error::{ApiError, ErrorBody};
use crate::fleet::outcomes::Evidence;
use crate::routes::channels::live;
use crate::routes::{authorize_fleet_view, check_name};
use crate::sequential;
use crate::state::SharedState;
use crate::storage::Created;

/// Storage keys of the decisions.
pub mod keys {
    pub fn decisions_dir(channel: &str) -> String {
        format!("guard/{channel}")
    }
    pub fn decision(channel: &str, sequence: u64) -> String {
        format!("guard/{channel}/{sequence:020}.json")
    }
}

/// Looks at every channel every `interval`, for as long as packd runs.
pub async fn run(state: SharedState) {
    let interval = state.settings.guard.interval;
    loop {
        tokio::time::sleep(interval).await;
        let channels = match state
            .storage
            .list_dirs(crate::storage::keys::CHANNELS)
            .await
        {
            Ok(channels) => channels,
            Err(err) => {
                tracing::warn!(%err, "guard: could not list channels");
                continue;
            }
        };
        for channel in channels {
            if let Err(err) = look(&state, &channel, OffsetDateTime::now_utc()).await {
                tracing::warn!(channel, %err, "guard: look failed");
            }
        }
    }
}

/// One look at `channel` at `now`: `None` when this node holds no key the channel
/// delegates to. Acts when a watched metric regressed.
pub async fn look(
    state: &SharedState,
    channel: &str,
    now: OffsetDateTime,
) -> Result<Option<GuardLook>, ApiError> {
    let Some(key) = state.settings.guard.key.clone() else {
        return Ok(None);
    };
    let Some(record) = state.live.check(channel).await? else {
        return Ok(None);
    };
    let verified = match pack_format::channel::verify(
        record.document.as_bytes(),
        &record.signature,
        &state.settings.trusted_keys,
        now,
        &state.settings.limits,
    ) {
        Ok(verified) => verified,
        // Expired, or signed with a key this node no longer trusts: nothing to guard.
        Err(_) => return Ok(None),
    };
    let (base, base_doc) = match (&verified.base, &verified.document.restricts) {
        (Some(base), Some(restricts)) => (
            SignedChannel {
                document: restricts.document.clone().into_bytes(),
                signature: restricts.signature.clone(),
            },
            &base.document,
        ),
        // The document verified is a stop order exactly when it carries a verified base.
        _ => (
            SignedChannel {
                document: record.document.clone().into_bytes(),
                signature: record.signature.clone(),
            },
            &verified.document,
        ),
    };
    if base_doc.guard.as_ref().and_then(|g| g.key_id().ok()) != Some(key.key_id()) {
        return Ok(None);
    }
    let doc = &verified.document;
    let evidence = state
        .fleet
        .outcomes()
        .evidence(
            &state.storage,
            channel,
            state.settings.guard.window_days,
            now,
        )
        .await?;
    let settings = &state.settings.guard.test;
    let entries = entry_looks(doc, &evidence, settings, now);
    let look = GuardLook {
        at: now,
        sequence: doc.sequence,
        entries,
    };
    state.guard_looks.put(channel, look.clone());

    let Some(acting) = look
        .entries
        .iter()
        .find(|e| !e.stopped && e.metrics.iter().any(|m| m.regressed))
    else {
        return Ok(Some(look));
    };
    let action = if acting.action == "rollback" {
        GuardAction::Rollback
    } else {
        GuardAction::Freeze
    };
    let guarded = guard_document(&base, doc, acting.entry, action, now)
        .map_err(|e| ApiError::Internal(format!("guard document: {e}")))?;
    let signed = guarded
        .sign(&key)
        .map_err(|e| ApiError::Internal(format!("guard signing failed: {e}")))?;
    let text = String::from_utf8(signed.document)
        .map_err(|e| ApiError::Internal(format!("guard document is not UTF-8: {e}")))?;
    let published =
        crate::routes::channels::publish_signed(state, channel, text, signed.signature, "guard")
            .await;
    match published {
        Ok((record, true)) => {
            let regressed: Vec<String> = acting
                .metrics
                .iter()
                .filter(|m| m.regressed)
                .map(describe_regression)
                .collect();
            let decision = Decision {
                channel: channel.to_string(),
                at: now,
                action: action.to_string(),
                entry: acting.entry,
                clients: acting.clients.clone(),
                version: acting.version.clone(),
                sequence: record.summary.sequence,
                restricts: base_doc.sequence,
                percent: acting.percent,
                reason: regressed.join("; "),
                look: acting.clone(),
            };
            tracing::warn!(
                channel,
                action = %action,
                version = %decision.version,
                sequence = decision.sequence,
                reason = decision.reason,
                "guard stopped a rollout"
            );
            store_decision(state, &decision).await?;
        }
        Ok((_, false)) => {}
        // Another node (or a publisher) moved the channel first: the next look sees it.
        Err(ApiError::StaleSequence { .. } | ApiError::SequenceTaken { .. }) => {}
        Err(other) => return Err(other),
    }
    Ok(Some(look))
}

fn describe_regression(m: &MetricLook) -> String {
    let pct = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{:.2}%", r * 100.0));
    format!(
        "{} {} over {} installs ({} of {}) against {} over {} installs ({} of {}): difference of the installs' mean rates {:+.2} points, always-valid interval [{:+.2}, {:+.2}], likelihood ratio {}",
        m.metric,
        pct(m.new_mean),
        m.new_installs,
        m.new.events,
        m.new.trials,
        pct(m.old_mean),
        m.old_installs,
        m.old.events,
        m.old.trials,
        m.difference.unwrap_or(0.0) * 100.0,
        m.low * 100.0,
        m.high * 100.0,
        if m.ratio < 1e6 {
            format!("{:.0}", m.ratio)
        } else {
            format!("{:.2e}", m.ratio)
        }
    )
}

/// The look at each watched entry of `doc` (an offline-signed document, or a stop order
/// with its stops applied), on the per-install `evidence`: each side is the installs in the
/// entry's client range that reported the pack, each install one unit however much it
/// reported.
pub fn entry_looks(
    doc: &ChannelDocument,
    evidence: &Evidence,
    settings: &sequential::Settings,
    now: OffsetDateTime,
) -> Vec<EntryLook> {
    let mut looks = Vec::new();
    for (i, entry) in doc.entries.iter().enumerate() {
        let Some(rollout) = &entry.rollout else {
            continue;
        };
        let Some(watch) = &rollout.watch else {
            continue;
        };
        let EntryTarget::Pack(new_pack) = &entry.target else {
            continue;
        };
        let stop = doc.restricts.as_ref().and_then(|r| r.stop_for(i));
        // A reverted entry has no installs left to look at.
        if matches!(stop, Some(pack_format::Stop::Revert { .. })) {
            continue;
        }
        // The pack a stop would send the entry's installs to: where that depends on the
        // release, the built-in pack's counts are compared.
        let replaced = doc.range_fallback(i).unwrap_or(&EntryTarget::Builtin);
        let (old_key, replaces) = match replaced {
            EntryTarget::Pack(p) => (p.sha256.clone(), p.version.to_string()),
            EntryTarget::Builtin => ("builtin".to_string(), "builtin".to_string()),
        };
        let installs = |pack: &str| {
            let per_install = evidence.installs(pack, |release| entry.clients.matches(release));
            let mut sum = OutcomeCounts::default();
            for counts in &per_install {
                sum.sum(counts);
            }
            let rates: Vec<OutcomeRates> = per_install.iter().map(OutcomeRates::of).collect();
            (OutcomeRates::of(&sum), rates)
        };
        let (new_side, old_side) = (installs(&new_pack.sha256), installs(&old_key));
        let named = |rates: &OutcomeRates, metric: &str| {
            rates
                .named()
                .into_iter()
                .find(|(name, _)| *name == metric)
                .map(|(_, rate)| rate)
        };
        let per_install = |rates: &[OutcomeRates], metric: &str| -> Vec<(u64, u64)> {
            rates
                .iter()
                .filter_map(|r| named(r, metric))
                .map(|r| (r.events, r.trials))
                .collect()
        };
        let metrics = watch
            .metrics
            .iter()
            .filter_map(|metric| {
                let (new, old) = (named(&new_side.0, metric)?, named(&old_side.0, metric)?);
                let found = sequential::look(
                    &per_install(&new_side.1, metric),
                    &per_install(&old_side.1, metric),
                    settings,
                );
                Some(MetricLook {
                    metric: metric.clone(),
                    new,
                    old,
                    new_installs: found.new.installs,
                    old_installs: found.old.installs,
                    new_mean: found.new.mean,
                    old_mean: found.old.mean,
                    difference: found.difference,
                    low: found.low,
                    high: found.high,
                    ratio: found.ratio,
                    regressed: found.regressed,
                })
            })
            .collect();
        let frozen = stop.is_some();
        looks.push(EntryLook {
            entry: i,
            clients: entry.clients.to_string(),
            version: new_pack.version.clone(),
            sha256: new_pack.sha256.clone(),
            replaces,
            percent: match stop {
                None => rollout.percent_at(doc.ramp_time(now)),
                Some(pack_format::Stop::Hold { percent, .. }) => {
                    (*percent).min(rollout.percent_at(doc.ramp_time(now)))
                }
                Some(pack_format::Stop::Revert { .. }) => 0,
            },
            action: match watch.action {
                WatchAction::Freeze => "freeze",
                WatchAction::Rollback => "rollback",
            }
            .to_string(),
            // A frozen entry is done for a freeze; a rollback still takes it back.
            stopped: frozen && watch.action == WatchAction::Freeze,
            metrics,
        });
    }
    looks
}

async fn store_decision(state: &SharedState, decision: &Decision) -> Result<(), ApiError> {
    let bytes =
        serde_json::to_vec_pretty(decision).map_err(|e| ApiError::Internal(e.to_string()))?;
    match state
        .storage
        .create(
            &keys::decision(&decision.channel, decision.sequence),
            bytes.into(),
        )
        .await?
    {
        Created::Created | Created::AlreadyExists => Ok(()),
    }
}

/// The stored decisions of `channel`, newest first, at most 50.
pub async fn decisions(state: &SharedState, channel: &str) -> Result<Vec<Decision>, ApiError> {
    let mut listed = state.storage.list(&keys::decisions_dir(channel)).await?;
    listed.sort_by(|a, b| b.location.as_ref().cmp(a.location.as_ref()));
    let mut out = Vec::new();
    for meta in listed.into_iter().take(50) {
        if let Some(bytes) = state.storage.get(meta.location.as_ref()).await?
            && let Ok(decision) = serde_json::from_slice::<Decision>(&bytes)
        {
            out.push(decision);
        }
    }
    Ok(out)
}

/// The view `GET /v1/channels/{c}/guard` answers with.
pub async fn view(state: &SharedState, channel: &str) -> Result<GuardView, ApiError> {
    let delegated = match state.live.check(channel).await? {
        Some(record) => delegated_key(state, &record.document, &record.signature),
        None => None,
    };
    let test = &state.settings.guard.test;
    Ok(GuardView {
        channel: channel.to_string(),
        key_id: state.settings.guard.key.as_ref().map(|k| k.key_id()),
        delegated,
        alpha: test.alpha,
        tau: test.tau,
        min_installs: test.min_installs,
        last: state.guard_looks.get(channel),
        decisions: decisions(state, channel).await?,
    })
}

fn delegated_key(state: &SharedState, document: &str, signature: &str) -> Option<String> {
    let verified = pack_format::channel::verify_ignoring_expiry(
        document.as_bytes(),
        signature,
        &state.settings.trusted_keys,
        &state.settings.limits,
    )
    .ok()?;
    let base = verified.base.as_deref().unwrap_or(&verified);
    base.document.guard.as_ref()?.key_id().ok()
}

/// The guard of a channel: the key this node holds and the key the channel delegates to, the
/// test's settings, the latest look (per watched entry and metric: both rates, the
/// difference, its always-valid interval and the likelihood ratio) and the decisions stored,
/// newest first. Readable like the fleet view (`[fleet] view`).
#[utoipa::path(
    get,
    path = paths::GUARD_ROUTE,
    tag = "guard",
    params(("channel" = String, Path, description = "Channel name")),
    responses(
        (status = 200, description = "The guard's view of the channel", body = GuardView),
        (status = 400, description = "`invalid_name`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 404, description = "`not_found`: nothing published on this channel", body = ErrorBody),
    )
)]
pub async fn get_guard(
    State(state): State<SharedState>,
    Path(channel): Path<String>,
    headers: HeaderMap,
) -> Result<Json<GuardView>, ApiError> {
    authorize_fleet_view(&state, &headers)?;
    check_name("channel", &channel)?;
    live(&state, &channel, &headers).await?;
    Ok(Json(view(&state, &channel).await?))
}
