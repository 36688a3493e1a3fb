//! `pack::read_header` on arbitrary bytes: never panics, allocates only what the input
//! justifies, and whatever it accepts is self-consistent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pack_format::pack::{MAGIC, PREFIX_LEN};
use pack_format_fuzz::{AllocGuard, LIMITS};

fuzz_target!(|data: &[u8]| {
    let guard = AllocGuard::start("read_header");
    let result = pack_format::read_header(data, &LIMITS);
    guard.check(data.len());
    let Ok((header, header_len)) = result else {
        return;
    };
    assert!(data.starts_with(MAGIC));
    assert!(header_len >= PREFIX_LEN && header_len <= data.len());
    assert!(header_len - PREFIX_LEN <= LIMITS.max_header_len);
    // The header accounts for every byte: header, ciphertext, a 16-byte tag per segment
    // (format 1: one tag for the whole payload).
    let tags = if header.format == pack_format::pack::FORMAT_V1 {
        assert!(header.segments.is_empty());
        1
    } else {
        assert_eq!(header.format, pack_format::FORMAT_VERSION);
        let segments = header.segments.len();
        assert!((1..=pack_format::pack::MAX_SEGMENTS).contains(&segments));
        assert_eq!(
            header.segments.iter().map(|s| s.len).sum::<u64>(),
            header.plaintext_len
        );
        assert!(header.segments.iter().all(|s| s.len > 0));
        // Within the decompression budget before anything is decrypted.
        assert!(header.tar_len().unwrap() <= LIMITS.decompressed_budget(header.plaintext_len));
        segments as u64
    };
    assert_eq!(
        data.len() as u64,
        header_len as u64 + header.plaintext_len + 16 * tags
    );
    assert!((1..=16).contains(&header.key_slots.len()));
    pack_format::validate_name("pack", &header.name).expect("accepted header has a valid name");
});
