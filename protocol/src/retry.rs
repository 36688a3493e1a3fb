//! How every retry loop waits between attempts: exponential backoff with jitter under a hard
//! cap. The client's fetches from packd, the agent's model calls and packd's accept loop all
//! take their waits from one [`Backoff`], so none of them retries in lockstep with its peers
//! (jitter) and none waits longer than it promised (the cap).
//!
//! The schedule comes from the `backon` crate's exponential backoff; this module only fixes
//! the one shape every caller gets. The n-th wait is drawn from `[b, 2b)` with
//! `b = first · 2^(n−1)`, `b` at most half the cap: every wait is under the cap, and clients
//! that all reached the cap still spread over its upper half instead of retrying together.
//! Nothing here sleeps or reads the clock; callers sleep (with `backon::Retryable` or
//! `tokio::time::sleep`).

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

/// A retry schedule: the first wait, the cap, and how many retries follow the first attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first wait before jitter; it doubles on every retry.
    pub first: Duration,
    /// No wait is this long or longer (a zero cap: every wait is zero).
    pub cap: Duration,
    /// Retries after the first attempt; `None` for as many as it takes.
    pub retries: Option<usize>,
}

impl Backoff {
    /// The waits, one per retry. An iterator of durations is what `backon::Retryable::retry`
    /// takes, so `op.retry(backoff.delays())` retries `op` on this schedule.
    pub fn delays(&self) -> Delays {
        let half = self.cap / 2;
        let builder = ExponentialBuilder::new()
            .with_jitter()
            .with_factor(2.0)
            .with_min_delay(self.first.min(half))
            .with_max_delay(half);
        let builder = match self.retries {
            Some(retries) => builder.with_max_times(retries),
            None => builder.without_max_times(),
        };
        Delays {
            inner: builder.build(),
            cap: self.cap,
        }
    }

    /// A wait a server asked for (`Retry-After`), held to the cap.
    pub fn capped(&self, requested: Duration) -> Duration {
        requested.min(self.cap)
    }
}

/// The waits of one [`Backoff`], in order.
#[derive(Debug)]
pub struct Delays {
    inner: <ExponentialBuilder as BackoffBuilder>::Backoff,
    cap: Duration,
}

impl Iterator for Delays {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        // `[b, 2b)` with `b` at most half the cap is under the cap already; the float
        // arithmetic of the jitter must not make it a nanosecond more.
        let wait = self.inner.next()?;
        Some(wait.min(self.cap.saturating_sub(Duration::from_nanos(1))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Duration = Duration::from_millis(1);

    fn backoff(first_ms: u64, cap_ms: u64, retries: Option<usize>) -> Backoff {
        Backoff {
            first: MS * first_ms as u32,
            cap: MS * cap_ms as u32,
            retries,
        }
    }

    #[test]
    fn waits_double_from_the_first_and_each_is_jittered_up_to_twice_its_base() {
        let policy = backoff(100, 60_000, Some(6));
        for _ in 0..50 {
            let waits: Vec<Duration> = policy.delays().collect();
            assert_eq!(waits.len(), 6, "one wait per retry");
            for (n, wait) in waits.iter().enumerate() {
                let base = MS * 100 * 2u32.pow(n as u32);
                // The schedule computes in f32 seconds: allow a microsecond of rounding.
                let slack = Duration::from_micros(1);
                assert!(
                    *wait + slack >= base && *wait < base * 2 + slack,
                    "wait {n} is {wait:?}, expected in [{base:?}, {:?})",
                    base * 2
                );
            }
        }
    }

    #[test]
    fn first_waits_of_many_loops_spread_out() {
        let policy = backoff(1000, 60_000, Some(1));
        let firsts: Vec<Duration> = (0..200).map(|_| policy.delays().next().unwrap()).collect();
        let lowest = firsts.iter().min().unwrap();
        let highest = firsts.iter().max().unwrap();
        assert!(
            *highest - *lowest > MS * 500,
            "200 loops' first waits all lie within {lowest:?}..{highest:?}: no jitter"
        );
    }

    #[test]
    fn at_the_cap_waits_still_spread_over_its_upper_half() {
        let policy = backoff(1000, 10_000, None);
        let late: Vec<Duration> = policy.delays().skip(20).take(200).collect();
        assert_eq!(late.len(), 200, "no retry limit: the waits go on");
        assert!(late.iter().all(|w| *w >= MS * 5000 && *w < MS * 10_000));
        let lowest = late.iter().min().unwrap();
        let highest = late.iter().max().unwrap();
        assert!(
            *highest - *lowest > MS * 2000,
            "waits at the cap all lie within {lowest:?}..{highest:?}: clients would retry together"
        );
    }

    #[test]
    fn no_retries_means_no_waits_and_a_zero_cap_means_zero_waits() {
        assert_eq!(backoff(100, 1000, Some(0)).delays().count(), 0);
        assert!(
            backoff(100, 0, Some(5))
                .delays()
                .all(|w| w == Duration::ZERO)
        );
        assert_eq!(
            backoff(100, 1000, None).capped(Duration::from_secs(3600)),
            MS * 1000
        );
    }

    proptest! {
        #[test]
        fn no_wait_reaches_the_cap(
            first_ms in 0..100_000u64,
            cap_ms in 1..200_000u64,
            retries in 0..40usize,
        ) {
            let policy = backoff(first_ms, cap_ms, Some(retries));
            let waits: Vec<Duration> = policy.delays().collect();
            prop_assert_eq!(waits.len(), retries);
            for wait in waits {
                prop_assert!(wait < policy.cap, "{:?} >= cap {:?}", wait, policy.cap);
            }
        }
    }
}
