//! A channel's history: every published document, newest first, 50 a page, each with the
//! token that published it and what changed; and one document on its own.

use std::collections::HashMap;

use maud::{Markup, html};
use time::OffsetDateTime;

use crate::console::access::Viewer;
use crate::console::entries::{Change, diff, shell_quote};
use crate::console::layout::{Section, change_box, page, short_sha, when};
use crate::console::{ConsoleState, HISTORY_PER_PAGE, parse_document};
use crate::error::ApiError;
use crate::model::{ChannelRecord, rfc3339};

use super::overview::{entry_list, expiry};

/// What changed in each record of `records` (newest first) since the one before it, when
/// that one is among them.
fn changes_of(records: &[(u64, Option<ChannelRecord>)]) -> HashMap<u64, Option<Vec<Change>>> {
    let docs: HashMap<u64, _> = records
        .iter()
        .filter_map(|(s, r)| Some((*s, parse_document(&r.as_ref()?.document)?)))
        .collect();
    docs.iter()
        .map(|(&sequence, doc)| {
            let before = sequence.checked_sub(1).filter(|&s| s >= 1);
            let changes = match before {
                None => Some(diff(None, doc)),
                Some(b) => docs.get(&b).map(|old| diff(Some(old), doc)),
            };
            (sequence, changes)
        })
        .collect()
}

fn change_list(changes: Option<&Vec<Change>>) -> Markup {
    html! {
        @match changes {
            Some(changes) if changes.is_empty() => span class="meta" { "no entry changed (renewed)" },
            Some(changes) => ul class="changes" {
                @for c in changes {
                    li class={ "change " (match c { Change::Added(_) => "added", Change::Removed(_) => "removed", Change::Rollout { .. } | Change::PackName { .. } => "changed" }) } {
                        span aria-hidden="true" class="sign" { (c.sign()) " " } (c.describe())
                    }
                }
            },
            None => span class="meta" { "—" },
        }
    }
}

/// The rows of `records` (newest first) from `oldest` up; older ones are only there for the
/// diff of the oldest row.
pub fn history_table(
    channel: &str,
    records: &[(u64, Option<ChannelRecord>)],
    oldest: u64,
    now: OffsetDateTime,
) -> Markup {
    let changes = changes_of(records);
    html! {
        table class="cards history" {
            caption class="visually-hidden" { "History of " (channel) ", newest first" }
            thead { tr {
                th scope="col" { "Sequence" }
                th scope="col" { "Published" }
                th scope="col" { "By token" }
                th scope="col" { "What changed" }
            } }
            tbody {
                @for (sequence, record) in records.iter().filter(|(s, _)| *s >= oldest) {
                    tr {
                        th scope="row" data-label="Sequence" {
                            a href={ "/console/channels/" (channel) "/history/" (sequence) } { (sequence) }
                        }
                        @match record {
                            Some(r) => {
                                td data-label="Published" { (when(&rfc3339(r.summary.published_at), now)) }
                                td data-label="By token" {
                                    @match &r.summary.published_by {
                                        Some(by) => span class="by" { (by) },
                                        None => span class="meta" { "not recorded" },
                                    }
                                }
                                td data-label="What changed" { (change_list(changes.get(sequence).and_then(Option::as_ref))) }
                            }
                            None => {
                                td colspan="3" { span class="meta" { "no document at this sequence" } }
                            }
                        }
                    }
                }
            }
        }
    }
}

pub async fn render_page(
    state: &ConsoleState,
    viewer: Viewer,
    channel: &str,
    before: Option<u64>,
) -> Result<Markup, ApiError> {
    let now = OffsetDateTime::now_utc();
    let live = state.live(channel).await?;
    let live_sequence = live.record.summary.sequence;
    // Sequences are contiguous from 1 to the live one: a page needs no listing.
    let newest = before
        .map_or(live_sequence, |b| b.saturating_sub(1))
        .min(live_sequence);
    let oldest = newest.saturating_sub(HISTORY_PER_PAGE - 1).max(1);
    let records = if newest == 0 {
        Vec::new()
    } else {
        state
            .documents(channel, (oldest.saturating_sub(1).max(1)..=newest).rev())
            .await?
    };
    let content = html! {
        nav aria-label="Breadcrumb" class="crumbs" {
            a href="/console" { "Channels" } " / "
            a href={ "/console/channels/" (channel) } { (channel) } " / "
            span aria-current="page" { "History" }
        }
        h1 { "History of " (channel) }
        p class="lead" {
            (live_sequence) " documents; the live one is sequence " (live_sequence) "."
            @if newest > 0 { " Showing " (newest) " to " (oldest) "." }
        }
        @if newest > 0 {
            (history_table(channel, &records, oldest, now))
        }
        nav class="pager" aria-label="History pages" {
            @if newest < live_sequence {
                a href={ "/console/channels/" (channel) "/history" } { "Newest" }
                a href={ "/console/channels/" (channel) "/history?before=" (newest + 1 + HISTORY_PER_PAGE) } rel="prev" { "← Newer" }
            }
            @if oldest > 1 {
                a href={ "/console/channels/" (channel) "/history?before=" (oldest) } rel="next" { "Older →" }
            }
        }
        (change_box(
            html! { p { "History is never rewritten: every change is the next sequence ("
                (live_sequence + 1) "). For example:" } },
            &[(
                "Pin every release of this channel to a version:".to_string(),
                format!(
                    "packer release {} --server {} --keys KEYS --pin '*=VERSION'",
                    shell_quote(channel),
                    shell_quote(&viewer.origin)
                ),
            )],
        ))
    };
    Ok(page(
        &format!("History of {channel}"),
        Section::Channels,
        Some(&viewer),
        content,
    ))
}

