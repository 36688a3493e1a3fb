//! A hostile mirror serving guard documents, one property per test. The channel names a guard
//! key that may only sign stop orders (hold a rollout, revert an entry); a mirror holding that
//! key (or one pretending to) serves documents that do more. Each is refused with the guard
//! error that names the overreach, the pack that served before still serves, and the client's
//! channel sequence does not move. packd refuses to store such documents, so only a mirror can
//! serve them. The three cases that once moved installs to packs they were never sent run at
//! the end, through packd and a mirror both.
//!
//! Every test starts from a client that installed an offline-signed document ramping pack
//! 1.3.0 over 1.2.0 (1 % to 100 % over 72 hours, started 24 hours ago: 34 % now) with a guard
//! key. A rollout salt picked per install puts the client in the ramp or out of it, so each
//! refused document is one that, accepted, would change what the client serves.

use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pack_client::{Client, ClientConfig, ClientError, RefreshOutcome, Source};
use pack_format::channel::SignedChannel;
use pack_format::guard::guard_document;
use pack_format::{
    ChannelDocument, ChannelEntry, EntryTarget, FormatError, Guard, GuardAction, PackRef, Ramp,
    Restricts, Rollout, SigningKey, Stop, Watch, WatchAction, rollout_bucket,
};
use pack_protocol::{headers, paths};
use promptpack_tests::*;
use time::OffsetDateTime;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The offline-signed ramp: where it starts is [`RAMP_AGE`] ago.
const RAMP: &str = "1%..100%/72h";
/// 24 hours into [`RAMP`] it stands at 34 %; 4 hours in it stood at 6 %.
const RAMP_AGE: time::Duration = time::Duration::hours(24);
/// The sequence of the offline-signed document every client installs from.
const BASE_SEQUENCE: u64 = 5;
/// The client release every test runs; every entry is for all releases.
const RELEASE: &str = "1.0.0";

/// A mirror that answers the channel routes with whatever document it was last given, and
/// the blobs of every pack, the way packd does (ETag, `If-None-Match`, the sequence header,
/// the live signature and the one by sequence).
struct Mirror {
    url: String,
    serving: Arc<Mutex<Option<SignedChannel>>>,
}

impl Mirror {
    async fn start(blobs: Vec<(String, Vec<u8>)>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let serving = Arc::new(Mutex::new(None::<SignedChannel>));
        let shared = serving.clone();
        let blobs = Arc::new(blobs);
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let signed = shared.lock().unwrap().clone();
                let blobs = blobs.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&head).into_owned();
                    let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                    let if_none_match = text.lines().find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("if-none-match")
                            .then(|| value.trim().to_string())
                    });
                    let (status, extra, body) =
                        answer(&path, if_none_match, signed.as_ref(), &blobs);
                    let mut response = format!(
                        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
                        body.len()
                    );
                    for (name, value) in extra {
                        response.push_str(&format!("{name}: {value}\r\n"));
                    }
                    response.push_str("\r\n");
                    let mut bytes = response.into_bytes();
                    bytes.extend_from_slice(&body);
                    let _ = socket.write_all(&bytes).await;
                });
            }
        });
        Mirror { url, serving }
    }

    fn serve(&self, signed: &SignedChannel) {
        *self.serving.lock().unwrap() = Some(signed.clone());
    }
}

/// Status line, headers and body for one request.
fn answer(
    path: &str,
    if_none_match: Option<String>,
    signed: Option<&SignedChannel>,
    blobs: &[(String, Vec<u8>)],
) -> (&'static str, Vec<(&'static str, String)>, Vec<u8>) {
    const NOT_FOUND: &str = "404 Not Found";
    if let Some(sha) = path.strip_prefix("/v1/blobs/") {
        return match blobs.iter().find(|(s, _)| s == sha) {
            Some((_, bytes)) => ("200 OK", vec![], bytes.clone()),
            None => (NOT_FOUND, vec![], vec![]),
        };
    }
    let Some(signed) = signed else {
        return (NOT_FOUND, vec![], vec![]);
    };
    let sequence = serde_json::from_slice::<ChannelDocument>(&signed.document)
        .unwrap()
        .sequence;
    let etag = format!("\"{}\"", pack_format::sha256_hex(&signed.document));
    if path == paths::channel("stable") {
        if if_none_match.as_deref() == Some(etag.as_str()) {
            return ("304 Not Modified", vec![], vec![]);
        }
        let extra = vec![("ETag", etag), (headers::SEQUENCE, sequence.to_string())];
        return ("200 OK", extra, signed.document.clone());
    }
    if path == paths::channel_signature("stable")
        || path == paths::history_signature("stable", sequence)
    {
        return ("200 OK", vec![], signed.signature.clone().into_bytes());
    }
    (NOT_FOUND, vec![], vec![])
}

