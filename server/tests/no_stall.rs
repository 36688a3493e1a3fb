//! packd serves each connection on one thread for good (one single-threaded runtime per
//! core), so work that holds a thread up holds up every connection on it, watches and
//! health checks included. Each test here runs packd on one core, so that all connections
//! share one thread, makes it do something large, and checks that a neighbour's request is
//! answered meanwhile as quickly as ever.

#![allow(clippy::print_stderr)] // tests report what they measured

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::*;
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Barrier;

/// The largest sealed pack the format allows, and the default `max_blob_bytes`.
const MAX_UPLOAD: usize = 64 << 20;
/// What a slow client sends before each pause.
const PIECE: usize = 256 << 10;
/// Uploads at once (`max_concurrent_uploads`).
const UPLOADS: usize = 8;
/// How long a neighbour's `/healthz` may take while the uploads end. Hashed in one go each
/// (a 64 MiB SHA-256 takes 30-200 ms depending on the CPU, 35 ms with SHA extensions), eight
/// uploads held it up 350-500 ms on a busy 2-core machine; hashed as they arrive, and freed
/// off the thread one at a time, 1-20 ms (more when other processes take the core).
const NEIGHBOUR_BOUND: Duration = Duration::from_millis(200);

/// A fixture whose packd takes [`UPLOADS`] packs up to the format's 64 MiB at once.
fn fixture_for_large_uploads() -> Fixture {
    let fx = Fixture::new(&format!("max_concurrent_uploads = {UPLOADS}"));
    let config = std::fs::read_to_string(&fx.config).unwrap();
    let config = config.replace(
        &format!("max_blob_bytes = {MAX_BLOB_BYTES}"),
        &format!("max_blob_bytes = {MAX_UPLOAD}"),
    );
    std::fs::write(&fx.config, config).unwrap();
    fx
}

/// When each `/healthz` of a client that asks again and again started, and how long it took.
struct Probes {
    samples: Vec<(Instant, Duration)>,
}

impl Probes {
    async fn run(server: &Packd, stop: &AtomicBool) -> Probes {
        let c = client();
        let url = server.url("/healthz");
        let mut samples = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let at = Instant::now();
            let r = c.get(&url).send().await.unwrap();
            assert_eq!(r.status(), reqwest::StatusCode::OK);
            r.bytes().await.unwrap();
            samples.push((at, at.elapsed()));
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Probes { samples }
    }

    /// The probes in flight at some point between `from` and `to`, and the slowest of them.
    fn during(&self, from: Instant, to: Instant) -> (usize, Duration) {
        let during: Vec<Duration> = self
            .samples
            .iter()
            .filter(|(at, took)| *at <= to && *at + *took >= from)
            .map(|(_, took)| *took)
            .collect();
        (
            during.len(),
            during.iter().copied().max().unwrap_or_default(),
        )
    }
}

