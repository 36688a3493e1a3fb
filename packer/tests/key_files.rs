//! Key files as packer loads them: a signing.pub that is not signing.key's public key is
//! refused on load, naming both files, and a key or password file is read only up to a few
//! KiB, however large the file (or endless the device) the path names.

use crate::common;

use common::{assert_fails, assert_ok, s, stderr, write_required_templates};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tempfile::TempDir;

fn packer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_packer"))
        .args(args)
        .env_remove("PROMPTPACK_KEY_PASSWORD")
        .output()
        .expect("packer runs")
}

/// `packer` with its address space capped at 512 MiB, far above what it needs for these
/// small trees and far below the size of what a key path may name: a file read whole into
/// memory ends the process instead of passing unnoticed.
fn packer_in_512_mib(args: &[&str]) -> Output {
    Command::new("sh")
        .args(["-c", "ulimit -v 524288 && exec \"$@\"", "sh"])
        .arg(env!("CARGO_BIN_EXE_packer"))
        .args(args)
        .env_remove("PROMPTPACK_KEY_PASSWORD")
        .output()
        .expect("sh runs")
}

struct Fixture {
    dir: TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let fixture = Fixture {
            dir: tempfile::tempdir().unwrap(),
        };
        fixture.keygen("keys");
        write_required_templates(&fixture.path("prompts"));
        fixture
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    fn keygen(&self, name: &str) -> PathBuf {
        let keys = self.path(name);
        assert_ok(&packer(&["keygen", "--dir", s(&keys)]));
        keys
    }

