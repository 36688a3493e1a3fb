//! The channel document: which client releases get which pack, signed with minisign.
//!
//! The document is JSON; its signature is a standard minisign signature file over the exact
//! document bytes, prehashed Ed25519 (`ED`) only. The trusted comment (covered by the
//! signature) repeats the channel, pack, sequence and expiry so `minisign -V` shows them.

use std::io::Cursor;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::guard::{Guard, Restricts, Stop};
use crate::keys::key_id_hex;
use crate::ramp::{RAMP_CLOCK_SKEW, Ramp};
use crate::{FormatError, Limits, SigningKey, TrustedKeys, sha256_hex, validate_name};

/// Version of the channel document layout.
pub const CHANNEL_FORMAT: u32 = 1;

/// The highest `sequence` a channel document may carry: 2^53 − 1, the largest integer
/// every JSON reader (a JavaScript `Number`, a double in most libraries) holds exactly.
/// Above it two readers can disagree on which of two documents is newer, and a channel
/// whose sequence reached `u64::MAX` could never publish again.
pub const MAX_SEQUENCE: u64 = (1 << 53) - 1;

/// A channel document. Rolling out, pinning and rolling back are all a new document with a
/// higher `sequence`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelDocument {
    pub format: u32,
    pub channel: String,
    pub pack: String,
    pub sequence: u64,
    #[serde(with = "time::serde::rfc3339")]
    pub issued_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    /// Tried in order; the first that matches the client's version (and rollout bucket) wins.
    /// A stop order (see [`crate::guard`]) has none of its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<ChannelEntry>,
    /// The key that may stop this channel's rollouts (see [`crate::guard`]). Only a document
    /// signed by a trusted key names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<Guard>,
    /// In a stop order the guard key signed: the document it restricts, as signed, and the
    /// stops applied to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restricts: Option<Restricts>,
}

/// One rule: clients whose version matches `clients` get `target`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelEntry {
    /// A semver range such as `>=1.4.0, <1.5.0`, or `*`.
    pub clients: semver::VersionReq,
    pub target: EntryTarget,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Rollout>,
}

/// What an entry sends clients to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum EntryTarget {
    /// A sealed pack on the server.
    Pack(PackRef),
    /// The pack compiled into the client (the rollback-to-embedded directive).
    Builtin,
}

/// A sealed pack, pinned by content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackRef {
    pub version: semver::Version,
    pub sha256: String,
    pub size: u64,
    pub schema: u32,
}

/// A staged rollout: an install is in when its bucket (0-99, from the salt and its install
/// id) is below the rollout's percentage. Lowering it with the same salt only takes installs
/// out. With a [`Ramp`], `percent` is where the ramp starts and the percentage grows on the
/// signed schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rollout {
    pub percent: u8,
    pub salt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp: Option<Ramp>,
    /// What the channel's guard watches while the rollout runs, and what it does on a
    /// regression. Clients only carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<Watch>,
}

/// The publisher's instruction to the guard for one rollout: compare the rolling-out pack
/// with the one it replaces on `metrics` (names of outcome rates, such as
/// `tool_error_rate`), and `action` it when one is worse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Watch {
    pub metrics: Vec<String>,
    pub action: WatchAction,
}

/// What the guard signs on a regression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WatchAction {
    Freeze,
    Rollback,
}

impl Rollout {
    /// A fixed percentage (no ramp).
    pub fn fixed(percent: u8, salt: impl Into<String>) -> Rollout {
        Rollout {
            percent,
            salt: salt.into(),
            ramp: None,
            watch: None,
        }
    }

    /// The percentage at `at`.
    pub fn percent_at(&self, at: OffsetDateTime) -> u8 {
        self.ramp
            .as_ref()
            .map_or(self.percent, |ramp| ramp.percent_at(self.percent, at))
    }

