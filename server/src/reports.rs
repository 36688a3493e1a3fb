//! Bounds on failure reports and outcome counts (one limiter each), per node: how many one install may send per hour, how many the
//! node takes per second from everyone, and how many installs it keeps count of. Clients rate
//! themselves far below these (docs/CLIENT.md); these only stop a misbehaving or hostile
//! sender from filling storage or the node's memory.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::ApiError;

/// Installs whose hourly count a node keeps. Past it, reports from installs not yet counted
/// this hour are refused until the hour turns (about 80 bytes each: 8 MiB at most).
pub const MAX_TRACKED_INSTALLS: usize = 100_000;

const HOUR: Duration = Duration::from_secs(3600);
const SECOND: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct Windows {
    hour_start: Instant,
    per_install: HashMap<String, u32>,
    second_start: Instant,
    in_second: u32,
}

/// Fixed-window counters: per install per hour, and for the whole node per second.
#[derive(Debug)]
pub struct ReportLimiter {
    /// What is counted, for messages: `failure reports`, `outcome reports`.
    what: &'static str,
    per_install_per_hour: u32,
    per_second: u32,
    windows: Mutex<Windows>,
}

impl ReportLimiter {
    pub fn new(what: &'static str, per_install_per_hour: u32, per_second: u32) -> Self {
        let now = Instant::now();
        ReportLimiter {
            what,
            per_install_per_hour,
            per_second,
            windows: Mutex::new(Windows {
                hour_start: now,
                per_install: HashMap::new(),
                second_start: now,
                in_second: 0,
            }),
        }
    }

    /// Takes one report from `install`, or says why not and when to come back.
    pub fn check(&self, install: &str) -> Result<(), ApiError> {
        self.check_at(install, Instant::now())
    }

    fn check_at(&self, install: &str, now: Instant) -> Result<(), ApiError> {
        let mut w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        if now.duration_since(w.second_start) >= SECOND {
            w.second_start = now;
            w.in_second = 0;
        }
        if now.duration_since(w.hour_start) >= HOUR {
            w.hour_start = now;
            w.per_install.clear();
        }
        let hour_left = HOUR.saturating_sub(now.duration_since(w.hour_start));
        if w.in_second >= self.per_second {
            return Err(ApiError::RateLimited {
                reason: format!(
                    "this server takes at most {} {} a second",
                    self.per_second, self.what
                ),
                retry_after_secs: 1,
            });
        }
        let tracked = w.per_install.len();
        let count = match w.per_install.get_mut(install) {
            Some(count) => count,
            None if tracked >= MAX_TRACKED_INSTALLS => {
                return Err(ApiError::RateLimited {
                    reason: format!(
                        "this server has taken {} from {MAX_TRACKED_INSTALLS} installs this hour",
                        self.what
                    ),
                    retry_after_secs: hour_left.as_secs().max(1),
                });
            }
            None => w.per_install.entry(install.to_string()).or_insert(0),
        };
        if *count >= self.per_install_per_hour {
            return Err(ApiError::RateLimited {
                reason: format!(
                    "this install sent {} {} this hour, the most this server takes",
                    self.per_install_per_hour, self.what
                ),
                retry_after_secs: hour_left.as_secs().max(1),
            });
        }
        *count += 1;
        w.in_second += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_install_is_held_to_its_hourly_count_and_others_are_not() {
        let limiter = ReportLimiter::new("failure reports", 3, 1000);
        let t = Instant::now();
        for _ in 0..3 {
            limiter.check_at("a", t).unwrap();
        }
        let err = limiter.check_at("a", t).unwrap_err();
        assert!(
            matches!(err, ApiError::RateLimited { retry_after_secs, .. } if retry_after_secs > 3000),
            "{err}"
        );
        limiter.check_at("b", t).unwrap();
        limiter.check_at("a", t + HOUR).unwrap();
    }

    #[test]
    fn the_node_takes_at_most_its_rate_a_second() {
        let limiter = ReportLimiter::new("failure reports", 100, 2);
        let t = Instant::now();
        limiter.check_at("a", t).unwrap();
        limiter.check_at("b", t).unwrap();
        assert!(matches!(
            limiter.check_at("c", t),
            Err(ApiError::RateLimited {
                retry_after_secs: 1,
                ..
            })
        ));
        limiter.check_at("c", t + SECOND).unwrap();
    }
}