/// Sends a 64 MiB body in [`PIECE`]s with a pause after each, as a slow client does (about
/// 25 MB/s), all but its last byte; then waits at `last_byte` and sends it. Returns packd's
/// answer.
async fn slow_upload(server: &Packd, piece: Arc<Vec<u8>>, last_byte: Arc<Barrier>) -> String {
    let pieces = MAX_UPLOAD / piece.len();
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    // The URL names no real hash: the answer then says what packd found the bytes hash to.
    let head = format!(
        "PUT /v1/blobs/{} HTTP/1.1\r\nHost: packd\r\nAuthorization: Bearer {PUBLISH_TOKEN}\r\n\
         Content-Type: application/octet-stream\r\nContent-Length: {MAX_UPLOAD}\r\n\
         Connection: close\r\n\r\n",
        "0".repeat(64)
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    for n in 0..pieces {
        if n + 1 < pieces {
            stream.write_all(&piece).await.unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        let (most, last) = piece.split_at(piece.len() - 1);
        stream.write_all(most).await.unwrap();
        last_byte.wait().await;
        stream.write_all(last).await.unwrap();
    }
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

/// Eight 64 MiB uploads from slow clients end at once on a packd with one thread. packd
/// hashes each body while it arrives, so what is left when its last byte comes is a hash
/// finished, not 64 MiB hashed in one go: a neighbour's `/healthz` is answered within
/// [`NEIGHBOUR_BOUND`] throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uploads_of_64_mib_ending_together_do_not_hold_up_a_neighbour() {
    let fx = fixture_for_large_uploads();
    let server = Arc::new(Packd::start_on_one_core(&fx.disk(), Some(&fx.config)));
    let piece: Arc<Vec<u8>> =
        Arc::new((0..PIECE as u32).map(|i| (i * 7 + i / 251) as u8).collect());
    let mut expected = sha2::Sha256::new();
    for _ in 0..MAX_UPLOAD / piece.len() {
        expected.update(piece.as_slice());
    }
    let expected = hex::encode(expected.finalize());

    let stop = Arc::new(AtomicBool::new(false));
    let probing = {
        let (server, stop) = (server.clone(), stop.clone());
        tokio::spawn(async move { Probes::run(&server, &stop).await })
    };
    let last_byte = Arc::new(Barrier::new(UPLOADS + 1));
    let uploads: Vec<_> = (0..UPLOADS)
        .map(|_| {
            let (server, piece, last_byte) = (server.clone(), piece.clone(), last_byte.clone());
            tokio::spawn(async move { slow_upload(&server, piece, last_byte).await })
        })
        .collect();
    last_byte.wait().await;
    let from = Instant::now();
    for upload in uploads {
        let answer = upload.await.unwrap();
        // Every byte arrived and was hashed.
        assert!(answer.starts_with("HTTP/1.1 422"), "{answer}");
        assert!(answer.contains("hash_mismatch"), "{answer}");
        assert!(answer.contains(&expected), "{answer}");
    }
    let to = Instant::now();
    stop.store(true, Ordering::Relaxed);
    let probes = probing.await.unwrap();

    let (during, slowest) = probes.during(from, to);
    eprintln!(
        "{UPLOADS} uploads of 64 MiB ended in {} ms; {during} health checks meanwhile, the \
         slowest {} ms",
        (to - from).as_millis(),
        slowest.as_millis()
    );
    assert!(during > 0, "no health check overlapped the uploads' end");
    assert!(
        slowest < NEIGHBOUR_BOUND,
        "a health check took {slowest:?} while the uploads ended (bound {NEIGHBOUR_BOUND:?})"
    );
}

/// Node files written per day: packd reads up to 256, so a week of a large fleet is this
/// and more.
const NODES_PER_DAY: usize = 6;
/// Release × pack cells in each file, the default `max_cells`, each a dense sketch. Each
/// node saw other releases, so a day merges to `NODES_PER_DAY` times as many cells.
const CELLS: usize = 256;
/// How long a neighbour's `/healthz` may take while the fleet view of a week is merged.
/// Merged on the serving thread, these files held it up for a second at a time (debug
/// build, 2 cores); on the blocking pool, 7-90 ms.
const MERGE_BOUND: Duration = Duration::from_millis(250);

/// One node's file of `day`, as packd writes it: [`CELLS`] cells of releases only this node
/// saw, each a dense sketch (4,096 registers) as a cell of a few thousand installs is.
fn node_file(day: &str, node: usize) -> Vec<u8> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let cells: Vec<serde_json::Value> = (0..CELLS)
        .map(|cell| {
            let registers: Vec<u8> = (0..4096usize)
                .map(|r| ((r * 31 + cell * 7 + node * 13) % 12) as u8)
                .collect();
            serde_json::json!({
                "client_version": format!("1.{node}.{cell}"),
                "pack": "builtin",
                "sketch": {"dense": b64.encode(registers)},
            })
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "format": 1,
        "channel": "stable",
        "day": day,
        "node": format!("{node:016x}"),
        "written_at": format!("{day}T23:59:59Z"),
        "overflow": false,
        "cells": cells,
        "failures": [],
    }))
    .unwrap()
}

/// A week of node files from a large fleet is merged for the fleet view. The merge runs on
/// the blocking pool, so a neighbour's `/healthz` is answered meanwhile within
/// [`MERGE_BOUND`].
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn merging_a_week_of_fleet_counts_does_not_hold_up_a_neighbour() {
    let fx = Fixture::new("");
    // Where `fx.disk()` keeps its data.
    let data = fx.dir.path().join("data");
    let today = time::OffsetDateTime::now_utc().date();
    for back in 0..7 {
        let day = today - time::Duration::days(back);
        let day = format!(
            "{:04}-{:02}-{:02}",
            day.year(),
            u8::from(day.month()),
            day.day()
        );
        let dir = data.join(format!("fleet/stable/{day}"));
        std::fs::create_dir_all(&dir).unwrap();
        for node in 0..NODES_PER_DAY {
            std::fs::write(dir.join(format!("{node:016x}.json")), node_file(&day, node)).unwrap();
        }
    }
    let server = Arc::new(Packd::start_on_one_core(&fx.disk(), Some(&fx.config)));
    let pack = fx.pack("core", "1.0.0", "fleet");
    assert_eq!(
        upload(&server, &pack).await.status(),
        reqwest::StatusCode::CREATED
    );
    publish_created(
        &server,
        "stable",
        &fx.publish_body(&fx.document("stable", 1, &pack, "fleet")),
    )
    .await;

    let stop = Arc::new(AtomicBool::new(false));
    let probing = {
        let (server, stop) = (server.clone(), stop.clone());
        tokio::spawn(async move { Probes::run(&server, &stop).await })
    };
    // The probes are under way.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let from = Instant::now();
    let r = client()
        .get(server.url("/v1/channels/stable/fleet"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::OK);
    let view: serde_json::Value = r.json().await.unwrap();
    let to = Instant::now();
    stop.store(true, Ordering::Relaxed);
    let probes = probing.await.unwrap();
    // Every file went into the view.
    assert_eq!(view["sources"], 7 * NODES_PER_DAY, "{}", view["sources"]);
    assert_eq!(view["cells"].as_array().unwrap().len(), CELLS);

    let (during, slowest) = probes.during(from, to);
    eprintln!(
        "the fleet view of {} node files took {} ms; {during} health checks meanwhile, the \
         slowest {} ms",
        7 * NODES_PER_DAY,
        (to - from).as_millis(),
        slowest.as_millis()
    );
    assert!(during > 0, "no health check overlapped the merge");
    assert!(
        slowest < MERGE_BOUND,
        "a health check took {slowest:?} while the fleet view was merged (bound {MERGE_BOUND:?})"
    );
}