    /// Whether the install with `install_id` is in at `at`.
    pub fn includes(&self, install_id: &str, at: OffsetDateTime) -> bool {
        rollout_bucket(&self.salt, install_id) < self.percent_at(at)
    }
}

/// The stable rollout bucket (0-99) of an install for a salt.
pub fn rollout_bucket(salt: &str, install_id: &str) -> u8 {
    let digest = sha2::Sha256::new()
        .chain_update(salt.as_bytes())
        .chain_update(b"\0")
        .chain_update(install_id.as_bytes())
        .finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % 100) as u8
}

/// A document whose signature, trusted comment and expiry were checked.
#[derive(Debug, Clone)]
pub struct VerifiedChannel {
    pub document: ChannelDocument,
    /// The minisign key id that signed it.
    pub key_id: String,
    /// For a document the guard key signed: the document it restricts, verified against the
    /// trusted keys.
    pub base: Option<Box<VerifiedChannel>>,
    /// SHA-256 of the document bytes.
    pub sha256: String,
}

/// A document's bytes and its minisign signature file text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedChannel {
    pub document: Vec<u8>,
    pub signature: String,
}

impl ChannelDocument {
    /// The canonical bytes that get signed: pretty JSON and a final newline.
    pub fn to_bytes(&self) -> Vec<u8> {
        // A struct of strings, numbers and dates always serialises.
        let mut bytes = serde_json::to_vec_pretty(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }

    /// The trusted comment the signature carries.
    pub fn trusted_comment(&self) -> String {
        format!(
            "promptpack channel={} pack={} sequence={} expires_at={}",
            self.channel,
            self.pack,
            self.sequence,
            format_time(self.expires_at)
        )
    }

    /// Checks what the signature cannot: names, ranges, percentages and dates make sense.
    pub fn validate(&self) -> Result<(), FormatError> {
        if self.format != CHANNEL_FORMAT {
            return Err(FormatError::UnsupportedVersion {
                what: "channel document",
                expected: CHANNEL_FORMAT,
                found: self.format,
            });
        }
        validate_name("channel", &self.channel)?;
        validate_name("pack", &self.pack)?;
        if self.sequence > MAX_SEQUENCE {
            return Err(FormatError::SequenceOutOfRange {
                found: self.sequence,
                limit: MAX_SEQUENCE,
            });
        }
        if self.expires_at <= self.issued_at {
            return Err(FormatError::malformed(
                "channel document",
                format!(
                    "expires_at {} is not after issued_at {}",
                    format_time(self.expires_at),
                    format_time(self.issued_at)
                ),
            ));
        }
        if let Some(guard) = &self.guard {
            guard.public_key()?;
        }
        if self.entries.len() > 1024 {
            return Err(FormatError::malformed(
                "channel document",
                format!(
                    "expected at most 1024 entries, found {}",
                    self.entries.len()
                ),
            ));
        }
        for (i, entry) in self.entries.iter().enumerate() {
            if let Some(rollout) = &entry.rollout {
                if rollout.percent > 100 {
                    return Err(FormatError::malformed(
                        "channel entry",
                        format!(
                            "entry {i}: rollout percent must be 0-100, found {}",
                            rollout.percent
                        ),
                    ));
                }
                if rollout.salt.is_empty() || rollout.salt.len() > 128 {
                    return Err(FormatError::malformed(
                        "channel entry",
                        format!("entry {i}: rollout salt must be 1-128 bytes"),
                    ));
                }
                if let Some(watch) = &rollout.watch
                    && (watch.metrics.is_empty()
                        || watch.metrics.len() > 16
                        || watch.metrics.iter().any(|m| {
                            m.is_empty()
                                || m.len() > 64
                                || !m.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                        }))
                {
                    return Err(FormatError::malformed(
                        "channel entry",
                        format!(
                            "entry {i}: a watch names 1-16 metrics of a-z and _ (such as tool_error_rate)"
                        ),
                    ));
                }
                if let Some(ramp) = &rollout.ramp {
                    ramp.validate(rollout.percent).map_err(|reason| {
                        FormatError::malformed("channel entry", format!("entry {i}: {reason}"))
                    })?;
                }
            }
            match &entry.target {
                EntryTarget::Pack(pack) => {
                    if pack.sha256.len() != 64
                        || !pack
                            .sha256
                            .bytes()
                            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
                    {
                        return Err(FormatError::malformed(
                            "channel entry",
                            format!(
                                "entry {i}: sha256 must be 64 lowercase hex digits, found {:?}",
                                pack.sha256
                            ),
                        ));
                    }
                }
                EntryTarget::Builtin => {}
            }
        }
        Ok(())
    }

    /// What a client at `client_version` with `install_id` gets when its clock says `now`:
    /// the target of the first entry whose range matches and whose rollout (if any) includes
    /// the install, unless a stop order took the install out of that entry, which sends it
    /// to the entry's [`fallback`](Self::fallback). `None`: no entry matches.
    pub fn select(
        &self,
        client_version: &semver::Version,
        install_id: &str,
        now: OffsetDateTime,
    ) -> Option<&EntryTarget> {
        let at = self.ramp_time(now);
        let (i, entry) = self.entries.iter().enumerate().find(|(_, entry)| {
            entry.clients.matches(client_version)
                && entry
                    .rollout
                    .as_ref()
                    .is_none_or(|r| r.includes(install_id, at))
        })?;
        let stop = self.restricts.as_ref().and_then(|r| r.stop_for(i));
        let kept = match stop {
            None => true,
            Some(Stop::Revert { .. }) => false,
            Some(Stop::Hold { percent, .. }) => entry
                .rollout
                .as_ref()
                .is_some_and(|r| rollout_bucket(&r.salt, install_id) < *percent),
        };
        Some(if kept {
            &entry.target
        } else {
            self.fallback(i, client_version)
        })
    }

    /// Where a stop order sends the installs of release `client_version` it takes out of
    /// entry `i`, as the offline key laid the document out: for an entry with a rollout, the
    /// layer the rollout runs over — the target of the first later entry without a rollout
    /// whose range holds the release (itself reverted: the built-in pack) — and otherwise, or
    /// when there is none, the built-in pack. Never a later entry with a rollout, so stopping
    /// one rollout never widens another.
    pub fn fallback(&self, i: usize, client_version: &semver::Version) -> &EntryTarget {
        let Some(entry) = self.entries.get(i) else {
            return &EntryTarget::Builtin;
        };
        if entry.rollout.is_none() {
            return &EntryTarget::Builtin;
        }
        let under = self
            .entries
            .iter()
            .enumerate()
            .skip(i + 1)
            .find(|(_, later)| later.rollout.is_none() && later.clients.matches(client_version));
        match under {
            Some((j, later))
                if self
                    .restricts
                    .as_ref()
                    .and_then(|r| r.stop_for(j))
                    .is_none() =>
            {
                &later.target
            }
            Some(_) | None => &EntryTarget::Builtin,
        }
    }

    /// [`fallback`](Self::fallback) of entry `i` when it is one target for every release the
    /// entry's range holds: the entry has no rollout, or the first later entry without a
    /// rollout has the same range or `*` (or there is none). `None` when it depends on the
    /// release.
    pub fn range_fallback(&self, i: usize) -> Option<&EntryTarget> {
        let entry = self.entries.get(i)?;
        if entry.rollout.is_none() {
            return Some(&EntryTarget::Builtin);
        }
        let under = self
            .entries
            .iter()
            .enumerate()
            .skip(i + 1)
            .find(|(_, later)| later.rollout.is_none());
        match under {
            None => Some(&EntryTarget::Builtin),
            Some((j, later))
                if later.clients == entry.clients || later.clients == semver::VersionReq::STAR =>
            {
                if self
                    .restricts
                    .as_ref()
                    .and_then(|r| r.stop_for(j))
                    .is_some()
                {
                    Some(&EntryTarget::Builtin)
                } else {
                    Some(&later.target)
                }
            }
            Some(_) => None,
        }
    }

    /// The time ramps are read at for a client whose clock says `now`: a clock more than
    /// [`RAMP_CLOCK_SKEW`] behind the signing time holds every ramp at its start. (A clock
    /// ahead is bounded by the expiry: past it the document is refused.)
    pub fn ramp_time(&self, now: OffsetDateTime) -> OffsetDateTime {
        if now < self.issued_at - RAMP_CLOCK_SKEW {
            OffsetDateTime::UNIX_EPOCH
        } else {
            now
        }
    }

    /// Signs the canonical bytes with `key`.
    pub fn sign(&self, key: &SigningKey) -> Result<SignedChannel, FormatError> {
        self.validate()?;
        let document = self.to_bytes();
        let comment = self.trusted_comment();
        let signature = minisign::sign(
            Some(&key.public),
            &key.secret,
            Cursor::new(&document),
            Some(&comment),
            Some(&format!(
                "promptpack channel {} sequence {}",
                self.channel, self.sequence
            )),
        )
        .map_err(|e| FormatError::Signing(e.to_string()))?;
        Ok(SignedChannel {
            document,
            signature: signature.into_string(),
        })
    }
}

pub fn format_time(t: OffsetDateTime) -> String {
    t.format(&Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}

/// The minisign signature algorithm bytes: `Ed` is legacy (signs the raw data), `ED`
/// signs a BLAKE2b-512 prehash.
const ALG_LEGACY: &[u8; 2] = b"Ed";
const ALG_PREHASHED: &[u8; 2] = b"ED";

/// Verifies a channel document: sizes, signature syntax, prehashed algorithm, trusted key,
/// signature, document syntax, trusted comment, then expiry against `now`.
pub fn verify(
    document: &[u8],
    signature: &str,
    trusted: &TrustedKeys,
    now: OffsetDateTime,
    limits: &Limits,
) -> Result<VerifiedChannel, FormatError> {
    let verified = verify_ignoring_expiry(document, signature, trusted, limits)?;
    // A guard document dated ahead of the reader's clock would freeze at a percentage the
    // ramp has not reached.
    if verified.base.is_some() && verified.document.issued_at > now + RAMP_CLOCK_SKEW {
        return Err(FormatError::GuardOverreach {
            reason: format!(
                "it is dated {}, ahead of this clock ({})",
                format_time(verified.document.issued_at),
                format_time(now)
            ),
        });
    }
    if verified.document.expires_at <= now {
        return Err(FormatError::Expired {
            expires_at: format_time(verified.document.expires_at),
            now: format_time(now),
        });
    }
    Ok(verified)
}

/// [`verify`] without the expiry check, for tools that show old documents (history).
///
/// A document signed by a key that is not trusted is still accepted when it is a guard
/// document: it restricts a document the trusted keys signed, which names its key as the
/// channel's guard, and it only freezes or rolls back (see [`crate::guard`]).
pub fn verify_ignoring_expiry(
    document: &[u8],
    signature: &str,
    trusted: &TrustedKeys,
    limits: &Limits,
) -> Result<VerifiedChannel, FormatError> {
    if document.len() > limits.max_channel_len {
        return Err(FormatError::TooLarge {
            what: "channel document",
            found: document.len() as u64,
            limit: limits.max_channel_len as u64,
        });
    }
    if signature.len() > limits.max_signature_len {
        return Err(FormatError::TooLarge {
            what: "channel signature",
            found: signature.len() as u64,
            limit: limits.max_signature_len as u64,
        });
    }
    let (alg, keynum) = signature_alg_and_keynum(signature)?;
    if &alg == ALG_LEGACY {
        return Err(FormatError::LegacySignature);
    }
    if &alg != ALG_PREHASHED {
        return Err(FormatError::malformed(
            "channel signature",
            format!(
                "expected algorithm ED, found {:?}",
                String::from_utf8_lossy(&alg)
            ),
        ));
    }
    let key_id = key_id_hex(&keynum);
    let Some(public) = trusted.get(&key_id) else {
        let untrusted = || FormatError::UntrustedKey {
            key_id: key_id.clone(),
            trusted: trusted.ids().join(", "),
        };
        // Perhaps a guard document: what it restricts says whose key signed it.
        let restricts = serde_json::from_slice::<ChannelDocument>(document)
            .ok()
            .and_then(|d| d.restricts)
            .ok_or_else(untrusted)?;
        return crate::guard::verify_guarded(
            document, signature, &key_id, &restricts, trusted, limits,
        );
    };
    let parsed = check_signed(document, signature, public, &key_id)?;
    if parsed.restricts.is_some() {
        return Err(FormatError::GuardOverreach {
            reason: format!(
                "key {key_id} is trusted to sign channel documents, not guard documents; a guard document is signed by the guard key its channel names"
            ),
        });
    }
    Ok(VerifiedChannel {
        document: parsed,
        key_id,
        base: None,
        sha256: sha256_hex(document),
    })
}

/// Checks `signature` over `document` with `public` (key `key_id`), then the trusted
/// comment, then the document itself.
pub(crate) fn check_signed(
    document: &[u8],
    signature: &str,
    public: &minisign::PublicKey,
    key_id: &str,
) -> Result<ChannelDocument, FormatError> {
    let sig_box = minisign::SignatureBox::from_string(signature)
        .map_err(|e| FormatError::malformed("channel signature", e))?;
    minisign::verify(public, &sig_box, Cursor::new(document), true, false, false).map_err(
        |_| FormatError::BadSignature {
            key_id: key_id.to_string(),
        },
    )?;
    let found_comment = sig_box
        .trusted_comment()
        .map_err(|e| FormatError::malformed("channel signature", e))?;
    let parsed: ChannelDocument = serde_json::from_slice(document)
        .map_err(|e| FormatError::malformed("channel document", e))?;
    let expected_comment = parsed.trusted_comment();
    if found_comment != expected_comment {
        return Err(FormatError::CommentMismatch {
            expected: expected_comment,
            found: found_comment,
        });
    }
    parsed.validate()?;
    Ok(parsed)
}

/// Reads the algorithm and key number out of a minisign signature file without trusting it:
/// four lines, the usual prefixes, a 74-byte signature and a 64-byte global signature.
fn signature_alg_and_keynum(signature: &str) -> Result<([u8; 2], [u8; 8]), FormatError> {
    let bad = |reason: &str| FormatError::malformed("channel signature", reason);
    let lines: Vec<&str> = signature.lines().collect();
    if lines.len() != 4 {
        return Err(bad(&format!("expected 4 lines, found {}", lines.len())));
    }
    if !lines[0].starts_with("untrusted comment: ") {
        return Err(bad("line 1 must start with 'untrusted comment: '"));
    }
    if !lines[2].starts_with("trusted comment: ") {
        return Err(bad("line 3 must start with 'trusted comment: '"));
    }
    let sig = B64
        .decode(lines[1].trim().as_bytes())
        .map_err(|_| bad("line 2 is not base64"))?;
    if sig.len() != 74 {
        return Err(bad(&format!(
            "expected a 74-byte signature, found {} bytes",
            sig.len()
        )));
    }
    let global = B64
        .decode(lines[3].trim().as_bytes())
        .map_err(|_| bad("line 4 is not base64"))?;
    if global.len() != 64 {
        return Err(bad(&format!(
            "expected a 64-byte global signature, found {} bytes",
            global.len()
        )));
    }
    let mut alg = [0u8; 2];
    alg.copy_from_slice(&sig[..2]);
    let mut keynum = [0u8; 8];
    keynum.copy_from_slice(&sig[2..10]);
    Ok((alg, keynum))
}