/// A sealed pack and the reference a channel entry makes to it.
struct Pack {
    bytes: Vec<u8>,
    reference: PackRef,
}

impl Pack {
    fn build(publisher: &Publisher, version: &str) -> Pack {
        let path = publisher.build(version, &format!("GUARD-TEST-{version}"));
        let bytes = std::fs::read(path).unwrap();
        let (header, _) = pack_format::read_header(&bytes, &pack_format::Limits::DEFAULT).unwrap();
        let reference = PackRef {
            version: header.version,
            sha256: pack_format::sha256_hex(&bytes),
            size: bytes.len() as u64,
            schema: header.schema,
        };
        Pack { bytes, reference }
    }

    fn target(&self) -> EntryTarget {
        EntryTarget::Pack(self.reference.clone())
    }
}

struct Fixture {
    publisher: Publisher,
    /// The offline key the clients trust.
    offline: SigningKey,
    /// The key the offline-signed documents name as the channel's guard.
    guard: SigningKey,
    /// What the ramp replaces.
    old: Pack,
    /// What the ramp rolls out.
    new: Pack,
    /// A pack no offline-signed document names.
    unnamed: Pack,
}

impl Fixture {
    /// Keys and packs are made once per test binary: every test reads them, none changes them.
    fn shared() -> &'static Fixture {
        static FIXTURE: std::sync::OnceLock<Fixture> = std::sync::OnceLock::new();
        FIXTURE.get_or_init(|| {
            let publisher = Publisher::new();
            Fixture {
                offline: SigningKey::load(&publisher.keys().join("signing.key"), None).unwrap(),
                guard: SigningKey::generate(None).unwrap().key,
                old: Pack::build(&publisher, "1.2.0"),
                new: Pack::build(&publisher, "1.3.0"),
                unnamed: Pack::build(&publisher, "1.4.0"),
                publisher,
            }
        })
    }

    fn blobs(&self) -> Vec<(String, Vec<u8>)> {
        [&self.old, &self.new, &self.unnamed]
            .iter()
            .map(|p| (p.reference.sha256.clone(), p.bytes.clone()))
            .collect()
    }

    /// The offline-signed ramp of the new pack over the old one, started [`RAMP_AGE`] ago
    /// with `salt`, naming the guard key.
    fn ramp_document(&self, sequence: u64, salt: &str) -> ChannelDocument {
        let started = OffsetDateTime::now_utc() - RAMP_AGE;
        let (first, ramp) = Ramp::parse(RAMP, started).unwrap();
        ChannelDocument {
            format: 1,
            channel: "stable".into(),
            pack: "builtin".into(),
            sequence,
            issued_at: started,
            expires_at: started + time::Duration::days(30),
            entries: vec![
                ChannelEntry {
                    clients: "*".parse().unwrap(),
                    target: self.new.target(),
                    rollout: Some(Rollout {
                        percent: first,
                        salt: salt.to_string(),
                        ramp: Some(ramp),
                        watch: Some(Watch {
                            metrics: vec!["tool_error_rate".to_string()],
                            action: WatchAction::Freeze,
                        }),
                    }),
                },
                ChannelEntry {
                    clients: "*".parse().unwrap(),
                    target: self.old.target(),
                    rollout: None,
                },
            ],
            guard: Some(Guard::for_key(&self.guard)),
            restricts: None,
        }
    }

    fn offline_signed(&self, doc: &ChannelDocument) -> SignedChannel {
        doc.sign(&self.offline).unwrap()
    }

    fn guard_signed(&self, doc: &ChannelDocument) -> SignedChannel {
        doc.sign(&self.guard).unwrap()
    }
}

/// Which side of the ramp a test's install stands on: the test's choice, not its random
/// install id's.
#[derive(Clone, Copy)]
enum Place {
    /// In the ramp at 34 %, out of a freeze signed 20 hours ago at 6 %: serves 1.3.0.
    InRamp,
    /// Out of the ramp: serves 1.2.0.
    OutOfRamp,
}

impl Place {
    fn buckets(self) -> Range<u8> {
        match self {
            Place::InRamp => 10..30,
            Place::OutOfRamp => 60..90,
        }
    }

    fn serves(self, fx: &Fixture) -> &Pack {
        match self {
            Place::InRamp => &fx.new,
            Place::OutOfRamp => &fx.old,
        }
    }

    /// A rollout salt that puts `install_id` here.
    fn salt(self, install_id: &str) -> String {
        salt_in(install_id, self.buckets())
    }
}

