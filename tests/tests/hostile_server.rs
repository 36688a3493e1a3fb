//! A hostile server or mirror, one property per test: each attack or fault ends with a
//! specific error variant, the previous snapshot still served, and the reason in the
//! client's status.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pack_client::cache::BadReason;
use pack_client::{Client, ClientConfig, ClientError, Clock, ManualClock, RefreshOutcome, Source};
use pack_format::{ChannelDocument, ChannelEntry, EntryTarget, FormatError, PackRef, SigningKey};
use promptpack_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How the server answers one request.
#[derive(Clone)]
enum Reply {
    Ok(Vec<u8>),
    /// 200 with extra headers.
    With(Vec<(&'static str, String)>, Vec<u8>),
    Status(u16),
    /// An error status with a body.
    StatusBody(u16, Vec<u8>),
    /// Declares no length, sends `n` bytes of the body, then closes.
    Cut(Vec<u8>, usize),
    /// One byte every `delay`.
    Drip(Vec<u8>, Duration),
}

/// What the route sees of a request.
struct Request {
    path: String,
    if_none_match: Option<String>,
}

type Route = Arc<dyn Fn(&Request) -> Reply + Send + Sync>;

struct Hostile {
    url: String,
    route: Arc<Mutex<Route>>,
}

impl Hostile {
    async fn start(route: Route) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let route = Arc::new(Mutex::new(route));
        let shared = route.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let route = shared.lock().unwrap().clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        let Ok(n) = socket.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        head.extend_from_slice(&buf[..n]);
                    }
                    let text = String::from_utf8_lossy(&head).into_owned();
                    let request = Request {
                        path: text.split_whitespace().nth(1).unwrap_or("/").to_string(),
                        if_none_match: text.lines().find_map(|line| {
                            let (name, value) = line.split_once(':')?;
                            name.eq_ignore_ascii_case("if-none-match")
                                .then(|| value.trim().to_string())
                        }),
                    };
                    let reply = route(&request);
                    let _ = send(&mut socket, reply).await;
                });
            }
        });
        Hostile { url, route }
    }

    fn set(&self, route: Route) {
        *self.route.lock().unwrap() = route;
    }
}

