//! The JSON shapes of the API and of the records kept in storage.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

// The wire types are the protocol crate's: one definition for packd, packer and the client.
pub use pack_protocol::{
    ChannelHistory, ChannelList, ChannelSummary, PackList, PackRecord, PackVersions,
    PublishRequest, PublishResponse, UploadResponse,
};

/// A published document as stored: `channels/{channel}/history/{sequence:020}.json` (every
/// one, create-only; the highest is live) and `channels/{channel}/head.json` (the hint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelRecord {
    #[serde(flatten)]
    pub summary: ChannelSummary,
    pub document: String,
    pub signature: String,
}

/// RFC 3339, as everywhere in the API.
pub fn rfc3339(t: OffsetDateTime) -> String {
    pack_format::channel::format_time(t)
}