/// A rollout salt that puts `install_id` in one of `buckets`.
fn salt_in(install_id: &str, buckets: Range<u8>) -> String {
    (0u32..)
        .map(|n| format!("builtin@1.3.0#{n}"))
        .find(|salt| buckets.contains(&rollout_bucket(salt, install_id)))
        .unwrap()
}

/// A client that installed from the offline-signed ramp (sequence 5) through the mirror.
struct Installed {
    fx: &'static Fixture,
    mirror: Mirror,
    _cache: tempfile::TempDir,
    client: Client,
    /// The offline-signed document the client installed from.
    base: SignedChannel,
    base_doc: ChannelDocument,
}

impl Installed {
    /// Installs from the ramp with a salt that puts the install at `place`.
    async fn new(place: Place) -> Self {
        let fx = Fixture::shared();
        let installed = Installed::with(RELEASE, |id| {
            fx.ramp_document(BASE_SEQUENCE, &place.salt(id))
        })
        .await;
        installed.assert_serving(place.serves(fx), "after installing the offline-signed ramp");
        installed
    }

    /// A client of `release` that installed the offline-signed document `base(install_id)`
    /// through the mirror.
    async fn with(release: &str, base: impl FnOnce(&str) -> ChannelDocument) -> Self {
        let fx = Fixture::shared();
        let mirror = Mirror::start(fx.blobs()).await;
        let cache = tempfile::tempdir().unwrap();
        let config_path = fx
            .publisher
            .client_config(&mirror.url, "deadline_secs = 10\n");
        let mut config =
            ClientConfig::load(&config_path, cache.path().into(), release.parse().unwrap())
                .unwrap();
        config.backoff = Duration::from_millis(10);
        // Refusals would queue failure reports; those are tested in fleet.rs.
        config.telemetry = false;
        let client = Client::new(config).unwrap();
        let base_doc = base(client.install_id());
        let signed = fx.offline_signed(&base_doc);
        mirror.serve(&signed);
        let outcome = client.refresh_now().await.unwrap();
        assert!(
            matches!(
                outcome,
                RefreshOutcome::Installed { .. } | RefreshOutcome::Builtin { .. }
            ),
            "{outcome:?}"
        );
        Installed {
            fx,
            mirror,
            _cache: cache,
            client,
            base: signed,
            base_doc,
        }
    }

    /// What the guard key signs to `action` the ramp at `at`, restricting the document the
    /// client installed from.
    fn guard_of_base(&self, action: GuardAction, at: OffsetDateTime) -> ChannelDocument {
        guard_document(&self.base, &self.base_doc, 0, action, at).unwrap()
    }

    /// Serves `signed` and refreshes: the refresh must fail with a document error, and the
    /// pack, the sequence and the status must say nothing changed but the error.
    async fn refused(&self, signed: &SignedChannel) -> FormatError {
        let serving = self.client.store().capture();
        // Taken, the document would change what this install serves: only the refusal
        // keeps the pack, so the checks below can fail.
        let doc: ChannelDocument = serde_json::from_slice(&signed.document).unwrap();
        let doc = match doc.entries.is_empty() {
            true => pack_format::guard::effective(&doc).unwrap_or(doc),
            false => doc,
        };
        let would = doc.select(
            &self.client.config().client_version,
            self.client.install_id(),
            OffsetDateTime::now_utc(),
        );
        assert!(
            !matches!(would, Some(EntryTarget::Pack(p)) if p.sha256 == serving.sha256()),
            "the document selects the pack that serves already"
        );
        self.refused_as_is(signed).await
    }

    /// [`Installed::refused`] for a document that, taken, would serve the same pack now (a
    /// hold above the ramp only admits installs later, as the ramp climbs).
    async fn refused_as_is(&self, signed: &SignedChannel) -> FormatError {
        let serving = self.client.store().capture();
        let sequence = self.client.status().sequence;
        self.mirror.serve(signed);
        let err = self
            .client
            .refresh_now()
            .await
            .expect_err("the guard document should be refused");
        let after = self.client.store().capture();
        assert_eq!(after.source(), Source::Remote, "{err}");
        assert_eq!(after.version(), serving.version(), "{err}");
        assert_eq!(after.sha256(), serving.sha256(), "{err}");
        let status = self.client.status();
        assert_eq!(status.sequence, sequence, "the sequence moved: {err}");
        assert_eq!(status.last_error, Some(err.to_string()));
        match err {
            ClientError::Document(e) => e,
            other => panic!("expected a document error, found {other:?}"),
        }
    }

