//! Bounds on failure reports and outcome counts (one limiter each), per node: how many one
//! install may send per hour, how many one network address may send per hour (whatever
//! install hashes it names, which cost nothing to make up), how many the node takes per
//! second from everyone, and how many installs and addresses it keeps count of. Clients rate
//! themselves far below these (docs/CLIENT.md); these only stop a misbehaving or hostile
//! sender from filling storage or the node's memory, or from posing as many installs.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::ApiError;

/// Installs whose hourly count a node keeps. Past it, reports from installs not yet counted
/// this hour are refused until the hour turns (about 80 bytes each: 8 MiB at most).
pub const MAX_TRACKED_INSTALLS: usize = 100_000;

/// Addresses whose hourly count a node keeps, likewise (about 60 bytes each).
pub const MAX_TRACKED_ADDRESSES: usize = 100_000;

const HOUR: Duration = Duration::from_secs(3600);
const SECOND: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct Windows {
    hour_start: Instant,
    per_install: HashMap<String, u32>,
    per_address: HashMap<IpAddr, u32>,
    second_start: Instant,
    in_second: u32,
}

/// Fixed-window counters: per install and per address per hour, and for the whole node per
/// second.
#[derive(Debug)]
pub struct ReportLimiter {
    /// What is counted, for messages: `failure reports`, `outcome reports`.
    what: &'static str,
    per_install_per_hour: u32,
    per_address_per_hour: u32,
    per_second: u32,
    windows: Mutex<Windows>,
}

impl ReportLimiter {
    pub fn new(
        what: &'static str,
        per_install_per_hour: u32,
        per_address_per_hour: u32,
        per_second: u32,
    ) -> Self {
        let now = Instant::now();
        ReportLimiter {
            what,
            per_install_per_hour,
            per_address_per_hour,
            per_second,
            windows: Mutex::new(Windows {
                hour_start: now,
                per_install: HashMap::new(),
                per_address: HashMap::new(),
                second_start: now,
                in_second: 0,
            }),
        }
    }

    /// Takes one report from `install` sent from `address` (`None`: not known, no address
    /// limit), or says why not and when to come back.
    pub fn check(&self, install: &str, address: Option<IpAddr>) -> Result<(), ApiError> {
        self.check_at(install, address.map(sender), Instant::now())
    }

    fn check_at(
        &self,
        install: &str,
        address: Option<IpAddr>,
        now: Instant,
    ) -> Result<(), ApiError> {
        let mut w = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        if now.duration_since(w.second_start) >= SECOND {
            w.second_start = now;
            w.in_second = 0;
        }
        if now.duration_since(w.hour_start) >= HOUR {
            w.hour_start = now;
            w.per_install.clear();
            w.per_address.clear();
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
        if let Some(address) = address {
            let tracked = w.per_address.len();
            let count = match w.per_address.get(&address) {
                Some(&count) => count,
                None if tracked >= MAX_TRACKED_ADDRESSES => {
                    return Err(ApiError::RateLimited {
                        reason: format!(
                            "this server has taken {} from {MAX_TRACKED_ADDRESSES} addresses this hour",
                            self.what
                        ),
                        retry_after_secs: hour_left.as_secs().max(1),
                    });
                }
                None => 0,
            };
            if count >= self.per_address_per_hour {
                return Err(ApiError::RateLimited {
                    reason: format!(
                        "{} {} came from this address this hour, the most this server takes \
                         from one address",
                        self.per_address_per_hour, self.what
                    ),
                    retry_after_secs: hour_left.as_secs().max(1),
                });
            }
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
        if let Some(address) = address {
            *w.per_address.entry(address).or_insert(0) += 1;
        }
        Ok(())
    }
}

/// The sender an address stands for: an IPv4 address, or an IPv6 /64 (the block one
/// subscriber gets, in which a sender picks addresses freely). An IPv4 address mapped into
/// IPv6 is the IPv4 address.
fn sender(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut octets = v6.octets();
                octets[8..].fill(0);
                IpAddr::V6(octets.into())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_install_is_held_to_its_hourly_count_and_others_are_not() {
        let limiter = ReportLimiter::new("failure reports", 3, 1000, 1000);
        let t = Instant::now();
        for _ in 0..3 {
            limiter.check_at("a", None, t).unwrap();
        }
        let err = limiter.check_at("a", None, t).unwrap_err();
        assert!(
            matches!(err, ApiError::RateLimited { retry_after_secs, .. } if retry_after_secs > 3000),
            "{err}"
        );
        limiter.check_at("b", None, t).unwrap();
        limiter.check_at("a", None, t + HOUR).unwrap();
    }

    #[test]
    fn one_address_is_held_to_its_hourly_count_whatever_installs_it_names() {
        let limiter = ReportLimiter::new("outcome reports", 100, 3, 1000);
        let t = Instant::now();
        let one: IpAddr = "192.0.2.7".parse().unwrap();
        for install in ["a", "b", "c"] {
            limiter.check_at(install, Some(sender(one)), t).unwrap();
        }
        let err = limiter.check_at("d", Some(sender(one)), t).unwrap_err();
        assert!(
            matches!(&err, ApiError::RateLimited { reason, .. } if reason.contains("address")),
            "{err}"
        );
        // Another address, and the unknown address, are not held by it; the next hour is new.
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        limiter.check_at("d", Some(sender(other)), t).unwrap();
        limiter.check_at("e", None, t).unwrap();
        limiter.check_at("d", Some(sender(one)), t + HOUR).unwrap();
    }

    #[test]
    fn an_ipv6_sender_is_its_slash_64() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(sender(a), sender(b));
        assert_ne!(sender(a), sender(c));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(sender(mapped), "192.0.2.7".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn the_node_takes_at_most_its_rate_a_second() {
        let limiter = ReportLimiter::new("failure reports", 100, 100, 2);
        let t = Instant::now();
        limiter.check_at("a", None, t).unwrap();
        limiter.check_at("b", None, t).unwrap();
        assert!(matches!(
            limiter.check_at("c", None, t),
            Err(ApiError::RateLimited {
                retry_after_secs: 1,
                ..
            })
        ));
        limiter.check_at("c", None, t + SECOND).unwrap();
    }
}
