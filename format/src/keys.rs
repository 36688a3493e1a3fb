//! Keys: content keys (AES-256, shipped inside clients), the publisher's minisign signing
//! key, and the set of signing keys a client trusts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::FormatError;

/// File names inside a key directory written by `packer keygen`.
pub const SIGNING_KEY_FILE: &str = "signing.key";
pub const SIGNING_PUB_FILE: &str = "signing.pub";
pub const CONTENT_KEY_FILE: &str = "content.key";

const CONTENT_KEY_KIND: &str = "promptpack-content-key";

/// An AES-256 content key with its id. Packs wrap their data key for one or more of these.
#[derive(Clone)]
pub struct ContentKey {
    id: String,
    key: Zeroizing<[u8; 32]>,
}

impl std::fmt::Debug for ContentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContentKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ContentKeyFile {
    kind: String,
    id: String,
    key: String,
}

impl ContentKey {
    /// A fresh random key with a random 8-byte hex id.
    pub fn generate() -> Self {
        let mut key = Zeroizing::new([0u8; 32]);
        rand::fill(&mut key[..]);
        let id: [u8; 8] = rand::random();
        ContentKey {
            id: hex::encode(id),
            key,
        }
    }

    pub fn from_parts(id: impl Into<String>, key: [u8; 32]) -> Result<Self, FormatError> {
        let id = id.into();
        validate_key_id(&id)?;
        Ok(ContentKey {
            id,
            key: Zeroizing::new(key),
        })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.key
    }

    /// The JSON text of a `content.key` file.
    pub fn to_file_text(&self) -> Zeroizing<String> {
        let file = ContentKeyFile {
            kind: CONTENT_KEY_KIND.to_string(),
            id: self.id.clone(),
            key: B64.encode(&self.key[..]),
        };
        // Serialising a struct of strings cannot fail.
        Zeroizing::new(serde_json::to_string_pretty(&file).unwrap_or_default() + "\n")
    }

    /// Parses the text of a `content.key` file; `path` only names it in errors.
    pub fn from_file_text(path: &Path, text: &str) -> Result<Self, FormatError> {
        let bad = |reason: String| FormatError::KeyFile {
            path: path.to_path_buf(),
            reason,
        };
        if text.len() > 4096 {
            return Err(bad(format!(
                "{} bytes, expected a small JSON file",
                text.len()
            )));
        }
        let file: ContentKeyFile = serde_json::from_str(text)
            .map_err(|e| bad(format!("expected a content key JSON file: {e}")))?;
        if file.kind != CONTENT_KEY_KIND {
            return Err(bad(format!(
                "expected kind {CONTENT_KEY_KIND:?}, found {:?}",
                file.kind
            )));
        }
        let raw = Zeroizing::new(
            B64.decode(file.key.as_bytes())
                .map_err(|e| bad(format!("key is not base64: {e}")))?,
        );
        let key: [u8; 32] = raw[..]
            .try_into()
            .map_err(|_| bad(format!("expected a 32-byte key, found {} bytes", raw.len())))?;
        ContentKey::from_parts(file.id, key).map_err(|e| bad(e.to_string()))
    }

    pub fn load(path: &Path) -> Result<Self, FormatError> {
        let text = read_small(path, None)?;
        Self::from_file_text(path, &text)
    }

    /// Loads a content key file named in a config file; a relative `entry` resolves against
    /// `base` (see [`resolve_key_path`]).
    pub fn load_entry(base: &Path, entry: &str) -> Result<Self, FormatError> {
        let (path, text) = read_entry(base, entry)?;
        Self::from_file_text(&path, &text)
    }
}

pub(crate) fn validate_key_id(id: &str) -> Result<(), FormatError> {
    if id.is_empty()
        || id.len() > 64
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(FormatError::malformed(
            "content key id",
            format!("expected 1-64 of A-Z a-z 0-9 - _, found {id:?}"),
        ));
    }
    Ok(())
}

/// Where a key file named in a config file lives: a relative `entry` resolves against `base`
/// (the config file's directory, or the agent's data directory), made absolute so that an
/// error names the very file that was tried.
pub fn resolve_key_path(base: &Path, entry: &str) -> PathBuf {
    let joined = base.join(entry);
    std::path::absolute(&joined).unwrap_or(joined)
}

