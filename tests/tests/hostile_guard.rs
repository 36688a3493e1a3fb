//! A hostile mirror serving guard documents, one property per test. The channel names a guard
//! key that may only freeze a ramp or roll an entry back; a mirror holding that key (or one
//! pretending to) serves documents that do more. Each is refused with the guard error that
//! names the overreach, the pack that served before still serves, and the client's channel
//! sequence does not move. packd refuses to store such documents, so only a mirror can
//! serve them.
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
    Restricts, Rollout, SigningKey, Watch, WatchAction, rollout_bucket,
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
        (0u32..)
            .map(|n| format!("builtin@1.3.0#{n}"))
            .find(|salt| self.buckets().contains(&rollout_bucket(salt, install_id)))
            .unwrap()
    }
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
        let mirror = Mirror::start(fx.blobs()).await;
        let cache = tempfile::tempdir().unwrap();
        let config_path = fx
            .publisher
            .client_config(&mirror.url, "deadline_secs = 10\n");
        let mut config =
            ClientConfig::load(&config_path, cache.path().into(), RELEASE.parse().unwrap())
                .unwrap();
        config.backoff = Duration::from_millis(10);
        // Refusals would queue failure reports; those are tested in fleet.rs.
        config.telemetry = false;
        let client = Client::new(config).unwrap();
        let salt = place.salt(client.install_id());
        let base_doc = fx.ramp_document(BASE_SEQUENCE, &salt);
        let base = fx.offline_signed(&base_doc);
        mirror.serve(&base);
        let outcome = client.refresh_now().await.unwrap();
        assert!(
            matches!(outcome, RefreshOutcome::Installed { sequence: 5, .. }),
            "{outcome:?}"
        );
        let installed = Installed {
            fx,
            mirror,
            _cache: cache,
            client,
            base,
            base_doc,
        };
        installed.assert_serving(place.serves(fx), "after installing the offline-signed ramp");
        installed
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
        let sequence = self.client.status().sequence;
        // Taken, the document would change what this install serves: only the refusal
        // keeps the pack, so the checks below can fail.
        let doc: ChannelDocument = serde_json::from_slice(&signed.document).unwrap();
        let would = doc
            .select(
                &RELEASE.parse().unwrap(),
                self.client.install_id(),
                OffsetDateTime::now_utc(),
            )
            .map(|entry| &entry.target);
        assert!(
            !matches!(would, Some(EntryTarget::Pack(p)) if p.sha256 == serving.sha256()),
            "the document selects the pack that serves already"
        );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_document_that_widens_the_ramp_is_refused() {
    let at = Installed::new(Place::OutOfRamp).await;
    let mut doc = at.guard_of_base(GuardAction::Freeze, OffsetDateTime::now_utc());
    let frozen = doc.entries[0].rollout.as_mut().unwrap();
    assert_eq!(frozen.percent, 34, "the ramp stands at 34 % now");
    frozen.percent = 95;
    let err = at.refused(&at.fx.guard_signed(&doc)).await;
    assert_overreach(&err, "widens its rollout to 95% where it stood at 34%");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_document_that_names_a_new_version_is_refused() {
    let at = Installed::new(Place::OutOfRamp).await;
    let mut doc = at.guard_of_base(GuardAction::Freeze, OffsetDateTime::now_utc());
    doc.entries[1].target = at.fx.unnamed.target();
    let err = at.refused(&at.fx.guard_signed(&doc)).await;
    assert_overreach(&err, "entry 1 names pack 1.4.0 (");
    assert_overreach(&err, "where a rollback goes to what the entry replaces");
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
    let at = Installed::new(Place::OutOfRamp).await;
    let rogue = SigningKey::generate(None).unwrap().key;
    // Its changes would be refused anyway; the key is refused before they are looked at.
    let mut doc = at.guard_of_base(GuardAction::Freeze, OffsetDateTime::now_utc());
    doc.entries[0].rollout = None;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_document_that_drops_the_rollout_is_refused() {
    let at = Installed::new(Place::OutOfRamp).await;
    let mut doc = at.guard_of_base(GuardAction::Freeze, OffsetDateTime::now_utc());
    doc.entries[0].rollout = None;
    let err = at.refused(&at.fx.guard_signed(&doc)).await;
    assert_overreach(&err, "entry 0 drops its rollout, widening it to 100%");
}

/// A freeze the client follows holds: a second guard document restricting the same offline
/// document, which would be a fair restriction of that document alone, is refused when it
/// puts the ramp back or freezes higher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_document_that_undoes_a_followed_freeze_is_refused() {
    let at = Installed::new(Place::InRamp).await;
    // The guard froze the ramp 20 hours ago, at 6 %: this install falls out of it.
    let freeze = at.guard_of_base(
        GuardAction::Freeze,
        OffsetDateTime::now_utc() - time::Duration::hours(20),
    );
    assert_eq!(freeze.entries[0].rollout, Some(frozen_at(&at.base_doc, 6)));
    let outcome = at.accepted(&at.fx.guard_signed(&freeze)).await;
    assert!(
        matches!(outcome, RefreshOutcome::Installed { sequence: 6, .. }),
        "{outcome:?}"
    );
    at.assert_serving(&at.fx.old, "after the freeze at 6 %");
    assert_eq!(at.client.status().sequence, 6);

    // The ramp put back: against the offline-signed document alone, no change at all.
    let mut resumed = freeze.clone();
    resumed.sequence = 7;
    resumed.issued_at = OffsetDateTime::now_utc();
    resumed.entries[0].rollout = at.base_doc.entries[0].rollout.clone();
    let err = at.refused(&at.fx.guard_signed(&resumed)).await;
    assert_overreach(&err, "against the guard document held");
    assert_overreach(&err, "sets a new ramp");

    // A freeze at today's 34 %: fair against the offline-signed document, wider than 6 %.
    let mut refrozen = at.guard_of_base(GuardAction::Freeze, OffsetDateTime::now_utc());
    refrozen.sequence = 7;
    let err = at.refused(&at.fx.guard_signed(&refrozen)).await;
    assert_overreach(&err, "against the guard document held");
    assert_overreach(&err, "widens its rollout to 34% where it stood at 6%");
    at.assert_serving(&at.fx.old, "after both refusals");
}

/// A guard document restricting an older offline-signed document (here one that sent every
/// install to 1.3.0 before the publisher pulled it back to a ramp) is refused, though it
/// changes nothing in the document it restricts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_document_restricting_an_older_offline_document_is_refused() {
    let at = Installed::new(Place::OutOfRamp).await;
    let mut older_doc = at.base_doc.clone();
    older_doc.sequence = BASE_SEQUENCE - 1;
    older_doc.issued_at -= time::Duration::days(1);
    older_doc.entries[0].rollout = None;
    let older = at.fx.offline_signed(&older_doc);

    let mut doc = older_doc.clone();
    doc.sequence = BASE_SEQUENCE + 1;
    doc.issued_at = OffsetDateTime::now_utc();
    doc.restricts = Some(Restricts {
        document: String::from_utf8(older.document.clone()).unwrap(),
        signature: older.signature.clone(),
    });
    let err = at.refused(&at.fx.guard_signed(&doc)).await;
    assert_overreach(
        &err,
        "it restricts sequence 4, older than sequence 5 the reader follows",
    );
}

