//! `open_into` hands out exactly the files `open` returns, checked the same way, and a
//! hostile or broken payload fails it — small payloads (one stream) and payloads of many
//! frames (decoded in parallel, files taken straight from the frames) alike.

use crate::common;

use std::sync::atomic::Ordering;

use common::*;
use pack_format::compress;
use pack_format::payload::{FRAME_LEN, INDEX_PATH};
use pack_format::{
    ContentKey, FormatError, IndexEntry, Limits, Payload, PayloadFile, SealInput, Unpack, pack,
};

/// About `total` bytes in files of 1-120 KB across nested directories, so that many files
/// straddle the 8 MiB frame boundaries.
fn files(total: usize) -> Vec<PayloadFile> {
    let mut files = Vec::new();
    let mut size = 0;
    let mut i = 0u64;
    while size < total {
        let len = 1_000 + (i as usize * 7_919) % 120_000;
        files.push(PayloadFile {
            path: format!("area{}/dir{}/file-{i}.md", i % 5, i % 17),
            bytes: text(i, len),
        });
        size += len;
        i += 1;
    }
    files
}

fn key() -> ContentKey {
    ContentKey::from_parts("unpack-test", [3u8; 32]).unwrap()
}

/// Seals `tar` (already built, hostile or not) as a pack.
fn seal_tar(tar: &[u8]) -> Vec<u8> {
    seal_payload(compress(tar, 1).unwrap())
}

/// Seals an already compressed payload (broken or not) as a pack.
fn seal_payload(compressed: Vec<u8>) -> Vec<u8> {
    let version = semver::Version::new(1, 0, 0);
    let empty = Payload::default();
    let input = SealInput {
        format: pack_format::FORMAT_VERSION,
        name: "unpack",
        version: &version,
        schema: 1,
        payload: &empty,
        mtime: 0,
        zstd_level: 1,
    };
    pack::seal_compressed(&input, compressed, &[&key()]).unwrap()
}

fn open_into(sealed: &[u8]) -> (Result<pack_format::Unpacked, FormatError>, Record) {
    let record = Record::default();
    let result = pack_format::open_into(sealed, &ring(&key()), &Limits::DEFAULT, &record);
    (result, record)
}

#[test]
fn open_into_hands_out_exactly_what_open_returns() {
    for total in [200_000, 3 * FRAME_LEN + 12_345] {
        let payload = Payload::new(files(total), &Limits::DEFAULT).unwrap();
        let sealed = seal_with(&payload, &[&key()]);
        let opened = pack_format::open(&sealed, &ring(&key()), &Limits::DEFAULT).unwrap();
        let (unpacked, record) = open_into(&sealed);
        let unpacked = unpacked.unwrap();
        assert_eq!(unpacked.header, opened.header);
        assert_eq!(unpacked.index, payload.index());
        assert_eq!(
            record.index.lock().unwrap().as_ref(),
            Some(&payload.index())
        );
        assert!(!record.file_before_index.load(Ordering::SeqCst));
        assert_eq!(
            *record.files.lock().unwrap(),
            opened.payload.into_files(),
            "{total} bytes"
        );
    }
}

/// A tar of many benign files (several frames) with `hostile` entries at the end, under
/// an index of `listed` files.
fn big_tar_with(listed: &[(&str, &[u8])], hostile: &[(&str, &[u8])]) -> Vec<u8> {
    let benign = files(2 * FRAME_LEN);
    let mut index: Vec<serde_json::Value> = benign
        .iter()
        .map(|f| {
            serde_json::json!({"path": f.path, "size": f.bytes.len(), "sha256": pack_format::sha256_hex(&f.bytes)})
        })
        .collect();
    for (path, bytes) in listed {
        index.push(serde_json::json!({"path": path, "size": bytes.len(), "sha256": pack_format::sha256_hex(bytes)}));
    }
    let index = serde_json::to_vec(&serde_json::json!({"format": 1, "files": index})).unwrap();
    let mut builder = tar::Builder::new(Vec::new());
    let mut append = |path: &str, bytes: &[u8]| {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o644);
        header.set_size(bytes.len() as u64);
        builder.append_data(&mut header, path, bytes).unwrap();
    };
    append(INDEX_PATH, &index);
    for file in &benign {
        append(&file.path, &file.bytes);
    }
    for (path, bytes) in hostile {
        append(path, bytes);
    }
    builder.into_inner().unwrap()
}

/// `open` and `open_into` both refuse `tar`, and nothing `open_into` handed out is one
/// of the `bad` paths.
fn refused(tar: &[u8], bad: &[&str]) -> FormatError {
    refused_sealed(&seal_tar(tar), bad)
}

