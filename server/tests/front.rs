//! The revalidation answered ahead of hyper (`src/front.rs`), against real `packd` processes
//! over raw TCP: the same answer as hyper's path gives, requests in order across the hand-over
//! to hyper, heads that arrive in pieces, heads too long or malformed for the front, tokens,
//! the counts, and the connection's end (header-read timeout, shutdown); and, with
//! `blob_send = "sendfile"`, whole blobs sent from their files.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

/// A server with `stable` published at sequence 1; its document's ETag.
async fn published(extra_toml: &str) -> (Fixture, Packd, String) {
    let fx = Fixture::new(extra_toml);
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    let pack = fx.pack("core", "1.0.0", "one");
    let tag = publish_stable(&fx, &server, &pack).await;
    (fx, server, tag)
}

/// One HTTP/1.1 response: its status code, its headers (names lowercased, `Date` left out,
/// sorted) and its body.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn connect(server: &Packd) -> TcpStream {
    let stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// Reads one response from `stream`: its head byte by byte, then as much body as its
/// `Content-Length` says (a `304` has none).
fn read_answer(stream: &mut TcpStream) -> Answer {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).expect("a response");
        assert!(n == 1, "closed after {:?}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap()[9..12].parse().unwrap();
    let mut headers: Vec<(String, String)> = lines
        .filter(|line| !line.is_empty())
        .map(|line| {
            let (name, value) = line.split_once(':').unwrap();
            (name.to_ascii_lowercase(), value.trim().to_owned())
        })
        .filter(|(name, _)| name != "date")
        .collect();
    headers.sort();
    let length = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .map_or(0, |(_, value)| value.parse().unwrap());
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).unwrap();
    Answer {
        status,
        headers,
        body,
    }
}

/// `request` on a fresh connection, and its answer.
fn exchange(server: &Packd, request: &str) -> Answer {
    let mut stream = connect(server);
    stream.write_all(request.as_bytes()).unwrap();
    read_answer(&mut stream)
}

fn revalidation(tag: &str, extra: &str) -> String {
    format!(
        "GET /v1/channels/stable HTTP/1.1\r\nHost: test\r\nIf-None-Match: {tag}\r\n\
         X-Promptpack-Client-Version: 1.4.0\r\nX-Promptpack-Installed-Pack: builtin\r\n{extra}\r\n"
    )
}

/// `Connection: keep-alive` changes nothing about the answer, but is a framing header the
/// front leaves to hyper: the same request both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_answers_as_hyper_s_path_does() {
    let (_fx, server, tag) = published("").await;
    let front = exchange(&server, &revalidation(&tag, ""));
    let hyper = exchange(&server, &revalidation(&tag, "Connection: keep-alive\r\n"));
    assert_eq!(front.status, 304);
    assert_eq!(front, hyper);
    assert!(
        front
            .headers
            .contains(&("x-promptpack-sequence".into(), "1".into())),
        "{front:?}"
    );

    // A client without the document gets it whole, the same both ways.
    let plain = "GET /v1/channels/stable HTTP/1.1\r\nHost: test\r\n";
    let front = exchange(&server, &format!("{plain}\r\n"));
    let hyper = exchange(&server, &format!("{plain}Connection: keep-alive\r\n\r\n"));
    assert_eq!(front.status, 200);
    assert_eq!(front, hyper);
    let document: serde_json::Value = serde_json::from_slice(&front.body).unwrap();
    assert_eq!(document["sequence"], 1);
    assert!(
        front
            .headers
            .contains(&("content-type".into(), "application/json".into())),
        "{front:?}"
    );
}

