//! Outcome counts: how turns went on one install, per pack version and client release, one
//! UTC day at a time, and what packd tells publishers about them merged over the fleet.
//!
//! Opt-in like failure reports (the client's `telemetry` switch and `DO_NOT_TRACK`), and
//! counts only: a report has no text, no path, no model name, nothing a prompt or a user
//! wrote. The sender is known only by its salted install hash
//! ([`crate::fleet::install_hash`], header [`crate::headers::INSTALL`]).
//!
//! Every rate is a proportion (each event counts at most once per trial), so a Wilson score
//! interval ([`wilson`]) bounds it: packd, packer and the console compute it with this one
//! function.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// Largest outcome report body packd reads, in bytes. A report is a few names and twelve
/// numbers: under 700 bytes with every field at its longest.
pub const MAX_OUTCOME_BYTES: usize = 1024;

/// Largest value of a count of events (turns, tool calls, runs…) in one day's report. A
/// person cannot make this many model calls in a day; a device saturates its counts here.
pub const MAX_EVENTS: u64 = 1_000_000;

/// Largest value of a token count in one day's report (a million turns of 10,000 tokens).
pub const MAX_TOKENS: u64 = 10_000_000_000;

/// A day of plausible use of one install, per count: packd counts no more of any one
/// install's day than this, whatever its reports claim (each whole scaled down to its cap,
/// its parts with it, so the install's rates stand). A person, or an automation running the
/// agent around the clock, makes about a model call a minute at most: 2,000 turns a day,
/// with about five tool calls a turn.
pub const DAY_TURNS: u64 = 2_000;
/// See [`DAY_TURNS`].
pub const DAY_TOOL_CALLS: u64 = 10_000;
/// `agent exec` runs of one install's day counted at most (one every 90 seconds).
pub const DAY_EXEC_RUNS: u64 = 1_000;
/// Tokens of one install's day counted at most, input and output each (2,000 turns of
/// 100,000 tokens).
pub const DAY_TOKENS: u64 = 200_000_000;

/// The z of a two-sided 95 % interval: the 0.975 quantile of the standard normal.
pub const Z_95: f64 = 1.959_963_984_540_054;

/// The confidence of every interval packd serves.
pub const CONFIDENCE: f64 = 0.95;

/// The counts of one install on one UTC day for one pack version and client release.
///
/// A *turn* is one model call of the agent loop (what the transcript numbers as a turn): a
/// user message that needs three tool rounds is four turns. Events that happen per turn
/// (fallbacks, model errors, aborts) are counted at most once per turn, events that happen
/// per tool call (errors, denials) at most once per call, so each is a proportion of its
/// trials.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields, try_from = "UncheckedCounts")]
pub struct OutcomeCounts {
    /// Model calls the agent loop started with this pack.
    pub turns: u64,
    /// Tool calls the model made in those turns.
    pub tool_calls: u64,
    /// Of `tool_calls`, those whose result was an error (permission denials included).
    pub tool_errors: u64,
    /// Of `tool_errors`, calls the permission policy refused (a deny rule, the approval
    /// policy `never`, or the user saying no).
    pub permission_denials: u64,
    /// Of `turns`, those whose model call failed (after the provider's own retries).
    pub model_errors: u64,
    /// Of `turns`, those the user interrupted before they ended.
    pub aborted_turns: u64,
    /// Of `turns`, those whose prompt failed on this pack and was served whole from the
    /// built-in pack instead.
    pub builtin_fallbacks: u64,
    /// Times older history was summarised to make room.
    pub compactions: u64,
    /// Input tokens of those turns, as the model server reported them.
    pub input_tokens: u64,
    /// Output tokens of those turns, as the model server reported them.
    pub output_tokens: u64,
    /// `agent exec` runs that ended on this pack.
    pub exec_runs: u64,
    /// Of `exec_runs`, those that exited with a non-zero status.
    pub exec_failures: u64,
}