/// The guard's own work is followed: a freeze now keeps this install on 1.3.0 with the ramp
/// held, a rollback then sends it to 1.2.0, and a rollback of everything to the built-in
/// pack serves the built-in pack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legitimate_freeze_and_rollback_are_followed() {
    let at = Installed::new(Place::InRamp).await;
    let freeze = at.guard_of_base(GuardAction::Freeze, OffsetDateTime::now_utc());
    assert_eq!(freeze.entries[0].rollout, Some(frozen_at(&at.base_doc, 34)));
    let outcome = at.accepted(&at.fx.guard_signed(&freeze)).await;
    assert!(
        matches!(outcome, RefreshOutcome::Unchanged { sequence: 6 }),
        "{outcome:?}"
    );
    at.assert_serving(&at.fx.new, "after the freeze at 34 %");
    assert_eq!(at.client.status().sequence, 6);

    let rollback = guard_document(
        &at.base,
        &freeze,
        0,
        GuardAction::Rollback,
        OffsetDateTime::now_utc(),
    )
    .unwrap();
    assert_eq!(rollback.entries[0].target, at.fx.old.target());
    let outcome = at.accepted(&at.fx.guard_signed(&rollback)).await;
    assert!(
        matches!(outcome, RefreshOutcome::Installed { sequence: 7, .. }),
        "{outcome:?}"
    );
    at.assert_serving(&at.fx.old, "after the rollback");
    assert_eq!(at.client.status().sequence, 7);

    let mut to_builtin = rollback.clone();
    to_builtin.sequence = 8;
    for entry in &mut to_builtin.entries {
        entry.target = EntryTarget::Builtin;
    }
    let outcome = at.accepted(&at.fx.guard_signed(&to_builtin)).await;
    assert!(
        matches!(outcome, RefreshOutcome::Builtin { sequence: 8, .. }),
        "{outcome:?}"
    );
    assert_eq!(at.client.store().capture().source(), Source::Builtin);
    assert_eq!(at.client.status().sequence, 8);
}

/// The rollout of `doc`'s ramp frozen at `percent`: same salt and watch, no schedule.
fn frozen_at(doc: &ChannelDocument, percent: u8) -> Rollout {
    let ramped = doc.entries[0].rollout.clone().unwrap();
    Rollout {
        percent,
        ramp: None,
        ..ramped
    }
}
/// A guard document that sends the entry the ramp falls back to onto the ramping pack (named
/// by the document, so it passes for a rollback): every install out of the ramp would get
/// 1.3.0, the ramp widened to 100 % with its rollout untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_document_that_sends_the_fallback_to_the_ramping_pack_is_refused() {
    let at = Installed::new(Place::OutOfRamp).await;
    let mut doc = at.guard_of_base(GuardAction::Freeze, OffsetDateTime::now_utc());
    doc.entries[0].rollout = at.base_doc.entries[0].rollout.clone();
    doc.entries[1].target = at.fx.new.target();
    let err = at.refused(&at.fx.guard_signed(&doc)).await;
    assert!(matches!(err, FormatError::GuardOverreach { .. }), "{err:?}");
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
    assert_overreach(&err, "against the guard document held");
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