/// `open` and `open_into` both refuse `sealed`, nothing `open_into` handed out is one of the
/// `bad` paths, and nothing went out twice (`Record` panics on that).
fn refused_sealed(sealed: &[u8], bad: &[&str]) -> FormatError {
    assert!(pack_format::open(sealed, &ring(&key()), &Limits::DEFAULT).is_err());
    let (result, record) = open_into(sealed);
    let err = result.unwrap_err();
    for path in bad {
        assert!(
            !record.files.lock().unwrap().contains_key(*path),
            "{path} was handed out"
        );
    }
    err
}

#[test]
fn a_file_that_does_not_match_the_index_is_never_handed_out() {
    let tar = big_tar_with(&[("z/late.md", b"original")], &[("z/late.md", b"modified")]);
    let err = refused(&tar, &["z/late.md"]);
    assert!(matches!(err, FormatError::HashMismatch { .. }), "{err}");

    let tar = big_tar_with(
        &[("z/late.md", b"same length")],
        &[("z/late.md", b"longer than that")],
    );
    let err = refused(&tar, &["z/late.md"]);
    assert!(matches!(err, FormatError::SizeMismatch { .. }), "{err}");
}

#[test]
fn extra_missing_and_duplicate_files_fail_the_pack() {
    let tar = big_tar_with(&[], &[("z/smuggled.md", b"not listed")]);
    let err = refused(&tar, &["z/smuggled.md"]);
    assert!(matches!(err, FormatError::IndexMismatch { .. }), "{err}");

    let tar = big_tar_with(&[("z/missing.md", b"listed only")], &[]);
    let err = refused(&tar, &[]);
    assert!(matches!(err, FormatError::IndexMismatch { .. }), "{err}");

    let tar = big_tar_with(
        &[("z/twice.md", b"one")],
        &[("z/twice.md", b"one"), ("z/twice.md", b"one")],
    );
    let err = refused(&tar, &[]);
    assert_duplicate_path(&err);
}

#[test]
fn an_unsafe_path_in_the_index_stops_before_the_destination_sees_it() {
    let tar = big_tar_with(&[("../escape.md", b"x")], &[]);
    let (result, record) = open_into(&seal_tar(&tar));
    let err = result.unwrap_err();
    assert!(matches!(err, FormatError::UnsafeEntry { .. }), "{err}");
    assert!(record.index.lock().unwrap().is_none());
    assert!(record.files.lock().unwrap().is_empty());
}

#[test]
fn a_frame_that_does_not_decode_fails_the_pack() {
    let tar = big_tar_with(&[], &[]);
    let mut compressed = compress(&tar, 1).unwrap();
    // Somewhere in the middle of the second half: inside a later frame's data.
    let at = compressed.len() * 3 / 4;
    compressed[at] ^= 0x55;
    compressed[at + 1] ^= 0x55;
    let sealed = seal_payload(compressed);
    assert!(pack_format::open(&sealed, &ring(&key()), &Limits::DEFAULT).is_err());
    assert!(open_into(&sealed).0.is_err());
}

/// Fails on one file, or panics on it.
struct Refuse {
    path: String,
    panic: bool,
}

impl Unpack for Refuse {
    fn index(&self, _files: &[IndexEntry]) -> std::io::Result<()> {
        Ok(())
    }

    fn file(&self, path: &str, _bytes: &[u8]) -> std::io::Result<()> {
        if path == self.path {
            assert!(!self.panic, "destination broke on {path}");
            return Err(std::io::Error::other("disk full"));
        }
        Ok(())
    }
}

#[test]
fn a_destination_that_fails_fails_the_pack_with_the_file_named() {
    let payload = Payload::new(files(2 * FRAME_LEN), &Limits::DEFAULT).unwrap();
    let sealed = seal_with(&payload, &[&key()]);
    let victim = payload.files().keys().nth(40).unwrap().clone();
    let out = Refuse {
        path: victim.clone(),
        panic: false,
    };
    let err = pack_format::open_into(&sealed, &ring(&key()), &Limits::DEFAULT, &out).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains(&victim) && message.contains("disk full"),
        "{message}"
    );

    // A destination that panics passes the panic on instead of leaving the reader waiting.
    let out = Refuse {
        path: victim,
        panic: true,
    };
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pack_format::open_into(&sealed, &ring(&key()), &Limits::DEFAULT, &out)
    }));
    assert!(panicked.is_err());
}

// --- open_file_into: the same pack read from its file as it is decoded ---------------------

