//! The guard key: a key the offline signing key names in a channel document, trusted only to
//! stop that channel's rollouts.
//!
//! A document signed by the guard key carries the document it restricts (`restricts`: bytes
//! and signature, signed by a trusted key that names the guard key). A reader accepts it when,
//! and only when, every change from that document is one a guard may make:
//!
//! - **freeze**: a rollout's percentage held at or below what it was when the guard signed
//!   (same salt, no schedule), or a rollout added to an entry that had none;
//! - **roll back**: an entry sent to what it replaces in the restricted document (the first
//!   later entry for the same client range without a rollout), or to the built-in pack.
//!
//! Nothing else may change: the same entries for the same client ranges, no new version, no
//! later expiry, the same guard. Resuming a rollout takes a document signed by a trusted key.
//! A reader that holds a guard document checks a newer one against it too ([`check_live`]),
//! so one freeze cannot be undone by another guard document.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::channel::{
    ChannelDocument, EntryTarget, Rollout, SignedChannel, VerifiedChannel, check_signed,
    verify_ignoring_expiry,
};
use crate::keys::key_id_hex;
use crate::{FormatError, Limits, SigningKey, TrustedKeys};

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

/// The document a guard document restricts, exactly as it was signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Restricts {
    pub document: String,
    pub signature: String,
}

