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
    /// revalidation of its channel. `None` when the stored SHA-256 cannot be a header.
    #[serde(skip)]
    etag: std::sync::OnceLock<Option<axum::http::HeaderValue>>,
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

    /// The document's strong ETag (its SHA-256 in quotes), as a header value of visible
    /// ASCII (its `to_str` never fails); `None` for a record whose stored SHA-256 is not one
    /// (a damaged record: never a tag that matches).
    pub fn etag(&self) -> Option<&axum::http::HeaderValue> {
        self.etag
            .get_or_init(|| {
                let tag = format!("\"{}\"", self.summary.sha256);
                axum::http::HeaderValue::from_str(&tag)
                    .ok()
                    .filter(|value| value.to_str().is_ok())
            })
            .as_ref()
    }
}

/// RFC 3339, as everywhere in the API.
pub fn rfc3339(t: OffsetDateTime) -> String {
    pack_format::channel::format_time(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(sha256: &str) -> ChannelRecord {
        let at = OffsetDateTime::UNIX_EPOCH;
        let summary = ChannelSummary {
            channel: "stable".into(),
            pack: "demo".into(),
            sequence: 1,
            sha256: sha256.into(),
            key_id: "k".into(),
            issued_at: at,
            expires_at: at,
            published_at: at,
            published_by: None,
        };
        ChannelRecord::new(summary, "{}".into(), "sig".into())
    }

    #[test]
    fn the_etag_is_the_sha256_in_quotes_and_a_damaged_one_gives_none() {
        let hex = "ab".repeat(32);
        let tag = record(&hex).etag().map(|t| t.to_str().unwrap().to_string());
        assert_eq!(tag, Some(format!("\"{hex}\"")));
        // Never a stand-in such as `""` that an `If-None-Match: ""` would match: neither a
        // value no header may hold nor one that is not visible ASCII.
        assert_eq!(record("ab\ncd").etag(), None);
        assert_eq!(record("ab\u{e9}cd").etag(), None);
    }
}
