//! Which core each accept loop runs on (`pin_accept_loops`, on by default).
//!
//! packd runs one accept loop per core it may use, each a thread with its own listening
//! socket on the one port. Left to the scheduler, a connection's packets are handled on one
//! core and its loop often runs on the other, so every request wakes a thread across cores.
//! Pinned, loop `i` runs on the `i`-th core packd may use, and its socket asks the kernel
//! (`SO_INCOMING_CPU`, which picks among the port's sockets by it since Linux 6.2) for the
//! connections whose packets that core handles: a request is read, answered and written on
//! one core. On 2 cores this took a revalidation's CPU from 5.6 µs to 3.4-3.6 µs and its
//! rate from 1.26-1.35x nginx's to 1.87-2.28x (BENCHMARKS.md).
//!
//! Loops are pinned only when there is one per core packd may use (its CPU affinity): with
//! fewer, because of a CPU quota, pinning would hold them to some cores while the others sit
//! idle. Threads a loop starts for blocking work (file reads) may run on every core, as
//! before. Where the kernel refuses any of it, the loop runs unpinned and says so once.
//!
//! Steering follows where the kernel handles a connection's packets, which is where the
//! network card's queues deliver them. A card with one queue (and no packet steering in the
//! kernel) delivers every packet on one core, and every connection would go to that core's
//! loop while the others idle. So the loops count what each accepts ([`Spread`]): a loop that
//! took far more than its share of the last 65,536 to 131,072 connections stops asking for
//! its core's connections, and from then on the kernel spreads them by address as it does
//! without steering.

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};

/// Where the accept loops run: the cores packd may use, in order, one loop on each.
#[derive(Clone)]
pub(crate) struct Placement {
    cores: Cores,
}

/// Why the loops were left to the scheduler.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unpinned {
    /// One loop: nothing to place.
    OneLoop,
    /// Fewer loops than cores packd may use (a CPU quota).
    FewerLoops { loops: usize, cores: usize },
    /// The kernel would not say which cores packd may use.
    Unknown(String),
}

/// The cores packd may use (its CPU affinity), one accept loop on each, in order.
#[derive(Clone)]
struct Cores {
    cores: Vec<usize>,
    all: CpuSet,
}

impl Cores {
    fn for_threads(loops: usize) -> Result<Cores, Unpinned> {
        let all = sched_getaffinity(None).map_err(|e| Unpinned::Unknown(e.to_string()))?;
        let cores: Vec<usize> = (0..CpuSet::MAX_CPU).filter(|&c| all.is_set(c)).collect();
        if loops <= 1 {
            return Err(Unpinned::OneLoop);
        }
        if loops != cores.len() {
            return Err(Unpinned::FewerLoops {
                loops,
                cores: cores.len(),
            });
        }
        Ok(Cores { cores, all })
    }

    fn core(&self, number: usize) -> usize {
        self.cores[number % self.cores.len()]
    }

    fn pin(&self, number: usize) -> io::Result<()> {
        let mut only = CpuSet::new();
        only.set(self.core(number));
        Ok(sched_setaffinity(None, &only)?)
    }

    fn unpin(&self) -> io::Result<()> {
        Ok(sched_setaffinity(None, &self.all)?)
    }
}

impl std::fmt::Display for Unpinned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unpinned::OneLoop => write!(f, "one accept loop"),
            Unpinned::FewerLoops { loops, cores } => write!(
                f,
                "{loops} accept loops for {cores} cores (a CPU quota): pinned loops would \
                 leave cores idle"
            ),
            Unpinned::Unknown(err) => write!(f, "the cores this process may use: {err}"),
        }
    }
}

impl Placement {
    /// The placement of `loops` accept loops, from this thread's CPU affinity (the process's
    /// unless it was changed).
    pub(crate) fn for_loops(loops: usize) -> Result<Placement, Unpinned> {
        Ok(Placement {
            cores: Cores::for_threads(loops)?,
        })
    }

    /// The core loop `number` runs on.
    pub(crate) fn core(&self, number: usize) -> usize {
        self.cores.core(number)
    }

    /// Pins the calling thread to loop `number`'s core and has `socket` take the
    /// connections whose packets that core handles.
    pub(crate) fn pin(&self, number: usize, socket: impl AsFd) -> io::Result<()> {
        self.cores.pin(number)?;
        let steered = u32::try_from(self.core(number))
            .map_err(io::Error::other)
            .and_then(|core| Ok(rustix::net::sockopt::set_socket_incoming_cpu(socket, core)?));
        if let Err(err) = steered {
            // A pinned loop whose socket takes any connection still answers it.
            self.unpin();
            return Err(err);
        }
        Ok(())
    }

    /// Has `socket` no longer ask for its core's connections: the kernel spreads them over
    /// the port's sockets by address.
    pub(crate) fn unsteer(socket: impl AsFd) -> io::Result<()> {
        // -1: no core.
        Ok(rustix::net::sockopt::set_socket_incoming_cpu(
            socket,
            u32::MAX,
        )?)
    }

    /// Lets the calling thread run on every core packd may use again (a thread started by
    /// a pinned one inherits its core).
    pub(crate) fn unpin(&self) {
        if let Err(err) = self.cores.unpin() {
            tracing::warn!(%err, "a thread could not leave its accept loop's core");
        }
    }
}

/// How many connections each loop accepted, shared by the loops.
pub(crate) struct Spread {
    accepted: Vec<Count>,
    /// Every loop's count when the window last moved on, and when it moved on before that.
    marks: Mutex<Marks>,
}

