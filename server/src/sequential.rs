//! The guard's test: is a rolling-out pack worse than the one it replaces on a rate, judged
//! again at every look without the false alarms repeated looks would bring.
//!
//! The method is the mixture sequential probability ratio test (mSPRT) with a normal mixing
//! distribution, as in Johari, Koomen, Pekelis and Walsh, "Peeking at A/B Tests: Why it
//! matters, and what to do about it" (KDD 2017) and Johari, Pekelis and Walsh, "Always Valid
//! Inference: Continuous Monitoring of A/B Tests" (Operations Research 70(3), 2022). For the
//! difference θ = p_new − p_old of two rates, with estimate θ̂ and its variance V (the two
//! binomial variances, each over its own trials), and a normal prior N(0, τ²) on θ:
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
//! being above zero. The normal approximation wants enough events on both sides, hence a
//! minimum number of trials before any decision.

/// What one look found for one metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Look {
    /// `p_new − p_old`, or `None` before the minimum sample.
    pub difference: Option<f64>,
    /// The always-valid confidence sequence for the difference, at this look.
    pub low: f64,
    pub high: f64,
    /// The mixture likelihood ratio Λ.
    pub ratio: f64,
    /// The new pack is worse: Λ ≥ 1/α and the difference is above zero.
    pub regressed: bool,
}

/// The settings of the test: fixed before the rollout starts, never fitted to its data.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// The chance of a false halt over the whole rollout, however often the guard looks.
    pub alpha: f64,
    /// The prior's standard deviation on the difference: the size of regression the test
    /// is most sensitive to (0.05 = five percentage points).
    pub tau: f64,
    /// Trials each side needs before any decision.
    pub min_trials: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            alpha: 0.01,
            tau: 0.05,
            min_trials: 300,
        }
    }
}

/// The smallest variance one side counts with, so a side with no events yet (p̂ = 0) does
/// not claim a certainty it cannot have.
fn side_variance(events: u64, trials: u64) -> f64 {
    let n = trials as f64;
    // Half an event of either kind: the estimate pulled away from 0 and 1.
    let p = (events as f64 + 0.5) / (n + 1.0);
    p * (1.0 - p) / n
}

/// One look at `new` (events, trials) against `old` (events, trials).
pub fn look(new: (u64, u64), old: (u64, u64), settings: &Settings) -> Look {
    let ((new_events, new_trials), (old_events, old_trials)) = (new, old);
    if new_trials < settings.min_trials.max(1) || old_trials < settings.min_trials.max(1) {
        return Look {
            difference: None,
            low: -1.0,
            high: 1.0,
            ratio: 0.0,
            regressed: false,
        };
    }
    let rate = |events: u64, trials: u64| events.min(trials) as f64 / trials as f64;
    let theta = rate(new_events, new_trials) - rate(old_events, old_trials);
    let v = side_variance(new_events, new_trials) + side_variance(old_events, old_trials);
    let t2 = settings.tau * settings.tau;
    let log_ratio = 0.5 * (v / (v + t2)).ln() + t2 * theta * theta / (2.0 * v * (v + t2));
    let radius =
        (v * (v + t2) / t2 * (((v + t2) / v).ln() + 2.0 * (1.0 / settings.alpha).ln())).sqrt();
    Look {
        difference: Some(theta),
        low: theta - radius,
        high: theta + radius,
        ratio: log_ratio.exp(),
        regressed: theta > 0.0 && log_ratio >= (1.0 / settings.alpha).ln(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (SplitMix64), so the test gives the same answer on
    /// every run.
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
    }

    #[test]
    fn the_boundary_and_the_confidence_sequence_agree() {
        let s = Settings::default();
        for new in [(40, 1000), (70, 1000), (90, 1000), (200, 2000)] {
            let l = look(new, (50, 1000), &s);
            assert_eq!(l.regressed, l.low > 0.0, "{new:?}: {l:?}");
        }
    }

    #[test]
    fn nothing_is_decided_before_the_minimum_sample() {
        let l = look((299, 299), (0, 10_000), &Settings::default());
        assert_eq!(l.difference, None);
        assert!(!l.regressed);
    }

    #[test]
    fn a_doubled_rate_is_found_and_an_equal_one_rarely_is_though_it_is_checked_every_step() {
        let s = Settings::default();
        let mut rng = Rng(7);
        let (mut false_halts, mut found) = (0, 0);
        for _ in 0..200 {
            for (p_new, halts) in [(0.05, &mut false_halts), (0.10, &mut found)] {
                let (mut new, mut old) = ((0, 0), (0, 0));
                for _ in 0..100 {
                    new.0 += rng.events(30, p_new);
                    new.1 += 30;
                    old.0 += rng.events(300, 0.05);
                    old.1 += 300;
                    if look(new, old, &s).regressed {
                        *halts += 1;
                        break;
                    }
                }
            }
        }
        assert!(
            false_halts <= 2,
            "{false_halts} false halts in 200 (alpha 1%)"
        );
        assert!(found >= 190, "found {found} of 200 doubled rates");
    }
}
