//! Hostile payloads: path traversal, links, devices, bombs and lying headers are rejected
//! within the limits.

use crate::common;

use common::*;
use pack_format::payload::INDEX_PATH;
use pack_format::{ContentKey, FormatError, Limits, Payload, SealInput, pack};
use pack_format::{compress, decompress};

/// Writes a tar by hand so that names the `tar` crate would refuse (`..`, absolute) can be
/// produced. `entries` are (name, type, data, link target).
type RawEntry<'a> = (&'a [u8], tar::EntryType, &'a [u8], &'a [u8]);

fn raw_tar(entries: &[RawEntry<'_>]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, kind, data, link) in entries {
        let mut header = tar::Header::new_old();
        {
            let old = header.as_old_mut();
            old.name[..name.len()].copy_from_slice(name);
            old.linkname[..link.len()].copy_from_slice(link);
        }
        header.set_entry_type(*kind);
        header.set_mode(0o644);
        header.set_size(data.len() as u64);
        header.set_cksum();
        builder.append(&header, *data).unwrap();
    }
    builder.into_inner().unwrap()
}

/// A valid index for the files that follow, so only the hostile entry can be the reason.
fn index_for(files: &[(&str, &[u8])]) -> Vec<u8> {
    let entries: Vec<serde_json::Value> = files
        .iter()
        .map(|(path, bytes)| {
            serde_json::json!({"path": path, "size": bytes.len(), "sha256": pack_format::sha256_hex(bytes)})
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({"format": 1, "files": entries})).unwrap()
}

fn reject(entry_name: &[u8], kind: tar::EntryType, link: &[u8]) -> FormatError {
    let name = String::from_utf8_lossy(entry_name).into_owned();
    let data: &[u8] = if kind == tar::EntryType::Regular {
        b"x"
    } else {
        b""
    };
    let index = index_for(&[(&name, data)]);
    let tar = raw_tar(&[
        (INDEX_PATH.as_bytes(), tar::EntryType::Regular, &index, b""),
        (entry_name, kind, data, link),
    ]);
    let err = Payload::from_tar(&tar, &Limits::DEFAULT).unwrap_err();
    // The same bytes inside a properly sealed pack are rejected by `open` too.
    let key = ContentKey::from_parts("k", [9u8; 32]).unwrap();
    let version = semver::Version::new(1, 0, 0);
    let empty = Payload::default();
    let input = SealInput {
        format: pack_format::FORMAT_VERSION,
        name: "evil",
        version: &version,
        schema: 1,
        payload: &empty,
        mtime: 0,
        zstd_level: 3,
    };
    let sealed = pack::seal_compressed(&input, compress(&tar, 3).unwrap(), &[&key]).unwrap();
    let open_err = pack::open(&sealed, &ring(&key), &Limits::DEFAULT).unwrap_err();
    assert_eq!(open_err.to_string(), err.to_string());
    // And by `open_into`, before handing anything out.
    let into_err =
        pack_format::open_into(&sealed, &ring(&key), &Limits::DEFAULT, &Nowhere).unwrap_err();
    assert_eq!(into_err.to_string(), err.to_string());
    err
}

/// A destination that must never be reached.
struct Nowhere;

impl pack_format::Unpack for Nowhere {
    fn index(&self, _files: &[pack_format::IndexEntry]) -> std::io::Result<()> {
        Ok(())
    }

    fn file(&self, path: &str, _bytes: &[u8]) -> std::io::Result<()> {
        panic!("{path} was handed out from a hostile payload")
    }
}

#[test]
fn parent_directory_components_are_rejected() {
    for name in [
        &b"../escape.hbs"[..],
        b"a/../../escape.hbs",
        b"a/./b.hbs",
        b"a//b.hbs",
    ] {
        let err = reject(name, tar::EntryType::Regular, b"");
        assert!(matches!(err, FormatError::UnsafeEntry { .. }), "{err}");
    }
}

#[test]
fn absolute_paths_are_rejected() {
    let err = reject(b"/etc/cron.d/evil", tar::EntryType::Regular, b"");
    assert!(
        matches!(
            err,
            FormatError::UnsafeEntry {
                reason: "absolute path",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn links_devices_fifos_and_directories_are_rejected() {
    let cases = [
        (tar::EntryType::Symlink, "symbolic links"),
        (tar::EntryType::Link, "hard links"),
        (tar::EntryType::Char, "device"),
        (tar::EntryType::Block, "device"),
        (tar::EntryType::Fifo, "FIFO"),
        (tar::EntryType::Directory, "directory"),
    ];
    for (kind, word) in cases {
        let err = reject(b"agents/x.hbs", kind, b"/etc/passwd");
        match &err {
            FormatError::UnsafeEntry { reason, .. } => {
                assert!(reason.contains(word), "{kind:?}: {err}")
            }
            other => panic!("{kind:?}: expected UnsafeEntry, got {other}"),
        }
    }
}

#[test]
fn non_utf8_paths_are_rejected() {
    let err = reject(b"agents/\xff.hbs", tar::EntryType::Regular, b"");
    assert!(
        matches!(
            err,
            FormatError::UnsafeEntry {
                reason: "path is not UTF-8",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_file_not_in_the_index_or_with_a_wrong_hash_is_rejected() {
    let index = index_for(&[("a.hbs", b"original")]);
    let tar = raw_tar(&[
        (INDEX_PATH.as_bytes(), tar::EntryType::Regular, &index, b""),
        (b"a.hbs", tar::EntryType::Regular, b"modified", b""),
    ]);
    let err = Payload::from_tar(&tar, &Limits::DEFAULT).unwrap_err();
    assert!(matches!(err, FormatError::HashMismatch { .. }), "{err}");

    let tar = raw_tar(&[
        (INDEX_PATH.as_bytes(), tar::EntryType::Regular, &index, b""),
        (b"a.hbs", tar::EntryType::Regular, b"original", b""),
        (b"extra.hbs", tar::EntryType::Regular, b"smuggled", b""),
    ]);
    let err = Payload::from_tar(&tar, &Limits::DEFAULT).unwrap_err();
    assert!(matches!(err, FormatError::IndexMismatch { .. }), "{err}");

    let tar = raw_tar(&[(b"a.hbs", tar::EntryType::Regular, b"original", b"")]);
    let err = Payload::from_tar(&tar, &Limits::DEFAULT).unwrap_err();
    assert!(
        matches!(err, FormatError::IndexMismatch { .. }),
        "index must come first: {err}"
    );
}

#[test]
fn an_index_listing_one_file_twice_cannot_hide_another() {
    let a: &[u8] = b"checked";
    let entry = |path: &str, bytes: &[u8]| serde_json::json!({"path": path, "size": bytes.len(), "sha256": pack_format::sha256_hex(bytes)});
    let index = serde_json::to_vec(&serde_json::json!({
        "format": 1,
        "files": [entry("a.hbs", a), entry("a.hbs", a)],
    }))
    .unwrap();
    let tar = raw_tar(&[
        (INDEX_PATH.as_bytes(), tar::EntryType::Regular, &index, b""),
        (b"a.hbs", tar::EntryType::Regular, a, b""),
        (b"b.hbs", tar::EntryType::Regular, b"never hashed", b""),
    ]);
    let err = Payload::from_tar(&tar, &Limits::DEFAULT).unwrap_err();
    assert!(matches!(err, FormatError::IndexMismatch { .. }), "{err}");
    assert!(err.to_string().contains("twice"), "{err}");
}

#[test]
fn duplicate_paths_are_rejected() {
    let index = index_for(&[("a.hbs", b"one")]);
    let tar = raw_tar(&[
        (INDEX_PATH.as_bytes(), tar::EntryType::Regular, &index, b""),
        (b"a.hbs", tar::EntryType::Regular, b"one", b""),
        (b"a.hbs", tar::EntryType::Regular, b"one", b""),
    ]);
    let err = Payload::from_tar(&tar, &Limits::DEFAULT).unwrap_err();
    assert_duplicate_path(&err);
}

#[test]
fn file_count_and_file_size_limits_hold() {
    let files: Vec<_> = (0..20).map(|i| file(&format!("f{i}.hbs"), "x")).collect();
    let payload = Payload::new(files.clone(), &Limits::DEFAULT).unwrap();
    let tar = payload.to_tar(0).unwrap();
    let few = Limits {
        max_file_count: 10,
        ..Limits::DEFAULT
    };
    let err = Payload::from_tar(&tar, &few).unwrap_err();
    assert!(
        matches!(err, FormatError::TooManyFiles { limit: 10, .. }),
        "{err}"
    );
    assert!(matches!(
        Payload::new(files, &few).unwrap_err(),
        FormatError::TooManyFiles { .. }
    ));

    let big = Payload::new([file("big.hbs", &"y".repeat(5000))], &Limits::DEFAULT).unwrap();
    let small_files = Limits {
        max_file_len: 4096,
        ..Limits::DEFAULT
    };
    let err = Payload::from_tar(&big.to_tar(0).unwrap(), &small_files).unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::TooLarge {
                what: "payload file",
                found: 5000,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn long_paths_past_the_limit_are_rejected() {
    let long = format!("{}.hbs", "a".repeat(300));
    let err = Payload::new([file(&long, "x")], &Limits::DEFAULT).unwrap_err();
    assert!(matches!(err, FormatError::UnsafeEntry { .. }), "{err}");
}

#[test]
fn a_zstd_bomb_stops_at_the_ratio_budget() {
    let zeros = vec![0u8; 64 * 1024 * 1024];
    let bomb = compress(&zeros, 19).unwrap();
    assert!(bomb.len() < 64 * 1024, "bomb is {} bytes", bomb.len());
    // A small bomb gets the floor, 16 MiB; a bigger one its ratio's worth.
    let err = decompress(&bomb, &Limits::DEFAULT).unwrap_err();
    assert!(
        matches!(err, FormatError::DecompressionBomb { limit } if limit == 16 * 1024 * 1024),
        "{err}"
    );
    let floorless = Limits {
        min_decompressed_budget: 0,
        ..Limits::DEFAULT
    };
    let err = decompress(&bomb, &floorless).unwrap_err();
    let expected_budget = bomb.len() as u64 * Limits::DEFAULT.max_compression_ratio;
    assert!(
        matches!(err, FormatError::DecompressionBomb { limit } if limit == expected_budget),
        "{err}"
    );
}

#[test]
fn a_pack_of_many_tiny_files_opens_whatever_its_ratio() {
    // 2,000 two-byte files: about 2 MB of `tar`, almost all header blocks, which zstd
    // shrinks far beyond the 250:1 ratio cap.
    let files: Vec<_> = (0..2000)
        .map(|i| file(&format!("many/f{i:04}.txt"), "x\n"))
        .collect();
    let payload = Payload::new(files, &Limits::DEFAULT).unwrap();
    let key = ContentKey::from_parts("k", [4u8; 32]).unwrap();
    let version = semver::Version::new(1, 0, 0);
    let sealed = pack::seal(
        &SealInput {
            format: pack_format::FORMAT_VERSION,
            name: "many",
            version: &version,
            schema: 1,
            payload: &payload,
            mtime: 0,
            zstd_level: 19,
        },
        &[&key],
    )
    .unwrap();
    let (header, _) = pack::read_header(&sealed, &Limits::DEFAULT).unwrap();
    let tar_len = payload.to_tar(0).unwrap().len() as u64;
    assert!(
        tar_len > header.plaintext_len * Limits::DEFAULT.max_compression_ratio,
        "the case needs a ratio past the cap: {tar_len} from {}",
        header.plaintext_len
    );
    let opened = pack::open(&sealed, &ring(&key), &Limits::DEFAULT).unwrap();
    assert_eq!(opened.payload, payload);
}

#[test]
fn the_absolute_decompression_cap_holds_for_ordinary_data() {
    let text: Vec<u8> = (0..4_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let compressed = compress(&text, 3).unwrap();
    let tight = Limits {
        max_decompressed_len: 1024 * 1024,
        ..Limits::DEFAULT
    };
    let err = decompress(&compressed, &tight).unwrap_err();
    assert!(
        matches!(err, FormatError::DecompressionBomb { limit: 1_048_576 }),
        "{err}"
    );
    assert_eq!(decompress(&compressed, &Limits::DEFAULT).unwrap(), text);
}
