//! The sealed pack: `MAGIC | u32 LE header length | header JSON | ciphertext`.
//!
//! Format 2 (what [`seal`] writes): the `tar.zst` payload is cut into segments, one zstd
//! frame each, and every segment is its own AES-256-GCM encryption under the pack's fresh
//! random data key, with a STREAM-style nonce (a random 7-byte prefix ‖ the segment's
//! number ‖ a last-segment flag) and the exact header bytes as associated data; each
//! segment's 16-byte tag follows it. The header lists every segment's length and the
//! length of `tar` it decodes to, so a reader checks every size before it allocates, and
//! decrypts and decompresses the segments on every core at once.
//!
//! Format 1 (still read): one AES-256-GCM encryption of the whole payload, one tag at the
//! end.
//!
//! The data key is wrapped (AES-256-GCM again) once per content key, in a key slot named by
//! the content key's id.
//!
//! Opening a format-2 pack decrypts each segment on the thread that decodes it
//! (`SealedSegments`, a frame source of `decode`), so the decryption lives here, not in
//! the payload's `tar` reader.

use std::fs::File;
use std::os::unix::fs::FileExt;

use aes_gcm::aead::AeadInOut;
use aes_gcm::aead::inout::InOutBuf;
use aes_gcm::{Aes256Gcm, KeyInit};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use crate::decode::{FrameSource, decode_exact, frames_within};
use crate::keys::validate_key_id;
pub use crate::layout::Segment;
use crate::layout::{Layout, PlacedFrames, TAG_LEN};
use crate::payload::Payload;
use crate::{
    ContentKey, ContentKeyRing, FORMAT_VERSION, FormatError, Limits, sha256_hex, validate_name,
};

/// The first eight bytes of every sealed pack.
pub const MAGIC: &[u8; 8] = b"PROMPTPK";
/// Magic plus the header-length field.
pub const PREFIX_LEN: usize = MAGIC.len() + 4;
/// The first container version, still read: one encryption of the whole payload.
pub const FORMAT_V1: u32 = 1;
const MAX_KEY_SLOTS: usize = 16;
/// Segments in one format-2 pack: 4,096 frames of 8 MiB is 32 GiB of `tar`, far past the
/// size limits, so only a hostile header comes near it.
pub const MAX_SEGMENTS: usize = 4096;
/// Bytes of the random prefix of every format-2 segment nonce.
pub const NONCE_PREFIX_LEN: usize = 7;
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
    /// Format 2: base64 of the 7-byte prefix of every segment's nonce. Format 1: base64 of
    /// the 12-byte payload nonce.
    pub nonce: String,
    /// Bytes of the compressed payload (all the ciphertext, without the tags).
    pub plaintext_len: u64,
    /// Format 2: the segments in order (at least one). Format 1: none, and absent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub segments: Vec<Segment>,
}

impl PackHeader {
    /// Bytes of `tar` the payload decodes to, when the header says (format 2).
    pub fn tar_len(&self) -> Option<u64> {
        (self.format != FORMAT_V1).then(|| self.segments.iter().map(|s| s.tar_len).sum())
    }
}

/// What to seal.
pub struct SealInput<'a> {
    /// The container format to write: [`FORMAT_VERSION`], the only one written; any other
    /// is refused.
    pub format: u32,
    pub name: &'a str,
    pub version: &'a semver::Version,
    pub schema: u32,
    pub payload: &'a Payload,
    /// Modification time written into every tar header (`SOURCE_DATE_EPOCH`).
    pub mtime: u64,
    /// zstd level; 3 is zstd's own default.
    pub zstd_level: i32,
}

/// Refuses to seal any format but [`FORMAT_VERSION`].
pub(crate) fn check_seal_format(format: u32) -> Result<(), FormatError> {
    if format == FORMAT_VERSION {
        return Ok(());
    }
    Err(FormatError::UnsupportedVersion {
        what: "pack format to seal",
        expected: FORMAT_VERSION,
        found: format,
    })
}

/// A pack that opened: its header, its verified files and the SHA-256 of the sealed bytes.
#[derive(Debug, Clone)]
pub struct OpenedPack {
    pub header: PackHeader,
    pub payload: Payload,
    pub sha256: String,
}

