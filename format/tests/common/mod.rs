//! Shared fixtures for the pack-format tests.
#![allow(dead_code)]

use pack_format::channel::SignedChannel;
use pack_format::{
    ChannelDocument, ChannelEntry, ContentKey, ContentKeyRing, EntryTarget, FormatError, Limits,
    PackRef, Payload, PayloadFile, SealInput, SigningKey, TrustedKeys,
};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use pack_format::{IndexEntry, Unpack};
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

/// Keeps what it is handed, and whether the index came first.
#[derive(Default)]
pub struct Record {
    pub index: Mutex<Option<Vec<IndexEntry>>>,
    pub files: Mutex<BTreeMap<String, Vec<u8>>>,
    pub file_before_index: AtomicBool,
}

impl Unpack for Record {
    fn index(&self, files: &[IndexEntry]) -> std::io::Result<()> {
        *self.index.lock().unwrap() = Some(files.to_vec());
        Ok(())
    }

    fn file(&self, path: &str, bytes: &[u8]) -> std::io::Result<()> {
        if self.index.lock().unwrap().is_none() {
            self.file_before_index.store(true, Ordering::SeqCst);
        }
        let old = self
            .files
            .lock()
            .unwrap()
            .insert(path.to_string(), bytes.to_vec());
        assert!(old.is_none(), "{path} handed out twice");
        Ok(())
    }
}

/// Text that compresses about as well as templates do, different for every seed.
pub fn text(seed: u64, len: usize) -> Vec<u8> {
    let words = [
        "the",
        "agent",
        "must",
        "read",
        "{{persona}}",
        "tool",
        "never",
        "file",
    ];
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        out.extend_from_slice(words[(state >> 33) as usize % words.len()].as_bytes());
        out.push(if state.is_multiple_of(11) {
            b'\n'
        } else {
            b' '
        });
    }
    out.truncate(len);
    out
}