impl OutcomeCounts {
    /// Adds `other` in, each count saturating at its cap ([`MAX_EVENTS`], [`MAX_TOKENS`]).
    /// A part never exceeds its whole afterwards if it did not before.
    pub fn add(&mut self, other: &OutcomeCounts) {
        let events = |a: &mut u64, b: u64| *a = a.saturating_add(b).min(MAX_EVENTS);
        let tokens = |a: &mut u64, b: u64| *a = a.saturating_add(b).min(MAX_TOKENS);
        events(&mut self.turns, other.turns);
        events(&mut self.tool_calls, other.tool_calls);
        events(&mut self.tool_errors, other.tool_errors);
        events(&mut self.permission_denials, other.permission_denials);
        events(&mut self.model_errors, other.model_errors);
        events(&mut self.aborted_turns, other.aborted_turns);
        events(&mut self.builtin_fallbacks, other.builtin_fallbacks);
        events(&mut self.compactions, other.compactions);
        tokens(&mut self.input_tokens, other.input_tokens);
        tokens(&mut self.output_tokens, other.output_tokens);
        events(&mut self.exec_runs, other.exec_runs);
        events(&mut self.exec_failures, other.exec_failures);
        self.clamp_parts();
    }

    /// Sums over many reports (packd's merge): no cap, but still saturating.
    pub fn sum(&mut self, other: &OutcomeCounts) {
        let add = |a: &mut u64, b: u64| *a = a.saturating_add(b);
        add(&mut self.turns, other.turns);
        add(&mut self.tool_calls, other.tool_calls);
        add(&mut self.tool_errors, other.tool_errors);
        add(&mut self.permission_denials, other.permission_denials);
        add(&mut self.model_errors, other.model_errors);
        add(&mut self.aborted_turns, other.aborted_turns);
        add(&mut self.builtin_fallbacks, other.builtin_fallbacks);
        add(&mut self.compactions, other.compactions);
        add(&mut self.input_tokens, other.input_tokens);
        add(&mut self.output_tokens, other.output_tokens);
        add(&mut self.exec_runs, other.exec_runs);
        add(&mut self.exec_failures, other.exec_failures);
    }

    /// These counts as packd weighs one install's day: every whole at most its cap
    /// ([`DAY_TURNS`], [`DAY_TOOL_CALLS`], [`DAY_EXEC_RUNS`]), its parts scaled down with it
    /// so each rate stays what the install reported (rounded down); compactions at most the
    /// turns cap, tokens at most [`DAY_TOKENS`].
    pub fn day_capped(&self) -> OutcomeCounts {
        let scaled = |part: u64, whole: u64, cap: u64| {
            if whole <= cap {
                part
            } else {
                (u128::from(part) * u128::from(cap) / u128::from(whole)) as u64
            }
        };
        let (t, k, r) = (self.turns, self.tool_calls, self.exec_runs);
        let mut c = *self;
        c.turns = scaled(t, t, DAY_TURNS);
        c.model_errors = scaled(self.model_errors, t, DAY_TURNS);
        c.aborted_turns = scaled(self.aborted_turns, t, DAY_TURNS);
        c.builtin_fallbacks = scaled(self.builtin_fallbacks, t, DAY_TURNS);
        c.tool_calls = scaled(k, k, DAY_TOOL_CALLS);
        c.tool_errors = scaled(self.tool_errors, k, DAY_TOOL_CALLS);
        c.permission_denials = scaled(self.permission_denials, k, DAY_TOOL_CALLS);
        c.exec_runs = scaled(r, r, DAY_EXEC_RUNS);
        c.exec_failures = scaled(self.exec_failures, r, DAY_EXEC_RUNS);
        c.compactions = c.compactions.min(DAY_TURNS);
        c.input_tokens = c.input_tokens.min(DAY_TOKENS);
        c.output_tokens = c.output_tokens.min(DAY_TOKENS);
        c.clamp_parts();
        c
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        *self == OutcomeCounts::default()
    }

    /// After a saturation a part may pass its whole: it is cut back to it.
    fn clamp_parts(&mut self) {
        self.tool_errors = self.tool_errors.min(self.tool_calls);
        self.permission_denials = self.permission_denials.min(self.tool_errors);
        self.model_errors = self.model_errors.min(self.turns);
        self.aborted_turns = self.aborted_turns.min(self.turns);
        self.builtin_fallbacks = self.builtin_fallbacks.min(self.turns);
        self.exec_failures = self.exec_failures.min(self.exec_runs);
    }

