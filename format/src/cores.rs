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

    /// Pins the calling thread, thread `number`, to its core when there are `cores` to pin
    /// to and the kernel agrees: a hold on the core, to let go of when too little work is
    /// left to keep the thread there.
    pub fn hold(cores: Option<&Cores>, number: usize) -> Held<'_> {
        Held(cores.filter(|cores| cores.pin(number).is_ok()))
    }
}

/// A thread's hold on its core ([`Cores::hold`]); none when it was never pinned.
pub struct Held<'c>(Option<&'c Cores>);

impl Held<'_> {
    /// Lets the thread run on every core again, so that it may move to one another thread
    /// leaves idle; only the first call does anything. Refused, the thread stays on its
    /// core, which only costs time.
    pub fn release(&mut self) {
        if let Some(cores) = self.0.take() {
            let _ = cores.unpin();
        }
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
        let on = || {
            let now = sched_getaffinity(None).unwrap();
            (0..CpuSet::MAX_CPU)
                .filter(|&c| now.is_set(c))
                .collect::<Vec<usize>>()
        };
        std::thread::scope(|scope| {
            scope.spawn(|| {
                cores.pin(1).unwrap();
                assert_eq!(on(), [cores.core(1)]);
                cores.unpin().unwrap();
                assert_eq!(on().len(), count);
            });
            // A hold pins the same way, and lets go once.
            scope.spawn(|| {
                let mut held = Cores::hold(Some(&cores), 1);
                assert_eq!(on(), [cores.core(1)]);
                held.release();
                assert_eq!(on().len(), count);
                held.release();
                assert_eq!(on().len(), count);
            });
            // No cores to pin to: the thread is left where it may run.
            scope.spawn(|| {
                Cores::hold(None, 1).release();
                assert_eq!(on().len(), count);
            });
        });
    }
}
