//! The fleet view and failure reports: what clients tell packd about themselves, and what
//! packd tells publishers about the fleet.
//!
//! A client is known to packd only by its *install hash* ([`install_hash`]): the SHA-256 of
//! its random install id salted with the server's URL and the channel, cut to 128 bits. The
//! salt is derived on the client, per deployment and channel, so no server can choose it:
//! two deployments (or two channels of one) never see the same value for one install and
//! cannot link it, and the raw id, which also decides rollout buckets, never leaves the
//! device.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// Characters of an install hash: 32 lowercase hex digits (128 bits).
pub const INSTALL_HASH_LEN: usize = 32;

/// Largest failure report body packd reads, in bytes. A report is four short fields.
pub const MAX_REPORT_BYTES: usize = 512;

/// Longest client release accepted in a report or a fleet header.
pub const MAX_RELEASE_LEN: usize = 64;

/// The install hash a client sends for `install_id` when it talks to `server` (its base URL,
/// without a trailing slash) about `channel`.
pub fn install_hash(server: &str, channel: &str, install_id: &str) -> String {
    let salted = format!(
        "promptpack install v1\n{}\n{channel}\n{install_id}",
        server.trim_end_matches('/')
    );
    let mut hash = pack_format::sha256_hex(salted.as_bytes());
    hash.truncate(INSTALL_HASH_LEN);
    hash
}

/// Whether `text` has the shape of an install hash.
pub fn is_install_hash(text: &str) -> bool {
    text.len() == INSTALL_HASH_LEN && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Why a client refused a pack or fell back to its built-in one. Codes only: a report never
/// carries an error text, which could quote a template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReportReason {
    /// The downloaded bytes did not have the signed SHA-256.
    HashMismatch,
    /// No content key this client holds opens the pack.
    ContentKey,
    /// The pack's payload, index or templates are broken.
    InvalidPack,
    /// The pack targets a template schema this client does not know.
    IncompatibleSchema,
    /// The pack header disagrees with its channel entry.
    HeaderMismatch,
    /// The channel document has expired; the client keeps what it had.
    Expired,
    /// The installed pack failed its re-check at start-up; the client serves the built-in one.
    StartupCheck,
    /// A template failed to render at run time; that request was served from the built-in pack.
    RenderFailed,
    /// Templates failed to render several times in a row: the pack is marked bad on the
    /// device, which now serves its built-in pack.
    MarkedBad,
}

impl ReportReason {
    pub const ALL: [ReportReason; 9] = [
        ReportReason::HashMismatch,
        ReportReason::ContentKey,
        ReportReason::InvalidPack,
        ReportReason::IncompatibleSchema,
        ReportReason::HeaderMismatch,
        ReportReason::Expired,
        ReportReason::StartupCheck,
        ReportReason::RenderFailed,
        ReportReason::MarkedBad,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ReportReason::HashMismatch => "hash_mismatch",
            ReportReason::ContentKey => "content_key",
            ReportReason::InvalidPack => "invalid_pack",
            ReportReason::IncompatibleSchema => "incompatible_schema",
            ReportReason::HeaderMismatch => "header_mismatch",
            ReportReason::Expired => "expired",
            ReportReason::StartupCheck => "startup_check",
            ReportReason::RenderFailed => "render_failed",
            ReportReason::MarkedBad => "marked_bad",
        }
    }
}

impl std::fmt::Display for ReportReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Body of `POST /v1/channels/{channel}/reports`: everything a failure report holds. The
/// sender is known only by its install hash (header [`crate::headers::INSTALL`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FailureReport {
    /// Must equal the channel in the URL.
    #[serde(deserialize_with = "channel_name")]
    pub channel: String,
    /// The SHA-256 of the sealed pack the report is about, or `builtin`.
    #[serde(deserialize_with = "pack_ref")]
    pub pack: String,
    pub reason: ReportReason,
    /// The client's release.
    #[serde(deserialize_with = "release")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub client_version: semver::Version,
}

/// Answer to an accepted report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ReportAccepted {
    pub accepted: bool,
}

/// `GET /v1/channels/{channel}/fleet`: distinct installs by client release × installed pack,
/// and failure reports, over the last `days` UTC days (today included), merged from every
/// packd node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct FleetView {
    #[serde(deserialize_with = "channel_name")]
    pub channel: String,
    /// The UTC dates covered, oldest first (`YYYY-MM-DD`); `daily` counts follow this order.
    pub days: Vec<String>,
    /// Distinct installs seen on the channel in the window (all cells together).
    pub installs: u64,
    /// One per client release × pack, most installs first. An install that changed pack or
    /// release inside the window counts in each cell it was seen in.
    pub cells: Vec<FleetCell>,
    /// Per release range of the live channel document (in entry order; each client release
    /// counts under the first range that matches it, as clients select): distinct installs
    /// of the range and of each pack within it. Shares of a range can add up to more than
    /// 100 % while installs move to a new pack: each is "installs seen on this pack".
    #[serde(default)]
    pub ranges: Vec<RangeView>,
    /// Failure reports by pack, reason and client release, most reports first.
    pub failures: Vec<FailureCell>,
    /// Failure reports by pack alone, with the distinct installs that sent them (an install
    /// reporting two reasons counts once), most installs first. Empty from a packd that did
    /// not count them.
    #[serde(default)]
    pub failing_packs: Vec<FailingPack>,
    /// Whether some combinations were over the cell cap and are counted under `other`.
    pub overflow: bool,
    /// How many node sketches were merged (one per packd process per day that saw clients).
    pub sources: usize,
    /// How exact the counts are: `exact` up to this many installs per cell, then a
    /// HyperLogLog estimate with about this relative standard error.
    pub estimate: EstimateInfo,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct EstimateInfo {
    pub exact_up_to: u64,
    pub relative_error: f64,
}