    /// Why these counts cannot be one install's day: a count over its cap, or a part larger
    /// than its whole.
    pub fn check(&self) -> Result<(), String> {
        let events = [
            ("turns", self.turns),
            ("tool_calls", self.tool_calls),
            ("tool_errors", self.tool_errors),
            ("permission_denials", self.permission_denials),
            ("model_errors", self.model_errors),
            ("aborted_turns", self.aborted_turns),
            ("builtin_fallbacks", self.builtin_fallbacks),
            ("compactions", self.compactions),
            ("exec_runs", self.exec_runs),
            ("exec_failures", self.exec_failures),
        ];
        for (name, value) in events {
            if value > MAX_EVENTS {
                return Err(format!("{name} is {value}, over the cap of {MAX_EVENTS}"));
            }
        }
        for (name, value) in [
            ("input_tokens", self.input_tokens),
            ("output_tokens", self.output_tokens),
        ] {
            if value > MAX_TOKENS {
                return Err(format!("{name} is {value}, over the cap of {MAX_TOKENS}"));
            }
        }
        let parts = [
            (
                "tool_errors",
                self.tool_errors,
                "tool_calls",
                self.tool_calls,
            ),
            (
                "permission_denials",
                self.permission_denials,
                "tool_errors",
                self.tool_errors,
            ),
            ("model_errors", self.model_errors, "turns", self.turns),
            ("aborted_turns", self.aborted_turns, "turns", self.turns),
            (
                "builtin_fallbacks",
                self.builtin_fallbacks,
                "turns",
                self.turns,
            ),
            (
                "exec_failures",
                self.exec_failures,
                "exec_runs",
                self.exec_runs,
            ),
        ];
        for (part, p, whole, w) in parts {
            if p > w {
                return Err(format!("{part} ({p}) is more than {whole} ({w})"));
            }
        }
        Ok(())
    }
}

/// [`OutcomeCounts`] as read, before [`OutcomeCounts::check`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UncheckedCounts {
    turns: u64,
    tool_calls: u64,
    tool_errors: u64,
    permission_denials: u64,
    model_errors: u64,
    aborted_turns: u64,
    builtin_fallbacks: u64,
    compactions: u64,
    input_tokens: u64,
    output_tokens: u64,
    exec_runs: u64,
    exec_failures: u64,
}

impl TryFrom<UncheckedCounts> for OutcomeCounts {
    type Error = String;

    fn try_from(raw: UncheckedCounts) -> Result<Self, String> {
        let counts = OutcomeCounts {
            turns: raw.turns,
            tool_calls: raw.tool_calls,
            tool_errors: raw.tool_errors,
            permission_denials: raw.permission_denials,
            model_errors: raw.model_errors,
            aborted_turns: raw.aborted_turns,
            builtin_fallbacks: raw.builtin_fallbacks,
            compactions: raw.compactions,
            input_tokens: raw.input_tokens,
            output_tokens: raw.output_tokens,
            exec_runs: raw.exec_runs,
            exec_failures: raw.exec_failures,
        };
        counts.check()?;
        Ok(counts)
    }
}

/// Body of `POST /v1/channels/{channel}/outcomes`: one install's counts of one UTC day for
/// one pack version and client release. A later report of the same install, day, pack and
/// release replaces an earlier one; it never adds to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct OutcomeReport {
    /// Must equal the channel in the URL.
    #[serde(deserialize_with = "crate::fleet::channel_name")]
    pub channel: String,
    /// The UTC date counted, `YYYY-MM-DD`.
    #[serde(deserialize_with = "day")]
    pub day: String,
    /// SHA-256 of the sealed pack the turns were served by, or `builtin` when the client
    /// served the pack compiled into it (not after a fallback: a turn that fell back counts
    /// under the pack it fell back from, in `builtin_fallbacks`).
    #[serde(deserialize_with = "crate::fleet::pack_ref")]
    pub pack: String,
    /// The pack's name.
    #[serde(deserialize_with = "crate::pack_name")]
    pub pack_name: String,
    /// The pack's version.
    #[serde(deserialize_with = "crate::fleet::release")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub pack_version: semver::Version,
    /// The client's release.
    #[serde(deserialize_with = "crate::fleet::release")]
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub client_version: semver::Version,
    pub counts: OutcomeCounts,
}

/// Answer to an accepted outcome report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct OutcomesAccepted {
    pub accepted: bool,
}

