//! The guard's test: is a rolling-out pack worse than the one it replaces on a rate, judged
//! again at every look without the false alarms repeated looks would bring, when the installs
//! differ from each other and their tool calls are not independent trials.
//!
//! The unit is an install. Each side's estimate is the mean of its installs' own rates
//! (every install weighs the same, however much it reports), and its variance is the sample
//! variance of those rates over the number of installs, `s² / k`: a cluster-robust variance
//! with the install as the cluster, which holds whatever the spread of the installs' rates
//! and however correlated the calls of one install are (Cameron and Miller, "A
//! Practitioner's Guide to Cluster-Robust Inference", Journal of Human Resources 50(2),
//! 2015). It is never taken below what the calls would give were they independent (the
//! binomial variance of the mean of rates, with the side's rate pulled half an event away
//! from 0 and 1), so a side whose few installs happen to agree claims no certainty.
//!
//! That variance goes into the mixture sequential probability ratio test (mSPRT) with a normal
//! mixing distribution, as in Johari, Koomen, Pekelis and Walsh, "Peeking at A/B Tests: Why
//! it matters, and what to do about it" (KDD 2017) and Johari, Pekelis and Walsh, "Always
//! Valid Inference: Continuous Monitoring of A/B Tests" (Operations Research 70(3), 2022),
//! who show that a consistent variance estimate plugged into it keeps it valid. For the
//! difference θ = m_new − m_old of the two means, with estimate θ̂ and its variance V (the
//! two sides' variances added), and a normal prior N(0, τ²) on θ:
//!
//! ```text
//! Λ = sqrt(V / (V + τ²)) · exp(τ² θ̂² / (2 V (V + τ²)))
//! ```
//!
//! Under "no difference", the chance that Λ ever reaches 1/α, at any number of looks, is at
//! most α. The guard acts only when the new pack is worse (θ̂ > 0) and Λ ≥ 1/α, which is the
//! same as the lower end of the always-valid confidence sequence
//!
//! ```text
//! θ̂ − sqrt(V (V + τ²) / τ² · (ln((V + τ²) / V) + 2 ln(1/α)))
//! ```
//!
//! being above zero. The variance estimate and the normal approximation want enough installs
//! on both sides, hence a minimum number of distinct installs before any decision: it is also
//! what one sender, who is one install however much it claims, cannot supply alone.

/// What one look found for one metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Look {
    /// The new side's installs with trials, and the mean of their rates.
    pub new: Side,
    /// The old side's.
    pub old: Side,
    /// `m_new − m_old`, or `None` before the minimum number of installs.
    pub difference: Option<f64>,
    /// The always-valid confidence sequence for the difference, at this look.
    pub low: f64,
    pub high: f64,
    /// The mixture likelihood ratio Λ.
    pub ratio: f64,
    /// The new pack is worse: Λ ≥ 1/α and the difference is above zero.
    pub regressed: bool,
}

/// One side of a look: how many installs had trials, and the mean of their rates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Side {
    pub installs: u64,
    /// `None` without installs.
    pub mean: Option<f64>,
    /// The variance of `mean` the test counted with (0 without installs).
    pub variance: f64,
}

/// The settings of the test: fixed before the rollout starts, never fitted to its data.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// The chance of a false halt over the whole rollout, however often the guard looks.
    pub alpha: f64,
    /// The prior's standard deviation on the difference: the size of regression the test
    /// is most sensitive to (0.05 = five percentage points).
    pub tau: f64,
    /// Distinct installs (with at least one trial of the metric) each side needs before any
    /// decision.
    pub min_installs: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            alpha: 0.01,
            tau: 0.05,
            min_installs: 30,
        }
    }
}

