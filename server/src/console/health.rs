//! Failure reports per pack version, and the rule that says a version's failures are
//! *rising*: the signal that the rollout serving it should not be widened (or should be
//! rolled back).
//!
//! A version's failures are rising when, over the **recent window** (the last
//! [`RECENT_DAYS`] UTC days: today and yesterday):
//!
//! 1. at least [`MIN_FAILING_INSTALLS`] installs reported a failure with it (one odd device
//!    is not a trend),
//! 2. those are at least [`MIN_RATE`] of the installs exposed to it, and
//! 3. that rate is at least [`RISE_FACTOR`] times its rate over the days before in the
//!    window (a version with no earlier failures, such as a new rollout, passes).
//!
//! *Exposed* installs are the installs serving the version, or the installs that reported
//! failures with it if there are more: a client that refused a pack (hash mismatch, a
//! missing content key) never serves it, so it is not among the version's installs. Counts
//! are distinct installs per UTC day (an install reporting two reasons counts once), summed
//! over the days of each period: an install reporting on both recent days counts twice,
//! the same way it counts twice among the installs. A version failing at a steady rate for
//! a week is shown as failing, not rising.

use std::collections::BTreeMap;

use pack_protocol::FleetView;

/// UTC days of the recent window: today and yesterday.
pub const RECENT_DAYS: usize = 2;
/// Failing installs in the recent window for a rise.
pub const MIN_FAILING_INSTALLS: u64 = 3;
/// Failing share of the exposed installs in the recent window for a rise.
pub const MIN_RATE: f64 = 0.01;
/// How much higher the recent rate must be than the rate of the days before.
pub const RISE_FACTOR: f64 = 2.0;

/// Failures and installs of one pack (a SHA-256, or `builtin`) over the window.
#[derive(Debug, Clone, PartialEq)]
pub struct PackHealth {
    /// SHA-256 of the sealed pack, `builtin`, or `other`.
    pub pack: String,
    /// Its version, when packd knows the SHA-256 as an uploaded pack.
    pub version: Option<String>,
    /// Distinct installs that reported failures, per day (the view's days).
    pub failing_daily: Vec<u64>,
    /// Distinct installs serving it, per day.
    pub installs_daily: Vec<u64>,
    /// Reports over the window.
    pub reports: u64,
    /// Reports by reason code, most first.
    pub reasons: Vec<(String, u64)>,
    /// Failing share of the exposed installs, recent window and the days before.
    pub recent_rate: f64,
    pub earlier_rate: f64,
    pub recent_failing: u64,
    pub rising: bool,
}

impl PackHealth {
    /// How a person names this pack: its version, `built-in`, or the start of its hash.
    pub fn label(&self) -> String {
        pack_label(&self.pack, self.version.as_deref())
    }
}

/// The name shown for a pack reference of the fleet view.
pub fn pack_label(pack: &str, version: Option<&str>) -> String {
    match (pack, version) {
        (_, Some(version)) => version.to_string(),
        ("builtin", None) => "built-in".to_string(),
        ("other" | "unknown", None) => pack.to_string(),
        (sha, None) => format!("{}…", &sha[..sha.len().min(12)]),
    }
}

fn rate(failing: u64, installs: u64) -> f64 {
    let exposed = failing.max(installs);
    if exposed == 0 {
        0.0
    } else {
        failing as f64 / exposed as f64
    }
}

/// Whether failures with these per-day counts are rising (the module's rule). Returns the
/// recent and earlier rates and the recent failing installs too.
pub fn rising(failing_daily: &[u64], installs_daily: &[u64]) -> (bool, f64, f64, u64) {
    let days = failing_daily.len().min(installs_daily.len());
    let split = days.saturating_sub(RECENT_DAYS);
    let sum = |v: &[u64]| v.iter().copied().fold(0u64, u64::saturating_add);
    let recent_failing = sum(&failing_daily[split..days]);
    let recent_rate = rate(recent_failing, sum(&installs_daily[split..days]));
    let earlier_rate = rate(sum(&failing_daily[..split]), sum(&installs_daily[..split]));
    let rising = recent_failing >= MIN_FAILING_INSTALLS
        && recent_rate >= MIN_RATE
        && recent_rate >= RISE_FACTOR * earlier_rate;
    (rising, recent_rate, earlier_rate, recent_failing)
}

