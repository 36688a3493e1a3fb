//! Prometheus metrics, bounded whatever clients send. Label values that come from clients
//! are capped: after [`MAX_LABEL_VALUES`] distinct values of one label, new ones are counted
//! as `other`. That bounds each label but not their product (64 channels × 64 releases × 64
//! installed packs is 262,144 series), so each family is capped too: after [`MAX_SERIES`]
//! label combinations, new ones are counted in one series whose labels are all `other`, and
//! `packd_metrics_series_folded{family}` says how many combinations went there.

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, RwLock};

use prometheus::core::Collector;
use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec,
    Opts, Registry, TextEncoder,
};

use pack_protocol::paths::CHANNEL_ROUTE;

/// Distinct values kept per client-supplied label.
pub const MAX_LABEL_VALUES: usize = 64;
const MAX_LABEL_LEN: usize = 64;
/// Series kept per metric family; label combinations beyond are counted under `other`.
pub const MAX_SERIES: usize = 1024;
/// The label value of everything a cap folded.
pub const OTHER: &str = "other";

/// Whether a channel fetch sent the document or said it had not changed.
#[derive(Debug, Clone, Copy)]
pub enum FetchResult {
    Sent,
    NotModified,
}

pub struct Metrics {
    registry: Registry,
    requests: Capped<IntCounterVec>,
    bytes: Capped<IntCounterVec>,
    duration: Capped<HistogramVec>,
    fetches: Capped<IntCounterVec>,
    /// Channel fetches answered with the document, and with `304`.
    sent: AtomicU64,
    not_modified: AtomicU64,
    not_modified_ratio: Gauge,
    /// `packd_metrics_series_folded{family}`.
    folded: IntGaugeVec,
    client_versions: LabelCap,
    installed_packs: LabelCap,
    channels: LabelCap,
    /// The series of a `GET` of a channel's document answered `304` and `200`, most of what
    /// packd answers: looked up as [`Metrics::request`] looks up any, once, at the first.
    channel_gets: [OnceLock<Series>; 2],
    /// Tells this node's fetch memos (see [`FETCH_MEMO`]) from another's in one process.
    id: u64,
}

/// The fetches a serving thread counted last, each with the series its labels resolved to:
/// a fetch that names the same channel, result, client version and installed pack as one of
/// them (as most of a fleet's do: it runs a few versions and packs) is counted without the
/// caps' locks and lookups. What a value resolves to never changes: a label admitted stays
/// admitted, and a combination folded into `other` stays folded.
struct FetchMemo {
    metrics: u64,
    channel: String,
    result: &'static str,
    client_version: Option<String>,
    installed: Option<String>,
    counter: IntCounter,
}

/// How many fetches a serving thread remembers.
const FETCH_MEMOS: usize = 4;

thread_local! {
    static FETCH_MEMO: std::cell::RefCell<(usize, Vec<FetchMemo>)> =
        const { std::cell::RefCell::new((0, Vec::new())) };
}

/// A fresh [`Metrics::id`].
fn next_metrics_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A request's series in the three request families, the bytes' looked up at the first
/// answer with a body (as [`Metrics::request`] does).
struct Series {
    count: IntCounter,
    bytes: OnceLock<IntCounter>,
    duration: Histogram,
}

/// A metric family with at most [`MAX_SERIES`] series of their own.
struct Capped<M> {
    family: &'static str,
    metric: M,
    /// Hashes of the label combinations that have a series.
    admitted: RwLock<HashSet<u64>>,
    /// Hashes of the combinations counted under `other` instead. Bounded as the combinations
    /// are: by the product of the labels' caps.
    folded: RwLock<HashSet<u64>>,
    /// Keyed per process, so no client can pick values whose hashes collide.
    hasher: RandomState,
}

impl<M> Capped<M> {
    fn new(family: &'static str, metric: M) -> Self {
        Capped {
            family,
            metric,
            admitted: RwLock::new(HashSet::new()),
            folded: RwLock::new(HashSet::new()),
            hasher: RandomState::new(),
        }
    }