/// Distinct installs of one client release serving one pack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct FleetCell {
    /// The client release, `unknown` when a client did not say, or `other` (over the cap).
    pub client_version: String,
    /// SHA-256 of the installed sealed pack, `builtin`, or `other` (over the cap).
    pub pack: String,
    /// The pack version, when packd knows this SHA-256 as an uploaded pack of the channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub pack_version: Option<semver::Version>,
    /// Distinct installs over the window.
    pub installs: u64,
    /// Distinct installs per day, in the order of [`FleetView::days`].
    pub daily: Vec<u64>,
}

/// Installs of one release range of the channel document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RangeView {
    /// The entry's client range as written in the document, e.g. `>=1.4.0, <1.5.0`.
    pub clients: String,
    /// Distinct installs whose release falls in this range.
    pub installs: u64,
    /// Distinct installs per pack within the range, most first.
    pub packs: Vec<RangePack>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RangePack {
    /// As in [`FleetCell::pack`].
    pub pack: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub pack_version: Option<semver::Version>,
    pub installs: u64,
}

/// Failure reports of one pack, reason and client release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct FailureCell {
    /// As in [`FleetCell::pack`].
    pub pack: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub pack_version: Option<semver::Version>,
    /// A [`ReportReason`] code, or `other` (over the cap).
    pub reason: String,
    pub client_version: String,
    /// Reports received.
    pub reports: u64,
    /// Distinct installs that sent them.
    pub installs: u64,
    /// Distinct installs that sent them, per day, in the order of [`FleetView::days`]
    /// (empty from a packd that did not count them per day).
    #[serde(default)]
    pub daily: Vec<u64>,
}

/// The failure reports of one pack, over every reason and client release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct FailingPack {
    /// As in [`FleetCell::pack`].
    pub pack: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub pack_version: Option<semver::Version>,
    /// Reports received.
    pub reports: u64,
    /// Distinct installs that sent them.
    pub installs: u64,
    /// Distinct installs that sent them, per day, in the order of [`FleetView::days`].
    pub daily: Vec<u64>,
}

pub(crate) fn channel_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let name = String::deserialize(deserializer)?;
    pack_format::validate_name("channel", &name).map_err(D::Error::custom)?;
    Ok(name)
}

pub(crate) fn pack_ref<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let text = String::deserialize(deserializer)?;
    if text == crate::headers::INSTALLED_BUILTIN || crate::is_sha256_hex(&text) {
        return Ok(text);
    }
    let shown: String = text.chars().take(80).collect();
    Err(D::Error::custom(format!(
        "expected a SHA-256 as 64 lowercase hex digits or \"builtin\", found {shown:?}"
    )))
}

/// `text` as a client release, if the protocol accepts it: semver, at most
/// [`MAX_RELEASE_LEN`] bytes.
pub fn parse_release(text: &str) -> Option<semver::Version> {
    if text.len() > MAX_RELEASE_LEN {
        return None;
    }
    semver::Version::parse(text).ok()
}

/// Whether `text` is a client release as the protocol accepts it ([`parse_release`]).
pub fn is_release(text: &str) -> bool {
    parse_release(text).is_some()
}

pub(crate) fn release<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<semver::Version, D::Error> {
    let text = String::deserialize(deserializer)?;
    if let Some(version) = parse_release(&text) {
        return Ok(version);
    }
    let shown: String = text.chars().take(80).collect();
    Err(D::Error::custom(format!(
        "expected a semver release of at most {MAX_RELEASE_LEN} bytes such as 1.4.2, found {shown:?}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_install_hash_depends_on_server_and_channel_and_hides_the_id() {
        let id = "0123456789abcdef0123456789abcdef";
        let a = install_hash("https://packs.example.com", "stable", id);
        assert!(is_install_hash(&a), "{a}");
        assert!(!a.contains(id));
        assert_eq!(a, install_hash("https://packs.example.com/", "stable", id));
        assert_ne!(a, install_hash("https://packs.example.com", "beta", id));
        assert_ne!(a, install_hash("https://other.example.com", "stable", id));
    }

    #[test]
    fn a_report_is_exactly_four_checked_fields() {
        let sha = "a".repeat(64);
        let ok = serde_json::json!({"channel": "stable", "pack": sha, "reason": "render_failed", "client_version": "1.4.2"});
        let report: FailureReport = serde_json::from_value(ok.clone()).unwrap();
        assert_eq!(report.reason, ReportReason::RenderFailed);
        assert_eq!(serde_json::to_value(&report).unwrap(), ok);

        let mut extra = ok.clone();
        extra["detail"] = "the template text".into();
        let err = serde_json::from_value::<FailureReport>(extra).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");

        let mut reason = ok.clone();
        reason["reason"] = "because".into();
        let err = serde_json::from_value::<FailureReport>(reason).unwrap_err();
        assert!(err.to_string().contains("render_failed"), "{err}");

        let mut pack = ok.clone();
        pack["pack"] = "core@1.2.0".into();
        assert!(serde_json::from_value::<FailureReport>(pack).is_err());

        let mut release = ok;
        release["client_version"] = "1.4".into();
        assert!(serde_json::from_value::<FailureReport>(release).is_err());
    }

    #[test]
    fn reason_codes_round_trip() {
        for reason in ReportReason::ALL {
            let text = serde_json::to_string(&reason).unwrap();
            assert_eq!(text, format!("\"{}\"", reason.as_str()));
            assert_eq!(serde_json::from_str::<ReportReason>(&text).unwrap(), reason);
        }
    }
}
