//! What a refresh does with what packd answered: a pure function of the state held, the
//! answer and the time, returning what to write, what to serve and what to say. No I/O:
//! [`crate::client`] fetches, runs the CPU and disk work on the blocking pool, and carries
//! out the `Plan`; the decisions are tested here as a table.
//!
//! The steps (DESIGN.md, "Client state machine"): `decide` takes the channel document
//! answer (a `304`, or a document with its signature) and verifies it (signature, channel,
//! pack, sequence, expiry, equivocation), selects the entry for this release and says
//! whether a pack is to be downloaded; `decide_pack` takes the downloaded pack, hashed and
//! opened, and says whether it installs or is marked bad.

use std::sync::Arc;

use pack_format::{EntryTarget, FormatError, PackRef, channel, sha256_hex};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::cache::{BadPack, BadReason, Installed, State};
use crate::snapshot::{Snapshot, Source};
use crate::{ClientConfig, ClientError};

/// What one refresh did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RefreshOutcome {
    /// The server answered 304: the channel did not change.
    NotModified,
    /// A new document, but it selects what is already served.
    Unchanged { sequence: u64 },
    Installed {
        name: String,
        version: String,
        sha256: String,
        sequence: u64,
    },
    /// The channel sends this client to the built-in pack.
    Builtin { sequence: u64, reason: String },
    /// Nothing was fetched or installed, on purpose.
    Skipped { reason: String },
}

