//! `/console/channels/{channel}`: the live entries with the installs each reaches, adoption
//! per release range as charts, failure reports per version (rising ones flagged, with the
//! rollout serving them), and the latest history.

use std::collections::{BTreeMap, HashMap};

use maud::{Markup, html};
use pack_protocol::FleetView;
use time::OffsetDateTime;

use crate::console::access::Viewer;
use crate::console::chart::{PALETTE, Series, stacked_bars};
use crate::console::entries::{Entry, Target, entries_at, shell_quote};
use crate::console::health::{
    MIN_FAILING_INSTALLS, MIN_RATE, PackHealth, RISE_FACTOR, health, pack_label,
};
use crate::console::layout::{
    Section, change_box, page, percent, rollout_bar, short_sha, size, when,
};
use crate::console::rollouts::{GuardDocument, Stop, live_rollouts};
use crate::console::{ConsoleState, FleetAccess, RECENT_HISTORY};
use crate::error::ApiError;
use crate::model::rfc3339;

use super::history::history_table;
use super::overview::expiry;
use super::rollouts::{Rollouts, evidence};

/// The fleet of one release range: per pack, installs per day.
struct RangeGroup {
    /// The range as the document writes it, or `None` for releases outside every range.
    range: Option<String>,
    req: Option<semver::VersionReq>,
    /// pack (SHA-256 or `builtin`) → (label, installs per day)
    packs: BTreeMap<String, (String, Vec<u64>)>,
}

impl RangeGroup {
    fn title(&self) -> String {
        match self.range.as_deref() {
            Some("*") => "Every release".to_string(),
            Some(range) => format!("Releases {range}"),
            None => "Releases outside every range (or not saying)".to_string(),
        }
    }

    fn today(&self) -> u64 {
        self.packs
            .values()
            .map(|(_, d)| d.last().copied().unwrap_or(0))
            .sum()
    }
}

/// The fleet grouped by the live document's release ranges: each client release counts in
/// the first range that matches it, as a client picks its entry.
fn group_by_range(entries: &[Entry], view: &FleetView) -> Vec<RangeGroup> {
    let mut groups: Vec<RangeGroup> = Vec::new();
    for e in entries {
        if groups.iter().all(|g| g.range.as_deref() != Some(&e.range)) {
            groups.push(RangeGroup {
                req: semver::VersionReq::parse(&e.range).ok(),
                range: Some(e.range.clone()),
                packs: BTreeMap::new(),
            });
        }
    }
    groups.push(RangeGroup {
        range: None,
        req: None,
        packs: BTreeMap::new(),
    });
    let days = view.days.len();
    for cell in &view.cells {
        let release = semver::Version::parse(&cell.client_version).ok();
        let at = release
            .and_then(|r| {
                groups
                    .iter()
                    .position(|g| g.req.as_ref().is_some_and(|q| q.matches(&r)))
            })
            .unwrap_or(groups.len() - 1);
        let (_, daily) = groups[at]
            .packs
            .entry(cell.pack.clone())
            .or_insert_with(|| {
                (
                    pack_label(
                        &cell.pack,
                        cell.pack_version
                            .as_ref()
                            .map(ToString::to_string)
                            .as_deref(),
                    ),
                    vec![0; days],
                )
            });
        for (sum, n) in daily.iter_mut().zip(&cell.daily) {
            *sum = sum.saturating_add(*n);
        }
    }
    groups.retain(|g| g.range.is_some() || !g.packs.is_empty());
    groups
}

