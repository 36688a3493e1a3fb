//! What packd's guard saw and did (`GET /v1/channels/{channel}/guard`): per watched rollout
//! and metric, both sides (their installs, the mean of the installs' rates, the pooled
//! counts), the difference of the means with its always-valid interval and the mixture
//! likelihood ratio; and every freeze or rollback it signed, with why.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

#[cfg(feature = "openapi")]
use utoipa::ToSchema;

use crate::outcomes::Rate;

/// One metric at one look.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct MetricLook {
    pub metric: String,
    /// The rolling-out pack: its installs' counts pooled (each install-day capped at a day's
    /// use).
    pub new: Rate,
    /// The pack it replaces, pooled the same way.
    pub old: Rate,
    /// Distinct installs with a trial of this metric on the rolling-out pack: the test's unit.
    #[serde(default)]
    pub new_installs: u64,
    /// The same on the pack it replaces.
    #[serde(default)]
    pub old_installs: u64,
    /// The mean of the rolling-out pack's installs' own rates (each install weighs the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_mean: Option<f64>,
    /// The same on the pack it replaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_mean: Option<f64>,
    /// `new_mean − old_mean`, once both sides have the minimum number of installs.
    pub difference: Option<f64>,
    /// The always-valid confidence sequence for the difference.
    pub low: f64,
    pub high: f64,
    /// The mixture likelihood ratio; the guard acts at `1 / alpha`.
    pub ratio: f64,
    pub regressed: bool,
}

/// One watched entry at one look.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct EntryLook {
    pub entry: usize,
    pub clients: String,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub version: semver::Version,
    pub sha256: String,
    /// What it replaces: a version or `builtin`.
    pub replaces: String,
    /// The rollout's percentage at the look.
    pub percent: u8,
    pub action: String,
    /// Whether the guard already acted on this entry (nothing more to do).
    pub stopped: bool,
    pub metrics: Vec<MetricLook>,
}

/// A freeze or rollback the guard signed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Decision {
    pub channel: String,
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub at: OffsetDateTime,
    pub action: String,
    pub entry: usize,
    pub clients: String,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub version: semver::Version,
    /// The sequence the guard document took.
    pub sequence: u64,
    /// The sequence of the signed document it restricts.
    pub restricts: u64,
    pub percent: u8,
    /// Why: the metric that regressed, with both rates and the interval.
    pub reason: String,
    pub look: EntryLook,
}

/// `GET /v1/channels/{c}/guard`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct GuardView {
    pub channel: String,
    /// The guard key this node holds, if any.
    pub key_id: Option<String>,
    /// The key the channel's signed document delegates to, if any.
    pub delegated: Option<String>,
    pub alpha: f64,
    pub tau: f64,
    /// Distinct installs each side needs before any decision.
    pub min_installs: u64,
    /// This node's latest look, if it looked.
    pub last: Option<GuardLook>,
    /// Every decision stored, newest first (at most 50).
    pub decisions: Vec<Decision>,
}

/// What one look at a channel saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct GuardLook {
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub at: OffsetDateTime,
    pub sequence: u64,
    pub entries: Vec<EntryLook>,
}
