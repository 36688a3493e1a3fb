//! A simulated fleet for guarded rollouts: installs that each take the pack the channel
//! document selects for them at a time, make tool calls that fail at the rate of the pack
//! they run times the install's own proneness to errors, and count them the way the agent
//! does (per install, day, pack and release).
//!
//! Installs differ: a fleet [`SimFleet::with_spread`] draws each install's own error rate
//! from a Beta distribution around the pack's rate (concentration 10: widely spread, a few
//! installs failing far more than the rest; 50: moderately; without spread every install
//! fails at the pack's rate).
//!
//! The same fleet runs against a real packd (the tests send its counts as outcome reports)
//! and in-process against the guard's own code over a virtual clock (the benchmark, which
//! runs hundreds of rollouts).

use std::collections::BTreeMap;

use pack_format::{ChannelDocument, EntryTarget};
use pack_protocol::outcomes::{OutcomeCounts, OutcomeReport};
use pack_server::fleet::outcomes::Evidence;
use time::{Date, OffsetDateTime};

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

    /// A standard normal draw (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.unit();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.unit()).cos()
    }

    /// A Gamma(shape, 1) draw: Marsaglia and Tsang's method; below shape 1, boosted by
    /// `U^(1/shape)`.
    pub fn gamma(&mut self, shape: f64) -> f64 {
        if shape < 1.0 {
            return self.gamma(shape + 1.0) * (1.0 - self.unit()).powf(1.0 / shape);
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = 1.0 - self.unit();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v;
            }
        }
    }

    /// A Beta draw with this mean and concentration (`a + b`).
    pub fn beta(&mut self, mean: f64, concentration: f64) -> f64 {
        let a = self.gamma(mean * concentration);
        let b = self.gamma((1.0 - mean) * concentration);
        a / (a + b)
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
    /// Per install: its error rate over the pack's (1 for every install without spread).
    proneness: Vec<f64>,
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
            proneness: vec![1.0; installs],
            counts: vec![BTreeMap::new(); installs],
        }
    }

    /// Installs whose own error rates differ: each install's rate on a pack whose rate is
    /// `mean` is drawn from Beta(mean, `concentration`) (infinite: no spread), and on any
    /// pack it is that pack's rate times the same factor (at most 1).
    pub fn with_spread(mut self, mean: f64, concentration: f64) -> SimFleet {
        if concentration.is_finite() {
            for p in &mut self.proneness {
                *p = self.rng.beta(mean, concentration) / mean;
            }
        }
        self
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
            let p = (error_rate(&served) * self.proneness[i]).min(1.0);
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

    /// What packd's guard would weigh if every install had reported its counts so far, all
    /// of them as counts of `day`.
    pub fn evidence(&self, day: Date) -> Evidence {
        let mut evidence = Evidence::default();
        for (i, per_pack) in self.counts.iter().enumerate() {
            for (served, counts) in per_pack {
                evidence.add(day, &served.pack, &self.release, i as u64, *counts);
            }
        }
        evidence
    }
}
