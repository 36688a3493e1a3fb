//! Threads pinned one per core: thread `i` of `n` on the `i`-th core the process may use
//! (its CPU affinity), for `packer build`'s compressing threads and packd's accept loops.
//!
//! Left to the scheduler, two busy threads on a 2-core machine where another program keeps
//! one core busy are often placed together on the free core — two threads there against one
//! on the other looks balanced — each at half speed. Pinned, one has the free core and the
//! other half of the busy one. Threads are pinned only when there is one per core the
//! process may use: with fewer (a CPU quota makes `available_parallelism` smaller than the
//! affinity), pinning would hold them to some cores while the others sit idle.

use std::io;

use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};

/// The cores `n` threads run on, one each, in the order of the process's CPU affinity.
#[derive(Clone)]
pub struct Cores {
    cores: Vec<usize>,
    all: CpuSet,
}

/// Why threads are left to the scheduler.
#[derive(Debug, PartialEq, Eq)]
pub enum Unpinned {
    /// One thread: nothing to place.
    One,
    /// Fewer threads than cores the process may use (a CPU quota).
    Fewer { threads: usize, cores: usize },
    /// The kernel would not say which cores the process may use.
    Unknown(String),
}

impl Cores {
    /// The cores of `threads` threads, from the calling thread's CPU affinity (the
    /// process's unless it was changed).
    pub fn for_threads(threads: usize) -> Result<Cores, Unpinned> {
        let all = sched_getaffinity(None).map_err(|e| Unpinned::Unknown(e.to_string()))?;
        Cores::from_affinity(threads, all)
    }

    /// The cores of `threads` threads when the process may use the cores in `all`.
    pub fn from_affinity(threads: usize, all: CpuSet) -> Result<Cores, Unpinned> {
        let cores: Vec<usize> = (0..CpuSet::MAX_CPU).filter(|&c| all.is_set(c)).collect();
        if threads <= 1 {
            return Err(Unpinned::One);
        }
        if threads != cores.len() {
            return Err(Unpinned::Fewer {
                threads,
                cores: cores.len(),
            });
        }
        Ok(Cores { cores, all })
    }

    /// The core thread `number` runs on.
    pub fn core(&self, number: usize) -> usize {
        self.cores[number % self.cores.len()]
    }

    /// Pins the calling thread, thread `number`, to its core.
    pub fn pin(&self, number: usize) -> io::Result<()> {
        let mut only = CpuSet::new();
        only.set(self.core(number));
        Ok(sched_setaffinity(None, &only)?)
    }

    /// Lets the calling thread run on every core the process may use again (a thread
    /// started by a pinned one inherits its core).
    pub fn unpin(&self) -> io::Result<()> {
        Ok(sched_setaffinity(None, &self.all)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(cores: &[usize]) -> CpuSet {
        let mut set = CpuSet::new();
        for &c in cores {
            set.set(c);
        }
        set
    }

    #[test]
    fn threads_are_placed_on_the_cores_the_process_may_use_in_order() {
        let cores = Cores::from_affinity(3, set(&[1, 4, 7])).unwrap();
        assert_eq!((0..3).map(|n| cores.core(n)).collect::<Vec<_>>(), [1, 4, 7]);
    }

    #[test]
    fn fewer_threads_than_cores_or_one_thread_are_left_to_the_scheduler() {
        assert_eq!(
            Cores::from_affinity(2, set(&[0, 1, 2, 3])).err(),
            Some(Unpinned::Fewer {
                threads: 2,
                cores: 4
            })
        );
        assert_eq!(
            Cores::from_affinity(1, set(&[0])).err(),
            Some(Unpinned::One)
        );
    }

    #[test]
    fn a_pinned_thread_runs_on_its_core_until_it_is_unpinned() {
        let all = sched_getaffinity(None).unwrap();
        let count = (0..CpuSet::MAX_CPU).filter(|&c| all.is_set(c)).count();
        let Ok(cores) = Cores::from_affinity(count, all) else {
            // One core: nothing to pin. Said in the line the test script counts as a skip.
            use std::io::Write as _;
            let _ = std::io::stderr().write_all(
                b"\nSKIPPED: cores::tests::a_pinned_thread_runs_on_its_core_until_it_is_unpinned \
                  (one core)\n",
            );
            return;
        };
        std::thread::scope(|scope| {
            scope.spawn(|| {
                cores.pin(1).unwrap();
                let now = sched_getaffinity(None).unwrap();
                let on: Vec<usize> = (0..CpuSet::MAX_CPU).filter(|&c| now.is_set(c)).collect();
                assert_eq!(on, [cores.core(1)]);
                cores.unpin().unwrap();
                let now = sched_getaffinity(None).unwrap();
                assert_eq!(
                    (0..CpuSet::MAX_CPU).filter(|&c| now.is_set(c)).count(),
                    count
                );
            });
        });
    }
}
