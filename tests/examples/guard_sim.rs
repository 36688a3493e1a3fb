//! Guarded rollouts over a virtual clock, through the guard's own code
//! (`pack_server::guard::entry_looks` and `pack_server::sequential`), on fleets whose installs
//! differ: each install's own tool-error rate drawn from a Beta distribution around the
//! pack's rate, at concentration 10 (widely spread), 50 and infinity (every install alike).
//! For each: how often an equal pack is halted by mistake, how often and at what percentage
//! a pack with twice the tool-error rate is halted, and whether a better pack ramps to 100 %.
//!
//! `cargo run --release -p promptpack-tests --example guard_sim [ROLLOUTS]` (default 200 per
//! case)

use std::io::Write as _;

use pack_format::guard::{GuardAction, guard_document};
use pack_format::{
    ChannelDocument, ChannelEntry, EntryTarget, Guard, PackRef, Ramp, Rollout, SigningKey, Watch,
    WatchAction,
};
use pack_server::guard::entry_looks;
use pack_server::sequential;
use promptpack_tests::rollout_sim::{Rng, Served, SimFleet};
use time::{Duration, OffsetDateTime};

const INSTALLS: usize = 1000;
/// Tool calls each install makes per virtual hour.
const CALLS_PER_HOUR: u64 = 20;
const BASE_RATE: f64 = 0.05;

fn pack(version: &str, byte: &str) -> PackRef {
    PackRef {
        version: version.parse().unwrap(),
        sha256: byte.repeat(32),
        size: 1,
        schema: 1,
    }
}

fn base_document(start: OffsetDateTime, guard: &SigningKey) -> ChannelDocument {
    let (first, ramp) = Ramp::parse("1%..100%/72h", start).unwrap();
    let range: semver::VersionReq = ">=0.1.0, <0.2.0".parse().unwrap();
    ChannelDocument {
        format: 1,
        channel: "stable".to_string(),
        pack: "builtin".to_string(),
        sequence: 1,
        issued_at: start,
        expires_at: start + Duration::days(30),
        entries: vec![
            ChannelEntry {
                clients: range.clone(),
                target: EntryTarget::Pack(pack("1.3.0", "13")),
                rollout: Some(Rollout {
                    percent: first,
                    salt: "builtin@1.3.0".to_string(),
                    ramp: Some(ramp),
                    watch: Some(Watch {
                        metrics: vec!["tool_error_rate".to_string()],
                        action: WatchAction::Freeze,
                    }),
                }),
            },
            ChannelEntry {
                clients: range,
                target: EntryTarget::Pack(pack("1.2.0", "12")),
                rollout: None,
            },
        ],
        guard: Some(Guard::for_key(guard)),
        restricts: None,
    }
}

/// Runs one rollout: the percentage the guard froze it at, or `None` if it reached 100 %.
fn rollout(
    seed: u64,
    new_rate: f64,
    concentration: f64,
    signer: &SigningKey,
    guard: &SigningKey,
) -> Option<u8> {
    let start = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
    let base = base_document(start, guard);
    let signed = base.sign(signer).unwrap();
    let settings = sequential::Settings::default();
    let mut fleet = SimFleet::new(INSTALLS, seed).with_spread(BASE_RATE, concentration);
    let new_sha = "13".repeat(32);
    let rate = |s: &Served| {
        if s.pack == new_sha {
            new_rate
        } else {
            BASE_RATE
        }
    };
    for hour in 0..=73 {
        let now = start + Duration::hours(hour);
        // The guard looks at what was reported up to the hour before.
        let looks = entry_looks(&base, &fleet.evidence(now.date()), &settings, now);
        if let Some(look) = looks.iter().find(|l| l.metrics.iter().any(|m| m.regressed)) {
            let frozen =
                guard_document(&signed, &base, look.entry, GuardAction::Freeze, now).unwrap();
            return Some(match frozen.restricts.as_ref().unwrap().stops[0] {
                pack_format::Stop::Hold { percent, .. } => percent,
                pack_format::Stop::Revert { .. } => 0,
            });
        }
        fleet.round(&base, now, CALLS_PER_HOUR, &rate);
    }
    None
}

