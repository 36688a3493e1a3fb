//! The fleet view: distinct installs per channel by client release × installed pack over a
//! sliding window of UTC days, and the failure reports clients send. Correct with any number
//! of packd nodes, and bounded in memory and storage.
//!
//! Each node counts what it serves in memory, per channel and UTC day, and writes its counts
//! to `fleet/{channel}/{day}/{node}.json` every `[fleet] flush_secs`, replacing its own
//! earlier write. The node id is random per process, so no two processes ever write one key
//! and nothing is lost when a node restarts. A reader merges every node's file of each day in
//! the window (with its own counts not yet written). Installs are counted in a [`Sketch`]:
//! exact up to [`EXACT_MAX`] installs per cell, then a HyperLogLog of precision
//! [`PRECISION`]. The union of sketches is idempotent, so an install seen by several nodes,
//! or on several days, counts once. Failure reports are counts, summed over the node files
//! (each process counts only its own), with a sketch of the installs that sent them.
//!
//! Storage keeps no install hash: a cell holds at most [`EXACT_MAX`] 64-bit hashes *of* the
//! install hashes, or HyperLogLog registers. Days older than the window are deleted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use hyperloglockless::{DefaultHasher, HyperLogLog};
use object_store::ObjectMeta;
use pack_protocol::{
    EstimateInfo, FailingPack, FailureCell, FleetCell, FleetView, PackRecord, RangePack, RangeView,
    ReportReason,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use time::{Date, OffsetDateTime};

use crate::metrics::capped_family;
use crate::storage::{Storage, StorageError, listed_write};

pub mod outcomes;

use outcomes::Outcomes;

/// HyperLogLog precision: 4,096 one-byte registers, about 1.6 % relative standard error.
pub const PRECISION: u8 = 12;
/// Registers of a dense sketch.
pub const REGISTERS: usize = 1 << PRECISION;
/// Installs a cell counts exactly, as a sorted list of 64-bit hashes: as many as fit in the
/// memory of the dense form.
pub const EXACT_MAX: usize = REGISTERS / 8;
/// The relative standard error of a dense sketch, `1.04 / sqrt(registers)`.
pub const RELATIVE_ERROR: f64 = 1.04 / 64.0;
/// Days the fleet view covers at most, and days kept in storage.
pub const MAX_WINDOW_DAYS: u32 = 7;
/// The release or pack of the cell that takes everything over the cell cap.
pub const OTHER: &str = "other";
/// The release or pack of a client that did not say (or said something malformed).
pub const UNKNOWN: &str = "unknown";

/// A register's largest value: 1 + the trailing zeros of a 64-bit hash.
const MAX_RANK: u8 = 65;
const NODE_FILE_FORMAT: u32 = 1;
/// Largest node file read back (a full one, at 256 cells of 4 KiB, is about 1.5 MiB).
const MAX_NODE_FILE_BYTES: u64 = 16 << 20;
/// Node files read per day at most: one per packd process that served clients that day.
const MAX_NODE_FILES_PER_DAY: usize = 256;
/// Channel-days a node counts in memory at once.
const MAX_LIVE_ENTRIES: usize = 1024;
/// Longest release or pack label kept (releases are checked to be at most 64 bytes).
const MAX_LABEL_LEN: usize = 80;

/// `[fleet]` settings.
#[derive(Debug, Clone)]
pub struct FleetSettings {
    /// Count installs and accept failure reports.
    pub enabled: bool,
    /// How often a node writes its counts.
    pub flush_interval: Duration,
    /// Client release × pack cells per channel and day; beyond, new combinations count
    /// under `other` × `other`. The same cap holds for failure cells.
    pub max_cells: usize,
    /// Failure reports one install may send per hour, per node (outcome reports likewise,
    /// counted apart).
    pub reports_per_install_per_hour: u32,
    /// Reports one network address (an IPv4 address, an IPv6 /64) may send per hour, per
    /// node, whatever install hashes it names: failure reports and outcome reports, each
    /// counted apart. An office or a carrier's NAT puts many installs behind one address,
    /// each sending a few outcome reports an hour.
    pub reports_per_address_per_hour: u32,
    /// Failure reports one node accepts per second, from everyone.
    pub reports_per_second: u32,
    /// Who may read the fleet view: as the deployment's reads, or publishers only.
    pub view: ViewScope,
}

impl Default for FleetSettings {
    fn default() -> Self {
        FleetSettings {
            enabled: true,
            flush_interval: Duration::from_secs(10),
            max_cells: 256,
            reports_per_install_per_hour: 20,
            reports_per_address_per_hour: 2000,
            reports_per_second: 200,
            view: ViewScope::Read,
        }
    }
}

/// Who may read `GET /v1/channels/{channel}/fleet`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ViewScope {
    /// Like every read: open on a public deployment, a `read` token on a private one.
    Read,
    /// A `publish` token, even on a public deployment.
    Publish,
}

/// Distinct installs: exact while small, a HyperLogLog beyond.
#[derive(Debug, Clone)]
pub enum Sketch {
    /// Sorted, distinct 64-bit hashes of install hashes, at most [`EXACT_MAX`].
    Exact(Vec<u64>),
    Dense(Box<HyperLogLog>),
}

impl Default for Sketch {
    fn default() -> Self {
        Sketch::Exact(Vec::new())
    }
}

fn empty_dense() -> HyperLogLog {
    HyperLogLog::seeded(PRECISION, 0)
}

fn dense_of(hashes: &[u64]) -> HyperLogLog {
    let mut dense = empty_dense();
    for &hash in hashes {
        dense.insert_hash(hash);
    }
    dense
}

impl Sketch {
    pub fn insert(&mut self, hash: u64) {
        match self {
            Sketch::Exact(hashes) => match hashes.binary_search(&hash) {
                Ok(_) => {}
                Err(at) if hashes.len() < EXACT_MAX => hashes.insert(at, hash),
                Err(_) => {
                    let mut dense = dense_of(hashes);
                    dense.insert_hash(hash);
                    *self = Sketch::Dense(Box::new(dense));
                }
            },
            Sketch::Dense(dense) => dense.insert_hash(hash),
        }
    }

