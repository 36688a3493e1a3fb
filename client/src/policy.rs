//! When the client acts on its own: the six-hour refresh and its per-install offset, how long
//! a short-lived process leaves the server alone after a check, how often a long-running
//! process looks at its outcome counts and file view, how often outcome counts go out (and
//! the bounds a config may set), and how close together a watch may start refreshes. Plain
//! numbers and functions of them, no I/O: [`crate::schedule`] and [`crate::watch`] run them,
//! [`crate::client`], [`crate::config`] and [`crate::outcomes`] read them.
//!
//! [`refresh`] holds what a refresh does with an answer from packd.

pub mod refresh;

use std::time::Duration;

/// How often a client checks.
pub const INTERVAL: Duration = Duration::from_secs(6 * 60 * 60);

/// After a check, short-lived processes start no background refresh for this long, even
/// when the check failed.
pub const RETRY_AFTER: Duration = Duration::from_secs(15 * 60);

/// The least time between the starts of two refreshes a watch triggers.
pub const MIN_REFRESH_GAP: Duration = Duration::from_secs(1);

/// How often a long-running process sends the failure reports queued in it (a template that
/// failed to render): within seconds, not at the next refresh, and a burst (a render
/// failure, then the bad mark) together.
pub const REPORTS_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// A row of outcome counts of today goes out at most this often, and only when it changed
/// since (`[updates] outcomes_interval_secs`; see [`crate::outcomes`]).
pub const PROVISIONAL_INTERVAL: Duration = Duration::from_secs(60 * 60);
/// The shortest and longest provisional interval a config may ask for.
pub const MIN_PROVISIONAL_INTERVAL: Duration = Duration::from_secs(60);
pub const MAX_PROVISIONAL_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);

/// This install's spread on top of the interval for background refreshes, in seconds
/// (under an hour).
pub fn spread(install_id: &str) -> u64 {
    offset_for(install_id) % 3600
}

/// The cron expression (`sec min hour day month weekday`) for an install: every six hours,
/// offset within the six-hour window by the install id.
pub fn cron_for(install_id: &str) -> String {
    let offset = offset_for(install_id) % (6 * 60 * 60);
    let (hour, minute, second) = (offset / 3600, offset / 60 % 60, offset % 60);
    format!("{second} {minute} {hour}/6 * * *")
}

/// How often a long-running process syncs and sweeps the file view: half its grace
/// period, between 1 s and a minute, so a directory goes at most that long after its grace.
pub fn files_sweep_interval(grace: Duration) -> Duration {
    (grace / 2).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

/// How often a long-running process looks for outcome counts to send: a twelfth of the
/// provisional interval, between 5 s and 5 minutes, so a row goes out at most that long
/// after it may. Each look is one `stat` when nothing is due.
pub fn outcomes_check_interval(interval: Duration) -> Duration {
    (interval / 12).clamp(Duration::from_secs(5), Duration::from_secs(5 * 60))
}

/// A stable spread value from the install id (FNV-1a; no secrecy needed).
fn offset_for(install_id: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in install_id.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}
