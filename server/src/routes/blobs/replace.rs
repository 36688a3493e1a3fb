//! Other bytes under a pack version that was never released: the record is repointed.
//!
//! A version is released once a channel document names it, live or in any channel's
//! history; from then on its record never changes. Until then a publisher may upload
//! corrected bytes under the same version (say after `packer release` refused the first
//! ones), and nobody ever received the old ones.
//!
//! The right to replace a record is its claim ([`crate::claims`]), keyed by the SHA-256 of
//! the record's exact bytes. Of the uploads that found the same record exactly one creates
//! its claim, and only that one overwrites the record (one whole-object write: a rename on
//! disk, one PUT on S3), so two replacements never both succeed and none is lost: the next
//! replacement must claim the new record's bytes, which exist only once the write landed. A
//! publish claims the record it checked before it commits a document naming it, so of a
//! release and a replacement of one record exactly one wins (the argument is in
//! [`crate::claims`]). A claim is never removed: it is what happened to that record. A packd
//! killed between its claim and its write leaves the record as it was and unreplaceable (the
//! 409 names the claim, which an operator may delete); the work after the claim runs in a
//! task of its own, so a publisher who disconnects does not cut it short.
//!
//! Whether a version was released is first read from every channel's history (one LIST per
//! channel and one GET per document ever published) before the claim, and again when a
//! release claim holds the record, to say which document names it. Documents published
//! before publishes took claims have none, so this look is what keeps them released. Only
//! uploads of other bytes under an existing version pay it.
//!
//! The old blob stays: blobs are content-addressed and never deleted.

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use pack_format::{ChannelDocument, EntryTarget};
use time::OffsetDateTime;

use super::PendingBlob;
use crate::claims::{self, Claim, Purpose, Taken};
use crate::error::{ApiError, VersionHeld};
use crate::live;
use crate::model::{PackRecord, rfc3339};
use crate::routes::check_name;
use crate::storage::{Storage, keys};

/// The record an upload found under its pack name and version.
pub(super) struct Found {
    pub key: String,
    /// Exactly as stored: the claim is keyed by their hash.
    pub bytes: Bytes,
    pub record: PackRecord,
}

/// How an attempt to replace a record ended.
pub(super) enum Outcome {
    /// The record now points at the upload.
    Replaced,
    /// The record stays.
    Held(VersionHeld),
    /// The record changed under this upload: look again.
    Moved,
}

/// Replaces `found` with `new` (stored as `encoded`) unless the version was released or
/// another upload or a publish claimed `found` first. `blob`, the one `new` points at, is stored before
/// the claim.
pub(super) async fn replace(
    storage: &Storage,
    token: &str,
    found: Found,
    new: &PackRecord,
    blob: &mut PendingBlob,
    encoded: Bytes,
) -> Result<Outcome, ApiError> {
    let old = &found.record;
    if let Some(held) = released(storage, old).await? {
        return Ok(Outcome::Held(held));
    }
    blob.store(storage).await?;
    let claim = Claim {
        record: pack_format::sha256_hex(&found.bytes),
        from: old.sha256.clone(),
        at: rfc3339(OffsetDateTime::now_utc()),
        by: token.to_string(),
        purpose: Purpose::Replace {
            to: new.sha256.clone(),
        },
    };
    match claims::take(storage, &old.name, &old.version.to_string(), &claim).await? {
        Taken::Ours => {}
        Taken::Theirs { key, claim } => {
            return claimed_by_another(storage, &found, key, claim).await;
        }
    }
    // Ours to finish: in a task of its own, so that a publisher who goes away now does not
    // leave the claim taken and the record unwritten. No publish can release this record
    // any more (it would need the claim we hold), so there is nothing to look at again.
    let (storage, record_key) = (storage.clone(), found.key.clone());
    tokio::spawn(async move { storage.put(&record_key, encoded).await })
        .await
        .map_err(|e| ApiError::Internal(format!("replacing {}: {e}", found.key)))??;
    Ok(Outcome::Replaced)
}