    /// Serves `signed` and refreshes: it must be taken.
    async fn accepted(&self, signed: &SignedChannel) -> RefreshOutcome {
        self.mirror.serve(signed);
        let outcome = self.client.refresh_now().await.unwrap();
        assert_eq!(self.client.status().last_error, None);
        outcome
    }

    fn assert_serving(&self, pack: &Pack, context: &str) {
        let serving = self.client.store().capture();
        assert_eq!(serving.source(), Source::Remote, "{context}");
        assert_eq!(
            serving.version(),
            &pack.reference.version,
            "{context}: serving the wrong version"
        );
        assert_eq!(serving.sha256(), pack.reference.sha256, "{context}");
    }
}

/// Asserts `err` is a guard overreach whose reason contains `because`: the refusal came from
/// the check the test aims at, not from another one the document trips by accident.
fn assert_overreach(err: &FormatError, because: &str) {
    let FormatError::GuardOverreach { reason } = err else {
        panic!("expected GuardOverreach ({because}), found {err:?}");
    };
    assert!(
        reason.contains(because),
        "refused for another reason: {reason}"
    );
}

/// The stops of a stop order.
fn stops(doc: &mut ChannelDocument) -> &mut Vec<Stop> {
    &mut doc.restricts.as_mut().unwrap().stops
}

/// `order` with the entries of the document it restricts, as a reader follows it.
fn followed(order: &ChannelDocument) -> ChannelDocument {
    pack_format::guard::effective(order).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_above_where_the_ramp_stands_is_refused() {
    let at = Installed::new(Place::OutOfRamp).await;
    let mut doc = at.guard_of_base(GuardAction::Freeze, OffsetDateTime::now_utc());
    assert_eq!(
        stops(&mut doc)[0],
        Stop::Hold {
            entry: 0,
            percent: 34
        },
        "the ramp stands at 34 % now"
    );
    stops(&mut doc)[0] = Stop::Hold {
        entry: 0,
        percent: 95,
    };
    let err = at.refused_as_is(&at.fx.guard_signed(&doc)).await;
    assert_overreach(&err, "holds entry 0 at 95% where its rollout stood at 34%");
}

/// The guard key once signed whole channel documents, checked against the document they
/// restricted: a document with entries of its own is no stop order, whatever it changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_channel_document_signed_by_the_guard_is_refused() {
    let at = Installed::new(Place::OutOfRamp).await;
    let mut doc = at.guard_of_base(GuardAction::Freeze, OffsetDateTime::now_utc());
    doc.entries = at.base_doc.entries.clone();
    doc.entries[1].target = at.fx.unnamed.target();
    let err = at.refused(&at.fx.guard_signed(&doc)).await;
    assert_overreach(&err, "carries 2 entries of its own");
}

