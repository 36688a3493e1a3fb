//! A lying header is rejected before anything is allocated for what it claims. This file
//! counts heap allocations, so it keeps every check in one test function.

// A counting global allocator is the one place the workspace needs `unsafe`.
#![allow(unsafe_code)]

mod common;
#[path = "../../tests/shared/largest_alloc.rs"]
mod largest_alloc;

use common::*;
use largest_alloc::LargestAlloc;
use pack_format::pack::{MAGIC, PREFIX_LEN};
use pack_format::{ContentKey, FormatError, Limits, pack};

#[global_allocator]
static ALLOCATOR: LargestAlloc = LargestAlloc;

fn with_header_json(json: &serde_json::Value, tail: usize) -> Vec<u8> {
    let text = serde_json::to_vec(json).unwrap();
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(&text);
    out.extend(std::iter::repeat_n(0u8, tail));
    out
}

#[test]
fn lying_headers_are_rejected_without_large_allocations() {
    let key = ContentKey::from_parts("k", [3u8; 32]).unwrap();
    let sealed = seal_with(&small_payload(), &[&key]);
    let (header, _) = pack::read_header(&sealed, &Limits::DEFAULT).unwrap();
    let mut claim = serde_json::to_value(&header).unwrap();

    largest_alloc::reset();

    // The payload length field claims 4 GiB.
    claim["plaintext_len"] = serde_json::json!(4u64 * 1024 * 1024 * 1024);
    let bytes = with_header_json(&claim, 64);
    let err = pack::open(&bytes, &ring(&key), &Limits::DEFAULT).unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::TooLarge {
                found: 4_294_967_296,
                ..
            }
        ),
        "{err}"
    );

    // The header length field claims 4 GiB.
    let mut bytes = sealed.clone();
    bytes[MAGIC.len()..PREFIX_LEN].copy_from_slice(&u32::MAX.to_le_bytes());
    let err = pack::open(&bytes, &ring(&key), &Limits::DEFAULT).unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::TooLarge {
                what: "sealed pack header",
                ..
            }
        ),
        "{err}"
    );

    // A payload length that does not match the bytes present.
    claim["plaintext_len"] = serde_json::json!(1_000_000);
    claim["segments"] = serde_json::json!([{"len": 1_000_000, "tar_len": 2_000_000}]);
    let bytes = with_header_json(&claim, 10);
    let err = pack::open(&bytes, &ring(&key), &Limits::DEFAULT).unwrap_err();
    assert!(matches!(err, FormatError::Truncated { .. }), "{err}");

    // Truncated packs of every length fail cleanly.
    for cut in [0, 3, PREFIX_LEN - 1, PREFIX_LEN + 5, sealed.len() - 1] {
        assert!(
            pack::open(&sealed[..cut], &ring(&key), &Limits::DEFAULT).is_err(),
            "cut at {cut}"
        );
    }

    let largest = largest_alloc::largest();
    assert!(
        largest < 1024 * 1024,
        "largest allocation was {largest} bytes"
    );

    // Segments that do not add up to the payload length.
    claim["segments"] = serde_json::json!([{"len": 999_999, "tar_len": 2_000_000}]);
    let bytes = with_header_json(&claim, 1_000_016);
    let err = pack::open(&bytes, &ring(&key), &Limits::DEFAULT).unwrap_err();
    assert!(matches!(err, FormatError::Malformed { .. }), "{err}");

    // A segment that claims 4 GiB of tar: over the decompression budget, refused before
    // anything is decrypted or allocated for it (the pack itself is 1 MB: the test's own).
    claim["segments"] = serde_json::json!([{"len": 1_000_000, "tar_len": 4u64 << 30}]);
    let bytes = with_header_json(&claim, 1_000_016);
    largest_alloc::reset();
    let err = pack::open(&bytes, &ring(&key), &Limits::DEFAULT).unwrap_err();
    let largest = largest_alloc::largest();
    assert!(
        largest < 64 * 1024,
        "largest allocation was {largest} bytes"
    );
    assert!(
        matches!(err, FormatError::DecompressionBomb { .. }),
        "{err}"
    );

    // Ten thousand segments: over the segment limit (a header that long is over the
    // default header limit too; a reader with a larger one still refuses the count).
    let many: Vec<_> = (0..10_000)
        .map(|_| serde_json::json!({"len": 100, "tar_len": 100}))
        .collect();
    claim["plaintext_len"] = serde_json::json!(1_000_000);
    claim["segments"] = serde_json::Value::Array(many);
    let bytes = with_header_json(&claim, 1_160_000);
    let roomy = Limits {
        max_header_len: 1 << 20,
        ..Limits::DEFAULT
    };
    let err = pack::open(&bytes, &ring(&key), &roomy).unwrap_err();
    assert!(
        matches!(&err, FormatError::Malformed { reason, .. } if reason.contains("1-4096 segments")),
        "{err}"
    );

    // Not a pack at all.
    let err = pack::open(b"GIF89a....................", &ring(&key), &Limits::DEFAULT).unwrap_err();
    assert!(matches!(err, FormatError::BadMagic { .. }), "{err}");

    // A pack larger than the sealed-size limit is refused before parsing.
    let tight = Limits {
        max_sealed_len: 100,
        ..Limits::DEFAULT
    };
    let err = pack::open(&sealed, &ring(&key), &tight).unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::TooLarge {
                what: "sealed pack",
                ..
            }
        ),
        "{err}"
    );
}
