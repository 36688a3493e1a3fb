//! What a refresh does with what packd answered: a pure function of the state held, the
//! answer and the time, returning what to write, what to serve and what to say. No I/O:
//! [`crate::client`] fetches, runs the CPU and disk work on the blocking pool, and carries
//! out the [`Plan`]; the decisions are tested here as a table.
//!
//! The steps (DESIGN.md, "Client state machine"): [`decide`] takes the channel document
//! answer (a `304`, or a document with its signature) and verifies it (signature, channel,
//! pack, sequence, expiry, equivocation), selects the entry for this release and says
//! whether a pack is to be downloaded; [`decide_pack`] takes the downloaded pack, hashed and
//! opened, and says whether it installs or is marked bad.

use std::collections::BTreeSet;
use std::sync::Arc;

use pack_contract::Contract;
use pack_format::{EntryTarget, FormatError, PackRef, channel, sha256_hex};
use time::OffsetDateTime;

use crate::cache::{BadPack, BadReason, Installed, State};
use crate::snapshot::{Snapshot, Source};
use crate::{ClientConfig, ClientError, RefreshOutcome};

/// What a refresh decided before anything is written.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The next state; `None`: unchanged. The check times are added either way.
    pub next: Option<State>,
    /// A pack to make durable before the state that names it: SHA-256 and sealed bytes.
    pub pack: Option<(String, Vec<u8>)>,
    pub serve: Serve,
    pub result: Result<RefreshOutcome, ClientError>,
}

impl Plan {
    fn done(outcome: RefreshOutcome) -> Self {
        Plan {
            next: None,
            pack: None,
            serve: Serve::Keep,
            result: Ok(outcome),
        }
    }

    pub fn failed(error: ClientError) -> Self {
        Plan {
            next: None,
            pack: None,
            serve: Serve::Keep,
            result: Err(error),
        }
    }
}

/// What to serve once a plan is durable.
#[derive(Debug)]
pub(crate) enum Serve {
    Keep,
    Builtin,
    Snapshot(Arc<Snapshot>),
}

/// What the client holds when the answer comes.
pub(crate) struct Held<'a> {
    pub state: &'a State,
    /// The snapshot the store serves.
    pub serving: &'a Snapshot,
    /// Packs marked bad on this device after failing to render (`crate::health`), and why
    /// they are refused.
    pub render_marked: &'a BTreeSet<String>,
    pub render_detail: &'a str,
}

/// What packd answered to the conditional GET of the channel document.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    /// `304` to `url`: the stored document is still the live one.
    NotModified { url: String },
    /// A document, with the signature of the sequence it carried and its ETag.
    Document {
        body: Vec<u8>,
        signature: String,
        etag: Option<String>,
    },
}

/// What [`decide`] says to do next.
#[derive(Debug)]
pub(crate) enum Next {
    /// Nothing to download: carry out this plan.
    Plan(Plan),
    /// Download this pack (never more than its signed size), hash and open it, and hand it
    /// to [`decide_pack`].
    Download(Download),
}

/// A pack to download, and the state to write if it installs.
#[derive(Debug)]
pub(crate) struct Download {
    pub entry: PackRef,
    /// The pack name the document is for, which the pack's header must carry.
    pub pack_name: String,
    /// The sequence of the document that selects it.
    pub sequence: u64,
    /// The state recording the document, with this pack installed.
    next: State,
}

/// [`decide`]'s answer: the pack considered (for a failure report about it) and what next.
#[derive(Debug)]
pub(crate) struct Decided {
    pub considering: Option<String>,
    pub next: Result<Next, ClientError>,
}

/// Steps 1-3 and the checks before a download: what to do with `answer`, given what is
/// held, at `now`.
pub(crate) fn decide(
    config: &ClientConfig,
    install_id: &str,
    held: &Held<'_>,
    answer: Answer,
    now: OffsetDateTime,
) -> Decided {
    let mut considering = None;
    let next = decide_document(config, install_id, held, answer, now, &mut considering);
    Decided { considering, next }
}