fn main() {
    let rollouts: u64 = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("ROLLOUTS is a number"))
        .unwrap_or(200);
    let signer = SigningKey::generate(None).unwrap().key;
    let guard = SigningKey::generate(None).unwrap().key;
    let settings = sequential::Settings::default();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{INSTALLS} installs, {CALLS_PER_HOUR} tool calls an install an hour, ramp 1%..100%/72h, guard looks hourly, \
         alpha {}, tau {}, min installs {}; {rollouts} rollouts a case",
        settings.alpha, settings.tau, settings.min_installs
    )
    .expect("stdout");
    writeln!(
        out,
        "| installs' spread (Beta concentration) | new pack's tool-error rate | halted | by 10 % | by 25 % | median | highest |"
    )
    .expect("stdout");
    writeln!(out, "|---|---|---|---|---|---|---|").expect("stdout");
    for concentration in [10.0, 50.0, f64::INFINITY] {
        for (case, new_rate) in [
            ("10 % (twice the old)", BASE_RATE * 2.0),
            ("5 % (equal)", BASE_RATE),
            ("2.5 % (better)", BASE_RATE / 2.0),
        ] {
            let mut halted = Vec::new();
            for seed in 0..rollouts {
                if let Some(percent) = rollout(seed + 1, new_rate, concentration, &signer, &guard) {
                    halted.push(percent);
                }
            }
            halted.sort_unstable();
            let median = halted.get(halted.len() / 2).copied();
            let by = |limit: u8| halted.iter().filter(|&&p| p <= limit).count();
            let spread = if concentration.is_finite() {
                format!("{concentration}")
            } else {
                "infinite (alike)".to_string()
            };
            writeln!(
                out,
                "| {spread} | {case} | {} of {rollouts} | {} | {} | {} | {} |",
                halted.len(),
                by(10),
                by(25),
                median.map_or("-".to_string(), |m| format!("{m} %")),
                halted.last().map_or("-".to_string(), |m| format!("{m} %")),
            )
            .expect("stdout");
        }
    }
    forgeries(&mut out, &settings);
}

/// A day's tool calls of one real install (20 an hour).
const DAY_CALLS: u64 = 480;

/// `n` real installs' days at their own rates: Beta around `rate`, concentration 50.
fn real_days(rng: &mut Rng, n: usize, rate: f64) -> Vec<(u64, u64)> {
    (0..n)
        .map(|_| {
            let p = rng.beta(rate, 50.0);
            let errors = (0..DAY_CALLS).filter(|_| rng.unit() < p).count() as u64;
            (errors, DAY_CALLS)
        })
        .collect()
}

/// How many forged installs it takes to bend one look with `n` real installs a side: the
/// fewest that freeze an equal pack (5 % on both sides), and the fewest that hide a doubled
/// rate (10 % against 5 %), each forged install claiming a capped day of calls at whichever
/// error rate serves the forger best. The median over 20 fleets.
fn forgeries(out: &mut impl std::io::Write, settings: &sequential::Settings) {
    let cap = pack_protocol::outcomes::DAY_TOOL_CALLS;
    writeln!(
        out,
        "\nForged installs against one look, real installs' rates Beta(concentration 50), {DAY_CALLS} calls a day each, \
         a forged install a capped day ({cap} calls) at its best rate; median of 20 fleets"
    )
    .expect("stdout");
    writeln!(
        out,
        "| real installs a side | forged installs to freeze an equal pack | forged installs to hide a doubled rate |"
    )
    .expect("stdout");
    writeln!(out, "|---|---|---|").expect("stdout");
    for n in [30usize, 100, 300, 1000] {
        let mut freeze = Vec::new();
        let mut hide = Vec::new();
        for seed in 0..20u64 {
            let mut rng = Rng::new(1000 + seed);
            let old = real_days(&mut rng, n, BASE_RATE);
            let equal = real_days(&mut rng, n, BASE_RATE);
            let doubled = real_days(&mut rng, n, BASE_RATE * 2.0);
            // For each forged rate the outcome turns once as forged installs are added:
            // the fewest found by bisection, then the forger's best rate.
            let fewest = |base: &[(u64, u64)], want: bool| -> u64 {
                [0.0, 0.2, 0.35, 0.5, 0.75, 1.0]
                    .iter()
                    .filter_map(|&rate| {
                        let bent = |k: u64| {
                            let mut new = base.to_vec();
                            let errors = (cap as f64 * rate) as u64;
                            new.extend((0..k).map(|_| (errors, cap)));
                            sequential::look(&new, &old, settings).regressed == want
                        };
                        let (mut low, mut high) = (0, n as u64 * 4);
                        if !bent(high) {
                            return None;
                        }
                        while low < high {
                            let mid = (low + high) / 2;
                            if bent(mid) {
                                high = mid;
                            } else {
                                low = mid + 1;
                            }
                        }
                        Some(low)
                    })
                    .min()
                    .unwrap_or(u64::MAX)
            };
            freeze.push(fewest(&equal, true));
            hide.push(fewest(&doubled, false));
        }
        freeze.sort_unstable();
        hide.sort_unstable();
        writeln!(out, "| {n} | {} | {} |", freeze[10], hide[10]).expect("stdout");
    }
}
