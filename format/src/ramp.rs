//! Ramps: a rollout whose percentage grows on a schedule the publisher signed once.
//!
//! A ramp starts at its rollout's `percent` at `start` and reaches each step's percentage
//! `after_seconds` later: at once (stepped) or along a straight line from the step before
//! (linear). Every client computes the percentage from the signed schedule and its own clock,
//! so nobody signs anything while the ramp runs. Percentages never fall along a ramp and the
//! rollout bucket of an install does not change, so an install once in stays in.

use serde::{Deserialize, Serialize};
use time::{Duration, OffsetDateTime};

use crate::FormatError;

/// How far a client's clock may run behind a document's signing time before its ramps hold
/// their starting percentage. A clock far behind could be anything; the lower percentage is
/// the one nobody can push a client past.
pub const RAMP_CLOCK_SKEW: Duration = Duration::minutes(10);

/// Most steps one ramp may have.
pub const MAX_RAMP_STEPS: usize = 100;

/// Longest a ramp may run from its start to its last step: one year.
pub const MAX_RAMP_SECONDS: u64 = 366 * 24 * 3600;

/// The schedule of a rollout's percentage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ramp {
    /// When the ramp starts at the rollout's `percent`.
    #[serde(with = "time::serde::rfc3339")]
    pub start: OffsetDateTime,
    /// The later percentages, in time order.
    pub steps: Vec<RampStep>,
    /// `true`: the percentage climbs along a straight line between steps (whole percents,
    /// rounded down). `false`: it jumps at each step.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub linear: bool,
}

/// One point of a ramp: `percent` from `after_seconds` past the ramp's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RampStep {
    pub after_seconds: u64,
    pub percent: u8,
}

impl Ramp {
    /// Checks the schedule against the percentage it starts from: 1 to [`MAX_RAMP_STEPS`]
    /// steps, strictly later each, percentages 0-100 that never fall, within a year.
    pub fn validate(&self, start_percent: u8) -> Result<(), String> {
        if self.steps.is_empty() || self.steps.len() > MAX_RAMP_STEPS {
            return Err(format!(
                "a ramp has 1 to {MAX_RAMP_STEPS} steps, found {}",
                self.steps.len()
            ));
        }
        let mut after = 0u64;
        let mut percent = start_percent;
        for (i, step) in self.steps.iter().enumerate() {
            if step.after_seconds <= after {
                return Err(format!(
                    "ramp step {i} is at {} s, not after the step before it ({after} s)",
                    step.after_seconds
                ));
            }
            if step.percent > 100 || step.percent < percent {
                return Err(format!(
                    "ramp step {i} goes to {}%: percentages run 0-100 and never fall (the step before is {percent}%)",
                    step.percent
                ));
            }
            after = step.after_seconds;
            percent = step.percent;
        }
        if after > MAX_RAMP_SECONDS {
            return Err(format!(
                "the ramp runs {after} s, over the limit of {MAX_RAMP_SECONDS} s (a year)"
            ));
        }
        Ok(())
    }

    /// The percentage at `at` of a ramp starting from `start_percent`.
    pub fn percent_at(&self, start_percent: u8, at: OffsetDateTime) -> u8 {
        let elapsed = (at - self.start).whole_seconds();
        let Ok(elapsed) = u64::try_from(elapsed) else {
            return start_percent;
        };
        let (mut after, mut percent) = (0u64, start_percent);
        for step in &self.steps {
            if elapsed >= step.after_seconds {
                (after, percent) = (step.after_seconds, step.percent);
                continue;
            }
            if !self.linear {
                return percent;
            }
            let span = u128::from(step.after_seconds - after);
            let rise = u128::from(step.percent.saturating_sub(percent));
            let gained = rise * u128::from(elapsed - after) / span;
            // `gained` is below `rise`, itself at most 100.
            return percent + gained as u8;
        }
        percent
    }

    /// When each step lands: the time and the percentage it brings. Linear ramps list their
    /// steps' end points.
    pub fn landings(&self) -> Vec<(OffsetDateTime, u8)> {
        self.steps
            .iter()
            .map(|step| {
                let after = i64::try_from(step.after_seconds).unwrap_or(i64::MAX);
                (
                    self.start.saturating_add(Duration::seconds(after)),
                    step.percent,
                )
            })
            .collect()
    }

    /// When the ramp reaches its last step.
    pub fn end(&self) -> OffsetDateTime {
        self.landings().last().map_or(self.start, |(at, _)| *at)
    }