/// The secrets one seal uses: the data key, the nonce prefix of the segments and one
/// key-slot nonce per content key. [`seal`] draws all of them fresh from the system's
/// random generator.
///
/// Only for test vectors and for checking another implementation byte for byte, through
/// [`seal_with_secrets`]: AES-GCM with a data key and nonce used twice for different
/// payloads gives away both plaintexts and lets anyone forge ciphertexts.
pub struct SealSecrets {
    data_key: Zeroizing<[u8; 32]>,
    nonce_prefix: [u8; NONCE_PREFIX_LEN],
    slot_nonces: Vec<[u8; 12]>,
}

impl SealSecrets {
    /// Explicit secrets: `slot_nonces[i]` wraps the data key for the `i`-th content key.
    pub fn new(
        data_key: [u8; 32],
        nonce_prefix: [u8; NONCE_PREFIX_LEN],
        slot_nonces: Vec<[u8; 12]>,
    ) -> Self {
        SealSecrets {
            data_key: Zeroizing::new(data_key),
            nonce_prefix,
            slot_nonces,
        }
    }

    /// Fresh random secrets for `slots` key slots.
    pub(crate) fn random(slots: usize) -> Self {
        let mut data_key = Zeroizing::new([0u8; 32]);
        rand::fill(&mut data_key[..]);
        SealSecrets {
            data_key,
            nonce_prefix: rand::random(),
            slot_nonces: (0..slots).map(|_| rand::random()).collect(),
        }
    }
}

/// The header fields of a pack, whatever its payload comes from.
pub(crate) struct PackMeta<'a> {
    /// The container format the header declares ([`FORMAT_VERSION`]).
    pub format: u32,
    pub name: &'a str,
    pub version: &'a semver::Version,
    pub schema: u32,
}

/// Seals `input` for every key in `keys` (at least one), with a fresh random data key and
/// fresh random nonces.
pub fn seal(input: &SealInput<'_>, keys: &[&ContentKey]) -> Result<Vec<u8>, FormatError> {
    seal_with_secrets(input, keys, SealSecrets::random(keys.len()))
}

/// [`seal`] with the given secrets instead of random ones: the output is then a function of
/// the inputs alone. For test vectors only — see [`SealSecrets`]; never seal two payloads
/// with the same secrets.
pub fn seal_with_secrets(
    input: &SealInput<'_>,
    keys: &[&ContentKey],
    secrets: SealSecrets,
) -> Result<Vec<u8>, FormatError> {
    let meta = PackMeta {
        format: input.format,
        name: input.name,
        version: input.version,
        schema: input.schema,
    };
    // Check the names and keys before compressing anything.
    check_seal(&meta, keys, &secrets)?;
    let layout = Layout {
        room: room_for(keys.len()) + 64 * 1024 + 200 * input.payload.len(),
        tags: true,
    };
    check_seal_format(input.format)?;
    let framed = input
        .payload
        .framed(input.mtime, input.zstd_level, layout)?;
    seal_frames(&meta, keys, secrets, framed.placed, &framed.segments).map(SealedPack::into_vec)
}

/// Room to leave in front of the payload for the header, before its size is known: the
/// fixed fields, the key slots and the segment list of a payload of a few hundred MB. A
/// longer header is moved in at the end instead (one copy of the payload).
pub(crate) fn room_for(key_slots: usize) -> usize {
    PREFIX_LEN + 512 + 160 * key_slots + 40 * 64
}

/// Seals an already-built compressed payload (any bytes, valid zstd or not), for tests and
/// fuzzing: one segment per zstd frame when every frame declares its content size, else one
/// segment holding all of it that claims the sizes the frames that do declare one add up to.
pub fn seal_compressed(
    input: &SealInput<'_>,
    compressed: Vec<u8>,
    keys: &[&ContentKey],
) -> Result<Vec<u8>, FormatError> {
    let mut segments = Vec::new();
    let mut rest = compressed.as_slice();
    let mut declared = 0u64;
    let mut whole = true;
    while !rest.is_empty() {
        let measured = zstd::zstd_safe::find_frame_compressed_size(rest)
            .ok()
            .filter(|len| *len > 0 && *len <= rest.len())
            .and_then(|len| {
                let size = zstd::zstd_safe::get_frame_content_size(&rest[..len]).ok()??;
                Some((len, size))
            });
        let Some((len, size)) = measured else {
            whole = false;
            break;
        };
        declared = declared.saturating_add(size);
        segments.push((len, size));
        rest = &rest[len..];
    }
    let segments: Vec<Segment> = if whole && !segments.is_empty() {
        segments
            .into_iter()
            .map(|(len, tar_len)| Segment {
                len: len as u64,
                tar_len,
            })
            .collect()
    } else {
        vec![Segment {
            len: compressed.len() as u64,
            tar_len: declared,
        }]
    };
    seal_segments(
        input,
        compressed,
        &segments,
        keys,
        SealSecrets::random(keys.len()),
    )
}

