//! A refresh with packd in the process: the client's transport is a script, so a whole
//! refresh (document, signature, blob, install) runs without a network, and its retries run
//! on a paused clock, every wait exact to the millisecond without any wall time passing.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use pack_client::http::{
    HeaderMap, HeaderName, Request, Response, StatusCode, Transport, TransportError,
};
use pack_client::{Client, ClientConfig, ClientError, RefreshOutcome, Source};
use pack_format::{
    ChannelDocument, ChannelEntry, ContentKey, EntryTarget, Limits, PackRef, Payload, PayloadFile,
    SealInput, SigningKey,
};
use pack_protocol::{headers, paths};
use tokio::time::Instant;

const SERVER: &str = "http://packd";

/// What the scripted packd answers to one request.
type Script = Box<dyn FnMut(&Request) -> Result<Response, TransportError> + Send>;

/// packd as a script: answers each request with what the script says, at once, and keeps
/// every request with the moment it came.
struct Packd {
    script: Mutex<Script>,
    seen: Mutex<Vec<(Instant, Request)>>,
}

impl Packd {
    fn new(script: Script) -> Arc<Packd> {
        Arc::new(Packd {
            script: Mutex::new(script),
            seen: Mutex::default(),
        })
    }

    fn answer_with(&self, script: Script) {
        *self.script.lock().unwrap() = script;
        self.seen.lock().unwrap().clear();
    }

    /// The paths asked for, in order.
    fn paths(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(_, r)| r.url.strip_prefix(SERVER).unwrap().to_string())
            .collect()
    }

    /// When the first request since the last `answer_with` arrived.
    fn first_seen(&self) -> Instant {
        self.seen.lock().unwrap()[0].0
    }

    /// The time between one request and the next.
    fn gaps(&self) -> Vec<Duration> {
        let seen = self.seen.lock().unwrap();
        seen.windows(2).map(|w| w[1].0 - w[0].0).collect()
    }
}

impl Transport for Packd {
    fn send(&self, request: Request) -> BoxFuture<'_, Result<Response, TransportError>> {
        let answer = (self.script.lock().unwrap())(&request);
        self.seen.lock().unwrap().push((Instant::now(), request));
        Box::pin(std::future::ready(answer))
    }
}

/// A published release: the sealed pack, its signed channel document and the keys.
struct Release {
    signer: SigningKey,
    key: ContentKey,
    sealed: Vec<u8>,
    sha256: String,
    document: Vec<u8>,
    signature: String,
}

/// Pack `builtin` `version` (the built-in templates) on channel `stable` at sequence 1.
fn release(version: &str) -> Release {
    release_as(version, pack_format::FORMAT_VERSION, &[])
}

/// [`release`] sealed in pack `format`, with `extra` files beside the built-in templates.
fn release_as(version: &str, format: u32, extra: &[(&str, Vec<u8>)]) -> Release {
    let signer = SigningKey::generate(None).unwrap().key;
    let key = ContentKey::generate();
    let files: Vec<PayloadFile> = pack_client::builtin::BUILTIN_FILES
        .iter()
        .map(|(path, bytes)| PayloadFile {
            path: path.to_string(),
            bytes: bytes.to_vec(),
        })
        .chain(extra.iter().map(|(path, bytes)| PayloadFile {
            path: path.to_string(),
            bytes: bytes.clone(),
        }))
        .collect();
    let payload = Payload::new(files, &Limits::DEFAULT).unwrap();
    let version: semver::Version = version.parse().unwrap();
    let sealed = pack_format::seal(
        &SealInput {
            format,
            name: "builtin",
            version: &version,
            schema: 1,
            payload: &payload,
            mtime: 0,
            zstd_level: 3,
        },
        &[&key],
    )
    .unwrap();
    let sha256 = pack_format::sha256_hex(&sealed);
    let now = time::OffsetDateTime::now_utc();
    let signed = ChannelDocument {
        format: 1,
        channel: "stable".into(),
        pack: "builtin".into(),
        sequence: 1,
        issued_at: now - time::Duration::hours(1),
        expires_at: now + time::Duration::days(1),
        entries: vec![ChannelEntry {
            clients: "*".parse().unwrap(),
            target: EntryTarget::Pack(PackRef {
                version,
                sha256: sha256.clone(),
                size: sealed.len() as u64,
                schema: 1,
            }),
            rollout: None,
        }],
        guard: None,
        restricts: None,
    }
    .sign(&signer)
    .unwrap();
    Release {
        signer,
        key,
        sealed,
        sha256,
        document: signed.document,
        signature: signed.signature,
    }
}

