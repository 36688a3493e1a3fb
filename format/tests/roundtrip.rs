//! Sealing then opening gives back every file byte for byte, and the payload is
//! deterministic.

use crate::common;

use common::*;
use pack_format::{ContentKey, ContentKeyRing, Limits, Payload, PayloadFile, pack};

/// A 1,000-file tree with nested directories, long paths (past tar's 100-byte name field),
/// multi-byte text, empty files and binary-looking bytes.
fn thousand_files() -> Vec<PayloadFile> {
    (0..1000u32)
        .map(|i| {
            let depth = i % 5;
            let mut path = String::new();
            for d in 0..depth {
                path.push_str(&format!("dir{d}-{}/", i % 7));
            }
            if i % 97 == 0 {
                path.push_str(&"long-segment-".repeat(8));
            }
            path.push_str(&format!("template-{i:04}-é.hbs"));
            let bytes = match i % 4 {
                0 => Vec::new(),
                1 => format!("Prompt {i}: héllo wörld ✓ {{{{persona}}}}\n")
                    .repeat(i as usize % 13 + 1)
                    .into_bytes(),
                2 => (0..(i * 37 % 4096)).map(|b| (b * 31 % 251) as u8).collect(),
                _ => format!("line {i}\r\nwith CRLF\r\n").into_bytes(),
            };
            PayloadFile { path, bytes }
        })
        .collect()
}

#[test]
fn seal_open_reproduces_a_thousand_file_tree_byte_for_byte() {
    let files = thousand_files();
    let payload = Payload::new(files.clone(), &Limits::DEFAULT).unwrap();
    let key = ContentKey::generate();
    let sealed = seal_with(&payload, &[&key]);
    let opened = pack::open(&sealed, &ring(&key), &Limits::DEFAULT).unwrap();
    assert_eq!(opened.payload.len(), 1000);
    for f in &files {
        assert_eq!(
            opened.payload.get(&f.path),
            Some(f.bytes.as_slice()),
            "file {} differs after seal/open",
            f.path
        );
    }
    assert_eq!(opened.header.name, "builtin");
    assert_eq!(opened.header.version, semver::Version::new(1, 2, 3));
    assert_eq!(opened.sha256, pack_format::sha256_hex(&sealed));
}

#[test]
fn same_files_and_mtime_give_an_identical_payload_but_fresh_keys_and_nonces() {
    let payload = Payload::new(thousand_files(), &Limits::DEFAULT).unwrap();
    let key = ContentKey::generate();
    let a = seal_with(&payload, &[&key]);
    let b = seal_with(&payload, &[&key]);
    assert_ne!(a, b, "two seals must use fresh data keys and nonces");
    let keys = ring(&key);
    let (ha, pa) = pack::decrypt(&a, &keys, &Limits::DEFAULT).unwrap();
    let (hb, pb) = pack::decrypt(&b, &keys, &Limits::DEFAULT).unwrap();
    assert_eq!(pa, pb, "payload (tar.zst) must be deterministic");
    assert_ne!(ha.nonce, hb.nonce);
    assert_ne!(ha.key_slots[0].wrapped_key, hb.key_slots[0].wrapped_key);
    // A different mtime changes the payload: the mtime really is in it.
    assert_ne!(
        payload.to_tar_zst(0, 3).unwrap(),
        payload.to_tar_zst(1, 3).unwrap()
    );
}

#[test]
fn a_pack_sealed_for_two_content_keys_opens_with_either() {
    let payload = small_payload();
    let old = ContentKey::generate();
    let new = ContentKey::generate();
    let sealed = seal_with(&payload, &[&old, &new]);
    for key in [&old, &new] {
        let opened = pack::open(&sealed, &ring(key), &Limits::DEFAULT).unwrap();
        assert_eq!(opened.payload, payload);
    }
    let both = ContentKeyRing::new([new.clone(), old.clone()]);
    assert_eq!(
        pack::open(&sealed, &both, &Limits::DEFAULT)
            .unwrap()
            .payload,
        payload
    );
}

#[test]
fn the_index_lists_every_file_with_size_and_sha256() {
    let payload = small_payload();
    let index = payload.index();
    assert_eq!(index.len(), 3);
    let read = index.iter().find(|e| e.path == "tools/read.md").unwrap();
    assert_eq!(read.size, 14);
    assert_eq!(read.sha256, pack_format::sha256_hex(b"Reads a file.\n"));
}

#[test]
fn content_key_file_round_trips() {
    let key = ContentKey::generate();
    let text = key.to_file_text();
    let back = ContentKey::from_file_text(std::path::Path::new("content.key"), &text).unwrap();
    assert_eq!(back.id(), key.id());
    let sealed = seal_with(&small_payload(), &[&key]);
    assert!(pack::open(&sealed, &ring(&back), &Limits::DEFAULT).is_ok());
}
