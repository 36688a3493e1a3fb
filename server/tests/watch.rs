//! Watches (long-polls on a channel document) against real `packd` processes: answered as
//! soon as a publish lands, on the publishing node and on every other node over the same
//! storage (a data directory, and SeaweedFS) within two seconds; a `304` at the wait's end;
//! the limits enforced with clear errors; answers from memory never older than the poll
//! interval; shutdown ending watches at once.

#![allow(clippy::print_stderr)] // tests report what they measured

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use serde_json::Value;

/// A server with one channel published at sequence 1, and what it takes to publish more.
struct Channel {
    fx: Fixture,
    pack: Vec<u8>,
    backend: Backend,
}

impl Channel {
    fn new(backend: impl FnOnce(&Fixture) -> Backend, extra_toml: &str) -> Self {
        let fx = Fixture::new(extra_toml);
        let pack = fx.pack("core", "1.0.0", "one");
        let backend = backend(&fx);
        Channel { fx, pack, backend }
    }

    fn start(&self) -> Packd {
        Packd::start(&self.backend, Some(&self.fx.config))
    }

    async fn upload(&self, server: &Packd) {
        let r = upload(server, &self.pack).await;
        assert!(r.status().is_success(), "upload: {}", r.status());
    }

    async fn publish(&self, server: &Packd, sequence: u64) {
        let body = self.fx.publish_body(&self.fx.document(
            "stable",
            sequence,
            &self.pack,
            &format!("s{sequence}"),
        ));
        publish_created(server, "stable", &body).await;
    }
}

