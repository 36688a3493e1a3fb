//! The guard key: a key the offline signing key names in a channel document, trusted only to
//! stop that channel's rollouts.
//!
//! A document signed by the guard key is a *stop order*, not a rewritten channel document.
//! It carries the offline-signed document it restricts (`restricts`: bytes and signature, and
//! the `stops`), and no entries of its own. Each stop names one entry of that document:
//!
//! - **hold** at `percent`: the entry keeps the installs whose rollout bucket is below
//!   `percent` (at most what the rollout stood at when the guard signed); the others it had
//!   leave it;
//! - **revert**: every install the entry had leaves it.
//!
//! An install a stop takes out of an entry goes to that entry's *fallback*, as the offline
//! key designated it ([`ChannelDocument::fallback`]): for an entry with a rollout, the first
//! later entry without a rollout whose range holds the client's release (the layer the
//! rollout runs over); for an entry without a rollout, or when no such entry exists, the
//! built-in pack. It never falls through to whatever later entry happens to match, so no
//! other rollout is widened. An install an entry did not have is not touched.
//!
//! The invariant, tested as a property over generated documents, orders, releases, installs
//! and times: after an order, every install serves what it served before, its entry's
//! fallback, or the built-in pack; no pack gains an install except as the designated
//! fallback of the entry that install left. A reader that holds a stop order checks a newer
//! one against it ([`check_live`]), so one stop cannot be undone by another guard document.
//! Resuming takes a document signed by a trusted key.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::channel::{
    ChannelDocument, SignedChannel, VerifiedChannel, check_signed, verify_ignoring_expiry,
};
use crate::keys::key_id_hex;
use crate::{FormatError, Limits, SigningKey, TrustedKeys};

/// Most stops one order may carry (one per entry at most, and a document has at most 1024).
pub const MAX_STOPS: usize = 1024;

/// The key a channel delegates stopping to, as the base64 line of a minisign public key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Guard {
    pub key: String,
}

impl Guard {
    /// The guard entry for `key`'s public half.
    pub fn for_key(key: &SigningKey) -> Guard {
        Guard {
            key: key.public.to_base64(),
        }
    }

    /// The public key, or why the entry is not one.
    pub fn public_key(&self) -> Result<minisign::PublicKey, FormatError> {
        minisign::PublicKey::from_base64(&self.key).map_err(|e| {
            FormatError::malformed("channel guard", format!("not a minisign public key: {e}"))
        })
    }

    /// The minisign key id of the guard key.
    pub fn key_id(&self) -> Result<String, FormatError> {
        Ok(key_id_hex(self.public_key()?.keynum()))
    }
}

/// What a stop order restricts, and how: the offline-signed document exactly as it was
/// signed, and the stops applied to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Restricts {
    pub document: String,
    pub signature: String,
    pub stops: Vec<Stop>,
}

impl Restricts {
    /// The stop on entry `entry`, if the order has one.
    pub fn stop_for(&self, entry: usize) -> Option<&Stop> {
        self.stops.iter().find(|s| s.entry() == entry)
    }

    /// The document restricted, parsed but not verified (for tools that show it).
    pub fn parse_document(&self) -> Option<ChannelDocument> {
        serde_json::from_str(&self.document).ok()
    }
}

/// One stop of a stop order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "stop", rename_all = "lowercase", deny_unknown_fields)]
pub enum Stop {
    /// The entry keeps only the installs whose rollout bucket is below `percent`.
    Hold { entry: usize, percent: u8 },
    /// The entry keeps no install.
    Revert { entry: usize },
}

impl Stop {
    /// The entry it stops.
    pub fn entry(&self) -> usize {
        match *self {
            Stop::Hold { entry, .. } | Stop::Revert { entry } => entry,
        }
    }

    /// Whether this stop takes out every install `other` takes out (and maybe more).
    fn covers(&self, other: &Stop) -> bool {
        match (self, other) {
            (Stop::Revert { .. }, _) => true,
            (
                Stop::Hold { percent: mine, .. },
                Stop::Hold {
                    percent: theirs, ..
                },
            ) => mine <= theirs,
            (Stop::Hold { .. }, Stop::Revert { .. }) => false,
        }
    }
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Hold { entry, percent } => write!(f, "entry {entry} held at {percent}%"),
            Stop::Revert { entry } => write!(f, "entry {entry} reverted"),
        }
    }
}

/// What a guard does to one entry, as `packer guard` and a rollout's `watch` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardAction {
    /// Holds the entry's rollout at its percentage of now ([`Stop::Hold`]).
    Freeze,
    /// Sends the entry's installs to its fallback ([`Stop::Revert`]).
    Rollback,
}

