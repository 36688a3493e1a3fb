//! Each way of holding the wrong key is its own error, so an operator can tell them apart.

use crate::common;

use common::*;
use pack_format::{
    ContentKey, ContentKeyRing, FormatError, Limits, SigningKey, TrustedKeys, channel, pack,
};
use time::Duration;

#[test]
fn wrong_content_key_with_the_right_id() {
    let key = ContentKey::from_parts("shared-id", [1u8; 32]).unwrap();
    let impostor = ContentKey::from_parts("shared-id", [2u8; 32]).unwrap();
    let sealed = seal_with(&small_payload(), &[&key]);
    let err = pack::open(&sealed, &ring(&impostor), &Limits::DEFAULT).unwrap_err();
    assert!(
        matches!(err, FormatError::WrongContentKey { ref key_id } if key_id == "shared-id"),
        "{err}"
    );
}

#[test]
fn unknown_content_key_id() {
    let key = ContentKey::from_parts("release-2026", [1u8; 32]).unwrap();
    let other = ContentKey::from_parts("release-2027", [1u8; 32]).unwrap();
    let sealed = seal_with(&small_payload(), &[&key]);
    let err = pack::open(&sealed, &ring(&other), &Limits::DEFAULT).unwrap_err();
    assert!(
        matches!(err, FormatError::UnknownContentKey { .. }),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("release-2026") && message.contains("release-2027"),
        "{message}"
    );
    let empty = pack::open(&sealed, &ContentKeyRing::default(), &Limits::DEFAULT).unwrap_err();
    assert!(
        matches!(empty, FormatError::UnknownContentKey { .. }),
        "{empty}"
    );
}

#[test]
fn untrusted_signing_key() {
    let publisher = signer();
    let attacker = SigningKey::generate(None).unwrap().key;
    let forged = document(99).sign(&attacker).unwrap();
    let err = channel::verify(
        &forged.document,
        &forged.signature,
        &publisher.trusted,
        now(),
        &Limits::DEFAULT,
    )
    .unwrap_err();
    assert!(
        matches!(err, FormatError::UntrustedKey { ref key_id, .. } if *key_id == attacker.key_id()),
        "{err}"
    );
}

#[test]
fn a_rotated_key_set_trusts_both_keys() {
    let old = SigningKey::generate(None).unwrap().key;
    let new = SigningKey::generate(None).unwrap().key;
    let mut trusted = TrustedKeys::new();
    trusted.add_signing_key(&old);
    trusted.add_signing_key(&new);
    for key in [&old, &new] {
        let signed = document(3).sign(key).unwrap();
        let verified = channel::verify(
            &signed.document,
            &signed.signature,
            &trusted,
            now(),
            &Limits::DEFAULT,
        )
        .unwrap();
        assert_eq!(verified.key_id, key.key_id());
    }
}

#[test]
fn a_signature_from_a_trusted_key_over_other_bytes_fails() {
    let s = signer();
    let a = signed(&s, 1);
    let b = signed(&s, 2);
    let err = channel::verify(
        &b.document,
        &a.signature,
        &s.trusted,
        now(),
        &Limits::DEFAULT,
    )
    .unwrap_err();
    assert!(matches!(err, FormatError::BadSignature { .. }), "{err}");
}

#[test]
fn expired_document() {
    let s = signer();
    let signed = signed(&s, 5);
    let later = now() + Duration::days(31);
    let err = channel::verify(
        &signed.document,
        &signed.signature,
        &s.trusted,
        later,
        &Limits::DEFAULT,
    )
    .unwrap_err();
    assert!(matches!(err, FormatError::Expired { .. }), "{err}");
    // The same bytes verify while they are fresh: only the clock made the difference.
    assert!(
        channel::verify(
            &signed.document,
            &signed.signature,
            &s.trusted,
            now(),
            &Limits::DEFAULT
        )
        .is_ok()
    );
}

