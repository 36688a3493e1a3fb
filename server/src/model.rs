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
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChannelRecord {
    #[serde(flatten)]
    pub summary: ChannelSummary,
    pub document: String,
    pub signature: String,
    /// The document's ETag header, made on first use: a record in memory answers every
    /// revalidation of its channel.
    #[serde(skip)]
    etag: std::sync::OnceLock<axum::http::HeaderValue>,
}

/// Records are equal by what is stored, whether or not either made its ETag yet.
impl PartialEq for ChannelRecord {
    fn eq(&self, other: &Self) -> bool {
        (&self.summary, &self.document, &self.signature)
            == (&other.summary, &other.document, &other.signature)
    }
}

impl Eq for ChannelRecord {}

impl ChannelRecord {
    pub fn new(summary: ChannelSummary, document: String, signature: String) -> Self {
        ChannelRecord {
            summary,
            document,
            signature,
            etag: std::sync::OnceLock::new(),
        }
    }

    /// The document's strong ETag (its SHA-256 in quotes), as a header value.
    pub fn etag(&self) -> &axum::http::HeaderValue {
        self.etag.get_or_init(|| {
            let tag = format!("\"{}\"", self.summary.sha256);
            axum::http::HeaderValue::from_str(&tag)
                .unwrap_or_else(|_| axum::http::HeaderValue::from_static("\"\""))
        })
    }
}

/// RFC 3339, as everywhere in the API.
pub fn rfc3339(t: OffsetDateTime) -> String {
    pack_format::channel::format_time(t)
}