/// The mean of the installs' rates and its variance; `installs` is `(events, trials)` per
/// install, installs without trials left out.
pub fn side(installs: &[(u64, u64)]) -> Side {
    let with_trials = || installs.iter().filter(|(_, n)| *n > 0);
    let k = with_trials().count();
    if k == 0 {
        return Side {
            installs: 0,
            mean: None,
            variance: 0.0,
        };
    }
    let kf = k as f64;
    let rate = |&(e, n): &(u64, u64)| e.min(n) as f64 / n as f64;
    let mean = with_trials().map(rate).sum::<f64>() / kf;
    let spread = if k > 1 {
        with_trials().map(|i| (rate(i) - mean).powi(2)).sum::<f64>() / (kf - 1.0) / kf
    } else {
        0.0
    };
    // Were every call independent at the side's rate (pulled half an event off 0 and 1).
    let (events, trials) = with_trials().fold((0u64, 0u64), |(e, n), &(ei, ni)| {
        (e.saturating_add(ei.min(ni)), n.saturating_add(ni))
    });
    let p = (events as f64 + 0.5) / (trials as f64 + 1.0);
    let binomial = with_trials()
        .map(|&(_, n)| p * (1.0 - p) / n as f64)
        .sum::<f64>()
        / (kf * kf);
    Side {
        installs: k as u64,
        mean: Some(mean),
        variance: spread.max(binomial),
    }
}

/// One look at the `new` side's installs against the `old` side's, each `(events, trials)`
/// of one install.
pub fn look(new: &[(u64, u64)], old: &[(u64, u64)], settings: &Settings) -> Look {
    let (new, old) = (side(new), side(old));
    let enough = |s: &Side| s.installs >= settings.min_installs.max(2);
    let (Some(m_new), Some(m_old)) = (new.mean, old.mean) else {
        return undecided(new, old);
    };
    if !enough(&new) || !enough(&old) {
        return undecided(new, old);
    }
    let theta = m_new - m_old;
    let v = new.variance + old.variance;
    let t2 = settings.tau * settings.tau;
    let log_ratio = 0.5 * (v / (v + t2)).ln() + t2 * theta * theta / (2.0 * v * (v + t2));
    let radius =
        (v * (v + t2) / t2 * (((v + t2) / v).ln() + 2.0 * (1.0 / settings.alpha).ln())).sqrt();
    Look {
        new,
        old,
        difference: Some(theta),
        low: theta - radius,
        high: theta + radius,
        ratio: log_ratio.exp(),
        regressed: theta > 0.0 && log_ratio >= (1.0 / settings.alpha).ln(),
    }
}

