//! Where a real `packd`'s accept loops run (`pin_accept_loops`, `src/cores.rs`), read from
//! outside through `/proc`: by default each loop is pinned to a core of its own, and a
//! connection is served by the loop on the core its packets arrive on, unless nearly all
//! arrive on one core; threads the loops start for blocking work, and every loop with
//! `pin_accept_loops = false`, may run on every core.

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

/// The threads of process `pid`: thread id and name.
fn threads(pid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let tid: u32 = entry
            .unwrap()
            .file_name()
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        if let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")) {
            out.push((tid, comm.trim_end().to_string()));
        }
    }
    out
}

/// The accept loops' thread ids, by loop number.
fn accept_loops(pid: u32) -> Vec<u32> {
    let mut loops: Vec<(usize, u32)> = threads(pid)
        .into_iter()
        .filter_map(|(tid, name)| Some((name.strip_prefix("packd-accept-")?.parse().ok()?, tid)))
        .collect();
    loops.sort();
    loops.into_iter().map(|(_, tid)| tid).collect()
}

/// The cores thread `tid` of `pid` may run on (`Cpus_allowed_list`, as "0-3,6").
fn cores_of(pid: u32, tid: u32) -> BTreeSet<usize> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim();
    let mut cores = BTreeSet::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((from, to)) => cores.extend(from.parse::<usize>().unwrap()..=to.parse().unwrap()),
            None => {
                cores.insert(part.parse().unwrap());
            }
        }
    }
    cores
}

/// Nanoseconds thread `tid` of `pid` has run (`schedstat`).
fn run_ns(pid: u32, tid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).unwrap();
    stat.split_whitespace().next().unwrap().parse().unwrap()
}

/// `server`'s accept loops once every one has started and placed itself: the loops' thread
/// ids and the cores each may run on, and the cores the process may use.
fn placed_loops(server: &Packd) -> (Vec<(u32, BTreeSet<usize>)>, BTreeSet<usize>) {
    let pid = server.child.id();
    let all = cores_of(pid, pid);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let loops: Vec<_> = accept_loops(pid)
            .into_iter()
            .map(|tid| (tid, cores_of(pid, tid)))
            .collect();
        let log = server.stderr();
        // Pinned: one loop per core, each on its own. Not pinned (a CPU quota): the log
        // says so once the loops are being started.
        let settled = if log.contains("each accept loop pinned to its core") {
            loops.len() == all.len() && loops.iter().all(|(_, cores)| cores.len() == 1)
        } else {
            log.contains("accept loops left to the scheduler") && !loops.is_empty()
        };
        if settled || Instant::now() > deadline {
            return (loops, all);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether packd runs one loop per core it may use; says why the test is skipped if not.
fn one_loop_per_core(server: &Packd, loops: usize, cores: usize) -> bool {
    if cores < 2 {
        skipped(&format!("packd may use {cores} core; pinning needs 2"));
        return false;
    }
    if loops != cores {
        assert!(
            server
                .stderr()
                .contains("accept loops left to the scheduler"),
            "{}",
            server.stderr()
        );
        skipped(&format!(
            "{loops} accept loops for {cores} cores (a CPU quota): packd leaves them unpinned"
        ));
        return false;
    }
    true
}

/// A packd with the default config whose loops are placed.
struct Pinned {
    fx: Fixture,
    server: Packd,
    /// Each loop's thread id and the cores it may run on, by loop number.
    loops: Vec<(u32, BTreeSet<usize>)>,
    /// The cores the process may use.
    all: BTreeSet<usize>,
}

/// A [`Pinned`] packd, or `None` (the test skipped) where packd does not pin its loops.
fn pinned_packd() -> Option<Pinned> {
    let fx = Fixture::new("");
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    let (loops, all) = placed_loops(&server);
    one_loop_per_core(&server, loops.len(), all.len()).then_some(Pinned {
        fx,
        server,
        loops,
        all,
    })
}

/// A [`Pinned`] packd with a pack published on `stable`, and the document's ETag.
async fn published() -> Option<(Pinned, String)> {
    let pinned = pinned_packd()?;
    let pack = pinned.fx.pack("core", "1.0.0", "one");
    let tag = publish_stable(&pinned.fx, &pinned.server, &pack).await;
    Some((pinned, tag))
}

#[test]
fn each_accept_loop_runs_on_a_core_of_its_own() {
    let Some(Pinned {
        fx: _fx,
        server,
        loops,
        all,
    }) = pinned_packd()
    else {
        return;
    };
    // Loop i on the i-th core the process may use.
    let cores: Vec<BTreeSet<usize>> = loops.into_iter().map(|(_, cores)| cores).collect();
    let expected: Vec<BTreeSet<usize>> = all.iter().map(|&c| BTreeSet::from([c])).collect();
    assert_eq!(cores, expected);
    assert!(
        server
            .stderr()
            .contains("each accept loop pinned to its core"),
        "{}",
        server.stderr()
    );
}

#[test]
fn with_pin_accept_loops_false_every_loop_may_run_on_every_core() {
    let fx = Fixture::new("");
    let text = std::fs::read_to_string(&fx.config).unwrap();
    std::fs::write(&fx.config, format!("pin_accept_loops = false\n{text}")).unwrap();
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    let pid = server.child.id();
    let all = cores_of(pid, pid);
    let deadline = Instant::now() + Duration::from_secs(10);
    while accept_loops(pid).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let loops = accept_loops(pid);
    assert!(!loops.is_empty());
    for tid in loops {
        assert_eq!(cores_of(pid, tid), all);
    }
    assert!(!server.stderr().contains("pinned"), "{}", server.stderr());
}

/// `requests` revalidations of `stable` (ETag `tag`) on each of `connections` connections to
/// `server`, one after the other, from a thread pinned to `core`.
fn revalidate_from(core: usize, server: &Packd, tag: &str, connections: usize, requests: usize) {
    let addr = server.addr;
    let request =
        format!("GET /v1/channels/stable HTTP/1.1\r\nHost: packd\r\nIf-None-Match: {tag}\r\n\r\n");
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut only = rustix::thread::CpuSet::new();
            only.set(core);
            rustix::thread::sched_setaffinity(None, &only).unwrap();
            for _ in 0..connections {
                revalidate_on(TcpStream::connect(addr).unwrap(), &request, requests);
            }
        });
    });
}