/// Seals `compressed` as the given segments (their lengths must add up to its length), for
/// tests, test vectors and fuzzing: the segments' `tar_len`s are taken as given, true or
/// not. See [`SealSecrets`] about the secrets.
pub fn seal_segments(
    input: &SealInput<'_>,
    compressed: Vec<u8>,
    segments: &[Segment],
    keys: &[&ContentKey],
    secrets: SealSecrets,
) -> Result<Vec<u8>, FormatError> {
    let total: u64 = segments.iter().map(|s| s.len).sum();
    if total != compressed.len() as u64 || segments.iter().any(|s| s.len == 0) {
        return Err(FormatError::malformed(
            "segments",
            format!(
                "expected non-empty segments adding up to the {} bytes given, found {total}",
                compressed.len()
            ),
        ));
    }
    check_seal_format(input.format)?;
    let meta = PackMeta {
        format: input.format,
        name: input.name,
        version: input.version,
        schema: input.schema,
    };
    check_seal(&meta, keys, &secrets)?;
    // The layout `TarFrames` produces: room for the header, then each segment and its tag.
    let room = room_for(keys.len());
    let mut out = vec![0; room];
    let mut rest = compressed.as_slice();
    for segment in segments {
        let (this, next) = rest.split_at(segment.len as usize);
        out.extend_from_slice(this);
        out.extend_from_slice(&[0; TAG_LEN]);
        rest = next;
    }
    let placed = PlacedFrames { out, room };
    seal_frames(&meta, keys, secrets, placed, segments).map(SealedPack::into_vec)
}

/// Refuses what [`seal`] would refuse, before any work: a bad name, no key or too many,
/// a key id twice, secrets that do not fit the keys.
pub(crate) fn check_seal(
    meta: &PackMeta<'_>,
    keys: &[&ContentKey],
    secrets: &SealSecrets,
) -> Result<(), FormatError> {
    validate_name("pack", meta.name)?;
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
    Ok(())
}

/// A sealed pack in the buffer it was built in, which has some unused bytes in front of it
/// (the room left for a header of unknown length): dereferences to the pack's bytes, so that
/// a large pack is not moved once more to drop them.
#[derive(Debug, Clone)]
pub struct SealedPack {
    buffer: Vec<u8>,
    start: usize,
}

impl SealedPack {
    /// The pack's bytes as a vector of their own (one move of them).
    pub fn into_vec(self) -> Vec<u8> {
        let SealedPack { mut buffer, start } = self;
        buffer.drain(..start);
        buffer
    }
}

impl std::ops::Deref for SealedPack {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.buffer[self.start..]
    }
}