fn undecided(new: Side, old: Side) -> Look {
    Look {
        new,
        old,
        difference: None,
        low: -1.0,
        high: 1.0,
        ratio: 0.0,
        regressed: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (SplitMix64) with the draws the simulations need, so
    /// each test gives the same answer on every run.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> f64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        }
        fn events(&mut self, trials: u64, p: f64) -> u64 {
            (0..trials).filter(|_| self.next() < p).count() as u64
        }
        fn normal(&mut self) -> f64 {
            let u = 1.0 - self.next();
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.next()).cos()
        }
        /// Marsaglia and Tsang's method; below shape 1, boosted by `U^(1/shape)`.
        fn gamma(&mut self, shape: f64) -> f64 {
            if shape < 1.0 {
                return self.gamma(shape + 1.0) * (1.0 - self.next()).powf(1.0 / shape);
            }
            let d = shape - 1.0 / 3.0;
            let c = 1.0 / (9.0 * d).sqrt();
            loop {
                let x = self.normal();
                let v = (1.0 + c * x).powi(3);
                if v <= 0.0 {
                    continue;
                }
                let u = 1.0 - self.next();
                if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                    return d * v;
                }
            }
        }
        /// Beta with this mean and concentration (`a + b`).
        fn beta(&mut self, mean: f64, concentration: f64) -> f64 {
            let a = self.gamma(mean * concentration);
            let b = self.gamma((1.0 - mean) * concentration);
            a / (a + b)
        }
    }

    #[test]
    fn the_boundary_and_the_confidence_sequence_agree() {
        let s = Settings::default();
        let old: Vec<(u64, u64)> = (0..100).map(|i| (i % 3, 40)).collect();
        for errors in [0, 1, 2, 3, 4, 6, 10] {
            let new: Vec<(u64, u64)> = (0..60).map(|i| ((i % 5) * errors / 2, 40)).collect();
            let l = look(&new, &old, &s);
            assert_eq!(l.regressed, l.low > 0.0, "{errors}: {l:?}");
        }
    }

    #[test]
    fn nothing_is_decided_before_the_minimum_number_of_installs() {
        let s = Settings::default();
        let old = vec![(0, 1000); 100];
        // One install claiming every call failed, however many: one install.
        let l = look(&[(1_000_000, 1_000_000)], &old, &s);
        assert_eq!(l.difference, None);
        assert!(!l.regressed);
        let few = vec![(500, 500); 29];
        assert!(!look(&few, &old, &s).regressed);
        let enough = vec![(500, 500); 30];
        assert!(look(&enough, &old, &s).regressed);
        // Installs without a trial of the metric are not installs of this metric.
        let mut idle = vec![(0, 0); 100];
        idle.push((5, 5));
        assert_eq!(look(&idle, &old, &s).new.installs, 1);
    }

    #[test]
    fn every_install_weighs_the_same_however_much_it_claims() {
        let s = Settings::default();
        let old: Vec<(u64, u64)> = (0..200).map(|i| (u64::from(i % 20 == 0), 20)).collect();
        // 40 installs at 25 % errors against 5 %: one install claiming a million clean
        // calls moves the new side's mean by its share of installs, 1/41.
        let mut new: Vec<(u64, u64)> = (0..40).map(|_| (5, 20)).collect();
        new.push((0, 1_000_000));
        let l = look(&new, &old, &s);
        assert!(l.regressed, "{l:?}");
        assert!((l.new.mean.unwrap() - 0.25 * 40.0 / 41.0).abs() < 1e-9);
    }

    #[test]
    fn installs_that_all_agree_claim_no_certainty_beyond_their_calls() {
        let none = side(&[(0, 10); 40]);
        assert_eq!(none.mean, Some(0.0));
        assert!(none.variance > 0.0);
    }

    /// Installs whose own error rates differ (Beta around 5 %), each making 20 calls a look
    /// on its pack: an equal pack is halted in at most α of rollouts, though it is checked
    /// at every look, and a doubled rate is found, at each spread.
    #[test]
    fn with_installs_that_differ_equal_packs_are_rarely_halted_and_doubled_rates_are_found() {
        let s = Settings::default();
        let mut rng = Rng(7);
        let rollouts = 200;
        for concentration in [10.0, 50.0, f64::INFINITY] {
            let (mut false_halts, mut found) = (0, 0);
            for _ in 0..rollouts {
                for (factor, halts) in [(1.0, &mut false_halts), (2.0, &mut found)] {
                    // 300 installs on the old pack, up to 300 on the new one.
                    let mut own: Vec<f64> = (0..600)
                        .map(|_| {
                            if concentration.is_finite() {
                                rng.beta(0.05, concentration)
                            } else {
                                0.05
                            }
                        })
                        .collect();
                    for p in &mut own[300..] {
                        *p = (*p * factor).min(1.0);
                    }
                    let mut counts = vec![(0u64, 0u64); 600];
                    for step in 0..36 {
                        // The new side grows as a ramp does: 10 more installs a look.
                        let new_installs = 300 + 10 * (step + 3).min(30);
                        for (c, p) in counts.iter_mut().zip(&own).take(new_installs) {
                            c.0 += rng.events(20, *p);
                            c.1 += 20;
                        }
                        if look(&counts[300..new_installs], &counts[..300], &s).regressed {
                            *halts += 1;
                            break;
                        }
                    }
                }
            }
            assert!(
                false_halts <= rollouts / 100,
                "concentration {concentration}: {false_halts} false halts in {rollouts} (alpha 1%)"
            );
            assert!(
                found >= rollouts * 95 / 100,
                "concentration {concentration}: found {found} of {rollouts} doubled rates"
            );
        }
    }
}
