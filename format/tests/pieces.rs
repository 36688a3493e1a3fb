//! Format 3: the bytes of format 2, except that the index (`"format": 2`) digests each file
//! over 64 KiB as the SHA-256 of its 64 KiB pieces' SHA-256s. A reader takes the rule from
//! the container's format, before it decodes a frame, and refuses an index whose format does
//! not go with the container's.

mod common;

use std::collections::BTreeMap;

use common::*;
use pack_format::{
    ContentKey, DigestRule, FORMAT_V3, FORMAT_VERSION, FormatError, Limits, PIECE_LEN, Payload,
    PayloadFile, SealInput, pack,
};
use sha2::Digest;

fn key() -> ContentKey {
    ContentKey::from_parts("pieces", [9u8; 32]).unwrap()
}

/// Files on each side of a piece's length, and large ones that fill several frames.
fn payload() -> Payload {
    let lens = [
        0,
        100,
        PIECE_LEN - 1,
        PIECE_LEN,
        PIECE_LEN + 1,
        300_000,
        3_000_000,
        3_500_000,
        4_200_000,
    ];
    let files = lens.iter().enumerate().map(|(i, &len)| PayloadFile {
        path: format!("docs/file-{i}.md"),
        bytes: text(i as u64, len),
    });
    Payload::new(files, &Limits::DEFAULT).unwrap()
}

fn input(payload: &Payload, format: u32) -> SealInput<'_> {
    static VERSION: semver::Version = semver::Version::new(1, 0, 0);
    SealInput {
        format,
        name: "pieces",
        version: &VERSION,
        schema: 1,
        payload,
        mtime: 0,
        zstd_level: 1,
    }
}

/// The rule as docs/FORMAT.md words it, written out the slow way.
fn pieces_digest(bytes: &[u8]) -> String {
    if bytes.len() <= 64 * 1024 {
        return hex::encode(sha2::Sha256::digest(bytes));
    }
    let mut list = Vec::new();
    for piece in bytes.chunks(64 * 1024) {
        list.extend_from_slice(&sha2::Sha256::digest(piece));
    }
    hex::encode(sha2::Sha256::digest(&list))
}

