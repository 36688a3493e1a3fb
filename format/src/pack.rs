//! The sealed pack: `MAGIC | u32 LE header length | header JSON | ciphertext | tag`.
//!
//! The ciphertext is AES-256-GCM over the `tar.zst` payload with a fresh random data key and
//! a fresh random 96-bit nonce; the exact header bytes (magic, length and JSON) are the
//! associated data, so no header field can be changed without the pack failing to open.
//! The data key is wrapped (AES-256-GCM again) once per content key, in a key slot named by
//! the content key's id.

use aes_gcm::aead::AeadInOut;
use aes_gcm::{Aes256Gcm, KeyInit};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::keys::validate_key_id;
use crate::payload::Payload;
use crate::{
    ContentKey, ContentKeyRing, FORMAT_VERSION, FormatError, Limits, sha256_hex, validate_name,
};

/// The first eight bytes of every sealed pack.
pub const MAGIC: &[u8; 8] = b"PROMPTPK";
/// Magic plus the header-length field.
pub const PREFIX_LEN: usize = MAGIC.len() + 4;
const TAG_LEN: usize = 16;
const MAX_KEY_SLOTS: usize = 16;
const SLOT_AAD_PREFIX: &[u8] = b"promptpack key slot v1:";

/// One wrapped copy of the data key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeySlot {
    pub key_id: String,
    /// Base64 of the 12-byte nonce used to wrap the data key.
    pub nonce: String,
    /// Base64 of the 32-byte data key encrypted under the content key, plus its 16-byte tag.
    pub wrapped_key: String,
}

/// The plaintext header: everything a server or client may look at before decrypting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackHeader {
    pub format: u32,
    pub name: String,
    pub version: semver::Version,
    /// The runtime variable-contract version the templates were validated against.
    pub schema: u32,
    pub key_slots: Vec<KeySlot>,
    /// Base64 of the 12-byte payload nonce.
    pub nonce: String,
    /// Bytes of the compressed payload (the ciphertext, without its tag).
    pub plaintext_len: u64,
}

/// What to seal.
pub struct SealInput<'a> {
    pub name: &'a str,
    pub version: &'a semver::Version,
    pub schema: u32,
    pub payload: &'a Payload,
    /// Modification time written into every tar header (`SOURCE_DATE_EPOCH`).
    pub mtime: u64,
    /// zstd level; 3 is zstd's own default.
    pub zstd_level: i32,
}

/// A pack that opened: its header, its verified files and the SHA-256 of the sealed bytes.
#[derive(Debug, Clone)]
pub struct OpenedPack {
    pub header: PackHeader,
    pub payload: Payload,
    pub sha256: String,
}

/// The secrets one seal uses: the data key, the payload nonce and one key-slot nonce per
/// content key. [`seal`] draws all of them fresh from the system's random generator.
///
/// Only for test vectors and for checking another implementation byte for byte, through
/// [`seal_with_secrets`]: AES-GCM with a data key and nonce used twice for different
/// payloads gives away both plaintexts and lets anyone forge ciphertexts.
pub struct SealSecrets {
    data_key: Zeroizing<[u8; 32]>,
    nonce: [u8; 12],
    slot_nonces: Vec<[u8; 12]>,
}

impl SealSecrets {
    /// Explicit secrets: `slot_nonces[i]` wraps the data key for the `i`-th content key.
    pub fn new(data_key: [u8; 32], nonce: [u8; 12], slot_nonces: Vec<[u8; 12]>) -> Self {
        SealSecrets {
            data_key: Zeroizing::new(data_key),
            nonce,
            slot_nonces,
        }
    }

    /// Fresh random secrets for `slots` key slots.
    fn random(slots: usize) -> Self {
        let mut data_key = Zeroizing::new([0u8; 32]);
        rand::fill(&mut data_key[..]);
        SealSecrets {
            data_key,
            nonce: rand::random(),
            slot_nonces: (0..slots).map(|_| rand::random()).collect(),
        }
    }
}

/// Seals `input` for every key in `keys` (at least one), with a fresh random data key and
/// fresh random nonces.
pub fn seal(input: &SealInput<'_>, keys: &[&ContentKey]) -> Result<Vec<u8>, FormatError> {
    seal_with_secrets(input, keys, SealSecrets::random(keys.len()))
}