    /// Adds every install of `other`; an install in both counts once.
    pub fn merge(&mut self, other: &Sketch) {
        match other {
            Sketch::Exact(hashes) => {
                for &hash in hashes {
                    self.insert(hash);
                }
            }
            Sketch::Dense(theirs) => {
                if let Sketch::Exact(mine) = self {
                    *self = Sketch::Dense(Box::new(dense_of(mine)));
                }
                if let Sketch::Dense(mine) = self {
                    // Both have PRECISION registers: the only error (unequal lengths) cannot occur.
                    let _ = mine.union(theirs);
                }
            }
        }
    }

    /// Distinct installs: exact in the exact form, estimated in the dense one.
    pub fn estimate(&self) -> u64 {
        match self {
            Sketch::Exact(hashes) => hashes.len() as u64,
            Sketch::Dense(dense) => dense.count() as u64,
        }
    }

    /// Bytes of memory, the enum included.
    pub fn memory(&self) -> usize {
        std::mem::size_of::<Sketch>()
            + match self {
                Sketch::Exact(hashes) => hashes.capacity() * 8,
                Sketch::Dense(_) => std::mem::size_of::<HyperLogLog>() + REGISTERS,
            }
    }

    fn encode(&self) -> SketchRepr {
        let b64 = base64::engine::general_purpose::STANDARD;
        match self {
            Sketch::Exact(hashes) => {
                let bytes: Vec<u8> = hashes.iter().flat_map(|h| h.to_be_bytes()).collect();
                SketchRepr::Exact(b64.encode(bytes))
            }
            Sketch::Dense(dense) => SketchRepr::Dense(b64.encode(dense.parts().0)),
        }
    }

    fn decode(repr: &SketchRepr) -> Result<Sketch, String> {
        let b64 = base64::engine::general_purpose::STANDARD;
        match repr {
            SketchRepr::Exact(text) => {
                let bytes = b64.decode(text).map_err(|e| format!("exact sketch: {e}"))?;
                if bytes.len() % 8 != 0 || bytes.len() / 8 > EXACT_MAX {
                    return Err(format!(
                        "exact sketch of {} bytes: expected a multiple of 8, at most {}",
                        bytes.len(),
                        EXACT_MAX * 8
                    ));
                }
                let mut hashes: Vec<u64> = bytes
                    .chunks_exact(8)
                    .map(|c| u64::from_be_bytes(c.try_into().unwrap_or_default()))
                    .collect();
                hashes.sort_unstable();
                hashes.dedup();
                Ok(Sketch::Exact(hashes))
            }
            SketchRepr::Dense(text) => {
                let registers = b64.decode(text).map_err(|e| format!("dense sketch: {e}"))?;
                if registers.len() != REGISTERS {
                    return Err(format!(
                        "dense sketch of {} registers, expected {REGISTERS}",
                        registers.len()
                    ));
                }
                if let Some(bad) = registers.iter().find(|&&r| r > MAX_RANK) {
                    return Err(format!(
                        "dense sketch register {bad} is over the largest rank {MAX_RANK}"
                    ));
                }
                let zeros = registers.iter().filter(|&&r| r == 0).count();
                let sum: f64 = registers.iter().map(|&r| 0.5f64.powi(i32::from(r))).sum();
                Ok(Sketch::Dense(Box::new(HyperLogLog::from_parts(
                    registers.into_boxed_slice(),
                    DefaultHasher::seeded(&0u128.to_be_bytes()),
                    zeros,
                    sum,
                ))))
            }
        }
    }
}

/// How a sketch is stored: base64 of the sorted big-endian hashes, or of the registers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum SketchRepr {
    Exact(String),
    Dense(String),
}

/// The 64-bit value an install hash is counted by. Hashed again so a client cannot pick the
/// register its value lands in (or the rank it sets) by choosing its header.
pub fn install_key(install_hash: &str) -> u64 {
    let digest = sha2::Sha256::digest(install_hash.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// (client release, pack)
type CellKey = (String, String);

/// Two strings, owned or borrowed: a [`CellKey`] looked up by `(&str, &str)` without
/// allocating, ordered as the tuple of owned strings is.
trait Pair {
    fn pair(&self) -> (&str, &str);
}

impl Pair for (String, String) {
    fn pair(&self) -> (&str, &str) {
        (&self.0, &self.1)
    }
}

impl Pair for (&str, &str) {
    fn pair(&self) -> (&str, &str) {
        (self.0, self.1)
    }
}

impl<'a> std::borrow::Borrow<dyn Pair + 'a> for (String, String) {
    fn borrow(&self) -> &(dyn Pair + 'a) {
        self
    }
}

impl PartialEq for dyn Pair + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.pair() == other.pair()
    }
}

impl Eq for dyn Pair + '_ {}

impl PartialOrd for dyn Pair + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn Pair + '_ {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.pair().cmp(&other.pair())
    }
}

/// (pack, reason, client release)
type FailureKey = (String, String, String);

/// A channel and a day, owned or borrowed: a `live` key looked up by `(&str, Date)` without
/// allocating, hashed and compared as the owned tuple is.
trait ChannelDay {
    fn channel_day(&self) -> (&str, Date);
}

impl ChannelDay for (String, Date) {
    fn channel_day(&self) -> (&str, Date) {
        (&self.0, self.1)
    }
}

impl ChannelDay for (&str, Date) {
    fn channel_day(&self) -> (&str, Date) {
        *self
    }
}

impl<'a> std::borrow::Borrow<dyn ChannelDay + 'a> for (String, Date) {
    fn borrow(&self) -> &(dyn ChannelDay + 'a) {
        self
    }
}

impl std::hash::Hash for dyn ChannelDay + '_ {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As `(String, Date)` hashes: a `String` hashes as its `str`.
        self.channel_day().hash(state);
    }
}

impl PartialEq for dyn ChannelDay + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.channel_day() == other.channel_day()
    }
}

impl Eq for dyn ChannelDay + '_ {}

