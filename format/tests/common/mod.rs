//! Shared fixtures for the pack-format tests.
#![allow(dead_code)]

use pack_format::channel::SignedChannel;
use pack_format::{
    ChannelDocument, ChannelEntry, ContentKey, ContentKeyRing, EntryTarget, FormatError, Limits,
    PackRef, Payload, PayloadFile, SealInput, SigningKey, TrustedKeys,
};
use time::{Duration, OffsetDateTime};

pub fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

pub fn file(path: &str, text: &str) -> PayloadFile {
    PayloadFile {
        path: path.to_string(),
        bytes: text.as_bytes().to_vec(),
    }
}

pub fn small_payload() -> Payload {
    Payload::new(
        [
            file("agents/mavis/system.hbs", "You are {{persona}}.\n"),
            file("rules/runtime.md", "Be careful.\n"),
            file("tools/read.md", "Reads a file.\n"),
        ],
        &Limits::DEFAULT,
    )
    .unwrap()
}

pub fn seal_with(payload: &Payload, keys: &[&ContentKey]) -> Vec<u8> {
    let version = semver::Version::new(1, 2, 3);
    pack_format::seal(
        &SealInput {
            format: pack_format::FORMAT_VERSION,
            name: "builtin",
            version: &version,
            schema: 1,
            payload,
            mtime: 0,
            zstd_level: 3,
        },
        keys,
    )
    .unwrap()
}

pub fn ring(key: &ContentKey) -> ContentKeyRing {
    ContentKeyRing::new([key.clone()])
}

pub fn document(sequence: u64) -> ChannelDocument {
    ChannelDocument {
        format: 1,
        channel: "stable".to_string(),
        pack: "builtin".to_string(),
        sequence,
        issued_at: now() - Duration::hours(1),
        expires_at: now() + Duration::days(30),
        entries: vec![
            ChannelEntry {
                clients: ">=1.4.0, <1.5.0".parse().unwrap(),
                target: EntryTarget::Pack(PackRef {
                    version: semver::Version::new(1, 2, 3),
                    sha256: "ab".repeat(32),
                    size: 1234,
                    schema: 1,
                }),
                rollout: None,
            },
            ChannelEntry {
                clients: "*".parse().unwrap(),
                target: EntryTarget::Builtin,
                rollout: None,
            },
        ],
        guard: None,
        restricts: None,
    }
}

pub struct Signer {
    pub key: SigningKey,
    pub trusted: TrustedKeys,
}

pub fn signer() -> Signer {
    let generated = SigningKey::generate(None).unwrap();
    let mut trusted = TrustedKeys::new();
    trusted.add_signing_key(&generated.key);
    Signer {
        key: generated.key,
        trusted,
    }
}

pub fn signed(signer: &Signer, sequence: u64) -> SignedChannel {
    document(sequence).sign(&signer.key).unwrap()
}

/// Fails unless `err` refuses a path found twice in the archive.
#[track_caller]
pub fn assert_duplicate_path(err: &FormatError) {
    assert!(
        matches!(
            err,
            FormatError::UnsafeEntry {
                reason: "duplicate path",
                ..
            }
        ),
        "{err}"
    );
}
