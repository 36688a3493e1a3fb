//! Outcome counts: what clients report about how the turns of each pack version went, per
//! install and UTC day, merged over the fleet into rates with Wilson score intervals.
//!
//! The fleet's machinery, with one difference. A report is one install's counts of one day
//! for one row (pack × client release), and a later report of the same install, day and row
//! *replaces* an earlier one, whichever node took either. So a node keeps, per channel and
//! report day, each install's latest counts (by the 64-bit [`install_key`], never the
//! install hash), with the time it took them, and writes them to
//! `outcomes/{channel}/{day}/{node}.json` with the fleet's flush, replacing its own earlier
//! write. A reader merges every node's file of each day in the window, keeping per install
//! and row the counts taken last, then sums over installs and days. Days are kept for the
//! whole window (reports of a day arrive after it ends) and deleted with the fleet's days.
//!
//! Bounded: at most `[fleet] max_cells` rows per channel-day, [`MAX_INSTALLS_PER_DAY`]
//! installs per channel-day and [`MAX_ENTRIES_IN_MEMORY`] install-rows on a node (past them a
//! report is refused with 429 and `overflow` says so), 16 MiB per file
//! read and the fleet's cap on files per day.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use pack_protocol::outcomes::CONFIDENCE;
use pack_protocol::{OutcomeCounts, OutcomeRates, OutcomeReport, OutcomeRow, OutcomesView};
use serde::{Deserialize, Serialize};
use time::{Date, OffsetDateTime};

use super::{
    MAX_WINDOW_DAYS, NodeDay, day_text, install_key, list_node_files, lock, merge_node_files,
    off_thread, parse_day,
};
use crate::storage::{Storage, StorageError, listed_write};

/// Installs one node keeps per channel and day (each with its rows): about 150 bytes each
/// in memory, a few MiB per channel-day.
pub const MAX_INSTALLS_PER_DAY: usize = 20_000;
/// Install-rows one node keeps in memory over every channel and day of the window.
pub const MAX_ENTRIES_IN_MEMORY: usize = 200_000;
/// Largest node file read back (a full one is about 4 MiB).
const MAX_NODE_FILE_BYTES: u64 = 16 << 20;
const NODE_FILE_FORMAT: u32 = 1;
/// The longest label kept (names and releases are checked to be at most 64 bytes).
const MAX_LABEL_LEN: usize = 80;

/// Storage keys of the outcome counts.
pub mod keys {
    pub const OUTCOMES: &str = "outcomes";
    pub fn day_dir(channel: &str, day: &str) -> String {
        format!("outcomes/{channel}/{day}")
    }
    pub fn node_file(channel: &str, day: &str, node: &str) -> String {
        format!("outcomes/{channel}/{day}/{node}.json")
    }
}

/// (pack, pack name, pack version, client release)
type RowKey = (String, String, String, String);

/// One install's counts of one row and day, and when a node took them (Unix milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    at: i64,
    counts: OutcomeCounts,
}

impl Entry {
    /// Which of two reports of one install, day and row stands: the one taken last; on a
    /// tie (two nodes in one millisecond) the larger counts, so every reader picks the same.
    fn newer_than(&self, other: &Entry) -> bool {
        let order = |e: &Entry| {
            let c = &e.counts;
            (
                e.at,
                [
                    c.turns,
                    c.tool_calls,
                    c.tool_errors,
                    c.permission_denials,
                    c.model_errors,
                    c.aborted_turns,
                    c.builtin_fallbacks,
                    c.compactions,
                    c.input_tokens,
                    c.output_tokens,
                    c.exec_runs,
                    c.exec_failures,
                ],
            )
        };
        order(self) > order(other)
    }
}

/// One channel's outcome counts of one day, from one node or merged.
#[derive(Debug, Clone, Default)]
struct DayOutcomes {
    rows: BTreeMap<RowKey, BTreeMap<u64, Entry>>,
    overflow: bool,
}