/// Another claim holds `found`. A release: the version is released, or a publish is
/// committing a document that names it (or stopped before it could). A replacement: the
/// other upload is still writing (or its packd stopped mid-way) when the record is
/// unchanged, else it finished and the caller looks again.
async fn claimed_by_another(
    storage: &Storage,
    found: &Found,
    key: String,
    claim: Claim,
) -> Result<Outcome, ApiError> {
    match claim.purpose {
        Purpose::Release { release } => {
            if let Some(held) = released(storage, &found.record).await? {
                return Ok(Outcome::Held(held));
            }
            Ok(Outcome::Held(VersionHeld::Releasing {
                channel: release.channel,
                sequence: release.sequence,
                since: claim.at,
                claim: key,
            }))
        }
        Purpose::Replace { to } => {
            if storage.get(&found.key).await?.as_ref() != Some(&found.bytes) {
                return Ok(Outcome::Moved);
            }
            Ok(Outcome::Held(VersionHeld::Replacing {
                sha256: to,
                since: claim.at,
                claim: key,
            }))
        }
    }
}

/// The first channel document (by channel name, then sequence) that names `record`'s
/// version of its pack, or its blob.
async fn released(storage: &Storage, record: &PackRecord) -> Result<Option<VersionHeld>, ApiError> {
    let mut channels = storage.list_dirs(keys::CHANNELS).await?;
    // A directory name that is no valid channel name is nothing packd wrote.
    channels.retain(|name| check_name("channel", name).is_ok());
    channels.sort();
    for channel in channels {
        let sequences = live::history_sequences(storage, &channel).await?;
        let mut documents = futures_util::stream::iter(sequences)
            .map(|sequence| {
                let key = keys::history(&channel, sequence);
                async move {
                    let stored = live::load_record(storage, &key).await?;
                    Ok::<_, ApiError>((sequence, key, stored))
                }
            })
            .buffered(8);
        while let Some((sequence, key, stored)) = documents.try_next().await? {
            let Some(stored) = stored else { continue };
            // Verified when it was published; a document that no longer parses may name
            // anything, so it holds every version.
            let document: ChannelDocument =
                serde_json::from_str(&stored.document).map_err(|e| {
                    ApiError::Internal(format!("stored document {key} does not parse: {e}"))
                })?;
            if names(&document, record) {
                return Ok(Some(VersionHeld::Released {
                    channel: channel.clone(),
                    sequence,
                }));
            }
        }
    }
    Ok(None)
}

/// Whether `document` names `record`: its pack at its version (whatever the SHA-256: one
/// that names other bytes got there in a race and holds the version all the same), or its
/// blob.
fn names(document: &ChannelDocument, record: &PackRecord) -> bool {
    document.entries.iter().any(|entry| match &entry.target {
        EntryTarget::Pack(pack) => {
            pack.sha256 == record.sha256
                || (document.pack == record.name && pack.version == record.version)
        }
        EntryTarget::Builtin => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document(pack: &str, version: &str, sha256: &str) -> ChannelDocument {
        serde_json::from_value(serde_json::json!({
            "format": 1,
            "channel": "stable",
            "pack": pack,
            "sequence": 1,
            "issued_at": "2026-01-01T00:00:00Z",
            "expires_at": "2026-02-01T00:00:00Z",
            "entries": [
                {"clients": "*", "target": "builtin"},
                {"clients": "*", "target": {"pack": {
                    "version": version, "sha256": sha256, "size": 10, "schema": 1
                }}}
            ]
        }))
        .unwrap()
    }

    fn record(name: &str, version: &str, sha256: &str) -> PackRecord {
        PackRecord {
            name: name.to_string(),
            version: version.parse().unwrap(),
            schema: 1,
            sha256: sha256.to_string(),
            size: 10,
            uploaded_at: time::macros::datetime!(2026-01-01 0:00 UTC),
        }
    }

    #[test]
    fn a_document_names_a_version_by_pack_and_version_or_by_blob() {
        let (a, b) = ("aa".repeat(32), "bb".repeat(32));
        let doc = document("prompts", "1.0.0", &a);
        assert!(names(&doc, &record("prompts", "1.0.0", &a)));
        // Other bytes under the released version: still released.
        assert!(names(&doc, &record("prompts", "1.0.0", &b)));
        assert!(!names(&doc, &record("prompts", "1.0.1", &b)));
        assert!(!names(&doc, &record("other", "1.0.0", &b)));
    }
}