fn response(status: u16, headers: &[(&'static str, &str)], body: &[u8]) -> Response {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        map.insert(HeaderName::from_static(name), value.parse().unwrap());
    }
    Response::new(StatusCode::from_u16(status).unwrap(), map, body.to_vec())
}

/// packd serving `release`: the document (304 to its ETag), the signature of its sequence
/// and the blob; 404 for anything else.
fn serving(release: &Release) -> Script {
    let (document, signature, sealed) = (
        release.document.clone(),
        release.signature.clone(),
        release.sealed.clone(),
    );
    let channel = paths::channel("stable");
    let signature_path = paths::history_signature("stable", 1);
    let blob = paths::blob(&release.sha256);
    Box::new(move |request| {
        let path = request.url.strip_prefix(SERVER).unwrap();
        Ok(if path == channel {
            if request.header_value(&reqwest::header::IF_NONE_MATCH) == Some("\"1\"") {
                response(304, &[("etag", "\"1\"")], b"")
            } else {
                response(
                    200,
                    &[("etag", "\"1\""), (headers::SEQUENCE, "1")],
                    &document,
                )
            }
        } else if path == signature_path {
            response(200, &[], signature.as_bytes())
        } else if path == blob {
            response(200, &[], &sealed)
        } else {
            response(404, &[], b"not found")
        })
    })
}

fn client(dir: &std::path::Path, release: &Release, packd: &Arc<Packd>) -> Client {
    let mut config = ClientConfig::new(dir, semver::Version::new(1, 4, 2));
    config.server = Some(SERVER.to_string());
    config.trusted_keys.add_signing_key(&release.signer);
    config.content_keys.add(release.key.clone());
    // No failure reports: the script sees only what the refresh asks.
    config.telemetry = false;
    Client::with_transport(config, pack_client::builtin::snapshot(), packd.clone()).unwrap()
}

#[tokio::test]
async fn a_whole_refresh_runs_through_the_transport_and_installs_what_the_channel_selects() {
    let dir = tempfile::tempdir().unwrap();
    let release = release("2.0.0");
    let packd = Packd::new(serving(&release));
    let client = client(dir.path(), &release, &packd);
    assert_eq!(client.store().capture().source(), Source::Builtin);

    let outcome = client.refresh_now().await.unwrap();

    assert_eq!(
        outcome,
        RefreshOutcome::Installed {
            name: "builtin".into(),
            version: "2.0.0".into(),
            sha256: release.sha256.clone(),
            sequence: 1,
        }
    );
    // Document, then the signature of the sequence it carried, then the blob.
    assert_eq!(
        packd.paths(),
        [
            paths::channel("stable"),
            paths::history_signature("stable", 1),
            paths::blob(&release.sha256),
        ]
    );
    let served = client.store().capture();
    assert_eq!(served.source(), Source::Remote);
    assert_eq!(served.sha256(), release.sha256);
    assert_eq!(served.version().to_string(), "2.0.0");
    // What serves is the pack's content: here the built-in templates, byte for byte.
    for (path, bytes) in pack_client::builtin::BUILTIN_FILES {
        assert_eq!(served.get(path), Some(*bytes), "{path}");
    }
    // Every request said which release asks and what it served then.
    let first = packd.seen.lock().unwrap()[0].1.clone();
    assert_eq!(
        first.header_value(&HeaderName::from_static(headers::CLIENT_VERSION)),
        Some("1.4.2")
    );
    assert_eq!(
        first.header_value(&HeaderName::from_static(headers::INSTALLED_PACK)),
        Some(headers::INSTALLED_BUILTIN)
    );
    assert_eq!(first.header_value(&reqwest::header::IF_NONE_MATCH), None);

    // The next refresh asks with the ETag it holds and keeps serving on a 304.
    packd.answer_with(serving(&release));
    assert_eq!(
        client.refresh_now().await.unwrap(),
        RefreshOutcome::NotModified
    );
    let seen = packd.seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].1.header_value(&reqwest::header::IF_NONE_MATCH),
        Some("\"1\"")
    );
    assert_eq!(
        seen[0]
            .1
            .header_value(&HeaderName::from_static(headers::INSTALLED_PACK)),
        Some(release.sha256.as_str())
    );
    assert_eq!(client.store().capture().sha256(), release.sha256);
}