#[derive(Debug, Clone, Default)]
struct Failures {
    reports: u64,
    installs: Sketch,
}

/// One channel's counts of one day, from one node or merged.
#[derive(Debug, Clone, Default)]
pub struct DayData {
    cells: BTreeMap<CellKey, Sketch>,
    failures: BTreeMap<FailureKey, Failures>,
    overflow: bool,
}

impl DayData {
    /// Counts `install` in the cell of `release` × `pack`, or in `other` × `other` once the
    /// day holds `max_cells` cells. A cell seen before is found without allocating.
    fn add_install(&mut self, release: &str, pack: &str, install: u64, max_cells: usize) {
        let mut cell = (release, pack);
        if self.cells.len() + 1 >= max_cells && !self.cells.contains_key(&cell as &dyn Pair) {
            self.overflow = true;
            cell = (OTHER, OTHER);
        }
        match self.cells.get_mut(&cell as &dyn Pair) {
            Some(sketch) => sketch.insert(install),
            None => self
                .cells
                .entry((cell.0.to_string(), cell.1.to_string()))
                .or_default()
                .insert(install),
        }
    }

    fn add_report(
        &mut self,
        pack: &str,
        reason: ReportReason,
        release: &str,
        install: u64,
        max_cells: usize,
    ) {
        let mut key = (
            pack.to_string(),
            reason.as_str().to_string(),
            release.to_string(),
        );
        if !self.failures.contains_key(&key) && self.failures.len() + 1 >= max_cells {
            self.overflow = true;
            key = (OTHER.to_string(), OTHER.to_string(), OTHER.to_string());
        }
        let failures = self.failures.entry(key).or_default();
        failures.reports = failures.reports.saturating_add(1);
        failures.installs.insert(install);
    }

    fn merge(&mut self, other: &DayData) {
        for (key, sketch) in &other.cells {
            self.cells.entry(key.clone()).or_default().merge(sketch);
        }
        for (key, theirs) in &other.failures {
            let mine = self.failures.entry(key.clone()).or_default();
            mine.reports = mine.reports.saturating_add(theirs.reports);
            mine.installs.merge(&theirs.installs);
        }
        self.overflow |= other.overflow;
    }

    /// Bytes of memory held by the sketches and labels.
    pub fn memory(&self) -> usize {
        let cells: usize = self
            .cells
            .iter()
            .map(|((r, p), s)| r.capacity() + p.capacity() + s.memory())
            .sum();
        let failures: usize = self
            .failures
            .iter()
            .map(|((p, w, r), f)| p.capacity() + w.capacity() + r.capacity() + f.installs.memory())
            .sum();
        cells + failures
    }

    fn to_file(&self, channel: &str, day: Date, node: &str) -> NodeFile {
        NodeFile {
            format: NODE_FILE_FORMAT,
            channel: channel.to_string(),
            day: day_text(day),
            node: node.to_string(),
            written_at: crate::model::rfc3339(OffsetDateTime::now_utc()),
            overflow: self.overflow,
            cells: self
                .cells
                .iter()
                .map(|((release, pack), sketch)| CellRecord {
                    client_version: release.clone(),
                    pack: pack.clone(),
                    sketch: sketch.encode(),
                })
                .collect(),
            failures: self
                .failures
                .iter()
                .map(|((pack, reason, release), f)| FailureRecord {
                    pack: pack.clone(),
                    reason: reason.clone(),
                    client_version: release.clone(),
                    reports: f.reports,
                    installs: f.installs.encode(),
                })
                .collect(),
        }
    }

    fn from_file(file: &NodeFile) -> Result<DayData, String> {
        if file.format != NODE_FILE_FORMAT {
            return Err(format!("format {} is not {NODE_FILE_FORMAT}", file.format));
        }
        let label = |text: &str| -> Result<String, String> {
            if text.is_empty() || text.len() > MAX_LABEL_LEN {
                return Err(format!("label of {} bytes", text.len()));
            }
            Ok(text.to_string())
        };
        let mut day = DayData {
            overflow: file.overflow,
            ..DayData::default()
        };
        for cell in &file.cells {
            let key = (label(&cell.client_version)?, label(&cell.pack)?);
            day.cells
                .entry(key)
                .or_default()
                .merge(&Sketch::decode(&cell.sketch)?);
        }
        for f in &file.failures {
            let key = (
                label(&f.pack)?,
                label(&f.reason)?,
                label(&f.client_version)?,
            );
            let entry = day.failures.entry(key).or_default();
            entry.reports = entry.reports.saturating_add(f.reports);
            entry.installs.merge(&Sketch::decode(&f.installs)?);
        }
        Ok(day)
    }
}