impl AsRef<[u8]> for SealedPack {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

/// Writes the header in front of the placed frames and encrypts every segment in place,
/// on every core: the sealed pack.
pub(crate) fn seal_frames(
    meta: &PackMeta<'_>,
    keys: &[&ContentKey],
    secrets: SealSecrets,
    placed: PlacedFrames,
    segments: &[Segment],
) -> Result<SealedPack, FormatError> {
    check_seal(meta, keys, &secrets)?;
    if segments.is_empty() || segments.len() > MAX_SEGMENTS {
        return Err(FormatError::malformed(
            "segments",
            format!(
                "expected 1-{MAX_SEGMENTS} segments, found {}",
                segments.len()
            ),
        ));
    }
    let SealSecrets {
        data_key,
        nonce_prefix,
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
        format: meta.format,
        name: meta.name.to_string(),
        version: meta.version.clone(),
        schema: meta.schema,
        key_slots,
        nonce: B64.encode(nonce_prefix),
        plaintext_len: segments.iter().map(|s| s.len).sum(),
        segments: segments.to_vec(),
    };
    let json = serde_json::to_vec(&header).map_err(|e| FormatError::malformed("pack header", e))?;
    let PlacedFrames { mut out, room } = placed;
    let header_len = PREFIX_LEN + json.len();
    let start = if header_len <= room {
        room - header_len
    } else {
        // A header longer than the room left for it (many keys, many segments): make room.
        out.splice(0..0, std::iter::repeat_n(0, header_len - room));
        0
    };
    let body_start = start + header_len;
    out[start..start + MAGIC.len()].copy_from_slice(MAGIC);
    out[start + MAGIC.len()..start + PREFIX_LEN]
        .copy_from_slice(&(json.len() as u32).to_le_bytes());
    out[start + PREFIX_LEN..body_start].copy_from_slice(&json);
    let (front, body) = out.split_at_mut(body_start);
    let aad = &front[start..];
    encrypt_segments(&data_key, &nonce_prefix, aad, body, segments)?;
    Ok(SealedPack { buffer: out, start })
}

/// Encrypts every segment of `body` (each followed by room for its tag) in place, the
/// segments shared out over the cores.
fn encrypt_segments(
    data_key: &[u8; 32],
    nonce_prefix: &[u8; NONCE_PREFIX_LEN],
    aad: &[u8],
    body: &mut [u8],
    segments: &[Segment],
) -> Result<(), FormatError> {
    let mut pieces = Vec::with_capacity(segments.len());
    let mut rest = body;
    for segment in segments {
        let (piece, next) = rest.split_at_mut(segment.len as usize + TAG_LEN);
        pieces.push(piece);
        rest = next;
    }
    let last = segments.len() - 1;
    let cipher = Aes256Gcm::new(data_key.into());
    let encrypt = |number: usize, piece: &mut [u8]| -> Result<(), FormatError> {
        let (text, tag_room) = piece.split_at_mut(piece.len() - TAG_LEN);
        let nonce = segment_nonce(nonce_prefix, number, number == last);
        let tag = cipher
            .encrypt_inout_detached(&nonce.into(), aad, InOutBuf::from(text))
            .map_err(|_| FormatError::Signing("encrypting the payload failed".to_string()))?;
        tag_room.copy_from_slice(&tag);
        Ok(())
    };
    let total: usize = pieces.iter().map(|p| p.len()).sum();
    if pieces.len() < 2 || total < crate::PARALLEL_MIN_LEN {
        for (number, piece) in pieces.into_iter().enumerate() {
            encrypt(number, piece)?;
        }
        return Ok(());
    }
    pieces
        .into_par_iter()
        .enumerate()
        .try_for_each(|(number, piece)| encrypt(number, piece))
}

/// The nonce of format-2 segment `number`: the prefix ‖ `number` as u32 big-endian ‖ 1 for
/// the last segment, 0 for the others.
pub(crate) fn segment_nonce(
    prefix: &[u8; NONCE_PREFIX_LEN],
    number: usize,
    last: bool,
) -> [u8; 12] {
    let mut nonce = [0u8; 12];
    nonce[..NONCE_PREFIX_LEN].copy_from_slice(prefix);
    nonce[NONCE_PREFIX_LEN..11].copy_from_slice(&(number as u32).to_be_bytes());
    nonce[11] = u8::from(last);
    nonce
}

fn slot_aad(key_id: &str) -> Vec<u8> {
    [SLOT_AAD_PREFIX, key_id.as_bytes()].concat()
}

/// AES-256-GCM encryption of `in_out` in place; returns the tag. Nonces are never reused:
/// each key slot has a random nonce of its own, and each segment's nonce is the pack's
/// random prefix with the segment's number.
fn seal_detached(
    key: &[u8; 32],
    nonce: [u8; 12],
    aad: &[u8],
    in_out: &mut [u8],
) -> Result<[u8; TAG_LEN], aes_gcm::Error> {
    let tag = Aes256Gcm::new(key.into()).encrypt_inout_detached(
        &nonce.into(),
        aad,
        InOutBuf::from(in_out),
    )?;
    Ok(tag.into())
}

/// AES-256-GCM decryption of `in_out` in place, checking `tag`; on failure nothing may be
/// read from `in_out`.
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
        InOutBuf::from(in_out),
        &tag.into(),
    )
}

/// Parses and checks the header of a sealed pack without decrypting anything. Returns the
/// header and the header's length in bytes (where the ciphertext starts).
pub fn read_header(bytes: &[u8], limits: &Limits) -> Result<(PackHeader, usize), FormatError> {
    read_header_of(bytes, bytes.len() as u64, limits)
}

