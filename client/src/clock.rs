//! The wall clock a client decides by: when a channel document expires, how far a signed
//! ramp has grown, when the last check was, which day outcome counts belong to. It is part
//! of the [`crate::ClientConfig`] (`clock`), so a test moves time forward instead of waiting
//! for it. Pauses (retries, the watch's backoff, the refresh deadline) are tokio's timers,
//! which a test pauses with `tokio::time::pause`.

use std::sync::{Arc, Mutex, PoisonError};

use time::OffsetDateTime;

/// Where a client reads the time: the system clock, or a clock a test (or `pack-client`'s
/// test hook) sets.
#[derive(Clone, Default)]
pub struct Clock(Reading);

#[derive(Clone, Default)]
enum Reading {
    #[default]
    System,
    Set(Arc<Mutex<OffsetDateTime>>),
}

impl Clock {
    /// The system clock.
    pub fn system() -> Clock {
        Clock(Reading::System)
    }

    /// A clock that says `at` until it is moved (see [`ManualClock`]).
    pub fn fixed(at: OffsetDateTime) -> Clock {
        ManualClock::new(at).clock()
    }

    pub fn now(&self) -> OffsetDateTime {
        match &self.0 {
            Reading::System => OffsetDateTime::now_utc(),
            Reading::Set(now) => *now.lock().unwrap_or_else(PoisonError::into_inner),
        }
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Reading::System => f.write_str("Clock::system()"),
            Reading::Set(_) => write!(f, "Clock::fixed({})", self.now()),
        }
    }
}

/// A clock that moves only when told to: the client's [`Clock`] in tests.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<OffsetDateTime>>);

impl ManualClock {
    pub fn new(start: OffsetDateTime) -> ManualClock {
        ManualClock(Arc::new(Mutex::new(start)))
    }

    /// The [`Clock`] to give a client: it reads what this clock is set to.
    pub fn clock(&self) -> Clock {
        Clock(Reading::Set(self.0.clone()))
    }

    /// Moves the time forward (or back, with a negative duration).
    pub fn advance(&self, by: time::Duration) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) += by;
    }

    pub fn now(&self) -> OffsetDateTime {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let start = time::macros::datetime!(2026-06-01 12:00 UTC);
        let hand = ManualClock::new(start);
        let clock = hand.clock();
        assert_eq!(clock.now(), start);
        hand.advance(time::Duration::seconds(13));
        assert_eq!(clock.now(), start + time::Duration::seconds(13));
        assert_eq!(Clock::fixed(start).now(), start);
    }
}