/// One loop's count, on a cache line of its own: each loop adds to its count on its own core
/// at every connection, and counts side by side would move their line between the cores
/// each time, the cross-core traffic that pinning the loops avoids.
#[repr(align(128))]
struct Count(AtomicU64);

struct Marks {
    last: Vec<u64>,
    before: Vec<u64>,
}

/// A loop checks its share every this many connections it accepts.
const CHECK_EVERY: u64 = 256;

/// The shares are of the connections since the window last moved on but one: between
/// `WINDOW` and twice as many, or every one since the start while there were fewer. So a
/// change long after the start (a card with one queue in place of one with many) shows
/// within a few windows, where shares since the start would need as many connections again
/// as came before it.
const WINDOW: u64 = 65_536;

impl Spread {
    pub(crate) fn new(loops: usize) -> Spread {
        Spread {
            accepted: (0..loops).map(|_| Count(AtomicU64::new(0))).collect(),
            marks: Mutex::new(Marks {
                last: vec![0; loops],
                before: vec![0; loops],
            }),
        }
    }

    /// Counts a connection loop `number` accepted. True when steering has drawn it far more
    /// than its share of every loop's connections in the window: over twice its share (with
    /// two loops, over three quarters of them all).
    pub(crate) fn crowded(&self, number: usize) -> bool {
        let mine = self.accepted[number].0.fetch_add(1, Ordering::Relaxed) + 1;
        if !mine.is_multiple_of(CHECK_EVERY) {
            return false;
        }
        // The counts are read under the lock, after every mark was taken: none is below its
        // mark (they only grow).
        let mut marks = self.marks.lock().unwrap_or_else(PoisonError::into_inner);
        let now: Vec<u64> = self
            .accepted
            .iter()
            .map(|count| count.0.load(Ordering::Relaxed))
            .collect();
        if now.iter().sum::<u64>() - marks.last.iter().sum::<u64>() >= WINDOW {
            marks.before = std::mem::replace(&mut marks.last, now.clone());
        }
        let since = |n: usize| now[n] - marks.before[n];
        let all: u64 = (0..now.len()).map(since).sum();
        let most = (2.0 / self.accepted.len() as f64).min(0.75);
        since(number) as f64 > most * all as f64
    }
}

#[cfg(test)]
mod tests {
    use rustix::thread::{CpuSet, sched_getaffinity};

    use super::*;

    /// Loop `number` of `spread` accepts `n` connections; whether it was crowded at any.
    fn accept(spread: &Spread, number: usize, n: u64) -> bool {
        (0..n).fold(false, |crowded, _| spread.crowded(number) | crowded)
    }

    #[test]
    fn a_loop_that_takes_most_connections_is_crowded() {
        let two = Spread::new(2);
        // Balanced: never.
        for _ in 0..4 {
            assert!(!accept(&two, 0, 128) & !accept(&two, 1, 128));
        }
        // From now on every connection goes to loop 1: at 1,280 of 1,792 it has under three
        // quarters, at 1,536 of 2,048 exactly three quarters, at 1,792 of 2,304 more.
        assert!(!accept(&two, 1, 768));
        assert!(accept(&two, 1, 512));

        let eight = Spread::new(8);
        for _ in 0..3 {
            for number in 0..8 {
                assert!(!accept(&eight, number, 100));
            }
        }
        // Then two loops of eight take everything (a card with two queues): over a quarter
        // of all each, twice their share.
        let mut crowded = false;
        for _ in 0..4 {
            crowded |= accept(&eight, 0, 250) | accept(&eight, 1, 250);
        }
        assert!(crowded);
    }

    #[test]
    fn a_loop_crowded_long_after_the_start_is_found_within_a_few_windows() {
        let two = Spread::new(2);
        // A long balanced run: twenty windows' worth.
        for _ in 0..(20 * WINDOW / 256) {
            assert!(!accept(&two, 0, 128) & !accept(&two, 1, 128));
        }
        // Then every connection goes to loop 1. Shares since the start would need another
        // twenty windows; those of the window, three at most.
        assert!(accept(&two, 1, 3 * WINDOW));
    }

    #[test]
    fn a_pinned_thread_runs_on_its_core_and_its_children_may_leave_it() {
        let all = sched_getaffinity(None).unwrap();
        // One loop per core this process may use; the last loop, on the last core.
        let loops = all.count() as usize;
        let placement = match Placement::for_loops(loops) {
            Ok(placement) => placement,
            Err(why) => {
                assert_eq!(why, Unpinned::OneLoop);
                promptpack_harness::skipped("one core: no loop is pinned");
                return;
            }
        };
        let last = (0..CpuSet::MAX_CPU).rev().find(|&c| all.is_set(c)).unwrap();
        assert_eq!(placement.core(loops - 1), last);
        let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                placement.pin(loops - 1, &socket).unwrap();
                let mine = sched_getaffinity(None).unwrap();
                assert_eq!(mine.count(), 1);
                assert!(mine.is_set(last));
                assert_eq!(
                    rustix::net::sockopt::socket_incoming_cpu(&socket).unwrap(),
                    last as u32
                );
                // A thread it starts is on its core until it leaves.
                std::thread::scope(|inner| {
                    inner.spawn(|| {
                        assert_eq!(sched_getaffinity(None).unwrap().count(), 1);
                        placement.unpin();
                        assert_eq!(sched_getaffinity(None).unwrap().count(), all.count());
                    });
                });
            });
        });
        Placement::unsteer(&socket).unwrap();
        assert_eq!(
            rustix::net::sockopt::socket_incoming_cpu(&socket).unwrap(),
            u32::MAX
        );
        // The test's own thread was never pinned.
        assert_eq!(sched_getaffinity(None).unwrap().count(), all.count());
    }
}