/// [`seal`] with the given secrets instead of random ones: the output is then a function of
/// the inputs alone. For test vectors only — see [`SealSecrets`]; never seal two payloads
/// with the same secrets.
///
/// The payload is compressed straight into the output, behind room for the longest header
/// it could need; the header, whose length depends on the payload's size, is written in
/// front of it at the end.
pub fn seal_with_secrets(
    input: &SealInput<'_>,
    keys: &[&ContentKey],
    secrets: SealSecrets,
) -> Result<Vec<u8>, FormatError> {
    let NewHeader {
        mut header,
        data_key,
        nonce,
    } = new_header(input, keys, secrets)?;
    header.plaintext_len = u64::MAX;
    let room = PREFIX_LEN + header_json(&header)?.len();
    let mut out = input
        .payload
        .append_tar_zst(vec![0; room], input.mtime, input.zstd_level)?;
    header.plaintext_len = (out.len() - room) as u64;
    let json = header_json(&header)?;
    let start = room - PREFIX_LEN - json.len();
    write_prefix(&mut out[start..room], &json);
    let (aad, payload) = out[start..].split_at_mut(room - start);
    let tag = seal_detached(&data_key, nonce, aad, payload)
        .map_err(|_| FormatError::Signing("encrypting the payload failed".to_string()))?;
    out.extend_from_slice(&tag);
    out.drain(..start);
    Ok(out)
}

/// Seals an already-built `tar.zst` payload.
pub fn seal_compressed(
    input: &SealInput<'_>,
    mut compressed: Vec<u8>,
    keys: &[&ContentKey],
) -> Result<Vec<u8>, FormatError> {
    let NewHeader {
        mut header,
        data_key,
        nonce,
    } = new_header(input, keys, SealSecrets::random(keys.len()))?;
    header.plaintext_len = compressed.len() as u64;
    let json = header_json(&header)?;
    let mut out = vec![0; PREFIX_LEN + json.len()];
    write_prefix(&mut out, &json);
    out.reserve(compressed.len() + TAG_LEN);
    let tag = seal_detached(&data_key, nonce, &out, &mut compressed)
        .map_err(|_| FormatError::Signing("encrypting the payload failed".to_string()))?;
    out.extend_from_slice(&compressed);
    out.extend_from_slice(&tag);
    Ok(out)
}

/// A header with its fresh data key and payload nonce, before the payload's length is known.
struct NewHeader {
    header: PackHeader,
    data_key: Zeroizing<[u8; 32]>,
    nonce: [u8; 12],
}

/// A header for `input` with the data key of `secrets` wrapped for every key in `keys` and
/// its payload nonce; `plaintext_len` is left for the caller.
fn new_header(
    input: &SealInput<'_>,
    keys: &[&ContentKey],
    secrets: SealSecrets,
) -> Result<NewHeader, FormatError> {
    validate_name("pack", input.name)?;
    if keys.is_empty() || keys.len() > MAX_KEY_SLOTS {
        return Err(FormatError::malformed(
            "key slots",
            format!(
                "expected 1-{MAX_KEY_SLOTS} content keys, found {}",
                keys.len()
            ),
        ));
    }
    if let Some(twice) = keys
        .iter()
        .enumerate()
        .find(|(i, key)| keys[..*i].iter().any(|k| k.id() == key.id()))
    {
        return Err(FormatError::malformed(
            "key slots",
            format!(
                "expected distinct content key ids, found {:?} twice",
                twice.1.id()
            ),
        ));
    }
    if secrets.slot_nonces.len() != keys.len() {
        return Err(FormatError::malformed(
            "seal secrets",
            format!(
                "expected one key-slot nonce per content key ({}), found {}",
                keys.len(),
                secrets.slot_nonces.len()
            ),
        ));
    }
    let SealSecrets {
        data_key,
        nonce,
        slot_nonces,
    } = secrets;
    let mut key_slots = Vec::with_capacity(keys.len());
    for (key, slot_nonce) in keys.iter().zip(slot_nonces) {
        let mut wrapped = data_key.to_vec();
        let tag = seal_detached(key.bytes(), slot_nonce, &slot_aad(key.id()), &mut wrapped)
            .map_err(|_| FormatError::Signing("wrapping the data key failed".to_string()))?;
        wrapped.extend_from_slice(&tag);
        key_slots.push(KeySlot {
            key_id: key.id().to_string(),
            nonce: B64.encode(slot_nonce),
            wrapped_key: B64.encode(&wrapped),
        });
    }
    let header = PackHeader {
        format: FORMAT_VERSION,
        name: input.name.to_string(),
        version: input.version.clone(),
        schema: input.schema,
        key_slots,
        nonce: B64.encode(nonce),
        plaintext_len: 0,
    };
    Ok(NewHeader {
        header,
        data_key,
        nonce,
    })
}

fn header_json(header: &PackHeader) -> Result<Vec<u8>, FormatError> {
    serde_json::to_vec(header).map_err(|e| FormatError::malformed("pack header", e))
}