/// `sealed` written to a file of its own.
fn pack_file(sealed: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.pack");
    std::fs::write(&path, sealed).unwrap();
    (dir, path)
}

fn open_file_into(
    path: &std::path::Path,
    out: &impl Unpack,
) -> Result<pack_format::Unpacked, FormatError> {
    let file = std::fs::File::open(path).unwrap();
    pack_format::open_file_into(&file, &ring(&key()), &Limits::DEFAULT, out)
}

/// A pack of many segments (about 50 MB of text), sealed once for the tests below.
fn many_segments() -> &'static [u8] {
    static SEALED: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    SEALED.get_or_init(|| {
        let payload = Payload::new(files(6 * FRAME_LEN), &Limits::DEFAULT).unwrap();
        let sealed = seal_with(&payload, &[&key()]);
        let header = pack_format::read_header(&sealed, &Limits::DEFAULT)
            .unwrap()
            .0;
        assert!(header.segments.len() >= 8, "{}", header.segments.len());
        sealed
    })
}

#[test]
fn open_file_into_hands_out_exactly_what_open_into_does() {
    // A small pack (read whole, then opened in memory) and one of many segments (each read
    // by the thread that decrypts it).
    let small = seal_with(
        &Payload::new(files(200_000), &Limits::DEFAULT).unwrap(),
        &[&key()],
    );
    for sealed in [small.as_slice(), many_segments()] {
        let (_dir, path) = pack_file(sealed);
        let (in_memory, expected) = open_into(sealed);
        let in_memory = in_memory.unwrap();
        let record = Record::default();
        let from_file = open_file_into(&path, &record).unwrap();
        assert_eq!(from_file.header, in_memory.header);
        assert_eq!(from_file.index, in_memory.index);
        assert!(!record.file_before_index.load(Ordering::SeqCst));
        assert_eq!(
            *record.files.lock().unwrap(),
            *expected.files.lock().unwrap()
        );
    }
}

#[test]
fn a_byte_changed_in_a_late_segment_of_the_file_is_refused_as_tampered() {
    let mut sealed = many_segments().to_vec();
    let at = sealed.len() - 100;
    sealed[at] ^= 1;
    let (_dir, path) = pack_file(&sealed);
    let result = open_file_into(&path, &Record::default());
    assert!(
        matches!(result, Err(FormatError::Tampered)),
        "{:?}",
        result.map(|u| u.index.len())
    );
}

#[test]
fn a_pack_file_cut_short_is_refused_before_anything_is_handed_out() {
    let sealed = many_segments();
    let (_dir, path) = pack_file(&sealed[..sealed.len() - 1]);
    let record = Record::default();
    let result = open_file_into(&path, &record);
    assert!(
        matches!(result, Err(FormatError::Truncated { .. })),
        "{:?}",
        result.map(|u| u.index.len())
    );
    assert!(record.index.lock().unwrap().is_none());
}

#[test]
fn a_pack_file_with_bytes_after_its_end_is_refused() {
    let mut sealed = many_segments().to_vec();
    sealed.push(0);
    let (_dir, path) = pack_file(&sealed);
    let result = open_file_into(&path, &Record::default());
    assert!(
        matches!(result, Err(FormatError::SizeMismatch { .. })),
        "{:?}",
        result.map(|u| u.index.len())
    );
}

/// Cuts the pack's file down to its first 64 KiB when it is handed the index, as a
/// process rewriting the file under a reader would.
struct CutsThePack {
    path: std::path::PathBuf,
}

impl Unpack for CutsThePack {
    fn index(&self, _files: &[IndexEntry]) -> std::io::Result<()> {
        let file = std::fs::OpenOptions::new().write(true).open(&self.path)?;
        file.set_len(64 * 1024)
    }

