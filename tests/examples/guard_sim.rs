//! A hundred guarded rollouts per case over a virtual clock, through the guard's own code
//! (`pack_server::guard::entry_looks` and `pack_server::sequential`): how often an equal pack is
//! halted by mistake, at what percentage a pack with twice the tool-error rate is halted, and
//! whether a better pack ramps to 100 %.
//!
//! `cargo run --release -p promptpack-tests --example guard_sim [ROLLOUTS]`

use std::io::Write as _;

use pack_format::guard::{GuardAction, guard_document};
use pack_format::{
    ChannelDocument, ChannelEntry, EntryTarget, Guard, PackRef, Ramp, Rollout, SigningKey, Watch,
    WatchAction,
};
use pack_server::guard::entry_looks;
use pack_server::sequential;
use promptpack_tests::rollout_sim::{Served, SimFleet};
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
fn rollout(seed: u64, new_rate: f64, signer: &SigningKey, guard: &SigningKey) -> Option<u8> {
    let start = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
    let base = base_document(start, guard);
    let signed = base.sign(signer).unwrap();
    let settings = sequential::Settings::default();
    let mut fleet = SimFleet::new(INSTALLS, seed);
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
        let looks = entry_looks(&base, &fleet.view("stable"), &settings, now);
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
        .unwrap_or(100);
    let signer = SigningKey::generate(None).unwrap().key;
    let guard = SigningKey::generate(None).unwrap().key;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{INSTALLS} installs, {CALLS_PER_HOUR} tool calls an install an hour, ramp 1%..100%/72h, guard looks hourly, \
         alpha {}, tau {}, min trials {}",
        sequential::Settings::default().alpha,
        sequential::Settings::default().tau,
        sequential::Settings::default().min_trials
    )
    .expect("stdout");
    for (case, new_rate) in [
        ("twice the tool-error rate (10% vs 5%)", BASE_RATE * 2.0),
        ("equal tool-error rate (5% vs 5%)", BASE_RATE),
        ("half the tool-error rate (2.5% vs 5%)", BASE_RATE / 2.0),
    ] {
        let mut halted = Vec::new();
        for seed in 0..rollouts {
            if let Some(percent) = rollout(seed + 1, new_rate, &signer, &guard) {
                halted.push(percent);
            }
        }
        halted.sort_unstable();
        let median = halted.get(halted.len() / 2).copied();
        writeln!(
            out,
            "{case}: halted {} of {rollouts}; froze at median {} %, highest {} %",
            halted.len(),
            median.map_or("-".to_string(), |m| m.to_string()),
            halted.last().map_or("-".to_string(), |m| m.to_string()),
        )
        .expect("stdout");
    }
}