/// The rewrite that sends the entry the ramp falls back to onto the ramping pack (named by
/// the document, so it once passed for a rollback): refused as any rewrite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_document_that_sends_the_fallback_to_the_ramping_pack_is_refused() {
    let at = Installed::new(Place::OutOfRamp).await;
    let mut doc = at.guard_of_base(GuardAction::Freeze, OffsetDateTime::now_utc());
    doc.entries = at.base_doc.entries.clone();
    doc.entries[1].target = at.fx.new.target();
    let err = at.refused(&at.fx.guard_signed(&doc)).await;
    assert_overreach(&err, "carries 2 entries of its own");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_on_an_entry_without_a_rollout_is_refused() {
    let at = Installed::new(Place::OutOfRamp).await;
    let mut doc = at.guard_of_base(GuardAction::Freeze, OffsetDateTime::now_utc());
    stops(&mut doc).push(Stop::Hold {
        entry: 1,
        percent: 0,
    });
    let err = at.refused(&at.fx.guard_signed(&doc)).await;
    assert_overreach(&err, "it holds entry 1, which has no rollout to hold");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_document_that_extends_the_expiry_is_refused() {
    let at = Installed::new(Place::InRamp).await;
    // A rollback, which alone the client would follow to 1.2.0, living a year longer than
    // the offline-signed document allows.
    let mut doc = at.guard_of_base(GuardAction::Rollback, OffsetDateTime::now_utc());
    doc.expires_at += time::Duration::days(365);
    let err = at.refused(&at.fx.guard_signed(&doc)).await;
    assert_overreach(&err, "extends the expiry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_document_from_a_key_not_delegated_is_refused() {
    let at = Installed::new(Place::InRamp).await;
    let rogue = SigningKey::generate(None).unwrap().key;
    // A rollback the client would follow, from a key the channel does not name.
    let doc = at.guard_of_base(GuardAction::Rollback, OffsetDateTime::now_utc());
    let err = at.refused(&doc.sign(&rogue).unwrap()).await;
    let FormatError::GuardNotDelegated {
        key_id,
        sequence,
        delegated,
    } = &err
    else {
        panic!("expected GuardNotDelegated, found {err:?}");
    };
    assert_eq!(key_id, &rogue.key_id());
    assert_eq!(*sequence, BASE_SEQUENCE);
    assert_eq!(delegated, &at.fx.guard.key_id());
}

/// A hold the client follows holds: a second order restricting the same offline document,
/// which would be a fair stop of that document alone, is refused when it drops the hold or
/// holds higher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_document_that_undoes_a_followed_freeze_is_refused() {
    let at = Installed::new(Place::InRamp).await;
    // The guard froze the ramp 20 hours ago, at 6 %: this install falls out of it.
    let freeze = at.guard_of_base(
        GuardAction::Freeze,
        OffsetDateTime::now_utc() - time::Duration::hours(20),
    );
    assert_eq!(
        freeze.restricts.as_ref().unwrap().stops,
        [Stop::Hold {
            entry: 0,
            percent: 6
        }]
    );
    let outcome = at.accepted(&at.fx.guard_signed(&freeze)).await;
    assert!(
        matches!(outcome, RefreshOutcome::Installed { sequence: 6, .. }),
        "{outcome:?}"
    );
    at.assert_serving(&at.fx.old, "after the freeze at 6 %");
    assert_eq!(at.client.status().sequence, 6);

    // An order that reverts the other entry only: the hold on the ramp is gone.
    let mut dropped = guard_document(
        &at.base,
        &at.base_doc,
        1,
        GuardAction::Rollback,
        OffsetDateTime::now_utc(),
    )
    .unwrap();
    dropped.sequence = 7;
    let err = at.refused(&at.fx.guard_signed(&dropped)).await;
    assert_overreach(&err, "it undoes \"entry 0 held at 6%\"");

    // A freeze at today's 34 %: fair against the offline-signed document, wider than 6 %.
    let mut refrozen = at.guard_of_base(GuardAction::Freeze, OffsetDateTime::now_utc());
    refrozen.sequence = 7;
    let err = at.refused(&at.fx.guard_signed(&refrozen)).await;
    assert_overreach(&err, "it undoes \"entry 0 held at 6%\"");
    at.assert_serving(&at.fx.old, "after both refusals");
}

/// A stop order restricting an older offline-signed document (here one that sent every
/// install to 1.3.0 before the publisher pulled it back to a ramp) is refused, though it is a
/// fair stop of the document it restricts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_document_restricting_an_older_offline_document_is_refused() {
    let at = Installed::new(Place::OutOfRamp).await;
    let mut older_doc = at.base_doc.clone();
    older_doc.sequence = BASE_SEQUENCE - 1;
    older_doc.issued_at -= time::Duration::days(1);
    older_doc.entries[0].rollout = None;
    let older = at.fx.offline_signed(&older_doc);

    let doc = ChannelDocument {
        sequence: BASE_SEQUENCE + 1,
        issued_at: OffsetDateTime::now_utc(),
        entries: Vec::new(),
        guard: None,
        restricts: Some(Restricts {
            document: String::from_utf8(older.document.clone()).unwrap(),
            signature: older.signature.clone(),
            stops: vec![Stop::Revert { entry: 1 }],
        }),
        ..older_doc.clone()
    };
    let err = at.refused(&at.fx.guard_signed(&doc)).await;
    assert_overreach(
        &err,
        "it restricts sequence 4, older than sequence 5 the reader follows",
    );
}

/// The guard's own work is followed: a freeze now keeps this install on 1.3.0 with the ramp
/// held, a rollback then sends it to 1.2.0 (the entry under the ramp), and reverting that
/// entry too serves the built-in pack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legitimate_freeze_and_rollback_are_followed() {
    let at = Installed::new(Place::InRamp).await;
    let freeze = at.guard_of_base(GuardAction::Freeze, OffsetDateTime::now_utc());
    let outcome = at.accepted(&at.fx.guard_signed(&freeze)).await;
    assert!(
        matches!(outcome, RefreshOutcome::Unchanged { sequence: 6 }),
        "{outcome:?}"
    );
    at.assert_serving(&at.fx.new, "after the freeze at 34 %");
    assert_eq!(at.client.status().sequence, 6);

    let rollback = guard_document(
        &at.base,
        &followed(&freeze),
        0,
        GuardAction::Rollback,
        OffsetDateTime::now_utc(),
    )
    .unwrap();
    assert_eq!(
        rollback.restricts.as_ref().unwrap().stops,
        [Stop::Revert { entry: 0 }]
    );
    let outcome = at.accepted(&at.fx.guard_signed(&rollback)).await;
    assert!(
        matches!(outcome, RefreshOutcome::Installed { sequence: 7, .. }),
        "{outcome:?}"
    );
    at.assert_serving(&at.fx.old, "after the rollback");
    assert_eq!(at.client.status().sequence, 7);

    let to_builtin = guard_document(
        &at.base,
        &followed(&rollback),
        1,
        GuardAction::Rollback,
        OffsetDateTime::now_utc(),
    )
    .unwrap();
    let outcome = at.accepted(&at.fx.guard_signed(&to_builtin)).await;
    assert!(
        matches!(outcome, RefreshOutcome::Builtin { sequence: 8, .. }),
        "{outcome:?}"
    );
    assert_eq!(at.client.store().capture().source(), Source::Builtin);
    assert_eq!(at.client.status().sequence, 8);
}