impl std::fmt::Display for RefreshOutcome {
    /// One sentence for a person (`pack-client refresh`, `agent packs refresh`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefreshOutcome::NotModified => f.write_str("The channel has not changed."),
            RefreshOutcome::Unchanged { sequence } => write!(
                f,
                "The channel moved to sequence {sequence}; it still selects the pack that serves."
            ),
            RefreshOutcome::Installed {
                name,
                version,
                sequence,
                ..
            } => write!(
                f,
                "Installed {name} {version} from channel sequence {sequence}; it serves from now on."
            ),
            RefreshOutcome::Builtin { sequence, reason } => write!(
                f,
                "The built-in pack serves: {reason} (channel sequence {sequence})."
            ),
            RefreshOutcome::Skipped { reason } => write!(f, "Nothing was installed: {reason}."),
        }
    }
}

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
    /// Whether a pack is marked bad on this device after failing to render
    /// (`crate::health`), and why such packs are refused. Asked only of a pack the decision
    /// considers installing, so a `304` or an unchanged document reads no marks.
    pub render_marked: &'a (dyn Fn(&str) -> bool + Sync),
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
    let target = match selected {
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
    if (held.render_marked)(&entry.sha256) {
        return Err(ClientError::KnownBad {
            sha256: entry.sha256.clone(),
            reason: held.render_detail.to_string(),
        });
    }
    if !config.contract.takes(entry.schema) {
        return Err(ClientError::IncompatibleSchema {
            schema: entry.schema,
            known: config.contract.schemas(),
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

#[cfg(test)]
mod tests {
    //! The decisions as a table: each row is the state held, what packd answered and the
    //! time, and the plan that must come of it, written out. A changed decision changes a
    //! line here.

    use std::collections::BTreeSet;

    use super::*;

    use pack_format::{
        ChannelDocument, ChannelEntry, SigningKey, TrustedKeys, channel::SignedChannel,
    };
    use time::macros::datetime;

    use crate::snapshot::SnapshotMeta;

    const NOW: OffsetDateTime = datetime!(2026-06-01 12:00 UTC);

    fn sha(c: char) -> String {
        c.to_string().repeat(64)
    }

    fn pack(version: &str, c: char) -> EntryTarget {
        EntryTarget::Pack(PackRef {
            version: version.parse().unwrap(),
            sha256: sha(c),
            size: 1000,
            schema: 1,
        })
    }

    fn entry(clients: &str, target: EntryTarget) -> ChannelEntry {
        ChannelEntry {
            clients: clients.parse().unwrap(),
            target,
            rollout: None,
        }
    }

    struct Fixture {
        signer: SigningKey,
        other: SigningKey,
        config: ClientConfig,
    }

    fn fixture() -> Fixture {
        let signer = SigningKey::generate(None).unwrap();
        let other = SigningKey::generate(None).unwrap().key;
        let mut config = ClientConfig::new("cache", semver::Version::new(1, 4, 2));
        let mut trusted = TrustedKeys::new();
        trusted
            .add_text(std::path::Path::new("test"), &signer.public_file)
            .unwrap();
        config.trusted_keys = trusted;
        Fixture {
            signer: signer.key,
            other,
            config,
        }
    }

    fn document(sequence: u64, entries: Vec<ChannelEntry>) -> ChannelDocument {
        ChannelDocument {
            format: 1,
            channel: "stable".into(),
            pack: "builtin".into(),
            sequence,
            issued_at: NOW - time::Duration::hours(1),
            expires_at: NOW + time::Duration::days(1),
            entries,
            guard: None,
            restricts: None,
        }
    }

    /// A state that accepted `signed` as sequence `sequence`, with `installed` installed.
    fn holding(signed: &SignedChannel, sequence: u64, installed: Option<(char, &str)>) -> State {
        let mut state = State::new("stable");
        state.sequence = sequence;
        state.etag = Some(format!("\"{sequence}\""));
        state.document = Some(String::from_utf8(signed.document.clone()).unwrap());
        state.signature = Some(signed.signature.clone());
        state.installed = installed.map(|(c, version)| Installed {
            name: "builtin".into(),
            version: version.parse().unwrap(),
            schema: 1,
            sha256: sha(c),
            sequence,
        });
        state
    }

    fn answer(signed: &SignedChannel, etag: &str) -> Answer {
        Answer::Document {
            body: signed.document.clone(),
            signature: signed.signature.clone(),
            etag: Some(etag.to_string()),
        }
    }

    fn not_modified() -> Answer {
        Answer::NotModified {
            url: "http://packd/v1/channels/stable".into(),
        }
    }

    /// A snapshot serving pack `c` (remote), or the built-in pack.
    fn serving(c: Option<char>) -> Snapshot {
        let files = crate::builtin::BUILTIN_FILES
            .iter()
            .map(|(path, bytes)| ((*path).to_string(), bytes.to_vec()));
        let meta = SnapshotMeta {
            name: "builtin".into(),
            version: semver::Version::new(1, 0, 0),
            sequence: 5,
            source: if c.is_some() {
                Source::Remote
            } else {
                Source::Builtin
            },
            sha256: c.map_or_else(|| "builtin".to_string(), sha),
            schema: 1,
        };
        Snapshot::new(meta, files).unwrap()
    }

    /// A plan, one line: what is written, what is served, what is said.
    fn line(plan: &Plan) -> String {
        let next = plan.next.as_ref().map_or("keep".to_string(), |s| {
            let installed = s.installed.as_ref().map_or("-".to_string(), |i| {
                format!("{}@{}", &i.sha256[..1], i.sequence)
            });
            let bad: Vec<String> = s
                .bad
                .iter()
                .map(|(sha, mark)| format!("{}:{:?}", &sha[..1], mark.reason))
                .collect();
            format!(
                "seq {} etag {} installed {installed} bad [{}]",
                s.sequence,
                s.etag.as_deref().unwrap_or("-"),
                bad.join(",")
            )
        });
        let pack = plan
            .pack
            .as_ref()
            .map_or("-".to_string(), |(sha, _)| sha[..1].to_string());
        let serve = match &plan.serve {
            Serve::Keep => "keep".to_string(),
            Serve::Builtin => "builtin".to_string(),
            Serve::Snapshot(s) => format!("pack {}", &s.sha256()[..1]),
        };
        let result = match &plan.result {
            Ok(outcome) => format!("{outcome:?}"),
            Err(e) => format!("error {}", e.kind()),
        };
        format!("state: {next} | write pack: {pack} | serve: {serve} | {result}")
    }

    fn decided_line(decided: &Decided) -> String {
        let considering = decided
            .considering
            .as_ref()
            .map_or("-".to_string(), |sha| sha[..1].to_string());
        let next = match &decided.next {
            Ok(Next::Plan(plan)) => line(plan),
            Ok(Next::Download(d)) => format!(
                "download {} {} (then state: seq {} installed {}@{})",
                &d.entry.sha256[..1],
                d.entry.version,
                d.next.sequence,
                &d.next.installed.as_ref().unwrap().sha256[..1],
                d.next.installed.as_ref().unwrap().sequence,
            ),
            // The kind only: some messages carry a random key id or digest.
            Err(e) => format!("error {}", e.kind()),
        };
        format!("considering {considering} | {next}")
    }

    #[test]
    fn what_a_refresh_does_with_each_answer() {
        let f = fixture();
        let sign = |doc: &ChannelDocument| doc.sign(&f.signer).unwrap();
        let to_a = document(5, vec![entry("*", pack("1.0.0", 'a'))]);
        let to_b = document(6, vec![entry("*", pack("2.0.0", 'b'))]);
        let held_a = sign(&to_a);
        let state_a = holding(&held_a, 5, Some(('a', "1.0.0")));
        let nothing: BTreeSet<String> = BTreeSet::new();
        let marked_b: BTreeSet<String> = [sha('b')].into();
        let b_bad = {
            let mut state = state_a.clone();
            state.bad.insert(
                sha('b'),
                BadPack {
                    reason: BadReason::Pack,
                    detail: "pack rejected: truncated".into(),
                    content_keys: String::new(),
                    at: 0,
                },
            );
            state
        };
        let pinned = |version: &str| {
            let mut config = f.config.clone();
            config.pin = Some(version.parse().unwrap());
            config
        };
        let wrong = |change: fn(&mut ChannelDocument)| {
            let mut doc = to_b.clone();
            change(&mut doc);
            answer(&sign(&doc), "\"x\"")
        };
        let small_limits = {
            let mut config = f.config.clone();
            config.limits.max_sealed_len = 999;
            config
        };
        let new_state = State::new("stable");
        let state_builtin = holding(
            &sign(&document(5, vec![entry("*", EntryTarget::Builtin)])),
            5,
            None,
        );
        let state_b = holding(&sign(&to_b), 6, Some(('b', "2.0.0")));
        let (pinned_1, pinned_2) = (pinned("1.0.0"), pinned("2.0.0"));
        let on_a = serving(Some('a'));
        let on_builtin = serving(None);

        struct Row<'a> {
            name: &'a str,
            config: &'a ClientConfig,
            state: &'a State,
            serving: &'a Snapshot,
            marked: &'a BTreeSet<String>,
            answer: Answer,
            now: OffsetDateTime,
            expected: &'a str,
        }
        let row = |name, state, serving, answer, expected| Row {
            name,
            config: &f.config,
            state,
            serving,
            marked: &nothing,
            answer,
            now: NOW,
            expected,
        };
        let rows = [
            row(
                "304 with nothing stored",
                &new_state,
                &on_builtin,
                not_modified(),
                "considering - | error http_status",
            ),
            row(
                "304, the stored document still selects what serves",
                &state_a,
                &on_a,
                not_modified(),
                "considering - | state: keep | write pack: - | serve: keep | NotModified",
            ),
            Row {
                now: NOW + time::Duration::days(2),
                ..row(
                    "304 after the stored document expired: a freeze",
                    &state_a,
                    &on_a,
                    not_modified(),
                    "considering - | error expired",
                )
            },
            row(
                "304, the stored document selects a pack not installed (an app upgrade)",
                &state_a,
                &on_builtin,
                not_modified(),
                "considering a | download a 1.0.0 (then state: seq 5 installed a@5)",
            ),
            row(
                "a new document selecting what serves",
                &state_a,
                &on_a,
                answer(
                    &sign(&document(6, vec![entry("*", pack("1.0.0", 'a'))])),
                    "\"6\"",
                ),
                "considering - | state: seq 6 etag \"6\" installed a@6 bad [] | write pack: - | serve: keep | Unchanged { sequence: 6 }",
            ),
            row(
                "a new document selecting another pack",
                &state_a,
                &on_a,
                answer(&sign(&to_b), "\"6\""),
                "considering b | download b 2.0.0 (then state: seq 6 installed b@6)",
            ),
            row(
                "a new document sending this release to the built-in pack",
                &state_a,
                &on_a,
                answer(
                    &sign(&document(6, vec![entry("*", EntryTarget::Builtin)])),
                    "\"6\"",
                ),
                "considering - | state: seq 6 etag \"6\" installed - bad [] | write pack: - | serve: builtin | Builtin { sequence: 6, reason: \"the channel sends this client to the built-in pack\" }",
            ),
            row(
                "a new document with no entry for this release, still naming the installed pack",
                &state_a,
                &on_a,
                answer(
                    &sign(&document(6, vec![entry("<1.0", pack("1.0.0", 'a'))])),
                    "\"6\"",
                ),
                "considering - | state: seq 6 etag \"6\" installed a@6 bad [] | write pack: - | serve: builtin | Builtin { sequence: 6, reason: \"no channel entry matches client version 1.4.2\" }",
            ),
            row(
                "304 on a document that sends this release to the built-in pack, which serves",
                &state_builtin,
                &on_builtin,
                not_modified(),
                "considering - | state: keep | write pack: - | serve: keep | NotModified",
            ),
            row(
                "an older sequence: a rollback",
                &state_b,
                &on_a,
                answer(&held_a, "\"5\""),
                "considering - | error rollback",
            ),
            row(
                "other bytes under the accepted sequence: equivocation",
                &state_a,
                &on_a,
                answer(
                    &sign(&document(5, vec![entry("*", pack("2.0.0", 'b'))])),
                    "\"5\"",
                ),
                "considering - | error equivocation",
            ),
            row(
                "a document for another channel",
                &state_a,
                &on_a,
                wrong(|doc| doc.channel = "beta".into()),
                "considering - | error wrong_channel",
            ),
            row(
                "a document for another pack",
                &state_a,
                &on_a,
                wrong(|doc| doc.pack = "other".into()),
                "considering - | error wrong_pack",
            ),
            row(
                "an expired document",
                &state_a,
                &on_a,
                wrong(|doc| {
                    doc.issued_at = NOW - time::Duration::days(3);
                    doc.expires_at = NOW - time::Duration::days(1);
                }),
                "considering - | error expired",
            ),
            row(
                "a document signed by a key not trusted",
                &state_a,
                &on_a,
                answer(&to_b.sign(&f.other).unwrap(), "\"6\""),
                "considering - | error document_rejected",
            ),
            row(
                "a pack marked bad when it failed to open",
                &b_bad,
                &on_a,
                answer(&sign(&to_b), "\"6\""),
                "considering b | error known_bad",
            ),
            Row {
                marked: &marked_b,
                ..row(
                    "a pack marked bad after failing to render here",
                    &state_a,
                    &on_a,
                    answer(&sign(&to_b), "\"6\""),
                    "considering b | error known_bad",
                )
            },
            row(
                "a pack of a template schema this build does not know",
                &state_a,
                &on_a,
                answer(
                    &sign(&document(
                        6,
                        vec![entry(
                            "*",
                            EntryTarget::Pack(PackRef {
                                version: "2.0.0".parse().unwrap(),
                                sha256: sha('b'),
                                size: 1000,
                                schema: 99,
                            }),
                        )],
                    )),
                    "\"6\"",
                ),
                "considering b | error incompatible_schema",
            ),
            Row {
                config: &small_limits,
                ..row(
                    "a pack larger than the limit",
                    &state_a,
                    &on_a,
                    answer(&sign(&to_b), "\"6\""),
                    "considering b | error pack_rejected",
                )
            },
            Row {
                config: &pinned_1,
                ..row(
                    "pinned to another version than the channel offers",
                    &state_a,
                    &on_a,
                    answer(&sign(&to_b), "\"6\""),
                    "considering - | state: keep | write pack: - | serve: keep | Skipped { reason: \"pinned to 1.0.0; the channel offers 2.0.0\" }",
                )
            },
            Row {
                config: &pinned_2,
                ..row(
                    "pinned to the version the channel offers",
                    &state_a,
                    &on_a,
                    answer(&sign(&to_b), "\"6\""),
                    "considering b | download b 2.0.0 (then state: seq 6 installed b@6)",
                )
            },
        ];
        let mut found = Vec::new();
        for row in &rows {
            let held = Held {
                state: row.state,
                serving: row.serving,
                render_marked: &|sha256: &str| row.marked.contains(sha256),
                render_detail: "its templates failed to render 3 times in a row on this device",
            };
            let decided = decide(row.config, "install-1", &held, row.answer.clone(), row.now);
            found.push(format!("{}\n  {}", row.name, decided_line(&decided)));
        }
        let expected: Vec<String> = rows
            .iter()
            .map(|row| format!("{}\n  {}", row.name, row.expected))
            .collect();
        assert_eq!(found.join("\n"), expected.join("\n"));
    }
}