/// What a guard does to one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardAction {
    /// Holds the entry's rollout at its percentage of now.
    Freeze,
    /// Sends the entry's clients to the pack it replaces ([`ChannelDocument::replaced`]).
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
/// signature verifies against that key, and the changes are a guard's.
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
            "it restricts another guard document: a guard document restricts one signed by a trusted key",
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
    let parsed = check_signed(document, signature, &public, key_id)?;
    if parsed.sequence <= base.document.sequence {
        return Err(overreach(format!(
            "its sequence {} is not after the sequence {} it restricts",
            parsed.sequence, base.document.sequence
        )));
    }
    restricts_within(&parsed, &base.document).map_err(overreach)?;
    Ok(VerifiedChannel {
        document: parsed,
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

/// Checks a newly verified document against the one a reader holds (verified when it was
/// accepted). Only a guard document has anything to check: it must restrict the held
/// document's own base (or a newer one), and when both restrict the same document, the new
/// one must restrict the held one as well, so a freeze or rollback the reader already follows
/// is never undone by the guard key.
pub fn check_live(new: &VerifiedChannel, held: &ChannelDocument) -> Result<(), FormatError> {
    let Some(base) = &new.base else {
        return Ok(());
    };
    let held_base = authority_sequence(held);
    if base.document.sequence < held_base {
        return Err(overreach(format!(
            "it restricts sequence {}, older than sequence {held_base} the reader follows",
            base.document.sequence
        )));
    }
    if held.restricts.is_some() && base.document.sequence == held_base {
        restricts_within(&new.document, held)
            .map_err(|reason| overreach(format!("against the guard document held: {reason}")))?;
    }
    Ok(())
}

/// The sequence of the document a trusted key signed that `held` is, or restricts. A document
/// signed by a trusted key is newer than a guard document when it is newer than what that
/// guard document restricts: the guard key chooses its own sequences, and must not be able
/// to push a channel past every sequence the signing key can still sign.
pub fn authority_sequence(held: &ChannelDocument) -> u64 {
    held.restricts
        .as_ref()
        .and_then(|r| serde_json::from_str::<ChannelDocument>(&r.document).ok())
        .map_or(held.sequence, |base| base.sequence)
}

/// Whether every change from `reference` to `guarded` is one a guard may make; if not, the
/// first one that is not.
pub fn restricts_within(
    guarded: &ChannelDocument,
    reference: &ChannelDocument,
) -> Result<(), String> {
    if guarded.format != reference.format
        || guarded.channel != reference.channel
        || guarded.pack != reference.pack
    {
        return Err("it changes the channel, pack name or format".to_string());
    }
    if guarded.guard != reference.guard {
        return Err("it changes the guard key".to_string());
    }
    if guarded.expires_at > reference.expires_at {
        return Err(format!(
            "it extends the expiry from {} to {}",
            crate::channel::format_time(reference.expires_at),
            crate::channel::format_time(guarded.expires_at)
        ));
    }
    if guarded.issued_at < reference.issued_at {
        return Err("it is dated before the document it restricts".to_string());
    }
    if guarded.entries.len() != reference.entries.len() {
        return Err(format!(
            "it has {} entries where the document it restricts has {}",
            guarded.entries.len(),
            reference.entries.len()
        ));
    }
    for (i, (g, r)) in guarded.entries.iter().zip(&reference.entries).enumerate() {
        if g.clients != r.clients {
            return Err(format!(
                "entry {i} is for clients {} instead of {}",
                g.clients, r.clients
            ));
        }
        if g.target != r.target {
            // A rollback sends an entry's clients where they would go without it: to what
            // the entry replaces there, or to the built-in pack. Any other pack, even one
            // the document names elsewhere, would widen that pack's reach.
            let replaced = reference.replaced(i);
            if g.target != EntryTarget::Builtin && &g.target != replaced {
                return Err(format!(
                    "entry {i} names {} where a rollback goes to what the entry replaces ({}) or to the built-in pack",
                    describe_target(&g.target),
                    describe_target(replaced)
                ));
            }
            continue;
        }
        match (&r.rollout, &g.rollout) {
            (None, _) => {}
            (Some(_), None) => {
                return Err(format!("entry {i} drops its rollout, widening it to 100%"));
            }
            (Some(r), Some(g)) if r == g => {}
            (Some(r), Some(g)) => check_freeze(i, r, g, guarded.issued_at)?,
        }
    }
    Ok(())
}

fn check_freeze(i: usize, was: &Rollout, now: &Rollout, at: OffsetDateTime) -> Result<(), String> {
    if was.salt != now.salt {
        return Err(format!(
            "entry {i} changes its rollout salt, which moves installs in"
        ));
    }
    if now.watch != was.watch {
        return Err(format!("entry {i} changes what the guard watches"));
    }
    if now.ramp.is_some() {
        return Err(format!(
            "entry {i} sets a new ramp: a guard freezes, resuming takes the signing key"
        ));
    }
    let allowed = was.percent_at(at);
    if now.percent > allowed {
        return Err(format!(
            "entry {i} widens its rollout to {}% where it stood at {allowed}% when the guard signed",
            now.percent
        ));
    }
    Ok(())
}

fn describe_target(target: &EntryTarget) -> String {
    match target {
        EntryTarget::Pack(p) => format!("pack {} ({})", p.version, p.sha256),
        EntryTarget::Builtin => "the built-in pack".to_string(),
    }
}

/// The document a guard signs to `action` entry `entry` of `live` at `now`. `live` is the
/// document readers follow: `base` itself, or a guard document restricting it.
pub fn guard_document(
    base: &SignedChannel,
    live: &ChannelDocument,
    entry: usize,
    action: GuardAction,
    now: OffsetDateTime,
) -> Result<ChannelDocument, FormatError> {
    let Some(current) = live.entries.get(entry) else {
        return Err(FormatError::malformed(
            "guard action",
            format!(
                "entry {entry} does not exist: the document has {} entries",
                live.entries.len()
            ),
        ));
    };
    let mut next = live.clone();
    next.sequence = live.sequence.saturating_add(1);
    next.issued_at = now.max(live.issued_at);
    next.restricts = Some(Restricts {
        document: String::from_utf8_lossy(&base.document).into_owned(),
        signature: base.signature.clone(),
    });
    let changed = &mut next.entries[entry];
    match action {
        GuardAction::Freeze => {
            let Some(rollout) = &current.rollout else {
                return Err(FormatError::malformed(
                    "guard action",
                    format!("entry {entry} has no rollout to freeze"),
                ));
            };
            changed.rollout = Some(Rollout {
                watch: rollout.watch.clone(),
                ..Rollout::fixed(rollout.percent_at(next.issued_at), rollout.salt.clone())
            });
        }
        GuardAction::Rollback => {
            changed.target = live.replaced(entry).clone();
            changed.rollout = None;
        }
    }
    Ok(next)
}

impl ChannelDocument {
    /// What entry `i` replaces: the target of the first later entry for the same client
    /// range without a rollout, or the built-in pack when there is none.
    pub fn replaced(&self, i: usize) -> &EntryTarget {
        let Some(entry) = self.entries.get(i) else {
            return &EntryTarget::Builtin;
        };
        self.entries[i + 1..]
            .iter()
            .find(|later| later.clients == entry.clients && later.rollout.is_none())
            .map_or(&EntryTarget::Builtin, |later| &later.target)
    }
}