fn decide_document(
    config: &ClientConfig,
    install_id: &str,
    held: &Held<'_>,
    answer: Answer,
    now: OffsetDateTime,
    considering: &mut Option<String>,
) -> Result<Next, ClientError> {
    let state = held.state;
    // 1. A 304 only says "same bytes": the stored document must still be in date (a mirror
    // answering 304 forever is a freeze), and it is matched against this client's release
    // again, which may have changed since the document was accepted (an app upgrade).
    let (document, signature, new_etag, fresh) = match answer {
        Answer::NotModified { url } => {
            let (Some(document), Some(signature)) = (&state.document, &state.signature) else {
                return Err(ClientError::Status {
                    url,
                    status: 304,
                    detail: "Not Modified, but no document is stored to reuse".to_string(),
                });
            };
            (
                document.clone().into_bytes(),
                signature.clone(),
                state.etag.clone(),
                false,
            )
        }
        Answer::Document {
            body,
            signature,
            etag,
        } => (body, signature, etag, true),
    };

    // 2. Signature, channel, sequence, expiry.
    let verified = channel::verify(
        &document,
        &signature,
        &config.trusted_keys,
        now,
        &config.limits,
    )
    .map_err(ClientError::Document)?;
    // The document this client follows, as it was verified when accepted.
    let followed = state
        .document
        .as_deref()
        .and_then(|d| serde_json::from_str::<channel::ChannelDocument>(d).ok());
    // A guard document must also restrict the guard document this client follows, if it
    // follows one: a freeze is never undone by the guard key.
    if verified.base.is_some()
        && let Some(followed) = &followed
    {
        pack_format::guard::check_live(&verified, followed).map_err(ClientError::Document)?;
    }
    // A document the signing key signed is newer than a guard document when it is newer
    // than what that guard document restricts: the guard key picks its own sequences and
    // must not push the channel past every sequence the signing key can still sign.
    let floor = match &followed {
        Some(followed) if verified.base.is_none() && followed.restricts.is_some() => {
            pack_format::guard::authority_sequence(followed).saturating_add(1)
        }
        _ => state.sequence,
    };
    let doc = &verified.document;
    if doc.channel != config.channel {
        return Err(ClientError::WrongChannel {
            expected: config.channel.clone(),
            found: doc.channel.clone(),
        });
    }
    if doc.pack != config.pack {
        return Err(ClientError::WrongPack {
            expected: config.pack.clone(),
            found: doc.pack.clone(),
        });
    }
    if doc.sequence < floor {
        return Err(ClientError::Rollback {
            found: doc.sequence,
            installed: state.sequence,
        });
    }
    // One sequence, one document: other bytes under the accepted sequence mean the
    // publisher's key signed two documents for it, or a mirror replays a forked channel.
    if doc.sequence == state.sequence
        && let Some(accepted) = &state.document
        && accepted.as_bytes() != document.as_slice()
    {
        return Err(ClientError::Equivocation {
            sequence: doc.sequence,
            installed: sha256_hex(accepted.as_bytes()),
            found: sha256_hex(&document),
        });
    }

    // 3. The entry for this client's release of now.
    let selected = doc.select(&config.client_version, install_id, now);
    let target = match selected.map(|e| &e.target) {
        Some(EntryTarget::Pack(entry)) => Some(entry.clone()),
        Some(EntryTarget::Builtin) | None => None,
    };
    let serving = held.serving;
    // What the shared state calls installed is the last pack any process installed; it
    // is kept while the document still names it (another release sharing this cache may
    // serve it), so processes of different releases never undo each other's installs.
    let still_named = |installed: &Option<Installed>| {
        installed
            .clone()
            .filter(|i| names_pack(doc, &i.sha256))
            .map(|i| Installed {
                sequence: doc.sequence,
                ..i
            })
    };
    let record = |installed: Option<Installed>| {
        let mut next = state.clone();
        next.sequence = doc.sequence;
        next.etag = new_etag.clone();
        next.document = Some(String::from_utf8_lossy(&document).into_owned());
        next.signature = Some(signature.clone());
        next.installed = installed;
        next
    };

    if let Some(pin) = &config.pin {
        let wanted = target.as_ref().map(|t| &t.version);
        if wanted != Some(pin) {
            return Ok(Next::Plan(Plan::done(RefreshOutcome::Skipped {
                reason: format!(
                    "pinned to {pin}; the channel offers {}",
                    wanted.map_or("the built-in pack".to_string(), ToString::to_string)
                ),
            })));
        }
    }

    let Some(entry) = target else {
        if !fresh && serving.source() == Source::Builtin {
            return Ok(Next::Plan(Plan::done(RefreshOutcome::NotModified)));
        }
        let reason = match selected {
            Some(_) => "the channel sends this client to the built-in pack".to_string(),
            None => format!(
                "no channel entry matches client version {}",
                config.client_version
            ),
        };
        return Ok(Next::Plan(Plan {
            // The same document: nothing in the shared state changes.
            next: fresh.then(|| record(still_named(&state.installed))),
            pack: None,
            serve: Serve::Builtin,
            result: Ok(RefreshOutcome::Builtin {
                sequence: doc.sequence,
                reason,
            }),
        }));
    };

    if serving.source() == Source::Remote && serving.sha256() == entry.sha256 {
        if !fresh {
            return Ok(Next::Plan(Plan::done(RefreshOutcome::NotModified)));
        }
        let mine = Installed {
            name: doc.pack.clone(),
            version: entry.version.clone(),
            schema: entry.schema,
            sha256: entry.sha256.clone(),
            sequence: doc.sequence,
        };
        return Ok(Next::Plan(Plan {
            next: Some(record(still_named(&state.installed).or(Some(mine)))),
            pack: None,
            serve: Serve::Keep,
            result: Ok(RefreshOutcome::Unchanged {
                sequence: doc.sequence,
            }),
        }));
    }
    *considering = Some(entry.sha256.clone());
    if let Some(mark) = state.bad.get(&entry.sha256) {
        return Err(ClientError::KnownBad {
            sha256: entry.sha256.clone(),
            reason: mark.detail.clone(),
        });
    }
    if held.render_marked.contains(&entry.sha256) {
        return Err(ClientError::KnownBad {
            sha256: entry.sha256.clone(),
            reason: held.render_detail.to_string(),
        });
    }
    if Contract::builtin(entry.schema).is_none() {
        return Err(ClientError::IncompatibleSchema {
            schema: entry.schema,
            known: Contract::builtin_schemas().to_vec(),
        });
    }
    if entry.size > config.limits.max_sealed_len {
        return Err(ClientError::Pack(FormatError::TooLarge {
            what: "signed pack size",
            found: entry.size,
            limit: config.limits.max_sealed_len,
        }));
    }
    let installed = Installed {
        name: doc.pack.clone(),
        version: entry.version.clone(),
        schema: entry.schema,
        sha256: entry.sha256.clone(),
        sequence: doc.sequence,
    };
    Ok(Next::Download(Download {
        pack_name: doc.pack.clone(),
        sequence: doc.sequence,
        next: record(Some(installed)),
        entry,
    }))
}

