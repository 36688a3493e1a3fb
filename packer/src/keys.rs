//! Loading the keys a command needs from a key directory written by `packer keygen`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use pack_format::keys::{CONTENT_KEY_FILE, SIGNING_KEY_FILE};
use pack_format::{ContentKey, ContentKeyRing, SigningKey};
use zeroize::Zeroizing;

use crate::shown;

/// Environment variable holding the signing key's password.
pub const PASSWORD_ENV: &str = "PROMPTPACK_KEY_PASSWORD";

/// The content keys: `DIR/content.key` (when `dir` is given and the file exists) plus every
/// extra file. At least one is required.
pub fn content_keys(dir: Option<&Path>, extra: &[PathBuf]) -> Result<Vec<ContentKey>> {
    let mut keys: Vec<ContentKey> = Vec::new();
    let mut push = |key: ContentKey| {
        // The same key given twice would only make a second, identical key slot.
        if !keys.iter().any(|k| k.id() == key.id()) {
            keys.push(key);
        }
    };
    if let Some(dir) = dir {
        existing_dir(dir)?;
        let path = dir.join(CONTENT_KEY_FILE);
        if path.exists() {
            push(ContentKey::load(&path)?);
        }
    }
    for path in extra {
        push(ContentKey::load(path)?);
    }
    if keys.is_empty() {
        match dir {
            Some(dir) => bail!(
                "no content key: {} does not exist and no --content-key was given; point --keys \
                 at the key directory that holds the content key clients have, or give \
                 --content-key FILE",
                shown(&dir.join(CONTENT_KEY_FILE)),
            ),
            None => bail!("no content key: give --keys DIR or --content-key FILE"),
        }
    }
    Ok(keys)
}

pub fn content_key_ring(dir: Option<&Path>, extra: &[PathBuf]) -> Result<ContentKeyRing> {
    Ok(ContentKeyRing::new(content_keys(dir, extra)?))
}

/// The signing key in `DIR/signing.key`, decrypted with the password when it has one.
pub fn signing_key(dir: &Path, password_file: Option<&Path>) -> Result<SigningKey> {
    existing_dir(dir)?;
    let path = dir.join(SIGNING_KEY_FILE);
    if !path.exists() {
        bail!(
            "no signing key: {} does not exist; point --keys at the key directory whose \
             signing.pub packd and clients trust",
            shown(&path),
        );
    }
    let password = password(password_file)?;
    Ok(SigningKey::load(
        &path,
        password.as_deref().map(String::as_str),
    )?)
}

/// Refuses a key directory that is not there. A mistyped `--keys` must not lead to
/// `packer keygen`: a second key set signs and seals for keys no packd and no client
/// trusts, so everything made with it is refused where it matters.
fn existing_dir(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if dir.exists() {
        bail!(
            "--keys {}: not a directory; point --keys at the directory `packer keygen` wrote \
             (signing.key, signing.pub, content.key)",
            shown(dir)
        );
    }
    bail!(
        "--keys {}: no such directory. Point --keys at your existing key directory, the one \
         whose signing.pub packd and your clients trust and whose content.key they hold \
         (signing.key, signing.pub, content.key). Keys made anew are trusted by no packd and no \
         client: run `packer keygen` only to make this publisher's very first key set",
        shown(dir)
    );
}

/// The signing-key password: from `--password-file` (its first line) or else from
/// `PROMPTPACK_KEY_PASSWORD`. Never from the command line, where other users could see it.
pub fn password(file: Option<&Path>) -> Result<Option<Zeroizing<String>>> {
    let password = match file {
        Some(path) => {
            let text = Zeroizing::new(
                std::fs::read_to_string(path)
                    .with_context(|| format!("reading password file {}", shown(path)))?,
            );
            let line = text.lines().next().unwrap_or_default();
            if line.is_empty() {
                bail!(
                    "password file {} is empty: put the password on its first line",
                    shown(path)
                );
            }
            Zeroizing::new(line.to_string())
        }
        None => match std::env::var(PASSWORD_ENV) {
            Ok(value) if !value.is_empty() => Zeroizing::new(value),
            _ => return Ok(None),
        },
    };
    Ok(Some(password))
}