/// A rollback the client follows holds, also when the pack it rolled away from is named by
/// another entry (here the one for releases 2.0.0 and later, already all on 1.3.0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_document_that_undoes_a_followed_rollback_is_refused() {
    let at = Installed::new(Place::InRamp).await;
    let mut base_doc = at.base_doc.clone();
    base_doc.sequence = BASE_SEQUENCE + 1;
    let older: semver::VersionReq = "<2.0.0".parse().unwrap();
    base_doc.entries[0].clients = older.clone();
    base_doc.entries[1].clients = older;
    base_doc.entries.push(ChannelEntry {
        clients: ">=2.0.0".parse().unwrap(),
        target: at.fx.new.target(),
        rollout: None,
    });
    let base = at.fx.offline_signed(&base_doc);
    at.accepted(&base).await;
    let now = OffsetDateTime::now_utc();
    let rollback = guard_document(&base, &base_doc, 0, GuardAction::Rollback, now).unwrap();
    at.accepted(&at.fx.guard_signed(&rollback)).await;
    at.assert_serving(&at.fx.old, "after the rollback");

    // A freeze at today's percentage: fair against the offline-signed document alone.
    let mut refrozen = guard_document(&base, &base_doc, 0, GuardAction::Freeze, now).unwrap();
    refrozen.sequence = rollback.sequence + 1;
    let err = at.refused(&at.fx.guard_signed(&refrozen)).await;
    assert_overreach(&err, "it undoes \"entry 0 reverted\"");
}

/// The guard key picks its own sequences: a freeze signed at the highest sequence a channel
/// may carry is followed, and the signing key's next document still gets through (it is newer
/// than what the freeze restricts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_document_at_the_last_sequence_does_not_lock_out_the_signing_key() {
    let at = Installed::new(Place::InRamp).await;
    let mut frozen = at.guard_of_base(GuardAction::Freeze, OffsetDateTime::now_utc());
    frozen.sequence = pack_format::channel::MAX_SEQUENCE;
    at.accepted(&at.fx.guard_signed(&frozen)).await;
    assert_eq!(
        at.client.status().sequence,
        pack_format::channel::MAX_SEQUENCE
    );
    let mut next = at.base_doc.clone();
    next.sequence = BASE_SEQUENCE + 1;
    next.entries[0].target = at.fx.old.target();
    next.entries[0].rollout = None;
    at.accepted(&at.fx.offline_signed(&next)).await;
    assert_eq!(at.client.status().sequence, BASE_SEQUENCE + 1);
    at.assert_serving(&at.fx.old, "after the signing key's next document");
    // And the old freeze, replayed, is refused: it restricts an older document.
    let err = at.refused(&at.fx.guard_signed(&frozen)).await;
    assert_overreach(&err, "older than sequence 6");
}

// The three cases that once moved installs to packs they were never sent. The fixture's packs
// stand in for the versions of the reports: 1.2.0 (`old`) for 1.0.0, 1.3.0 (`new`) for 2.0.0,
// 1.4.0 (`unnamed`) for 3.0.0.

/// packd with the fixture's keys and packs, its stable channel at `base`.
struct Server {
    packd: Packd,
    _data: tempfile::TempDir,
}

impl Server {
    fn start(base: &SignedChannel) -> Server {
        tokio::task::block_in_place(|| {
            let fx = Fixture::shared();
            let data = tempfile::tempdir().unwrap();
            let packd = Packd::start(data.path(), &fx.publisher.server_config());
            for pack in [&fx.old, &fx.new, &fx.unnamed] {
                let file = tempfile::NamedTempFile::new().unwrap();
                std::fs::write(file.path(), &pack.bytes).unwrap();
                packd.upload(&fx.publisher, file.path());
            }
            packd.publish(
                &fx.publisher,
                &(base.document.clone(), base.signature.clone()),
            );
            Server { packd, _data: data }
        })
    }