#[test]
fn oversize_channel_document_and_signature() {
    let s = signer();
    let signed = signed(&s, 5);
    let tight = Limits {
        max_channel_len: 64,
        ..Limits::DEFAULT
    };
    let err = channel::verify(
        &signed.document,
        &signed.signature,
        &s.trusted,
        now(),
        &tight,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::TooLarge {
                what: "channel document",
                ..
            }
        ),
        "{err}"
    );
    let huge_sig = "x".repeat(Limits::DEFAULT.max_signature_len + 1);
    let err = channel::verify(
        &signed.document,
        &huge_sig,
        &s.trusted,
        now(),
        &Limits::DEFAULT,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::TooLarge {
                what: "channel signature",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn distinct_errors_render_distinct_messages() {
    // The five key/trust failures must not collapse into one message.
    let messages = [
        FormatError::WrongContentKey { key_id: "a".into() }.to_string(),
        FormatError::UnknownContentKey {
            available: "a".into(),
            held: "b".into(),
        }
        .to_string(),
        FormatError::UntrustedKey {
            key_id: "a".into(),
            trusted: "b".into(),
        }
        .to_string(),
        FormatError::LegacySignature.to_string(),
        FormatError::Expired {
            expires_at: "a".into(),
            now: "b".into(),
        }
        .to_string(),
    ];
    for (i, a) in messages.iter().enumerate() {
        for b in &messages[i + 1..] {
            assert_ne!(a, b);
        }
    }
}

/// `sealed` with its header JSON passed through `edit` (the length prefix follows; the
/// ciphertext no longer authenticates, but the header is refused before that matters).
fn with_edited_header(sealed: &[u8], edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let (_, header_len) = pack::read_header(sealed, &Limits::DEFAULT).unwrap();
    let mut json: serde_json::Value =
        serde_json::from_slice(&sealed[pack::PREFIX_LEN..header_len]).unwrap();
    edit(&mut json);
    let text = serde_json::to_vec(&json).unwrap();
    let mut out = pack::MAGIC.to_vec();
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(&text);
    out.extend_from_slice(&sealed[header_len..]);
    out
}

#[test]
fn a_key_slot_whose_id_is_not_a_content_key_id_is_refused() {
    let key = ContentKey::from_parts("k1", [1u8; 32]).unwrap();
    let sealed = seal_with(&small_payload(), &[&key]);
    for bad_id in ["", "k 1", "k/1", &"k".repeat(65)] {
        let bad = with_edited_header(&sealed, |json| {
            json["key_slots"][0]["key_id"] = bad_id.into();
        });
        let err = pack::read_header(&bad, &Limits::DEFAULT).unwrap_err();
        assert!(
            matches!(err, FormatError::Malformed { what: "pack header", ref reason } if reason.contains("key slot 0")),
            "{bad_id:?}: {err}"
        );
    }
    // The untouched pack still opens.
    pack::open(&sealed, &ring(&key), &Limits::DEFAULT).unwrap();
}

#[test]
fn two_key_slots_with_one_id_are_refused() {
    let key = ContentKey::from_parts("k1", [1u8; 32]).unwrap();
    let other = ContentKey::from_parts("k2", [2u8; 32]).unwrap();
    let sealed = seal_with(&small_payload(), &[&key, &other]);
    let bad = with_edited_header(&sealed, |json| {
        json["key_slots"][1]["key_id"] = "k1".into();
    });
    let err = pack::read_header(&bad, &Limits::DEFAULT).unwrap_err();
    assert!(
        matches!(err, FormatError::Malformed { what: "pack header", ref reason } if reason.contains("\"k1\" twice")),
        "{err}"
    );
    // Sealing refuses to write such a header in the first place.
    let twin = ContentKey::from_parts("k1", [3u8; 32]).unwrap();
    let version = semver::Version::new(1, 0, 0);
    let err = pack_format::seal(
        &pack_format::SealInput {
            format: pack_format::FORMAT_VERSION,
            name: "builtin",
            version: &version,
            schema: 1,
            payload: &small_payload(),
            mtime: 0,
            zstd_level: 3,
        },
        &[&key, &twin],
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::Malformed {
                what: "key slots",
                ..
            }
        ),
        "{err}"
    );
}