/// Requests written together are answered in order, the front's and hyper's alike, and
/// hyper serves the connection from the first request the front leaves to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order_across_the_hand_over() {
    let (_fx, server, tag) = published("").await;
    let mut stream = connect(&server);
    let requests = [
        revalidation(&tag, ""),
        revalidation(&tag, ""),
        "GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n".to_owned(),
        revalidation(&tag, ""),
        "GET /v1/channels/stable HTTP/1.1\r\nHost: test\r\n\r\n".to_owned(),
    ];
    stream.write_all(requests.concat().as_bytes()).unwrap();
    let statuses: Vec<u16> = (0..requests.len())
        .map(|_| read_answer(&mut stream).status)
        .collect();
    assert_eq!(statuses, [304, 304, 200, 304, 200]);

    // More whole documents asked for at once than the front answers in one batch (64 KiB),
    // and more requests than its 8 KiB buffer holds: every one answered, in order.
    let mut stream = connect(&server);
    let get = "GET /v1/channels/stable HTTP/1.1\r\nHost: test\r\n\r\n";
    stream.write_all(get.repeat(400).as_bytes()).unwrap();
    let first = read_answer(&mut stream);
    assert_eq!(first.status, 200);
    assert!(
        400 * first.body.len() > 2 * 64 * 1024,
        "{}",
        first.body.len()
    );
    for _ in 1..400 {
        assert_eq!(read_answer(&mut stream), first);
    }

    // And one at a time on one connection, the hand-over in the middle.
    let mut stream = connect(&server);
    for (request, status) in [
        (revalidation(&tag, ""), 304),
        (
            "GET /v1/nothing HTTP/1.1\r\nHost: test\r\n\r\n".to_owned(),
            404,
        ),
        (revalidation(&tag, ""), 304),
    ] {
        stream.write_all(request.as_bytes()).unwrap();
        assert_eq!(read_answer(&mut stream).status, status, "{request}");
    }
}

/// Wherever a client's writes split a pipeline that crosses the hand-over (the front's
/// request, hyper's, then one more that hyper answers), the bytes the front read ahead reach
/// hyper whole and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_split_anywhere_is_answered_in_order() {
    let (_fx, server, tag) = published("").await;
    let pipeline = [
        revalidation(&tag, ""),
        "GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n".to_owned(),
        revalidation(&tag, ""),
    ]
    .concat();
    for split in (1..pipeline.len()).step_by(5) {
        let mut stream = connect(&server);
        let (first, second) = pipeline.as_bytes().split_at(split);
        stream.write_all(first).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        stream.write_all(second).unwrap();
        let statuses: Vec<u16> = (0..3).map(|_| read_answer(&mut stream).status).collect();
        assert_eq!(statuses, [304, 200, 304], "split at byte {split}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_arriving_byte_by_byte_is_answered() {
    let (_fx, server, tag) = published("").await;
    let mut stream = connect(&server);
    for _ in 0..2 {
        for byte in revalidation(&tag, "").as_bytes() {
            stream.write_all(&[*byte]).unwrap();
            std::thread::sleep(Duration::from_micros(200));
        }
        assert_eq!(read_answer(&mut stream).status, 304);
    }
}

/// Heads the front does not take go to hyper with every byte read, and hyper answers them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_the_front_does_not_take_are_hyper_s() {
    let (_fx, server, tag) = published("").await;
    let expected = exchange(&server, &revalidation(&tag, ""));

    // Longer than the front reads (8 KiB).
    let long = format!("X-Padding: {}\r\n", "a".repeat(9 * 1024));
    assert_eq!(exchange(&server, &revalidation(&tag, &long)), expected);

    // More fields than the front parses (32).
    let many: String = (0..40).map(|i| format!("X-Field-{i}: {i}\r\n")).collect();
    assert_eq!(exchange(&server, &revalidation(&tag, &many)), expected);

    // A query: the router's (an unknown parameter is ignored).
    let query = revalidation(&tag, "").replacen("stable", "stable?x=1", 1);
    assert_eq!(exchange(&server, &query), expected);

    // HTTP/1.0.
    let old = revalidation(&tag, "").replacen("HTTP/1.1", "HTTP/1.0", 1);
    assert_eq!(exchange(&server, &old).status, 304);

    // Malformed: hyper's 400.
    let bad = revalidation(&tag, "Not a header line\r\n");
    let answer = exchange(&server, &bad);
    assert_eq!(answer.status, 400, "{answer:?}");

    // A name the route refuses: its error, from the router.
    let answer = exchange(
        &server,
        &revalidation(&tag, "").replacen("stable", "Stable", 1),
    );
    assert_eq!(answer.status, 400, "{answer:?}");
    assert!(String::from_utf8_lossy(&answer.body).contains("invalid_name"));
}