/// Today's installs serving entry `at`'s target, and all of today's installs of its range.
/// Where the range is the first to match each of its releases (no earlier entry has another
/// range), the view's distinct counts of the range are exact: an install that moved to the
/// rollout today counts once in the range (and is seen on both packs). Otherwise the
/// releases matching the range are added up from the cells.
fn reach_today(today: &FleetView, entries: &[Entry], at: usize) -> (u64, u64) {
    let entry = &entries[at];
    let key = fleet_key(&entry.target);
    let first_match = entries[..at].iter().all(|e| e.range == entry.range);
    if first_match && let Some(range) = today.ranges.iter().find(|r| r.clients == entry.range) {
        let serving = range
            .packs
            .iter()
            .find(|p| p.pack == key)
            .map_or(0, |p| p.installs);
        return (serving, range.installs);
    }
    let Ok(range) = semver::VersionReq::parse(&entry.range) else {
        return (0, 0);
    };
    let (mut serving, mut all) = (0u64, 0u64);
    for cell in &today.cells {
        let in_range =
            semver::Version::parse(&cell.client_version).is_ok_and(|r| range.matches(&r));
        if !in_range {
            continue;
        }
        let n = cell.daily.last().copied().unwrap_or(0);
        all = all.saturating_add(n);
        if cell.pack == key {
            serving = serving.saturating_add(n);
        }
    }
    (serving, all)
}

/// The pack key an entry's target has in the fleet view.
fn fleet_key(target: &Target) -> &str {
    target.sha256().unwrap_or("builtin")
}

/// A stable colour per pack on the page: built-in first, then versions oldest first.
fn colours(groups: &[RangeGroup]) -> HashMap<String, usize> {
    let mut labels: Vec<(u8, Option<semver::Version>, String)> = Vec::new();
    for g in groups {
        for (pack, (label, _)) in &g.packs {
            if labels.iter().any(|(_, _, p)| p == pack) {
                continue;
            }
            let rank = if pack == "builtin" { 0 } else { 1 };
            labels.push((rank, semver::Version::parse(label).ok(), pack.clone()));
        }
    }
    labels.sort();
    labels
        .into_iter()
        .enumerate()
        .map(|(i, (_, _, pack))| (pack, i % PALETTE))
        .collect()
}

/// Steps a rollout usually widens by.
fn next_step(percent: u8) -> u8 {
    [1, 5, 10, 25, 50, 100]
        .into_iter()
        .find(|&s| s > percent)
        .unwrap_or(100)
}

/// How to undo entry `at` of `entries`: the `packer release` arguments, and what the
/// installs it serves get then. A rollout gives way to the entry of its range without one
/// (`--rollback` to it), else to the entries after it (`--remove` the range: its installs
/// fall through, usually to `*`); anything else rolls back to the built-in pack.
fn undo(entries: &[Entry], at: usize) -> (String, String) {
    let entry = &entries[at];
    let range = &entry.range;
    if entry.rollout.is_some() {
        let later = &entries[at + 1..];
        if let Some(base) = later
            .iter()
            .find(|e| e.range == *range && e.rollout.is_none())
        {
            return (
                format!(
                    "--rollback {}",
                    shell_quote(&format!("{range}={}", base.target.packer_arg()))
                ),
                format!("the range gets {}", base.target.label()),
            );
        }
        if let Some(next) = later
            .iter()
            .find(|e| e.rollout.is_none() && e.range != *range)
        {
            return (
                format!("--remove {}", shell_quote(range)),
                format!("its installs fall through to {}", next.describe()),
            );
        }
    }
    (
        format!("--rollback {}", shell_quote(&format!("{range}=builtin"))),
        "the range gets the pack built into the client".to_string(),
    )
}