/// [`read_header`] of a pack of `total` bytes of which `bytes` are the first: at least
/// [`head_len`] of them, or the whole pack when it is shorter.
pub(crate) fn read_header_of(
    bytes: &[u8],
    total: u64,
    limits: &Limits,
) -> Result<(PackHeader, usize), FormatError> {
    if total > limits.max_sealed_len {
        return Err(FormatError::TooLarge {
            what: "sealed pack",
            found: total,
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
    if header.format != FORMAT_V1 && header.format != FORMAT_VERSION {
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
    if header.format == FORMAT_V1 {
        decode_fixed::<12>("payload nonce", &header.nonce)?;
    } else {
        decode_fixed::<NONCE_PREFIX_LEN>("segment nonce prefix", &header.nonce)?;
    }
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
    let tags = check_segments(&header, limits)?;
    let expected = header_len as u64 + header.plaintext_len + tags * TAG_LEN as u64;
    if total != expected {
        return Err(if total < expected {
            FormatError::Truncated {
                what: "sealed pack",
                expected,
                found: total,
            }
        } else {
            FormatError::SizeMismatch {
                what: "sealed pack".to_string(),
                expected,
                found: total,
            }
        });
    }
    Ok((header, header_len))
}

/// How many of a pack's first bytes [`read_header_of`] needs to see all of any header the
/// limits allow.
pub(crate) fn head_len(limits: &Limits) -> usize {
    PREFIX_LEN + limits.max_header_len
}

/// Checks the segment list against the header and the limits; returns how many tags the
/// pack holds.
fn check_segments(header: &PackHeader, limits: &Limits) -> Result<u64, FormatError> {
    if header.format == FORMAT_V1 {
        if !header.segments.is_empty() {
            return Err(FormatError::malformed(
                "pack header",
                "a format 1 header has no segments",
            ));
        }
        return Ok(1);
    }
    let count = header.segments.len();
    if count == 0 || count > MAX_SEGMENTS {
        return Err(FormatError::malformed(
            "pack header",
            format!("expected 1-{MAX_SEGMENTS} segments, found {count}"),
        ));
    }
    let mut len = 0u64;
    let mut tar_len = 0u64;
    for (i, segment) in header.segments.iter().enumerate() {
        if segment.len == 0 {
            return Err(FormatError::malformed(
                "pack header",
                format!("segment {i} is empty"),
            ));
        }
        len = len.saturating_add(segment.len);
        tar_len = tar_len.saturating_add(segment.tar_len);
    }
    if len != header.plaintext_len {
        return Err(FormatError::malformed(
            "pack header",
            format!(
                "the segments add up to {len} bytes, the header's plaintext_len says {}",
                header.plaintext_len
            ),
        ));
    }
    let budget = limits.decompressed_budget(header.plaintext_len);
    if tar_len > budget {
        return Err(FormatError::DecompressionBomb { limit: budget });
    }
    Ok(count as u64)
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

/// A pack whose header passed and whose data key is unwrapped: what decrypting and
/// decoding its payload needs.
pub(crate) struct Unsealed<'a> {
    pub header: PackHeader,
    pub header_len: usize,
    /// The sealed bytes: the whole pack, or for a pack read from a file as it is decoded
    /// ([`crate::open_file_into`]) its first bytes, the header among them.
    pub bytes: &'a [u8],
    /// The whole pack's length.
    pub total: u64,
    data_key: Zeroizing<[u8; 32]>,
}

impl Unsealed<'_> {
    /// Format 2: where each segment's ciphertext starts in the sealed bytes, in order.
    pub(crate) fn segment_starts(&self) -> Vec<usize> {
        let mut at = self.header_len;
        self.header
            .segments
            .iter()
            .map(|segment| {
                let start = at;
                at += segment.len as usize + TAG_LEN;
                start
            })
            .collect()
    }

    /// A decryptor for this pack's format-2 segments.
    pub(crate) fn segment_opener(&self) -> Result<SegmentOpener<'_>, FormatError> {
        Ok(SegmentOpener {
            cipher: Aes256Gcm::new((&*self.data_key).into()),
            nonce_prefix: decode_fixed::<NONCE_PREFIX_LEN>(
                "segment nonce prefix",
                &self.header.nonce,
            )?,
            aad: &self.bytes[..self.header_len],
            last: self.header.segments.len().saturating_sub(1),
        })
    }

    /// Whether [`Unsealed::bytes`] is the whole pack.
    pub(crate) fn whole(&self) -> bool {
        self.bytes.len() as u64 == self.total
    }

    /// Format 1: the whole payload, decrypted.
    pub(crate) fn decrypt_v1(&self) -> Result<Vec<u8>, FormatError> {
        if !self.whole() {
            return Err(FormatError::malformed(
                "sealed pack",
                "a format 1 payload is decrypted from the whole pack in memory",
            ));
        }
        let nonce = decode_fixed::<12>("payload nonce", &self.header.nonce)?;
        let body = &self.bytes[self.header_len..];
        let (ciphertext, tag) = body.split_at(body.len() - TAG_LEN);
        let mut plain = ciphertext.to_vec();
        open_detached(
            &self.data_key,
            nonce,
            &self.bytes[..self.header_len],
            tag,
            &mut plain,
        )
        .map_err(|_| FormatError::Tampered)?;
        Ok(plain)
    }
}

/// Decrypts format-2 segments.
pub(crate) struct SegmentOpener<'a> {
    cipher: Aes256Gcm,
    nonce_prefix: [u8; NONCE_PREFIX_LEN],
    aad: &'a [u8],
    last: usize,
}

impl SegmentOpener<'_> {
    /// Authenticates segment `number` (`sealed`: its ciphertext and tag) and decrypts its
    /// ciphertext where it lies; returns the plaintext, the first `sealed.len() - TAG_LEN`
    /// bytes. When the tag does not verify, nothing may be read from `sealed`.
    pub(crate) fn open_in_place<'s>(
        &self,
        number: usize,
        sealed: &'s mut [u8],
    ) -> Result<&'s [u8], FormatError> {
        let at = sealed
            .len()
            .checked_sub(TAG_LEN)
            .ok_or(FormatError::Tampered)?;
        let (ciphertext, tag) = sealed.split_at_mut(at);
        let tag: [u8; TAG_LEN] = (&*tag).try_into().map_err(|_| FormatError::Tampered)?;
        let nonce = segment_nonce(&self.nonce_prefix, number, number == self.last);
        self.cipher
            .decrypt_inout_detached(
                &nonce.into(),
                self.aad,
                InOutBuf::from(&mut *ciphertext),
                &tag.into(),
            )
            .map_err(|_| FormatError::Tampered)?;
        Ok(ciphertext)
    }
}

