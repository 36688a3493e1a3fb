//! `packer keygen`: a signing key pair and a content key in one directory; with `--guard`,
//! the guard key pair a channel delegates stopping its rollouts to.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use pack_format::keys::{CONTENT_KEY_FILE, SIGNING_KEY_FILE, SIGNING_PUB_FILE};
use pack_format::{ContentKey, SigningKey};
use serde_json::json;

use crate::fsio::{self, Placed, spinner};
use crate::guard::{GUARD_KEY_FILE, GUARD_PUB_FILE};
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
    the signing key is encrypted the way `minisign -G` does it.\n\n\
    --guard writes a guard key pair instead: DIR/guard.key (secret, mode 0600) and \
    DIR/guard.pub. `packer release CHANNEL --guard-key DIR/guard.pub` names it in a channel, \
    which delegates freezing and rolling back its rollouts to it (`packer guard`), and \
    nothing else. DIR may be the existing key directory: the two files are added beside the \
    others, which are left as they are (never replaced, even with --force); give the guard \
    its own directory to keep the two keys apart on disk. The guard key's password, if any, \
    comes from --password-file or PROMPTPACK_KEY_PASSWORD as well."
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

    /// Write a guard key pair (guard.key, guard.pub) into DIR, touching no other file.
    #[arg(long)]
    guard: bool,
}

pub fn run(args: &KeygenArgs, json: bool) -> Result<()> {
    if args.guard {
        return guard(args, json);
    }
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

/// `--guard`: the guard key pair, in a new directory or added to an existing one.
fn guard(args: &KeygenArgs, json: bool) -> Result<()> {
    let secret_path = args.dir.join(GUARD_KEY_FILE);
    let public_path = args.dir.join(GUARD_PUB_FILE);
    let dir_exists = args.dir.symlink_metadata().is_ok();
    if dir_exists && !args.dir.is_dir() {
        bail!(
            "{} exists and is not a directory; nothing was written",
            shown(&args.dir)
        );
    }
    if dir_exists && !args.force {
        for path in [&secret_path, &public_path] {
            if path.symlink_metadata().is_ok() {
                bail!(
                    "{} already exists; nothing was written. --force overwrites the guard key \
                     pair (the old guard key is lost for good: channels naming it need a release \
                     with --guard-key naming the new one)",
                    shown(path)
                );
            }
        }
    }
    let password = password(args.password_file.as_deref())?;
    let progress = password
        .as_ref()
        .map(|_| spinner("encrypting the guard key"));
    let generated = SigningKey::generate(password.as_deref().map(String::as_str))?;
    if let Some(progress) = progress {
        progress.finish_and_clear();
    }
    // The untrusted comment is only a label, but it should not call this key the offline one.
    let secret_file = zeroize::Zeroizing::new(generated.secret_file.replacen(
        "promptpack signing key (keep offline)",
        "promptpack guard key (may only freeze or roll back)",
        1,
    ));
    let files = [
        (GUARD_KEY_FILE, secret_file.as_bytes(), 0o600),
        (GUARD_PUB_FILE, generated.public_file.as_bytes(), 0o644),
    ];
    match (dir_exists, args.force) {
        (false, _) => write_new_dir(&args.dir, &files)?,
        (true, true) => replace_files(&args.dir, &files)?,
        (true, false) => add_files(&args.dir, &files)?,
    }
    let id = generated.key.key_id();
    if json {
        print_json(&json!({
            "dir": shown(&args.dir),
            "guard_key": shown(&secret_path),
            "guard_pub": shown(&public_path),
            "guard_key_id": id,
            "encrypted": password.is_some(),
        }));
    } else {
        let protection = if password.is_some() {
            "encrypted with the password"
        } else {
            "not encrypted"
        };
        outln!(
            "guard key     {} (id {id}, {protection})",
            shown(&secret_path)
        );
        outln!("public key    {}", shown(&public_path));
        outln!(
            "next          packer release CHANNEL --guard-key {} names it; whoever holds {} \
             can then freeze or roll back that channel's rollouts (`packer guard`), nothing else",
            shown(&public_path),
            shown(&secret_path)
        );
    }
    Ok(())
}

/// Adds files to an existing directory, each only where nothing is (a concurrent keygen
/// never has its files replaced). The secret goes first: a crash between the two leaves a
/// secret without its public key, which no release can name, never the reverse.
fn add_files(dir: &Path, files: &[(&str, &[u8], u32)]) -> Result<()> {
    let staged = files
        .iter()
        .map(|(name, bytes, mode)| fsio::stage(&dir.join(name), bytes, *mode))
        .collect::<Result<Vec<_>>>()?;
    fsio::pause_before_placing();
    let mut placed: Vec<std::path::PathBuf> = Vec::new();
    for (file, (name, _, _)) in staged.into_iter().zip(files) {
        let path = dir.join(name);
        match file.commit_new()? {
            Placed::Yes => placed.push(path),
            Placed::Taken => {
                // Only files this run put there a moment ago.
                for path in &placed {
                    let _ = std::fs::remove_file(path);
                }
                bail!(
                    "{} appeared while the keys were generated; nothing of this run was kept \
                     (another keygen wrote it)",
                    shown(&path)
                );
            }
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