/// `fleet/{channel}/{day}/{node}.json`: one node's counts of one channel and day.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeFile {
    format: u32,
    channel: String,
    day: String,
    node: String,
    written_at: String,
    overflow: bool,
    cells: Vec<CellRecord>,
    failures: Vec<FailureRecord>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CellRecord {
    client_version: String,
    pack: String,
    sketch: SketchRepr,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FailureRecord {
    pack: String,
    reason: String,
    client_version: String,
    reports: u64,
    installs: SketchRepr,
}

/// Storage keys of the fleet data.
pub mod keys {
    pub const FLEET: &str = "fleet";
    pub fn channel_dir(channel: &str) -> String {
        format!("fleet/{channel}")
    }
    pub fn day_dir(channel: &str, day: &str) -> String {
        format!("fleet/{channel}/{day}")
    }
    pub fn node_file(channel: &str, day: &str, node: &str) -> String {
        format!("fleet/{channel}/{day}/{node}.json")
    }
}

fn day_text(day: Date) -> String {
    format!(
        "{:04}-{:02}-{:02}",
        day.year(),
        u8::from(day.month()),
        day.day()
    )
}

fn parse_day(text: &str) -> Option<Date> {
    let format = time::macros::format_description!("[year]-[month]-[day]");
    Date::parse(text, &format).ok()
}

#[derive(Debug)]
struct LiveEntry {
    data: DayData,
    dirty: bool,
}

const INSTALLS_FAMILY: &str = "packd_fleet_installs";
const REPORTS_FAMILY: &str = "packd_fleet_failure_reports";

/// The fleet's part of `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct FleetMetrics {
    /// Prometheus text.
    pub text: String,
    /// How many series of each family were folded into `other`.
    pub folded: Vec<(&'static str, usize)>,
}

/// What a node has read of a closed day (before yesterday: no node writes it any more),
/// with the listing it was read from, so an unchanged day is not read again.
type ClosedDay = (Vec<(String, u64)>, Arc<DayData>);

/// The fleet counts of this node, and the reader that merges every node's.
pub struct Fleet {
    settings: FleetSettings,
    node: String,
    live: Mutex<HashMap<(String, Date), LiveEntry>>,
    closed: Mutex<HashMap<(String, Date), ClosedDay>>,
    /// SHA-256 → version of uploaded packs, from their records. A record replaced while its
    /// version was unreleased leaves its old entry, which stays true: that blob is that
    /// version.
    versions: Mutex<HashMap<String, semver::Version>>,
    /// The records read, by key and write ([`crate::storage::listed_write`]).
    records_read: Mutex<HashSet<(String, String)>>,
    last_sweep: Mutex<Option<Date>>,
    metrics_cache: Mutex<Option<(Instant, FleetMetrics)>>,
    full_warned: Mutex<bool>,
    /// The outcome counts clients report, written and swept with the fleet's.
    outcomes: Outcomes,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// A client's release as counted: checked semver, or `unknown`.
fn release_label(release: Option<&str>) -> &str {
    match release.map(str::trim) {
        Some(text) if pack_protocol::fleet::is_release(text) => text,
        Some(_) | None => UNKNOWN,
    }
}

/// A client's installed pack as counted: a SHA-256, `builtin`, or `unknown`.
fn pack_label(pack: Option<&str>) -> &str {
    match pack.map(str::trim) {
        Some(text)
            if text == pack_protocol::headers::INSTALLED_BUILTIN
                || pack_protocol::is_sha256_hex(text) =>
        {
            text
        }
        Some(_) | None => UNKNOWN,
    }
}

impl Fleet {
    pub fn new(settings: FleetSettings) -> Fleet {
        let node = hex::encode(rand::random::<[u8; 8]>());
        Fleet {
            outcomes: Outcomes::new(&node, settings.max_cells),
            settings,
            node,
            live: Mutex::new(HashMap::new()),
            closed: Mutex::new(HashMap::new()),
            versions: Mutex::new(HashMap::new()),
            records_read: Mutex::new(HashSet::new()),
            last_sweep: Mutex::new(None),
            metrics_cache: Mutex::new(None),
            full_warned: Mutex::new(false),
        }
    }

    pub fn settings(&self) -> &FleetSettings {
        &self.settings
    }

    /// This process's node id: the name of its files under `fleet/` and `outcomes/`.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The outcome counts: [`Outcomes::record`] takes a client's report,
    /// [`Outcomes::view`] merges every node's.
    pub fn outcomes(&self) -> &Outcomes {
        &self.outcomes
    }

    fn with_today(&self, channel: &str, now: OffsetDateTime, add: impl FnOnce(&mut DayData)) {
        let mut live = lock(&self.live);
        let today = (channel, now.date());
        // A channel-day seen before is found without allocating.
        if let Some(entry) = live.get_mut(&today as &dyn ChannelDay) {
            add(&mut entry.data);
            entry.dirty = true;
            return;
        }
        let key = (channel.to_string(), today.1);
        if live.len() >= MAX_LIVE_ENTRIES {
            let mut warned = lock(&self.full_warned);
            if !*warned {
                tracing::warn!(
                    channel,
                    "fleet counts of {MAX_LIVE_ENTRIES} channel-days are in memory; not counting more until the next write"
                );
                *warned = true;
            }
            return;
        }
        let entry = live.entry(key).or_insert_with(|| LiveEntry {
            data: DayData::default(),
            dirty: false,
        });
        add(&mut entry.data);
        entry.dirty = true;
    }

    /// Counts a channel fetch. Nothing is counted without a well-formed install hash (a client
    /// with telemetry off sends none).
    pub fn record_fetch(
        &self,
        channel: &str,
        release: Option<&str>,
        pack: Option<&str>,
        install: Option<&str>,
        now: OffsetDateTime,
    ) {
        if !self.settings.enabled {
            return;
        }
        let Some(install) = install.filter(|i| pack_protocol::fleet::is_install_hash(i)) else {
            return;
        };
        let key = install_key(install);
        let (release, pack) = (release_label(release), pack_label(pack));
        let max_cells = self.settings.max_cells;
        self.with_today(channel, now, |day| {
            day.add_install(release, pack, key, max_cells);
        });
    }

    /// Counts an accepted failure report.
    pub fn record_report(
        &self,
        report: &pack_protocol::FailureReport,
        install: &str,
        now: OffsetDateTime,
    ) {
        let key = install_key(install);
        let max_cells = self.settings.max_cells;
        self.with_today(&report.channel, now, |day| {
            day.add_report(
                &report.pack,
                report.reason,
                &report.client_version.to_string(),
                key,
                max_cells,
            );
        });
    }

    /// Bytes of memory the counts not yet dropped take.
    pub fn memory(&self) -> usize {
        lock(&self.live).values().map(|e| e.data.memory()).sum()
    }

    /// Writes every changed count of this node, drops the days that ended once they are
    /// written, and once a day deletes the days past the window. A write that fails is tried
    /// again at the next flush.
    pub async fn flush(&self, storage: &Storage) {
        let now = OffsetDateTime::now_utc();
        let dirty: Vec<((String, Date), DayData)> = {
            let mut live = lock(&self.live);
            live.iter_mut()
                .filter(|(_, e)| e.dirty)
                .map(|(k, e)| {
                    e.dirty = false;
                    (k.clone(), e.data.clone())
                })
                .collect()
        };
        for ((channel, day), data) in dirty {
            let key = keys::node_file(&channel, &day_text(day), &self.node);
            let written = serde_json::to_vec(&data.to_file(&channel, day, &self.node))
                .map_err(|e| e.to_string());
            let result = match written {
                Ok(bytes) => storage
                    .put(&key, Bytes::from(bytes))
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e),
            };
            if let Err(err) = result {
                tracing::warn!(key, %err, "could not write fleet counts; trying again at the next flush");
                if let Some(entry) = lock(&self.live).get_mut(&(channel, day)) {
                    entry.dirty = true;
                }
            }
        }
        {
            let mut live = lock(&self.live);
            live.retain(|(_, day), entry| *day >= now.date() || entry.dirty);
            *lock(&self.full_warned) = false;
        }
        self.outcomes.flush(storage).await;
        let swept_today = *lock(&self.last_sweep) == Some(now.date());
        if !swept_today {
            match self.sweep(storage, now.date()).await {
                Ok(removed) => {
                    *lock(&self.last_sweep) = Some(now.date());
                    if removed > 0 {
                        tracing::info!(removed, "deleted fleet counts older than the window");
                    }
                }
                Err(err) => tracing::warn!(%err, "could not delete old fleet counts"),
            }
        }
    }

    /// Deletes the files of days before the window, fleet counts and outcome counts. Every
    /// node may do it; deleting what another node just deleted is no error.
    async fn sweep(&self, storage: &Storage, today: Date) -> Result<usize, StorageError> {
        let oldest = today - time::Duration::days(i64::from(MAX_WINDOW_DAYS) - 1);
        let mut removed = 0;
        for root in [keys::FLEET, outcomes::keys::OUTCOMES] {
            for channel in storage.list_dirs(root).await? {
                let channel_dir = format!("{root}/{channel}");
                for day in storage.list_dirs(&channel_dir).await? {
                    if parse_day(&day).is_some_and(|d| d >= oldest) {
                        continue;
                    }
                    for meta in storage.list(&format!("{channel_dir}/{day}")).await? {
                        storage.delete(meta.location.as_ref()).await?;
                        removed += 1;
                    }
                }
            }
        }
        lock(&self.closed).retain(|(_, day), _| *day >= oldest);
        Ok(removed)
    }

    /// Every node's counts of `channel` on `day`, merged (this node's unwritten ones are
    /// merged in by [`DayParts::combine`]). Parsing and merging run on the blocking pool, a
    /// file at a time: a node file of 256 dense cells is 1.5 MiB of JSON, and a week of a
    /// large fleet is hundreds of them, which would hold up every connection this thread
    /// serves.
    async fn read_day(
        &self,
        storage: &Storage,
        channel: &str,
        day: Date,
        today: Date,
    ) -> Result<DayParts, StorageError> {
        let own = lock(&self.live)
            .get(&(channel.to_string(), day))
            .map(|e| e.data.clone());
        let day_name = day_text(day);
        let own_file = keys::node_file(channel, &day_name, &self.node);
        // This node's own file holds no more than its memory while the day is in memory.
        let skip = own.is_some().then_some(own_file.as_str());
        let metas = list_node_files::<DayData>(
            storage,
            &keys::day_dir(channel, &day_name),
            skip,
            channel,
            &day_name,
        )
        .await?;
        let listing: Vec<(String, u64)> = metas
            .iter()
            .map(|m| (m.location.to_string(), m.size))
            .collect();
        let closed = day < today - time::Duration::days(1) && own.is_none();
        let cache_key = (channel.to_string(), day);
        let cached = if closed {
            lock(&self.closed)
                .get(&cache_key)
                .filter(|(seen, _)| *seen == listing)
                .map(|(_, data)| data.clone())
        } else {
            None
        };
        let sources = listing.len() + usize::from(own.is_some());
        let nodes = match cached {
            Some(data) => data,
            None => {
                let merged = Arc::new(merge_node_files::<DayData>(storage, &metas).await?);
                if closed {
                    lock(&self.closed).insert(cache_key, (listing, merged.clone()));
                }
                merged
            }
        };
        Ok(DayParts {
            nodes,
            own,
            sources,
        })
    }

    /// The fleet view of `channel` over the last `days` UTC days (today included), merged
    /// from every node. `pack` names the channel's pack, whose versions label the cells;
    /// `ranges` are the client ranges of its live document, in entry order.
    pub async fn view(
        &self,
        storage: &Storage,
        channel: &str,
        days: u32,
        pack: Option<&str>,
        ranges: &[semver::VersionReq],
        now: OffsetDateTime,
    ) -> Result<FleetView, StorageError> {
        let days = days.clamp(1, MAX_WINDOW_DAYS);
        let today = now.date();
        let dates: Vec<Date> = (0..days)
            .rev()
            .map(|back| today - time::Duration::days(i64::from(back)))
            .collect();
        let mut parts = Vec::with_capacity(dates.len());
        for &day in &dates {
            parts.push(self.read_day(storage, channel, day, today).await?);
        }
        let versions = match pack {
            Some(pack) => self.versions(storage, pack).await?,
            None => HashMap::new(),
        };
        let (channel, ranges) = (channel.to_string(), ranges.to_vec());
        let max_cells = self.settings.max_cells;
        off_thread(move || {
            let sources = parts.iter().map(|p| p.sources).sum();
            let per_day: Vec<DayData> = parts.into_iter().map(DayParts::combine).collect();
            assemble(
                &channel, &dates, &per_day, sources, &versions, &ranges, max_cells,
            )
        })
        .await
    }

    /// SHA-256 → version of every uploaded version of `pack`. Each write of a record is
    /// read once per process (a record changes only while its version is unreleased).
    async fn versions(
        &self,
        storage: &Storage,
        pack: &str,
    ) -> Result<HashMap<String, semver::Version>, StorageError> {
        let prefix = format!("{}/{pack}", crate::storage::keys::PACKS);
        for meta in storage.list(&prefix).await? {
            let key = (meta.location.to_string(), listed_write(&meta));
            if lock(&self.records_read).contains(&key) {
                continue;
            }
            if let Some(bytes) = storage.get(&key.0).await?
                && let Ok(record) = serde_json::from_slice::<PackRecord>(&bytes)
            {
                lock(&self.versions).insert(record.sha256, record.version);
            }
            lock(&self.records_read).insert(key);
        }
        Ok(lock(&self.versions).clone())
    }

    /// The fleet of every channel in Prometheus text: `packd_fleet_installs` and
    /// `packd_fleet_failure_reports` over the whole window. Every node reports the whole
    /// fleet, so aggregate across nodes with `max`, not `sum`. Each family keeps its
    /// [`crate::metrics::MAX_SERIES`] largest series; the rest add up under `other`
    /// ([`crate::metrics::capped_family`]). Recomputed at most once per flush interval.
    pub async fn metrics_text(&self, storage: &Storage) -> Result<FleetMetrics, StorageError> {
        if !self.settings.enabled {
            return Ok(FleetMetrics::default());
        }
        if let Some((at, metrics)) = &*lock(&self.metrics_cache)
            && at.elapsed() < self.settings.flush_interval
        {
            return Ok(metrics.clone());
        }
        let now = OffsetDateTime::now_utc();
        let mut channels: Vec<String> = storage.list_dirs(keys::FLEET).await?;
        channels.extend(lock(&self.live).keys().map(|(c, _)| c.clone()));
        channels.sort();
        channels.dedup();
        let (mut installs, mut reports) = (Vec::new(), Vec::new());
        for channel in channels {
            if pack_format::validate_name("channel", &channel).is_err() {
                continue;
            }
            let view = self
                .view(storage, &channel, MAX_WINDOW_DAYS, None, &[], now)
                .await?;
            for cell in view.cells {
                installs.push((
                    vec![channel.clone(), cell.client_version, cell.pack],
                    cell.installs,
                ));
            }
            for f in view.failures {
                reports.push((
                    vec![channel.clone(), f.pack, f.reason, f.client_version],
                    f.reports,
                ));
            }
        }
        let (installs, installs_folded) = capped_family(
            INSTALLS_FAMILY,
            &["channel", "client_version", "pack"],
            installs,
        );
        let (reports, reports_folded) = capped_family(
            REPORTS_FAMILY,
            &["channel", "pack", "reason", "client_version"],
            reports,
        );
        let metrics = FleetMetrics {
            text: format!(
                "# HELP {INSTALLS_FAMILY} Distinct installs over the last 7 UTC days by channel, client release and installed pack, merged from every node (every node reports the whole fleet: aggregate with max, not sum).\n# TYPE {INSTALLS_FAMILY} gauge\n{installs}\
                 # HELP {REPORTS_FAMILY} Failure reports over the last 7 UTC days by channel, pack, reason and client release, merged from every node.\n# TYPE {REPORTS_FAMILY} gauge\n{reports}"
            ),
            folded: vec![
                (INSTALLS_FAMILY, installs_folded),
                (REPORTS_FAMILY, reports_folded),
            ],
        };
        *lock(&self.metrics_cache) = Some((Instant::now(), metrics.clone()));
        Ok(metrics)
    }

    /// Writes counts every flush interval until the process ends.
    pub async fn run_flusher(self: Arc<Self>, storage: Storage) {
        let mut tick = tokio::time::interval(self.settings.flush_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            self.flush(&storage).await;
        }
    }
}

/// The fleet view of `channel` from the merged counts of each of `dates`: sketch merges
/// and estimates only, no I/O, run on the blocking pool by [`Fleet::view`].
fn assemble(
    channel: &str,
    dates: &[Date],
    per_day: &[DayData],
    sources: usize,
    versions: &HashMap<String, semver::Version>,
    ranges: &[semver::VersionReq],
    max_cells: usize,
) -> FleetView {
    let mut window = DayData::default();
    for day in per_day {
        window.merge(day);
    }
    // Each release under the first range that matches it, as clients select.
    let mut distinct: Vec<&semver::VersionReq> = Vec::new();
    for range in ranges {
        if !distinct.iter().any(|r| r.to_string() == range.to_string()) {
            distinct.push(range);
        }
    }
    let mut range_totals: Vec<(Sketch, BTreeMap<String, Sketch>)> =
        vec![(Sketch::default(), BTreeMap::new()); distinct.len()];
    for ((release, pack), sketch) in &window.cells {
        let Ok(version) = semver::Version::parse(release) else {
            continue;
        };
        if let Some(i) = distinct.iter().position(|r| r.matches(&version)) {
            range_totals[i].0.merge(sketch);
            range_totals[i]
                .1
                .entry(pack.clone())
                .or_default()
                .merge(sketch);
        }
    }
    let range_views: Vec<RangeView> = distinct
        .iter()
        .zip(range_totals)
        .map(|(range, (total, packs))| {
            let mut packs: Vec<RangePack> = packs
                .into_iter()
                .map(|(pack, sketch)| RangePack {
                    pack_version: versions.get(&pack).cloned(),
                    installs: sketch.estimate(),
                    pack,
                })
                .collect();
            packs.sort_by(|a, b| {
                b.installs
                    .cmp(&a.installs)
                    .then_with(|| a.pack.cmp(&b.pack))
            });
            RangeView {
                clients: range.to_string(),
                installs: total.estimate(),
                packs,
            }
        })
        .collect();
    let mut total = Sketch::default();
    for sketch in window.cells.values() {
        total.merge(sketch);
    }
    let version_of = |pack: &str| versions.get(pack).cloned();
    let mut cells: Vec<(CellKey, Sketch)> = window.cells.into_iter().collect();
    cells.sort_by_key(|(key, sketch)| (std::cmp::Reverse(sketch.estimate()), key.clone()));
    let mut overflow = window.overflow;
    let cap = max_cells.max(1);
    if cells.len() > cap {
        overflow = true;
        let mut other = Sketch::default();
        for (_, sketch) in cells.drain(cap - 1..) {
            other.merge(&sketch);
        }
        cells.push(((OTHER.to_string(), OTHER.to_string()), other));
    }
    let fleet_cells = cells
        .into_iter()
        .map(|((release, pack), sketch)| FleetCell {
            daily: per_day
                .iter()
                .map(|d| {
                    d.cells
                        .get(&(release.clone(), pack.clone()))
                        .map_or(0, Sketch::estimate)
                })
                .collect(),
            installs: sketch.estimate(),
            pack_version: version_of(&pack),
            client_version: release,
            pack,
        })
        .collect();
    // Per pack, over reasons and releases: the union of the installs' sketches, per day
    // and over the window, so an install reporting twice counts once.
    let mut by_pack: BTreeMap<String, (u64, Sketch, Vec<Sketch>)> = BTreeMap::new();
    for (d, day) in per_day.iter().enumerate() {
        for ((pack, _, _), f) in &day.failures {
            let (_, window_installs, daily) = by_pack
                .entry(pack.clone())
                .or_insert_with(|| (0, Sketch::default(), vec![Sketch::default(); per_day.len()]));
            window_installs.merge(&f.installs);
            daily[d].merge(&f.installs);
        }
    }
    for ((pack, _, _), f) in &window.failures {
        if let Some((reports, _, _)) = by_pack.get_mut(pack) {
            *reports = reports.saturating_add(f.reports);
        }
    }
    let mut failing_packs: Vec<FailingPack> = by_pack
        .into_iter()
        .map(|(pack, (reports, installs, daily))| FailingPack {
            pack_version: version_of(&pack),
            pack,
            reports,
            installs: installs.estimate(),
            daily: daily.iter().map(Sketch::estimate).collect(),
        })
        .collect();
    failing_packs.sort_by(|a, b| {
        b.installs
            .cmp(&a.installs)
            .then_with(|| a.pack.cmp(&b.pack))
    });
    let mut failures: Vec<FailureCell> = window
        .failures
        .into_iter()
        .map(|((pack, reason, release), f)| FailureCell {
            daily: per_day
                .iter()
                .map(|d| {
                    d.failures
                        .get(&(pack.clone(), reason.clone(), release.clone()))
                        .map_or(0, |f| f.installs.estimate())
                })
                .collect(),
            pack_version: version_of(&pack),
            pack,
            reason,
            client_version: release,
            reports: f.reports,
            installs: f.installs.estimate(),
        })
        .collect();
    failures.sort_by(|a, b| {
        b.reports
            .cmp(&a.reports)
            .then_with(|| a.pack.cmp(&b.pack))
            .then_with(|| a.reason.cmp(&b.reason))
    });
    FleetView {
        channel: channel.to_string(),
        days: dates.iter().map(|d| day_text(*d)).collect(),
        installs: total.estimate(),
        cells: fleet_cells,
        ranges: range_views,
        failures,
        failing_packs,
        overflow,
        sources,
        estimate: EstimateInfo {
            exact_up_to: EXACT_MAX as u64,
            relative_error: RELATIVE_ERROR,
        },
    }
}

/// One day of a channel as [`Fleet::read_day`] found it: what the nodes wrote, and this
/// node's counts not yet written.
struct DayParts {
    nodes: Arc<DayData>,
    own: Option<DayData>,
    sources: usize,
}

impl DayParts {
    /// The day's counts, this node's included. Copies a cached day: up to a few MiB of
    /// sketches, so on the blocking pool too.
    fn combine(self) -> DayData {
        let mut day = Arc::unwrap_or_clone(self.nodes);
        if let Some(own) = &self.own {
            day.merge(own);
        }
        day
    }
}

/// A channel's counts of one day as each node writes them, to one file per node, and as a
/// reader merges them: fleet counts and outcome counts.
trait NodeDay: Default + Send + 'static {
    type File: DeserializeOwned;
    /// What the files hold, for the log: `fleet`, `outcome`.
    const KIND: &'static str;
    /// Largest file read back.
    const MAX_FILE_BYTES: u64;
    fn from_file(file: &Self::File) -> Result<Self, String>;
    fn merge(&mut self, other: &Self);
}