/// Checks the header and unwraps the data key with one of `keys`.
pub(crate) fn unseal<'a>(
    bytes: &'a [u8],
    keys: &ContentKeyRing,
    limits: &Limits,
) -> Result<Unsealed<'a>, FormatError> {
    unseal_of(bytes, bytes.len() as u64, keys, limits)
}

/// [`unseal`] of a pack of `total` bytes of which `bytes` are the first (as for
/// [`read_header_of`]).
pub(crate) fn unseal_of<'a>(
    bytes: &'a [u8],
    total: u64,
    keys: &ContentKeyRing,
    limits: &Limits,
) -> Result<Unsealed<'a>, FormatError> {
    let (header, header_len) = read_header_of(bytes, total, limits)?;
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
    Ok(Unsealed {
        header,
        header_len,
        bytes,
        total,
        data_key,
    })
}

/// Checks the header, unwraps the data key with one of `keys` and decrypts: returns the
/// header and the compressed payload (a standard `tar.zst`; in format 2 the segments'
/// plaintexts one after the other).
pub fn decrypt(
    bytes: &[u8],
    keys: &ContentKeyRing,
    limits: &Limits,
) -> Result<(PackHeader, Vec<u8>), FormatError> {
    let unsealed = unseal(bytes, keys, limits)?;
    if unsealed.header.format == FORMAT_V1 {
        let plain = unsealed.decrypt_v1()?;
        return Ok((unsealed.header, plain));
    }
    let opener = unsealed.segment_opener()?;
    let mut plain = Vec::with_capacity(unsealed.header.plaintext_len as usize);
    let mut segment = Vec::new();
    for (number, (start, info)) in unsealed
        .segment_starts()
        .into_iter()
        .zip(&unsealed.header.segments)
        .enumerate()
    {
        segment.clear();
        segment.extend_from_slice(&bytes[start..start + info.len as usize + TAG_LEN]);
        plain.extend_from_slice(opener.open_in_place(number, &mut segment)?);
    }
    Ok((unsealed.header, plain))
}

