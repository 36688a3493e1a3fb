//! Packs already in the field keep opening. The fixtures, both sealed for the demo content
//! key (`packs/dev-keys`):
//!
//! - `builtin-0.9.0-aes-gcm-crate.pack`: `packs/builtin` as sealed by the first
//!   implementation (the `aes-gcm` crate, one zstd frame):
//!   `SOURCE_DATE_EPOCH=0 packer build packs/builtin --name builtin --version 0.9.0 \
//!   --keys packs/dev-keys -o format/tests/fixtures/builtin-0.9.0-aes-gcm-crate.pack`
//! - `builtin-0.9.1-aws-lc-two-frames.pack`: `packs/builtin` plus `filler.md` (9 MiB of one
//!   repeated line, so the `tar` takes two 8 MiB zstd frames), sealed by the packer that
//!   used aws-lc-rs for AES-256-GCM, the same way at version 0.9.1.
//!
//! Their GCM tags only verify if today's cipher computes exactly what the old ones did.

use std::path::Path;

use pack_format::{ContentKey, ContentKeyRing, FormatError, Limits};

const FIXTURE: &str = "tests/fixtures/builtin-0.9.0-aes-gcm-crate.pack";
const AWS_LC_FIXTURE: &str = "tests/fixtures/builtin-0.9.1-aws-lc-two-frames.pack";

fn dev_keys() -> ContentKeyRing {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    ContentKeyRing::new([ContentKey::load(&root.join("../packs/dev-keys/content.key")).unwrap()])
}

fn fixture() -> Vec<u8> {
    read(FIXTURE)
}

fn read(fixture: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(fixture)).unwrap()
}

/// The filler line of the two-frame fixture.
const FILLER_LINE: &[u8] = b"Every frame of a pack sealed before format 2 decodes on its own.\n";

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

#[test]
fn a_two_frame_pack_sealed_with_aws_lc_still_opens() {
    let sealed = read(AWS_LC_FIXTURE);
    let opened = pack_format::open(&sealed, &dev_keys(), &Limits::DEFAULT).unwrap();
    assert_eq!(opened.header.format, 1);
    assert_eq!(opened.header.version, semver::Version::new(0, 9, 1));
    assert_eq!(opened.payload.len(), 45);
    assert_eq!(
        opened.sha256,
        "706dae6d020bddfb5d309325ecc6c0cd6e1ec2180a26f4ab3066f04b327e05d1"
    );
    let filler = opened.payload.get("filler.md").unwrap();
    assert_eq!(filler.len(), 9_437_220);
    assert!(
        filler
            .chunks(FILLER_LINE.len())
            .all(|line| line == FILLER_LINE)
    );
    // The streaming opener (what `packer extract` uses) agrees.
    struct Count(std::sync::atomic::AtomicUsize);
    impl pack_format::Unpack for Count {
        fn index(&self, _files: &[pack_format::IndexEntry]) -> std::io::Result<()> {
            Ok(())
        }
        fn file(&self, _path: &str, _bytes: &[u8]) -> std::io::Result<()> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        }
    }
    let count = Count(Default::default());
    pack_format::open_into(&sealed, &dev_keys(), &Limits::DEFAULT, &count).unwrap();
    assert_eq!(count.0.into_inner(), 45);
}

#[test]
fn the_aws_lc_fixture_with_one_flipped_ciphertext_byte_is_refused() {
    let mut sealed = read(AWS_LC_FIXTURE);
    let at = sealed.len() / 2;
    sealed[at] ^= 1;
    let err = pack_format::open(&sealed, &dev_keys(), &Limits::DEFAULT).unwrap_err();
    assert!(matches!(err, FormatError::Tampered), "{err:?}");
}
