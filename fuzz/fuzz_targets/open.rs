//! `pack::open` with a fixed content key.
//!
//! Input that starts with the pack magic is opened as it is (header, key slots, the
//! authentication failure paths). Anything else is taken as a decrypted payload: it is
//! sealed for the fixed key (one segment per zstd frame when every frame declares its size)
//! and opened, which drives the fuzzer's bytes through decryption into decompression and
//! untar. What it opens must agree exactly with `Payload::from_tar_zst` on the same bytes — and
//! so must `open_into`: the same files when both succeed, an error when `open` fails. A
//! sealed payload requires every frame to declare its content size, which a plain zstd
//! stream need not: there `open` may refuse what `from_tar_zst` accepts. And `open` leaves a
//! sealed frame's zstd checksum unchecked (the segment's GCM tag authenticated it), which
//! `from_tar_zst` checks: there `open` may accept what `from_tar_zst` refuses, and must then
//! give what the frames decode to with their checksums ignored.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pack_format::pack::{MAGIC, SealInput, seal_compressed};
use std::collections::BTreeMap;
use std::sync::Mutex;

use pack_format::{FormatError, IndexEntry, Payload, Unpack};
use pack_format_fuzz::{AllocGuard, LIMITS, content_key, content_keys, decompressed_budget};

fuzz_target!(|data: &[u8]| {
    let keys = content_keys();
    if data.starts_with(MAGIC) {
        let guard = AllocGuard::start("open (raw pack)");
        let result = pack_format::open(data, keys, &LIMITS);
        guard.check(data.len() + decompressed_budget(data.len()));
        if let Ok(opened) = result {
            assert_eq!(opened.sha256, pack_format::sha256_hex(data));
        }
        return;
    }

    // A format-2 segment is never empty, so there is no pack of an empty payload.
    if data.is_empty() {
        return;
    }
    let opened = open_sealed(data);
    let direct = Payload::from_tar_zst(data, &LIMITS);
    let sealed_len = seal(data).len() as u64;
    match (opened, direct) {
        (Ok(opened), Ok(direct)) => {
            assert_eq!(opened.payload, direct);
            assert_eq!(opened.header.name, "fuzz");
            assert_eq!(opened.header.plaintext_len, data.len() as u64);
        }
        // Too big to be a pack under these limits: the header check refuses it first.
        (Err(FormatError::TooLarge { .. }), _) if sealed_len > LIMITS.max_sealed_len => {}
        // Frames without a declared size (or skippable frames) are not a format-2 payload.
        (Err(FormatError::Malformed { .. }), Ok(_)) if !every_frame_declares_its_size(data) => {}
        // A checksum that does not match: only the plain stream checks it.
        (Ok(opened), Err(FormatError::Malformed { .. }))
            if decoded_ignoring_checksums(data)
                .and_then(|tar| Payload::from_tar(&tar, &LIMITS).ok())
                .is_some_and(|payload| payload == opened.payload) => {}
        (Err(_), Err(_)) => {}
        (opened, direct) => panic!(
            "open and from_tar_zst disagree on the same payload: open {:?}, direct {:?}",
            opened.map(|o| o.payload.len()),
            direct.map(|p| p.len())
        ),
    }
});

/// Seals `data` as the payload of a pack for the fixed key and opens it with `open` and
/// `open_into`, which must agree: the same files when both succeed, an error when `open`
/// fails.
fn open_sealed(data: &[u8]) -> Result<pack_format::OpenedPack, FormatError> {
    let sealed = seal(data);
    let keys = content_keys();
    let guard = AllocGuard::start("open (sealed fuzz payload)");
    let opened = pack_format::open(&sealed, keys, &LIMITS);
    guard.check(sealed.len() + decompressed_budget(data.len()));
    let record = Record::default();
    let guard = AllocGuard::start("open_into (sealed fuzz payload)");
    let unpacked = pack_format::open_into(&sealed, keys, &LIMITS, &record);
    guard.check(sealed.len() + decompressed_budget(data.len()));
    match (&opened, &unpacked) {
        (Ok(opened), Ok(_)) => {
            assert_eq!(*record.0.lock().unwrap(), *opened.payload.files());
        }
        (Err(_), Err(_)) => {}
        (opened, unpacked) => panic!(
            "open and open_into disagree on the same payload: open {:?}, open_into {:?}",
            opened.as_ref().map(|o| o.payload.len()),
            unpacked.as_ref().map(|u| u.index.len())
        ),
    }
    opened
}

fn seal(data: &[u8]) -> Vec<u8> {
    let version = semver::Version::new(1, 0, 0);
    let empty = Payload::default();
    let input = SealInput {
        format: pack_format::FORMAT_VERSION,
        name: "fuzz",
        version: &version,
        schema: 1,
        payload: &empty,
        mtime: 0,
        zstd_level: 3,
    };
    let key = content_key();
    seal_compressed(&input, data.to_vec(), &[&key]).expect("sealing never fails")
}

/// Keeps what `open_into` hands out.
#[derive(Default)]
struct Record(Mutex<BTreeMap<String, Vec<u8>>>);

impl Unpack for Record {
    fn index(&self, _files: &[IndexEntry]) -> std::io::Result<()> {
        Ok(())
    }

    fn file(&self, path: &str, bytes: &[u8]) -> std::io::Result<()> {
        let old = self
            .0
            .lock()
            .unwrap()
            .insert(path.to_string(), bytes.to_vec());
        assert!(old.is_none(), "{path} handed out twice");
        Ok(())
    }
}

/// The frames of `data` decoded with their checksums left unchecked, as `open` decodes a
/// sealed payload; `None` if they do not decode within the budget.
fn decoded_ignoring_checksums(data: &[u8]) -> Option<Vec<u8>> {
    let mut decompressor = zstd::bulk::Decompressor::new().ok()?;
    decompressor
        .set_parameter(zstd::zstd_safe::DParameter::ForceIgnoreChecksum(true))
        .ok()?;
    decompressor
        .decompress(data, decompressed_budget(data.len()))
        .ok()
}

/// Whether `data` is standard zstd frames only, each declaring its content size: what a
/// format-2 segment must hold.
fn every_frame_declares_its_size(data: &[u8]) -> bool {
    let mut rest = data;
    while !rest.is_empty() {
        if !rest.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            return false;
        }
        let Ok(len) = zstd::zstd_safe::find_frame_compressed_size(rest) else {
            return false;
        };
        if len == 0 || len > rest.len() {
            return false;
        }
        if !matches!(
            zstd::zstd_safe::get_frame_content_size(&rest[..len]),
            Ok(Some(_))
        ) {
            return false;
        }
        rest = &rest[len..];
    }
    true
}
