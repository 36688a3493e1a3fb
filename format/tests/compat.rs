//! Packs already in the field keep opening. The fixture is `packs/builtin` as sealed by the
//! first implementation (the `aes-gcm` crate, one zstd frame) for the demo content key:
//!
//! `SOURCE_DATE_EPOCH=0 packer build packs/builtin --name builtin --version 0.9.0 \
//!   --keys packs/dev-keys -o format/tests/fixtures/builtin-0.9.0-aes-gcm-crate.pack`
//!
//! Its GCM tag only verifies if today's cipher computes exactly what the old one did.

use std::path::Path;

use pack_format::{ContentKey, ContentKeyRing, FormatError, Limits};

const FIXTURE: &str = "tests/fixtures/builtin-0.9.0-aes-gcm-crate.pack";

fn dev_keys() -> ContentKeyRing {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    ContentKeyRing::new([ContentKey::load(&root.join("../packs/dev-keys/content.key")).unwrap()])
}

fn fixture() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE)).unwrap()
}

#[test]
fn a_pack_sealed_by_the_first_implementation_still_opens() {
    let sealed = fixture();
    let opened = pack_format::open(&sealed, &dev_keys(), &Limits::DEFAULT).unwrap();
    assert_eq!(opened.header.name, "builtin");
    assert_eq!(opened.header.version, semver::Version::new(0, 9, 0));
    assert_eq!(opened.payload.len(), 44);
    assert_eq!(
        opened.sha256,
        "cd826a2eb4fe2e4575981650a3696dff1adf44f803e9d21cdbfebd37c30d45fa"
    );
    let tui = std::str::from_utf8(opened.payload.get("agents/mavis/tui.hbs").unwrap()).unwrap();
    assert!(tui.contains("{{"), "a real template came back: {tui}");
}

#[test]
fn the_fixture_with_one_flipped_ciphertext_byte_is_refused() {
    let mut sealed = fixture();
    let last = sealed.len() - 20;
    sealed[last] ^= 1;
    let err = pack_format::open(&sealed, &dev_keys(), &Limits::DEFAULT).unwrap_err();
    assert!(matches!(err, FormatError::Tampered), "{err:?}");
}