    /// `packer channel` with the signing key of `keys` (and the extra arguments).
    fn channel_args<'a>(&self, keys: &'a Path, extra: &[&'a str]) -> Vec<String> {
        let out = self.path("channel.json");
        let mut args: Vec<String> = [
            "channel",
            "--keys",
            s(keys),
            "--channel",
            "stable",
            "--pack",
            "prompts",
            "--sequence",
            "1",
            "--expires",
            "2h",
            "--entry",
            "*=builtin",
            "-o",
            s(&out),
        ]
        .map(String::from)
        .to_vec();
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    }
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[test]
fn a_signing_pub_from_another_key_set_is_refused_naming_both_files() {
    let fixture = Fixture::new();
    let keys = fixture.path("keys");
    let other = fixture.keygen("other-keys");
    // What a keygen interrupted between its renames used to leave: a new signing.key
    // beside the previous set's signing.pub.
    let (secret, public) = (keys.join("signing.key"), keys.join("signing.pub"));
    let secret_id = pub_key_id(&public);
    std::fs::copy(other.join("signing.pub"), &public).unwrap();

    let out = packer(&strs(&fixture.channel_args(&keys, &[])));
    assert_fails(&out);
    let message = stderr(&out);
    assert!(
        message.starts_with(&format!(
            "error: {} (key id {}) is not the public key of {} (key id {secret_id})",
            public.display(),
            pub_key_id(&public),
            secret.display(),
        )),
        "{message}"
    );
    assert!(
        message.contains("Nothing was signed"),
        "says nothing happened: {message}"
    );
    assert!(
        !fixture.path("channel.json").exists(),
        "no document is written"
    );
}

#[test]
fn a_signing_pub_with_the_key_id_but_another_key_is_refused() {
    let fixture = Fixture::new();
    let keys = fixture.path("keys");
    let other = fixture.keygen("other-keys");
    // signing.pub's key id, the other set's Ed25519 public key: a key id alone would pass.
    let ours = pub_key_bytes(&keys.join("signing.pub"));
    let theirs = pub_key_bytes(&other.join("signing.pub"));
    let mut forged = ours[..10].to_vec();
    forged.extend_from_slice(&theirs[10..]);
    let text = std::fs::read_to_string(keys.join("signing.pub")).unwrap();
    let comment = text.lines().next().unwrap();
    std::fs::write(
        keys.join("signing.pub"),
        format!("{comment}\n{}\n", base64_encode(&forged)),
    )
    .unwrap();

    let out = packer(&strs(&fixture.channel_args(&keys, &[])));
    assert_fails(&out);
    let message = stderr(&out);
    assert!(
        message.starts_with(&format!(
            "error: {} has the key id of {} ({}) but not its public key",
            keys.join("signing.pub").display(),
            keys.join("signing.key").display(),
            pub_key_id(&keys.join("signing.pub")),
        )),
        "{message}"
    );
    assert!(!fixture.path("channel.json").exists());
}

#[test]
fn a_matching_pair_signs() {
    let fixture = Fixture::new();
    let keys = fixture.path("keys");
    assert_ok(&packer(&strs(&fixture.channel_args(&keys, &[]))));
}

#[test]
fn huge_and_endless_key_files_are_refused_without_being_read() {
    let fixture = Fixture::new();
    let keys = fixture.path("keys");
    let sparse = fixture.path("sparse");
    std::fs::File::create(&sparse)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let pack = fixture.path("p.pack");
    let prompts = fixture.path("prompts");
    let build = |keys: &Path, extra: &[&str]| {
        let mut args = vec![
            "build",
            s(&prompts),
            "--version",
            "1.0.0",
            "--keys",
            s(keys),
            "-o",
            s(&pack),
        ];
        args.extend_from_slice(extra);
        packer_in_512_mib(&args)
    };
    let refused = |out: &Output, expected: &str| {
        assert_fails(out);
        let message = stderr(out);
        assert_eq!(message, format!("error: {expected}\n"));
    };

    // An extra content key that is an endless device, and one that is a 1 GiB file.
    refused(
        &build(&keys, &["--content-key", "/dev/zero"]),
        "key file /dev/zero: more than 8192 bytes, expected a small key file (nothing more was read)",
    );
    refused(
        &build(&keys, &["--content-key", s(&sparse)]),
        &format!(
            "key file {}: more than 8192 bytes, expected a small key file (nothing more was read)",
            sparse.display()
        ),
    );

    // The key directory's own content.key and signing.key.
    let linked = fixture.path("linked-keys");
    std::fs::create_dir(&linked).unwrap();
    for name in ["signing.key", "signing.pub"] {
        std::fs::copy(keys.join(name), linked.join(name)).unwrap();
    }
    std::os::unix::fs::symlink("/dev/zero", linked.join("content.key")).unwrap();
    refused(
        &build(&linked, &[]),
        &format!(
            "key file {}: more than 8192 bytes, expected a small key file (nothing more was read)",
            linked.join("content.key").display()
        ),
    );
    std::fs::remove_file(linked.join("signing.key")).unwrap();
    std::os::unix::fs::symlink(&sparse, linked.join("signing.key")).unwrap();
    refused(
        &packer_in_512_mib(&strs(&fixture.channel_args(&linked, &[]))),
        &format!(
            "key file {}: more than 8192 bytes, expected a small key file (nothing more was read)",
            linked.join("signing.key").display()
        ),
    );

    // The signing key's password file.
    refused(
        &packer_in_512_mib(&strs(
            &fixture.channel_args(&keys, &["--password-file", s(&sparse)]),
        )),
        &format!(
            "password file {}: more than 8192 bytes, expected the password on its first line \
             (nothing more was read)",
            sparse.display()
        ),
    );
    refused(
        &packer_in_512_mib(&strs(
            &fixture.channel_args(&keys, &["--password-file", "/dev/zero"]),
        )),
        "password file /dev/zero: more than 8192 bytes, expected the password on its first \
         line (nothing more was read)",
    );

    // Under the same cap, the ordinary files still work.
    let ok = build(&keys, &[]);
    assert_ok(&ok);
}

/// The key id of a minisign public key file: bytes 2-10 of the key, as minisign shows it.
fn pub_key_id(path: &Path) -> String {
    key_id_hex(&pub_key_bytes(path)[2..10])
}

fn key_id_hex(keynum: &[u8]) -> String {
    let mut le = [0u8; 8];
    le.copy_from_slice(keynum);
    format!("{:016X}", u64::from_le_bytes(le))
}

/// The 42 bytes of a minisign public key: `Ed`, the 8-byte key number, the Ed25519 key.
fn pub_key_bytes(path: &Path) -> Vec<u8> {
    let text = std::fs::read_to_string(path).unwrap();
    let bytes = base64_decode(text.lines().nth(1).unwrap());
    assert_eq!(bytes.len(), 42, "a minisign public key");
    bytes
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_decode(text: &str) -> Vec<u8> {
    let mut bits = 0u32;
    let mut count = 0;
    let mut out = Vec::new();
    for c in text.trim().bytes().filter(|&c| c != b'=') {
        let value = B64.iter().position(|&b| b == c).expect("base64") as u32;
        bits = (bits << 6) | value;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
        }
    }
    out
}

fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.len();
        let word = chunk
            .iter()
            .chain(std::iter::repeat(&0))
            .take(3)
            .fold(0u32, |acc, &b| (acc << 8) | u32::from(b));
        for i in 0..4 {
            if i <= n {
                out.push(B64[(word >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
