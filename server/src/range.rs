//! HTTP conditional and range request headers, for blobs and channel documents.

use std::ops::Range;

/// What a `Range` header asks of an object of a known size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeRequest {
    /// No range, an unknown unit, several ranges or bad syntax: send everything (RFC 9110
    /// lets a server ignore a `Range` it does not support).
    Full,
    /// One satisfiable range, clamped to the object.
    Partial(Range<u64>),
    /// A range that starts past the end: `416` with `Content-Range: bytes */size`.
    Unsatisfiable,
}

/// Interprets `Range: bytes=a-b | a- | -n` against an object of `size` bytes.
pub fn parse_range(header: Option<&str>, size: u64) -> RangeRequest {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return RangeRequest::Full;
    };
    if spec.contains(',') {
        return RangeRequest::Full;
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return RangeRequest::Full;
    };
    let (first, last) = (first.trim(), last.trim());
    if first.is_empty() {
        // Suffix: the last `n` bytes.
        let Ok(n) = last.parse::<u64>() else {
            return RangeRequest::Full;
        };
        if n == 0 || size == 0 {
            return RangeRequest::Unsatisfiable;
        }
        return RangeRequest::Partial(size - n.min(size)..size);
    }
    let Ok(start) = first.parse::<u64>() else {
        return RangeRequest::Full;
    };
    let end = if last.is_empty() {
        size
    } else {
        match last.parse::<u64>() {
            Ok(l) if l >= start => l.saturating_add(1).min(size),
            Ok(_) | Err(_) => return RangeRequest::Full,
        }
    };
    if start >= size {
        return RangeRequest::Unsatisfiable;
    }
    RangeRequest::Partial(start..end)
}

/// Whether an `If-None-Match` header value matches `etag` (weak comparison, `*` matches).
pub fn if_none_match(header: Option<&str>, etag: &str) -> bool {
    let Some(header) = header else {
        return false;
    };
    let ours = etag.trim_start_matches("W/");
    header
        .split(',')
        .map(str::trim)
        .any(|candidate| candidate == "*" || candidate.trim_start_matches("W/") == ours)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        use RangeRequest::*;
        assert_eq!(parse_range(None, 10), Full);
        assert_eq!(parse_range(Some("bytes=0-3"), 10), Partial(0..4));
        assert_eq!(parse_range(Some("bytes=5-"), 10), Partial(5..10));
        assert_eq!(parse_range(Some("bytes=5-100"), 10), Partial(5..10));
        assert_eq!(parse_range(Some("bytes=-3"), 10), Partial(7..10));
        assert_eq!(parse_range(Some("bytes=-30"), 10), Partial(0..10));
        assert_eq!(parse_range(Some("bytes=10-"), 10), Unsatisfiable);
        assert_eq!(parse_range(Some("bytes=-0"), 10), Unsatisfiable);
        assert_eq!(parse_range(Some("bytes=4-2"), 10), Full);
        assert_eq!(parse_range(Some("bytes=0-1,4-5"), 10), Full);
        assert_eq!(parse_range(Some("items=0-1"), 10), Full);
        assert_eq!(parse_range(Some("bytes=x-1"), 10), Full);
    }

    #[test]
    fn etags() {
        assert!(if_none_match(Some("\"abc\""), "\"abc\""));
        assert!(if_none_match(Some("\"x\", W/\"abc\""), "\"abc\""));
        assert!(if_none_match(Some("*"), "\"abc\""));
        assert!(!if_none_match(Some("\"abd\""), "\"abc\""));
        assert!(!if_none_match(None, "\"abc\""));
    }
}