    fn file(&self, _path: &str, _bytes: &[u8]) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_pack_file_that_gets_shorter_while_it_is_read_fails_saying_so() {
    // The decoding threads are at most a few segments ahead of the `tar` reader, so the
    // later segments are read after the cut.
    let (_dir, path) = pack_file(many_segments());
    let result = open_file_into(&path, &CutsThePack { path: path.clone() });
    match result {
        Err(FormatError::Io { source, .. }) => {
            assert!(source.to_string().contains("got shorter"), "{source}")
        }
        other => panic!("{:?}", other.map(|u| u.index.len())),
    }
}

/// A pack as `packer` cuts it (every frame starting at an entry), whose index lies about
/// one file: the thread that decodes the file's frame hashes it there, and the check still
/// compares that digest with the index.
#[test]
fn a_file_hashed_where_its_frame_was_decoded_is_still_checked_against_the_index() {
    let payload = Payload::new(files(3 * FRAME_LEN), &Limits::DEFAULT).unwrap();
    let compressed = payload.to_tar_zst(0, 1).unwrap();
    // The first frame holds the index entry alone; the files follow in frames of their own.
    let index_len = zstd::zstd_safe::find_frame_compressed_size(&compressed).unwrap();
    let (index_frame, file_frames) = compressed.split_at(index_len);
    assert!(file_frames.len() > FRAME_LEN / 8, "several file frames");
    let mut index_entry = zstd::stream::decode_all(index_frame).unwrap();
    let victim = payload.index()[0].clone();
    let other = pack_format::sha256_hex(b"something else");
    let at = index_entry
        .windows(victim.sha256.len())
        .position(|w| w == victim.sha256.as_bytes())
        .unwrap();
    index_entry[at..at + other.len()].copy_from_slice(other.as_bytes());
    let mut lying = compress(&index_entry, 1).unwrap();
    lying.extend_from_slice(file_frames);

    let (result, record) = open_into(&seal_payload(lying));
    let err = result.unwrap_err();
    assert!(
        matches!(&err, FormatError::HashMismatch { what, .. } if *what == victim.path),
        "{err}"
    );
    assert!(
        !record.files.lock().unwrap().contains_key(&victim.path),
        "{} was handed out",
        victim.path
    );
}

// --- files handed out by the threads that decode their frames ------------------------------

/// `tar` compressed as `packer` cuts it: the index entry alone in the first frame, then
/// frames of whole entries of about 1 MiB, so that the threads that decode them find the
/// files inside and hand out early the ones that match the index.
fn cut_at_entries(tar: &[u8]) -> Vec<u8> {
    let mut starts = vec![0];
    let mut at = 0;
    while at + 512 <= tar.len() {
        let header = tar::Header::from_byte_slice(&tar[at..at + 512]);
        if header.as_bytes().iter().all(|&b| b == 0) {
            break; // the two zero blocks go with the last frame
        }
        at += 512 + (header.entry_size().unwrap() as usize).next_multiple_of(512);
        if starts.len() == 1 || at - starts[starts.len() - 1] >= 1024 * 1024 {
            starts.push(at);
        }
    }
    starts.retain(|&start| start < at);
    starts.push(tar.len());
    let mut compressed = Vec::new();
    for pair in starts.windows(2) {
        compressed.extend(compress(&tar[pair[0]..pair[1]], 1).unwrap());
    }
    compressed
}

/// [`refused_sealed`] of `tar` cut at its entries, in many frames.
fn refused_cut_at_entries(tar: &[u8], bad: &[&str]) -> FormatError {
    let sealed = seal_payload(cut_at_entries(tar));
    let header = pack_format::read_header(&sealed, &Limits::DEFAULT)
        .unwrap()
        .0;
    assert!(header.segments.len() > 8, "{}", header.segments.len());
    refused_sealed(&sealed, bad)
}

#[test]
fn a_tar_cut_at_its_entries_opens_into_exactly_its_files() {
    let tar = big_tar_with(&[("z/late.md", b"listed")], &[("z/late.md", b"listed")]);
    let sealed = seal_payload(cut_at_entries(&tar));
    let opened = pack_format::open(&sealed, &ring(&key()), &Limits::DEFAULT).unwrap();
    let (unpacked, record) = open_into(&sealed);
    unpacked.unwrap();
    assert_eq!(*record.files.lock().unwrap(), opened.payload.into_files());
}

#[test]
fn a_file_listed_once_and_found_twice_goes_out_once_and_fails_the_pack() {
    // The same bytes both times: each copy matches the index, the second is still refused.
    let tar = big_tar_with(
        &[("z/twice.md", b"same bytes")],
        &[("z/twice.md", b"same bytes"), ("z/twice.md", b"same bytes")],
    );
    let err = refused_cut_at_entries(&tar, &[]);
    assert_duplicate_path(&err);
}

#[test]
fn a_file_whose_bytes_differ_from_the_index_is_not_handed_out_by_its_decoding_thread() {
    let tar = big_tar_with(&[("z/late.md", b"original")], &[("z/late.md", b"modified")]);
    let err = refused_cut_at_entries(&tar, &["z/late.md"]);
    assert!(matches!(err, FormatError::HashMismatch { .. }), "{err}");
}

#[test]
fn a_bad_frame_after_files_went_out_early_still_fails_the_pack() {
    let tar = big_tar_with(&[], &[]);
    let mut compressed = cut_at_entries(&tar);
    // The last frame's last bytes: its checksum and the end of its data.
    let end = compressed.len();
    compressed[end - 40..].iter_mut().for_each(|b| *b ^= 0x55);
    let sealed = seal_payload(compressed);
    let (result, record) = open_into(&sealed);
    assert!(result.is_err());
    // Files of earlier frames did go out: the destination must throw them away (as
    // `packer extract` does with its staging directory).
    assert!(!record.files.lock().unwrap().is_empty());
}

#[test]
fn an_index_digest_in_uppercase_matches_no_file_wherever_it_is_checked() {
    let tar = big_tar_with(&[("z/late.md", b"upper")], &[("z/late.md", b"upper")]);
    let lower = pack_format::sha256_hex(b"upper");
    let mut tar = tar;
    let at = tar
        .windows(lower.len())
        .position(|w| w == lower.as_bytes())
        .unwrap();
    tar[at..at + lower.len()].make_ascii_uppercase();
    let err = refused_cut_at_entries(&tar, &["z/late.md"]);
    assert!(
        matches!(&err, FormatError::HashMismatch { what, .. } if what == "z/late.md"),
        "{err}"
    );
}

/// Many files, then a file whose GNU long name is one path of the index (returned) while
/// its own header block names another path the index lists with the same bytes, then 6 MB
/// of other files, then (if `then_aliased`) a file at that other path. Cut at its entries,
/// the files in between put that last file more frames after the alias than the decoding
/// threads may take ahead of the reader: the alias's frame is decoded, and its file handed
/// out, first.
fn tar_with_alias(then_aliased: bool) -> (Vec<u8>, String, Vec<u8>) {
    let long = format!("z/{}/alias.md", "deep".repeat(30));
    let bytes = text(77, 3 * 1024 * 1024);
    let between: Vec<(String, Vec<u8>)> = (0..60)
        .map(|i| (format!("zz/between-{i}.md"), text(1_000 + i, 100_000)))
        .collect();
    let mut listed: Vec<(&str, &[u8])> = vec![(&long, &bytes), (ALIASED, &bytes)];
    listed.extend(
        between
            .iter()
            .map(|(path, bytes)| (path.as_str(), bytes.as_slice())),
    );
    let mut tar = big_tar_with(&listed, &[]);
    // `big_tar_with` ended the archive with two zero blocks: take them off, append the
    // long name and the entries, and end it again.
    tar.truncate(tar.len() - 1024);
    let mut builder = tar::Builder::new(tar);
    let mut name = tar::Header::new_gnu();
    name.set_entry_type(tar::EntryType::GNULongName);
    name.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
    name.set_mode(0o644);
    name.set_size(long.len() as u64 + 1);
    name.set_cksum();
    builder
        .append(&name, [long.as_bytes(), b"\0"].concat().as_slice())
        .unwrap();
    let mut append = |path: &str, bytes: &[u8]| {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o644);
        header.set_size(bytes.len() as u64);
        header.set_path(path).unwrap();
        header.set_cksum();
        builder.append(&header, bytes).unwrap();
    };
    // The alias: its header names ALIASED; the reader reads the long name.
    append(ALIASED, &bytes);
    for (path, bytes) in &between {
        append(path, bytes);
    }
    if then_aliased {
        append(ALIASED, &bytes);
    }
    (builder.into_inner().unwrap(), long, bytes)
}