/// Writes magic, length and header JSON into `out`, which is exactly that long.
fn write_prefix(out: &mut [u8], json: &[u8]) {
    out[..MAGIC.len()].copy_from_slice(MAGIC);
    out[MAGIC.len()..PREFIX_LEN].copy_from_slice(&(json.len() as u32).to_le_bytes());
    out[PREFIX_LEN..].copy_from_slice(json);
}

fn slot_aad(key_id: &str) -> Vec<u8> {
    [SLOT_AAD_PREFIX, key_id.as_bytes()].concat()
}

/// AES-256-GCM encryption of `in_out` in place; returns the tag.
fn seal_detached(
    key: &[u8; 32],
    nonce: [u8; 12],
    aad: &[u8],
    in_out: &mut [u8],
) -> Result<[u8; TAG_LEN], aes_gcm::Error> {
    let tag =
        Aes256Gcm::new(key.into()).encrypt_inout_detached(&nonce.into(), aad, in_out.into())?;
    Ok(tag.into())
}

/// AES-256-GCM decryption of `in_out` in place, checking `tag`.
fn open_detached(
    key: &[u8; 32],
    nonce: [u8; 12],
    aad: &[u8],
    tag: &[u8],
    in_out: &mut [u8],
) -> Result<(), aes_gcm::Error> {
    let tag: [u8; TAG_LEN] = tag.try_into().map_err(|_| aes_gcm::Error)?;
    Aes256Gcm::new(key.into()).decrypt_inout_detached(
        &nonce.into(),
        aad,
        in_out.into(),
        &tag.into(),
    )
}

/// Parses and checks the header of a sealed pack without decrypting anything. Returns the
/// header and the header's length in bytes (where the ciphertext starts).
pub fn read_header(bytes: &[u8], limits: &Limits) -> Result<(PackHeader, usize), FormatError> {
    if bytes.len() as u64 > limits.max_sealed_len {
        return Err(FormatError::TooLarge {
            what: "sealed pack",
            found: bytes.len() as u64,
            limit: limits.max_sealed_len,
        });
    }
    if bytes.len() < PREFIX_LEN {
        return Err(FormatError::Truncated {
            what: "sealed pack header",
            expected: PREFIX_LEN as u64,
            found: bytes.len() as u64,
        });
    }
    if &bytes[..MAGIC.len()] != MAGIC {
        return Err(FormatError::BadMagic {
            expected: String::from_utf8_lossy(MAGIC).into_owned(),
            found: String::from_utf8_lossy(&bytes[..MAGIC.len()]).into_owned(),
        });
    }
    let mut len_bytes = [0u8; 4];
    len_bytes.copy_from_slice(&bytes[MAGIC.len()..PREFIX_LEN]);
    let json_len = u32::from_le_bytes(len_bytes) as usize;
    if json_len > limits.max_header_len {
        return Err(FormatError::TooLarge {
            what: "sealed pack header",
            found: json_len as u64,
            limit: limits.max_header_len as u64,
        });
    }
    let header_len = PREFIX_LEN + json_len;
    if bytes.len() < header_len {
        return Err(FormatError::Truncated {
            what: "sealed pack header",
            expected: header_len as u64,
            found: bytes.len() as u64,
        });
    }
    let header: PackHeader = serde_json::from_slice(&bytes[PREFIX_LEN..header_len])
        .map_err(|e| FormatError::malformed("pack header", e))?;
    if header.format != FORMAT_VERSION {
        return Err(FormatError::UnsupportedVersion {
            what: "sealed pack",
            expected: FORMAT_VERSION,
            found: header.format,
        });
    }
    validate_name("pack", &header.name)?;
    if header.key_slots.is_empty() || header.key_slots.len() > MAX_KEY_SLOTS {
        return Err(FormatError::malformed(
            "pack header",
            format!(
                "expected 1-{MAX_KEY_SLOTS} key slots, found {}",
                header.key_slots.len()
            ),
        ));
    }
    decode_fixed::<12>("payload nonce", &header.nonce)?;
    for (i, slot) in header.key_slots.iter().enumerate() {
        // The id is part of the slot's associated data and names the key that opens it:
        // the same syntax as a content key's id, and one slot per id, so which slot a
        // reader tries is never a matter of order.
        validate_key_id(&slot.key_id)
            .map_err(|e| FormatError::malformed("pack header", format!("key slot {i}: {e}")))?;
        if header.key_slots[..i]
            .iter()
            .any(|earlier| earlier.key_id == slot.key_id)
        {
            return Err(FormatError::malformed(
                "pack header",
                format!(
                    "expected one key slot per key id, found {:?} twice",
                    slot.key_id
                ),
            ));
        }
        decode_fixed::<12>("key slot nonce", &slot.nonce)?;
        decode_fixed::<48>("wrapped key", &slot.wrapped_key)?;
    }
    if header.plaintext_len > limits.max_sealed_len {
        return Err(FormatError::TooLarge {
            what: "payload claimed by the header",
            found: header.plaintext_len,
            limit: limits.max_sealed_len,
        });
    }
    let expected = header_len as u64 + header.plaintext_len + TAG_LEN as u64;
    if bytes.len() as u64 != expected {
        return Err(if (bytes.len() as u64) < expected {
            FormatError::Truncated {
                what: "sealed pack",
                expected,
                found: bytes.len() as u64,
            }
        } else {
            FormatError::SizeMismatch {
                what: "sealed pack".to_string(),
                expected,
                found: bytes.len() as u64,
            }
        });
    }
    Ok((header, header_len))
}