/// Reads a key file named in a config file, saying on a missing file how the name resolved.
fn read_entry(base: &Path, entry: &str) -> Result<(PathBuf, Zeroizing<String>), FormatError> {
    let path = resolve_key_path(base, entry);
    let relative_to = Path::new(entry).is_relative().then_some(base);
    let text = read_small(&path, relative_to)?;
    Ok((path, text))
}

/// Reads a small key file. A missing file says so with the path tried (and, for a name
/// from a config file, what relative names resolve against) rather than surfacing later as
/// a malformed key.
fn read_small(path: &Path, relative_to: Option<&Path>) -> Result<Zeroizing<String>, FormatError> {
    let meta = std::fs::metadata(path).map_err(|e| {
        if e.kind() != std::io::ErrorKind::NotFound {
            return FormatError::io(format!("reading {}", path.display()), e);
        }
        let reason = match relative_to {
            Some(base) => {
                // `Path::parent` of a bare file name is the empty path: the current directory.
                let base = if base.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    base
                };
                let base = std::path::absolute(base).unwrap_or_else(|_| base.to_path_buf());
                format!(
                    "no such file (relative key paths resolve against {})",
                    base.display()
                )
            }
            None => "no such file".to_string(),
        };
        FormatError::KeyFile {
            path: path.to_path_buf(),
            reason,
        }
    })?;
    if meta.len() > 64 * 1024 {
        return Err(FormatError::KeyFile {
            path: path.to_path_buf(),
            reason: format!("{} bytes, expected a small key file", meta.len()),
        });
    }
    std::fs::read_to_string(path)
        .map(Zeroizing::new)
        .map_err(|e| FormatError::io(format!("reading {}", path.display()), e))
}

/// The content keys a reader holds, by id.
#[derive(Debug, Clone, Default)]
pub struct ContentKeyRing {
    keys: Vec<ContentKey>,
}

impl ContentKeyRing {
    pub fn new(keys: impl IntoIterator<Item = ContentKey>) -> Self {
        ContentKeyRing {
            keys: keys.into_iter().collect(),
        }
    }

    pub fn add(&mut self, key: ContentKey) {
        self.keys.retain(|k| k.id != key.id);
        self.keys.push(key);
    }

    pub fn get(&self, id: &str) -> Option<&ContentKey> {
        self.keys.iter().find(|k| k.id == id)
    }