    /// `PUT /v1/channels/stable`: the status and the body.
    async fn put(&self, signed: &SignedChannel) -> (u16, String) {
        let response = reqwest::Client::new()
            .put(self.packd.url("/v1/channels/stable"))
            .bearer_auth(&Fixture::shared().publisher.token)
            .json(&serde_json::json!({
                "document": String::from_utf8(signed.document.clone()).unwrap(),
                "signature": signed.signature,
            }))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }

    /// packd refuses `signed` with 422, naming `because`.
    async fn refuses(&self, signed: &SignedChannel, because: &str) {
        let (status, body) = self.put(signed).await;
        assert_eq!(status, 422, "{body}");
        assert!(body.contains(because), "{because:?} not in {body}");
    }

    async fn stores(&self, signed: &SignedChannel) {
        let (status, body) = self.put(signed).await;
        assert!(status == 200 || status == 201, "{status} {body}");
    }
}

/// How many of 100 installs of `release` `doc` (a verified document) sends to `target`.
fn installs_on(doc: &ChannelDocument, release: &str, target: &EntryTarget) -> usize {
    let release = release.parse().unwrap();
    (0..100)
        .filter(|n| {
            doc.select(&release, &format!("install-{n}"), OffsetDateTime::now_utc()) == Some(target)
        })
        .count()
}

/// `signed` verified as clients verify it.
fn verified(signed: &SignedChannel) -> ChannelDocument {
    let mut trusted = pack_format::TrustedKeys::new();
    trusted.add_signing_key(&Fixture::shared().offline);
    pack_format::channel::verify(
        &signed.document,
        &signed.signature,
        &trusted,
        OffsetDateTime::now_utc(),
        &pack_format::Limits::DEFAULT,
    )
    .unwrap()
    .document
}

/// An offline-signed document with `entries`, naming the fixture's guard.
fn offline(entries: Vec<ChannelEntry>) -> ChannelDocument {
    let fx = Fixture::shared();
    // packd takes a channel's first document at sequence 1.
    let mut doc = fx.ramp_document(1, "unused");
    doc.entries = entries;
    doc
}

fn entry(clients: &str, target: EntryTarget, rollout: Option<(u8, &str)>) -> ChannelEntry {
    ChannelEntry {
        clients: clients.parse().unwrap(),
        target,
        rollout: rollout.map(|(percent, salt)| Rollout::fixed(percent, salt)),
    }
}

/// `[>=2.0.0 → 2.0.0, * → 1.0.0]`: a document the guard signed that added a 0 % rollout to
/// the first entry once moved every 2.x install to 1.0.0, which the publisher never sent to
/// 2.x. That rewrite is refused by packd and by clients; a revert of the first entry sends 2.x
/// to the built-in pack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seen_case_1_a_stop_never_sends_2x_installs_to_the_pack_for_1x() {
    let fx = Fixture::shared();
    let base_doc = offline(vec![
        entry(">=2.0.0", fx.new.target(), None),
        entry("*", fx.old.target(), None),
    ]);
    let at = Installed::with("2.1.0", |_| base_doc.clone()).await;
    at.assert_serving(&fx.new, "2.1.0 on the pack pinned for 2.x");
    let server = Server::start(&at.base);
    let now = OffsetDateTime::now_utc();

    // The rewrite: only a 0 % rollout added to the first entry.
    let mut rewrite = guard_document(&at.base, &base_doc, 0, GuardAction::Rollback, now).unwrap();
    rewrite.entries = base_doc.entries.clone();
    rewrite.entries[0].rollout = Some(Rollout::fixed(0, "stop"));
    let rewrite = fx.guard_signed(&rewrite);
    server
        .refuses(&rewrite, "carries 2 entries of its own")
        .await;
    let err = at.refused(&rewrite).await;
    assert_overreach(&err, "carries 2 entries of its own");
    at.assert_serving(&fx.new, "after the refused rewrite");

    // The same as a stop order: a hold needs a rollout, and a revert goes to builtin.
    let mut hold = guard_document(&at.base, &base_doc, 0, GuardAction::Rollback, now).unwrap();
    stops(&mut hold)[0] = Stop::Hold {
        entry: 0,
        percent: 0,
    };
    let hold = fx.guard_signed(&hold);
    server.refuses(&hold, "no rollout to hold").await;
    let revert = fx
        .guard_signed(&guard_document(&at.base, &base_doc, 0, GuardAction::Rollback, now).unwrap());
    server.stores(&revert).await;
    let after = verified(&revert);
    assert_eq!(installs_on(&after, "2.1.0", &fx.old.target()), 0);
    assert_eq!(installs_on(&after, "2.1.0", &EntryTarget::Builtin), 100);
    assert_eq!(installs_on(&after, "1.0.0", &fx.old.target()), 100);
    at.accepted(&revert).await;
    assert_eq!(at.client.store().capture().source(), Source::Builtin);
}