    /// Parses a ramp as `packer release --ramp` writes it, starting at `start`: `1%..100%/72h`
    /// (a straight line from 1 % to 100 % over 72 hours) or `1,5,25,100%/24h` (1 % at once,
    /// then 5 %, 25 % and 100 %, one step every 24 hours). Gives the starting percentage and
    /// the schedule after it.
    pub fn parse(text: &str, start: OffsetDateTime) -> Result<(u8, Ramp), FormatError> {
        let bad = |reason: String| {
            FormatError::malformed(
                "ramp",
                format!(
                    "{reason}; expected FROM%..TO%/DURATION such as 1%..100%/72h, or P1,P2,...%/STEP such as 1,5,25,100%/24h, found {text:?}"
                ),
            )
        };
        let (percents, duration) = text
            .rsplit_once('/')
            .ok_or_else(|| bad("no /DURATION".to_string()))?;
        let seconds = parse_duration(duration.trim()).map_err(bad)?;
        let percent = |p: &str| -> Result<u8, FormatError> {
            let p = p.trim().trim_end_matches('%').trim();
            p.parse::<u8>()
                .ok()
                .filter(|p| *p <= 100)
                .ok_or_else(|| bad(format!("{p:?} is not a percentage 0-100")))
        };
        let (first, steps, linear) = if let Some((from, to)) = percents.split_once("..") {
            let (from, to) = (percent(from)?, percent(to)?);
            let steps = vec![RampStep {
                after_seconds: seconds,
                percent: to,
            }];
            (from, steps, true)
        } else {
            let list = percents
                .split(',')
                .map(percent)
                .collect::<Result<Vec<u8>, _>>()?;
            let Some((first, rest)) = list.split_first() else {
                return Err(bad("no percentages".to_string()));
            };
            let steps = (1u64..)
                .zip(rest)
                .map(|(n, p)| RampStep {
                    after_seconds: n.saturating_mul(seconds),
                    percent: *p,
                })
                .collect();
            (*first, steps, false)
        };
        let ramp = Ramp {
            start,
            steps,
            linear,
        };
        ramp.validate(first).map_err(bad)?;
        Ok((first, ramp))
    }
}

/// `72h`, `3d`, `30m` or `90s` in seconds, above zero.
fn parse_duration(text: &str) -> Result<u64, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("duration {text:?} has no unit (s, m, h or d)"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("duration {text:?} does not start with a number"))?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("duration {text:?}: the unit is one of s, m, h, d")),
    };
    match number.checked_mul(scale) {
        Some(0) => Err(format!("duration {text:?} is zero")),
        Some(seconds) => Ok(seconds),
        None => Err(format!("duration {text:?} is too long")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    const T0: OffsetDateTime = datetime!(2026-12-01 00:00 UTC);

    fn at(hours: i64) -> OffsetDateTime {
        T0 + Duration::hours(hours)
    }

    #[test]
    fn a_stepped_ramp_jumps_at_each_step() {
        let (first, ramp) = Ramp::parse("1,5,25,100%/24h", T0).unwrap();
        assert_eq!(first, 1);
        let seen: Vec<u8> = [-5, 0, 23, 24, 47, 48, 71, 72, 1000]
            .iter()
            .map(|h| ramp.percent_at(first, at(*h)))
            .collect();
        assert_eq!(seen, [1, 1, 1, 5, 5, 25, 25, 100, 100]);
        assert_eq!(ramp.end(), at(72));
    }

    #[test]
    fn a_linear_ramp_climbs_in_whole_percents() {
        let (first, ramp) = Ramp::parse("1%..100%/72h", T0).unwrap();
        assert_eq!(ramp.percent_at(first, at(0)), 1);
        assert_eq!(
            ramp.percent_at(first, at(36)),
            50,
            "1 + 99 * 0.5 rounded down"
        );
        assert_eq!(ramp.percent_at(first, at(72)), 100);
        let mut last = 0;
        for minute in 0..(73 * 60) {
            let p = ramp.percent_at(first, T0 + Duration::minutes(minute));
            assert!(p >= last, "a ramp never falls");
            last = p;
        }
    }

    #[test]
    fn bad_ramps_say_what_is_wrong() {
        for (text, needle) in [
            ("1,5%", "no /DURATION"),
            ("1,5%/0h", "is zero"),
            ("1,5%/2w", "unit"),
            ("5,1%/1h", "never fall"),
            ("1,101%/1h", "not a percentage"),
            ("1%..100%/400d", "over the limit"),
        ] {
            let error = Ramp::parse(text, T0).unwrap_err().to_string();
            assert!(error.contains(needle), "{text}: {error}");
        }
    }
}