/// Every pack with failure reports in the view, most recent failing installs first.
pub fn health(view: &FleetView) -> Vec<PackHealth> {
    let days = view.days.len();
    let mut by_pack: BTreeMap<&str, PackHealth> = BTreeMap::new();
    for failure in &view.failures {
        let entry = by_pack
            .entry(failure.pack.as_str())
            .or_insert_with(|| PackHealth {
                pack: failure.pack.clone(),
                version: failure.pack_version.as_ref().map(ToString::to_string),
                failing_daily: vec![0; days],
                installs_daily: vec![0; days],
                reports: 0,
                reasons: Vec::new(),
                recent_rate: 0.0,
                earlier_rate: 0.0,
                recent_failing: 0,
                rising: false,
            });
        if failure.daily.len() == days {
            for (sum, n) in entry.failing_daily.iter_mut().zip(&failure.daily) {
                *sum = sum.saturating_add(*n);
            }
        } else if let Some(last) = entry.failing_daily.last_mut() {
            // A packd that did not count per day: the window's count, as if it were today's.
            *last = last.saturating_add(failure.installs);
        }
        entry.reports = entry.reports.saturating_add(failure.reports);
        match entry.reasons.iter_mut().find(|(r, _)| *r == failure.reason) {
            Some((_, n)) => *n = n.saturating_add(failure.reports),
            None => entry
                .reasons
                .push((failure.reason.clone(), failure.reports)),
        }
    }
    // Distinct installs per pack, when packd counted them (an install reporting two
    // reasons, or from two releases, then counts once).
    for failing in &view.failing_packs {
        if let Some(entry) = by_pack.get_mut(failing.pack.as_str())
            && failing.daily.len() == days
        {
            entry.failing_daily.clone_from(&failing.daily);
        }
    }
    for cell in &view.cells {
        if let Some(entry) = by_pack.get_mut(cell.pack.as_str())
            && cell.daily.len() == days
        {
            for (sum, n) in entry.installs_daily.iter_mut().zip(&cell.daily) {
                *sum = sum.saturating_add(*n);
            }
        }
    }
    let mut out: Vec<PackHealth> = by_pack
        .into_values()
        .map(|mut h| {
            h.reasons
                .sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            (h.rising, h.recent_rate, h.earlier_rate, h.recent_failing) =
                rising(&h.failing_daily, &h.installs_daily);
            h
        })
        .collect();
    out.sort_by(|a, b| {
        b.rising
            .cmp(&a.rising)
            .then_with(|| b.recent_failing.cmp(&a.recent_failing))
            .then_with(|| b.reports.cmp(&a.reports))
            .then_with(|| a.pack.cmp(&b.pack))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: [u64; 7] = [0; 7];

    fn today(n: u64) -> [u64; 7] {
        [0, 0, 0, 0, 0, 0, n]
    }

    #[test]
    fn a_new_version_failing_on_a_few_installs_is_rising() {
        let (up, rate, before, failing) = rising(&today(4), &today(10));
        assert!(up);
        assert!((rate - 0.4).abs() < 1e-9);
        assert_eq!((before, failing), (0.0, 4));
    }

    #[test]
    fn one_or_two_failing_installs_are_not_a_rise() {
        assert!(!rising(&today(2), &today(2)).0);
        assert!(rising(&today(3), &today(3)).0);
    }

    #[test]
    fn a_tiny_share_of_a_large_fleet_is_not_a_rise() {
        // 5 of 1,000 installs: 0.5 %, under the 1 % floor.
        assert!(!rising(&today(5), &today(1_000)).0);
        assert!(rising(&today(10), &today(1_000)).0);
    }

    #[test]
    fn a_steady_failure_rate_is_failing_but_not_rising() {
        let failing = [5, 5, 5, 5, 5, 5, 5];
        let installs = [100; 7];
        let (up, recent, earlier, _) = rising(&failing, &installs);
        assert!(!up);
        assert!((recent - earlier).abs() < 1e-9);
        // Doubling over the last two days is a rise.
        let failing = [5, 5, 5, 5, 5, 10, 10];
        assert!(rising(&failing, &installs).0);
    }

    #[test]
    fn installs_that_refused_the_pack_count_as_exposed() {
        // Nobody serves it (each refused it), four reported: every exposed install failed.
        let (up, rate, _, _) = rising(&today(4), &NONE);
        assert!(up);
        assert!((rate - 1.0).abs() < 1e-9);
    }

    #[test]
    fn yesterday_counts_as_recent_so_a_rise_survives_midnight() {
        let failing = [0, 0, 0, 0, 0, 4, 0];
        let installs = [0, 0, 0, 0, 0, 10, 1];
        assert!(rising(&failing, &installs).0);
        let failing = [0, 0, 0, 0, 4, 0, 0];
        assert!(
            !rising(&failing, &installs).0,
            "three days ago is not recent"
        );
    }

    #[test]
    fn a_window_shorter_than_the_recent_days_is_all_recent() {
        assert!(rising(&[4], &[10]).0);
        assert!(!rising(&[], &[]).0);
    }

    fn view(failing_packs: Vec<pack_protocol::FailingPack>) -> FleetView {
        let sha = "a".repeat(64);
        let failure = |reason: &str, n: u64| pack_protocol::FailureCell {
            pack: sha.clone(),
            pack_version: Some("1.1.0".parse().unwrap()),
            reason: reason.into(),
            client_version: "1.4.0".into(),
            reports: n,
            installs: n,
            daily: vec![0, n],
        };
        FleetView {
            channel: "stable".into(),
            days: vec!["2026-11-30".into(), "2026-12-01".into()],
            installs: 20,
            cells: vec![pack_protocol::FleetCell {
                client_version: "1.4.0".into(),
                pack: sha.clone(),
                pack_version: Some("1.1.0".parse().unwrap()),
                installs: 20,
                daily: vec![0, 20],
            }],
            ranges: Vec::new(),
            failures: vec![failure("render_failed", 6), failure("marked_bad", 2)],
            failing_packs,
            overflow: false,
            sources: 1,
            estimate: pack_protocol::EstimateInfo {
                exact_up_to: 512,
                relative_error: 0.016,
            },
        }
    }

    #[test]
    fn an_install_reporting_two_reasons_counts_once_when_packd_says_so() {
        let by_pack = pack_protocol::FailingPack {
            pack: "a".repeat(64),
            pack_version: Some("1.1.0".parse().unwrap()),
            reports: 8,
            installs: 6,
            daily: vec![0, 6],
        };
        let h = &health(&view(vec![by_pack]))[0];
        assert_eq!((h.recent_failing, h.reports), (6, 8));
        assert_eq!(
            h.reasons,
            [("render_failed".into(), 6), ("marked_bad".into(), 2)]
        );
        assert!(h.rising);
        assert_eq!(h.label(), "1.1.0");
        // An older packd without the per-pack counts: the sum, an upper bound.
        assert_eq!(health(&view(Vec::new()))[0].recent_failing, 8);
    }

    #[test]
    fn labels_say_version_builtin_or_hash() {
        assert_eq!(pack_label(&"a".repeat(64), Some("1.2.0")), "1.2.0");
        assert_eq!(pack_label("builtin", None), "built-in");
        assert_eq!(pack_label(&"ab".repeat(32), None), "abababababab…");
        assert_eq!(pack_label("other", None), "other");
    }
}
