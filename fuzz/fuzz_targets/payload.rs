//! `Payload::from_tar` and `Payload::from_tar_zst` on arbitrary bytes, under tight limits:
//! never panic, allocate only what the input justifies, and a payload that is accepted
//! is within the limits and survives a write/read round trip unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pack_format::Payload;
use pack_format_fuzz::{AllocGuard, LIMITS, decompressed_budget};

fn check_accepted(payload: &Payload) {
    assert!(payload.len() <= LIMITS.max_file_count);
    assert!(payload.total_size() <= LIMITS.max_decompressed_len);
    for (path, bytes) in payload.files() {
        pack_format::payload::validate_path(path, &LIMITS).expect("accepted path is valid");
        assert!(bytes.len() as u64 <= LIMITS.max_file_len);
    }
    let tar = payload.to_tar(0).expect("an accepted payload writes");
    let again = Payload::from_tar(&tar, &LIMITS).expect("a written payload reads back");
    assert_eq!(&again, payload, "round trip changed the payload");
}

fuzz_target!(|data: &[u8]| {
    let guard = AllocGuard::start("Payload::from_tar");
    let plain = Payload::from_tar(data, &LIMITS);
    guard.check(data.len());
    if let Ok(payload) = &plain {
        check_accepted(payload);
    }

    let guard = AllocGuard::start("Payload::from_tar_zst");
    let compressed = Payload::from_tar_zst(data, &LIMITS);
    guard.check(decompressed_budget(data.len()));
    if let Ok(payload) = &compressed {
        check_accepted(payload);
    }
});