    /// The labels to count `values` under: themselves when they have a series or may have a
    /// new one, else `other` for each (`others`), counting the combination in `folded` the
    /// first time. A combination seen before costs a shared read lock and no allocation.
    fn labels<'a, const N: usize>(
        &self,
        values: &'a [&'a str; N],
        others: &'a [&'a str; N],
        folded: &IntGaugeVec,
    ) -> &'a [&'a str; N] {
        let hash = self.hasher.hash_one(values);
        {
            let admitted = self.admitted.read().unwrap_or_else(|p| p.into_inner());
            if admitted.contains(&hash) {
                return values;
            }
            if admitted.len() < MAX_SERIES {
                drop(admitted);
                let mut admitted = self.admitted.write().unwrap_or_else(|p| p.into_inner());
                if admitted.len() < MAX_SERIES || admitted.contains(&hash) {
                    admitted.insert(hash);
                    return values;
                }
            }
        }
        let seen = self
            .folded
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&hash);
        if !seen
            && self
                .folded
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(hash)
        {
            folded.with_label_values(&[self.family]).inc();
        }
        others
    }
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
        let folded = IntGaugeVec::new(
            Opts::new(
                "packd_metrics_series_folded",
                format!(
                    "Label combinations of a metric family beyond its first {MAX_SERIES} series, \
                     counted in its series whose labels are all `other` instead."
                ),
            ),
            &["family"],
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(bytes.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(fetches.clone()))?;
        registry.register(Box::new(not_modified_ratio.clone()))?;
        registry.register(Box::new(folded.clone()))?;
        Ok(Metrics {
            registry,
            requests: Capped::new("packd_http_requests_total", requests),
            bytes: Capped::new("packd_http_response_bytes_total", bytes),
            duration: Capped::new("packd_http_request_duration_seconds", duration),
            fetches: Capped::new("packd_channel_fetches_total", fetches),
            sent: AtomicU64::new(0),
            not_modified: AtomicU64::new(0),
            not_modified_ratio,
            folded,
            client_versions: LabelCap::default(),
            installed_packs: LabelCap::default(),
            channels: LabelCap::default(),
            channel_gets: Default::default(),
            id: next_metrics_id(),
        })
    }

    /// How many label combinations of `family` are counted under `other`, for a family
    /// rendered elsewhere (the fleet's, with [`capped_family`]).
    pub fn set_folded(&self, family: &str, combinations: usize) {
        self.folded
            .with_label_values(&[family])
            .set(combinations as i64);
    }

    pub fn request(
        &self,
        route: &str,
        method: &str,
        status: &str,
        body_bytes: Option<u64>,
        seconds: f64,
    ) {
        let hot = match status {
            _ if route != CHANNEL_ROUTE || method != "GET" => None,
            "304" => Some(&self.channel_gets[0]),
            "200" => Some(&self.channel_gets[1]),
            _ => None,
        };
        if let Some(hot) = hot {
            let series = hot.get_or_init(|| Series {
                count: self.request_count(route, method, status),
                bytes: OnceLock::new(),
                duration: self.request_duration(route),
            });
            series.count.inc();
            if let Some(n) = body_bytes.filter(|&n| n > 0) {
                series
                    .bytes
                    .get_or_init(|| self.response_bytes(route))
                    .inc_by(n);
            }
            series.duration.observe(seconds);
            return;
        }
        self.request_count(route, method, status).inc();
        // Nothing to add for a 304 (most requests): no lookup of the counter either.
        if let Some(n) = body_bytes.filter(|&n| n > 0) {
            self.response_bytes(route).inc_by(n);
        }
        self.request_duration(route).observe(seconds);
    }

    fn request_count(&self, route: &str, method: &str, status: &str) -> IntCounter {
        let values = [route, method, status];
        let labels = self.requests.labels(&values, &[OTHER; 3], &self.folded);
        self.requests.metric.with_label_values(labels)
    }

    fn response_bytes(&self, route: &str) -> IntCounter {
        let route = [route];
        let labels = self.bytes.labels(&route, &[OTHER], &self.folded);
        self.bytes.metric.with_label_values(labels)
    }

    fn request_duration(&self, route: &str) -> Histogram {
        let route = [route];
        let labels = self.duration.labels(&route, &[OTHER], &self.folded);
        self.duration.metric.with_label_values(labels)
    }

    pub fn channel_fetch(
        &self,
        channel: &str,
        result: FetchResult,
        client_version: Option<&str>,
        installed: Option<&str>,
    ) {
        let result = match result {
            FetchResult::Sent => {
                self.sent.fetch_add(1, Ordering::Relaxed);
                "200"
            }
            FetchResult::NotModified => {
                self.not_modified.fetch_add(1, Ordering::Relaxed);
                "304"
            }
        };
        FETCH_MEMO.with_borrow_mut(|(next, memos)| {
            let seen = memos.iter().find(|m| {
                m.metrics == self.id
                    && m.result == result
                    && m.channel == channel
                    && m.client_version.as_deref() == client_version
                    && m.installed.as_deref() == installed
            });
            if let Some(memo) = seen {
                memo.counter.inc();
                return;
            }
            let labels = [
                self.channels.label(Some(channel)),
                result,
                self.client_versions.label(client_version),
                self.installed_packs.label(installed),
            ];
            let labels = self.fetches.labels(&labels, &[OTHER; 4], &self.folded);
            let counter = self.fetches.metric.with_label_values(labels);
            counter.inc();
            let memo = FetchMemo {
                metrics: self.id,
                channel: channel.to_owned(),
                result,
                client_version: client_version.map(str::to_owned),
                installed: installed.map(str::to_owned),
                counter,
            };
            if memos.len() < FETCH_MEMOS {
                memos.push(memo);
            } else {
                memos[*next] = memo;
                *next = (*next + 1) % FETCH_MEMOS;
            }
        });
    }

    /// Adds metrics kept elsewhere (the watch counts) to what [`Metrics::render`] shows.
    pub fn register(&self, collector: Box<dyn Collector>) -> Result<(), prometheus::Error> {
        self.registry.register(collector)
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> Result<String, prometheus::Error> {
        let sent = self.sent.load(Ordering::Relaxed);
        let not_modified = self.not_modified.load(Ordering::Relaxed);
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

/// The sample lines of a gauge family computed afresh for each exposition (the fleet's):
/// the [`MAX_SERIES`] largest `samples` (label values in the order of `labels`) keep their
/// labels, the rest add up into one series labelled `other` throughout. Returns the lines
/// and how many series were folded.
pub fn capped_family(
    name: &str,
    labels: &[&str],
    mut samples: Vec<(Vec<String>, u64)>,
) -> (String, usize) {
    samples.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let rest = samples.split_off(samples.len().min(MAX_SERIES));
    let folded = rest.len();
    if folded > 0 {
        let sum = rest.iter().map(|(_, value)| value).sum::<u64>();
        // A kept series may be labelled `other` throughout already: it takes the rest too,
        // since one exposition must not name one series twice.
        match samples
            .iter_mut()
            .find(|(values, _)| values.iter().all(|v| v == OTHER))
        {
            Some((_, value)) => *value += sum,
            None => samples.push((vec![OTHER.to_string(); labels.len()], sum)),
        }
    }
    let mut text = String::new();
    for (values, value) in samples {
        let pairs: Vec<String> = labels
            .iter()
            .zip(&values)
            .map(|(label, value)| format!("{label}=\"{value}\""))
            .collect();
        text.push_str(&format!("{name}{{{}}} {value}\n", pairs.join(",")));
    }
    (text, folded)
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

    /// Fetches counted through a serving thread's memo land in their own series, whatever
    /// the order, and two nodes in one thread do not share memos.
    #[test]
    fn remembered_fetches_count_in_their_own_series() {
        let (a, b) = (Metrics::new().unwrap(), Metrics::new().unwrap());
        let versions = ["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0"];
        for round in 0..3 {
            for (i, version) in versions.iter().enumerate() {
                // More combinations than the memo holds, in an order that evicts each.
                for _ in 0..=i {
                    a.channel_fetch("stable", FetchResult::NotModified, Some(version), None);
                }
                if round == 0 {
                    // What `a` just counted, and may remember.
                    b.channel_fetch("stable", FetchResult::NotModified, Some(version), None);
                }
            }
            a.channel_fetch("stable", FetchResult::Sent, Some(" 1.0.0 "), None);
        }
        let (a, b) = (a.render().unwrap(), b.render().unwrap());
        for (i, version) in versions.iter().enumerate() {
            let series = format!(
                r#"packd_channel_fetches_total{{channel="stable",client_version="{version}",installed_pack="none",result="304"}} {}"#,
                3 * (i + 1)
            );
            assert!(a.contains(&series), "{series}\n{a}");
            let series = format!(
                r#"packd_channel_fetches_total{{channel="stable",client_version="{version}",installed_pack="none",result="304"}} 1"#
            );
            assert!(b.contains(&series), "{series}\n{b}");
        }
        // The spelling with spaces is its own memo, and the same label.
        assert!(
            a.contains(r#"packd_channel_fetches_total{channel="stable",client_version="1.0.0",installed_pack="none",result="200"} 3"#),
            "{a}"
        );
    }

    #[test]
    fn a_family_past_its_series_cap_counts_new_combinations_under_other() {
        let m = Metrics::new().unwrap();
        for i in 0..MAX_SERIES + 5 {
            m.request(&format!("/route/{i}"), "GET", "200", None, 0.001);
        }
        // Seen before the cap: still its own series. Folded once: counted once.
        m.request("/route/0", "GET", "200", None, 0.001);
        m.request(
            &format!("/route/{}", MAX_SERIES + 1),
            "GET",
            "200",
            None,
            0.001,
        );
        let text = m.render().unwrap();
        let requests: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("packd_http_requests_total{"))
            .collect();
        assert_eq!(requests.len(), MAX_SERIES + 1);
        assert!(
            text.contains(
                r#"packd_http_requests_total{method="other",route="other",status="other"} 6"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"packd_http_requests_total{method="GET",route="/route/0",status="200"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"packd_metrics_series_folded{family="packd_http_requests_total"} 5"#),
            "{text}"
        );
    }

    #[test]
    fn a_capped_family_names_its_other_series_once() {
        let mut samples: Vec<(Vec<String>, u64)> = (0..MAX_SERIES as u64 + 2)
            .map(|i| (vec![format!("c{i}")], i + 10))
            .collect();
        // A channel named `other` is as large as any.
        samples.push((vec![OTHER.to_string()], 5_000));
        let (text, folded) = capped_family("fleet", &["channel"], samples);
        assert_eq!(folded, 3);
        assert_eq!(text.lines().count(), MAX_SERIES);
        // The three smallest (10, 11, 12) went into the `other` already there.
        assert!(text.contains("fleet{channel=\"other\"} 5033\n"), "{text}");
        assert!(!text.contains("fleet{channel=\"c2\"}"), "{text}");
        assert!(text.contains("fleet{channel=\"c3\"} 13\n"), "{text}");
    }
}