/// On a private deployment the front answers only a reader with a token; hyper's path
/// refuses the others as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_deployment_answers_only_a_reader_with_a_token() {
    let (_fx, server, tag) = published(&Fixture::read_token_toml()).await;
    let without = exchange(&server, &revalidation(&tag, ""));
    assert_eq!(without.status, 401, "{without:?}");
    let wrong = exchange(
        &server,
        &revalidation(&tag, "Authorization: Bearer nope\r\n"),
    );
    assert_eq!(wrong.status, 401, "{wrong:?}");
    let reader = format!("Authorization: Bearer {READ_ONLY_TOKEN}\r\n");
    assert_eq!(exchange(&server, &revalidation(&tag, &reader)).status, 304);
}

/// The front's answers are counted as every request is: in the request metrics and the
/// fetches by client version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_s_answers_are_counted() {
    let (_fx, server, tag) = published("").await;
    let count = |metrics: &str, prefix: &str| -> f64 {
        metrics
            .lines()
            .filter(|line| line.starts_with(prefix))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let requests =
        "packd_http_requests_total{method=\"GET\",route=\"/v1/channels/{channel}\",status=\"304\"}";
    let fetches = "packd_channel_fetches_total{channel=\"stable\",client_version=\"1.4.0\"";
    let before = metrics_text(&server).await;
    let mut stream = connect(&server);
    for _ in 0..5 {
        stream.write_all(revalidation(&tag, "").as_bytes()).unwrap();
        assert_eq!(read_answer(&mut stream).status, 304);
    }
    let after = metrics_text(&server).await;
    assert_eq!(
        count(&after, requests) - count(&before, requests),
        5.0,
        "{after}"
    );
    assert_eq!(
        count(&after, fetches) - count(&before, fetches),
        5.0,
        "{after}"
    );
}

/// A connection waits for a request head at most the header-read timeout, idle or halfway
/// through one, as under hyper.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_or_slow_connection_is_closed_after_the_header_timeout() {
    let (_fx, server, tag) = published("header_timeout_secs = 1\n").await;
    for pending in ["", "GET /v1/channels/stable HTTP/1.1\r\nHost: te"] {
        let mut stream = connect(&server);
        stream.write_all(revalidation(&tag, "").as_bytes()).unwrap();
        assert_eq!(read_answer(&mut stream).status, 304);
        let started = Instant::now();
        stream.write_all(pending.as_bytes()).unwrap();
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
        let waited = started.elapsed();
        assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
        assert!(
            waited >= Duration::from_millis(900) && waited < Duration::from_secs(6),
            "{pending:?}: closed after {waited:?}"
        );
    }
}

/// Draining closes an idle connection the front holds at once, instead of holding the
/// shutdown for its grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_idle_connections_at_once() {
    let (_fx, mut server, tag) = published("shutdown_grace_secs = 60\n").await;
    let mut stream = connect(&server);
    stream.write_all(revalidation(&tag, "").as_bytes()).unwrap();
    assert_eq!(read_answer(&mut stream).status, 304);
    let started = Instant::now();
    server.sigterm();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "packd still running after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}\n{}", server.stderr());
}