/// `GET /v1/channels/{channel}/outcomes`: the outcome counts of a channel over the last
/// `days` UTC days (today included), merged from every packd node, per pack version ×
/// client release, with each rate's Wilson score interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct OutcomesView {
    #[serde(deserialize_with = "crate::fleet::channel_name")]
    pub channel: String,
    /// The UTC dates covered, oldest first (`YYYY-MM-DD`).
    pub days: Vec<String>,
    /// The confidence of every interval (0.95).
    pub confidence: f64,
    /// One per pack × client release, most turns first.
    pub rows: Vec<OutcomeRow>,
    /// Whether some reports were refused because a node's cap on rows or installs per day
    /// was reached.
    pub overflow: bool,
    /// How many node files were merged (one per packd process per day that took reports).
    pub sources: usize,
}

/// The summed counts of one pack version on one client release.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct OutcomeRow {
    /// SHA-256 of the sealed pack, or `builtin`.
    pub pack: String,
    pub pack_name: String,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub pack_version: semver::Version,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub client_version: semver::Version,
    /// Distinct installs that reported this row in the window.
    pub installs: u64,
    /// Install-days summed (an install reporting on three days counts three).
    pub reports: u64,
    pub counts: OutcomeCounts,
    pub rates: OutcomeRates,
}

/// Each rate of a row, with its interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct OutcomeRates {
    /// `tool_errors / tool_calls`.
    pub tool_error_rate: Rate,
    /// `permission_denials / tool_calls`.
    pub denial_rate: Rate,
    /// `model_errors / turns`.
    pub model_error_rate: Rate,
    /// `aborted_turns / turns`.
    pub aborted_rate: Rate,
    /// `builtin_fallbacks / turns`.
    pub fallback_rate: Rate,
    /// `exec_failures / exec_runs`.
    pub exec_failure_rate: Rate,
}

impl OutcomeRates {
    /// The rates of `counts`, at 95 %.
    pub fn of(counts: &OutcomeCounts) -> OutcomeRates {
        OutcomeRates {
            tool_error_rate: Rate::new(counts.tool_errors, counts.tool_calls),
            denial_rate: Rate::new(counts.permission_denials, counts.tool_calls),
            model_error_rate: Rate::new(counts.model_errors, counts.turns),
            aborted_rate: Rate::new(counts.aborted_turns, counts.turns),
            fallback_rate: Rate::new(counts.builtin_fallbacks, counts.turns),
            exec_failure_rate: Rate::new(counts.exec_failures, counts.exec_runs),
        }
    }

    /// Every rate with its name as in JSON, in field order.
    pub fn named(&self) -> [(&'static str, Rate); 6] {
        [
            ("tool_error_rate", self.tool_error_rate),
            ("denial_rate", self.denial_rate),
            ("model_error_rate", self.model_error_rate),
            ("aborted_rate", self.aborted_rate),
            ("fallback_rate", self.fallback_rate),
            ("exec_failure_rate", self.exec_failure_rate),
        ]
    }
}

/// `events` out of `trials`, the point estimate and its Wilson score interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Rate {
    pub events: u64,
    pub trials: u64,
    /// `events / trials`; absent with no trials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Lower end of the interval (0 with no trials).
    pub low: f64,
    /// Upper end of the interval (1 with no trials).
    pub high: f64,
}

impl Rate {
    /// `events` of `trials` at 95 % ([`Z_95`]). Events over trials count as trials.
    pub fn new(events: u64, trials: u64) -> Rate {
        let events = events.min(trials);
        let (low, high) = wilson(events, trials, Z_95);
        Rate {
            events,
            trials,
            rate: (trials > 0).then(|| events as f64 / trials as f64),
            low,
            high,
        }
    }
}

/// The Wilson score interval of `events` successes in `trials` at normal quantile `z`
/// (`Z_95` for 95 %): `(low, high)`, within `[0, 1]`. With no trials nothing is known:
/// `(0, 1)`. Unlike the normal approximation it stays inside `[0, 1]` and is not of zero
/// width at 0 or `trials` events, which matters for the rare events a rollout watches.
pub fn wilson(events: u64, trials: u64, z: f64) -> (f64, f64) {
    if trials == 0 {
        return (0.0, 1.0);
    }
    let n = trials as f64;
    let p = events.min(trials) as f64 / n;
    let z2 = z * z;
    let denominator = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denominator;
    let half = z / denominator * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    // At no events (or all) the bound is exactly 0 (or 1); rounding would leave it a hair off.
    let low = if events == 0 {
        0.0
    } else {
        (centre - half).max(0.0)
    };
    let high = if events >= trials {
        1.0
    } else {
        (centre + half).min(1.0)
    };
    (low, high)
}

