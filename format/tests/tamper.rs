//! Any single flipped byte of a sealed pack or of a signed channel document is rejected
//! before anything inside it is returned.

use crate::common;

use common::*;
use pack_format::{ContentKey, Limits, channel, pack};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn flipping_any_byte_of_a_sealed_pack_is_rejected(position in any::<prop::sample::Index>(), bit in 0u8..8) {
        let key = ContentKey::from_parts("k1", [7u8; 32]).unwrap();
        let sealed = seal_with(&small_payload(), &[&key]);
        let mut bad = sealed.clone();
        let at = position.index(bad.len());
        bad[at] ^= 1 << bit;
        let result = pack::open(&bad, &ring(&key), &Limits::DEFAULT);
        prop_assert!(result.is_err(), "flipping bit {} of byte {} of {} was accepted", bit, at, sealed.len());
    }

    #[test]
    fn flipping_any_byte_of_a_channel_document_is_rejected(position in any::<prop::sample::Index>(), bit in 0u8..8) {
        let s = signer();
        let signed = signed(&s, 7);
        let mut bad = signed.document.clone();
        let at = position.index(bad.len());
        bad[at] ^= 1 << bit;
        let result = channel::verify(&bad, &signed.signature, &s.trusted, now(), &Limits::DEFAULT);
        prop_assert!(result.is_err(), "flipping bit {} of document byte {} was accepted", bit, at);
    }

    #[test]
    fn flipping_any_byte_of_a_channel_signature_is_rejected(position in any::<prop::sample::Index>(), bit in 0u8..8) {
        let s = signer();
        let signed = signed(&s, 7);
        let mut bad = signed.signature.clone().into_bytes();
        let at = position.index(bad.len());
        bad[at] ^= 1 << bit;
        // A flip that breaks UTF-8 cannot even be handed over as signature text.
        if let Ok(text) = String::from_utf8(bad) {
            // Flipping the case of a base64 padding-free trailing newline or of the
            // untrusted comment does not change what is signed; those bytes are outside
            // the signature by minisign's design. Everything else must fail.
            let result = channel::verify(&signed.document, &text, &s.trusted, now(), &Limits::DEFAULT);
            let untrusted_comment_len = signed.signature.find('\n').unwrap();
            if at > untrusted_comment_len && result.is_ok() {
                // Whitespace around the lines is trimmed before decoding (minisign trims
                // with Unicode's definition, which includes vertical tab and form feed):
                // only a flip that turned whitespace into other whitespace may pass.
                let changed = char::from(text.as_bytes()[at]);
                let original = char::from(signed.signature.as_bytes()[at]);
                prop_assert!(
                    changed.is_whitespace() && original.is_whitespace(),
                    "flipping bit {} of signature byte {} ({:?} -> {:?}) was accepted", bit, at, original, changed
                );
            }
        }
    }
}

#[test]
fn the_untrusted_comment_is_the_only_part_of_a_signature_that_can_change() {
    let s = signer();
    let signed = signed(&s, 7);
    let edited = signed.signature.replacen(
        "untrusted comment: promptpack",
        "untrusted comment: edited by a mirror",
        1,
    );
    assert_ne!(edited, signed.signature);
    let verified = channel::verify(
        &signed.document,
        &edited,
        &s.trusted,
        now(),
        &Limits::DEFAULT,
    )
    .unwrap();
    assert_eq!(verified.document.sequence, 7);
}