/// 503 to everything.
fn unavailable() -> Script {
    Box::new(|_| Ok(response(503, &[], b"busy")))
}

#[tokio::test(start_paused = true)]
async fn a_transient_failure_is_retried_on_the_backoff_then_the_previous_pack_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let release = release("2.0.0");
    let packd = Packd::new(serving(&release));
    let client = client(dir.path(), &release, &packd);
    client.refresh_now().await.unwrap();

    packd.answer_with(unavailable());
    let started = Instant::now();
    let error = client.refresh_now().await.unwrap_err();

    // The default config: 3 attempts, the first wait 250 ms, doubling, each jittered up to
    // twice its base (`pack_protocol::retry::Backoff`). Tokio's timer counts in whole
    // milliseconds: a wait may end up to one later.
    let channel = paths::channel("stable");
    assert_eq!(packd.paths(), [channel.clone(), channel.clone(), channel]);
    let gaps = packd.gaps();
    let ms = Duration::from_millis;
    assert!(gaps[0] >= ms(250) && gaps[0] <= ms(501), "{gaps:?}");
    assert!(gaps[1] >= ms(500) && gaps[1] <= ms(1001), "{gaps:?}");
    // No wait after the last attempt. The refresh lock may cost a pause before the first:
    // a process another test spawns holds the cache's lock file for the moment between its
    // fork and its exec.
    assert_eq!(packd.first_seen().elapsed(), gaps[0] + gaps[1]);
    assert!(started.elapsed() >= gaps[0] + gaps[1]);
    assert_eq!(
        error.to_string(),
        format!("{SERVER}/v1/channels/stable answered 503: busy")
    );
    assert!(matches!(error, ClientError::Status { status: 503, .. }));

    // Nothing changed: the pack installed before still serves, and the status says why the
    // refresh failed.
    let served = client.store().capture();
    assert_eq!(served.source(), Source::Remote);
    assert_eq!(served.sha256(), release.sha256);
    assert_eq!(
        client.status().last_error.as_deref(),
        Some(error.to_string().as_str())
    );
}

#[tokio::test(start_paused = true)]
async fn a_failure_that_clears_before_the_attempts_run_out_is_not_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let release = release("2.0.0");
    let mut serve = serving(&release);
    let mut failures = 2;
    let packd = Packd::new(Box::new(move |request| {
        if failures > 0 {
            failures -= 1;
            return Err(TransportError {
                reason: "Connection refused (os error 111)".into(),
            });
        }
        serve(request)
    }));
    let client = client(dir.path(), &release, &packd);

    let outcome = client.refresh_now().await.unwrap();

    assert!(
        matches!(outcome, RefreshOutcome::Installed { .. }),
        "{outcome:?}"
    );
    let channel = paths::channel("stable");
    assert_eq!(
        packd.paths()[..3],
        [channel.clone(), channel.clone(), channel]
    );
    assert_eq!(client.store().capture().sha256(), release.sha256);
    assert_eq!(client.status().last_error, None);
}

#[tokio::test(start_paused = true)]
async fn retries_stop_at_the_refresh_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let packd = Packd::new(unavailable());
    let mut config = ClientConfig::new(dir.path(), semver::Version::new(1, 4, 2));
    config.server = Some(SERVER.to_string());
    config.telemetry = false;
    config.attempts = 1000;
    let deadline = config.deadline;
    let client =
        Client::with_transport(config, pack_client::builtin::snapshot(), packd.clone()).unwrap();

    let started = Instant::now();
    let error = client.refresh_now().await.unwrap_err();

    assert_eq!(
        error.to_string(),
        "refresh did not finish within its 60s deadline"
    );
    let elapsed = started.elapsed();
    assert!(
        elapsed >= deadline && elapsed <= deadline + Duration::from_millis(1),
        "{elapsed:?}"
    );
    // Waits doubling from 250 ms, each under the 30 s cap: 7 to 9 attempts in a minute.
    let attempts = packd.paths().len();
    assert!((7..=9).contains(&attempts), "{attempts} attempts");
    assert!(
        packd
            .gaps()
            .iter()
            .all(|gap| *gap < Duration::from_secs(30))
    );
    assert_eq!(client.store().capture().source(), Source::Builtin);
}