pub async fn render(
    state: &ConsoleState,
    viewer: Viewer,
    channel: &str,
) -> Result<Markup, ApiError> {
    let now = OffsetDateTime::now_utc();
    let live = state.live(channel).await?;
    let summary = &live.record.summary;
    let entries = live
        .document
        .as_ref()
        .map(|d| entries_at(d, now))
        .unwrap_or_default();
    let guard_doc = live.document.as_ref().and_then(GuardDocument::of);
    let rollouts = live
        .document
        .as_ref()
        .map(|d| live_rollouts(d, guard_doc.as_ref(), now))
        .unwrap_or_default();
    let stops: HashMap<usize, &Stop> = rollouts
        .iter()
        .filter_map(|r| Some((r.index, r.stop.as_ref()?)))
        .collect();
    // The guard key the offline-signed document names (a guard document keeps it).
    let guard_key = guard_doc
        .as_ref()
        .map(|g| &g.base)
        .or(live.document.as_ref())
        .and_then(|d| d.guard.as_ref())
        .and_then(|g| g.key_id().ok());
    let access = state.fleet_access(&viewer);
    let view = match access {
        FleetAccess::Shown => Some(state.fleet_view(&live).await?),
        FleetAccess::Disabled | FleetAccess::PublishersOnly => None,
    };
    let today = match &view {
        Some(_) => Some(state.fleet_today(&live).await?),
        None => None,
    };
    let evidence = match (&view, &live.document) {
        (Some(_), Some(doc)) if !rollouts.is_empty() || guard_key.is_some() => {
            Some(evidence(state, channel, doc, now).await?)
        }
        _ => None,
    };
    let healths: Vec<PackHealth> = view.as_deref().map(health).unwrap_or_default();
    let rising: HashMap<&str, &PackHealth> = healths
        .iter()
        .filter(|h| h.rising)
        .map(|h| (h.pack.as_str(), h))
        .collect();
    let groups = view
        .as_deref()
        .map(|v| group_by_range(&entries, v))
        .unwrap_or_default();
    let colour = colours(&groups);
    let newest = summary.sequence;
    let oldest = newest.saturating_sub(RECENT_HISTORY).max(1);
    let recent = state
        .documents(channel, (oldest.saturating_sub(1).max(1)..=newest).rev())
        .await?;
    let base = format!(
        "packer release {} --server {} --keys KEYS",
        shell_quote(channel),
        shell_quote(&viewer.origin)
    );
    let holds_key = guard_key.is_some()
        && state.app.settings.guard.key.as_ref().map(|k| k.key_id()) == guard_key;
    let guarded = live.document.as_ref().map(|doc| Rollouts {
        channel,
        live: doc,
        guard: guard_doc.as_ref(),
        rollouts: &rollouts,
        command: &base,
        evidence: evidence.as_ref(),
        guard_key: guard_key.clone(),
        holds_key,
        interval_secs: state.app.settings.guard.interval.as_secs(),
        now,
    });
    let mut commands: Vec<(String, String)> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let range = e.range.as_str();
        let version = e.target.packer_arg();
        match e.rollout {
            Some(p) => {
                let (args, then) = undo(&entries, i);
                let rollback = (
                    format!("Roll the {} rollout back ({then}):", e.target.label()),
                    format!("{base} {args}"),
                );
                let failing = e.target.sha256().is_some_and(|s| rising.contains_key(s));
                if failing {
                    commands.insert(0, rollback);
                } else if e.ramp_to.is_some() || stops.contains_key(&i) {
                    // A ramp widens itself; a frozen one resumes (the guard's commands).
                    commands.push(rollback);
                } else {
                    commands.push((
                        format!(
                            "Widen the {} rollout to {} %:",
                            e.target.label(),
                            next_step(p)
                        ),
                        format!(
                            "{base} --rollout {}",
                            shell_quote(&format!("{range}={version}@{}", next_step(p)))
                        ),
                    ));
                    commands.push((
                        format!("Finish it (all of the range gets {}):", e.target.label()),
                        format!(
                            "{base} --pin {}",
                            shell_quote(&format!("{range}={version}"))
                        ),
                    ));
                    commands.push(rollback);
                }
            }
            None if entries[..i].iter().all(|x| x.range != e.range) => {
                commands.push((
                    format!(
                        "Roll a new version out to 10 % of {}:",
                        if range == "*" { "every release" } else { range }
                    ),
                    format!(
                        "{base} --rollout {}",
                        shell_quote(&format!("{range}=VERSION@10"))
                    ),
                ));
                if !matches!(e.target, Target::Builtin) {
                    commands.push((
                        "Roll the range back to the pack built into the client:".to_string(),
                        format!(
                            "{base} --rollback {}",
                            shell_quote(&format!("{range}=builtin"))
                        ),
                    ));
                }
            }
            None => {}
        }
    }
    if let Some(g) = &guarded {
        commands.splice(0..0, g.commands());
    }
    if commands.is_empty() {
        commands.push((
            "Pin every release to a version:".to_string(),
            format!("{base} --pin '*=VERSION'"),
        ));
    }
    let live_alarms: Vec<(usize, &Entry, &PackHealth)> = entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| Some((i, e, *rising.get(e.target.sha256()?)?)))
        .collect();

    let content = html! {
        nav aria-label="Breadcrumb" class="crumbs" {
            a href="/console" { "Channels" } " / " span aria-current="page" { (channel) }
        }
        h1 { "Channel " (channel) }
        dl class="facts" {
            div { dt { "Pack" } dd { (summary.pack) } }
            div { dt { "Live sequence" } dd {
                a href={ "/console/channels/" (channel) "/history/" (summary.sequence) } { (summary.sequence) }
                @if let Some(g) = &guard_doc {
                    ", signed by the guard key, restricting "
                    a href={ "/console/channels/" (channel) "/history/" (g.base.sequence) } { (g.base.sequence) }
                }
            } }
            div { dt { "Published" } dd {
                (when(&rfc3339(summary.published_at), now))
                @if let Some(by) = &summary.published_by { " by " strong class="by" { (by) } }
            } }
            div { dt { "Signed by key" } dd { code { (summary.key_id) } } }
            div { dt { "Expires" } dd { (expiry(&rfc3339(summary.expires_at), now)) } }
            @if let Some(key) = &guard_key {
                div { dt { "Guard key" } dd { code { (key) } " (may freeze or roll back)" } }
            }
        }
        @if let Some(g) = &guarded { (g.stops()) }
        @for (i, e, h) in &live_alarms {
            section class="alarm" aria-labelledby={ "alarm-" (h.pack) } {
                h2 id={ "alarm-" (h.pack) } { "Failures rising on " (h.label()) }
                p {
                    (h.recent_failing) " installs reported failures with " (h.label())
                    " today and yesterday: " (percent(h.recent_rate)) " of the installs it reached"
                    @if h.earlier_rate > 0.0 { ", up from " (percent(h.earlier_rate)) " before" }
                    ". It is live here as " (e.describe()) "."
                }
                @let (args, then) = undo(&entries, *i);
                @if e.rollout.is_some() {
                    p { "Do not widen this rollout. To roll it back (" (then) "):" }
                } @else {
                    p { "To roll it back (" (then) "):" }
                }
                pre { code { (base) " " (args) } }
            }
        }
        section aria-labelledby="live-title" {
            h2 id="live-title" { "Live entries" }
            p class="note" { "A client takes the first entry whose range matches its release "
                "(and, for a rollout, whose bucket is in). Installs today are the installs of the "
                "range seen on the entry's version since 00:00 UTC; one that moved to a rollout "
                "today is seen on both versions." }
            table class="cards live" {
                caption class="visually-hidden" { "Live entries of " (channel) ", in the order clients try them" }
                thead { tr {
                    th scope="col" { "#" }
                    th scope="col" { "Client releases" }
                    th scope="col" { "Get" }
                    th scope="col" { "Rollout" }
                    @if view.is_some() { th scope="col" { "Installs today" } }
                    th scope="col" { "Health" }
                } }
                tbody {
                    @for (i, e) in entries.iter().enumerate() {
                        @let alarm = e.target.sha256().and_then(|s| rising.get(s));
                        tr class=[alarm.map(|_| "flagged")] data-version=(e.target.label()) {
                            td data-label="#" { (i + 1) }
                            th scope="row" data-label="Client releases" {
                                (if e.range == "*" { "every release" } else { &e.range })
                            }
                            td data-label="Get" {
                                strong class="version" { (e.target.label()) }
                                @if let Target::Pack { sha256, size: bytes, schema, .. } = &e.target {
                                    br; span class="meta" { (size(*bytes)) ", schema " (schema) ", " (short_sha(sha256)) }
                                }
                            }
                            td data-label="Rollout" {
                                @match e.rollout {
                                    Some(p) => (rollout_bar(p)),
                                    None => "all of the range",
                                }
                                @match stops.get(&i) {
                                    Some(Stop::Frozen { .. }) => { br; strong class="flag" { "frozen by the guard" } }
                                    Some(Stop::RolledBack { .. }) => { br; strong class="flag" { "rolled back by the guard" } }
                                    None => { @if let Some(to) = e.ramp_to {
                                        br; span class="meta" { "ramping to " (to) " %" }
                                    } }
                                }
                            }
                            @if let Some(today) = &today {
                                td data-label="Installs today" {
                                    @let (n, all) = reach_today(today, &entries, i);
                                    @if all > 0 {
                                        (n) " (" (percent(n as f64 / all as f64)) " of the range)"
                                    } @else {
                                        "none seen"
                                    }
                                }
                            }
                            td data-label="Health" {
                                @match alarm {
                                    Some(h) => strong class="flag" { "Failures rising (" (h.recent_failing) " installs)" },
                                    None => "no rise",
                                }
                            }
                        }
                    }
                }
            }
        }
        @if let Some(g) = &guarded {
            (g.section())
            (g.decisions())
        }
        @match (&view, access) {
            (Some(view), _) => {
                (adoption(view, &groups, &colour))
                (failures(&healths, &entries))
            }
            (None, FleetAccess::PublishersOnly) => {
                section aria-labelledby="fleet-title" {
                    h2 id="fleet-title" { "Adoption and failures" }
                    p { "This server shows fleet data to publishers only: "
                        a href={ "/console/login?next=/console/channels/" (channel) } { "sign in with a publish token" } "." }
                }
            }
            (None, _) => {
                section aria-labelledby="fleet-title" {
                    h2 id="fleet-title" { "Adoption and failures" }
                    p { "Fleet data is off on this server (" code { "[fleet] enabled = false" } ")." }
                }
            }
        }
        section aria-labelledby="history-title" {
            h2 id="history-title" { "Latest history" }
            (history_table(channel, &recent, oldest, now))
            p { a href={ "/console/channels/" (channel) "/history" } { "Whole history (" (summary.sequence) " documents)" } }
        }
        (change_box(
            html! { p { "What this channel serves changes with the next signed document of "
                code { (channel) } ":" } },
            &commands,
        ))
    };
    Ok(page(
        &format!("Channel {channel}"),
        Section::Channels,
        Some(&viewer),
        content,
    ))
}

