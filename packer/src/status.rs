//! `packer status`: what is live where on a packd — every channel with its entries (ramps
//! read at the current time, the guard key, what a guard document holds back), and every
//! pack version with the channels that point at it.

use anyhow::{Context, Result};
use pack_format::channel::format_time;
use pack_format::{ChannelDocument, ChannelEntry, EntryTarget, Limits};
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::channel::{ramp_schedule, watch_text};
use crate::guard::{guard_changes, guard_id};
use crate::print_json;
use crate::remote::ServerError;
use crate::remote::model::{ChannelList, ChannelSummary, PackList};
use crate::remote::{Remote, ServerArgs};
use pack_protocol::guard::GuardView;
use pack_protocol::{FailureCell, FleetCell, FleetView};

#[derive(clap::Args)]
#[command(after_help = "\
Reads GET /v1/channels, each channel's live document and GET /v1/packs. Reads need no
token unless the deployment is private; then it comes from --token-file or PROMPTPACK_TOKEN.
Signatures are not checked here: `packer release` checks them before it builds on a document.

A ramping rollout shows the percentage it stands at now (the schedule read with this
machine's clock, as clients read it) and when each remaining step lands. A channel that names
a guard key shows its id; a live document signed by the guard key (`packer guard`) shows the
offline-signed sequence it restricts and what it froze or rolled back. Resuming takes the
signing key: `packer release CHANNEL --resume RANGE`.

With --fleet it also reads GET /v1/channels/{channel}/fleet: per channel entry's release range,
how many installs run which pack version (distinct installs over the last --days UTC days,
merged from every packd node) against the entry's rollout target, and the failure reports
per pack version. An install that changed pack inside the window counts under both; use
--days 1 for the current picture.")]
pub struct StatusArgs {
    #[command(flatten)]
    server: ServerArgs,

    /// Show adoption and failure reports per pack version.
    #[arg(long)]
    fleet: bool,

    /// UTC days the fleet view covers, today included (1 to 7).
    #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..=7), requires = "fleet")]
    days: u32,
}

/// One channel: its summary and the parsed live document.
struct Live {
    summary: ChannelSummary,
    document: ChannelDocument,
    /// With `--fleet`: the fleet view, or why there is none (the server keeps no fleet data).
    fleet: Option<Result<FleetView, String>>,
    /// For a channel with a guard key: what packd's guard saw and did.
    guard: Option<GuardView>,
}

pub fn run(args: &StatusArgs, json: bool) -> Result<()> {
    let remote = Remote::new(&args.server, false)?;
    let list: ChannelList = remote.get_json(pack_protocol::paths::CHANNELS)?;
    let mut channels = Vec::with_capacity(list.channels.len());
    for summary in list.channels {
        let path = pack_protocol::paths::channel(&summary.channel);
        let Some((bytes, _)) =
            remote.get_bytes_opt(&path, Limits::DEFAULT.max_channel_len as u64)?
        else {
            continue;
        };
        let document: ChannelDocument = serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "{}: not a channel document this packer understands",
                remote.url(&path)
            )
        })?;
        // A stop order shows the entries of the document it restricts.
        let document = pack_format::guard::effective(&document).unwrap_or(document);
        let fleet = if args.fleet {
            Some(fleet_view(&remote, &summary.channel, args.days)?)
        } else {
            None
        };
        // What the guard saw and did, for a channel that names one (or is held back by one).
        let guard = if document.guard.is_some() || document.restricts.is_some() {
            guard_view(&remote, &summary.channel)
        } else {
            None
        };
        channels.push(Live {
            summary,
            document,
            fleet,
            guard,
        });
    }
    let packs: PackList = remote.get_json(pack_protocol::paths::PACKS)?;
    let now = OffsetDateTime::now_utc();

    if json {
        let channels_json: Vec<Value> = channels
            .iter()
            .map(|live| {
                let doc = &live.document;
                json!({
                    "channel": doc.channel,
                    "pack": doc.pack,
                    "sequence": doc.sequence,
                    "issued_at": format_time(doc.issued_at),
                    "expires_at": format_time(doc.expires_at),
                    "expired": doc.expires_at <= now,
                    "published_at": format_time(live.summary.published_at),
                    "key_id": live.summary.key_id,
                    "sha256": live.summary.sha256,
                    "guard": doc.guard.as_ref().map(|g| json!({ "key_id": guard_id(g), "key": g.key })),
                    "restricts_sequence": restricted(doc).map(|base| base.sequence),
                    "guard_actions": restricted(doc)
                        .map(|base| guard_changes(doc, &base).iter().map(|c| c.to_json()).collect::<Vec<_>>()),
                    "guard_view": live.guard.as_ref().map(|g| serde_json::to_value(g).unwrap_or(Value::Null)),
                    "entries": crate::live::entries_json(&doc.entries, now),
                    "fleet": match &live.fleet {
                        Some(Ok(view)) => serde_json::to_value(view).unwrap_or(Value::Null),
                        Some(Err(reason)) => json!({ "unavailable": reason }),
                        None => Value::Null,
                    },
                })
            })
            .collect();
        let packs_json: Vec<Value> = packs
            .packs
            .iter()
            .map(|p| {
                json!({
                    "name": p.name,
                    "versions": p.versions.iter().map(|v| json!({
                        "version": v.version,
                        "sha256": v.sha256,
                        "size": v.size,
                        "schema": v.schema,
                        "uploaded_at": format_time(v.uploaded_at),
                        "live_in": live_in(&channels, &p.name, &v.sha256),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        print_json(&json!({
            "server": remote.base(),
            "channels": channels_json,
            "packs": packs_json,
        }));
        return Ok(());
    }

    outln!("server {}", remote.base());
    outln!();
    if channels.is_empty() {
        outln!("channels: none published yet");
    }
    for live in &channels {
        let doc = &live.document;
        let expiry = if doc.expires_at <= now {
            format!("EXPIRED at {}", format_time(doc.expires_at))
        } else {
            format!("expires {}", format_time(doc.expires_at))
        };
        outln!(
            "channel {}  pack {}  sequence {}  {expiry}",
            doc.channel,
            doc.pack,
            doc.sequence
        );
        if let Some(guard) = &doc.guard {
            outln!("  guard key {} (may freeze or roll back)", guard_id(guard));
        }
        if let Some(base) = restricted(doc) {
            outln!(
                "  stop order: signed by the guard key, restricting sequence {} (signed \
                 with the offline key)",
                base.sequence
            );
            for change in guard_changes(doc, &base) {
                outln!("    {}", change.text());
                outln!("      {}", change.undo(&doc.channel));
            }
        }
        if doc.entries.is_empty() {
            outln!("  (no entries: every client uses its built-in pack)");
        }
        for (i, entry) in doc.entries.iter().enumerate() {
            outln!("  {i}  {}", entry_line(entry, now));
        }
        if let Some(view) = &live.guard {
            for line in guard_lines(view) {
                outln!("  {line}");
            }
        }
        match &live.fleet {
            Some(Ok(view)) => {
                for line in fleet_lines(doc, view, now) {
                    outln!("  {line}");
                }
            }
            Some(Err(reason)) => outln!("  fleet: {reason}"),
            None => {}
        }
    }
    outln!();
    if packs.packs.is_empty() {
        outln!("packs: none uploaded yet");
    }
    for pack in &packs.packs {
        outln!("pack {}", pack.name);
        for v in &pack.versions {
            let live = live_in(&channels, &pack.name, &v.sha256);
            let live = if live.is_empty() {
                String::new()
            } else {
                format!("  live in {}", live.join(", "))
            };
            outln!(
                "  {:<12} sha256 {}  {} bytes  schema {}{live}",
                v.version,
                v.sha256.get(..12).unwrap_or(&v.sha256),
                v.size,
                v.schema
            );
        }
    }
    Ok(())
}

/// The document a stop order restricts, as it carries it (unverified, like the rest of what
/// status shows).
fn restricted(doc: &ChannelDocument) -> Option<ChannelDocument> {
    doc.restricts.as_ref()?.parse_document()
}

/// `RANGE -> VERSION [(rollout N% ...)]` for humans, a ramp read at `now`.
fn entry_line(entry: &ChannelEntry, now: OffsetDateTime) -> String {
    let target = match &entry.target {
        EntryTarget::Pack(pack) => pack.version.to_string(),
        EntryTarget::Builtin => "builtin".to_string(),
    };
    let rollout = entry
        .rollout
        .as_ref()
        .map(|r| {
            let mut text = match ramp_schedule(r, now) {
                Some(schedule) => format!("  (rollout ramp: {schedule}"),
                None => format!("  (rollout {}%", r.percent),
            };
            if let Some(watch) = &r.watch {
                text.push_str(&format!("; {}", watch_text(watch)));
            }
            text.push(')');
            text
        })
        .unwrap_or_default();
    format!("{:<20} -> {target}{rollout}", entry.clients.to_string())
}

/// `channel (range[ at N%])` for every entry that points at this blob.
fn live_in(channels: &[Live], pack: &str, sha256: &str) -> Vec<String> {
    let mut out = Vec::new();
    for live in channels {
        if live.document.pack != pack {
            continue;
        }
        for entry in &live.document.entries {
            let EntryTarget::Pack(target) = &entry.target else {
                continue;
            };
            if target.sha256 == sha256 {
                let rollout = entry
                    .rollout
                    .as_ref()
                    .map(|r| {
                        let now = OffsetDateTime::now_utc();
                        format!(" at {}%", r.percent_at(live.document.ramp_time(now)))
                    })
                    .unwrap_or_default();
                out.push(format!(
                    "{} ({}{rollout})",
                    live.document.channel, entry.clients
                ));
            }
        }
    }
    out
}

/// The fleet view of `channel`; `Err` with a note when the server keeps none.
/// The guard's view of `channel`, or `None` where packd has none to give (an older packd, or
/// a deployment whose fleet view is closed to this token): status goes on without it.
fn guard_view(remote: &Remote, channel: &str) -> Option<GuardView> {
    remote
        .get_json::<GuardView>(&pack_protocol::paths::guard(channel))
        .ok()
}

/// The guard's latest decision (why it acted) and its latest look at each watched entry.
fn guard_lines(view: &GuardView) -> Vec<String> {
    let mut out = Vec::new();
    match (&view.key_id, &view.delegated) {
        (Some(held), Some(delegated)) if held == delegated => out.push(format!(
            "guard: packd holds the guard key {held} (alpha {}, tau {}, at least {} installs a side)",
            view.alpha, view.tau, view.min_installs
        )),
        _ => out.push("guard: no packd node answering holds this channel's guard key".to_string()),
    }
    if let Some(decision) = view.decisions.first() {
        out.push(format!(
            "  {} entry {} ({} {}) at {}% on {} as sequence {}: {}",
            decision.action,
            decision.entry,
            decision.clients,
            decision.version,
            decision.percent,
            format_time(decision.at),
            decision.sequence,
            decision.reason
        ));
    }
    if let Some(look) = &view.last {
        for entry in &look.entries {
            for m in &entry.metrics {
                let verdict = match m.difference {
                    None => format!(
                        "waiting for {} installs a side ({} and {} so far)",
                        view.min_installs, m.new_installs, m.old_installs
                    ),
                    Some(d) => format!(
                        "{:+.2} points, interval [{:+.2}, {:+.2}]{}",
                        d * 100.0,
                        m.low * 100.0,
                        m.high * 100.0,
                        if m.regressed { ", REGRESSED" } else { "" }
                    ),
                };
                out.push(format!(
                    "  looked {}: entry {} {} vs {} {}: {verdict}",
                    format_time(look.at),
                    entry.entry,
                    entry.version,
                    entry.replaces,
                    m.metric
                ));
            }
        }
    }
    out
}

fn fleet_view(remote: &Remote, channel: &str, days: u32) -> Result<Result<FleetView, String>> {
    let path = format!("{}?days={days}", pack_protocol::paths::fleet(channel));
    match remote.get_json::<FleetView>(&path) {
        Ok(view) => Ok(Ok(view)),
        Err(e) => match e.downcast_ref::<ServerError>() {
            Some(server) if server.code.as_deref() == Some("fleet_disabled") => Ok(Err(
                "off on this server ([fleet] enabled = false in its config)".to_string(),
            )),
            // An older packd: no such route.
            Some(server) if server.status == reqwest::StatusCode::NOT_FOUND => Ok(Err(format!(
                "this server has no fleet view ({})",
                server.message
            ))),
            Some(_) | None => Err(e),
        },
    }
}

/// How a pack of a fleet cell is called: its version, `builtin`, or the start of its SHA-256.
fn pack_name(pack: &str, version: Option<&str>) -> String {
    match version {
        Some(version) => version.to_string(),
        None if pack.len() == 64 => format!("sha256 {}", &pack[..12]),
        None => pack.to_string(),
    }
}

/// Per release range of the document (in entry order): installs by pack version, the share
/// of the range, the entry's rollout target, and the failure reports of that version.
fn fleet_lines(doc: &ChannelDocument, view: &FleetView, now: OffsetDateTime) -> Vec<String> {
    let days = view.days.len();
    let mut out = vec![format!(
        "fleet, last {days} day{}: {} installs{}",
        if days == 1 { "" } else { "s" },
        view.installs,
        if view.overflow {
            " (some release × pack combinations over the server's cap are counted as other)"
        } else {
            ""
        }
    )];
    // The first entry whose range matches a release speaks for it, as clients select.
    let range_of = |release: &str| -> Option<String> {
        let version = semver::Version::parse(release).ok()?;
        doc.entries
            .iter()
            .find(|e| e.clients.matches(&version))
            .map(|e| e.clients.to_string())
    };
    for range in &view.ranges {
        let label = &range.clients;
        out.push(format!("  {label}: {} installs", range.installs));
        for pack in &range.packs {
            let share = if range.installs == 0 {
                0.0
            } else {
                100.0 * pack.installs as f64 / range.installs as f64
            };
            let mut line = format!(
                "    {}: {} installs, {share:.0} % of {label}",
                pack_name(
                    &pack.pack,
                    pack.pack_version
                        .as_ref()
                        .map(ToString::to_string)
                        .as_deref()
                ),
                pack.installs
            );
            let target = doc.entries.iter().find(|e| {
                e.clients.to_string() == *label
                    && matches!(&e.target, EntryTarget::Pack(p) if p.sha256 == pack.pack)
            });
            if let Some(rollout) = target.and_then(|e| e.rollout.as_ref()) {
                line.push_str(&format!(
                    "; rollout target {} %",
                    rollout.percent_at(doc.ramp_time(now))
                ));
            }
            let failures: Vec<&FailureCell> = view
                .failures
                .iter()
                .filter(|f| {
                    f.pack == pack.pack && range_of(&f.client_version).as_deref() == Some(label)
                })
                .collect();
            if !failures.is_empty() {
                let text: Vec<String> = failures
                    .iter()
                    .map(|f| format!("{} {} from {} installs", f.reports, f.reason, f.installs))
                    .collect();
                line.push_str(&format!("; failures: {}", text.join(", ")));
            }
            out.push(line);
        }
    }
    let unmatched: Vec<&FleetCell> = view
        .cells
        .iter()
        .filter(|c| range_of(&c.client_version).is_none())
        .collect();
    if !unmatched.is_empty() {
        let releases: Vec<String> = unmatched
            .iter()
            .map(|c| {
                format!(
                    "{} on {} ({})",
                    c.client_version,
                    pack_name(
                        &c.pack,
                        c.pack_version.as_ref().map(ToString::to_string).as_deref()
                    ),
                    c.installs
                )
            })
            .collect();
        out.push(format!(
            "  releases no entry matches: {}",
            releases.join(", ")
        ));
    }
    // Failures no range line above shows (a pack no install runs any more, say).
    let shown = |f: &FailureCell| {
        view.ranges.iter().any(|r| {
            Some(&r.clients) == range_of(&f.client_version).as_ref()
                && r.packs.iter().any(|p| p.pack == f.pack)
        })
    };
    for f in view.failures.iter().filter(|f| !shown(f)) {
        out.push(format!(
            "  {} (client {}): {} {} from {} installs",
            pack_name(
                &f.pack,
                f.pack_version.as_ref().map(ToString::to_string).as_deref()
            ),
            f.client_version,
            f.reports,
            f.reason,
            f.installs
        ));
    }
    out
}
