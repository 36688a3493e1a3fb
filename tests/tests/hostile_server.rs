//! A hostile server: every attack or fault ends with the previous snapshot still served and
//! a specific error in the client's status.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pack_client::{Client, ClientConfig, Source};
use pack_format::{ChannelDocument, ChannelEntry, EntryTarget, PackRef, SigningKey};
use promptpack_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How the server answers one request.
#[derive(Clone)]
enum Reply {
    Ok(Vec<u8>),
    Status(u16),
    /// Declares no length, sends `n` bytes of the body, then closes.
    Cut(Vec<u8>, usize),
    /// One byte every `delay`.
    Drip(Vec<u8>, Duration),
}

type Route = Arc<dyn Fn(&str) -> Reply + Send + Sync>;

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
                    let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                    let reply = route(&path);
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
        Reply::Ok(body) => {
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            socket.write_all(head.as_bytes()).await?;
            socket.write_all(&body).await
        }
        Reply::Status(code) => {
            let head =
                format!("HTTP/1.1 {code} Oops\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            socket.write_all(head.as_bytes()).await
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

/// Serves one channel document, its signature and a set of blobs honestly.
fn honest(doc: Vec<u8>, sig: String, blobs: Vec<(String, Vec<u8>)>) -> Route {
    Arc::new(move |path: &str| {
        if path == "/v1/channels/stable" {
            Reply::Ok(doc.clone())
        } else if path == "/v1/channels/stable/signature" {
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

struct Fixture {
    publisher: Publisher,
    v1: Vec<u8>,
    v2: Vec<u8>,
    key: SigningKey,
}

impl Fixture {
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
        }
    }

    fn signed(&self, doc: &ChannelDocument, key: &SigningKey) -> (Vec<u8>, String) {
        let s = doc.sign(key).unwrap();
        (s.document, s.signature)
    }
}

fn content_keys(fx: &Fixture) -> pack_format::ContentKeyRing {
    pack_format::ContentKeyRing::new([pack_format::ContentKey::load(
        &fx.publisher.keys().join("content.key"),
    )
    .unwrap()])
}

fn blobs(fx: &Fixture) -> Vec<(String, Vec<u8>)> {
    vec![
        (pack_format::sha256_hex(&fx.v1), fx.v1.clone()),
        (pack_format::sha256_hex(&fx.v2), fx.v2.clone()),
    ]
}

/// Installs v1 from an honest server, then runs each attack and checks the client still
/// serves v1 and reports an error containing the expected words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attack_leaves_the_previous_snapshot_serving_with_a_specific_error() {
    let fx = Fixture::new();
    let good = fx.signed(
        &fx.doc(5, &fx.v1, "1.0.0", time::Duration::days(30)),
        &fx.key,
    );
    let server = Hostile::start(honest(good.0.clone(), good.1.clone(), blobs(&fx))).await;
    let cache = tempfile::tempdir().unwrap();
    let config_path = fx
        .publisher
        .client_config(&server.url, "deadline_secs = 3\n");
    let mut config = ClientConfig::load(
        &config_path,
        cache.path().to_path_buf(),
        "1.0.0".parse().unwrap(),
    )
    .unwrap();
    config.backoff = Duration::from_millis(10);
    let client = Client::new(config).unwrap();
    client.refresh_now().await.unwrap();
    assert_eq!(client.store().capture().version().to_string(), "1.0.0");
    assert_eq!(client.store().capture().source(), Source::Remote);

    let next = fx.doc(6, &fx.v2, "2.0.0", time::Duration::days(30));
    let next_signed = fx.signed(&next, &fx.key);
    let v2_sha = pack_format::sha256_hex(&fx.v2);
    let with_blob = |reply: Reply| -> Route {
        let (doc, sig, sha) = (next_signed.0.clone(), next_signed.1.clone(), v2_sha.clone());
        Arc::new(move |path: &str| {
            if path == "/v1/channels/stable" {
                Reply::Ok(doc.clone())
            } else if path == "/v1/channels/stable/signature" {
                Reply::Ok(sig.clone().into_bytes())
            } else if path == format!("/v1/blobs/{sha}") {
                reply.clone()
            } else {
                Reply::Status(404)
            }
        })
    };
    let mut longer = fx.v2.clone();
    longer.extend_from_slice(b"extra bytes the publisher never signed");
    let mut flipped = fx.v2.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 1;

    let old = fx.signed(
        &fx.doc(4, &fx.v2, "2.0.0", time::Duration::days(30)),
        &fx.key,
    );
    let expired = fx.signed(
        &fx.doc(7, &fx.v2, "2.0.0", -time::Duration::days(1)),
        &fx.key,
    );
    let mismatched = fx.signed(
        &fx.doc(8, &fx.v2, "9.9.9", time::Duration::days(30)),
        &fx.key,
    );
    let stranger = SigningKey::generate(None).unwrap().key;
    let untrusted = fx.signed(
        &fx.doc(9, &fx.v2, "2.0.0", time::Duration::days(30)),
        &stranger,
    );

    let cases: Vec<(&str, Route, &str)> = vec![
        (
            "truncated body",
            with_blob(Reply::Cut(fx.v2.clone(), fx.v2.len() / 2)),
            "truncated",
        ),
        (
            "body longer than signed",
            with_blob(Reply::Cut(longer, usize::MAX)),
            "longer than",
        ),
        (
            "slow drip past the deadline",
            with_blob(Reply::Drip(fx.v2.clone(), Duration::from_millis(50))),
            "deadline",
        ),
        ("wrong hash", with_blob(Reply::Ok(flipped)), "sha256"),
        (
            "older sequence (rollback)",
            honest(old.0, old.1, blobs(&fx)),
            "rollback refused",
        ),
        (
            "expired document (freeze)",
            honest(expired.0, expired.1, blobs(&fx)),
            "expired",
        ),
        (
            "header not matching its entry",
            honest(mismatched.0, mismatched.1, blobs(&fx)),
            "pack header version",
        ),
        (
            "valid signature from an untrusted key",
            honest(untrusted.0, untrusted.1, blobs(&fx)),
            "not trusted",
        ),
        (
            "garbage",
            Arc::new(|_: &str| Reply::Ok(b"\x00\x01garbage{{{".to_vec())),
            "malformed",
        ),
        (
            "500s",
            Arc::new(|_: &str| Reply::Status(500)),
            "answered 500",
        ),
    ];
    for (name, route, expected) in cases {
        server.set(route);
        let result = client.refresh_now().await;
        let err = result.expect_err(name).to_string();
        assert!(
            err.contains(expected),
            "{name}: expected {expected:?} in {err:?}"
        );
        let serving = client.store().capture();
        assert_eq!(
            serving.version().to_string(),
            "1.0.0",
            "{name}: previous snapshot not kept"
        );
        assert_eq!(serving.source(), Source::Remote, "{name}");
        let status = client.status().last_error.unwrap_or_default();
        assert!(status.contains(expected), "{name}: status says {status:?}");
    }

    assert!(
        client.status().bad_packs.is_empty(),
        "faults of the transport or the document must not condemn a pack"
    );

    // A pack that matches its signed hash but cannot be opened (sealed for a content key
    // this client does not hold) is remembered and never fetched again.
    let foreign = {
        let files =
            pack_format::pack::open(&fx.v2, &content_keys(&fx), &pack_format::Limits::DEFAULT)
                .unwrap()
                .payload;
        let version = semver::Version::new(2, 0, 0);
        let input = pack_format::SealInput {
            name: "builtin",
            version: &version,
            schema: 1,
            payload: &files,
            mtime: 0,
            zstd_level: 3,
        };
        pack_format::seal(&input, &[&pack_format::ContentKey::generate()]).unwrap()
    };
    let foreign_sha = pack_format::sha256_hex(&foreign);
    let foreign_doc = fx.signed(
        &fx.doc(10, &foreign, "2.0.0", time::Duration::days(30)),
        &fx.key,
    );
    let downloads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = {
        let (doc, sig, sha, bytes, downloads) = (
            foreign_doc.0.clone(),
            foreign_doc.1.clone(),
            foreign_sha.clone(),
            foreign.clone(),
            downloads.clone(),
        );
        Arc::new(move |path: &str| {
            if path == "/v1/channels/stable" {
                Reply::Ok(doc.clone())
            } else if path == "/v1/channels/stable/signature" {
                Reply::Ok(sig.clone().into_bytes())
            } else if path == format!("/v1/blobs/{sha}") {
                downloads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Reply::Ok(bytes.clone())
            } else {
                Reply::Status(404)
            }
        }) as Route
    };
    server.set(counted);
    let err = client.refresh_now().await.unwrap_err().to_string();
    assert!(err.contains("no content key"), "{err}");
    assert_eq!(client.status().bad_packs, vec![foreign_sha.clone()]);
    let err = client.refresh_now().await.unwrap_err().to_string();
    assert!(err.contains("failed before and is not retried"), "{err}");
    assert_eq!(
        downloads.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "a known-bad pack was downloaded again"
    );
    assert_eq!(client.store().capture().version().to_string(), "1.0.0");

    // And after all that, the honest next release still installs.
    let honest_next = fx.signed(
        &fx.doc(11, &fx.v2, "2.0.0", time::Duration::days(30)),
        &fx.key,
    );
    server.set(honest(honest_next.0, honest_next.1, blobs(&fx)));
    client.refresh_now().await.unwrap();
    assert_eq!(client.store().capture().version().to_string(), "2.0.0");
}