fn revalidate_on(mut stream: TcpStream, request: &str, requests: usize) {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut head = Vec::new();
    for _ in 0..requests {
        stream.write_all(request.as_bytes()).unwrap();
        head.clear();
        let mut byte = [0u8; 1024];
        while !head.ends_with(b"\r\n\r\n") {
            let n = stream.read(&mut byte).unwrap();
            assert!(n > 0, "packd closed the connection");
            head.extend_from_slice(&byte[..n]);
        }
        assert!(
            head.starts_with(b"HTTP/1.1 304"),
            "{}",
            String::from_utf8_lossy(&head)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_is_served_by_the_loop_on_the_core_its_packets_arrive_on() {
    let Some((pinned, tag)) = published().await else {
        return;
    };
    let (server, loops) = (&pinned.server, &pinned.loops);
    let pid = server.child.id();
    for (tid, cores) in loops {
        let core = *cores.first().unwrap();
        let before: Vec<u64> = loops.iter().map(|(t, _)| run_ns(pid, *t)).collect();
        // Connections the kernel spread by their addresses would reach the other loop too.
        revalidate_from(core, server, &tag, 4, 150);
        let ran: Vec<u64> = loops
            .iter()
            .zip(&before)
            .map(|((t, _), b)| run_ns(pid, *t) - b)
            .collect();
        let (own, others): (Vec<_>, Vec<_>) =
            loops.iter().zip(&ran).partition(|((t, _), _)| t == tid);
        let own = *own[0].1;
        let most_of_others = others.iter().map(|(_, ns)| **ns).max().unwrap_or(0);
        // 600 answers take the serving loop milliseconds; an idle loop wakes for its timers.
        assert!(
            own > 10 * most_of_others.max(1) && own > 1_000_000,
            "from core {core}: the loop there ran {own} ns, the others at most {most_of_others} ns"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_a_pinned_loop_starts_for_file_work_may_run_on_every_core() {
    let Some(Pinned {
        fx, server, all, ..
    }) = pinned_packd()
    else {
        return;
    };
    let pid = server.child.id();
    let before: BTreeSet<u32> = threads(pid).into_iter().map(|(tid, _)| tid).collect();
    // Uploads and blob reads of a data directory are file work, on each loop's blocking
    // threads; several connections reach both loops.
    for n in 0..8 {
        let pack = fx.pack("core", &format!("1.0.{n}"), &format!("pack {n}"));
        assert!(upload(&server, &pack).await.status().is_success());
        let got = client()
            .get(server.url(&format!("/v1/blobs/{}", pack_format::sha256_hex(&pack))))
            .send()
            .await
            .unwrap();
        assert_eq!(got.bytes().await.unwrap().as_ref(), pack.as_slice());
    }
    let started: Vec<(u32, String)> = threads(pid)
        .into_iter()
        .filter(|(tid, _)| !before.contains(tid))
        .collect();
    assert!(!started.is_empty(), "no thread started for the file work");
    for (tid, name) in started {
        assert_eq!(cores_of(pid, tid), all, "thread {tid} ({name})");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_all_arrive_on_one_core_are_spread_over_the_loops() {
    let Some((pinned, tag)) = published().await else {
        return;
    };
    let (server, loops) = (&pinned.server, &pinned.loops);
    // As through a network card with one queue: every connection from one core. Steered,
    // they all go to that core's loop, until it has counted 256 and stops asking for them.
    let core = *loops[0].1.first().unwrap();
    revalidate_from(core, server, &tag, 300, 1);
    let log = server.stderr();
    assert!(
        log.contains("they are spread over the loops by address from now on"),
        "{log}"
    );
    // From then on connections from that core reach the other loops too.
    let pid = server.child.id();
    let others = || -> u64 { loops[1..].iter().map(|(tid, _)| run_ns(pid, *tid)).sum() };
    let before = others();
    revalidate_from(core, server, &tag, 200, 1);
    let ran = others() - before;
    assert!(
        ran > 1_000_000,
        "the other loops ran {ran} ns while 200 connections came from core {core}"
    );
    // Spread by address, no loop takes far more than its share: every loop goes on counting
    // what it accepts, so no other loop stops steering for a share it does not have.
    revalidate_from(core, server, &tag, 2400, 1);
    let log = server.stderr();
    assert_eq!(log.matches("most connections arrive").count(), 1, "{log}");
}