#[test]
fn every_reader_opens_a_format_3_pack_to_its_files_with_digests_over_pieces() {
    let payload = payload();
    let sealed = pack_format::seal(&input(&payload, FORMAT_V3), &[&key()]).unwrap();
    let (header, _) = pack_format::read_header(&sealed, &Limits::DEFAULT).unwrap();
    assert_eq!(header.format, 3);
    assert!(
        header.segments.len() > 2,
        "{} segments",
        header.segments.len()
    );

    let opened = pack_format::open(&sealed, &ring(&key()), &Limits::DEFAULT).unwrap();
    assert_eq!(opened.payload, payload);

    let record = Record::default();
    let unpacked =
        pack_format::open_into(&sealed, &ring(&key()), &Limits::DEFAULT, &record).unwrap();
    assert_eq!(
        *record.files.lock().unwrap(),
        payload.clone().into_files(),
        "open_into"
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pieces.pack");
    std::fs::write(&path, &sealed).unwrap();
    let from_file = Record::default();
    let file = std::fs::File::open(&path).unwrap();
    pack_format::open_file_into(&file, &ring(&key()), &Limits::DEFAULT, &from_file).unwrap();
    assert_eq!(
        *from_file.files.lock().unwrap(),
        payload.clone().into_files(),
        "open_file_into"
    );

    // The index holds the pieces digest: the file's plain SHA-256 only up to 64 KiB.
    let files = payload.into_files();
    assert_eq!(unpacked.index.len(), files.len());
    for entry in &unpacked.index {
        let bytes = &files[&entry.path];
        assert_eq!(entry.sha256, pieces_digest(bytes), "{}", entry.path);
        assert_eq!(entry.sha256, DigestRule::Pieces.hex(bytes));
        let plain = pack_format::sha256_hex(bytes) == entry.sha256;
        assert_eq!(plain, bytes.len() <= PIECE_LEN, "{}", entry.path);
    }
}

#[test]
fn format_2_still_digests_whole_files() {
    let payload = payload();
    let sealed = pack_format::seal(&input(&payload, FORMAT_VERSION), &[&key()]).unwrap();
    let record = Record::default();
    let unpacked =
        pack_format::open_into(&sealed, &ring(&key()), &Limits::DEFAULT, &record).unwrap();
    assert_eq!(unpacked.header.format, 2);
    let files = payload.into_files();
    for entry in &unpacked.index {
        assert_eq!(entry.sha256, pack_format::sha256_hex(&files[&entry.path]));
    }
}

/// `tar` of `payload` with its index's `format` set to `index_format`; the digests stay
/// those of whole files.
fn tar_with_index_format(payload: &Payload, index_format: u8) -> Vec<u8> {
    let mut tar = payload.to_tar(0).unwrap();
    let field = b"\"format\": 1";
    let at = tar
        .windows(field.len())
        .position(|w| w == field)
        .expect("the index's format field");
    tar[at + field.len() - 1] = b'0' + index_format;
    tar
}

fn seal_tar(tar: &[u8], payload: &Payload, format: u32) -> Vec<u8> {
    let compressed = pack_format::compress(tar, 1).unwrap();
    pack::seal_compressed(&input(payload, format), compressed, &[&key()]).unwrap()
}

/// The error of each way of opening `sealed`, and what `open_into` handed out.
fn refused(sealed: &[u8]) -> (FormatError, FormatError, BTreeMap<String, Vec<u8>>) {
    let open = pack_format::open(sealed, &ring(&key()), &Limits::DEFAULT).unwrap_err();
    let record = Record::default();
    let into =
        pack_format::open_into(sealed, &ring(&key()), &Limits::DEFAULT, &record).unwrap_err();
    let handed = record.files.into_inner().unwrap();
    (open, into, handed)
}

#[test]
fn a_format_3_index_of_whole_file_digests_fails_on_the_first_large_file() {
    let payload = payload();
    let sealed = seal_tar(&tar_with_index_format(&payload, 2), &payload, FORMAT_V3);
    let (open, into, handed) = refused(&sealed);
    for err in [&open, &into] {
        match err {
            FormatError::HashMismatch { what, .. } => {
                assert!(payload.files()[what].len() > PIECE_LEN, "{what}")
            }
            other => panic!("{other}"),
        }
    }
    for (path, bytes) in handed {
        assert!(
            bytes.len() <= PIECE_LEN,
            "{path} went out with a wrong digest"
        );
    }
}

#[test]
fn a_format_3_pack_with_a_format_1_index_is_refused_before_any_file_goes_out() {
    let payload = payload();
    let sealed = seal_tar(&tar_with_index_format(&payload, 1), &payload, FORMAT_V3);
    let (open, into, handed) = refused(&sealed);
    for err in [open, into] {
        assert!(
            matches!(
                err,
                FormatError::UnsupportedVersion {
                    expected: 2,
                    found: 1,
                    ..
                }
            ),
            "{err}"
        );
    }
    assert!(handed.is_empty(), "{:?}", handed.keys());
}

#[test]
fn a_format_2_pack_with_a_format_2_index_is_refused_even_when_every_digest_would_match() {
    // Only small files: both rules give the same digests, so only the pairing can refuse.
    let files = (0..5).map(|i| PayloadFile {
        path: format!("f{i}.md"),
        bytes: text(i, 1_000 * (i as usize + 1)),
    });
    let payload = Payload::new(files, &Limits::DEFAULT).unwrap();
    let sealed = seal_tar(
        &tar_with_index_format(&payload, 2),
        &payload,
        FORMAT_VERSION,
    );
    let (open, into, handed) = refused(&sealed);
    for err in [open, into] {
        assert!(
            matches!(
                err,
                FormatError::UnsupportedVersion {
                    expected: 1,
                    found: 2,
                    ..
                }
            ),
            "{err}"
        );
    }
    assert!(handed.is_empty(), "{:?}", handed.keys());
}

#[test]
fn only_formats_2_and_3_are_sealed() {
    let payload = small_payload();
    for format in [0, 1, 4] {
        let err = pack_format::seal(&input(&payload, format), &[&key()]).unwrap_err();
        assert!(
            matches!(err, FormatError::UnsupportedVersion { found, .. } if found == format),
            "{format}: {err}"
        );
    }
}
