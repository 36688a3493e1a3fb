//! What a format-2 segment's plaintext may hold, as docs/FORMAT.md ("Sealed pack") states
//! it and the reader enforces it: one or more standard zstd frames and nothing else, each
//! declaring its content size, without a dictionary, the sizes adding up to the segment's
//! `tar_len`. A frame's checksum is optional and not checked: the segment's tag already
//! authenticates every byte, and every file is checked against its SHA-256. Every frame
//! here is sealed properly, so what refuses it is the frame rule, not the encryption.

use crate::common;

use common::*;
use pack_format::pack::{self, SealSecrets};
use pack_format::{ContentKey, FormatError, Limits, Payload, SealInput, Segment};

fn key() -> ContentKey {
    ContentKey::from_parts("frames", [5u8; 32]).unwrap()
}

/// `plain` sealed as the one segment of a pack of `payload`, declaring `tar_len`.
fn sealed_segment(payload: &Payload, plain: Vec<u8>, tar_len: usize) -> Vec<u8> {
    static VERSION: semver::Version = semver::Version::new(1, 0, 0);
    let input = SealInput {
        format: pack_format::FORMAT_VERSION,
        name: "frames",
        version: &VERSION,
        schema: 1,
        payload,
        mtime: 0,
        zstd_level: 1,
    };
    let segment = Segment {
        len: plain.len() as u64,
        tar_len: tar_len as u64,
    };
    pack::seal_segments(
        &input,
        plain,
        &[segment],
        &[&key()],
        SealSecrets::new([7; 32], [8; 7], vec![[9; 12]]),
    )
    .unwrap()
}

/// Opens a pack whose one segment is what `frame` makes of the small payload's `tar`.
fn open_segment(frame: impl FnOnce(&[u8]) -> Vec<u8>) -> Result<Payload, FormatError> {
    let payload = small_payload();
    let tar = payload.to_tar(0).unwrap();
    let sealed = sealed_segment(&payload, frame(&tar), tar.len());
    pack::open(&sealed, &ring(&key()), &Limits::DEFAULT).map(|opened| opened.payload)
}

fn compressor(checksum: bool, content_size: bool) -> zstd::bulk::Compressor<'static> {
    let mut compressor = zstd::bulk::Compressor::new(3).unwrap();
    compressor.include_checksum(checksum).unwrap();
    compressor.include_contentsize(content_size).unwrap();
    compressor
}

#[track_caller]
fn assert_refused(result: Result<Payload, FormatError>) {
    match result {
        Err(FormatError::Malformed {
            what: "zstd payload",
            ..
        }) => {}
        other => panic!("expected a malformed zstd payload, found {other:?}"),
    }
}

#[test]
fn a_frame_as_packer_writes_it_opens() {
    let opened = open_segment(|tar| compressor(true, true).compress(tar).unwrap());
    assert_eq!(opened.unwrap(), small_payload());
}

#[test]
fn a_frame_without_a_checksum_opens() {
    let opened = open_segment(|tar| compressor(false, true).compress(tar).unwrap());
    assert_eq!(opened.unwrap(), small_payload());
}

#[test]
fn several_frames_in_one_segment_open() {
    let opened = open_segment(|tar| {
        let (a, b) = tar.split_at(700);
        let mut frames = compressor(true, true).compress(a).unwrap();
        frames.extend(compressor(false, true).compress(b).unwrap());
        frames
    });
    assert_eq!(opened.unwrap(), small_payload());
}

#[test]
fn a_frame_whose_checksum_is_wrong_opens_since_the_tag_authenticated_it() {
    let opened = open_segment(|tar| {
        let mut frame = compressor(true, true).compress(tar).unwrap();
        let last = frame.len() - 1;
        frame[last] ^= 0xff;
        frame
    });
    assert_eq!(opened.unwrap(), small_payload());
}

#[test]
fn a_frame_that_decodes_to_other_file_bytes_is_refused_by_the_files_sha256() {
    // A frame zstd decodes without complaint (its checksum ignored, and wrong too) to a `tar`
    // whose one file differs from what the index lists: the SHA-256 of the file refuses it.
    let opened = open_segment(|tar| {
        let mut changed = tar.to_vec();
        let at = changed
            .windows(b"Be careful.".len())
            .position(|w| w == b"Be careful.")
            .unwrap();
        changed[at] = b'b';
        let mut frame = compressor(true, true).compress(&changed).unwrap();
        let last = frame.len() - 1;
        frame[last] ^= 0xff;
        frame
    });
    match opened {
        Err(FormatError::HashMismatch { what, .. }) => assert_eq!(what, "rules/runtime.md"),
        other => panic!("expected the file's SHA-256 to refuse it, found {other:?}"),
    }
}

#[test]
fn a_frame_without_its_content_size_is_refused() {
    assert_refused(open_segment(|tar| {
        compressor(true, false).compress(tar).unwrap()
    }));
}

#[test]
fn a_skippable_frame_is_refused() {
    assert_refused(open_segment(|tar| {
        // Magic 0x184D2A50, four bytes of user data.
        let mut frames = vec![0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 1, 2, 3, 4];
        frames.extend(compressor(true, true).compress(tar).unwrap());
        frames
    }));
}

#[test]
fn a_frame_that_names_a_dictionary_is_refused() {
    assert_refused(open_segment(|tar| {
        let frame = compressor(true, true).compress(tar).unwrap();
        // The frame header with a one-byte dictionary id: the descriptor's dictionary-id
        // flag set, the id right after the descriptor and, when there is one, the window
        // byte.
        let descriptor = frame[4];
        let id_at = if descriptor & 0x20 != 0 { 5 } else { 6 };
        let mut named = frame[..id_at].to_vec();
        named[4] = descriptor | 0x01;
        named.push(42);
        named.extend_from_slice(&frame[id_at..]);
        named
    }));
}

#[test]
fn bytes_after_the_last_frame_are_refused() {
    assert_refused(open_segment(|tar| {
        let mut frame = compressor(true, true).compress(tar).unwrap();
        frame.extend_from_slice(&[0; 8]);
        frame
    }));
}