/// Whether `text` is a UTC date as the protocol writes it: `YYYY-MM-DD`, a real date.
pub fn is_day(text: &str) -> bool {
    let b = text.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let number = |range: std::ops::Range<usize>| -> Option<u32> {
        let digits = &text[range];
        digits
            .bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| digits.parse().ok())
            .flatten()
    };
    let (Some(year), Some(month), Some(day)) = (number(0..4), number(5..7), number(8..10)) else {
        return false;
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    year >= 2000 && (1..=days).contains(&day)
}

fn day<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let text = String::deserialize(deserializer)?;
    if is_day(&text) {
        return Ok(text);
    }
    let shown: String = text.chars().take(40).collect();
    Err(D::Error::custom(format!(
        "expected a UTC date as YYYY-MM-DD, found {shown:?}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    /// Published and hand-computed values: 81 of 263 is Newcombe's example, (0.2553,
    /// 0.3662); the others follow from the formula.
    #[test]
    fn wilson_matches_known_intervals() {
        for (events, trials, low, high) in [
            (81, 263, 0.255_288_5, 0.366_209_6),
            (0, 10, 0.0, 0.277_532_8),
            (5, 10, 0.236_593_1, 0.763_406_9),
            (10, 10, 0.722_467_2, 1.0),
            (1, 100, 0.001_767_4, 0.054_486_2),
            (12, 200, 0.034_652_2, 0.101_931_7),
        ] {
            let (l, h) = wilson(events, trials, Z_95);
            assert!(
                close(l, low) && close(h, high),
                "{events}/{trials}: ({l}, {h}), expected ({low}, {high})"
            );
        }
        assert_eq!(wilson(0, 0, Z_95), (0.0, 1.0));
        assert_eq!(wilson(0, 140, Z_95).0, 0.0);
        assert_eq!(wilson(7, 7, Z_95).1, 1.0);
    }

    #[test]
    fn the_interval_holds_the_estimate_and_narrows_with_more_trials() {
        let narrow = Rate::new(30, 1000);
        let wide = Rate::new(3, 100);
        assert_eq!(narrow.rate, Some(0.03));
        assert!(narrow.low < 0.03 && 0.03 < narrow.high);
        assert!(narrow.high - narrow.low < wide.high - wide.low);
        let none = Rate::new(0, 0);
        assert_eq!((none.rate, none.low, none.high), (None, 0.0, 1.0));
    }

    fn report() -> serde_json::Value {
        serde_json::json!({
            "channel": "stable", "day": "2026-03-01", "pack": "a".repeat(64),
            "pack_name": "core", "pack_version": "1.3.0", "client_version": "1.4.2",
            "counts": {
                "turns": 40, "tool_calls": 30, "tool_errors": 3, "permission_denials": 1,
                "model_errors": 1, "aborted_turns": 2, "builtin_fallbacks": 0, "compactions": 1,
                "input_tokens": 120000, "output_tokens": 9000, "exec_runs": 4, "exec_failures": 1
            }
        })
    }

    #[test]
    fn a_report_round_trips_and_fits_its_cap_at_its_longest() {
        let parsed: OutcomeReport = serde_json::from_value(report()).unwrap();
        assert_eq!(parsed.counts.tool_errors, 3);
        assert_eq!(serde_json::to_value(&parsed).unwrap(), report());
        let mut longest = report();
        longest["channel"] = "c".repeat(64).into();
        longest["pack_name"] = "p".repeat(64).into();
        longest["pack_version"] = format!("1.0.0-{}", "a".repeat(58)).into();
        longest["client_version"] = format!("1.0.0-{}", "a".repeat(58)).into();
        for (_, value) in longest["counts"].as_object_mut().unwrap() {
            *value = MAX_EVENTS.into();
        }
        longest["counts"]["input_tokens"] = MAX_TOKENS.into();
        longest["counts"]["output_tokens"] = MAX_TOKENS.into();
        let parsed: OutcomeReport = serde_json::from_value(longest).unwrap();
        let bytes = serde_json::to_vec(&parsed).unwrap();
        assert!(bytes.len() <= MAX_OUTCOME_BYTES, "{}", bytes.len());
    }

    /// The versions are parsed, and a parsed version prints as it was written: a client's
    /// queued report (kept as text in its cache) goes out byte for byte.
    #[test]
    fn a_version_with_pre_release_and_build_metadata_goes_out_as_it_came_in() {
        let mut odd = report();
        odd["pack_version"] = "1.3.0-rc.1+build.007".into();
        odd["client_version"] = "0.10.0-alpha.beta.11+exp.sha.5114f85".into();
        let parsed: OutcomeReport = serde_json::from_value(odd.clone()).unwrap();
        assert_eq!(parsed.pack_version.pre.as_str(), "rc.1");
        assert_eq!(parsed.client_version.minor, 10);
        assert_eq!(serde_json::to_value(&parsed).unwrap(), odd);
    }

    #[test]
    fn a_report_refuses_extra_fields_text_and_impossible_counts() {
        let mut extra = report();
        extra["prompt"] = "the user's question".into();
        let err = serde_json::from_value::<OutcomeReport>(extra).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");

        let mut extra_count = report();
        extra_count["counts"]["last_error"] = 1.into();
        let err = serde_json::from_value::<OutcomeReport>(extra_count).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");

        let mut over = report();
        over["counts"]["turns"] = (MAX_EVENTS + 1).into();
        let err = serde_json::from_value::<OutcomeReport>(over).unwrap_err();
        assert!(err.to_string().contains("over the cap"), "{err}");

        let mut part = report();
        part["counts"]["model_errors"] = 41.into();
        let err = serde_json::from_value::<OutcomeReport>(part).unwrap_err();
        assert!(err.to_string().contains("more than turns"), "{err}");

        for (field, bad) in [
            ("day", "2026-02-30"),
            ("day", "yesterday"),
            ("pack", "core@1.3.0"),
            ("pack_name", "../core"),
            ("pack_version", "1.3"),
            ("client_version", "x"),
        ] {
            let mut value = report();
            value[field] = bad.into();
            assert!(
                serde_json::from_value::<OutcomeReport>(value).is_err(),
                "{field} = {bad}"
            );
        }
    }

    #[test]
    fn adding_saturates_at_the_caps_and_keeps_parts_within_wholes() {
        let mut counts = OutcomeCounts {
            turns: MAX_EVENTS - 1,
            model_errors: MAX_EVENTS - 1,
            input_tokens: MAX_TOKENS - 5,
            ..OutcomeCounts::default()
        };
        counts.add(&OutcomeCounts {
            turns: 10,
            model_errors: 20,
            input_tokens: 100,
            ..OutcomeCounts::default()
        });
        assert_eq!(counts.turns, MAX_EVENTS);
        assert_eq!(counts.model_errors, MAX_EVENTS);
        assert_eq!(counts.input_tokens, MAX_TOKENS);
        counts.check().unwrap();
    }

    #[test]
    fn a_day_is_capped_at_plausible_use_and_keeps_its_rates() {
        let claimed = OutcomeCounts {
            turns: 1_000_000,
            tool_calls: 1_000_000,
            tool_errors: 500_000,
            permission_denials: 100_000,
            model_errors: 10_000,
            exec_runs: 3_000,
            exec_failures: 3_000,
            compactions: 1_000_000,
            input_tokens: MAX_TOKENS,
            ..OutcomeCounts::default()
        };
        let capped = claimed.day_capped();
        assert_eq!(capped.turns, DAY_TURNS);
        assert_eq!(capped.model_errors, 20);
        assert_eq!(
            (capped.tool_calls, capped.tool_errors),
            (DAY_TOOL_CALLS, 5_000)
        );
        assert_eq!(capped.permission_denials, 1_000);
        assert_eq!(
            (capped.exec_runs, capped.exec_failures),
            (DAY_EXEC_RUNS, DAY_EXEC_RUNS)
        );
        assert_eq!(capped.compactions, DAY_TURNS);
        assert_eq!(capped.input_tokens, DAY_TOKENS);
        capped.check().unwrap();
        // A plausible day is counted as it came.
        let day = OutcomeCounts {
            turns: 300,
            tool_calls: 900,
            tool_errors: 45,
            ..OutcomeCounts::default()
        };
        assert_eq!(day.day_capped(), day);
    }

    #[test]
    fn days_are_real_dates() {
        for good in ["2026-03-01", "2024-02-29", "2000-12-31"] {
            assert!(is_day(good), "{good}");
        }
        for bad in [
            "2025-02-29",
            "2026-13-01",
            "2026-00-10",
            "26-03-01",
            "2026-3-1x",
            "1999-01-01",
        ] {
            assert!(!is_day(bad), "{bad}");
        }
    }
}
