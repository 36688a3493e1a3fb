//! `/console/packs`: every uploaded pack version with its size, schema and where it is live.

use std::collections::BTreeMap;
use std::sync::Arc;

use maud::{Markup, html};
use pack_protocol::PackRecord;
use time::OffsetDateTime;

use crate::console::access::Viewer;
use crate::console::entries::{Entry, entries_at, shell_quote};
use crate::console::layout::{Section, change_box, page, rollout_bar, size, when};
use crate::console::{ConsoleState, LiveChannel};
use crate::error::ApiError;
use crate::model::rfc3339;

/// Newest version first; versions that are no semver (none packd accepts) last.
fn by_version_desc(a: &PackRecord, b: &PackRecord) -> std::cmp::Ordering {
    b.version.cmp(&a.version)
}

pub async fn render(state: &ConsoleState, viewer: Viewer) -> Result<Markup, ApiError> {
    let now = OffsetDateTime::now_utc();
    let records = state.pack_records().await?;
    let names = state.channel_names().await?;
    let channels = state.live_many(&names).await?;
    // SHA-256 → (channel, entry) for every live entry that points at a pack.
    let mut live_at: BTreeMap<String, Vec<(&LiveChannel, Entry)>> = BTreeMap::new();
    for channel in &channels {
        for e in channel
            .document
            .as_ref()
            .map(|d| entries_at(d, now))
            .unwrap_or_default()
        {
            if let Some(sha) = e.target.sha256() {
                live_at
                    .entry(sha.to_string())
                    .or_default()
                    .push((channel, e));
            }
        }
    }
    let mut by_pack: BTreeMap<&str, Vec<&Arc<PackRecord>>> = BTreeMap::new();
    for r in &records {
        by_pack.entry(r.name.as_str()).or_default().push(r);
    }
    for versions in by_pack.values_mut() {
        versions.sort_by(|a, b| by_version_desc(a, b));
    }
    let content = html! {
        h1 { "Packs" }
        p class="lead" {
            (records.len()) " uploaded version" @if records.len() != 1 { "s" } " of "
            (by_pack.len()) " pack" @if by_pack.len() != 1 { "s" } "."
        }
        @if by_pack.is_empty() {
            p { "No pack has been uploaded yet." }
        }
        @for (name, versions) in &by_pack {
            section aria-labelledby={ "pack-" (name) } {
                h2 id={ "pack-" (name) } { "Pack " (name) }
                table class="cards packs" {
                    caption class="visually-hidden" { "Versions of " (name) ", newest first" }
                    thead { tr {
                        th scope="col" { "Version" }
                        th scope="col" { "Size" }
                        th scope="col" { "Schema" }
                        th scope="col" { "Uploaded" }
                        th scope="col" { "SHA-256" }
                        th scope="col" { "Live on" }
                    } }
                    tbody {
                        @for r in versions {
                            @let live = live_at.get(&r.sha256);
                            tr data-version=(r.version) {
                                th scope="row" data-label="Version" { (r.version) }
                                td data-label="Size" { (size(r.size)) }
                                td data-label="Schema" { (r.schema) }
                                td data-label="Uploaded" { (when(&rfc3339(r.uploaded_at), now)) }
                                td data-label="SHA-256" { code class="sha full" { (r.sha256) } }
                                td data-label="Live on" {
                                    @match live {
                                        Some(places) => ul class="entries" {
                                            @for (channel, e) in places {
                                                @let s = &channel.record.summary;
                                                li {
                                                    a href={ "/console/channels/" (s.channel) } { (s.channel) } ": "
                                                    (if e.range == "*" { "every release" } else { &e.range })
                                                    @if let Some(p) = e.rollout { " " (rollout_bar(p)) }
                                                }
                                            }
                                        },
                                        None => span class="meta" { "not live" },
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        (change_box(
            html! { p { "A version goes live on a channel through a release; uploading alone serves nobody:" } },
            &[(
                "Roll version VERSION out to 10 % of every release on a channel:".to_string(),
                format!(
                    "packer release CHANNEL --server {} --keys KEYS --rollout '*=VERSION@10'",
                    shell_quote(&viewer.origin)
                ),
            )],
        ))
    };
    Ok(page("Packs", Section::Packs, Some(&viewer), content))
}
