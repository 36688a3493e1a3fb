//! `pack::open` with a fixed content key.
//!
//! Input that starts with the pack magic is opened as it is (header, key slots, the
//! authentication failure paths). Anything else is taken as a decrypted payload: it is
//! sealed for the fixed key and opened, which drives the fuzzer's bytes through
//! decryption into decompression and untar, and `open` must then agree exactly with
//! `Payload::from_tar_zst` on the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pack_format::pack::{MAGIC, SealInput, seal_compressed};
use pack_format::{FormatError, Payload};
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

    let version = semver::Version::new(1, 0, 0);
    let empty = Payload::default();
    let input = SealInput {
        name: "fuzz",
        version: &version,
        schema: 1,
        payload: &empty,
        mtime: 0,
        zstd_level: 3,
    };
    let key = content_key();
    let sealed = seal_compressed(&input, data.to_vec(), &[&key]).expect("sealing never fails");

    let guard = AllocGuard::start("open (sealed fuzz payload)");
    let opened = pack_format::open(&sealed, keys, &LIMITS);
    guard.check(sealed.len() + decompressed_budget(data.len()));
    let direct = Payload::from_tar_zst(data, &LIMITS);
    match (opened, direct) {
        (Ok(opened), Ok(direct)) => {
            assert_eq!(opened.payload, direct);
            assert_eq!(opened.header.name, "fuzz");
            assert_eq!(opened.header.plaintext_len, data.len() as u64);
        }
        // Too big to be a pack under these limits: the header check refuses it first.
        (Err(FormatError::TooLarge { .. }), _) if sealed.len() as u64 > LIMITS.max_sealed_len => {}
        (Err(_), Err(_)) => {}
        (opened, direct) => panic!(
            "open and from_tar_zst disagree on the same payload: open {:?}, direct {:?}",
            opened.map(|o| o.payload.len()),
            direct.map(|p| p.len())
        ),
    }
});