/// The ETag of the live document.
async fn etag(server: &Packd) -> String {
    let r = client()
        .get(server.url("/v1/channels/stable"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    header(&r, "etag")
}

fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

/// What a watch answered and when.
struct Answer {
    status: StatusCode,
    sequence: u64,
    granted: String,
    cache_control: String,
    at: Instant,
}

/// A watch on `base` with `wait` seconds and `etag`, as older clients send it.
async fn watch(base: String, etag: String, wait: u64) -> Answer {
    let request = client()
        .get(format!("{base}/v1/channels/stable?wait={wait}"))
        .header("if-none-match", etag);
    answer(request).await
}

/// A watch on `base` with `wait` seconds from sequence `after`, without `If-None-Match`: what
/// packd sees of a watch behind a proxy that drops conditional headers.
async fn watch_after(base: String, after: u64, wait: u64) -> Answer {
    answer(client().get(format!(
        "{base}{}",
        pack_protocol::paths::channel_watch("stable", wait, after)
    )))
    .await
}

async fn answer(request: reqwest::RequestBuilder) -> Answer {
    let r = request.send().await.unwrap();
    let status = r.status();
    let granted = header(&r, "x-promptpack-wait");
    let cache_control = header(&r, "cache-control");
    let sequence = header(&r, "x-promptpack-sequence").parse().unwrap_or(0);
    let _ = r.bytes().await;
    Answer {
        status,
        sequence,
        granted,
        cache_control,
        at: Instant::now(),
    }
}

/// A gauge of packd's `/metrics`.
async fn metric(server: &Packd, name: &str) -> f64 {
    let text = metrics_text(server).await;
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// Waits until `server` holds `n` watches.
async fn until_watching(server: &Packd, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(server, "packd_watchers").await as usize != n {
        assert!(Instant::now() < deadline, "never {n} watchers");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_answers_as_soon_as_a_publish_lands() {
    let ch = Channel::new(Fixture::disk, "");
    let server = ch.start();
    ch.upload(&server).await;
    ch.publish(&server, 1).await;
    let tag = etag(&server).await;
    let pending = tokio::spawn(watch(server.url.clone(), tag, 30));
    until_watching(&server, 1).await;
    let published = Instant::now();
    ch.publish(&server, 2).await;
    let answer = pending.await.unwrap();
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.sequence, 2);
    assert_eq!(answer.granted, "30");
    let took = answer.at - published;
    eprintln!("same-node wake-up: {} ms", took.as_millis());
    assert!(took < Duration::from_secs(2), "{took:?}");
    until_watching(&server, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_ends_with_304_at_the_end_of_its_capped_wait() {
    let ch = Channel::new(Fixture::disk, "max_watch_secs = 2");
    let server = ch.start();
    ch.upload(&server).await;
    ch.publish(&server, 1).await;
    let tag = etag(&server).await;
    let started = Instant::now();
    let answer = watch(server.url.clone(), tag.clone(), 600).await;
    let held = answer.at - started;
    assert_eq!(answer.status, StatusCode::NOT_MODIFIED);
    assert_eq!(answer.granted, "2", "the server's cap, not the 600 asked");
    assert_eq!(answer.sequence, 1);
    // Two seconds plus up to a sixteenth of stretch, and the time to answer.
    assert!(
        held >= Duration::from_secs(2) && held < Duration::from_millis(3500),
        "{held:?}"
    );

    // A stale ETag is answered at once, with the document.
    let started = Instant::now();
    let answer = watch(server.url.clone(), "\"stale\"".to_string(), 30).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert!(answer.at - started < Duration::from_secs(1));
    // No `wait` (or wait=0) is a plain conditional GET.
    let r = client()
        .get(server.url("/v1/channels/stable?wait=0"))
        .header("if-none-match", &tag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(header(&r, "x-promptpack-wait"), "");
}

/// The client says the sequence it holds in the URL, so the watch is held without
/// `If-None-Match` (which nginx's `proxy_cache` drops on its way to packd); a sequence that is
/// not the live one is answered at once. No answer may be kept by a cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_a_sequence_is_held_without_if_none_match() {
    let ch = Channel::new(Fixture::disk, "");
    let server = ch.start();
    ch.upload(&server).await;
    ch.publish(&server, 1).await;
    let pending = tokio::spawn(watch_after(server.url.clone(), 1, 30));
    until_watching(&server, 1).await;
    let published = Instant::now();
    ch.publish(&server, 2).await;
    let answer = pending.await.unwrap();
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.sequence, 2);
    assert_eq!(answer.granted, "30");
    assert_eq!(answer.cache_control, "no-store");
    let took = answer.at - published;
    eprintln!(
        "same-node wake-up of a watch from a sequence: {} ms",
        took.as_millis()
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
    until_watching(&server, 0).await;

    // Behind the live sequence, or ahead of it (a node that has not seen a publish yet, a
    // server that lost its history): the live document at once.
    for held in [1, 7] {
        let started = Instant::now();
        let answer = watch_after(server.url.clone(), held, 30).await;
        assert_eq!(answer.status, StatusCode::OK, "after={held}");
        assert_eq!(answer.sequence, 2);
        assert_eq!(answer.cache_control, "no-store");
        assert!(answer.at - started < Duration::from_secs(1), "after={held}");
    }
}

/// The end of a watch from a sequence is a `304` even without `If-None-Match`; the old form
/// still ends in one too; neither is for a cache to keep, while plain requests keep theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_forms_of_watch_end_with_an_uncacheable_304() {
    let ch = Channel::new(Fixture::disk, "max_watch_secs = 2");
    let server = ch.start();
    ch.upload(&server).await;
    ch.publish(&server, 1).await;
    let tag = etag(&server).await;
    let (new_form, old_form) = tokio::join!(
        watch_after(server.url.clone(), 1, 600),
        watch(server.url.clone(), tag.clone(), 600)
    );
    for (form, answer) in [("after=1", new_form), ("If-None-Match", old_form)] {
        assert_eq!(answer.status, StatusCode::NOT_MODIFIED, "{form}");
        assert_eq!(answer.granted, "2", "{form}");
        assert_eq!(answer.sequence, 1, "{form}");
        assert_eq!(answer.cache_control, "no-store", "{form}");
    }
    // Plain requests, conditional or not, may be cached and revalidated.
    for inm in ["", tag.as_str()] {
        let r = client()
            .get(server.url("/v1/channels/stable"))
            .header("if-none-match", inm)
            .send()
            .await
            .unwrap();
        assert_eq!(header(&r, "cache-control"), "no-cache", "{}", r.status());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_after_that_is_not_a_sequence_is_refused() {
    let ch = Channel::new(Fixture::disk, "");
    let server = ch.start();
    ch.upload(&server).await;
    ch.publish(&server, 1).await;
    for bad in ["", "abc", "-1", "1.5", "99999999999999999999999"] {
        let r = client()
            .get(server.url(&format!("/v1/channels/stable?wait=30&after={bad}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(header(&r, "cache-control"), "no-store", "{bad}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_after", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("the sequence of the document the watch holds"),
            "{body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_is_not_whole_seconds_is_refused() {
    let ch = Channel::new(Fixture::disk, "");
    let server = ch.start();
    ch.upload(&server).await;
    ch.publish(&server, 1).await;
    for bad in ["abc", "-1", "1.5", "99999999999999999999999"] {
        let r = client()
            .get(server.url(&format!("/v1/channels/stable?wait={bad}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_wait", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("whole seconds"),
            "{body}"
        );
    }
    // Watching a channel nobody published on is a 404, not a wait.
    let r = client()
        .get(server.url("/v1/channels/nothing-here?wait=30"))
        .header("if-none-match", "\"x\"")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_node_refuses_watches_with_a_clear_error_and_still_answers_plain_requests() {
    let ch = Channel::new(Fixture::disk, "max_watchers = 3");
    let server = ch.start();
    ch.upload(&server).await;
    ch.publish(&server, 1).await;
    let tag = etag(&server).await;
    let held: Vec<_> = (0..3)
        .map(|_| tokio::spawn(watch(server.url.clone(), tag.clone(), 30)))
        .collect();
    until_watching(&server, 3).await;

    let r = client()
        .get(server.url("/v1/channels/stable?wait=30"))
        .header("if-none-match", &tag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let retry: u64 = header(&r, "retry-after").parse().unwrap();
    assert!((10..=40).contains(&retry), "{retry}");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "watchers_full");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("limit of 3 watches") && message.contains(&format!("retry in {retry} s")),
        "{message}"
    );
    assert_eq!(metric(&server, "packd_watch_refused_total").await, 1.0);

    // Plain requests still go through.
    let r = client()
        .get(server.url("/v1/channels/stable"))
        .header("if-none-match", &tag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);

    // A publish answers the three; then there is room again.
    ch.publish(&server, 2).await;
    for w in held {
        assert_eq!(w.await.unwrap().sequence, 2);
    }
    until_watching(&server, 0).await;
    let tag = etag(&server).await;
    let again = tokio::spawn(watch(server.url.clone(), tag, 30));
    until_watching(&server, 1).await;
    ch.publish(&server, 3).await;
    assert_eq!(again.await.unwrap().status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_hangs_up_gives_its_place_back() {
    let ch = Channel::new(Fixture::disk, "max_watchers = 1");
    let server = ch.start();
    ch.upload(&server).await;
    ch.publish(&server, 1).await;
    let tag = etag(&server).await;
    let gone = tokio::spawn(watch(server.url.clone(), tag.clone(), 30));
    until_watching(&server, 1).await;
    gone.abort();
    until_watching(&server, 0).await;
    let next = tokio::spawn(watch(server.url.clone(), tag, 30));
    until_watching(&server, 1).await;
    ch.publish(&server, 2).await;
    assert_eq!(next.await.unwrap().sequence, 2);
}

/// SIGTERM answers every watch at once (304) instead of holding the shutdown for the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_watches_at_once() {
    let ch = Channel::new(Fixture::disk, "");
    let server = ch.start();
    ch.upload(&server).await;
    ch.publish(&server, 1).await;
    let tag = etag(&server).await;
    let pending: Vec<_> = (0..5)
        .map(|_| tokio::spawn(watch(server.url.clone(), tag.clone(), 50)))
        .collect();
    until_watching(&server, 5).await;
    let stopped = Instant::now();
    server.sigterm();
    for w in pending {
        let answer = w.await.unwrap();
        assert_eq!(answer.status, StatusCode::NOT_MODIFIED);
        assert!(answer.at - stopped < Duration::from_secs(3));
    }
}

/// Watchers on node B, a publish through node A: every watcher on B answers within two
/// seconds (B checks storage once a second for the channel, not once per watcher).
async fn watchers_on_another_node_wake_within_two_seconds(
    backend: impl FnOnce(&Fixture) -> Backend,
) {
    const WATCHERS: usize = 25;
    const RELEASES: u64 = 3;
    let ch = Channel::new(backend, "");
    let a = ch.start();
    let b = ch.start();
    ch.upload(&a).await;
    ch.publish(&a, 1).await;
    let mut worst = Duration::ZERO;
    for sequence in 2..=RELEASES + 1 {
        let tag = etag(&b).await;
        let pending: Vec<_> = (0..WATCHERS)
            .map(|_| tokio::spawn(watch(b.url.clone(), tag.clone(), 30)))
            .collect();
        until_watching(&b, WATCHERS).await;
        // Somewhere within B's poll interval.
        tokio::time::sleep(Duration::from_millis(rand::random_range(0..1000))).await;
        let published = Instant::now();
        ch.publish(&a, sequence).await;
        for w in pending {
            let answer = w.await.unwrap();
            assert_eq!(answer.status, StatusCode::OK);
            assert_eq!(answer.sequence, sequence);
            worst = worst.max(answer.at - published);
        }
        until_watching(&b, 0).await;
    }
    eprintln!(
        "cross-node wake-up, {WATCHERS} watchers x {RELEASES} releases: slowest {} ms",
        worst.as_millis()
    );
    assert!(worst < Duration::from_secs(2), "{worst:?}");
    // One storage check per second per channel: a few polls, not one per watcher.
    let polls = metric(&b, "packd_watch_polls_total{result=\"ok\"}").await;
    assert!(polls < 20.0 * RELEASES as f64, "{polls} polls");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_watchers_on_another_node_wake_within_two_seconds() {
    watchers_on_another_node_wake_within_two_seconds(Fixture::disk).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_watchers_on_another_node_wake_within_two_seconds() {
    let Some(s3) = Seaweed::shared() else {
        return;
    };
    watchers_on_another_node_wake_within_two_seconds(|_| s3.backend("watch")).await;
}

/// Node B answers plain requests from memory, but never with a document older than what
/// storage held one poll interval (1 s) before the request: once a publish through A has
/// returned, every request sent to B a second later gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_from_memory_are_never_older_than_the_poll_interval() {
    let ch = Channel::new(Fixture::disk, "");
    let a = ch.start();
    let b = ch.start();
    ch.upload(&a).await;
    ch.publish(&a, 1).await;
    let c = client();
    let read = |started: Instant| {
        let c = c.clone();
        let url = b.url("/v1/channels/stable");
        async move {
            let r = c.get(url).send().await.unwrap();
            let sequence: u64 = header(&r, "x-promptpack-sequence").parse().unwrap();
            (started, sequence)
        }
    };
    for sequence in 2..=4 {
        // B is hot: it has answered from memory all along.
        for _ in 0..20 {
            assert_eq!(read(Instant::now()).await.1, sequence - 1);
        }
        ch.publish(&a, sequence).await;
        let published = Instant::now();
        let mut stale_for = Duration::ZERO;
        while published.elapsed() < Duration::from_millis(1500) {
            let (sent, seen) = read(Instant::now()).await;
            if seen < sequence {
                stale_for = sent - published;
                assert!(
                    stale_for < Duration::from_secs(1),
                    "B served sequence {seen} {stale_for:?} after {sequence} was published"
                );
            }
        }
        eprintln!("sequence {sequence}: B answered the old one for {stale_for:?}");
    }
    // A reader that asks for storage's answer (as packer does) gets it at once.
    ch.publish(&a, 5).await;
    let r = c
        .get(b.url("/v1/channels/stable"))
        .header("cache-control", "no-cache")
        .send()
        .await
        .unwrap();
    assert_eq!(header(&r, "x-promptpack-sequence"), "5");
}
