//! Prometheus metrics. Label values that come from clients are capped: after
//! [`MAX_LABEL_VALUES`] distinct values of one label, new ones are counted as `other`, so a
//! misbehaving client cannot grow the registry without bound.

use std::collections::HashSet;
use std::sync::RwLock;

use prometheus::core::Collector;
use prometheus::{
    Encoder, Gauge, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};

/// Distinct values kept per client-supplied label.
pub const MAX_LABEL_VALUES: usize = 64;
const MAX_LABEL_LEN: usize = 64;

/// Whether a channel fetch sent the document or said it had not changed.
#[derive(Debug, Clone, Copy)]
pub enum FetchResult {
    Sent,
    NotModified,
}

pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    bytes: IntCounterVec,
    duration: HistogramVec,
    fetches: IntCounterVec,
    not_modified_ratio: Gauge,
    client_versions: LabelCap,
    installed_packs: LabelCap,
    channels: LabelCap,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// A set of label values seen so far, capped.
#[derive(Debug, Default)]
struct LabelCap {
    seen: RwLock<HashSet<String>>,
}

impl LabelCap {
    /// The label for `value`: itself when clean and among the first [`MAX_LABEL_VALUES`]
    /// seen, else `none`, `invalid` or `other`. A value seen before (every request but the
    /// first of each) costs a shared read lock and no allocation.
    fn label<'a>(&self, value: Option<&'a str>) -> &'a str {
        let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
            return "none";
        };
        let clean = value.len() <= MAX_LABEL_LEN
            && value.bytes().all(|b| {
                b.is_ascii_alphanumeric()
                    || matches!(b, b'.' | b'-' | b'_' | b'+' | b'@' | b'/' | b':')
            });
        if !clean {
            return "invalid";
        }
        {
            let seen = self.seen.read().unwrap_or_else(|p| p.into_inner());
            if seen.contains(value) {
                return value;
            }
            if seen.len() >= MAX_LABEL_VALUES {
                return "other";
            }
        }
        let mut seen = self.seen.write().unwrap_or_else(|p| p.into_inner());
        if !seen.contains(value) {
            if seen.len() >= MAX_LABEL_VALUES {
                return "other";
            }
            seen.insert(value.to_string());
        }
        value
    }
}

impl Metrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "packd_http_requests_total",
                "HTTP requests by route, method and status.",
            ),
            &["route", "method", "status"],
        )?;
        let bytes = IntCounterVec::new(
            Opts::new(
                "packd_http_response_bytes_total",
                "Response body bytes sent, by route.",
            ),
            &["route"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "packd_http_request_duration_seconds",
                "Time to produce the response head, by route.",
            )
            .buckets(vec![0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0]),
            &["route"],
        )?;
        let fetches = IntCounterVec::new(
            Opts::new(
                "packd_channel_fetches_total",
                "Channel document fetches by channel, result (200 or 304), client version and installed pack \
                 (X-Promptpack-Client-Version, X-Promptpack-Installed-Pack).",
            ),
            &["channel", "result", "client_version", "installed_pack"],
        )?;
        let not_modified_ratio = Gauge::new(
            "packd_channel_not_modified_ratio",
            "Share of channel fetches answered 304 Not Modified since start.",
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(bytes.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(fetches.clone()))?;
        registry.register(Box::new(not_modified_ratio.clone()))?;
        Ok(Metrics {
            registry,
            requests,
            bytes,
            duration,
            fetches,
            not_modified_ratio,
            client_versions: LabelCap::default(),
            installed_packs: LabelCap::default(),
            channels: LabelCap::default(),
        })
    }

    pub fn request(
        &self,
        route: &str,
        method: &str,
        status: &str,
        body_bytes: Option<u64>,
        seconds: f64,
    ) {
        self.requests
            .with_label_values(&[route, method, status])
            .inc();
        // Nothing to add for a 304 (most requests): no lookup of the counter either.
        if let Some(n) = body_bytes.filter(|&n| n > 0) {
            self.bytes.with_label_values(&[route]).inc_by(n);
        }
        self.duration.with_label_values(&[route]).observe(seconds);
    }

    pub fn channel_fetch(
        &self,
        channel: &str,
        result: FetchResult,
        client_version: Option<&str>,
        installed: Option<&str>,
    ) {
        let result = match result {
            FetchResult::Sent => "200",
            FetchResult::NotModified => "304",
        };
        let channel = self.channels.label(Some(channel));
        let version = self.client_versions.label(client_version);
        let installed = self.installed_packs.label(installed);
        self.fetches
            .with_label_values(&[channel, result, version, installed])
            .inc();
    }

    /// Adds metrics kept elsewhere (the watch counts) to what [`Metrics::render`] shows.
    pub fn register(&self, collector: Box<dyn Collector>) -> Result<(), prometheus::Error> {
        self.registry.register(collector)
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> Result<String, prometheus::Error> {
        let mut sent = 0u64;
        let mut not_modified = 0u64;
        for family in self.fetches.collect() {
            for metric in family.get_metric() {
                let count = metric.get_counter().get_value() as u64;
                let is_304 = metric
                    .get_label()
                    .iter()
                    .any(|l| l.name() == "result" && l.value() == "304");
                if is_304 {
                    not_modified += count;
                } else {
                    sent += count;
                }
            }
        }
        let total = sent + not_modified;
        self.not_modified_ratio.set(if total == 0 {
            0.0
        } else {
            not_modified as f64 / total as f64
        });
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out)?;
        String::from_utf8(out).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_labels_are_capped_and_cleaned() {
        let m = Metrics::new().unwrap();
        for i in 0..(MAX_LABEL_VALUES + 10) {
            m.channel_fetch("stable", FetchResult::Sent, Some(&format!("1.0.{i}")), None);
        }
        m.channel_fetch(
            "stable",
            FetchResult::NotModified,
            Some("bad\"value"),
            Some("abababababababababababababababababababababababababababababababab"),
        );
        let text = m.render().unwrap();
        assert!(text.contains(r#"client_version="1.0.0""#));
        assert!(text.contains(r#"client_version="other""#));
        assert!(text.contains(r#"client_version="invalid""#));
        assert!(text.contains(r#"installed_pack="none""#));
        assert!(text.contains(
            r#"installed_pack="abababababababababababababababababababababababababababababababab""#
        ));
        assert!(!text.contains(&format!(r#"client_version="1.0.{}""#, MAX_LABEL_VALUES + 5)));
        let ratio = 1.0 / (MAX_LABEL_VALUES as f64 + 11.0);
        assert!(
            text.contains(&format!("packd_channel_not_modified_ratio {ratio}")),
            "{text}"
        );
    }
}
