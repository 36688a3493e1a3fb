//! `channel::verify` and channel-document parsing.
//!
//! Input: one mode byte, then two parts split at the first NUL.
//! - even mode: document bytes and signature-file text, verified as they are (signature
//!   syntax, algorithm, key id, the signature itself);
//! - odd mode: document bytes and a trusted comment; the target signs the document with
//!   the fixed key and that comment, so the fuzzer's document gets past the signature into
//!   JSON parsing, the trusted-comment check, validation and expiry.
//!
//! Either way the document is also parsed on its own, and a document that validates must
//! survive sign → verify and a serialise/parse round trip unchanged.
#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use pack_format::ChannelDocument;
use pack_format::channel::{verify, verify_ignoring_expiry};
use pack_format_fuzz::{
    AllocGuard, LIMITS, NOW_UNIX, minisign_keys, signing_key, split_nul, trusted_keys,
};
use time::OffsetDateTime;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (document, second) = split_nul(rest);
    let second = String::from_utf8_lossy(second);
    let trusted = trusted_keys();
    let now = OffsetDateTime::from_unix_timestamp(NOW_UNIX).expect("valid time");

    let signature = if mode % 2 == 0 {
        second.into_owned()
    } else {
        // minisign refuses comments with line breaks; keep the rest as it is.
        let comment: String = second
            .chars()
            .filter(|c| *c != '\n' && *c != '\r')
            .collect();
        let (secret, public) = minisign_keys();
        match minisign::sign(
            Some(public),
            secret,
            Cursor::new(document),
            Some(&comment),
            None,
        ) {
            Ok(sig) => sig.into_string(),
            Err(_) => return,
        }
    };

    let guard = AllocGuard::start("channel::verify");
    let verified = verify(document, &signature, trusted, now, &LIMITS);
    guard.check(document.len() + signature.len());
    if let Ok(verified) = &verified {
        assert!(verified.document.expires_at > now);
        verified
            .document
            .validate()
            .expect("a verified document validates");
    }

    let Ok(parsed) = serde_json::from_slice::<ChannelDocument>(document) else {
        return;
    };
    let client = semver::Version::new(1, 4, 2);
    let _ = parsed.select(&client, "fuzz-install", time::OffsetDateTime::UNIX_EPOCH);
    if parsed.validate().is_err() {
        assert!(
            verified.is_err(),
            "verify accepted a document that does not validate"
        );
        return;
    }
    // What a publisher signs must verify, and must mean the same document.
    let bytes = parsed.to_bytes();
    if bytes.len() > LIMITS.max_channel_len {
        return;
    }
    let reparsed: ChannelDocument = serde_json::from_slice(&bytes).expect("canonical bytes parse");
    assert_eq!(
        reparsed, parsed,
        "serialise/parse round trip changed the document"
    );
    let signed = parsed.sign(signing_key()).expect("a valid document signs");
    assert_eq!(signed.document, bytes);
    let again = verify_ignoring_expiry(&signed.document, &signed.signature, trusted, &LIMITS)
        .expect("a freshly signed document verifies");
    assert_eq!(again.document, parsed);
});
