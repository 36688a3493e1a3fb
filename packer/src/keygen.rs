//! `packer keygen`: a signing key pair and a content key in one directory.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use pack_format::keys::{CONTENT_KEY_FILE, SIGNING_KEY_FILE, SIGNING_PUB_FILE};
use pack_format::{ContentKey, SigningKey};
use serde_json::json;

use crate::fsio::{self, spinner};
use crate::keys::{PASSWORD_ENV, password};
use crate::{print_json, shown};

#[derive(clap::Args)]
#[command(
    after_help = "Writes DIR/signing.key (secret, mode 0600), DIR/signing.pub and \
    DIR/content.key (secret, mode 0600). The signing key is a standard minisign key: \
    `minisign -Vm channel.json -p DIR/signing.pub` verifies channel documents.\n\n\
    With a password (--password-file, or the PROMPTPACK_KEY_PASSWORD environment variable) \
    the signing key is encrypted the way `minisign -G` does it."
)]
pub struct KeygenArgs {
    /// Directory to write the keys into (created if missing).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,

    /// File whose first line is the password that encrypts the signing key.
    #[arg(long, value_name = "FILE")]
    password_file: Option<PathBuf>,

    /// Overwrite existing key files. The old keys are lost for good.
    #[arg(long)]
    force: bool,
}

pub fn run(args: &KeygenArgs, json: bool) -> Result<()> {
    let secret_path = args.dir.join(SIGNING_KEY_FILE);
    let public_path = args.dir.join(SIGNING_PUB_FILE);
    let content_path = args.dir.join(CONTENT_KEY_FILE);
    if !args.force {
        for path in [&secret_path, &public_path, &content_path] {
            if path.exists() {
                bail!(
                    "{} already exists; nothing was written. --force overwrites it (the old key is lost for good)",
                    shown(path)
                );
            }
        }
    }
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating key directory {}", shown(&args.dir)))?;
    let password = password(args.password_file.as_deref())?;

    // Encrypting the key runs scrypt, which takes a noticeable moment.
    let progress = password
        .as_ref()
        .map(|_| spinner("encrypting the signing key"));
    let generated = SigningKey::generate(password.as_deref().map(String::as_str))?;
    if let Some(progress) = progress {
        progress.finish_and_clear();
    }
    let content = ContentKey::generate();

    // Stage all three before moving any into place, so a failure leaves the old set whole.
    let staged = [
        fsio::stage(&secret_path, generated.secret_file.as_bytes(), 0o600)?,
        fsio::stage(&public_path, generated.public_file.as_bytes(), 0o644)?,
        fsio::stage(&content_path, content.to_file_text().as_bytes(), 0o600)?,
    ];
    for file in staged {
        file.commit()?;
    }

    let signing_id = generated.key.key_id();
    if json {
        print_json(&json!({
            "dir": shown(&args.dir),
            "signing_key": shown(&secret_path),
            "signing_pub": shown(&public_path),
            "content_key": shown(&content_path),
            "signing_key_id": signing_id,
            "content_key_id": content.id(),
            "encrypted": password.is_some(),
        }));
    } else {
        let protection = if password.is_some() {
            "encrypted with the password"
        } else {
            "NOT encrypted: keep it offline, or use --password-file / PROMPTPACK_KEY_PASSWORD"
        };
        outln!(
            "signing key   {} (id {signing_id}, {protection})",
            shown(&secret_path)
        );
        outln!("public key    {}", shown(&public_path));
        outln!(
            "content key   {} (id {})",
            shown(&content_path),
            content.id()
        );
        if password.is_none() && std::env::var_os(PASSWORD_ENV).is_some() {
            outln!("note: {PASSWORD_ENV} is set but empty, so it was ignored");
        }
    }
    Ok(())
}