    pub fn ids(&self) -> Vec<&str> {
        self.keys.iter().map(|k| k.id.as_str()).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// The minisign key id as `minisign` prints it: the 8-byte key number, little-endian, as
/// 16 uppercase hex digits.
pub fn key_id_hex(keynum: &[u8]) -> String {
    let mut le = [0u8; 8];
    let n = keynum.len().min(8);
    le[..n].copy_from_slice(&keynum[..n]);
    format!("{:016X}", u64::from_le_bytes(le))
}

/// The publisher's Ed25519 signing key, in minisign's file format.
pub struct SigningKey {
    pub(crate) secret: minisign::SecretKey,
    pub(crate) public: minisign::PublicKey,
}

/// A freshly generated signing key pair as file texts.
pub struct GeneratedSigningKey {
    pub key: SigningKey,
    pub secret_file: Zeroizing<String>,
    pub public_file: String,
}

impl SigningKey {
    /// Generates a key pair. With a password the secret key is encrypted the way `minisign -G`
    /// does it (scrypt); without, it is stored unencrypted like `minisign -G -W`.
    pub fn generate(password: Option<&str>) -> Result<GeneratedSigningKey, FormatError> {
        let minisign::KeyPair { pk, sk } = match password {
            Some(pw) => minisign::KeyPair::generate_encrypted_keypair(Some(pw.to_string())),
            None => minisign::KeyPair::generate_unencrypted_keypair(),
        }
        .map_err(|e| FormatError::Signing(e.to_string()))?;
        let secret_file = Zeroizing::new(
            sk.to_box(Some("promptpack signing key (keep offline)"))
                .map_err(|e| FormatError::Signing(e.to_string()))?
                .into_string(),
        );
        let public_file = pk
            .to_box()
            .map_err(|e| FormatError::Signing(e.to_string()))?
            .into_string();
        // An encrypted key must be decrypted before it can sign.
        let key = SigningKey::from_file_text(Path::new(SIGNING_KEY_FILE), &secret_file, password)?;
        Ok(GeneratedSigningKey {
            key,
            secret_file,
            public_file,
        })
    }

    /// Parses a minisign secret key file. A password-protected key needs `password`.
    pub fn from_file_text(
        path: &Path,
        text: &str,
        password: Option<&str>,
    ) -> Result<Self, FormatError> {
        let bad = |reason: String| FormatError::KeyFile {
            path: path.to_path_buf(),
            reason,
        };
        let boxed = || {
            minisign::SecretKeyBox::from_string(text)
                .map_err(|e| bad(format!("not a minisign secret key: {e}")))
        };
        let encrypted = boxed()?
            .to_bytes()
            .split(|&b| b == b'\n')
            .nth(1)
            .and_then(|line| B64.decode(line.trim_ascii()).ok())
            .is_some_and(|raw| raw.get(2..4) != Some(&[0, 0]));
        let secret = match minisign::SecretKey::from_unencrypted_box(boxed()?) {
            Ok(sk) => sk,
            Err(e) if !encrypted => {
                return Err(bad(format!(
                    "unencrypted key rejected ({e}); keys made by `minisign -G -W` carry no checksum, \
                     so make the key with `packer keygen` or give it a password"
                )));
            }
            Err(_) => {
                let Some(pw) = password else {
                    return Err(bad(
                        "the key is password-protected: give its password (PROMPTPACK_KEY_PASSWORD or --password-file)"
                            .to_string(),
                    ));
                };
                minisign::SecretKey::from_box(boxed()?, Some(pw.to_string()))
                    .map_err(|e| bad(format!("cannot decrypt the key: {e}")))?
            }
        };
        let public =
            minisign::PublicKey::from_secret_key(&secret).map_err(|e| bad(e.to_string()))?;
        Ok(SigningKey { secret, public })
    }

    pub fn load(path: &Path, password: Option<&str>) -> Result<Self, FormatError> {
        let text = read_small(path, None)?;
        Self::from_file_text(path, &text, password)
    }

    pub fn key_id(&self) -> String {
        key_id_hex(self.public.keynum())
    }
}

/// The set of minisign public keys a reader trusts, looked up by key id. Trusting two keys
/// at once is how a signing key is rotated.
#[derive(Clone, Default)]
pub struct TrustedKeys {
    keys: BTreeMap<String, minisign::PublicKey>,
}

impl std::fmt::Debug for TrustedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.keys.keys()).finish()
    }
}

impl TrustedKeys {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a key from a minisign `.pub` file text or a bare base64 public key line.
    pub fn add_text(&mut self, origin: &Path, text: &str) -> Result<String, FormatError> {
        let bad = |reason: String| FormatError::KeyFile {
            path: origin.to_path_buf(),
            reason,
        };
        let trimmed = text.trim();
        let pk = if trimmed.lines().count() == 1 {
            minisign::PublicKey::from_base64(trimmed)
        } else {
            minisign::PublicKeyBox::from_string(trimmed).and_then(|b| b.into_public_key())
        }
        .map_err(|e| bad(format!("not a minisign public key: {e}")))?;
        let id = key_id_hex(pk.keynum());
        self.keys.insert(id.clone(), pk);
        Ok(id)
    }

    pub fn add_file(&mut self, path: &Path) -> Result<String, FormatError> {
        let text = read_small(path, None)?;
        self.add_text(path, &text)
    }

    /// Adds a key named in a config file: an inline minisign public key (the base64 line, or
    /// a whole `.pub` file's text), else a file path that resolves against `base` (see
    /// [`resolve_key_path`]). Deciding by the text's shape, not by whether a file happens to
    /// exist, is what lets a missing file be reported as missing rather than as a bad key.
    pub fn add_entry(&mut self, base: &Path, entry: &str) -> Result<String, FormatError> {
        let trimmed = entry.trim();
        let inline = trimmed.starts_with("untrusted comment:")
            || (trimmed.starts_with("RW")
                && trimmed.len() >= 40
                && trimmed
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')));
        if inline {
            return self.add_text(Path::new("(inline key)"), trimmed);
        }
        let (path, text) = read_entry(base, entry)?;
        self.add_text(&path, &text)
    }

    pub fn add_signing_key(&mut self, key: &SigningKey) {
        self.keys.insert(key.key_id(), key.public.clone());
    }

    pub(crate) fn get(&self, key_id: &str) -> Option<&minisign::PublicKey> {
        self.keys.get(key_id)
    }

    pub fn ids(&self) -> Vec<&str> {
        self.keys.keys().map(String::as_str).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}