impl NodeDay for DayOutcomes {
    type File = NodeFile;
    const KIND: &'static str = "outcome";
    const MAX_FILE_BYTES: u64 = MAX_NODE_FILE_BYTES;
    fn from_file(file: &NodeFile) -> Result<DayOutcomes, String> {
        DayOutcomes::from_file(file)
    }
    fn merge(&mut self, other: &DayOutcomes) {
        DayOutcomes::merge(self, other);
    }
}

impl DayOutcomes {
    /// Keeps `entry` unless a newer one of the same install and row is there.
    fn keep(&mut self, row: RowKey, install: u64, entry: Entry) {
        let entries = self.rows.entry(row).or_default();
        match entries.get(&install) {
            Some(held) if !entry.newer_than(held) => {}
            Some(_) | None => {
                entries.insert(install, entry);
            }
        }
    }

    fn merge(&mut self, other: &DayOutcomes) {
        for (row, entries) in &other.rows {
            for (&install, &entry) in entries {
                self.keep(row.clone(), install, entry);
            }
        }
        self.overflow |= other.overflow;
    }

    fn to_file(&self, channel: &str, day: Date, node: &str) -> NodeFile {
        NodeFile {
            format: NODE_FILE_FORMAT,
            channel: channel.to_string(),
            day: day_text(day),
            node: node.to_string(),
            written_at: crate::model::rfc3339(OffsetDateTime::now_utc()),
            overflow: self.overflow,
            rows: self
                .rows
                .iter()
                .map(|((pack, name, version, release), entries)| RowRecord {
                    pack: pack.clone(),
                    pack_name: name.clone(),
                    pack_version: version.clone(),
                    client_version: release.clone(),
                    installs: entries
                        .iter()
                        .map(|(&install, entry)| InstallRecord {
                            install: format!("{install:016x}"),
                            at: entry.at,
                            counts: entry.counts,
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    fn from_file(file: &NodeFile) -> Result<DayOutcomes, String> {
        if file.format != NODE_FILE_FORMAT {
            return Err(format!("format {} is not {NODE_FILE_FORMAT}", file.format));
        }
        let label = |text: &str| -> Result<String, String> {
            if text.is_empty() || text.len() > MAX_LABEL_LEN {
                return Err(format!("label of {} bytes", text.len()));
            }
            Ok(text.to_string())
        };
        let mut day = DayOutcomes {
            overflow: file.overflow,
            ..DayOutcomes::default()
        };
        for row in &file.rows {
            let key = (
                label(&row.pack)?,
                label(&row.pack_name)?,
                label(&row.pack_version)?,
                label(&row.client_version)?,
            );
            for record in &row.installs {
                // The counts were checked as they were parsed, as a report's are.
                let install = u64::from_str_radix(&record.install, 16)
                    .map_err(|e| format!("install {:?}: {e}", record.install))?;
                day.keep(
                    key.clone(),
                    install,
                    Entry {
                        at: record.at,
                        counts: record.counts,
                    },
                );
            }
        }
        Ok(day)
    }
}

/// `outcomes/{channel}/{day}/{node}.json`: one node's latest counts per install and row.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeFile {
    format: u32,
    channel: String,
    day: String,
    node: String,
    written_at: String,
    overflow: bool,
    rows: Vec<RowRecord>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RowRecord {
    pack: String,
    pack_name: String,
    pack_version: String,
    client_version: String,
    installs: Vec<InstallRecord>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct InstallRecord {
    /// 16 hex digits of the 64-bit install key.
    install: String,
    /// Unix milliseconds the node took the report.
    at: i64,
    counts: OutcomeCounts,
}

/// A day this node took reports of, with what its caps need counted as it goes (a report
/// is checked against them without walking the day).
#[derive(Debug, Default)]
struct LiveDay {
    data: DayOutcomes,
    dirty: bool,
    installs: HashSet<u64>,
    entries: usize,
}

/// A day as a reader last merged it from storage, with the listing it was read from.
type ReadDay = (Vec<(String, String)>, Arc<DayOutcomes>);

/// Why a report was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The day is outside the window packd keeps (or later than tomorrow).
    OutOfWindow { day: String },
    /// A cap of this node is reached (rows or installs of the day, or entries in memory).
    Full { what: String },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::OutOfWindow { day } => write!(
                f,
                "day {day} is outside the {MAX_WINDOW_DAYS} UTC days this server keeps outcome counts for"
            ),
            Refusal::Full { what } => write!(f, "{what}"),
        }
    }
}

/// This node's outcome counts, and the reader that merges every node's. Part of
/// [`super::Fleet`], flushed and swept with it.
pub struct Outcomes {
    node: String,
    max_rows: usize,
    live: Mutex<HashMap<(String, Date), LiveDay>>,
    read: Mutex<HashMap<(String, Date), ReadDay>>,
}

impl std::fmt::Debug for Outcomes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outcomes")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl Outcomes {
    pub(super) fn new(node: &str, max_rows: usize) -> Outcomes {
        Outcomes {
            node: node.to_string(),
            max_rows: max_rows.max(1),
            live: Mutex::new(HashMap::new()),
            read: Mutex::new(HashMap::new()),
        }
    }

    /// Takes `report` from `install` (an install hash already checked), replacing what this
    /// node held for the same install, day and row.
    pub fn record(
        &self,
        report: &OutcomeReport,
        install: &str,
        now: OffsetDateTime,
    ) -> Result<(), Refusal> {
        let out_of_window = || Refusal::OutOfWindow {
            day: report.day.clone(),
        };
        let day = parse_day(&report.day).ok_or_else(out_of_window)?;
        let today = now.date();
        let oldest = today - time::Duration::days(i64::from(MAX_WINDOW_DAYS) - 1);
        // A day ahead: a client whose clock runs a little fast has closed it already.
        if day < oldest || day > today + time::Duration::days(1) {
            return Err(out_of_window());
        }
        let row = (
            report.pack.clone(),
            report.pack_name.clone(),
            report.pack_version.to_string(),
            report.client_version.to_string(),
        );
        let key = install_key(install);
        let entry = Entry {
            at: (now.unix_timestamp_nanos() / 1_000_000) as i64,
            counts: report.counts.day_capped(),
        };
        let mut live = lock(&self.live);
        let in_memory: usize = live.values().map(|d| d.entries).sum();
        let slot = live.entry((report.channel.clone(), day)).or_default();
        let known_row = slot.data.rows.contains_key(&row);
        let known_install = slot.installs.contains(&key);
        let known_entry = slot
            .data
            .rows
            .get(&row)
            .is_some_and(|e| e.contains_key(&key));
        let full = if !known_row && slot.data.rows.len() >= self.max_rows {
            Some(format!(
                "this server keeps {} pack × release rows per channel and day",
                self.max_rows
            ))
        } else if !known_install && slot.installs.len() >= MAX_INSTALLS_PER_DAY {
            Some(format!(
                "this server took outcome counts of {MAX_INSTALLS_PER_DAY} installs for {} already",
                report.day
            ))
        } else if !known_entry && in_memory >= MAX_ENTRIES_IN_MEMORY {
            Some(format!(
                "this server holds {MAX_ENTRIES_IN_MEMORY} outcome counts in memory"
            ))
        } else {
            None
        };
        if let Some(what) = full {
            if !slot.data.overflow {
                slot.data.overflow = true;
                slot.dirty = true;
            }
            return Err(Refusal::Full { what });
        }
        slot.data.keep(row, key, entry);
        slot.installs.insert(key);
        slot.entries += usize::from(!known_entry);
        slot.dirty = true;
        Ok(())
    }

    /// Writes every changed day of this node, and forgets days past the window. A write
    /// that fails is tried again at the next flush.
    pub async fn flush(&self, storage: &Storage) {
        let today = OffsetDateTime::now_utc().date();
        let oldest = today - time::Duration::days(i64::from(MAX_WINDOW_DAYS) - 1);
        let dirty: Vec<((String, Date), DayOutcomes)> = {
            let mut live = lock(&self.live);
            live.retain(|(_, day), _| *day >= oldest);
            live.iter_mut()
                .filter(|(_, d)| d.dirty)
                .map(|(k, d)| {
                    d.dirty = false;
                    (k.clone(), d.data.clone())
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
                tracing::warn!(key, %err, "could not write outcome counts; trying again at the next flush");
                if let Some(entry) = lock(&self.live).get_mut(&(channel, day)) {
                    entry.dirty = true;
                }
            }
        }
        lock(&self.read).retain(|(_, day), _| *day >= oldest);
    }

    /// Every node's counts of `channel` on `day` but this one's, merged; read again only
    /// when the listing changed.
    async fn read_day(
        &self,
        storage: &Storage,
        channel: &str,
        day: Date,
    ) -> Result<(Arc<DayOutcomes>, usize), StorageError> {
        let day_name = day_text(day);
        // This node's own file holds no more than its memory, which the caller adds.
        let own_file = keys::node_file(channel, &day_name, &self.node);
        let metas = list_node_files::<DayOutcomes>(
            storage,
            &keys::day_dir(channel, &day_name),
            Some(&own_file),
            channel,
            &day_name,
        )
        .await?;
        let listing: Vec<(String, String)> = metas
            .iter()
            .map(|m| (m.location.to_string(), listed_write(m)))
            .collect();
        let cache_key = (channel.to_string(), day);
        if let Some((seen, data)) = lock(&self.read).get(&cache_key)
            && *seen == listing
        {
            return Ok((data.clone(), listing.len()));
        }
        let merged = Arc::new(merge_node_files::<DayOutcomes>(storage, &metas).await?);
        let sources = listing.len();
        lock(&self.read).insert(cache_key, (listing, merged.clone()));
        Ok((merged, sources))
    }

    /// Every node's counts of `channel` for each of the last `days` UTC days (today
    /// included, at most [`MAX_WINDOW_DAYS`]), oldest first, this node's own merged in; and
    /// how many node files that took.
    async fn merged_days(
        &self,
        storage: &Storage,
        channel: &str,
        days: u32,
        now: OffsetDateTime,
    ) -> Result<(Vec<Date>, Vec<DayOutcomes>, usize), StorageError> {
        let days = days.clamp(1, MAX_WINDOW_DAYS);
        let today = now.date();
        let dates: Vec<Date> = (0..days)
            .rev()
            .map(|back| today - time::Duration::days(i64::from(back)))
            .collect();
        let mut per_day = Vec::with_capacity(dates.len());
        let mut sources = 0;
        for &day in &dates {
            let (nodes, read) = self.read_day(storage, channel, day).await?;
            let own = lock(&self.live)
                .get(&(channel.to_string(), day))
                .map(|d| d.data.clone());
            sources += read + usize::from(own.is_some());
            per_day.push((nodes, own));
        }
        let merged = off_thread(move || {
            per_day
                .into_iter()
                .map(|(nodes, own)| {
                    let mut day = Arc::unwrap_or_clone(nodes);
                    if let Some(own) = &own {
                        day.merge(own);
                    }
                    day
                })
                .collect()
        })
        .await?;
        Ok((dates, merged, sources))
    }

    /// The outcome counts of `channel` over the last `days` UTC days (today included, at
    /// most [`MAX_WINDOW_DAYS`]), merged from every node: per pack × client release, the
    /// counts summed over installs and days, and each rate with its 95 % Wilson interval.
    /// Rows with the most turns come first.
    pub async fn view(
        &self,
        storage: &Storage,
        channel: &str,
        days: u32,
        now: OffsetDateTime,
    ) -> Result<OutcomesView, StorageError> {
        let (dates, merged, sources) = self.merged_days(storage, channel, days, now).await?;
        let channel = channel.to_string();
        off_thread(move || assemble(&channel, &dates, &merged, sources)).await
    }

    /// What the guard weighs: every install's counts of `channel` over the last `days` UTC
    /// days, merged from every node, per day, pack and client release.
    pub async fn evidence(
        &self,
        storage: &Storage,
        channel: &str,
        days: u32,
        now: OffsetDateTime,
    ) -> Result<Evidence, StorageError> {
        let (dates, merged, _) = self.merged_days(storage, channel, days, now).await?;
        off_thread(move || {
            let mut evidence = Evidence::default();
            for (day, data) in dates.into_iter().zip(&merged) {
                for ((pack, _, _, release), entries) in &data.rows {
                    // Checked semver when its report came in; a row read back from a node
                    // file that does not parse is left out, as the view leaves it out.
                    let Ok(release) = release.parse::<semver::Version>() else {
                        continue;
                    };
                    for (&install, entry) in entries {
                        evidence.add(day, pack, &release, install, entry.counts);
                    }
                }
            }
            evidence
        })
        .await
    }
}

/// The outcome counts as the guard weighs them: one unit per install. Each install's reports
/// of one day on one pack, whatever client releases they name, count once (summed, then
/// capped at a day's plausible use, [`OutcomeCounts::day_capped`]); its days add up.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// (pack, install key, day) → the install's latest counts of that day per client release.
    reports: BTreeMap<(String, u64, Date), Vec<(semver::Version, OutcomeCounts)>>,
}

impl Evidence {
    /// Adds one install's counts of `day` on `pack` under client release `release`.
    pub fn add(
        &mut self,
        day: Date,
        pack: &str,
        release: &semver::Version,
        install: u64,
        counts: OutcomeCounts,
    ) {
        self.reports
            .entry((pack.to_string(), install, day))
            .or_default()
            .push((release.clone(), counts));
    }

    /// Each install's counts on `pack` from the client releases `clients` takes: per day
    /// summed over those releases and capped at a day's use, then summed over days. One
    /// item per install that reported any.
    pub fn installs(
        &self,
        pack: &str,
        clients: impl Fn(&semver::Version) -> bool,
    ) -> Vec<OutcomeCounts> {
        let mut out: Vec<OutcomeCounts> = Vec::new();
        let mut last = None;
        let from = (pack.to_string(), 0, Date::MIN);
        for ((p, install, _), reports) in self.reports.range(from..) {
            if p != pack {
                break;
            }
            let mut day = OutcomeCounts::default();
            let mut taken = false;
            for (release, counts) in reports {
                if clients(release) {
                    day.sum(counts);
                    taken = true;
                }
            }
            if !taken {
                continue;
            }
            let day = day.day_capped();
            match out.last_mut() {
                Some(held) if last == Some(*install) => held.sum(&day),
                Some(_) | None => {
                    out.push(day);
                    last = Some(*install);
                }
            }
        }
        out
    }
}

/// The view from each day's merged counts: sums and interval arithmetic only, no I/O.
fn assemble(
    channel: &str,
    dates: &[Date],
    per_day: &[DayOutcomes],
    sources: usize,
) -> OutcomesView {
    struct Sum {
        counts: OutcomeCounts,
        installs: BTreeSet<u64>,
        reports: u64,
    }
    let mut rows: BTreeMap<&RowKey, Sum> = BTreeMap::new();
    let mut overflow = false;
    for day in per_day {
        overflow |= day.overflow;
        for (key, entries) in &day.rows {
            let sum = rows.entry(key).or_insert_with(|| Sum {
                counts: OutcomeCounts::default(),
                installs: BTreeSet::new(),
                reports: 0,
            });
            for (&install, entry) in entries {
                sum.counts.sum(&entry.counts);
                sum.installs.insert(install);
                sum.reports += 1;
            }
        }
    }
    let mut rows: Vec<OutcomeRow> = rows
        .into_iter()
        .filter_map(|((pack, name, version, release), sum)| {
            // Both versions here were checked semver when their report came in (a row read
            // back from a node file that does not parse is left out).
            let (pack_version, client_version) = (version.parse().ok()?, release.parse().ok()?);
            Some(OutcomeRow {
                pack: pack.clone(),
                pack_name: name.clone(),
                pack_version,
                client_version,
                installs: sum.installs.len() as u64,
                reports: sum.reports,
                rates: OutcomeRates::of(&sum.counts),
                counts: sum.counts,
            })
        })
        .collect();
    rows.sort_by(|a, b| {
        b.counts
            .turns
            .cmp(&a.counts.turns)
            // By the version's text, as the rows were always ordered.
            .then_with(|| a.pack_version.to_string().cmp(&b.pack_version.to_string()))
            .then_with(|| a.client_version.cmp(&b.client_version))
            .then_with(|| a.pack.cmp(&b.pack))
    });
    OutcomesView {
        channel: channel.to_string(),
        days: dates.iter().map(|d| day_text(*d)).collect(),
        confidence: CONFIDENCE,
        rows,
        overflow,
        sources,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(day: &str, version: &str, turns: u64, errors: u64) -> OutcomeReport {
        OutcomeReport {
            channel: "stable".to_string(),
            day: day.to_string(),
            pack: format!("{:064x}", version.len()),
            pack_name: "core".to_string(),
            pack_version: version.parse().unwrap(),
            client_version: semver::Version::new(1, 4, 2),
            counts: OutcomeCounts {
                turns,
                tool_calls: turns,
                tool_errors: errors,
                ..OutcomeCounts::default()
            },
        }
    }

    fn now() -> OffsetDateTime {
        parse_day("2026-03-05")
            .unwrap()
            .with_hms(12, 0, 0)
            .unwrap()
            .assume_utc()
    }

    fn install(n: u32) -> String {
        format!("{n:032x}")
    }

    fn live_day(outcomes: &Outcomes, day: &str) -> DayOutcomes {
        lock(&outcomes.live)[&("stable".to_string(), parse_day(day).unwrap())]
            .data
            .clone()
    }

    #[test]
    fn a_later_report_of_one_install_replaces_the_earlier() {
        let outcomes = Outcomes::new("n1", 256);
        let t = now();
        outcomes
            .record(&report("2026-03-04", "1.3.0", 10, 1), &install(1), t)
            .unwrap();
        outcomes
            .record(
                &report("2026-03-04", "1.3.0", 12, 2),
                &install(1),
                t + time::Duration::seconds(1),
            )
            .unwrap();
        outcomes
            .record(&report("2026-03-04", "1.3.0", 5, 0), &install(2), t)
            .unwrap();
        let view = assemble("stable", &[], &[live_day(&outcomes, "2026-03-04")], 1);
        assert_eq!(view.rows.len(), 1);
        assert_eq!(view.rows[0].counts.turns, 17);
        assert_eq!(view.rows[0].counts.tool_errors, 2);
        assert_eq!((view.rows[0].installs, view.rows[0].reports), (2, 2));
    }

    #[test]
    fn across_nodes_the_report_taken_last_stands_in_either_order() {
        let (a, b) = (Outcomes::new("a", 256), Outcomes::new("b", 256));
        let t = now();
        a.record(
            &report("2026-03-04", "1.3.0", 12, 2),
            &install(1),
            t + time::Duration::seconds(5),
        )
        .unwrap();
        b.record(&report("2026-03-04", "1.3.0", 10, 1), &install(1), t)
            .unwrap();
        let (da, db) = (live_day(&a, "2026-03-04"), live_day(&b, "2026-03-04"));
        for (first, second) in [(&da, &db), (&db, &da)] {
            let mut merged = first.clone();
            merged.merge(second);
            let view = assemble("stable", &[], &[merged], 2);
            assert_eq!(view.rows[0].counts.turns, 12);
        }
        // Through the node file, as another node reads it.
        let file = serde_json::to_vec(&da.to_file("stable", parse_day("2026-03-04").unwrap(), "a"))
            .unwrap();
        let back = DayOutcomes::from_file(&serde_json::from_slice(&file).unwrap()).unwrap();
        assert_eq!(back.rows, da.rows);
    }

    #[test]
    fn days_outside_the_window_and_rows_over_the_cap_are_refused() {
        let outcomes = Outcomes::new("n1", 2);
        let t = now();
        for day in ["2026-02-26", "2026-03-07", "2025-03-04"] {
            let err = outcomes
                .record(&report(day, "1.3.0", 1, 0), &install(1), t)
                .unwrap_err();
            assert!(matches!(err, Refusal::OutOfWindow { .. }), "{day}: {err}");
        }
        for day in ["2026-02-27", "2026-03-06"] {
            outcomes
                .record(&report(day, "1.3.0", 1, 0), &install(1), t)
                .unwrap();
        }
        outcomes
            .record(&report("2026-03-04", "1.3.0", 1, 0), &install(1), t)
            .unwrap();
        outcomes
            .record(&report("2026-03-04", "1.4.0", 1, 0), &install(1), t)
            .unwrap();
        let err = outcomes
            .record(&report("2026-03-04", "1.5.0", 1, 0), &install(1), t)
            .unwrap_err();
        assert!(matches!(err, Refusal::Full { .. }), "{err}");
        assert!(live_day(&outcomes, "2026-03-04").overflow);
        // A row already held is still taken.
        outcomes
            .record(&report("2026-03-04", "1.4.0", 2, 0), &install(2), t)
            .unwrap();
    }

    #[test]
    fn a_node_takes_at_most_its_installs_per_day_and_still_replaces_known_ones() {
        let outcomes = Outcomes::new("n1", 256);
        let t = now();
        for n in 0..MAX_INSTALLS_PER_DAY as u32 {
            outcomes
                .record(&report("2026-03-04", "1.3.0", 1, 0), &install(n), t)
                .unwrap();
        }
        let one_more = outcomes.record(
            &report("2026-03-04", "1.3.0", 1, 0),
            &install(MAX_INSTALLS_PER_DAY as u32),
            t,
        );
        assert!(
            matches!(one_more, Err(Refusal::Full { .. })),
            "{one_more:?}"
        );
        // Known installs still report (again, or on another row), and other days have room.
        outcomes
            .record(&report("2026-03-04", "1.3.0", 2, 0), &install(0), t)
            .unwrap();
        outcomes
            .record(&report("2026-03-04", "1.4.0", 2, 0), &install(0), t)
            .unwrap();
        outcomes
            .record(
                &report("2026-03-03", "1.3.0", 1, 0),
                &install(MAX_INSTALLS_PER_DAY as u32),
                t,
            )
            .unwrap();
        let day = live_day(&outcomes, "2026-03-04");
        let view = assemble("stable", &[], &[day], 1);
        let turns: u64 = view.rows.iter().map(|r| r.counts.turns).sum();
        assert_eq!(turns, MAX_INSTALLS_PER_DAY as u64 + 1 + 2);
        assert!(view.overflow);
    }

    #[test]
    fn a_report_is_taken_at_most_at_a_day_of_plausible_use() {
        let outcomes = Outcomes::new("n1", 256);
        let t = now();
        let mut claimed = report("2026-03-04", "1.3.0", 1_000_000, 0);
        claimed.counts.tool_errors = 100_000;
        outcomes.record(&claimed, &install(1), t).unwrap();
        let view = assemble("stable", &[], &[live_day(&outcomes, "2026-03-04")], 1);
        let counts = view.rows[0].counts;
        assert_eq!(counts.turns, pack_protocol::outcomes::DAY_TURNS);
        assert_eq!(counts.tool_calls, pack_protocol::outcomes::DAY_TOOL_CALLS);
        // The rate the install reported stands.
        assert_eq!(counts.tool_errors * 10, counts.tool_calls);
    }

    fn day(text: &str) -> Date {
        parse_day(text).unwrap()
    }

    fn calls(calls: u64, errors: u64) -> OutcomeCounts {
        OutcomeCounts {
            turns: calls,
            tool_calls: calls,
            tool_errors: errors,
            ..OutcomeCounts::default()
        }
    }

    #[test]
    fn evidence_counts_an_install_once_per_day_and_pack_whatever_releases_it_names() {
        let (r1, r2, r9) = (
            semver::Version::new(1, 4, 2),
            semver::Version::new(1, 4, 3),
            semver::Version::new(9, 0, 0),
        );
        let mut evidence = Evidence::default();
        // Install 1 on one day under two releases (an upgrade, or a forger multiplying
        // itself): summed, then capped at one day's use.
        evidence.add(day("2026-03-04"), "new", &r1, 1, calls(9_000, 900));
        evidence.add(day("2026-03-04"), "new", &r2, 1, calls(9_000, 900));
        // Its next day adds a day's worth.
        evidence.add(day("2026-03-05"), "new", &r1, 1, calls(100, 0));
        // Install 2, and a release the entry is not for.
        evidence.add(day("2026-03-04"), "new", &r1, 2, calls(50, 5));
        evidence.add(day("2026-03-04"), "new", &r9, 3, calls(50, 50));
        evidence.add(day("2026-03-04"), "old", &r1, 1, calls(20, 1));
        let in_range = |v: &semver::Version| v.major == 1;
        let new = evidence.installs("new", in_range);
        assert_eq!(new.len(), 2, "{new:?}");
        let cap = pack_protocol::outcomes::DAY_TOOL_CALLS;
        assert_eq!(new[0].tool_calls, cap + 100);
        assert_eq!(new[0].tool_errors, cap / 10);
        assert_eq!((new[1].tool_calls, new[1].tool_errors), (50, 5));
        assert_eq!(evidence.installs("old", in_range).len(), 1);
        assert!(evidence.installs("other", in_range).is_empty());
        assert_eq!(evidence.installs("new", |_| true).len(), 3);
    }

    #[tokio::test]
    async fn the_guard_s_evidence_is_every_install_s_latest_report_per_day() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::local(dir.path()).unwrap();
        let outcomes = Outcomes::new("n1", 256);
        let t = now();
        for (n, errors) in [(1, 1), (1, 3), (2, 0)] {
            outcomes
                .record(&report("2026-03-05", "1.3.0", 10, errors), &install(n), t)
                .unwrap();
        }
        let evidence = outcomes.evidence(&storage, "stable", 7, t).await.unwrap();
        let pack = format!("{:064x}", "1.3.0".len());
        let installs = evidence.installs(&pack, |_| true);
        let errors: Vec<u64> = installs.iter().map(|c| c.tool_errors).collect();
        assert_eq!(errors.iter().sum::<u64>(), 3, "{installs:?}");
        assert_eq!(installs.len(), 2);
    }

    #[test]
    fn a_damaged_file_cannot_claim_more_errors_than_calls() {
        let day = parse_day("2026-03-04").unwrap();
        let mut data = DayOutcomes::default();
        data.keep(
            (
                "builtin".into(),
                "core".into(),
                "1.0.0".into(),
                "1.4.2".into(),
            ),
            1,
            Entry {
                at: 1,
                counts: OutcomeCounts {
                    tool_calls: 1,
                    tool_errors: 1,
                    ..OutcomeCounts::default()
                },
            },
        );
        let mut file = serde_json::to_value(data.to_file("stable", day, "n")).unwrap();
        file["rows"][0]["installs"][0]["counts"]["tool_errors"] = 5.into();
        assert!(serde_json::from_value::<NodeFile>(file).is_err());
    }
}
