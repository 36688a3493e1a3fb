//! `packer publish`: upload a sealed pack to packd.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{Context, Result};
use pack_format::channel::format_time;
use pack_format::{Limits, sha256_hex};
use reqwest::StatusCode;
use serde_json::json;

use crate::check::open_as_client;
use crate::fsio::read_limited;
use crate::keys::content_key_ring;
use crate::remote::model::{ChannelList, UploadResponse};
use crate::remote::{Remote, ServerArgs, ServerError};
use crate::{ContentKeyArgs, print_json, shown};

/// Packs at least this big get a progress bar (when stderr is a terminal).
const PROGRESS_FROM_BYTES: u64 = 1024 * 1024;

#[derive(clap::Args)]
#[command(after_help = "\
Checks the pack first, as clients do, and uploads nothing they would refuse. Without keys
that is its structure (header, key slots, segment table, sizes, the sealed length); with
--keys (or --content-key) also that it decrypts, that every file matches its index, and that
its templates fit the contract of its schema. Only a content key can tell a pack whose
encrypted bytes were damaged from a sound one: publish with --keys where the keys are at
hand (`packer release` makes the same check before it signs; a version no channel document
has named yet can then be published again with the fixed pack).

Uploads the sealed bytes to PUT /v1/blobs/{sha256}. Uploading the same file again is a
no-op. Different bytes under a version already on the server replace it while no channel
document (live or past) names that version; once one has, the version never changes and
other bytes are refused: rebuild with a higher --version instead. The token (publish scope) comes from --token-file or PROMPTPACK_TOKEN.

Example:
  PROMPTPACK_TOKEN=... packer publish dist/prompts-1.2.0.pack --keys keys --server https://packs.example.com")]
pub struct PublishArgs {
    /// The sealed pack file (from `packer build`).
    #[arg(value_name = "PACK")]
    pack: PathBuf,

    /// Key directory holding content.key: open the pack and check its contents before
    /// uploading it.
    #[arg(long, value_name = "DIR")]
    keys: Option<PathBuf>,

    #[command(flatten)]
    extra_keys: ContentKeyArgs,

    #[command(flatten)]
    server: ServerArgs,
}

pub fn run(args: &PublishArgs, json: bool) -> Result<()> {
    let bytes = read_limited(&args.pack, Limits::DEFAULT.max_sealed_len, "pack")?;
    // Everything a client checks before it needs a content key. packd checks the same, but
    // a pack with a sound header and damaged contents it takes, and keeps for good.
    let (header, _) = pack_format::read_header(&bytes, &Limits::DEFAULT).with_context(|| {
        format!(
            "{} is not a sealed pack clients accept; nothing was uploaded (build one with \
             `packer build`)",
            shown(&args.pack)
        )
    })?;
    if args.keys.is_some() || !args.extra_keys.content_keys.is_empty() {
        let ring = content_key_ring(args.keys.as_deref(), &args.extra_keys.content_keys)?;
        open_as_client(&bytes, &ring, &shown(&args.pack)).with_context(|| {
            format!(
                "{} was not uploaded: every client would refuse it",
                shown(&args.pack)
            )
        })?;
    } else {
        eprintln!(
            "note: only the structure of {} was checked (no --keys): whether it decrypts and \
             fits the contract is checked by `packer release` (a version it refuses can be \
             published again, fixed, as {} {}); give --keys DIR to check it before it is uploaded",
            shown(&args.pack),
            header.name,
            header.version
        );
    }
    let remote = Remote::new(&args.server, true)?;
    let sha256 = sha256_hex(&bytes);
    let size = bytes.len() as u64;
    let progress = (size >= PROGRESS_FROM_BYTES && std::io::stderr().is_terminal())
        .then(|| crate::fsio::bar(size, "uploading"));
    let result = remote.put_bytes::<UploadResponse>(
        &pack_protocol::paths::blob(&sha256),
        bytes,
        progress.clone(),
    );
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    let answer = match result {
        Ok(answer) => answer,
        Err(error) => {
            if let Some(server) = error.downcast_ref::<ServerError>()
                && server.status == StatusCode::CONFLICT
            {
                let next = bumped(&header.version);
                return Err(error.context(format!(
                    "{} {} is already on {} with different bytes and was released (or is being \
                     replaced by another upload); this file ({}) was not uploaded. A released version \
                     never changes, so clients that installed it keep what they verified: rebuild \
                     with a higher version (e.g. `packer build ... --version {next}`) and publish that",
                    header.name,
                    header.version,
                    remote.base(),
                    shown(&args.pack),
                )));
            }
            return Err(error);
        }
    };
    let pack = &answer.pack;
    if json {
        print_json(&json!({
            "server": remote.base(),
            "name": pack.name,
            "version": pack.version,
            "schema": pack.schema,
            "sha256": pack.sha256,
            "size": pack.size,
            "created": answer.created,
            "uploaded_at": format_time(pack.uploaded_at),
        }));
    } else {
        outln!("pack      {} {}", pack.name, pack.version);
        outln!("sha256    {}", pack.sha256);
        outln!("size      {} bytes, schema {}", pack.size, pack.schema);
        if answer.created {
            outln!("uploaded  new on {}", remote.base());
        } else {
            outln!(
                "uploaded  already there since {} (same bytes; nothing changed)",
                format_time(pack.uploaded_at)
            );
        }
        next_step(&remote, &pack.name, &pack.version.to_string());
    }
    Ok(())
}

/// The release command to run next. A channel that does not exist yet needs `--new-channel`
/// and `--pack`, so that a mistyped channel name is never created by a copied command: they
/// are printed only when no channel serves this pack yet.
fn next_step(remote: &Remote, name: &str, version: &str) {
    let base = remote.base();
    let release = format!("packer release CHANNEL --server {base} --keys DIR");
    // The upload is done; without the list, the hint says both ways.
    let Ok(list) = remote.get_json::<ChannelList>(pack_protocol::paths::CHANNELS) else {
        outln!("next      {release} --pin '*={version}'");
        outln!("          (for a channel that does not exist yet add --new-channel --pack {name})");
        return;
    };
    let channels: Vec<String> = list
        .channels
        .into_iter()
        .filter(|c| c.pack == name)
        .map(|c| c.channel)
        .collect();
    if channels.is_empty() {
        outln!("next      {release} --new-channel --pack {name} --pin '*={version}'");
        outln!("          (no channel serves {name} on {base} yet: --new-channel creates CHANNEL)");
    } else {
        outln!("next      {release} --pin '*={version}'");
        outln!(
            "          (channels of {name} on {base}: {})",
            channels.join(", ")
        );
    }
}

/// The next patch version, for the hint after a conflict.
fn bumped(version: &semver::Version) -> semver::Version {
    semver::Version::new(version.major, version.minor, version.patch + 1)
}