/// A connection kept open to node B across a publish through node A: once B's memory is past
/// the poll interval, the front checks storage and the next revalidation on that same
/// connection gets the new document, and the one after it a `304` for that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_connection_sees_a_publish_through_another_node() {
    let (fx, a, tag) = published("watch_poll_ms = 200\n").await;
    let b = Packd::start(&fx.disk(), Some(&fx.config));
    let mut stream = connect(&b);
    stream.write_all(revalidation(&tag, "").as_bytes()).unwrap();
    assert_eq!(read_answer(&mut stream).status, 304);

    let pack = fx.pack("core", "1.0.1", "two");
    assert!(upload(&a, &pack).await.status().is_success());
    let body = fx.publish_body(&fx.document("stable", 2, &pack, "s2"));
    publish_created(&a, "stable", &body).await;
    let published = Instant::now();
    let changed = loop {
        stream.write_all(revalidation(&tag, "").as_bytes()).unwrap();
        let answer = read_answer(&mut stream);
        if answer.status == 200 {
            break answer;
        }
        assert_eq!(answer.status, 304, "{answer:?}");
        assert!(
            published.elapsed() < Duration::from_secs(5),
            "B still answers the old document"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let document: serde_json::Value = serde_json::from_slice(&changed.body).unwrap();
    assert_eq!(document["sequence"], 2);
    let new_tag = &changed.headers.iter().find(|(n, _)| n == "etag").unwrap().1;
    stream
        .write_all(revalidation(new_tag, "").as_bytes())
        .unwrap();
    assert_eq!(read_answer(&mut stream).status, 304);
}

/// A server sending blobs with `sendfile` (`extra_toml` as for [`Fixture::new`], blobs up to
/// `max_blob` bytes), `stable` published with a pack carrying `marker`; the pack's bytes, its
/// SHA-256 and the document's ETag.
async fn sending_files(
    extra_toml: &str,
    max_blob: u64,
    marker: &str,
) -> (Fixture, Packd, Vec<u8>, String, String) {
    let fx = Fixture::new(extra_toml);
    let text = std::fs::read_to_string(&fx.config).unwrap().replace(
        &format!("max_blob_bytes = {MAX_BLOB_BYTES}\n"),
        &format!("max_blob_bytes = {max_blob}\n"),
    );
    std::fs::write(&fx.config, format!("blob_send = \"sendfile\"\n{text}")).unwrap();
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    let pack = fx.pack("core", "1.0.0", marker);
    let tag = publish_stable(&fx, &server, &pack).await;
    let sha256 = pack_format::sha256_hex(&pack);
    (fx, server, pack, sha256, tag)
}

fn blob_get(sha256: &str, extra: &str) -> String {
    format!("GET /v1/blobs/{sha256} HTTP/1.1\r\nHost: test\r\n{extra}\r\n")
}

/// A blob sent from its file is the answer hyper's path gives, byte for byte and header for
/// header; a second request on the connection is answered after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_sent_from_its_file_is_the_route_s_answer() {
    let (_fx, server, pack, sha256, _) = sending_files("", MAX_BLOB_BYTES, "one").await;
    let mut stream = connect(&server);
    stream.write_all(blob_get(&sha256, "").as_bytes()).unwrap();
    let front = read_answer(&mut stream);
    let hyper = exchange(&server, &blob_get(&sha256, "Connection: keep-alive\r\n"));
    assert_eq!(front.status, 200);
    assert_eq!(front.body, pack);
    assert_eq!(front, hyper);
    stream.write_all(blob_get(&sha256, "").as_bytes()).unwrap();
    assert_eq!(read_answer(&mut stream), front);
}

/// Blobs, revalidations, a range and a miss written together are answered in order: the
/// front's head and file, its 304, and hyper's `206` and `404` after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blobs_pipelined_with_other_requests_are_answered_in_order() {
    let (_fx, server, pack, sha256, tag) = sending_files("", MAX_BLOB_BYTES, "one").await;
    let mut stream = connect(&server);
    let requests = [
        blob_get(&sha256, ""),
        revalidation(&tag, ""),
        blob_get(&sha256, ""),
        blob_get(&sha256, "Range: bytes=10-19\r\n"),
        blob_get(&"0".repeat(64), ""),
        blob_get(&sha256, ""),
    ];
    stream.write_all(requests.concat().as_bytes()).unwrap();
    let answers: Vec<Answer> = (0..requests.len())
        .map(|_| read_answer(&mut stream))
        .collect();
    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [200, 304, 200, 206, 404, 200]);
    for whole in [&answers[0], &answers[2], &answers[5]] {
        assert_eq!(whole.body, pack);
    }
    assert_eq!(answers[3].body, pack[10..20]);
}