impl std::fmt::Display for GuardAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GuardAction::Freeze => "freeze",
            GuardAction::Rollback => "rollback",
        })
    }
}

/// Verifies a document whose signing key is not trusted but which restricts another: the
/// restricted document verifies against `trusted` and names the signing key as its guard, the
/// signature verifies against that key, and the document is a stop order within what the
/// restricted document allows. Returns the restricted document with the order applied.
pub(crate) fn verify_guarded(
    document: &[u8],
    signature: &str,
    key_id: &str,
    restricts: &Restricts,
    trusted: &TrustedKeys,
    limits: &Limits,
) -> Result<VerifiedChannel, FormatError> {
    let nested = serde_json::from_str::<ChannelDocument>(&restricts.document)
        .map_err(|e| FormatError::malformed("restricted channel document", e))?;
    if nested.restricts.is_some() {
        return Err(overreach(
            "it restricts another guard document: a stop order restricts a document signed by a trusted key",
        ));
    }
    let base = verify_ignoring_expiry(
        restricts.document.as_bytes(),
        &restricts.signature,
        trusted,
        limits,
    )?;
    let delegated = base
        .document
        .guard
        .as_ref()
        .map(Guard::key_id)
        .transpose()?;
    if delegated.as_deref() != Some(key_id) {
        return Err(FormatError::GuardNotDelegated {
            key_id: key_id.to_string(),
            sequence: base.document.sequence,
            delegated: delegated.unwrap_or_else(|| "no guard key".to_string()),
        });
    }
    let public = match &base.document.guard {
        Some(guard) => guard.public_key()?,
        None => return Err(overreach("the restricted document names no guard key")),
    };
    let order = check_signed(document, signature, &public, key_id)?;
    check_order(&order, &base.document).map_err(overreach)?;
    let applied = applied(&order, &base.document);
    Ok(VerifiedChannel {
        document: applied,
        key_id: key_id.to_string(),
        base: Some(Box::new(base)),
        sha256: crate::sha256_hex(document),
    })
}

fn overreach(reason: impl Into<String>) -> FormatError {
    FormatError::GuardOverreach {
        reason: reason.into(),
    }
}