/// A downloaded pack: its bytes (their SHA-256 matched the signed entry) and what opening
/// them gave.
pub(crate) struct Opened {
    pub bytes: Vec<u8>,
    pub snapshot: Result<Snapshot, ClientError>,
}

/// Steps 5-7 after the download: `opened` is the pack hashed and opened (an `Err` when
/// the download failed or its hash does not match), `key_set` the fingerprint of the
/// content keys held.
pub(crate) fn decide_pack(
    state: &State,
    download: Download,
    opened: Result<Opened, ClientError>,
    key_set: &str,
    now: OffsetDateTime,
) -> Plan {
    let Download {
        entry,
        pack_name,
        sequence,
        next,
    } = download;
    let Opened { bytes, snapshot } = match opened {
        Ok(opened) => opened,
        Err(e) => return Plan::failed(e),
    };
    // The bytes match what the publisher signed, so a failure now is the pack's own:
    // remember it, with why, so a new content key can lift a key mark.
    let snapshot = match snapshot {
        Ok(snapshot) => snapshot,
        Err(e) => {
            let Some(reason) = bad_reason(&e) else {
                return Plan::failed(e);
            };
            let mut next = state.clone();
            next.bad.insert(
                entry.sha256.clone(),
                BadPack {
                    reason,
                    detail: e.to_string(),
                    content_keys: key_set.to_string(),
                    at: now.unix_timestamp(),
                },
            );
            return Plan {
                next: Some(next),
                pack: None,
                serve: Serve::Keep,
                result: Err(e),
            };
        }
    };
    // 7. Install crash-safely (the pack before the state naming it), then swap.
    Plan {
        next: Some(next),
        pack: Some((entry.sha256.clone(), bytes)),
        serve: Serve::Snapshot(Arc::new(snapshot)),
        result: Ok(RefreshOutcome::Installed {
            name: pack_name,
            version: entry.version.to_string(),
            sha256: entry.sha256,
            sequence,
        }),
    }
}

/// Whether any entry of `doc` names the pack `sha256`.
fn names_pack(doc: &channel::ChannelDocument, sha256: &str) -> bool {
    doc.entries
        .iter()
        .any(|entry| matches!(&entry.target, EntryTarget::Pack(p) if p.sha256 == sha256))
}

/// Whether a failure to open a pack whose bytes match the signed hash is held against the
/// pack, and why. `None`: the document is at fault (a header that disagrees with its entry,
/// a schema this client does not know), and a corrected document may point at the same bytes.
fn bad_reason(error: &ClientError) -> Option<BadReason> {
    match error {
        ClientError::Pack(
            FormatError::UnknownContentKey { .. } | FormatError::WrongContentKey { .. },
        ) => Some(BadReason::ContentKey),
        ClientError::Pack(_) | ClientError::Snapshot(_) => Some(BadReason::Pack),
        ClientError::HeaderMismatch { .. } | ClientError::IncompatibleSchema { .. } => None,
        ClientError::NoServer
        | ClientError::Http { .. }
        | ClientError::Status { .. }
        | ClientError::BodyTooLong { .. }
        | ClientError::Truncated { .. }
        | ClientError::Deadline { .. }
        | ClientError::Busy { .. }
        | ClientError::Document(_)
        | ClientError::WrongChannel { .. }
        | ClientError::WrongPack { .. }
        | ClientError::Rollback { .. }
        | ClientError::Equivocation { .. }
        | ClientError::KnownBad { .. }
        | ClientError::HashMismatch { .. }
        | ClientError::Cache { .. }
        | ClientError::Config { .. }
        | ClientError::NotMarked { .. }
        | ClientError::Builtin { .. }
        | ClientError::Worker { .. } => None,
    }
}
