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
    // The header accounts for every byte: header, ciphertext, 16-byte tag.
    assert_eq!(
        data.len() as u64,
        header_len as u64 + header.plaintext_len + 16
    );
    assert!((1..=16).contains(&header.key_slots.len()));
    pack_format::validate_name("pack", &header.name).expect("accepted header has a valid name");
});
