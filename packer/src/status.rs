//! `packer status`: what is live where on a packd — every channel with its entries, and
//! every pack version with the channels that point at it.

use anyhow::{Context, Result};
use pack_format::channel::format_time;
use pack_format::{ChannelDocument, ChannelEntry, EntryTarget, Limits};
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::print_json;
use crate::remote::model::{ChannelList, ChannelSummary, PackList};
use crate::remote::{Remote, ServerArgs};

#[derive(clap::Args)]
#[command(after_help = "\
Reads GET /v1/channels, each channel's live document and GET /v1/packs. Reads need no
token unless the deployment is private; then it comes from --token-file or PROMPTPACK_TOKEN.
Signatures are not checked here: `packer release` checks them before it builds on a document.")]
pub struct StatusArgs {
    #[command(flatten)]
    server: ServerArgs,
}

/// One channel: its summary and the parsed live document.
struct Live {
    summary: ChannelSummary,
    document: ChannelDocument,
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
        channels.push(Live { summary, document });
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
                    "published_at": live.summary.published_at,
                    "key_id": live.summary.key_id,
                    "sha256": live.summary.sha256,
                    "entries": entries_json(&doc.entries),
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
                        "uploaded_at": v.uploaded_at,
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
        if doc.entries.is_empty() {
            outln!("  (no entries: every client uses its built-in pack)");
        }
        for entry in &doc.entries {
            outln!("  {}", entry_line(entry));
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

/// `RANGE -> VERSION [at N%]` for humans.
fn entry_line(entry: &ChannelEntry) -> String {
    let target = match &entry.target {
        EntryTarget::Pack(pack) => pack.version.to_string(),
        EntryTarget::Builtin => "builtin".to_string(),
    };
    let rollout = entry
        .rollout
        .as_ref()
        .map(|r| format!("  (rollout {}%)", r.percent))
        .unwrap_or_default();
    format!("{:<20} -> {target}{rollout}", entry.clients.to_string())
}

/// Entries as JSON: `clients`, `target` ("builtin" or the version), and the pack details.
pub fn entries_json(entries: &[ChannelEntry]) -> Vec<Value> {
    entries
        .iter()
        .map(|entry| {
            let mut value = match &entry.target {
                EntryTarget::Pack(pack) => json!({
                    "clients": entry.clients.to_string(),
                    "target": "pack",
                    "version": pack.version.to_string(),
                    "sha256": pack.sha256,
                    "size": pack.size,
                    "schema": pack.schema,
                }),
                EntryTarget::Builtin => json!({
                    "clients": entry.clients.to_string(),
                    "target": "builtin",
                }),
            };
            if let Some(rollout) = &entry.rollout {
                value["rollout"] = json!({ "percent": rollout.percent, "salt": rollout.salt });
            }
            value
        })
        .collect()
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
                    .map(|r| format!(" at {}%", r.percent))
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
