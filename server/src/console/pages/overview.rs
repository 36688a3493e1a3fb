//! `/console`: every channel with its live entries and rollout percentages (a ramp's of
//! now), what a guard document holds back, and whether a live version's failures are rising.

use std::collections::HashSet;
use std::time::Instant;

use maud::{Markup, html};
use time::OffsetDateTime;

use crate::console::access::Viewer;
use crate::console::entries::{Entry, entries_at, shell_quote};
use crate::console::health::health;
use crate::console::layout::{Section, change_box, page, rollout_bar, when};
use crate::console::rollouts::{GuardDocument, Stop, live_rollouts};
use crate::console::{
    CHANNELS_PER_PAGE, ConsoleState, FleetAccess, LiveChannel, OVERVIEW_FLEET_WAIT,
};
use crate::error::ApiError;
use crate::model::rfc3339;

/// One channel's row.
struct Row {
    channel: LiveChannel,
    entries: Vec<Entry>,
    /// What a live guard document did: `1.1.0 frozen at 5 %`.
    stopped: Vec<String>,
    /// Labels of live versions whose failures are rising (`None`: fleet data not shown, or
    /// still being read).
    rising: Option<Vec<String>>,
}

pub async fn render(
    state: &ConsoleState,
    viewer: Viewer,
    page_number: Option<usize>,
) -> Result<Markup, ApiError> {
    let asked = Instant::now();
    let now = OffsetDateTime::now_utc();
    let names = state.channel_names().await?;
    let pages = names.len().div_ceil(CHANNELS_PER_PAGE).max(1);
    let page_number = page_number.unwrap_or(1).clamp(1, pages);
    let start = (page_number - 1) * CHANNELS_PER_PAGE;
    let shown = &names[start.min(names.len())..(start + CHANNELS_PER_PAGE).min(names.len())];
    let live = state.live_many(shown).await?;
    let fleet = state.fleet_access(&viewer) == FleetAccess::Shown;
    let views = if fleet {
        state.views_by(&live, asked + OVERVIEW_FLEET_WAIT).await
    } else {
        vec![None; live.len()]
    };
    let rows: Vec<Row> = live
        .into_iter()
        .zip(views)
        .map(|(channel, view)| {
            let entries = channel
                .document
                .as_ref()
                .map(|d| entries_at(d, now))
                .unwrap_or_default();
            let stopped = channel
                .document
                .as_ref()
                .map(|d| {
                    let guard = GuardDocument::of(d);
                    live_rollouts(d, guard.as_ref(), now)
                        .into_iter()
                        .filter_map(|r| {
                            let version = r.entry.target.label();
                            Some(match r.stop? {
                                Stop::Frozen { percent } => {
                                    format!("{version} frozen at {percent} %")
                                }
                                Stop::RolledBack { to } => {
                                    format!("{version} rolled back to {}", to.label())
                                }
                            })
                        })
                        .collect()
                })
                .unwrap_or_default();
            let live_packs: HashSet<&str> =
                entries.iter().filter_map(|e| e.target.sha256()).collect();
            let rising = view.as_ref().map(|view| {
                health(view)
                    .into_iter()
                    .filter(|h| h.rising && live_packs.contains(h.pack.as_str()))
                    .map(|h| h.label())
                    .collect()
            });
            Row {
                channel,
                entries,
                stopped,
                rising,
            }
        })
        .collect();
    let pending = if fleet {
        rows.iter().filter(|r| r.rising.is_none()).count()
    } else {
        0
    };
    let alarms: Vec<(&Row, &Vec<String>)> = rows
        .iter()
        .filter_map(|r| Some((r, r.rising.as_ref().filter(|v| !v.is_empty())?)))
        .collect();
    let rollouts = rows
        .iter()
        .filter(|r| r.entries.iter().any(|e| e.rollout.is_some()))
        .count();
    let content = html! {
        h1 { "Channels" }
        p class="lead" {
            (names.len()) " channel" @if names.len() != 1 { "s" } "; "
            (rollouts) " with a staged rollout on this page"
            @if fleet { "; " (alarms.len()) " with failures rising." } @else { "." }
        }
        @if !alarms.is_empty() {
            section class="alarm" aria-labelledby="attention" {
                h2 id="attention" { "Failures rising" }
                ul {
                    @for (row, rising) in &alarms {
                        li {
                            a href={ "/console/channels/" (row.channel.record.summary.channel) } {
                                (row.channel.record.summary.channel)
                            }
                            ": " (rising.join(", "))
                        }
                    }
                }
            }
        }
        @if pending > 0 {
            p class="warning" role="status" {
                "The fleet data of " (pending) " channel" @if pending != 1 { "s" }
                " is still being read (packd started recently): "
                a href={ "/console?page=" (page_number) } { "reload" } " in a moment to see their failures."
            }
        }
        @if names.is_empty() {
            p { "Nothing is published on this server yet." }
        } @else {
            table class="cards channels" {
                caption { "Live document of each channel, by name" }
                thead {
                    tr {
                        th scope="col" { "Channel" }
                        th scope="col" { "Pack" }
                        th scope="col" { "Live entries" }
                        th scope="col" { "Sequence" }
                        th scope="col" { "Published" }
                        th scope="col" { "Expires" }
                        @if fleet { th scope="col" { "Failures" } }
                    }
                }
                tbody {
                    @for row in &rows {
                        @let s = &row.channel.record.summary;
                        @let rising = row.rising.as_ref().filter(|v| !v.is_empty());
                        tr class=[rising.map(|_| "flagged")] {
                            th scope="row" data-label="Channel" {
                                a href={ "/console/channels/" (s.channel) } { (s.channel) }
                            }
                            td data-label="Pack" { (s.pack) }
                            td data-label="Live entries" {
                                (entry_list(&row.entries))
                                @if !row.stopped.is_empty() {
                                    strong class="flag" { "By the guard: " (row.stopped.join("; ")) }
                                }
                            }
                            td data-label="Sequence" {
                                a href={ "/console/channels/" (s.channel) "/history" } { (s.sequence) }
                            }
                            td data-label="Published" {
                                (when(&rfc3339(s.published_at), now))
                                @if let Some(by) = &s.published_by { br; span class="by" { "by " (by) } }
                            }
                            td data-label="Expires" { (expiry(&rfc3339(s.expires_at), now)) }
                            @if fleet {
                                td data-label="Failures" {
                                    @match (&row.rising, rising) {
                                        (None, _) => span class="meta" { "still being read" },
                                        (Some(_), Some(r)) => strong class="flag" { "Rising: " (r.join(", ")) },
                                        (Some(_), None) => "none rising",
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if pages > 1 {
                nav class="pager" aria-label="Channel pages" {
                    @if page_number > 1 {
                        a href={ "/console?page=" (page_number - 1) } rel="prev" { "← Previous" }
                    }
                    span { "Page " (page_number) " of " (pages) }
                    @if page_number < pages {
                        a href={ "/console?page=" (page_number + 1) } rel="next" { "Next →" }
                    }
                }
            }
        }
        (change_box(
            html! { p { "A channel changes only by a new signed document. For example, on channel "
                code { "CHANNEL" } ":" } },
            &commands(&viewer.origin),
        ))
    };
    Ok(page("Channels", Section::Channels, Some(&viewer), content))
}

/// The entries of a live document as a list: range → version, with the rollout bar.
pub fn entry_list(entries: &[Entry]) -> Markup {
    html! {
        ul class="entries" {
            @for e in entries {
                li {
                    span class="range" { (if e.range == "*" { "every release" } else { &e.range }) }
                    " → "
                    strong class="version" { (e.target.label()) }
                    @if let Some(p) = e.rollout { " " (rollout_bar(p)) }
                    @if let Some(to) = e.ramp_to { " " span class="meta" { "ramping to " (to) " %" } }
                }
            }
        }
    }
}

/// The expiry, flagged when it is near (a week) or past.
pub fn expiry(expires_at: &str, now: OffsetDateTime) -> Markup {
    let parsed =
        OffsetDateTime::parse(expires_at, &time::format_description::well_known::Rfc3339).ok();
    let left = parsed.map(|t| t - now);
    html! {
        (when(expires_at, now))
        @if left.is_some_and(|l| l <= time::Duration::ZERO) {
            br; strong class="flag" { "Expired: clients keep what they have" }
        } @else if left.is_some_and(|l| l < time::Duration::days(7)) {
            br; strong class="warn" { "Expires soon" }
        }
    }
}

fn commands(origin: &str) -> Vec<(String, String)> {
    let base = format!(
        "packer release CHANNEL --server {} --keys KEYS",
        shell_quote(origin)
    );
    vec![
        (
            "Pin every release to a version:".to_string(),
            format!("{base} --pin '*=VERSION'"),
        ),
        (
            "Roll a version out to 10 % of a release range:".to_string(),
            format!("{base} --rollout '>=1.4.0, <1.5.0=VERSION@10'"),
        ),
        (
            "Roll a range back to the pack built into the client:".to_string(),
            format!("{base} --rollback '>=1.4.0, <1.5.0=builtin'"),
        ),
    ]
}
