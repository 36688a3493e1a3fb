//! Format 2 seals the payload as segments, each its own AES-256-GCM encryption with the
//! header as associated data and a nonce of the prefix, the segment's number and a
//! last-segment flag: segments cannot be moved, and each must hold exactly what the header
//! says it holds.

use crate::common;

use common::*;
use pack_format::pack::{self, SealSecrets};
use pack_format::{ContentKey, FormatError, Limits, Payload, SealInput, Segment};

fn key() -> ContentKey {
    ContentKey::from_parts("segments", [4u8; 32]).unwrap()
}

fn input(payload: &Payload) -> SealInput<'_> {
    static VERSION: semver::Version = semver::Version::new(1, 0, 0);
    SealInput {
        format: pack_format::FORMAT_VERSION,
        name: "segments",
        version: &VERSION,
        schema: 1,
        payload,
        mtime: 0,
        zstd_level: 1,
    }
}

/// Noise: zstd stores it as a raw block, so equal lengths give frames of equal length.
fn noise(seed: u8, len: usize) -> Vec<u8> {
    let mut state = u64::from(seed) + 1;
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 56) as u8
        })
        .collect()
}

/// Two segments of equal length with different contents.
fn two_equal_segments() -> (Vec<u8>, usize, usize) {
    let frames: Vec<Vec<u8>> = [noise(1, 1000), noise(2, 1000)]
        .iter()
        .map(|piece| pack_format::compress(piece, 1).unwrap())
        .collect();
    assert_eq!(frames[0].len(), frames[1].len());
    assert_ne!(frames[0], frames[1]);
    let segments: Vec<Segment> = frames
        .iter()
        .map(|f| Segment {
            len: f.len() as u64,
            tar_len: 1000,
        })
        .collect();
    let empty = Payload::default();
    let sealed = pack::seal_segments(
        &input(&empty),
        frames.concat(),
        &segments,
        &[&key()],
        SealSecrets::new([7; 32], [8; 7], vec![[9; 12]]),
    )
    .unwrap();
    let (_, header_len) = pack::read_header(&sealed, &Limits::DEFAULT).unwrap();
    (sealed, header_len, frames[0].len() + 16)
}

#[test]
fn two_segments_swapped_are_refused_as_tampered() {
    let (sealed, header_len, each) = two_equal_segments();
    // Untouched, the segments decrypt (and then fail as a tar: they are noise).
    let err = pack::open(&sealed, &ring(&key()), &Limits::DEFAULT).unwrap_err();
    assert!(!matches!(err, FormatError::Tampered), "{err}");
    let mut swapped = sealed[..header_len].to_vec();
    swapped.extend_from_slice(&sealed[header_len + each..]);
    swapped.extend_from_slice(&sealed[header_len..header_len + each]);
    assert_eq!(swapped.len(), sealed.len());
    let err = pack::open(&swapped, &ring(&key()), &Limits::DEFAULT).unwrap_err();
    assert!(matches!(err, FormatError::Tampered), "{err}");
}

#[test]
fn the_same_segment_twice_is_refused_as_tampered() {
    let (sealed, header_len, each) = two_equal_segments();
    let mut doubled = sealed[..header_len + each].to_vec();
    doubled.extend_from_slice(&sealed[header_len..header_len + each]);
    let err = pack::open(&doubled, &ring(&key()), &Limits::DEFAULT).unwrap_err();
    assert!(matches!(err, FormatError::Tampered), "{err}");
}

#[test]
fn a_segment_that_decodes_to_other_than_its_header_entry_is_malformed() {
    let payload = small_payload();
    let compressed = payload.to_tar_zst(0, 1).unwrap();
    let tar_len = payload.to_tar(0).unwrap().len() as u64;
    for claimed in [tar_len - 1, tar_len + 1] {
        let sealed = pack::seal_segments(
            &input(&payload),
            compressed.clone(),
            &[Segment {
                len: compressed.len() as u64,
                tar_len: claimed,
            }],
            &[&key()],
            SealSecrets::new([7; 32], [8; 7], vec![[9; 12]]),
        )
        .unwrap();
        let err = pack::open(&sealed, &ring(&key()), &Limits::DEFAULT).unwrap_err();
        assert!(
            matches!(err, FormatError::Malformed { .. }),
            "{claimed}: {err}"
        );
        let into =
            pack_format::open_into(&sealed, &ring(&key()), &Limits::DEFAULT, &Discard).unwrap_err();
        assert!(
            matches!(into, FormatError::Malformed { .. }),
            "{claimed}: {into}"
        );
    }
}

/// With the default header limit (64 KiB) a header cannot list [`pack::MAX_SEGMENTS`]
/// segments: an entry takes at least 22 bytes (`{"len":1,"tar_len":0},`) and the rest of the
/// smallest header 244, so 2,967 fit and 2,968 do not. docs/FORMAT.md gives this number.
#[test]
fn the_default_header_limit_holds_at_most_2967_segments() {
    let sealed_with = |count: usize| {
        let segments = vec![r#"{"len":1,"tar_len":0}"#; count].join(",");
        let json = format!(
            r#"{{"format":2,"name":"a","version":"0.0.0","schema":0,"key_slots":[{{"key_id":"a","nonce":"{slot_nonce}","wrapped_key":"{wrapped}"}}],"nonce":"{prefix}","plaintext_len":{count},"segments":[{segments}]}}"#,
            slot_nonce = "A".repeat(16),
            wrapped = "A".repeat(64),
            prefix = "AAAAAAAAAA==",
        );
        let mut bytes = pack::MAGIC.to_vec();
        bytes.extend_from_slice(&(json.len() as u32).to_le_bytes());
        bytes.extend_from_slice(json.as_bytes());
        bytes.resize(bytes.len() + count * 17, 0);
        (bytes, json.len())
    };
    let (fits, len) = sealed_with(2967);
    assert!(len <= Limits::DEFAULT.max_header_len, "{len}");
    let (header, _) = pack::read_header(&fits, &Limits::DEFAULT).unwrap();
    assert_eq!(header.segments.len(), 2967);
    let (over, len) = sealed_with(2968);
    assert!(len > Limits::DEFAULT.max_header_len, "{len}");
    let err = pack::read_header(&over, &Limits::DEFAULT).unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::TooLarge {
                what: "sealed pack header",
                ..
            }
        ),
        "{err}"
    );
    const { assert!(2968 < pack::MAX_SEGMENTS) };
}

/// A destination that keeps nothing.
struct Discard;

impl pack_format::Unpack for Discard {
    fn index(&self, _files: &[pack_format::IndexEntry]) -> std::io::Result<()> {
        Ok(())
    }

    fn file(&self, _path: &str, _bytes: &[u8]) -> std::io::Result<()> {
        Ok(())
    }
}