/// Opens a sealed pack: header, key, authenticated decryption, bounded decompression,
/// safe untar and a check of every file against the index.
pub fn open(
    bytes: &[u8],
    keys: &ContentKeyRing,
    limits: &Limits,
) -> Result<OpenedPack, FormatError> {
    let unsealed = unseal(bytes, keys, limits)?;
    let payload = if unsealed.header.format == FORMAT_V1 {
        Payload::from_tar_zst(&unsealed.decrypt_v1()?, limits)?
    } else {
        Payload::from_frames(&SealedSegments::new(&unsealed)?, limits)?
    };
    Ok(OpenedPack {
        header: unsealed.header,
        payload,
        sha256: sha256_hex(bytes),
    })
}

/// Fills `buffer` from a pack's file at `start`; a file that got shorter since its length
/// was taken says so.
pub(crate) fn read_pack_at(file: &File, buffer: &mut [u8], start: u64) -> Result<(), FormatError> {
    file.read_exact_at(buffer, start).map_err(|e| {
        let e = if e.kind() == std::io::ErrorKind::UnexpectedEof {
            std::io::Error::other("the file got shorter while being read; try again")
        } else {
            e
        };
        FormatError::io("reading the sealed pack", e)
    })
}

/// A format-2 pack's segments: each is read (from memory, or from the pack's file),
/// authenticated and decrypted, its frames checked against what the header says, and
/// decoded, all on the thread that decodes it.
pub(crate) struct SealedSegments<'a> {
    unsealed: &'a Unsealed<'a>,
    opener: SegmentOpener<'a>,
    starts: Vec<usize>,
    /// Where the segments are read from when `unsealed` holds only the pack's first bytes.
    file: Option<&'a File>,
}

impl<'a> SealedSegments<'a> {
    /// The segments of a pack wholly in memory.
    pub(crate) fn new(unsealed: &'a Unsealed<'a>) -> Result<Self, FormatError> {
        if !unsealed.whole() {
            return Err(FormatError::malformed(
                "sealed pack",
                "only the pack's first bytes are in memory",
            ));
        }
        Self::with_file(unsealed, None)
    }

    /// The segments of the pack in `file`, of which `unsealed` holds the first bytes: each
    /// is read when it is decoded.
    pub(crate) fn in_file(unsealed: &'a Unsealed<'a>, file: &'a File) -> Result<Self, FormatError> {
        Self::with_file(unsealed, Some(file))
    }

    fn with_file(unsealed: &'a Unsealed<'a>, file: Option<&'a File>) -> Result<Self, FormatError> {
        Ok(SealedSegments {
            opener: unsealed.segment_opener()?,
            starts: unsealed.segment_starts(),
            unsealed,
            file,
        })
    }
}

impl FrameSource for SealedSegments<'_> {
    fn authenticated(&self) -> bool {
        true
    }

    fn count(&self) -> usize {
        self.unsealed.header.segments.len()
    }

    fn len(&self, number: usize) -> u64 {
        self.unsealed.header.segments[number].tar_len
    }

    fn decode(
        &self,
        number: usize,
        scratch: &mut Vec<u8>,
        context: &mut zstd::zstd_safe::DCtx<'static>,
        out: &mut Vec<u8>,
    ) -> Result<(), FormatError> {
        let segment = self.unsealed.header.segments[number];
        let start = self.starts[number];
        let len = segment.len as usize + TAG_LEN;
        // The scratch buffer only grows, so that its pages are touched once per thread.
        if scratch.len() < len {
            scratch.resize(len, 0);
        }
        let sealed = &mut scratch[..len];
        match self.file {
            None => sealed.copy_from_slice(&self.unsealed.bytes[start..start + len]),
            Some(file) => read_pack_at(file, sealed, start as u64)?,
        }
        let plain = self.opener.open_in_place(number, sealed)?;
        // The frames must declare sizes that add up to what the header says, within the
        // windows the streaming decoder accepts.
        let declared: Option<u64> = frames_within(plain, segment.tar_len)
            .map(|frames| frames.iter().map(|f| f.content_len).sum());
        if declared != Some(segment.tar_len) {
            return Err(FormatError::malformed(
                "zstd payload",
                format!(
                    "segment {number} does not hold zstd frames that declare the {} bytes of \
                     tar its header entry says",
                    segment.tar_len
                ),
            ));
        }
        decode_exact(context, plain, segment.tar_len, out)
    }
}
