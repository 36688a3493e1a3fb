//! Claims on pack records: what happens to a record that no channel document names yet is
//! decided once, by whoever creates its claim first.
//!
//! A pack version's record (`packs/{name}/{version}.json`) may take other bytes while no
//! document names the version, and never after. Storage has create-only writes and
//! whole-object overwrites, but no compare-and-swap, so the decision is an object of its own:
//! `pack-claims/{name}/{version}/{sha256 of the record's exact bytes}.json`, created
//! create-only (a hard link that fails when the name exists on disk, `If-None-Match: *` on
//! S3, atomic on AWS and SeaweedFS) and never removed. Two kinds of writer create it:
//!
//! - an upload of other bytes, to **replace** the record: only the upload that created the
//!   claim rewrites the record (`routes::blobs::replace`);
//! - a publish, to **release** it: for every version a document newly names, the publish
//!   creates the claim of the record bytes it checked the document against, or finds it
//!   there as a release, before it commits the document (`routes::channels`).
//!
//! Why exactly one of a replacement and a release of one record wins: both create the same
//! key, so exactly one creates it, and nobody takes it over afterwards. When a release's
//! claim is there, no upload ever creates that claim, so the record the document was
//! checked against is the record from then on. When a replacement's claim is there, the
//! publish finds it and refuses (`422 pack_mismatch`), whether the new record is written yet
//! or not. A publish that checked an older record finds that record's claim taken by the
//! replacement that moved it on, and refuses as well; and a record newer than the one a
//! publish checked exists only once a replacement took the checked record's claim. Record
//! bytes never repeat (each carries its upload time to the nanosecond), so a claim speaks for
//! one record, which a replaced record never comes back to. Hence every committed document
//! names, for each version it names, the bytes that version's record points at, for good.
//!
//! Neither side needs to look at the histories for this; the upload still reads them first
//! (documents published before claims existed have none) and to say which document holds a
//! version. The price: a publish that claims and then does not commit (another publisher
//! took the sequence, or its packd was killed) leaves the version held though no document
//! names it. The next publish naming the same bytes goes through (a release claim is every
//! publish's), and an upload of other bytes is told which claim holds it.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::storage::{Created, Storage, keys};

/// A claim as stored at [`keys::pack_claim`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// SHA-256 of the claimed record's bytes.
    pub record: String,
    /// The blob the claimed record points at.
    pub from: String,
    pub at: String,
    /// The name of the publish token.
    pub by: String,
    #[serde(flatten)]
    pub purpose: Purpose,
}

/// What the claim was taken for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Purpose {
    /// An upload rewrites the record to point at blob `to`.
    Replace { to: String },
    /// A publish names the record; the first one to claim it.
    Release { release: Release },
}

/// The document a release claim was taken for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Release {
    pub channel: String,
    pub sequence: u64,
    /// SHA-256 of the document.
    pub document: String,
}

/// How an attempt to claim a record ended.
#[derive(Debug)]
pub enum Taken {
    /// This claim was created: the record is ours to decide.
    Ours,
    /// Another claim was there first.
    Theirs { key: String, claim: Claim },
}

/// Claims the record of pack `name` at `version` whose bytes hash to `claim.record`, unless
/// another claim holds it.
pub async fn take(
    storage: &Storage,
    name: &str,
    version: &str,
    claim: &Claim,
) -> Result<Taken, ApiError> {
    let key = keys::pack_claim(name, version, &claim.record);
    let bytes = serde_json::to_vec(claim).map_err(|e| ApiError::Internal(e.to_string()))?;
    match storage.create(&key, Bytes::from(bytes)).await? {
        Created::Created => Ok(Taken::Ours),
        Created::AlreadyExists => {
            let stored = storage
                .get(&key)
                .await?
                .ok_or_else(|| ApiError::Internal(format!("{key} exists but cannot be read")))?;
            let claim = serde_json::from_slice(&stored)
                .map_err(|e| ApiError::Internal(format!("stored claim {key} is corrupt: {e}")))?;
            Ok(Taken::Theirs { key, claim })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_reads_back_as_what_it_was_taken_for() {
        // As the first packd that replaced records wrote them, before releases took claims.
        let replace: Claim = serde_json::from_value(serde_json::json!({
            "record": "aa", "from": "bb", "to": "cc", "at": "2026-01-01T00:00:00Z", "by": "ci"
        }))
        .unwrap();
        assert_eq!(
            replace.purpose,
            Purpose::Replace {
                to: "cc".to_string()
            }
        );
        let release = Claim {
            record: "aa".to_string(),
            from: "bb".to_string(),
            at: "2026-01-01T00:00:00Z".to_string(),
            by: "ci".to_string(),
            purpose: Purpose::Release {
                release: Release {
                    channel: "stable".to_string(),
                    sequence: 3,
                    document: "dd".to_string(),
                },
            },
        };
        let text = serde_json::to_string(&release).unwrap();
        assert!(!text.contains("\"to\""), "{text}");
        assert_eq!(serde_json::from_str::<Claim>(&text).unwrap(), release);
    }
}
