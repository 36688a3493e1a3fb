//! The JSON shapes of the API and of the records kept in storage.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::ToSchema;

/// Which blob holds pack `name` at `version`. Stored create-only at
/// `packs/{name}/{version}.json`, so one name and version can never point at two blobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PackRecord {
    pub name: String,
    /// Semantic version of the pack.
    pub version: String,
    /// Template schema the pack was validated against.
    pub schema: u32,
    /// Lowercase hex SHA-256 of the sealed bytes.
    pub sha256: String,
    /// Bytes of the sealed pack.
    pub size: u64,
    /// RFC 3339 time of the first upload.
    pub uploaded_at: String,
}

/// Answer to a pack upload.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UploadResponse {
    /// `true` when this request stored the pack, `false` when the same bytes were already there.
    pub created: bool,
    pub pack: PackRecord,
}

/// Every version of one pack.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PackVersions {
    pub name: String,
    /// Sorted by semantic version, oldest first.
    pub versions: Vec<PackRecord>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PackList {
    pub packs: Vec<PackVersions>,
}

/// Body of `PUT /v1/channels/{channel}`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishRequest {
    /// The channel document, exactly the bytes that were signed (UTF-8 JSON text).
    pub document: String,
    /// The minisign signature file text for `document`.
    pub signature: String,
}

/// Answer to a publish.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PublishResponse {
    /// `true` when this request made the document live; `false` when it already was.
    pub created: bool,
    pub channel: ChannelSummary,
    /// The strong ETag `GET /v1/channels/{channel}` now answers with.
    pub etag: String,
}

/// A published channel document without its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ChannelSummary {
    pub channel: String,
    pub pack: String,
    pub sequence: u64,
    /// Lowercase hex SHA-256 of the document bytes.
    pub sha256: String,
    /// The minisign key id that signed it.
    pub key_id: String,
    pub issued_at: String,
    pub expires_at: String,
    /// RFC 3339 time the server accepted it.
    pub published_at: String,
}

/// A published document as stored: `channels/{channel}/history/{sequence:020}.json` (every
/// one, create-only; the highest is live) and `channels/{channel}/head.json` (the hint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelRecord {
    #[serde(flatten)]
    pub summary: ChannelSummary,
    pub document: String,
    pub signature: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ChannelList {
    /// The live document of every channel, sorted by name.
    pub channels: Vec<ChannelSummary>,
}

/// Documents of one channel, oldest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ChannelHistory {
    pub channel: String,
    /// Sequence of the live document, if any.
    pub live_sequence: Option<u64>,
    /// Total documents ever published on this channel.
    pub total: usize,
    /// The newest `limit` documents (all by default), oldest first.
    pub entries: Vec<ChannelSummary>,
}

/// RFC 3339, as everywhere in the API.
pub fn rfc3339(t: OffsetDateTime) -> String {
    pack_format::channel::format_time(t)
}
