//! How a real `packd` serves its connections, over raw TCP: every request, a revalidation
//! too, goes through hyper and the router (answers in order on one connection, hyper's `400`
//! for a malformed head, the route's own refusals), and each is counted once; a connection
//! closes after the header-read timeout, idle or halfway through a head, and at once when
//! the node drains while it is idle; a connection kept open sees a publish through another
//! node within the poll interval.

use crate::common;

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

/// Requests written together are answered in order, on one connection: revalidations,
/// other routes, whole documents, an unknown path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order() {
    let (_fx, server, tag) = published("").await;
    let mut stream = connect(&server);
    let requests = [
        revalidation(&tag, ""),
        "GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n".to_owned(),
        revalidation(&tag, ""),
        "GET /v1/nothing HTTP/1.1\r\nHost: test\r\n\r\n".to_owned(),
        "GET /v1/channels/stable HTTP/1.1\r\nHost: test\r\n\r\n".to_owned(),
    ];
    stream.write_all(requests.concat().as_bytes()).unwrap();
    let statuses: Vec<u16> = (0..requests.len())
        .map(|_| read_answer(&mut stream).status)
        .collect();
    assert_eq!(statuses, [304, 200, 304, 404, 200]);

    // Far more whole documents asked for at once than fit a socket buffer: every one
    // answered, in order, the same.
    let mut stream = connect(&server);
    let get = "GET /v1/channels/stable HTTP/1.1\r\nHost: test\r\n\r\n";
    stream.write_all(get.repeat(400).as_bytes()).unwrap();
    let first = read_answer(&mut stream);
    assert_eq!(first.status, 200);
    let document: serde_json::Value = serde_json::from_slice(&first.body).unwrap();
    assert_eq!(document["sequence"], 1);
    for _ in 1..400 {
        assert_eq!(read_answer(&mut stream), first);
    }
}

/// A head the router never sees gets hyper's `400`; a name the route refuses, the route's
/// error; HTTP/1.0 and a query the route ignores, the same `304`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_are_judged_by_hyper_and_the_route() {
    let (_fx, server, tag) = published("").await;
    let expected = exchange(&server, &revalidation(&tag, ""));
    assert_eq!(expected.status, 304);
    assert!(
        expected
            .headers
            .contains(&("x-promptpack-sequence".into(), "1".into())),
        "{expected:?}"
    );

    let query = revalidation(&tag, "").replacen("stable", "stable?x=1", 1);
    assert_eq!(exchange(&server, &query), expected);
    let old = revalidation(&tag, "").replacen("HTTP/1.1", "HTTP/1.0", 1);
    assert_eq!(exchange(&server, &old).status, 304);

    let bad = revalidation(&tag, "Not a header line\r\n");
    let answer = exchange(&server, &bad);
    assert_eq!(answer.status, 400, "{answer:?}");

    let answer = exchange(
        &server,
        &revalidation(&tag, "").replacen("stable", "Stable", 1),
    );
    assert_eq!(answer.status, 400, "{answer:?}");
    assert!(String::from_utf8_lossy(&answer.body).contains("invalid_name"));
}

/// On a private deployment a revalidation is answered only to a reader with a token.
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

/// Each revalidation is counted once: in the request metrics and the fetches by client
/// version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_revalidation_is_counted_once() {
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
/// through one.
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

/// Draining closes an idle keep-alive connection at once, instead of holding the shutdown
/// for its grace period.
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
/// the poll interval, the route checks storage and the next revalidation on that same
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
