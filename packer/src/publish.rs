//! `packer publish`: upload a sealed pack to packd.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{Context, Result};
use pack_format::{Limits, sha256_hex};
use reqwest::StatusCode;
use serde_json::json;

use crate::fsio::read_limited;
use crate::remote::model::UploadResponse;
use crate::remote::{Remote, ServerArgs, ServerError};
use crate::{print_json, shown};

/// Packs at least this big get a progress bar (when stderr is a terminal).
const PROGRESS_FROM_BYTES: u64 = 1024 * 1024;

#[derive(clap::Args)]
#[command(after_help = "\
Uploads the sealed bytes to PUT /v1/blobs/{sha256}. Uploading the same file again is a
no-op. A name and version only ever point at one file: different bytes under a version that
is already on the server are refused, so rebuild with a higher --version instead.
The token (publish scope) comes from --token-file or PROMPTPACK_TOKEN.

Example:
  PROMPTPACK_TOKEN=... packer publish dist/prompts-1.2.0.pack --server https://packs.example.com")]
pub struct PublishArgs {
    /// The sealed pack file (from `packer build`).
    #[arg(value_name = "PACK")]
    pack: PathBuf,

    #[command(flatten)]
    server: ServerArgs,
}

pub fn run(args: &PublishArgs, json: bool) -> Result<()> {
    let bytes = read_limited(&args.pack, Limits::DEFAULT.max_sealed_len, "pack")?;
    // Check locally first: the server would refuse it anyway, with a less helpful message.
    let (header, _) = pack_format::read_header(&bytes, &Limits::DEFAULT).with_context(|| {
        format!(
            "{} is not a sealed pack (build one with `packer build`)",
            shown(&args.pack)
        )
    })?;
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
                    "{} {} is already on {} with different bytes; this file ({}) was not uploaded. \
                     A published version never changes, so clients that installed it keep what they \
                     verified: rebuild with a higher version (e.g. `packer build ... --version {next}`) \
                     and publish that",
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
            "uploaded_at": pack.uploaded_at,
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
                pack.uploaded_at
            );
        }
        outln!(
            // `--pack` is what a new channel needs; on an existing one it must match, and does.
            "next      packer release CHANNEL --server {} --keys DIR --pack {} --pin '*={}'",
            remote.base(),
            pack.name,
            pack.version
        );
    }
    Ok(())
}

/// The next patch version, for the hint after a conflict.
fn bumped(version: &semver::Version) -> semver::Version {
    semver::Version::new(version.major, version.minor, version.patch + 1)
}
