//! The watch, measured against a real packd (driven by `scripts/bench-watch.sh`, which
//! starts packd, makes the keys, packs and signed documents, and passes them in):
//!
//! - `fleet`: N real `Client`s in this process, each with its own cache, watching; then a
//!   release through packd, and the time until each one serves the new pack (p50, p99).
//! - `idle`: N watches held open on one packd by bare connections, and packd's resident
//!   memory and CPU while it holds them.
//! - `wake`: watches on node B, releases through node A, and the time until each watch on B
//!   is answered.
//!
//! `cargo bench -p pack-client --bench watch -- <mode> [--flag value]…`
#![allow(clippy::print_stdout, clippy::print_stderr)] // a bench reports on the terminal

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pack_client::{Client, ClientConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// `--name value` pairs after the mode.
struct Args(HashMap<String, String>);

impl Args {
    fn parse(raw: &[String]) -> Args {
        let mut map = HashMap::new();
        let mut it = raw.iter();
        while let Some(flag) = it.next() {
            if let Some(name) = flag.strip_prefix("--") {
                map.insert(name.to_string(), it.next().cloned().unwrap_or_default());
            }
        }
        Args(map)
    }

    fn get(&self, name: &str) -> String {
        self.0
            .get(name)
            .cloned()
            .unwrap_or_else(|| panic!("--{name} is required"))
    }

    fn num(&self, name: &str, default: u64) -> u64 {
        self.0
            .get(name)
            .map_or(default, |v| v.parse().expect("a number"))
    }
}

fn main() -> Result<()> {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench`; the mode is the first word that is no flag.
    let Some(at) = raw
        .iter()
        .position(|a| !a.starts_with("--") && a != "--bench")
    else {
        eprintln!("usage: watch fleet|idle|wake [--flag value]… (see scripts/bench-watch.sh)");
        return Ok(());
    };
    let args = Args::parse(&raw[at + 1..]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match raw[at].as_str() {
        "fleet" => runtime.block_on(fleet(&args)),
        "idle" => runtime.block_on(idle(&args)),
        "wake" => runtime.block_on(wake(&args)),
        other => Err(format!("unknown mode {other}").into()),
    }
}

/// One release prepared by the script: the signed document and what it makes clients serve.
struct Release {
    document: String,
    signature: String,
    /// SHA-256 of the sealed pack the document points every client at.
    serves: String,
}

/// `DIR/release-N.json`, `.json.minisig` and `.serves`, for N = 1, 2, … as long as they exist.
fn releases(dir: &Path) -> Result<Vec<Release>> {
    let mut out = Vec::new();
    for n in 1.. {
        let doc = dir.join(format!("release-{n}.json"));
        if !doc.exists() {
            break;
        }
        out.push(Release {
            document: std::fs::read_to_string(&doc)?,
            signature: std::fs::read_to_string(doc.with_extension("json.minisig"))?,
            serves: std::fs::read_to_string(doc.with_extension("serves"))?
                .trim()
                .to_string(),
        });
    }
    Ok(out)
}

async fn publish(http: &reqwest::Client, server: &str, token: &str, r: &Release) -> Result<()> {
    let body = serde_json::json!({"document": r.document, "signature": r.signature});
    let response = http
        .put(format!("{server}/v1/channels/stable"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await?;
    if !response.status().is_success() {
        return Err(format!("publish: {} {}", response.status(), response.text().await?).into());
    }
    Ok(())
}

/// A gauge from packd's `/metrics`.
async fn gauge(http: &reqwest::Client, server: &str, name: &str) -> Result<f64> {
    let text = http
        .get(format!("{server}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0))
}

async fn until_watchers(http: &reqwest::Client, server: &str, n: usize) -> Result<Duration> {
    let started = Instant::now();
    while gauge(http, server, "packd_watchers").await? as usize != n {
        if started.elapsed() > Duration::from_secs(300) {
            return Err(format!("packd never held {n} watches").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(started.elapsed())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// N clients watching; each release in turn, timed until every client serves it.
async fn fleet(args: &Args) -> Result<()> {
    let server = args.get("server");
    let token = args.get("token");
    let config = PathBuf::from(args.get("config"));
    let caches = PathBuf::from(args.get("caches"));
    let n = args.num("clients", 1000) as usize;
    let releases = releases(Path::new(&args.get("releases")))?;
    let ticks_per_sec = args.num("clk-tck", 100) as f64;
    let http = reqwest::Client::new();
    let (first, rounds) = releases.split_first().ok_or("no releases")?;

    publish(&http, &server, &token, first).await?;
    let started = Instant::now();
    let version: semver::Version = "1.0.0".parse()?;
    let mut clients = Vec::with_capacity(n);
    for i in 0..n {
        let config = ClientConfig::load(&config, caches.join(format!("c{i}")), version.clone())?;
        clients.push(Arc::new(Client::new(config)?));
    }
    // Every client on the first release, a few at a time, before anyone watches.
    let next = Arc::new(AtomicUsize::new(0));
    let mut fillers = Vec::new();
    for _ in 0..8 {
        let (clients, next) = (clients.clone(), next.clone());
        fillers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(c) = clients.get(i) else { break };
                c.refresh_now().await.expect("the first refresh");
            }
        }));
    }
    for f in fillers {
        f.await?;
    }
    assert!(
        clients
            .iter()
            .all(|c| c.store().capture().sha256() == first.serves)
    );
    eprintln!(
        "{n} clients on the first release in {}",
        ms(started.elapsed())
    );
    let schedules: Vec<_> = clients
        .iter()
        .map(|c| pack_client::watch::spawn(c.clone()).expect("watching"))
        .collect();
    let took = until_watchers(&http, &server, n).await?;
    eprintln!("{n} watches held after {}", ms(took));

    // Bare watchers beside the clients: when packd's answers went out, apart from the
    // clients' refreshes (all of which share this process's CPU, as real devices do not).
    let probes = 20;
    let addr = server.trim_start_matches("http://").to_string();
    let me = std::process::id();
    println!("release -> {n} watching clients serving it (one process, {n} caches)");
    println!(
        "{:<8} {:>10} {:>10} {:>10} {:>10} {:>14}",
        "release", "answered", "p50", "p99", "all", "client CPU"
    );
    let mut all = Vec::new();
    for (round, release) in rounds.iter().enumerate() {
        until_watchers(&http, &server, n).await?;
        // Every watch is settled (not just re-sent) before the next release.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let etag = current_etag(&http, &server).await?;
        let probing: Vec<_> = (0..probes)
            .map(|_| {
                tokio::spawn(watch_until_changed(
                    addr.clone(),
                    "/v1/channels/stable?wait=50".to_string(),
                    etag.clone(),
                ))
            })
            .collect();
        until_watchers(&http, &server, n + probes).await?;
        let (ticks0, _) = proc_usage(me)?;
        let t0 = Instant::now();
        publish(&http, &server, &token, release).await?;
        let mut when: Vec<Option<Duration>> = vec![None; n];
        let mut left = n;
        while left > 0 {
            for (i, c) in clients.iter().enumerate() {
                if when[i].is_none() && c.store().capture().sha256() == release.serves {
                    when[i] = Some(t0.elapsed());
                    left -= 1;
                }
            }
            if t0.elapsed() > Duration::from_secs(120) {
                return Err(format!("{left} clients never served release {}", round + 2).into());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let (ticks1, _) = proc_usage(me)?;
        let mut answered = Duration::ZERO;
        for p in probing {
            answered = answered.max(p.await?? - t0);
        }
        let mut times: Vec<Duration> = when.into_iter().flatten().collect();
        times.sort();
        let cpu = (ticks1 - ticks0) as f64 / ticks_per_sec;
        println!(
            "{:<8} {:>10} {:>10} {:>10} {:>10} {:>14}",
            round + 2,
            ms(answered),
            ms(percentile(&times, 50.0)),
            ms(percentile(&times, 99.0)),
            ms(*times.last().unwrap()),
            format!("{cpu:.1} s ({:.1} ms each)", cpu * 1000.0 / n as f64)
        );
        all.extend(times);
    }
    all.sort();
    println!(
        "{:<8} {:>10} {:>10} {:>10} {:>10}",
        "all",
        "",
        ms(percentile(&all, 50.0)),
        ms(percentile(&all, 99.0)),
        ms(*all.last().unwrap_or(&Duration::ZERO))
    );
    drop(schedules);
    Ok(())
}

/// Sends one watch (`path` with `If-None-Match: etag`) on `stream` and reads the answer
/// head and any body: whether it was a `200`, and its ETag.
async fn exchange(
    stream: &mut TcpStream,
    addr: &str,
    path: &str,
    etag: &str,
    buf: &mut Vec<u8>,
) -> Result<(bool, Option<String>)> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nIf-None-Match: {etag}\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut have = 0;
    let head_end = loop {
        if have == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let n = stream.read(&mut buf[have..]).await?;
        if n == 0 {
            return Err("packd closed a watch".into());
        }
        have += n;
        if let Some(at) = buf[..have].windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap_or(0));
    while have < head_end + length {
        if have == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let n = stream.read(&mut buf[have..]).await?;
        if n == 0 {
            return Err("packd closed a watch".into());
        }
        have += n;
    }
    // ETags here are quoted lowercase hex, so the lowercased head keeps them intact.
    let tag = head
        .lines()
        .find_map(|l| l.strip_prefix("etag:"))
        .map(|t| t.trim().to_string());
    Ok((head.starts_with("http/1.1 200"), tag))
}

/// A bare watcher that keeps watching for ever, as an idle client does.
async fn watch_forever(addr: String, path: String, mut etag: String) -> Result<()> {
    let mut stream = TcpStream::connect(&addr).await?;
    let mut buf = vec![0u8; 1024];
    loop {
        let (changed, tag) = exchange(&mut stream, &addr, &path, &etag, &mut buf).await?;
        if changed && let Some(tag) = tag {
            etag = tag;
        }
    }
}

/// A bare watcher that watches until the document changes; when its answer came.
async fn watch_until_changed(addr: String, path: String, etag: String) -> Result<Instant> {
    let mut stream = TcpStream::connect(&addr).await?;
    let mut buf = vec![0u8; 1024];
    loop {
        if exchange(&mut stream, &addr, &path, &etag, &mut buf)
            .await?
            .0
        {
            return Ok(Instant::now());
        }
    }
}

/// The live document's ETag as storage holds it now (not a node's answer from memory).
async fn current_etag(http: &reqwest::Client, server: &str) -> Result<String> {
    let r = http
        .get(format!("{server}/v1/channels/stable"))
        .header("cache-control", "no-cache")
        .send()
        .await?;
    Ok(r.headers()
        .get("etag")
        .ok_or("no ETag")?
        .to_str()?
        .to_string())
}

/// `/proc/PID/stat` CPU ticks (user + system) and `/proc/PID/status` VmRSS in KiB.
fn proc_usage(pid: u32) -> Result<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    Ok((ticks, rss))
}

/// N idle watches on one packd; its memory and CPU while it holds them.
async fn idle(args: &Args) -> Result<()> {
    let server = args.get("server");
    let pid: u32 = args.get("pid").parse()?;
    let n = args.num("watchers", 10_000) as usize;
    let window = Duration::from_secs(args.num("window", 30));
    let ticks_per_sec = args.num("clk-tck", 100) as f64;
    let http = reqwest::Client::new();
    let addr = server.trim_start_matches("http://").to_string();
    let etag = current_etag(&http, &server).await?;
    let (_, rss_before) = proc_usage(pid)?;
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        tasks.push(tokio::spawn(watch_forever(
            addr.clone(),
            "/v1/channels/stable?wait=50".to_string(),
            etag.clone(),
        )));
    }
    let took = until_watchers(&http, &server, n).await?;
    let (ticks0, rss_held) = proc_usage(pid)?;
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let (ticks1, rss_after) = proc_usage(pid)?;
    let cpu = (ticks1 - ticks0) as f64 / ticks_per_sec / t0.elapsed().as_secs_f64();
    let held = gauge(&http, &server, "packd_watchers").await?;
    println!("packd holding {n} idle watches (connected in {})", ms(took));
    println!("  RSS before: {:.1} MiB", rss_before as f64 / 1024.0);
    println!(
        "  RSS holding: {:.1} MiB ({:.1} KiB per watch), {:.1} MiB after {}s",
        rss_held as f64 / 1024.0,
        (rss_held.saturating_sub(rss_before)) as f64 / n as f64,
        rss_after as f64 / 1024.0,
        window.as_secs()
    );
    println!(
        "  CPU over {}s: {:.2} % of one core (still held: {held})",
        window.as_secs(),
        cpu * 100.0
    );
    let failed = tasks.iter().filter(|t| t.is_finished()).count();
    for t in &tasks {
        t.abort();
    }
    if held as usize != n {
        return Err(
            format!("only {held} of {n} watches were held to the end ({failed} ended)").into(),
        );
    }
    Ok(())
}

/// Watches on node B, each release published through node A: the time until every watch on
/// B is answered with it.
async fn wake(args: &Args) -> Result<()> {
    let a = args.get("publish-to");
    let b = args.get("watch-on");
    let token = args.get("token");
    let n = args.num("watchers", 100) as usize;
    let releases = releases(Path::new(&args.get("releases")))?;
    let http = reqwest::Client::new();
    let (first, rounds) = releases.split_first().ok_or("no releases")?;
    publish(&http, &a, &token, first).await?;
    let addr = b.trim_start_matches("http://").to_string();
    println!("publish through node A -> {n} watches on node B answered");
    println!("{:<8} {:>10} {:>10}", "release", "median", "slowest");
    let mut all = Vec::new();
    for (round, release) in rounds.iter().enumerate() {
        let etag = current_etag(&http, &b).await?;
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                tokio::spawn(watch_until_changed(
                    addr.clone(),
                    "/v1/channels/stable?wait=30".to_string(),
                    etag.clone(),
                ))
            })
            .collect();
        until_watchers(&http, &b, n).await?;
        // Somewhere within B's poll interval.
        tokio::time::sleep(Duration::from_millis(rand::random_range(0..1000))).await;
        let t0 = Instant::now();
        publish(&http, &a, &token, release).await?;
        let mut times = Vec::with_capacity(n);
        for t in tasks {
            times.push(t.await?? - t0);
        }
        times.sort();
        println!(
            "{:<8} {:>10} {:>10}",
            round + 2,
            ms(percentile(&times, 50.0)),
            ms(*times.last().unwrap())
        );
        all.extend(times);
        until_watchers(&http, &b, 0).await?;
    }
    all.sort();
    println!(
        "{:<8} {:>10} {:>10}   (p99 {})",
        "all",
        ms(percentile(&all, 50.0)),
        ms(*all.last().unwrap_or(&Duration::ZERO)),
        ms(percentile(&all, 99.0))
    );
    Ok(())
}
