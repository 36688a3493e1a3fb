//! Loading the keys a command needs from a key directory written by `packer keygen`.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use pack_format::channel::CHANNEL_FORMAT;
use pack_format::keys::{CONTENT_KEY_FILE, SIGNING_KEY_FILE, SIGNING_PUB_FILE};
use pack_format::{
    ChannelDocument, ContentKey, ContentKeyRing, FormatError, Limits, SigningKey, TrustedKeys,
};
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
            push(load_content_key(&path)?);
        }
    }
    for path in extra {
        push(load_content_key(path)?);
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

/// The signing key in `DIR/signing.key`, decrypted with the password when it has one, and
/// checked against `DIR/signing.pub` when that is there.
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
    let text = read_key_file(&path)?;
    let key = SigningKey::from_file_text(&path, &text, password.as_deref().map(String::as_str))?;
    let public = dir.join(SIGNING_PUB_FILE);
    if public.exists() {
        check_pair(&key, &path, &public)?;
    }
    Ok(key)
}

/// Refuses a signing.pub that is not the public key of signing.key beside it: what packd
/// and clients trust is signing.pub, so a key that does not match it signs documents they
/// all refuse. Two files of different key sets are what an interrupted key rotation (or a
/// keygen that replaced its files one by one) leaves behind.
fn check_pair(key: &SigningKey, secret: &Path, public: &Path) -> Result<()> {
    let mut trusted = TrustedKeys::new();
    let public_id = trusted.add_text(public, &read_key_file(public)?)?;
    let secret_id = key.key_id();
    let what_now = "the two files are from different key sets (a `packer keygen --force` \
                    or a copy cut short leaves this): put back the pair that belongs \
                    together, the one whose signing.pub packd and your clients trust. \
                    Nothing was signed";
    if public_id != secret_id {
        bail!(
            "{} (key id {public_id}) is not the public key of {} (key id {secret_id}): \
             {what_now}",
            shown(public),
            shown(secret),
        );
    }
    // The key id is only a label: what signing.key signs, signing.pub must verify.
    let now = time::OffsetDateTime::now_utc();
    let probe = ChannelDocument {
        format: CHANNEL_FORMAT,
        channel: "key-check".to_string(),
        pack: "key-check".to_string(),
        sequence: 0,
        issued_at: now,
        expires_at: now + time::Duration::hours(1),
        entries: Vec::new(),
        guard: None,
        restricts: None,
    };
    let signed = probe.sign(key)?;
    let verified = pack_format::channel::verify_ignoring_expiry(
        &signed.document,
        &signed.signature,
        &trusted,
        &Limits::DEFAULT,
    );
    if verified.is_err() {
        bail!(
            "{} has the key id of {} ({secret_id}) but not its public key: {what_now}",
            shown(public),
            shown(secret),
        );
    }
    Ok(())
}

/// Key and password files are a few hundred bytes; nothing past this is read.
const KEY_FILE_MAX: u64 = 8 * 1024;

fn load_content_key(path: &Path) -> Result<ContentKey> {
    let text = read_key_file(path)?;
    Ok(ContentKey::from_file_text(path, &text)?)
}

/// Reads a key file, at most [`KEY_FILE_MAX`] bytes of it: a path to a huge file or an
/// endless device (`/dev/zero`) is refused after that much, never read into memory.
fn read_key_file(path: &Path) -> Result<Zeroizing<String>> {
    let bad = |reason: String| {
        anyhow::Error::new(FormatError::KeyFile {
            path: path.to_path_buf(),
            reason,
        })
    };
    read_capped(path).map_err(|e| match e {
        Capped::Io(e) if e.kind() == std::io::ErrorKind::NotFound => bad("no such file".into()),
        Capped::Io(e) => anyhow::Error::new(e).context(format!("reading key file {}", shown(path))),
        Capped::TooLong => bad(format!(
            "more than {KEY_FILE_MAX} bytes, expected a small key file (nothing more was read)"
        )),
        Capped::NotUtf8 => bad("not UTF-8 text, expected a key file".into()),
    })
}

enum Capped {
    Io(std::io::Error),
    TooLong,
    NotUtf8,
}

/// A file's text, if it is at most [`KEY_FILE_MAX`] bytes. The file is opened and read as
/// it is (a pipe such as `<(pass show key)` works), never more than one byte over the cap.
fn read_capped(path: &Path) -> Result<Zeroizing<String>, Capped> {
    let file = std::fs::File::open(path).map_err(Capped::Io)?;
    let mut bytes = Zeroizing::new(Vec::with_capacity(KEY_FILE_MAX as usize + 1));
    file.take(KEY_FILE_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(Capped::Io)?;
    if bytes.len() as u64 > KEY_FILE_MAX {
        return Err(Capped::TooLong);
    }
    let text = std::str::from_utf8(&bytes).map_err(|_| Capped::NotUtf8)?;
    Ok(Zeroizing::new(text.to_string()))
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
            let text = read_capped(path).map_err(|e| match e {
                Capped::Io(e) => {
                    anyhow::Error::new(e).context(format!("reading password file {}", shown(path)))
                }
                Capped::TooLong => anyhow::anyhow!(
                    "password file {}: more than {KEY_FILE_MAX} bytes, expected the password \
                     on its first line (nothing more was read)",
                    shown(path)
                ),
                Capped::NotUtf8 => anyhow::anyhow!(
                    "password file {}: not UTF-8 text, expected the password on its first line",
                    shown(path)
                ),
            })?;
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
