//! A channel's `sequence` stays at or below `MAX_SEQUENCE` (2^53 − 1): every JSON reader
//! agrees on such numbers, and a channel can never be pushed to a sequence after which no
//! higher one exists.

use crate::common;

use std::io::Cursor;
use std::path::Path;

use common::*;
use pack_format::channel::{self, MAX_SEQUENCE};
use pack_format::{FormatError, Limits, TrustedKeys};

/// Signs `document` bytes the way any minisign signer would, without our own checks, so
/// the reader is tested against a document our signer would refuse to produce.
fn sign_raw(document: &[u8], trusted_comment: &str) -> (String, TrustedKeys) {
    let minisign::KeyPair { pk, sk } = minisign::KeyPair::generate_unencrypted_keypair().unwrap();
    let signature = minisign::sign(
        Some(&pk),
        &sk,
        Cursor::new(document),
        Some(trusted_comment),
        None,
    )
    .unwrap()
    .into_string();
    let mut trusted = TrustedKeys::new();
    trusted
        .add_text(Path::new("test.pub"), &pk.to_box().unwrap().into_string())
        .unwrap();
    (signature, trusted)
}

#[test]
fn the_limit_is_two_to_the_53_minus_one() {
    assert_eq!(MAX_SEQUENCE, 9_007_199_254_740_991);
    // Exactly representable as a double, and the next integer is where doubles start
    // skipping: 2^53 + 1 reads back as 2^53.
    assert_eq!(MAX_SEQUENCE as f64 as u64, MAX_SEQUENCE);
    assert_eq!((MAX_SEQUENCE + 2) as f64 as u64, MAX_SEQUENCE + 1);
}

#[test]
fn a_document_at_the_limit_signs_and_verifies() {
    let signer = signer();
    let signed = signed(&signer, MAX_SEQUENCE);
    let text = String::from_utf8(signed.document.clone()).unwrap();
    assert!(text.contains("\"sequence\": 9007199254740991,"), "{text}");
    let verified = channel::verify(
        &signed.document,
        &signed.signature,
        &signer.trusted,
        now(),
        &Limits::DEFAULT,
    )
    .unwrap();
    assert_eq!(verified.document.sequence, MAX_SEQUENCE);
}

#[test]
fn signing_refuses_a_sequence_over_the_limit() {
    let signer = signer();
    for sequence in [MAX_SEQUENCE + 1, u64::MAX] {
        let err = document(sequence).sign(&signer.key).unwrap_err();
        assert!(
            matches!(
                err,
                FormatError::SequenceOutOfRange { found, limit }
                    if found == sequence && limit == MAX_SEQUENCE
            ),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains(&sequence.to_string()), "{message}");
        assert!(message.contains("9007199254740991"), "{message}");
    }
}

#[test]
fn verify_refuses_a_validly_signed_document_over_the_limit() {
    for sequence in [MAX_SEQUENCE + 1, u64::MAX] {
        let doc = document(sequence);
        let bytes = doc.to_bytes();
        let (signature, trusted) = sign_raw(&bytes, &doc.trusted_comment());
        for result in [
            channel::verify(&bytes, &signature, &trusted, now(), &Limits::DEFAULT),
            channel::verify_ignoring_expiry(&bytes, &signature, &trusted, &Limits::DEFAULT),
        ] {
            let err = result.unwrap_err();
            assert!(
                matches!(
                    err,
                    FormatError::SequenceOutOfRange { found, limit }
                        if found == sequence && limit == MAX_SEQUENCE
                ),
                "{err:?}"
            );
        }
    }
    // The same signing path with a sequence at the limit verifies, so the refusal above is
    // about the number and nothing else.
    let doc = document(MAX_SEQUENCE);
    let bytes = doc.to_bytes();
    let (signature, trusted) = sign_raw(&bytes, &doc.trusted_comment());
    channel::verify(&bytes, &signature, &trusted, now(), &Limits::DEFAULT).unwrap();
}