pub async fn render_sequence(
    state: &ConsoleState,
    viewer: Viewer,
    channel: &str,
    sequence: u64,
    with: Option<u64>,
) -> Result<Markup, ApiError> {
    let now = OffsetDateTime::now_utc();
    let live = state.live(channel).await?;
    let live_sequence = live.record.summary.sequence;
    let other = with.unwrap_or(sequence.saturating_sub(1));
    let mut wanted = vec![sequence];
    if other >= 1 && other != sequence {
        wanted.push(other);
    }
    let found = state.documents(channel, wanted.into_iter()).await?;
    let Some(record) = found.first().and_then(|(_, r)| r.clone()) else {
        return Err(ApiError::NotFound {
            what: format!("channel {channel} sequence {sequence}"),
        });
    };
    let document = parse_document(&record.document);
    let compared = found.get(1).and_then(|(s, r)| Some((*s, r.as_ref()?)));
    let compared_doc = compared.and_then(|(_, r)| parse_document(&r.document));
    let changes = match (&document, compared.is_some(), &compared_doc) {
        (Some(doc), false, _) if other == 0 => Some(diff(None, doc)),
        (Some(doc), true, Some(old)) => Some(if other < sequence {
            diff(Some(old), doc)
        } else {
            diff(Some(doc), old)
        }),
        _ => None,
    };
    let (from, to) = if other < sequence {
        (other, sequence)
    } else {
        (sequence, other)
    };
    let summary = &record.summary;
    let content = html! {
        nav aria-label="Breadcrumb" class="crumbs" {
            a href="/console" { "Channels" } " / "
            a href={ "/console/channels/" (channel) } { (channel) } " / "
            a href={ "/console/channels/" (channel) "/history" } { "History" } " / "
            span aria-current="page" { (sequence) }
        }
        h1 { (channel) ", sequence " (sequence) }
        p class="lead" {
            @if sequence == live_sequence { strong { "This is the live document." } }
            @else { "Not live: sequence " a href={ "/console/channels/" (channel) } { (live_sequence) } " is." }
        }
        dl class="facts" {
            div { dt { "Published" } dd { (when(&rfc3339(summary.published_at), now)) } }
            div { dt { "By token" } dd {
                @match &summary.published_by { Some(by) => span class="by" { (by) }, None => "not recorded" }
            } }
            div { dt { "Signed by key" } dd { code { (summary.key_id) } } }
            div { dt { "Issued" } dd { (when(&rfc3339(summary.issued_at), now)) } }
            div { dt { "Expires" } dd { (expiry(&rfc3339(summary.expires_at), now)) } }
            div { dt { "Document SHA-256" } dd { (short_sha(&summary.sha256)) } }
        }
        section aria-labelledby="entries-title" {
            h2 id="entries-title" { "Entries" }
            @match &document {
                Some(doc) => (entry_list(&crate::console::entries::entries(doc))),
                None => p { "The stored document does not parse." },
            }
        }
        section aria-labelledby="diff-title" {
            h2 id="diff-title" {
                @if other == 0 { "What it started with" }
                @else { "What changed from " (from) " to " (to) }
            }
            @match &changes {
                Some(changes) if changes.is_empty() => p { "No entry changed." },
                Some(changes) => ul class="changes" {
                    @for c in changes {
                        li { span aria-hidden="true" class="sign" { (c.sign()) " " } (c.describe()) }
                    }
                },
                None => p { "Sequence " (other) " is not in the history." },
            }
            form class="compare" method="get" action={ "/console/channels/" (channel) "/history/" (sequence) } {
                label for="with" { "Compare with sequence" }
                input id="with" name="with" type="number" min="1" max=(live_sequence) inputmode="numeric"
                    value=(if other >= 1 { other } else { 1 });
                button type="submit" { "Compare" }
            }
        }
        details {
            summary { "The signed document" }
            pre class="document" { (record.document) }
        }
        (change_box(
            html! { p { "A published document never changes. To serve these entries again, "
                "release them as the next sequence (" (live_sequence + 1) "), for example:" } },
            &[(
                "Pin every release of this channel to a version:".to_string(),
                format!(
                    "packer release {} --server {} --keys KEYS --pin '*=VERSION'",
                    shell_quote(channel),
                    shell_quote(&viewer.origin)
                ),
            )],
        ))
    };
    Ok(page(
        &format!("{channel} sequence {sequence}"),
        Section::Channels,
        Some(&viewer),
        content,
    ))
}