/// The path the alias's header block names.
const ALIASED: &str = "z/short.md";

/// The thread that decodes the alias's frame walks the header blocks, hands the file out
/// under the header's name, and drops its bytes from the frame it leaves for the reader; the
/// reader reads the long name, needs the bytes after all, and gets them from the frame
/// decoded again. Both paths go out once, with the bytes `open` returns, from a pack in
/// memory and from a pack in a file.
#[test]
fn a_file_the_reader_names_otherwise_than_its_decoding_thread_comes_from_its_frame_decoded_again() {
    let (tar, long, bytes) = tar_with_alias(true);
    let opened = pack_format::open(&seal_tar(&tar), &ring(&key()), &Limits::DEFAULT).unwrap();
    let files = opened.payload.into_files();
    assert_eq!(files.get(&long), Some(&bytes));
    assert_eq!(files.get(ALIASED), Some(&bytes));

    let sealed = seal_payload(cut_at_entries(&tar));
    let (unpacked, record) = open_into(&sealed);
    unpacked.unwrap();
    assert_eq!(*record.files.lock().unwrap(), files);

    let (_dir, path) = pack_file(&sealed);
    let record = Record::default();
    open_file_into(&path, &record).unwrap();
    assert_eq!(*record.files.lock().unwrap(), files);
}