fn adoption(view: &FleetView, groups: &[RangeGroup], colour: &HashMap<String, usize>) -> Markup {
    let charts: Vec<(usize, &RangeGroup, Vec<Series>)> = groups
        .iter()
        .enumerate()
        .filter(|(_, g)| !g.packs.is_empty())
        .map(|(i, g)| {
            let mut series: Vec<Series> = g
                .packs
                .iter()
                .map(|(pack, (label, daily))| Series {
                    label: label.clone(),
                    colour: colour.get(pack).copied().unwrap_or(0),
                    daily: daily.clone(),
                })
                .collect();
            series.sort_by_key(|s| s.colour);
            (i, g, series)
        })
        .collect();
    html! {
        section aria-labelledby="adoption-title" {
            h2 id="adoption-title" { "Adoption" }
            p class="note" {
                "Distinct installs per UTC day that fetched this channel, by the pack they serve, "
                (view.installs) " in all over " (view.days.len()) " days. Exact up to "
                (view.estimate.exact_up_to) " installs per release and pack, then estimated (about "
                (percent(view.estimate.relative_error)) " error). An install that changed packs in a "
                "day counts once for each."
            }
            @if view.cells.is_empty() {
                p { "No install has reported in yet." }
            }
            @for (g_index, g, series) in &charts {
                    figure class="adoption" {
                        figcaption { h3 { (g.title()) } }
                        (stacked_bars(&format!("chart-{g_index}"), &g.title(), &view.days, series))
                        ul class="legend" {
                            @for s in series {
                                li { span class={ "swatch c" (s.colour % PALETTE) } aria-hidden="true" {} (s.label) }
                            }
                        }
                        div class="scroll" role="region" tabindex="0" aria-label={ "Installs per day, " (g.title()) } {
                            table class="numbers" {
                                caption class="visually-hidden" { "Installs per UTC day, " (g.title()) }
                                thead { tr {
                                    th scope="col" { "Version" }
                                    @for day in &view.days { th scope="col" { (day.get(5..).unwrap_or(day)) } }
                                    th scope="col" { "Today's share" }
                                } }
                                tbody {
                                    @for s in series {
                                        @let today = s.daily.last().copied().unwrap_or(0);
                                        tr {
                                            th scope="row" { (s.label) }
                                            @for n in &s.daily { td { (n) } }
                                            td { @if g.today() > 0 { (percent(today as f64 / g.today() as f64)) } @else { "—" } }
                                        }
                                    }
                                }
                            }
                        }
                    }
            }
        }
    }
}

