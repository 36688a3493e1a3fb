//! `packer keygen`: a signing key pair and a content key in one directory.

use std::io::Write;
use std::path::{Path, PathBuf};

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
    DIR/content.key (secret, mode 0600), all three at once: they are written into a new \
    temporary directory beside DIR, which is renamed to DIR only if nothing is there by \
    then, so DIR holds one whole key set or does not exist. The signing key is a standard \
    minisign key: `minisign -Vm channel.json -p DIR/signing.pub` verifies channel \
    documents.\n\n\
    With a password (--password-file, or the PROMPTPACK_KEY_PASSWORD environment variable) \
    the signing key is encrypted the way `minisign -G` does it."
)]
pub struct KeygenArgs {
    /// Directory to create with the keys. It must not exist (unless --force).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,

    /// File whose first line is the password that encrypts the signing key.
    #[arg(long, value_name = "FILE")]
    password_file: Option<PathBuf>,

    /// Write into an existing directory, overwriting its key files. The old keys are lost
    /// for good.
    #[arg(long)]
    force: bool,
}

pub fn run(args: &KeygenArgs, json: bool) -> Result<()> {
    let secret_path = args.dir.join(SIGNING_KEY_FILE);
    let public_path = args.dir.join(SIGNING_PUB_FILE);
    let content_path = args.dir.join(CONTENT_KEY_FILE);
    // `symlink_metadata`: a dangling link is something there too.
    let dir_exists = args.dir.symlink_metadata().is_ok();
    if dir_exists && !args.force {
        for path in [&secret_path, &public_path, &content_path] {
            if path.exists() {
                bail!(
                    "{} already exists; nothing was written. --force overwrites it (the old key is lost for good)",
                    shown(path)
                );
            }
        }
        bail!(
            "{} already exists; nothing was written. keygen writes a new key directory whole: \
             name one that does not exist yet (--force writes the keys into this one)",
            shown(&args.dir)
        );
    }
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
    let content_file = content.to_file_text();
    let files = [
        (SIGNING_KEY_FILE, generated.secret_file.as_bytes(), 0o600),
        (SIGNING_PUB_FILE, generated.public_file.as_bytes(), 0o644),
        (CONTENT_KEY_FILE, content_file.as_bytes(), 0o600),
    ];
    if dir_exists {
        replace_files(&args.dir, &files)?;
    } else {
        write_new_dir(&args.dir, &files)?;
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

/// Writes the key set into a fresh temporary directory beside `dir`, synced, and renames it
/// to `dir` whole, only if nothing is there: the keys appear together or not at all, and a
/// second keygen to the same place at the same time fails instead of mixing two sets.
fn write_new_dir(dir: &Path, files: &[(&str, &[u8], u32)]) -> Result<()> {
    let parent = fsio::parent_dir(dir);
    std::fs::create_dir_all(&parent)
        .with_context(|| format!("creating directory {}", shown(&parent)))?;
    let staging = tempfile::Builder::new()
        .prefix(".packer-keygen-")
        .tempdir_in(&parent)
        .with_context(|| format!("creating a temporary directory in {}", shown(&parent)))?;
    for (name, bytes, mode) in files {
        let path = staging.path().join(name);
        let writing = || format!("writing {}", shown(&dir.join(name)));
        let mut file = std::fs::File::create_new(&path).with_context(writing)?;
        fsio::set_mode(&path, *mode)?;
        file.write_all(bytes)
            .and_then(|()| file.sync_all())
            .with_context(writing)?;
    }
    // A temporary directory is private (0700); a key directory has always been 0755 (the
    // secret files in it are 0600), so that signing.pub can be read where it is.
    fsio::set_mode(staging.path(), 0o755)?;
    fsio::sync_dir(staging.path());
    fsio::pause_before_placing();
    let staged = staging.keep();
    if let Err(e) = fsio::rename_dir_new(&staged, dir) {
        let _ = std::fs::remove_dir_all(&staged);
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            bail!(
                "{} appeared while the keys were generated; nothing was replaced (another \
                 keygen wrote it: keep the key set packd and your clients trust)",
                shown(dir)
            );
        }
        return Err(e).with_context(|| format!("moving the new keys into {}", shown(dir)));
    }
    fsio::sync_dir(&parent);
    Ok(())
}

/// `--force` into an existing directory: replaces the three files in it (whatever else is
/// there stays). All three are staged before any is moved, so a failure leaves the old set
/// whole; a crash between the renames can leave a mixed set, which loading the keys
/// refuses (signing.pub must be signing.key's public key).
fn replace_files(dir: &Path, files: &[(&str, &[u8], u32)]) -> Result<()> {
    let staged = files
        .iter()
        .map(|(name, bytes, mode)| fsio::stage(&dir.join(name), bytes, *mode))
        .collect::<Result<Vec<_>>>()?;
    fsio::pause_before_placing();
    for file in staged {
        file.commit()?;
    }
    Ok(())
}