/// Whether `order` is a stop order `base` allows; if not, the first reason it is not.
///
/// A stop order has the channel, pack and format of `base`, a later sequence, no entries and
/// no guard of its own, an expiry no later than `base`'s, and 1 to [`MAX_STOPS`] stops on
/// distinct entries of `base`; a hold stops an entry with a rollout at or below the
/// percentage that rollout stood at when the order was signed.
pub fn check_order(order: &ChannelDocument, base: &ChannelDocument) -> Result<(), String> {
    let Some(restricts) = &order.restricts else {
        return Err("it restricts no document".to_string());
    };
    if order.format != base.format || order.channel != base.channel || order.pack != base.pack {
        return Err("it changes the channel, pack name or format".to_string());
    }
    if !order.entries.is_empty() {
        return Err(format!(
            "it carries {} entries of its own: a stop order names stops on the entries of the document it restricts, never entries",
            order.entries.len()
        ));
    }
    if order.guard.is_some() {
        return Err("it names a guard key: only the offline key delegates".to_string());
    }
    if order.sequence <= base.sequence {
        return Err(format!(
            "its sequence {} is not after the sequence {} it restricts",
            order.sequence, base.sequence
        ));
    }
    if order.expires_at > base.expires_at {
        return Err(format!(
            "it extends the expiry from {} to {}",
            crate::channel::format_time(base.expires_at),
            crate::channel::format_time(order.expires_at)
        ));
    }
    if order.issued_at < base.issued_at {
        return Err("it is dated before the document it restricts".to_string());
    }
    if restricts.stops.is_empty() || restricts.stops.len() > MAX_STOPS {
        return Err(format!(
            "it carries {} stops: a stop order carries 1 to {MAX_STOPS}",
            restricts.stops.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for stop in &restricts.stops {
        let i = stop.entry();
        if !seen.insert(i) {
            return Err(format!("it stops entry {i} twice"));
        }
        let Some(entry) = base.entries.get(i) else {
            return Err(format!(
                "it stops entry {i}, but the document it restricts has {} entries",
                base.entries.len()
            ));
        };
        if let Stop::Hold { percent, .. } = *stop {
            let Some(rollout) = &entry.rollout else {
                return Err(format!(
                    "it holds entry {i}, which has no rollout to hold: revert the entry instead"
                ));
            };
            let allowed = rollout.percent_at(order.issued_at);
            if percent > allowed {
                return Err(format!(
                    "it holds entry {i} at {percent}% where its rollout stood at {allowed}% when the guard signed"
                ));
            }
        }
    }
    Ok(())
}

/// `base` with `order`'s stops applied: its entries, under the order's sequence, dates and
/// `restricts`. Entry selection ([`ChannelDocument::select`]) reads the stops from there.
fn applied(order: &ChannelDocument, base: &ChannelDocument) -> ChannelDocument {
    ChannelDocument {
        entries: base.entries.clone(),
        guard: base.guard.clone(),
        ..order.clone()
    }
}

/// A stop order as it was read from storage or the wire, with the entries of the document
/// it restricts filled in, unverified: for tools that show a channel's state (its signature
/// was checked when it was stored). `None` when `doc` is not a stop order or what it carries
/// does not parse.
pub fn effective(doc: &ChannelDocument) -> Option<ChannelDocument> {
    let base = doc.restricts.as_ref()?.parse_document()?;
    Some(applied(doc, &base))
}

/// Checks a newly verified document against the one a reader holds (verified when it was
/// accepted). Only a stop order has anything to check: it must restrict the held document's
/// own base (or a newer one), and when both restrict the same document, every stop of the
/// held order must be kept, as strict or stricter, so a stop the reader already follows is
/// never undone by the guard key.
pub fn check_live(new: &VerifiedChannel, held: &ChannelDocument) -> Result<(), FormatError> {
    let (Some(base), Some(restricts)) = (&new.base, &new.document.restricts) else {
        return Ok(());
    };
    let held_base = authority_sequence(held);
    if base.document.sequence < held_base {
        return Err(overreach(format!(
            "it restricts sequence {}, older than sequence {held_base} the reader follows",
            base.document.sequence
        )));
    }
    if let Some(held_restricts) = &held.restricts
        && base.document.sequence == held_base
    {
        for kept in &held_restricts.stops {
            let covered = restricts
                .stop_for(kept.entry())
                .is_some_and(|stop| stop.covers(kept));
            if !covered {
                return Err(overreach(format!(
                    "against the stop order held: it undoes \"{kept}\""
                )));
            }
        }
    }
    Ok(())
}

/// The sequence of the document a trusted key signed that `held` is, or restricts. A document
/// signed by a trusted key is newer than a stop order when it is newer than what that order
/// restricts: the guard key chooses its own sequences, and must not be able to push a channel
/// past every sequence the signing key can still sign.
pub fn authority_sequence(held: &ChannelDocument) -> u64 {
    held.restricts
        .as_ref()
        .and_then(Restricts::parse_document)
        .map_or(held.sequence, |base| base.sequence)
}

/// The stop order a guard signs to `action` entry `entry` at `now`, restricting `base` (the
/// offline-signed document). `live` is the document readers follow: `base` itself, or a stop
/// order restricting it (verified, with its stops applied), whose stops the new order keeps.
pub fn guard_document(
    base: &SignedChannel,
    live: &ChannelDocument,
    entry: usize,
    action: GuardAction,
    now: OffsetDateTime,
) -> Result<ChannelDocument, FormatError> {
    let refuse = |reason: String| FormatError::malformed("guard action", reason);
    let Some(current) = live.entries.get(entry) else {
        return Err(refuse(format!(
            "entry {entry} does not exist: the document has {} entries",
            live.entries.len()
        )));
    };
    let issued_at = now.max(live.issued_at);
    let mut stops = live
        .restricts
        .as_ref()
        .map(|r| r.stops.clone())
        .unwrap_or_default();
    let held = stops.iter().position(|s| s.entry() == entry);
    let stop = match action {
        GuardAction::Freeze => {
            let Some(rollout) = &current.rollout else {
                return Err(refuse(format!(
                    "entry {entry} has no rollout to freeze: roll it back instead"
                )));
            };
            if let Some(i) = held {
                return Err(refuse(format!("{} already", stops[i])));
            }
            Stop::Hold {
                entry,
                percent: rollout.percent_at(live.ramp_time(issued_at)),
            }
        }
        GuardAction::Rollback => {
            if let Some(i) = held
                && matches!(stops[i], Stop::Revert { .. })
            {
                return Err(refuse(format!("{} already", stops[i])));
            }
            Stop::Revert { entry }
        }
    };
    match held {
        Some(i) => stops[i] = stop,
        None => stops.push(stop),
    }
    stops.sort_by_key(Stop::entry);
    Ok(ChannelDocument {
        format: live.format,
        channel: live.channel.clone(),
        pack: live.pack.clone(),
        sequence: live.sequence.saturating_add(1),
        issued_at,
        expires_at: live.expires_at,
        entries: Vec::new(),
        guard: None,
        restricts: Some(Restricts {
            document: String::from_utf8_lossy(&base.document).into_owned(),
            signature: base.signature.clone(),
            stops,
        }),
    })
}