fn failures(healths: &[PackHealth], entries: &[Entry]) -> Markup {
    html! {
        section aria-labelledby="failures-title" {
            h2 id="failures-title" { "Failure reports" }
            p class="note" {
                "Installs that refused a pack or fell back to their built-in one, by version. "
                "Failures are " strong { "rising" } " when, over today and yesterday (UTC), at least "
                (MIN_FAILING_INSTALLS) " installs reported them, that is at least "
                (percent(MIN_RATE)) " of the installs the version reached, and at least "
                (RISE_FACTOR) "× its rate of the days before."
            }
            @if healths.is_empty() {
                p { "No failure reports in the last 7 days." }
            } @else {
                table class="cards failures" {
                    caption class="visually-hidden" { "Failure reports by pack version, last 7 days" }
                    thead { tr {
                        th scope="col" { "Version" }
                        th scope="col" { "Live here as" }
                        th scope="col" { "Failing installs, today and yesterday" }
                        th scope="col" { "Rate (before)" }
                        th scope="col" { "Reports, 7 days" }
                        th scope="col" { "Reasons" }
                        th scope="col" { "Status" }
                    } }
                    tbody {
                        @for h in healths {
                            @let live_as: Vec<String> = entries.iter()
                                .filter(|e| fleet_key(&e.target) == h.pack)
                                .map(Entry::describe).collect();
                            tr class=[h.rising.then_some("flagged")] data-version=(h.label()) {
                                th scope="row" data-label="Version" { (h.label()) }
                                td data-label="Live here as" {
                                    @if live_as.is_empty() { "not live" } @else { (live_as.join("; ")) }
                                }
                                td data-label="Failing installs, today and yesterday" { (h.recent_failing) }
                                td data-label="Rate (before)" {
                                    (percent(h.recent_rate)) " (" (percent(h.earlier_rate)) ")"
                                }
                                td data-label="Reports, 7 days" { (h.reports) }
                                td data-label="Reasons" {
                                    @for (i, (reason, n)) in h.reasons.iter().enumerate() {
                                        @if i > 0 { ", " }
                                        code { (reason) } " " (n)
                                    }
                                }
                                td data-label="Status" {
                                    @if h.rising { strong class="flag" { "Rising" } }
                                    @else if h.recent_failing > 0 { "failing, not rising" }
                                    @else { "quiet lately" }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(range: &str, version: &str, rollout: Option<u8>) -> Entry {
        Entry {
            range: range.to_string(),
            target: Target::Pack {
                version: version.to_string(),
                sha256: "a".repeat(64),
                size: 1,
                schema: 1,
            },
            rollout,
            ramp_to: None,
        }
    }

    #[test]
    fn undoing_a_rollout_gives_the_range_what_the_rest_of_it_gets() {
        let r = ">=1.4.0, <1.5.0";
        let with_base = [entry(r, "1.2.0", Some(10)), entry(r, "1.1.0", None)];
        assert_eq!(undo(&with_base, 0).0, "--rollback '>=1.4.0, <1.5.0=1.1.0'");
        let falls_through = [entry(r, "1.2.0", Some(10)), entry("*", "1.0.0", None)];
        let (args, then) = undo(&falls_through, 0);
        assert_eq!(args, "--remove '>=1.4.0, <1.5.0'");
        assert_eq!(then, "its installs fall through to every release → 1.0.0");
        let pinned = [entry("*", "1.0.0", None)];
        assert_eq!(undo(&pinned, 0).0, "--rollback '*=builtin'");
    }

    #[test]
    fn rollouts_widen_in_the_usual_steps() {
        assert_eq!(next_step(0), 1);
        assert_eq!(next_step(10), 25);
        assert_eq!(next_step(50), 100);
        assert_eq!(next_step(100), 100);
    }
}