impl NodeDay for DayData {
    type File = NodeFile;
    const KIND: &'static str = "fleet";
    const MAX_FILE_BYTES: u64 = MAX_NODE_FILE_BYTES;
    fn from_file(file: &NodeFile) -> Result<DayData, String> {
        DayData::from_file(file)
    }
    fn merge(&mut self, other: &DayData) {
        DayData::merge(self, other);
    }
}

/// The node files of `channel` on `day_name` in `dir`, in key order, without `skip` (this
/// node's own file, when its memory holds more than it): at most
/// [`MAX_NODE_FILES_PER_DAY`], the rest left out (logged).
async fn list_node_files<D: NodeDay>(
    storage: &Storage,
    dir: &str,
    skip: Option<&str>,
    channel: &str,
    day_name: &str,
) -> Result<Vec<ObjectMeta>, StorageError> {
    let mut metas = storage.list(dir).await?;
    metas.sort_by(|a, b| a.location.as_ref().cmp(b.location.as_ref()));
    if let Some(skip) = skip {
        metas.retain(|m| m.location.as_ref() != skip);
    }
    if metas.len() > MAX_NODE_FILES_PER_DAY {
        tracing::warn!(
            channel,
            day = day_name,
            files = metas.len(),
            "more {} files than the {MAX_NODE_FILES_PER_DAY} read per day; the rest are left out",
            D::KIND
        );
        metas.truncate(MAX_NODE_FILES_PER_DAY);
    }
    Ok(metas)
}