/// A blob larger than one `sendfile` call sends (2 MiB), read slowly through a small receive
/// window: the sender waits on a full socket again and again, and every byte arrives in
/// order; the connection then serves the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_blob_reaches_a_slow_reader_whole() {
    // Hex of random bytes: zstd halves it, so the sealed pack is about 3 MiB.
    let random: Vec<u8> = (0..3 * 1024 * 1024).map(|_| rand::random::<u8>()).collect();
    let marker: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let (_fx, server, pack, sha256, tag) = sending_files("", 8 << 20, &marker).await;
    assert!(pack.len() > 2 * 1024 * 1024, "{}", pack.len());

    let socket = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::STREAM,
        None,
    )
    .unwrap();
    rustix::net::sockopt::set_socket_recv_buffer_size(&socket, 4096).unwrap();
    rustix::net::connect(&socket, &server.addr).unwrap();
    let mut stream = TcpStream::from(socket);
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(blob_get(&sha256, "").as_bytes()).unwrap();
    let mut received = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    let mut reads = 0;
    let mut body_at = None;
    let whole = loop {
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "closed after {} bytes", received.len());
        received.extend_from_slice(&chunk[..n]);
        reads += 1;
        if reads % 16 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        if body_at.is_none() {
            body_at = received
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .map(|at| at + 4);
        }
        if let Some(at) = body_at
            && received.len() >= at + pack.len()
        {
            break received.split_off(at);
        }
    };
    assert_eq!(whole.len(), pack.len());
    assert!(whole == pack, "the bytes differ");
    stream.write_all(revalidation(&tag, "").as_bytes()).unwrap();
    assert_eq!(read_answer(&mut stream).status, 304);
}

/// On a private deployment the front sends a blob only to a reader with a token; hyper
/// refuses the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_deployment_sends_a_blob_only_to_a_reader_with_a_token() {
    let (_fx, server, pack, sha256, _) =
        sending_files(&Fixture::read_token_toml(), MAX_BLOB_BYTES, "one").await;
    let without = exchange(&server, &blob_get(&sha256, ""));
    assert_eq!(without.status, 401, "{without:?}");
    let wrong = exchange(
        &server,
        &blob_get(&sha256, "Authorization: Bearer nope\r\n"),
    );
    assert_eq!(wrong.status, 401, "{wrong:?}");
    let reader = format!("Authorization: Bearer {READ_ONLY_TOKEN}\r\n");
    let answer = exchange(&server, &blob_get(&sha256, &reader));
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, pack);
}

/// A blob sent from its file is counted as the router counts one: its route, its status and
/// its bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_sent_from_its_file_is_counted() {
    let (_fx, server, pack, sha256, _) = sending_files("", MAX_BLOB_BYTES, "one").await;
    let requests =
        "packd_http_requests_total{method=\"GET\",route=\"/v1/blobs/{sha256}\",status=\"200\"}";
    let count = |metrics: &str| -> f64 {
        metrics
            .lines()
            .filter(|line| line.starts_with(requests))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let before = count(&metrics_text(&server).await);
    let mut stream = connect(&server);
    for _ in 0..3 {
        stream.write_all(blob_get(&sha256, "").as_bytes()).unwrap();
        assert_eq!(read_answer(&mut stream).body, pack);
    }
    let after = metrics_text(&server).await;
    assert_eq!(count(&after) - before, 3.0, "{after}");
}
