//! A simulated fleet for guarded rollouts: installs that each take the pack the channel
//! document selects for them at a time, make tool calls that fail at the rate of the pack
//! they run, and count them the way the agent does (per install, day, pack and release).
//!
//! The same fleet runs against a real packd (the tests send its counts as outcome reports)
//! and in-process against the guard's own code over a virtual clock (the benchmark, which
//! runs a hundred rollouts).

use std::collections::BTreeMap;

use pack_format::{ChannelDocument, EntryTarget};
use pack_protocol::outcomes::{
    OutcomeCounts, OutcomeRates, OutcomeReport, OutcomeRow, OutcomesView,
};
use time::OffsetDateTime;

/// SplitMix64: a small deterministic generator, so a seed gives the same fleet every run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What one install runs: a pack's SHA-256 and version, or `builtin`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Served {
    pub pack: String,
    pub version: semver::Version,
}

impl Served {
    pub fn of(target: Option<&EntryTarget>) -> Served {
        match target {
            Some(EntryTarget::Pack(p)) => Served {
                pack: p.sha256.clone(),
                version: p.version.clone(),
            },
            Some(EntryTarget::Builtin) | None => Served {
                pack: "builtin".to_string(),
                version: semver::Version::new(0, 0, 0),
            },
        }
    }
}

pub struct SimFleet {
    pub install_ids: Vec<String>,
    pub release: semver::Version,
    rng: Rng,
    /// Per install: counts per pack served.
    counts: Vec<BTreeMap<Served, OutcomeCounts>>,
}

impl SimFleet {
    pub fn new(installs: usize, seed: u64) -> SimFleet {
        SimFleet {
            install_ids: (0..installs)
                .map(|i| format!("sim-{seed}-install-{i}"))
                .collect(),
            release: semver::Version::new(0, 1, 5),
            rng: Rng::new(seed),
            counts: vec![BTreeMap::new(); installs],
        }
    }

    /// One round at `at`: every install makes `calls` tool calls (one a turn) on what `doc`
    /// selects for it, each failing with `error_rate(pack)`. Gives the share of installs on
    /// each pack.
    pub fn round(
        &mut self,
        doc: &ChannelDocument,
        at: OffsetDateTime,
        calls: u64,
        error_rate: &dyn Fn(&Served) -> f64,
    ) -> BTreeMap<Served, usize> {
        let mut on = BTreeMap::new();
        for (i, id) in self.install_ids.iter().enumerate() {
            let served = Served::of(doc.select(&self.release, id, at));
            let p = error_rate(&served);
            let errors = (0..calls).filter(|_| self.rng.unit() < p).count() as u64;
            let counts = self.counts[i].entry(served.clone()).or_default();
            counts.turns += calls;
            counts.tool_calls += calls;
            counts.tool_errors += errors;
            *on.entry(served).or_default() += 1;
        }
        on
    }

    /// The outcome reports of the installs `which` picks: each install's whole day so far
    /// per pack (a later report replaces an earlier one on packd).
    pub fn reports(
        &self,
        which: impl Fn(usize) -> bool,
        channel: &str,
        day: &str,
    ) -> Vec<(usize, OutcomeReport)> {
        let mut out = Vec::new();
        for (i, per_pack) in self.counts.iter().enumerate().filter(|(i, _)| which(*i)) {
            for (served, counts) in per_pack {
                out.push((
                    i,
                    OutcomeReport {
                        channel: channel.to_string(),
                        day: day.to_string(),
                        pack: served.pack.clone(),
                        pack_name: "builtin".to_string(),
                        pack_version: served.version.clone(),
                        client_version: self.release.clone(),
                        counts: *counts,
                    },
                ));
            }
        }
        out
    }

    /// What packd's merged view would hold if every install had reported: one row per pack.
    pub fn view(&self, channel: &str) -> OutcomesView {
        let mut rows: BTreeMap<Served, (OutcomeCounts, u64)> = BTreeMap::new();
        for per_pack in &self.counts {
            for (served, counts) in per_pack {
                let row = rows.entry(served.clone()).or_default();
                row.0.sum(counts);
                row.1 += 1;
            }
        }
        OutcomesView {
            channel: channel.to_string(),
            days: Vec::new(),
            confidence: pack_protocol::outcomes::CONFIDENCE,
            rows: rows
                .into_iter()
                .map(|(served, (counts, installs))| OutcomeRow {
                    pack: served.pack,
                    pack_name: "builtin".to_string(),
                    pack_version: served.version,
                    client_version: self.release.clone(),
                    installs,
                    reports: installs,
                    counts,
                    rates: OutcomeRates::of(&counts),
                })
                .collect(),
            overflow: false,
            sources: 1,
        }
    }
}
