//! The channel as it is live on packd: its document fetched and its signature checked
//! ([`fetch_live`]), and its entries described as JSON ([`entries_json`]), for `release`,
//! `guard` and `status` alike.

use anyhow::{Context, Result, bail};
use pack_format::channel::{SignedChannel, format_time};
use pack_format::{
    ChannelDocument, ChannelEntry, EntryTarget, FormatError, Limits, TrustedKeys, VerifiedChannel,
};
use pack_protocol::{headers, paths};
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::remote::Remote;

/// A channel's live document as packd serves it, its signature checked.
pub(crate) struct LiveChannel {
    /// For a guard document, with the document it restricts (`base`).
    pub verified: VerifiedChannel,
    pub signed: SignedChannel,
}

impl LiveChannel {
    pub fn document(&self) -> &ChannelDocument {
        &self.verified.document
    }

    /// The offline-signed document a guard document made now restricts: the one this guard
    /// document restricts, or this one.
    pub fn base(&self) -> SignedChannel {
        match &self.verified.document.restricts {
            Some(restricts) => SignedChannel {
                document: restricts.document.clone().into_bytes(),
                signature: restricts.signature.clone(),
            },
            None => self.signed.clone(),
        }
    }

    /// The parsed document of [`LiveChannel::base`].
    pub fn base_document(&self) -> &ChannelDocument {
        self.verified
            .base
            .as_ref()
            .map_or(&self.verified.document, |base| &base.document)
    }
}

/// The live document, signature checked (expiry is not: an expired channel is exactly
/// what a release fixes). `None` when nothing was published on the channel yet. A guard
/// document verifies when the offline-signed document it restricts does and delegates to its
/// key.
pub(crate) fn fetch_live(
    remote: &Remote,
    channel: &str,
    trusted: &TrustedKeys,
) -> Result<Option<LiveChannel>> {
    let limits = Limits::DEFAULT;
    let Some((document, headers)) =
        remote.get_bytes_opt(&paths::channel(channel), limits.max_channel_len as u64)?
    else {
        return Ok(None);
    };
    // The signature of exactly this sequence, so a publish landing between the two
    // requests cannot pair a document with another one's signature.
    let sequence = headers
        .get(headers::SEQUENCE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let signature_path = match sequence {
        Some(sequence) => paths::history_signature(channel, sequence),
        None => paths::channel_signature(channel),
    };
    let Some((signature, _)) =
        remote.get_bytes_opt(&signature_path, limits.max_signature_len as u64)?
    else {
        bail!(
            "{} serves channel {channel} but not its signature ({}); re-run, or ask the operator to check packd",
            remote.base(),
            remote.url(&signature_path)
        );
    };
    let signature = String::from_utf8(signature).with_context(|| {
        format!(
            "the signature at {} is not text",
            remote.url(&signature_path)
        )
    })?;
    let verified = match pack_format::channel::verify_ignoring_expiry(
        &document, &signature, trusted, &limits,
    ) {
        Ok(verified) => verified,
        // Signed, but past the bound: no key or re-run fixes that.
        Err(error @ FormatError::SequenceOutOfRange { .. }) => {
            return Err(error).with_context(|| {
                format!(
                    "the live document of channel {channel} on {} carries a sequence no \
                         client accepts, and no higher one exists; this channel cannot be \
                         released again. Nothing was changed: release on a new channel name and \
                         point clients at it",
                    remote.base()
                )
            });
        }
        Err(error) => {
            return Err(error).with_context(|| {
                    format!(
                        "the live document of channel {channel} on {} does not verify against the trusted keys ({}); if the signing key was rotated, pass the old public key with --trusted-key FILE. Nothing was changed",
                        remote.base(),
                        trusted.ids().join(", ")
                    )
                });
        }
    };
    if verified.document.channel != channel {
        bail!(
            "{} answered channel {channel} with a document for channel {:?}; nothing was changed",
            remote.base(),
            verified.document.channel
        );
    }
    Ok(Some(LiveChannel {
        verified,
        signed: SignedChannel {
            document,
            signature,
        },
    }))
}

/// Entries as JSON: `clients`, `target` ("builtin" or the version), and the pack details;
/// a rollout with its percentage at `now` (`percent_now`), its ramp and what the guard
/// watches.
pub fn entries_json(entries: &[ChannelEntry], now: OffsetDateTime) -> Vec<Value> {
    entries
        .iter()
        .map(|entry| {
            let mut value = match &entry.target {
                EntryTarget::Pack(pack) => json!({
                    "clients": entry.clients.to_string(),
                    "target": "pack",
                    "version": pack.version.to_string(),
                    "sha256": pack.sha256,
                    "size": pack.size,
                    "schema": pack.schema,
                }),
                EntryTarget::Builtin => json!({
                    "clients": entry.clients.to_string(),
                    "target": "builtin",
                }),
            };
            if let Some(rollout) = &entry.rollout {
                let mut json = json!({
                    "percent": rollout.percent,
                    "salt": rollout.salt,
                    "percent_now": rollout.percent_at(now),
                });
                if let Some(ramp) = &rollout.ramp {
                    let steps: Vec<Value> = ramp
                        .steps
                        .iter()
                        .zip(ramp.landings())
                        .map(|(step, (at, percent))| {
                            json!({
                                "after_seconds": step.after_seconds,
                                "percent": percent,
                                "at": format_time(at),
                                "landed": at <= now,
                            })
                        })
                        .collect();
                    json["ramp"] = json!({
                        "start": format_time(ramp.start),
                        "linear": ramp.linear,
                        "steps": steps,
                        "end": format_time(ramp.end()),
                    });
                }
                if let Some(watch) = &rollout.watch {
                    json["watch"] = serde_json::to_value(watch).unwrap_or(Value::Null);
                }
                value["rollout"] = json;
            }
            value
        })
        .collect()
}