fn decode_fixed<const N: usize>(what: &'static str, text: &str) -> Result<[u8; N], FormatError> {
    if text.len() > 4 * N {
        return Err(FormatError::malformed(
            what,
            format!("expected {N} bytes of base64"),
        ));
    }
    let raw = B64
        .decode(text.as_bytes())
        .map_err(|e| FormatError::malformed(what, e))?;
    raw.as_slice().try_into().map_err(|_| {
        FormatError::malformed(what, format!("expected {N} bytes, found {}", raw.len()))
    })
}

/// Checks the header, unwraps the data key with one of `keys` and decrypts: returns the
/// header and the compressed payload (a standard `tar.zst`).
pub fn decrypt(
    bytes: &[u8],
    keys: &ContentKeyRing,
    limits: &Limits,
) -> Result<(PackHeader, Vec<u8>), FormatError> {
    let (header, header_len) = read_header(bytes, limits)?;
    let Some((slot, key)) = header
        .key_slots
        .iter()
        .find_map(|slot| keys.get(&slot.key_id).map(|key| (slot, key)))
    else {
        return Err(FormatError::UnknownContentKey {
            available: header
                .key_slots
                .iter()
                .map(|s| s.key_id.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            held: keys.ids().join(", "),
        });
    };
    let slot_nonce = decode_fixed::<12>("key slot nonce", &slot.nonce)?;
    let wrapped = decode_fixed::<48>("wrapped key", &slot.wrapped_key)?;
    let mut data_key = Zeroizing::new([0u8; 32]);
    data_key.copy_from_slice(&wrapped[..32]);
    open_detached(
        key.bytes(),
        slot_nonce,
        &slot_aad(&slot.key_id),
        &wrapped[32..],
        &mut data_key[..],
    )
    .map_err(|_| FormatError::WrongContentKey {
        key_id: slot.key_id.clone(),
    })?;
    let nonce = decode_fixed::<12>("payload nonce", &header.nonce)?;
    let body = &bytes[header_len..];
    let (ciphertext, tag) = body.split_at(body.len() - TAG_LEN);
    let mut plain = ciphertext.to_vec();
    open_detached(&data_key, nonce, &bytes[..header_len], tag, &mut plain)
        .map_err(|_| FormatError::Tampered)?;
    Ok((header, plain))
}

/// Opens a sealed pack: header, key, authenticated decryption, bounded decompression,
/// safe untar and a check of every file against the index.
pub fn open(
    bytes: &[u8],
    keys: &ContentKeyRing,
    limits: &Limits,
) -> Result<OpenedPack, FormatError> {
    if bytes.len() < PARALLEL_HASH_MIN_LEN {
        let (header, compressed) = decrypt(bytes, keys, limits)?;
        let payload = Payload::from_tar_zst(&compressed, limits)?;
        return Ok(OpenedPack {
            header,
            payload,
            sha256: sha256_hex(bytes),
        });
    }
    // A large pack is hashed on a second thread while it is decrypted and unpacked, once
    // its header shows it is worth the thread.
    read_header(bytes, limits)?;
    std::thread::scope(|scope| {
        let hashing = scope.spawn(|| sha256_hex(bytes));
        let (header, compressed) = decrypt(bytes, keys, limits)?;
        let payload = Payload::from_tar_zst(&compressed, limits)?;
        let sha256 = hashing
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        Ok(OpenedPack {
            header,
            payload,
            sha256,
        })
    })
}

/// Packs from this size up are hashed on a second thread in [`open`].
const PARALLEL_HASH_MIN_LEN: usize = 1024 * 1024;