/// `[* → 3.0.0 @50 % salt A, * → 2.0.0 @50 % salt B, * → 1.0.0]`: holding the first entry at
/// 0 % once let its installs fall through into the second rollout (2.0.0 on 28 → 54 of 100).
/// Now they go to the entry under the rollouts, and 2.0.0 keeps exactly its installs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seen_case_2_holding_one_rollout_never_widens_another() {
    let fx = Fixture::shared();
    let at = Installed::with(RELEASE, |id| {
        offline(vec![
            entry(
                "*",
                fx.unnamed.target(),
                Some((50, &Place::InRamp.salt(id))),
            ),
            entry("*", fx.new.target(), Some((50, "salt-b"))),
            entry("*", fx.old.target(), None),
        ])
    })
    .await;
    at.assert_serving(&fx.unnamed, "in the first rollout");
    let server = Server::start(&at.base);
    let now = OffsetDateTime::now_utc();
    let before = verified(&at.base);

    let mut rewrite = guard_document(&at.base, &at.base_doc, 0, GuardAction::Freeze, now).unwrap();
    rewrite.entries = at.base_doc.entries.clone();
    rewrite.entries[0].rollout = Some(Rollout::fixed(
        0,
        Place::InRamp.salt(at.client.install_id()),
    ));
    let rewrite = fx.guard_signed(&rewrite);
    server
        .refuses(&rewrite, "carries 3 entries of its own")
        .await;
    assert_overreach(&at.refused(&rewrite).await, "carries 3 entries of its own");

    let mut hold = guard_document(&at.base, &at.base_doc, 0, GuardAction::Freeze, now).unwrap();
    stops(&mut hold)[0] = Stop::Hold {
        entry: 0,
        percent: 0,
    };
    let hold = fx.guard_signed(&hold);
    server.stores(&hold).await;
    let after = verified(&hold);
    let on_new = |doc: &ChannelDocument| {
        let release = RELEASE.parse().unwrap();
        (0..100)
            .map(|n| format!("install-{n}"))
            .filter(|id| doc.select(&release, id, now) == Some(&fx.new.target()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        on_new(&after),
        on_new(&before),
        "2.0.0 keeps exactly its installs"
    );
    assert_eq!(installs_on(&after, RELEASE, &fx.unnamed.target()), 0);
    at.accepted(&hold).await;
    at.assert_serving(&fx.old, "held out of the first rollout: the entry under it");
}

/// `[* → 3.0.0 @10 %, >=2.0.0 → 2.0.0, * → 1.0.0]`, what `packer release` writes when a range
/// is pinned while a `*` ramp runs: rolling the first entry back (as `packer guard rollback
/// --entry 0` and packd's guard sign it) once moved the 2.1.0 installs that were never in the
/// rollout from 2.0.0 to 1.0.0. Now only the installs in the rollout move, each to what it
/// had before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seen_case_3_a_rollback_moves_only_the_rollout_back_where_it_came_from() {
    let fx = Fixture::shared();
    let at = Installed::with("2.1.0", |id| {
        offline(vec![
            entry("*", fx.unnamed.target(), Some((10, &salt_in(id, 0..10)))),
            entry(">=2.0.0", fx.new.target(), None),
            entry("*", fx.old.target(), None),
        ])
    })
    .await;
    at.assert_serving(&fx.unnamed, "2.1.0 in the rollout");
    let server = Server::start(&at.base);
    let before = verified(&at.base);
    let in_rollout = installs_on(&before, "2.1.0", &fx.unnamed.target());
    assert_eq!(
        installs_on(&before, "2.1.0", &fx.new.target()),
        100 - in_rollout
    );

    let rollback = fx.guard_signed(
        &guard_document(
            &at.base,
            &at.base_doc,
            0,
            GuardAction::Rollback,
            OffsetDateTime::now_utc(),
        )
        .unwrap(),
    );
    server.stores(&rollback).await;
    let after = verified(&rollback);
    assert_eq!(installs_on(&after, "2.1.0", &fx.new.target()), 100);
    assert_eq!(installs_on(&after, "2.1.0", &fx.old.target()), 0);
    assert_eq!(installs_on(&after, "1.0.0", &fx.old.target()), 100);
    at.accepted(&rollback).await;
    at.assert_serving(&fx.new, "rolled back to what 2.x had before the rollout");
}
