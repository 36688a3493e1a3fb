//! The packd HTTP protocol, written once: the paths of every route, the headers clients and
//! servers exchange, and the JSON bodies. packd serves it (and generates its OpenAPI document
//! from these types with the `openapi` feature), packer and the client speak it.
//!
//! Every body a reader takes from the network is checked where it is parsed: SHA-256 values
//! are 64 lowercase hex digits and names follow the format's name rule, so nothing
//! downstream slices or builds a URL from an unchecked string.
//!
//! Two helpers of everything that talks HTTP live here too, since every binary reaches this
//! crate and it pulls in nothing heavy: [`retry`], the one backoff schedule (jitter, cap)
//! every retry loop of the project uses, and [`error_text`], how an error reads on one line.

// `unwrap` and `expect` are for tests: shipped code says what failed (STYLE.md, "Weight").
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod error_text;
pub mod fleet;
pub mod guard;
pub mod headers;
pub mod outcomes;
pub mod paths;
pub mod retry;

pub use fleet::{
    EstimateInfo, FailingPack, FailureCell, FailureReport, FleetCell, FleetView, RangePack,
    RangeView, ReportAccepted, ReportReason,
};
pub use outcomes::{
    OutcomeCounts, OutcomeRates, OutcomeReport, OutcomeRow, OutcomesAccepted, OutcomesView, Rate,
};

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use time::OffsetDateTime;

#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// Which blob holds pack `name` at `version`, as packd stores it at
/// `packs/{name}/{version}.json`. Until a channel document names the version, an upload of
/// other bytes replaces the record (so `sha256` may change); once one does, the version never
/// points at other bytes again. A client checks what it fetches against the signed
/// document's SHA-256, never against this record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PackRecord {
    #[serde(deserialize_with = "pack_name")]
    pub name: String,
    /// Semantic version of the pack.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub version: semver::Version,
    /// Template schema the pack was validated against.
    pub schema: u32,
    /// Lowercase hex SHA-256 of the sealed bytes.
    #[serde(deserialize_with = "sha256_hex")]
    pub sha256: String,
    /// Bytes of the sealed pack.
    pub size: u64,
    /// RFC 3339 time of the upload this record points at (to the nanosecond: an upload that
    /// replaced the record carries its own time).
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub uploaded_at: OffsetDateTime,
}

/// Answer to `PUT /v1/blobs/{sha256}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct UploadResponse {
    /// `true` when this request stored the pack, `false` when the same bytes were already there.
    pub created: bool,
    pub pack: PackRecord,
}

/// Every version of one pack: `GET /v1/packs/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PackVersions {
    #[serde(deserialize_with = "pack_name")]
    pub name: String,
    /// Sorted by semantic version, oldest first.
    pub versions: Vec<PackRecord>,
}

/// `GET /v1/packs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PackList {
    pub packs: Vec<PackVersions>,
}

/// Body of `PUT /v1/channels/{channel}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PublishRequest {
    /// The channel document, exactly the bytes that were signed (UTF-8 JSON text).
    pub document: String,
    /// The minisign signature file text for `document`.
    pub signature: String,
}

/// Answer to a publish.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PublishResponse {
    /// `true` when this request made the document live; `false` when it already was.
    pub created: bool,
    pub channel: ChannelSummary,
    /// The strong ETag `GET /v1/channels/{channel}` now answers with.
    pub etag: String,
}

/// A published channel document without its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ChannelSummary {
    /// Checked where it is read: readers put it into the next request's URL.
    #[serde(deserialize_with = "channel_name")]
    pub channel: String,
    #[serde(deserialize_with = "pack_name")]
    pub pack: String,
    pub sequence: u64,
    /// Lowercase hex SHA-256 of the document bytes.
    #[serde(deserialize_with = "sha256_hex")]
    pub sha256: String,
    /// The minisign key id that signed it.
    pub key_id: String,
    /// RFC 3339, as in the document.
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub issued_at: OffsetDateTime,
    /// RFC 3339, as in the document.
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub expires_at: OffsetDateTime,
    /// RFC 3339 time the server accepted it.
    #[serde(with = "time::serde::rfc3339")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub published_at: OffsetDateTime,
    /// The name (from packd's config) of the token that published it. Absent on documents
    /// published before packd recorded it. A label, never the token or its hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_by: Option<String>,
}

