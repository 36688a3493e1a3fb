//! Running `packd`: zero config, the OpenAPI description, timeouts, graceful shutdown, the
//! token commands, data directories of the old layout, the start-up sweep of staging files,
//! and the atomic create-only write of SeaweedFS that publishing rests on.

#![allow(clippy::print_stderr)] // tests report what they measured

use crate::common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_config_serves_from_a_data_dir_under_the_working_directory() {
    let cwd = tempfile::tempdir().unwrap();
    let server = Packd::start_in(&Backend::ZeroConfig, None, cwd.path());
    let c = client();
    assert_eq!(
        c.get(server.url("/healthz"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "ok\n"
    );
    assert_eq!(
        c.get(server.url("/readyz")).send().await.unwrap().status(),
        StatusCode::OK
    );
    let channels: Value = c
        .get(server.url("/v1/channels"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(channels["channels"], serde_json::json!([]));
    let r = c
        .put(server.url("/v1/channels/stable"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::UNAUTHORIZED,
        "no tokens configured: nobody publishes"
    );
    assert!(cwd.path().join("packd-data").is_dir());
    assert!(server.addr.ip().is_loopback());
}

/// Every operation the router serves is in `/v1/openapi.json`, and every operation in it
/// is served (not the fallback 404, not 405).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_describes_every_route() {
    let fx = Fixture::new("");
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    let c = client();
    let spec: Value = c
        .get(server.url("/v1/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(spec["openapi"].as_str().unwrap().starts_with("3."));
    let mut described = BTreeSet::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "put", "head", "post", "delete", "patch"].contains(&method.as_str()) {
                described.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    let expected: BTreeSet<(String, String)> = [
        ("PUT", "/v1/blobs/{sha256}"),
        ("GET", "/v1/blobs/{sha256}"),
        ("HEAD", "/v1/blobs/{sha256}"),
        ("GET", "/v1/packs"),
        ("GET", "/v1/packs/{name}"),
        ("GET", "/v1/channels"),
        ("PUT", "/v1/channels/{channel}"),
        ("GET", "/v1/channels/{channel}"),
        ("GET", "/v1/channels/{channel}/signature"),
        ("GET", "/v1/channels/{channel}/history"),
        ("GET", "/v1/channels/{channel}/history/{sequence}"),
        ("GET", "/v1/channels/{channel}/history/{sequence}/signature"),
        ("GET", "/v1/channels/{channel}/fleet"),
        ("POST", "/v1/channels/{channel}/reports"),
        ("GET", "/v1/channels/{channel}/outcomes"),
        ("POST", "/v1/channels/{channel}/outcomes"),
        ("GET", "/v1/channels/{channel}/guard"),
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/metrics"),
        ("GET", "/v1/openapi.json"),
    ]
    .into_iter()
    .map(|(m, p)| (m.to_string(), p.to_string()))
    .collect();
    assert_eq!(described, expected);
    assert!(spec["components"]["securitySchemes"]["bearer"].is_object());
    assert!(spec["components"]["schemas"]["ErrorBody"].is_object());

    for (method, path) in &described {
        let concrete = path
            .replace("{sha256}", &"0".repeat(64))
            .replace("{channel}", "stable")
            .replace("{sequence}", "1")
            .replace("{name}", "core");
        let r = c
            .request(method.parse().unwrap(), server.url(&concrete))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body = r.text().await.unwrap();
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        assert!(
            !body.contains("\"route "),
            "{method} {path} hit the fallback: {body}"
        );
    }
    // The protocol crate's paths, which packer and the client request, are these routes.
    use pack_protocol::paths;
    let sha = "0".repeat(64);
    let served: BTreeSet<String> = described
        .iter()
        .map(|(_, path)| {
            path.replace("{sha256}", &sha)
                .replace("{channel}", "stable")
                .replace("{sequence}", "1")
                .replace("{name}", "core")
        })
        .collect();
    for path in [
        paths::blob(&sha),
        paths::PACKS.to_string(),
        paths::pack("core"),
        paths::CHANNELS.to_string(),
        paths::channel("stable"),
        paths::channel_signature("stable"),
        paths::history("stable"),
        paths::history_document("stable", 1),
        paths::history_signature("stable", 1),
        paths::fleet("stable"),
        paths::reports("stable"),
        paths::outcomes("stable"),
        paths::guard("stable"),
        paths::OPENAPI.to_string(),
    ] {
        assert!(served.contains(&path), "{path} is not a described route");
    }
    // And the fallback is what an undescribed route gets.
    let r = c.get(server.url("/v1/nothing-here")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(r.text().await.unwrap().contains("\"route "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off() {
    let fx = Fixture::new("header_timeout_secs = 1\nrequest_timeout_secs = 2\n");
    let server = Packd::start(&fx.disk(), Some(&fx.config));

    // Headers that never finish: the connection is closed.
    let started = Instant::now();
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n")
        .unwrap();
    let mut buf = Vec::new();
    let _ = stream.read_to_end(&mut buf);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(6),
        "closed after {waited:?}"
    );
    assert!(!String::from_utf8_lossy(&buf).contains("200 OK"));

    // A body that never finishes: 408 once the request timeout passes.
    let started = Instant::now();
    let request = format!(
        "PUT /v1/blobs/{} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {PUBLISH_TOKEN}\r\n\
         Content-Length: 1000\r\n\r\nonly a few bytes",
        "0".repeat(64)
    );
    let answer = raw_exchange(server.addr, request.as_bytes(), Duration::from_secs(10));
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"timeout\""), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(6));

    // The server is fine afterwards.
    let r = client().get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

/// SIGTERM: no new connections, the upload in flight completes, then a clean exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_request_in_flight_finish() {
    let fx = Fixture::new("");
    let mut server = Packd::start(&fx.disk(), Some(&fx.config));
    let pack = fx.pack("core", "1.0.0", "one");
    let sha = pack_format::sha256_hex(&pack);
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let head = format!(
        "PUT /v1/blobs/{sha} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {PUBLISH_TOKEN}\r\n\
         Content-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        pack.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    // The sign that the upload is in flight: packd took the token and asks for the body.
    let interim = head_of(&mut stream);
    assert!(interim.starts_with("HTTP/1.1 100 "), "{interim}");
    let (first, rest) = pack.split_at(pack.len() / 2);
    stream.write_all(first).unwrap();

    server.sigterm();
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(server.addr).is_ok() {
        assert!(
            Instant::now() < deadline,
            "still accepting connections after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    stream.write_all(rest).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");

    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "packd did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}\n{}", server.stderr());
    assert!(server.stderr().contains("SIGTERM received"));

    // The upload it finished is there for the next process.
    server.restart();
    let r = client()
        .head(server.url(&format!("/v1/blobs/{sha}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

#[test]
fn token_new_prints_a_token_and_its_config_entry() {
    let out = Command::new(bin("pack-server", "packd"))
        .args(["token", "new", "--scope", "publish", "--name", "release-ci"])
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let token = text.lines().next().unwrap();
    assert!(token.starts_with("ppt_") && token.len() == 68, "{token}");
    assert!(
        text.contains(&format!("sha256 = \"{}\"", hash_token_with_cli(token))),
        "{text}"
    );
    assert!(text.contains("scopes = [\"publish\"]"));
    assert!(text.contains("name = \"release-ci\""));

    let bad = Command::new(bin("pack-server", "packd"))
        .args(["token", "new", "--scope", "admin"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
}

/// Publishing rests on one property of the object store: of several create-only PUTs
/// (`If-None-Match: *`) of one new key, exactly one succeeds and its bytes are what is
/// stored. SeaweedFS, the store the S3 tests run on, has it; 20 keys, each raced for by 8
/// PUTs of 256 KiB at once, check it (a store that checks the condition before receiving the
/// body and writes afterwards without a lock, as s3s-fs does, lets several through). The keys
/// race side by side: SeaweedFS makes the losers of one key wait a second or two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seaweedfs_create_only_puts_are_atomic() {
    use object_store::path::Path;
    use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

    const KEYS: usize = 20;
    const RACERS: u8 = 8;
    const SIZE: usize = 256 * 1024;
    let Some(s3) = Seaweed::shared() else { return };
    let store = std::sync::Arc::new(s3.store());
    let prefix = format!("probe-{:016x}", rand::random::<u64>());
    let started = Instant::now();
    let mut racers = Vec::new();
    for key in 0..KEYS {
        for i in 0..RACERS {
            let store = store.clone();
            let location = Path::from(format!("{prefix}/{key}"));
            racers.push(tokio::spawn(async move {
                let put = store
                    .put_opts(
                        &location,
                        PutPayload::from(vec![i; SIZE]),
                        PutOptions::from(PutMode::Create),
                    )
                    .await;
                match put {
                    Ok(_) => (key, Some(i)),
                    Err(object_store::Error::AlreadyExists { .. }) => (key, None),
                    Err(other) => panic!("key {key}, racer {i}: {other}"),
                }
            }));
        }
    }
    let mut winners = vec![Vec::new(); KEYS];
    for racer in racers {
        let (key, won) = racer.await.unwrap();
        winners[key].extend(won);
    }
    let elapsed = started.elapsed();
    for (key, won) in winners.iter().enumerate() {
        assert_eq!(won.len(), 1, "key {key}: winners {won:?}");
        let stored = store
            .get(&Path::from(format!("{prefix}/{key}")))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert!(
            stored.len() == SIZE && stored.iter().all(|b| *b == won[0]),
            "key {key}: the stored bytes are the winner's"
        );
    }
    eprintln!(
        "SeaweedFS: {KEYS} keys x {RACERS} racing create-only PUTs, one winner each, in {} ms",
        elapsed.as_millis()
    );
}

/// A data directory the old layout wrote keeps working: `head.json` (then the live pointer)
/// is read as a hint, the old lock files are ignored, and a history entry the old packd left
/// ahead of `head.json` when it died between its two writes is live at once (the old packd
/// made it live only at the next publish, which it then refused as not greater).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_of_the_old_layout_keeps_working() {
    let fx = Fixture::new("");
    let backend = fx.disk();
    let Backend::Disk(data) = &backend else {
        unreachable!()
    };
    let mut server = Packd::start(&backend, Some(&fx.config));
    let c = client();
    let pack = fx.pack("core", "1.0.0", "one");
    let put = |body: Value, base: String| {
        let c = c.clone();
        async move {
            c.put(format!("{base}/v1/channels/stable"))
                .bearer_auth(PUBLISH_TOKEN)
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    let r = c
        .put(server.url(&format!("/v1/blobs/{}", pack_format::sha256_hex(&pack))))
        .bearer_auth(PUBLISH_TOKEN)
        .body(pack.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let head = data.join("channels/stable/head.json");
    let mut bodies = Vec::new();
    let mut head_at_2 = Vec::new();
    for sequence in 1..=3 {
        let body =
            fx.publish_body(&fx.document("stable", sequence, &pack, &format!("s{sequence}")));
        assert_eq!(
            put(body.clone(), server.url.clone()).await,
            StatusCode::CREATED
        );
        if sequence == 2 {
            head_at_2 = std::fs::read(&head).unwrap();
        }
        bodies.push(body);
    }
    server.stop();
    // What the old packd left after dying between writing history 3 and head.json.
    std::fs::write(&head, &head_at_2).unwrap();
    std::fs::create_dir_all(data.join(".locks")).unwrap();
    std::fs::write(data.join(".locks/channel.stable.lock"), b"").unwrap();

    server.restart();
    let live = |base: String| {
        let c = c.clone();
        async move {
            c.get(format!("{base}/v1/channels/stable"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    assert_eq!(
        live(server.url.clone()).await,
        bodies[2]["document"].as_str().unwrap()
    );
    let next = fx.publish_body(&fx.document("stable", 4, &pack, "s4"));
    assert_eq!(
        put(next.clone(), server.url.clone()).await,
        StatusCode::CREATED
    );

    // A hint that does not parse, then no hint at all: the history alone says what is live.
    server.stop();
    std::fs::write(&head, b"{\"sequence\": ").unwrap();
    server.restart();
    assert_eq!(
        live(server.url.clone()).await,
        next["document"].as_str().unwrap()
    );
    server.stop();
    std::fs::remove_file(&head).unwrap();
    server.restart();
    assert_eq!(
        live(server.url.clone()).await,
        next["document"].as_str().unwrap()
    );
    let fifth = fx.publish_body(&fx.document("stable", 5, &pack, "s5"));
    assert_eq!(
        put(fifth.clone(), server.url.clone()).await,
        StatusCode::CREATED
    );
    assert_eq!(
        live(server.url.clone()).await,
        fifth["document"].as_str().unwrap()
    );
}

/// Staging files (`{key}#{n}`) that a killed writer left are removed when packd starts, once
/// they are older than any write can take; a young one may be another node's write in
/// progress on a shared data directory and is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_staging_files_are_swept_at_start_and_young_ones_kept() {
    let fx = Fixture::new("");
    let backend = fx.disk();
    let Backend::Disk(data) = &backend else {
        unreachable!()
    };
    let mut server = Packd::start(&backend, Some(&fx.config));
    let pack = fx.pack("core", "1.0.0", "one");
    let sha = pack_format::sha256_hex(&pack);
    let r = client()
        .put(server.url(&format!("/v1/blobs/{sha}")))
        .bearer_auth(PUBLISH_TOKEN)
        .body(pack.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    server.stop();

    let stale_blob = data.join(format!("blobs/{sha}#1"));
    let stale_record = data.join("packs/core/1.0.0.json#2");
    let young_blob = data.join(format!("blobs/{sha}#3"));
    std::fs::write(&stale_blob, vec![7u8; 4 << 20]).unwrap();
    std::fs::write(&stale_record, b"{\"name\": ").unwrap();
    std::fs::write(&young_blob, vec![7u8; 1 << 20]).unwrap();
    for file in [&stale_blob, &stale_record] {
        let touched = Command::new("touch")
            .arg("-d")
            .arg("2 hours ago")
            .arg(file)
            .status()
            .unwrap();
        assert!(touched.success());
    }

    server.restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server.stderr().contains("staging sweep done") {
        assert!(Instant::now() < deadline, "no sweep: {}", server.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !stale_blob.exists() && !stale_record.exists(),
        "{:?}",
        files_under(data)
    );
    assert!(young_blob.exists(), "a young staging file is kept");
    let blob = client()
        .get(server.url(&format!("/v1/blobs/{sha}")))
        .send()
        .await
        .unwrap();
    assert_eq!(blob.bytes().await.unwrap().as_ref(), pack.as_slice());
}

/// Reads one response head (through the blank line) from `stream`, byte by byte so nothing
/// after it is taken.
fn head_of(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).unwrap() {
            0 => break,
            _ => head.push(byte[0]),
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}