/// The node files `metas` read and merged. A file over [`NodeDay::MAX_FILE_BYTES`] or that
/// does not parse is left out (logged); one deleted since the listing is skipped. Parsing
/// and merging run on the blocking pool, a file at a time (see [`off_thread`]).
async fn merge_node_files<D: NodeDay>(
    storage: &Storage,
    metas: &[ObjectMeta],
) -> Result<D, StorageError> {
    let mut merged = D::default();
    for meta in metas {
        let key = meta.location.to_string();
        if meta.size > D::MAX_FILE_BYTES {
            tracing::warn!(
                key,
                size = meta.size,
                "{} file over the size limit; left out",
                D::KIND
            );
            continue;
        }
        let Some(bytes) = storage.get(&key).await? else {
            continue; // deleted by a sweep in the meantime
        };
        merged = off_thread(move || {
            let parsed = serde_json::from_slice::<D::File>(&bytes)
                .map_err(|e| e.to_string())
                .and_then(|file| D::from_file(&file));
            match parsed {
                Ok(data) => merged.merge(&data),
                Err(reason) => {
                    tracing::warn!(key, reason, "unreadable {} file; left out", D::KIND);
                }
            }
            merged
        })
        .await?;
    }
    Ok(merged)
}

/// Runs the fleet reader's work between storage reads (parsing node files, merging
/// sketches, assembling the view) on the blocking pool, off the thread that serves this
/// request's neighbours.
async fn off_thread<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, StorageError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
        StorageError::Io {
            what: "merging fleet counts".to_string(),
            source: std::io::Error::other(e),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The borrowed keys find what the owned ones hold (else every count would allocate its
    /// key again, and a day at its cap would fold a cell it holds into `other`).
    #[test]
    fn borrowed_keys_find_owned_ones() {
        let day = Date::from_calendar_date(2026, time::Month::December, 4).unwrap();
        let mut live = HashMap::new();
        for channel in ["stable", "beta", "", "a-much-longer-channel-name"] {
            live.insert((channel.to_string(), day), channel.len());
        }
        for channel in ["stable", "beta", "", "a-much-longer-channel-name"] {
            let key = (channel, day);
            assert_eq!(live.get(&key as &dyn ChannelDay), Some(&channel.len()));
        }
        let next = day.next_day().unwrap();
        assert_eq!(live.get(&("stable", next) as &dyn ChannelDay), None);

        let mut cells = BTreeMap::new();
        let pairs = [
            ("1.4.0", "builtin"),
            ("1.4.0", "b"),
            ("1.10.0", "a"),
            ("", ""),
        ];
        for (i, (release, pack)) in pairs.iter().enumerate() {
            cells.insert((release.to_string(), pack.to_string()), i);
        }
        for (i, pair) in pairs.iter().enumerate() {
            assert_eq!(cells.get(pair as &dyn Pair), Some(&i));
        }
        assert_eq!(cells.get(&("1.4.0", "c") as &dyn Pair), None);

        // At the cap a cell held already still counts under its own labels.
        let mut data = DayData::default();
        data.add_install("1.4.0", "builtin", 1, 2);
        data.add_install("1.4.0", "builtin", 2, 2);
        data.add_install("1.5.0", "builtin", 3, 2);
        assert!(data.overflow);
        let held: Vec<_> = data.cells.keys().cloned().collect();
        assert_eq!(
            held,
            [
                ("1.4.0".to_string(), "builtin".to_string()),
                (OTHER.to_string(), OTHER.to_string())
            ]
        );
    }

    fn installs(n: u64, seed: u64) -> impl Iterator<Item = u64> {
        (0..n).map(move |i| {
            install_key(&pack_protocol::fleet::install_hash(
                "http://test",
                "stable",
                &format!("{seed}-{i}"),
            ))
        })
    }

    #[test]
    fn small_cells_are_exact_and_survive_storage() {
        let mut sketch = Sketch::default();
        for key in installs(50, 1).chain(installs(50, 1)) {
            sketch.insert(key);
        }
        assert_eq!(sketch.estimate(), 50);
        let back = Sketch::decode(&sketch.encode()).unwrap();
        assert_eq!(back.estimate(), 50);
        assert!(matches!(back, Sketch::Exact(_)));
    }

    /// The estimate at 10,000 installs stays within four standard errors, over several
    /// fleets, through an encode/decode and a merge of two halves (two nodes).
    #[test]
    fn large_cells_estimate_within_the_error_and_merge_like_one() {
        for seed in 0..5 {
            let mut a = Sketch::default();
            let mut b = Sketch::default();
            for (i, key) in installs(10_000, seed).enumerate() {
                if i % 2 == 0 {
                    a.insert(key)
                } else {
                    b.insert(key)
                }
                // Every install also seen by the other node: counts once.
                if i % 3 == 0 {
                    a.insert(key);
                    b.insert(key);
                }
            }
            let mut merged = Sketch::decode(&a.encode()).unwrap();
            merged.merge(&Sketch::decode(&b.encode()).unwrap());
            let estimate = merged.estimate() as f64;
            let error = (estimate - 10_000.0).abs() / 10_000.0;
            assert!(error < 4.0 * RELATIVE_ERROR, "seed {seed}: {estimate}");
        }
    }

    #[test]
    fn a_damaged_sketch_is_refused_not_trusted() {
        let b64 = base64::engine::general_purpose::STANDARD;
        let short = SketchRepr::Dense(b64.encode([0u8; 100]));
        assert!(Sketch::decode(&short).unwrap_err().contains("registers"));
        let high = SketchRepr::Dense(b64.encode([200u8; REGISTERS]));
        assert!(Sketch::decode(&high).unwrap_err().contains("rank"));
        let odd = SketchRepr::Exact(b64.encode([1u8; 9]));
        assert!(Sketch::decode(&odd).is_err());
    }

    #[test]
    fn cells_over_the_cap_count_as_other() {
        let mut day = DayData::default();
        for (i, key) in installs(20, 2).enumerate() {
            day.add_install(&format!("1.0.{i}"), "builtin", key, 8);
        }
        assert_eq!(day.cells.len(), 8);
        assert!(day.overflow);
        let other = &day.cells[&(OTHER.to_string(), OTHER.to_string())];
        assert_eq!(other.estimate(), 13);
    }

    #[test]
    fn a_dense_cell_takes_about_four_kibibytes() {
        let mut sketch = Sketch::default();
        for key in installs(EXACT_MAX as u64 + 1, 3) {
            sketch.insert(key);
        }
        assert!(matches!(sketch, Sketch::Dense(_)));
        assert!(sketch.memory() < REGISTERS + 256, "{}", sketch.memory());
    }
}
