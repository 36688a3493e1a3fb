//! How long a model server asks us to wait before trying again.
//!
//! Two headers say it: `Retry-After` (RFC 9110 §10.2.3: delta-seconds or an HTTP date) and
//! `retry-after-ms` (milliseconds, sent by OpenAI and preferred when both are present,
//! because it is the more precise). Both come from the network, so they are read strictly:
//! a number is digits with an optional decimal fraction — no sign, no exponent, no
//! `NaN` or `inf` — and anything else is ignored, leaving the caller's own backoff in
//! charge. Whatever is asked for, the wait is capped by the caller (`max_retry_wait`), so
//! a server cannot park the agent.

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, RETRY_AFTER};

/// The millisecond variant of `Retry-After`.
pub const RETRY_AFTER_MS: &str = "retry-after-ms";

/// Longest header value looked at. The longest valid one, an RFC 850 date, is 33 bytes;
/// a longer value is garbage and not worth parsing.
const MAX_VALUE_LEN: usize = 64;

/// The wait the headers ask for, at most `cap`, or `None` when neither header is present
/// with a value of a form we accept. A date in the past asks for no wait at all.
pub fn requested_wait(headers: &HeaderMap, now: SystemTime, cap: Duration) -> Option<Duration> {
    let value = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| v.len() <= MAX_VALUE_LEN)
    };
    if let Some(wait) = value(RETRY_AFTER_MS).and_then(|v| seconds(v, 1000.0, cap)) {
        return Some(wait);
    }
    let value = value(RETRY_AFTER.as_str())?;
    if let Some(wait) = seconds(value, 1.0, cap) {
        return Some(wait);
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO).min(cap))
}

/// `text` as a count of `1/per_second` seconds, capped at `cap`. Only digits with an
/// optional `.digits` fraction are accepted: Rust's float parser would also take `-5`,
/// `1e20`, `NaN` and `inf`, none of which a server means as a wait.
fn seconds(text: &str, per_second: f64, cap: Duration) -> Option<Duration> {
    let (whole, fraction) = match text.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (text, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || fraction.is_some_and(|f| !digits(f)) {
        return None;
    }
    // Digits only and at most MAX_VALUE_LEN of them: the parse cannot fail and the value is
    // finite and non-negative. Clamping before converting keeps `Duration` from
    // overflowing on a huge count.
    let secs = text.parse::<f64>().ok()? / per_second;
    Duration::try_from_secs_f64(secs.min(cap.as_secs_f64())).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: Duration = Duration::from_secs(60);

    fn wait(name: &str, value: &str) -> Option<Duration> {
        let mut headers = HeaderMap::new();
        headers.insert(
            reqwest::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        requested_wait(&headers, now, CAP)
    }

    #[test]
    fn delta_seconds_fractions_and_milliseconds() {
        assert_eq!(wait("retry-after", "2"), Some(Duration::from_secs(2)));
        assert_eq!(wait("retry-after", " 0 "), Some(Duration::ZERO));
        assert_eq!(
            wait("retry-after", "1.5"),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            wait("retry-after-ms", "250"),
            Some(Duration::from_millis(250))
        );
    }

    #[test]
    fn huge_values_are_capped() {
        assert_eq!(wait("retry-after", "99999999999999999999999999"), Some(CAP));
        assert_eq!(wait("retry-after", "18446744073709551616"), Some(CAP));
        assert_eq!(wait("retry-after-ms", "99999999999999999999"), Some(CAP));
    }

    #[test]
    fn garbage_is_ignored() {
        for value in [
            "1e20",
            "-5",
            "+5",
            "NaN",
            "nan",
            "inf",
            "-inf",
            "soon",
            "1.",
            ".5",
            "1.2.3",
            "0x10",
            "",
            // Dates an HTTP date cannot hold: before 1970, past 9999.
            "Thu, 01 Jan 1960 00:00:00 GMT",
            "Fri, 01 Jan 10000 00:00:00 GMT",
        ] {
            assert_eq!(wait("retry-after", value), None, "{value:?}");
        }
        let long = "1".repeat(MAX_VALUE_LEN + 1);
        assert_eq!(wait("retry-after", &long), None);
    }

    #[test]
    fn http_dates_in_all_three_forms() {
        // `now` is Wed, 21 Oct 2015 07:28:00 GMT.
        for value in [
            "Wed, 21 Oct 2015 07:28:30 GMT",
            "Wednesday, 21-Oct-15 07:28:30 GMT",
            "Wed Oct 21 07:28:30 2015",
        ] {
            assert_eq!(
                wait("retry-after", value),
                Some(Duration::from_secs(30)),
                "{value}"
            );
        }
        assert_eq!(
            wait("retry-after", "Wed, 21 Oct 2015 07:27:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(
            wait("retry-after", "Fri, 31 Dec 9999 23:59:59 GMT"),
            Some(CAP)
        );
        assert_eq!(wait("retry-after", "Wed, 32 Oct 2015 07:28:30 GMT"), None);
    }
}