/// `GET /v1/channels`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ChannelList {
    /// The live document of every channel, sorted by name.
    pub channels: Vec<ChannelSummary>,
}

/// Documents of one channel, oldest first: `GET /v1/channels/{channel}/history`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ChannelHistory {
    #[serde(deserialize_with = "channel_name")]
    pub channel: String,
    /// Sequence of the live document, if any.
    pub live_sequence: Option<u64>,
    /// Total documents ever published on this channel.
    pub total: usize,
    /// The newest `limit` documents (all by default), oldest first.
    pub entries: Vec<ChannelSummary>,
}

/// Every error under `/v1` answers with this body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ErrorDetail {
    /// Stable machine-readable code, e.g. `stale_sequence`.
    pub code: String,
    /// Human-readable explanation.
    pub message: String,
    /// For `missing_blobs`: the SHA-256 of every referenced blob that is not on the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<Vec<String>>,
    /// For `stale_sequence`: the current sequence of the channel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_sequence: Option<u64>,
}

/// Whether `text` is a SHA-256 as the protocol writes it: 64 lowercase hex digits.
pub fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn sha256_hex<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let text = String::deserialize(deserializer)?;
    if is_sha256_hex(&text) {
        return Ok(text);
    }
    let shown: String = text.chars().take(80).collect();
    Err(D::Error::custom(format!(
        "expected a SHA-256 as 64 lowercase hex digits, found {shown:?} ({} bytes)",
        text.len()
    )))
}

fn checked_name<'de, D: Deserializer<'de>>(
    what: &'static str,
    deserializer: D,
) -> Result<String, D::Error> {
    let name = String::deserialize(deserializer)?;
    pack_format::validate_name(what, &name).map_err(D::Error::custom)?;
    Ok(name)
}

fn channel_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    checked_name("channel", deserializer)
}

fn pack_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    checked_name("pack", deserializer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(channel: &str, sha256: &str) -> serde_json::Value {
        serde_json::json!({
            "channel": channel, "pack": "core", "sequence": 3, "sha256": sha256,
            "key_id": "ABCD", "issued_at": "2026-03-01T00:00:00Z",
            "expires_at": "2026-04-01T00:00:00+02:00", "published_at": "2026-03-01T10:20:30.123456789Z"
        })
    }

    #[test]
    fn a_summary_round_trips() {
        let value = summary("stable", &"a".repeat(64));
        let parsed: ChannelSummary = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(serde_json::to_value(&parsed).unwrap(), value);
    }

    #[test]
    fn a_summary_without_the_publishing_token_still_parses_and_one_with_it_round_trips() {
        let old: ChannelSummary =
            serde_json::from_value(summary("stable", &"a".repeat(64))).unwrap();
        assert_eq!(old.published_by, None);
        let mut value = summary("stable", &"a".repeat(64));
        value["published_by"] = "release-ci".into();
        let new: ChannelSummary = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(new.published_by.as_deref(), Some("release-ci"));
        assert_eq!(serde_json::to_value(&new).unwrap(), value);
    }

    #[test]
    fn a_channel_name_that_leaves_its_path_is_refused() {
        let err = serde_json::from_value::<ChannelSummary>(summary("../packs", &"a".repeat(64)))
            .unwrap_err();
        assert!(err.to_string().contains("invalid channel name"), "{err}");
    }

    #[test]
    fn a_sha256_that_is_not_lowercase_hex_is_refused() {
        for bad in ["A".repeat(64), "a".repeat(63), "é".repeat(32)] {
            let err =
                serde_json::from_value::<ChannelSummary>(summary("stable", &bad)).unwrap_err();
            assert!(err.to_string().contains("64 lowercase hex"), "{err}");
        }
    }

    #[test]
    fn error_bodies_without_optional_fields_parse() {
        let body: ErrorBody =
            serde_json::from_str(r#"{"error":{"code":"busy","message":"try again"}}"#).unwrap();
        assert_eq!(body.error.code, "busy");
        assert_eq!(body.error.missing, None);
    }
}