async fn send(socket: &mut tokio::net::TcpStream, reply: Reply) -> std::io::Result<()> {
    match reply {
        Reply::Ok(body) => send_with(socket, &[], &body).await,
        Reply::With(headers, body) => send_with(socket, &headers, &body).await,
        Reply::Status(code) => {
            let head =
                format!("HTTP/1.1 {code} Oops\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            socket.write_all(head.as_bytes()).await
        }
        Reply::StatusBody(code, body) => {
            let head = format!(
                "HTTP/1.1 {code} Oops\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            socket.write_all(head.as_bytes()).await?;
            socket.write_all(&body).await
        }
        Reply::Cut(body, n) => {
            socket
                .write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
                .await?;
            socket.write_all(&body[..n.min(body.len())]).await?;
            socket.shutdown().await
        }
        Reply::Drip(body, delay) => {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            socket.write_all(head.as_bytes()).await?;
            for byte in body {
                socket.write_all(&[byte]).await?;
                tokio::time::sleep(delay).await;
            }
            Ok(())
        }
    }
}

async fn send_with(
    socket: &mut tokio::net::TcpStream,
    headers: &[(&'static str, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    socket.write_all(head.as_bytes()).await?;
    socket.write_all(body).await
}

/// One signed channel document: bytes and signature.
type Signed = (Vec<u8>, String);

/// Serves one channel document (with its ETag and sequence, answering `If-None-Match`), its
/// signature (live and by sequence) and a set of blobs, as packd does.
fn honest(signed: &Signed, blobs: Vec<(String, Vec<u8>)>) -> Route {
    let (doc, sig) = signed.clone();
    let etag = format!("\"{}\"", pack_format::sha256_hex(&doc));
    let sequence = serde_json::from_slice::<serde_json::Value>(&doc).unwrap()["sequence"]
        .as_u64()
        .unwrap();
    Arc::new(move |request: &Request| {
        let path = request.path.as_str();
        if path == "/v1/channels/stable" {
            if request.if_none_match.as_deref() == Some(etag.as_str()) {
                return Reply::Status(304);
            }
            let headers = vec![
                ("ETag", etag.clone()),
                ("X-Promptpack-Sequence", sequence.to_string()),
            ];
            Reply::With(headers, doc.clone())
        } else if path == "/v1/channels/stable/signature"
            || path == format!("/v1/channels/stable/history/{sequence}/signature")
        {
            Reply::Ok(sig.clone().into_bytes())
        } else if let Some(sha) = path.strip_prefix("/v1/blobs/") {
            match blobs.iter().find(|(s, _)| s == sha) {
                Some((_, bytes)) => Reply::Ok(bytes.clone()),
                None => Reply::Status(404),
            }
        } else {
            Reply::Status(404)
        }
    })
}

/// `honest`, except that the blob of `sha` is answered with `reply`.
fn with_blob(signed: &Signed, sha: &str, reply: Reply) -> Route {
    let inner = honest(signed, vec![]);
    let blob_path = format!("/v1/blobs/{sha}");
    Arc::new(move |request: &Request| {
        if request.path == blob_path {
            reply.clone()
        } else {
            inner(request)
        }
    })
}

struct Fixture {
    publisher: Publisher,
    v1: Vec<u8>,
    v2: Vec<u8>,
    key: SigningKey,
}

impl Fixture {
    /// Keys and packs are made once per test binary: every test reads them, none changes them.
    fn shared() -> &'static Fixture {
        static FIXTURE: std::sync::OnceLock<Fixture> = std::sync::OnceLock::new();
        FIXTURE.get_or_init(Fixture::new)
    }

    fn new() -> Self {
        let publisher = Publisher::new();
        let v1_path = publisher.build("1.0.0", "GOOD-V1");
        let v2_path = publisher.build("2.0.0", "NEW-V2");
        let key = SigningKey::load(&publisher.keys().join("signing.key"), None).unwrap();
        Fixture {
            v1: std::fs::read(&v1_path).unwrap(),
            v2: std::fs::read(&v2_path).unwrap(),
            publisher,
            key,
        }
    }

    fn doc(
        &self,
        sequence: u64,
        pack: &[u8],
        version: &str,
        expires_in: time::Duration,
    ) -> ChannelDocument {
        let now = time::OffsetDateTime::now_utc();
        ChannelDocument {
            format: 1,
            channel: "stable".into(),
            pack: "builtin".into(),
            sequence,
            issued_at: now - time::Duration::days(60),
            expires_at: now + expires_in,
            entries: vec![ChannelEntry {
                clients: "*".parse().unwrap(),
                target: EntryTarget::Pack(PackRef {
                    version: version.parse().unwrap(),
                    sha256: pack_format::sha256_hex(pack),
                    size: pack.len() as u64,
                    schema: 1,
                }),
                rollout: None,
            }],
            guard: None,
            restricts: None,
        }
    }

    fn signed(&self, doc: &ChannelDocument) -> Signed {
        self.signed_by(doc, &self.key)
    }

    fn signed_by(&self, doc: &ChannelDocument, key: &SigningKey) -> Signed {
        let s = doc.sign(key).unwrap();
        (s.document, s.signature)
    }

    /// A document for the next release: sequence 6, v2, in date.
    fn next(&self) -> Signed {
        self.signed(&self.doc(6, &self.v2, "2.0.0", time::Duration::days(30)))
    }

    fn blobs(&self) -> Vec<(String, Vec<u8>)> {
        vec![
            (pack_format::sha256_hex(&self.v1), self.v1.clone()),
            (pack_format::sha256_hex(&self.v2), self.v2.clone()),
        ]
    }

    fn content_keys(&self) -> pack_format::ContentKeyRing {
        pack_format::ContentKeyRing::new([pack_format::ContentKey::load(
            &self.publisher.keys().join("content.key"),
        )
        .unwrap()])
    }

    /// v2's files sealed for `key` only.
    fn sealed_for(&self, key: &pack_format::ContentKey) -> Vec<u8> {
        reseal_for(&self.v2, &self.content_keys(), key)
    }
}

/// A client that installed v1 (sequence 5) from an honest hostile server.
struct Installed {
    fx: &'static Fixture,
    /// The document v1 was installed from (sequence 5).
    good: Signed,
    server: Hostile,
    cache: tempfile::TempDir,
    client: Client,
    /// The clock `client` decides by (expiry, check times).
    clock: ManualClock,
}

impl Installed {
    async fn new() -> Self {
        Self::with_expiry(time::Duration::days(30)).await
    }

    async fn with_expiry(expires_in: time::Duration) -> Self {
        let fx = Fixture::shared();
        let good = fx.signed(&fx.doc(5, &fx.v1, "1.0.0", expires_in));
        let server = Hostile::start(honest(&good, fx.blobs())).await;
        let cache = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(time::OffsetDateTime::now_utc());
        let client = client_at(fx, &server, cache.path(), "", clock.clock());
        client.refresh_now().await.unwrap();
        let installed = Installed {
            fx,
            good,
            server,
            cache,
            client,
            clock,
        };
        installed.assert_serving_v1("after the honest install");
        installed
    }

    /// Runs one refresh against `route` and returns its error, checking that v1 still
    /// serves and the status reports the error.
    async fn refused(&self, route: Route) -> ClientError {
        self.server.set(route);
        let err = self
            .client
            .refresh_now()
            .await
            .expect_err("the refresh should fail");
        self.assert_serving_v1(&err.to_string());
        assert_eq!(
            self.client.status().last_error.as_deref(),
            Some(err.to_string().as_str())
        );
        err
    }

    fn assert_serving_v1(&self, context: &str) {
        let serving = self.client.store().capture();
        assert_eq!(serving.version().to_string(), "1.0.0", "{context}");
        assert_eq!(serving.source(), Source::Remote, "{context}");
    }
}

fn client_for(fx: &Fixture, server: &Hostile, cache: &std::path::Path, extra: &str) -> Client {
    client_at(fx, server, cache, extra, Clock::system())
}

/// [`client_for`] deciding by `clock`.
fn client_at(
    fx: &Fixture,
    server: &Hostile,
    cache: &std::path::Path,
    extra: &str,
    clock: Clock,
) -> Client {
    let config_path = fx
        .publisher
        .client_config(&server.url, &format!("deadline_secs = 3\n{extra}"));
    let mut config =
        ClientConfig::load(&config_path, cache.to_path_buf(), "1.0.0".parse().unwrap()).unwrap();
    config.backoff = Duration::from_millis(10);
    // These scenarios count and inspect every refresh request; the failure reports a refused
    // refresh sends are tested in fleet.rs.
    config.telemetry = false;
    config.clock = clock;
    Client::new(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_pack_is_refused() {
    let at = Installed::new().await;
    let sha = pack_format::sha256_hex(&at.fx.v2);
    let cut = Reply::Cut(at.fx.v2.clone(), at.fx.v2.len() / 2);
    let err = at.refused(with_blob(&at.fx.next(), &sha, cut)).await;
    assert!(matches!(err, ClientError::Truncated { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pack_longer_than_signed_is_refused() {
    let at = Installed::new().await;
    let sha = pack_format::sha256_hex(&at.fx.v2);
    let mut longer = at.fx.v2.clone();
    longer.extend_from_slice(b"extra bytes the publisher never signed");
    let err = at
        .refused(with_blob(
            &at.fx.next(),
            &sha,
            Reply::Cut(longer, usize::MAX),
        ))
        .await;
    assert!(matches!(err, ClientError::BodyTooLong { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_drip_is_cut_off_at_the_deadline() {
    let at = Installed::new().await;
    let sha = pack_format::sha256_hex(&at.fx.v2);
    let drip = Reply::Drip(at.fx.v2.clone(), Duration::from_millis(50));
    let started = std::time::Instant::now();
    let err = at.refused(with_blob(&at.fx.next(), &sha, drip)).await;
    assert!(matches!(err, ClientError::Deadline { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pack_with_another_hash_is_refused_and_not_held_against_the_pack() {
    let at = Installed::new().await;
    let sha = pack_format::sha256_hex(&at.fx.v2);
    let mut flipped = at.fx.v2.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 1;
    let err = at
        .refused(with_blob(&at.fx.next(), &sha, Reply::Ok(flipped)))
        .await;
    assert!(matches!(err, ClientError::HashMismatch { .. }), "{err:?}");
    assert!(at.client.status().bad_packs.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_sequence_is_a_refused_rollback() {
    let at = Installed::new().await;
    let old = at
        .fx
        .signed(&at.fx.doc(4, &at.fx.v2, "2.0.0", time::Duration::days(30)));
    let err = at.refused(honest(&old, at.fx.blobs())).await;
    assert!(
        matches!(
            err,
            ClientError::Rollback {
                found: 4,
                installed: 5
            }
        ),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_document_is_refused() {
    let at = Installed::new().await;
    let expired = at
        .fx
        .signed(&at.fx.doc(7, &at.fx.v2, "2.0.0", -time::Duration::days(1)));
    let err = at.refused(honest(&expired, at.fx.blobs())).await;
    assert!(
        matches!(err, ClientError::Document(FormatError::Expired { .. })),
        "{err:?}"
    );
}

/// A mirror that answers 304 forever cannot keep an expired document fresh: the stored
/// document's expiry is checked on every refresh, and the last success stays where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_304_does_not_freeze_the_client_on_an_expired_document() {
    let at = Installed::with_expiry(time::Duration::seconds(3)).await;
    // While the document is in date, a 304 is a success.
    let outcome = at.client.refresh_now().await.unwrap();
    assert_eq!(outcome, RefreshOutcome::NotModified);
    let last_success = at.client.status().last_success;
    assert!(last_success.is_some());
    at.clock.advance(time::Duration::seconds(4));
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    let err = at
        .refused(Arc::new(move |request: &Request| {
            counted.fetch_add(1, Ordering::SeqCst);
            assert!(request.if_none_match.is_some(), "no conditional request");
            Reply::Status(304)
        }))
        .await;
    assert!(
        matches!(err, ClientError::Document(FormatError::Expired { .. })),
        "{err:?}"
    );
    assert_eq!(requests.load(Ordering::SeqCst), 1);
    let status = at.client.status();
    assert_eq!(
        status.last_success, last_success,
        "a freeze counted as success"
    );
    assert!(status.last_check > last_success);
}

/// Two validly signed documents with one sequence: the second is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_document_with_the_installed_sequence_is_equivocation() {
    let at = Installed::new().await;
    let fork = at
        .fx
        .signed(&at.fx.doc(5, &at.fx.v2, "2.0.0", time::Duration::days(30)));
    let err = at.refused(honest(&fork, at.fx.blobs())).await;
    assert!(
        matches!(err, ClientError::Equivocation { sequence: 5, .. }),
        "{err:?}"
    );
}

/// The identical document at the installed sequence still repairs a cache whose pack is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_identical_document_repairs_a_missing_pack() {
    let at = Installed::new().await;
    for entry in std::fs::read_dir(at.cache.path().join("packs")).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let restarted = client_for(at.fx, &at.server, at.cache.path(), "");
    assert_eq!(restarted.store().capture().source(), Source::Builtin);
    assert!(restarted.status().last_error.is_some());
    let outcome = restarted.refresh_now().await.unwrap();
    assert!(
        matches!(outcome, RefreshOutcome::Installed { sequence: 5, .. }),
        "{outcome:?}"
    );
    assert_eq!(restarted.store().capture().version().to_string(), "1.0.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pack_header_that_disagrees_with_its_entry_is_refused() {
    let at = Installed::new().await;
    let mismatched = at
        .fx
        .signed(&at.fx.doc(8, &at.fx.v2, "9.9.9", time::Duration::days(30)));
    let err = at.refused(honest(&mismatched, at.fx.blobs())).await;
    assert!(
        matches!(
            err,
            ClientError::HeaderMismatch {
                field: "version",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        at.client.status().bad_packs.is_empty(),
        "the document is at fault, not the pack"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_signature_from_an_untrusted_key_is_refused() {
    let at = Installed::new().await;
    let stranger = SigningKey::generate(None).unwrap().key;
    let untrusted = at.fx.signed_by(
        &at.fx.doc(9, &at.fx.v2, "2.0.0", time::Duration::days(30)),
        &stranger,
    );
    let err = at.refused(honest(&untrusted, at.fx.blobs())).await;
    // The refusal names the fix: the config's trusted_keys (tests/tests/first_hour.rs reads
    // the whole message through the binary).
    assert!(matches!(err, ClientError::UntrustedKey { .. }), "{err:?}");
    assert_eq!(err.kind(), "document_rejected");
}

/// The signature of one publish paired with the document of another does not verify.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signature_of_another_document_is_refused() {
    let at = Installed::new().await;
    let next = at.fx.next();
    let other = at
        .fx
        .signed(&at.fx.doc(6, &at.fx.v1, "1.0.0", time::Duration::days(30)));
    let mixed = (next.0.clone(), other.1.clone());
    let err = at.refused(honest(&mixed, at.fx.blobs())).await;
    assert!(
        matches!(err, ClientError::Document(FormatError::BadSignature { .. })),
        "{err:?}"
    );
}

/// A release between the document and the signature request does not fail the refresh: the
/// client asks for the signature of the sequence the document response named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_signature_is_fetched_for_the_sequence_the_document_response_named() {
    let at = Installed::new().await;
    let next = at.fx.next();
    let later = at
        .fx
        .signed(&at.fx.doc(7, &at.fx.v1, "1.0.0", time::Duration::days(30)));
    let inner = honest(&next, at.fx.blobs());
    // The live signature already belongs to sequence 7; history/6 keeps sequence 6's.
    at.server.set(Arc::new(move |request: &Request| {
        if request.path == "/v1/channels/stable/signature" {
            Reply::Ok(later.1.clone().into_bytes())
        } else {
            inner(request)
        }
    }));
    let outcome = at.client.refresh_now().await.unwrap();
    assert!(
        matches!(outcome, RefreshOutcome::Installed { sequence: 6, .. }),
        "{outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_is_a_malformed_document() {
    let at = Installed::new().await;
    let err = at
        .refused(Arc::new(|_: &Request| {
            Reply::Ok(b"\x00\x01garbage{{{".to_vec())
        }))
        .await;
    assert!(
        matches!(err, ClientError::Document(FormatError::Malformed { .. })),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_reported_with_their_status() {
    let at = Installed::new().await;
    let err = at.refused(Arc::new(|_: &Request| Reply::Status(500))).await;
    assert!(
        matches!(err, ClientError::Status { status: 500, .. }),
        "{err:?}"
    );
}

/// A client on `cache` that makes `attempts` attempts per request, pausing from `backoff`.
fn retrying_client(
    fx: &Fixture,
    server: &Hostile,
    cache: &std::path::Path,
    attempts: u32,
    backoff: Duration,
) -> Client {
    let config_path = fx
        .publisher
        .client_config(&server.url, "deadline_secs = 20\n");
    let mut config =
        ClientConfig::load(&config_path, cache.to_path_buf(), "1.0.0".parse().unwrap()).unwrap();
    config.attempts = attempts;
    config.backoff = backoff;
    Client::new(config).unwrap()
}

/// Answers 503 to the first `failures` requests for the channel document, then `inner`;
/// counts the channel requests.
fn failing_first(failures: usize, inner: Route, count: Arc<AtomicUsize>) -> Route {
    Arc::new(move |request: &Request| {
        if request.path == "/v1/channels/stable" && count.fetch_add(1, Ordering::SeqCst) < failures
        {
            return Reply::Status(503);
        }
        inner(request)
    })
}

/// A busy server is retried on the shared backoff schedule: the pauses double from the
/// configured first one (100 ms, then 200 ms, each drawn up to twice that), and the refresh
/// gets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_server_is_retried_after_pauses_that_double() {
    let at = Installed::new().await;
    let requests = Arc::new(AtomicUsize::new(0));
    at.server.set(failing_first(
        2,
        honest(&at.fx.next(), at.fx.blobs()),
        requests.clone(),
    ));
    let client = retrying_client(
        at.fx,
        &at.server,
        at.cache.path(),
        3,
        Duration::from_millis(100),
    );
    let started = std::time::Instant::now();
    client.refresh_now().await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(
        requests.load(Ordering::SeqCst),
        3,
        "two 503s, then the document"
    );
    assert_eq!(client.store().capture().version().to_string(), "2.0.0");
    assert!(
        elapsed >= Duration::from_millis(300),
        "pauses of at least 100 ms and 200 ms, found {elapsed:?} in all"
    );
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
}

/// The retry budget is kept: with three attempts a server that stays busy is asked three
/// times, and the refresh fails with its status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stays_busy_is_asked_only_as_often_as_configured() {
    let at = Installed::new().await;
    let requests = Arc::new(AtomicUsize::new(0));
    at.server.set(failing_first(
        usize::MAX,
        honest(&at.fx.next(), at.fx.blobs()),
        requests.clone(),
    ));
    let client = retrying_client(
        at.fx,
        &at.server,
        at.cache.path(),
        3,
        Duration::from_millis(10),
    );
    let err = client.refresh_now().await.unwrap_err();
    assert!(
        matches!(err, ClientError::Status { status: 503, .. }),
        "{err:?}"
    );
    assert_eq!(requests.load(Ordering::SeqCst), 3);
    assert_eq!(client.store().capture().version().to_string(), "1.0.0");
}

/// Serves `signed` and `pack` (under its hash), counting the pack's downloads.
fn counting(signed: &Signed, pack: &[u8], downloads: Arc<AtomicUsize>) -> Route {
    let sha = pack_format::sha256_hex(pack);
    let inner = honest(signed, vec![(sha.clone(), pack.to_vec())]);
    let blob_path = format!("/v1/blobs/{sha}");
    Arc::new(move |request: &Request| {
        if request.path == blob_path {
            downloads.fetch_add(1, Ordering::SeqCst);
        }
        inner(request)
    })
}

/// A pack that matches its signed hash but that no held content key opens is marked with
/// that reason and not downloaded again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pack_no_held_key_opens_is_marked_and_not_downloaded_again() {
    let at = Installed::new().await;
    let foreign = at.fx.sealed_for(&pack_format::ContentKey::generate());
    let foreign_sha = pack_format::sha256_hex(&foreign);
    let doc = at
        .fx
        .signed(&at.fx.doc(10, &foreign, "2.0.0", time::Duration::days(30)));
    let downloads = Arc::new(AtomicUsize::new(0));
    let route = counting(&doc, &foreign, downloads.clone());
    let err = at.refused(route.clone()).await;
    assert!(
        matches!(
            err,
            ClientError::Pack(FormatError::UnknownContentKey { .. })
        ),
        "{err:?}"
    );
    let bad = at.client.status().bad_packs;
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].sha256, foreign_sha);
    assert_eq!(bad[0].reason, BadReason::ContentKey);
    let err = at.refused(route).await;
    assert!(matches!(err, ClientError::KnownBad { .. }), "{err:?}");
    assert_eq!(downloads.load(Ordering::SeqCst), 1, "downloaded again");
}

/// Adding the content key that opens a marked pack lifts the mark: the next start tries the
/// pack again and installs it. The rollback high-water mark is kept throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_content_key_lifts_a_content_key_mark() {
    let at = Installed::new().await;
    let new_key = pack_format::ContentKey::generate();
    let foreign = at.fx.sealed_for(&new_key);
    let doc = at
        .fx
        .signed(&at.fx.doc(10, &foreign, "2.0.0", time::Duration::days(30)));
    let downloads = Arc::new(AtomicUsize::new(0));
    at.refused(counting(&doc, &foreign, downloads.clone()))
        .await;
    assert_eq!(at.client.status().bad_packs.len(), 1);

    // The same config with the new key added to its content keys.
    let key_file = at.cache.path().join("second.key");
    std::fs::write(&key_file, new_key.to_file_text().as_bytes()).unwrap();
    let base = std::fs::read_to_string(at.fx.publisher.client_config(&at.server.url, "")).unwrap();
    let with_key = base.replace(
        "content_keys = [",
        &format!("content_keys = [{:?}, ", key_file.display().to_string()),
    );
    assert_ne!(with_key, base);
    let config_path = at.cache.path().join("with-second-key.toml");
    std::fs::write(&config_path, format!("{with_key}deadline_secs = 3\n")).unwrap();
    let config = ClientConfig::load(
        &config_path,
        at.cache.path().to_path_buf(),
        "1.0.0".parse().unwrap(),
    )
    .unwrap();
    drop(at.client);
    let client = Client::new(config).unwrap();
    assert!(client.status().bad_packs.is_empty(), "mark not lifted");
    assert_eq!(client.status().sequence, 5, "high-water mark lost");
    let outcome = client.refresh_now().await.unwrap();
    assert!(
        matches!(outcome, RefreshOutcome::Installed { sequence: 10, .. }),
        "{outcome:?}"
    );
    assert_eq!(downloads.load(Ordering::SeqCst), 2);
}

/// A pack broken in itself stays marked when the keys change; `forget_bad` clears it
/// without touching the rest of the state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_bad_clears_marks_and_keeps_the_high_water_mark() {
    let at = Installed::new().await;
    let foreign = at.fx.sealed_for(&pack_format::ContentKey::generate());
    let foreign_sha = pack_format::sha256_hex(&foreign);
    let doc = at
        .fx
        .signed(&at.fx.doc(10, &foreign, "2.0.0", time::Duration::days(30)));
    let downloads = Arc::new(AtomicUsize::new(0));
    let route = counting(&doc, &foreign, downloads.clone());
    at.refused(route.clone()).await;
    assert_eq!(
        at.client.forget_bad(&[]).await.unwrap(),
        vec![foreign_sha.clone()]
    );
    assert!(at.client.status().bad_packs.is_empty());
    assert_eq!(at.client.status().sequence, 5);
    // Tried again (and marked again: the key is still missing).
    let err = at.refused(route).await;
    assert!(
        matches!(
            err,
            ClientError::Pack(FormatError::UnknownContentKey { .. })
        ),
        "{err:?}"
    );
    assert_eq!(downloads.load(Ordering::SeqCst), 2);
}

/// A validly signed document whose sequence is past 2^53 − 1 (where JSON readers stop
/// agreeing, and after which a channel could take no further release) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_past_two_to_the_53_is_refused() {
    let at = Installed::new().await;
    let over = at.fx.doc(
        pack_format::channel::MAX_SEQUENCE + 1,
        &at.fx.v2,
        "2.0.0",
        time::Duration::days(30),
    );
    // Our signer refuses such a document; any other minisign signer does not.
    let minisign::KeyPair { pk, sk } = minisign::KeyPair::generate_unencrypted_keypair().unwrap();
    let document = over.to_bytes();
    let signature = minisign::sign(
        Some(&pk),
        &sk,
        std::io::Cursor::new(&document),
        Some(&over.trusted_comment()),
        None,
    )
    .unwrap()
    .into_string();
    let public = at.cache.path().join("other-signer.pub");
    std::fs::write(&public, pk.to_box().unwrap().into_string()).unwrap();
    let base = std::fs::read_to_string(at.fx.publisher.client_config(&at.server.url, "")).unwrap();
    let with_signer = base.replace(
        "trusted_keys = [",
        &format!("trusted_keys = [{:?}, ", public.display().to_string()),
    );
    assert_ne!(with_signer, base);
    let config_path = at.cache.path().join("with-other-signer.toml");
    std::fs::write(&config_path, with_signer).unwrap();
    let config = ClientConfig::load(
        &config_path,
        at.cache.path().to_path_buf(),
        "1.0.0".parse().unwrap(),
    )
    .unwrap();
    let at = Installed {
        client: Client::new(config).unwrap(),
        ..at
    };
    at.assert_serving_v1("after the restart");
    let err = at
        .refused(honest(&(document, signature), at.fx.blobs()))
        .await;
    assert!(
        matches!(
            err,
            ClientError::Document(FormatError::SequenceOutOfRange { .. })
        ),
        "{err:?}"
    );
    assert_eq!(at.client.status().sequence, 5);
}

/// A 304 only answers a conditional request: to a client that sent no ETag it refers to
/// nothing, and is refused rather than taken as "no change".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_304_to_an_unconditional_request_is_refused() {
    let fx = Fixture::shared();
    let server = Hostile::start(Arc::new(|_: &Request| Reply::Status(304))).await;
    let cache = tempfile::tempdir().unwrap();
    let client = client_for(fx, &server, cache.path(), "");
    let err = client.refresh_now().await.unwrap_err();
    assert!(
        matches!(err, ClientError::Status { status: 304, .. }),
        "{err:?}"
    );
    assert_eq!(client.store().capture().source(), Source::Builtin);
    assert!(client.status().last_success.is_none());
}

/// What a failing server says reaches the user, cut to a bounded size and without control
/// characters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_error_body_is_shown_bounded_and_without_control_characters() {
    let at = Installed::new().await;
    let mut body = b"storage is down\x1b[31m ".to_vec();
    body.extend(std::iter::repeat_n(b'x', 1 << 20));
    let err = at
        .refused(Arc::new(move |_: &Request| {
            Reply::StatusBody(503, body.clone())
        }))
        .await;
    let ClientError::Status {
        status: 503,
        detail,
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert!(detail.starts_with("storage is down[31m x"), "{detail:?}");
    assert!(detail.len() <= pack_client::client::ERROR_BODY_LIMIT);
}

/// Two processes share a cache. One installs sequence 6; the other, which loaded the cache
/// at sequence 5, is then served sequence 5 again: it reads the state under the refresh
/// lock, sees 6, and refuses the replay instead of writing the high-water mark back to 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_on_the_cache_never_writes_back_an_older_sequence() {
    let at = Installed::new().await;
    let other = client_for(at.fx, &at.server, at.cache.path(), "");
    assert_eq!(other.status().sequence, 5);
    at.server.set(honest(&at.fx.next(), at.fx.blobs()));
    at.client.refresh_now().await.unwrap();
    assert_eq!(at.client.status().sequence, 6);

    // The very document it installed from: without the re-read this is "unchanged".
    at.server.set(honest(&at.good, at.fx.blobs()));
    let err = other.refresh_now().await.unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Rollback {
                found: 5,
                installed: 6
            }
        ),
        "{err:?}"
    );
    let restarted = client_for(at.fx, &at.server, at.cache.path(), "");
    assert_eq!(restarted.status().sequence, 6);
    assert_eq!(restarted.store().capture().version().to_string(), "2.0.0");
}
