//! Interop with the stock tools: `minisign` verifies our channel signatures (and we read its
//! keys and signatures), and the decrypted payload is a plain `tar.zst` that GNU tar lists.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::*;
use pack_format::{ContentKey, FormatError, Limits, SigningKey, TrustedKeys, channel, pack};

fn tool(name: &str) -> Command {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "the stock `{name}` tool is needed for this interop test: install it \
         (apt-get install {name}) or run scripts/test.sh, which does"
    );
    Command::new(name)
}

fn run(mut cmd: Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn write(dir: &Path, name: &str, bytes: impl AsRef<[u8]>) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn stock_minisign_verifies_a_channel_document_we_signed() {
    let dir = tempfile::tempdir().unwrap();
    let generated = SigningKey::generate(None).unwrap();
    let pub_path = write(dir.path(), "signing.pub", &generated.public_file);
    let signed = document(12).sign(&generated.key).unwrap();
    let doc = write(dir.path(), "channel.json", &signed.document);
    write(dir.path(), "channel.json.minisig", &signed.signature);

    let mut cmd = tool("minisign");
    // -H: require a prehashed signature, as we do.
    cmd.arg("-V")
        .arg("-H")
        .arg("-p")
        .arg(&pub_path)
        .arg("-m")
        .arg(&doc);
    let out = run(cmd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Trusted comment: promptpack channel=stable pack=builtin sequence=12"),
        "{stdout}"
    );

    // One changed byte and the stock tool refuses too.
    let mut tampered = signed.document.clone();
    tampered[10] ^= 1;
    write(dir.path(), "channel.json", &tampered);
    let mut cmd = tool("minisign");
    cmd.arg("-V").arg("-p").arg(&pub_path).arg("-m").arg(&doc);
    assert!(!cmd.output().unwrap().status.success());
}

/// Makes a password-protected key pair with the stock tool (it reads the password from
/// standard input when that is not a terminal).
fn stock_keypair(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (sk, pk) = (dir.join("stock.key"), dir.join("stock.pub"));
    let mut cmd = tool("minisign");
    cmd.arg("-G").arg("-s").arg(&sk).arg("-p").arg(&pk);
    run_with_stdin(cmd, "pw\npw\n");
    (sk, pk)
}

fn run_with_stdin(mut cmd: Command, input: &str) {
    use std::io::Write;
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn stock_sign(dir: &Path, sk: &Path, doc: &Path, comment: &str, legacy: bool) -> String {
    stock_sign_with(dir, sk, "pw", doc, comment, legacy)
}

fn stock_sign_with(
    dir: &Path,
    sk: &Path,
    password: &str,
    doc: &Path,
    comment: &str,
    legacy: bool,
) -> String {
    let mut cmd = tool("minisign");
    cmd.arg("-S")
        .arg("-s")
        .arg(sk)
        .arg("-m")
        .arg(doc)
        .arg("-t")
        .arg(comment);
    if legacy {
        cmd.arg("-l");
    }
    run_with_stdin(cmd, &format!("{password}\n"));
    std::fs::read_to_string(dir.join("channel.json.minisig")).unwrap()
}

#[test]
fn we_verify_what_stock_minisign_signs_and_refuse_its_legacy_format() {
    let dir = tempfile::tempdir().unwrap();
    let (sk, pk) = stock_keypair(dir.path());
    let mut trusted = TrustedKeys::new();
    trusted.add_file(&pk).unwrap();
    // Our loader reads the stock tool's password-protected secret key, and needs the password.
    let ours = SigningKey::load(&sk, Some("pw")).unwrap();
    assert_eq!(trusted.ids(), vec![ours.key_id().as_str()]);
    let err = SigningKey::load(&sk, None).err().unwrap();
    assert!(err.to_string().contains("password-protected"), "{err}");
    assert!(SigningKey::load(&sk, Some("wrong")).is_err());

    let doc_value = document(21);
    let doc = write(dir.path(), "channel.json", doc_value.to_bytes());
    let modern = stock_sign(dir.path(), &sk, &doc, &doc_value.trusted_comment(), false);
    let verified = channel::verify(
        &doc_value.to_bytes(),
        &modern,
        &trusted,
        now(),
        &Limits::DEFAULT,
    )
    .unwrap();
    assert_eq!(verified.document.sequence, 21);

    let legacy = stock_sign(dir.path(), &sk, &doc, &doc_value.trusted_comment(), true);
    let err = channel::verify(
        &doc_value.to_bytes(),
        &legacy,
        &trusted,
        now(),
        &Limits::DEFAULT,
    )
    .unwrap_err();
    assert!(matches!(err, FormatError::LegacySignature), "{err}");
}

#[test]
fn a_password_protected_key_of_ours_signs_documents_stock_minisign_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let generated = SigningKey::generate(Some("secret")).unwrap();
    let sk = write(dir.path(), "signing.key", generated.secret_file.as_bytes());
    let pk = write(dir.path(), "signing.pub", &generated.public_file);
    let key = SigningKey::load(&sk, Some("secret")).unwrap();
    let signed = document(2).sign(&key).unwrap();
    let doc = write(dir.path(), "channel.json", &signed.document);
    write(dir.path(), "channel.json.minisig", &signed.signature);
    let mut cmd = tool("minisign");
    cmd.arg("-V")
        .arg("-H")
        .arg("-p")
        .arg(&pk)
        .arg("-m")
        .arg(&doc);
    run(cmd);
    // And the stock tool can sign with our encrypted secret key file.
    let comment = document(2).trusted_comment();
    let sig = stock_sign_with(dir.path(), &sk, "secret", &doc, &comment, false);
    let mut trusted = TrustedKeys::new();
    trusted.add_file(&pk).unwrap();
    assert!(channel::verify(&signed.document, &sig, &trusted, now(), &Limits::DEFAULT).is_ok());
}

#[test]
fn a_signature_whose_trusted_comment_disagrees_with_the_document_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (sk, pk) = stock_keypair(dir.path());
    let mut trusted = TrustedKeys::new();
    trusted.add_file(&pk).unwrap();
    let doc_value = document(5);
    let doc = write(dir.path(), "channel.json", doc_value.to_bytes());
    let sig = stock_sign(
        dir.path(),
        &sk,
        &doc,
        "promptpack channel=stable pack=builtin sequence=999 expires_at=2099-01-01T00:00:00Z",
        false,
    );
    let err = channel::verify(
        &doc_value.to_bytes(),
        &sig,
        &trusted,
        now(),
        &Limits::DEFAULT,
    )
    .unwrap_err();
    assert!(matches!(err, FormatError::CommentMismatch { .. }), "{err}");
}

#[test]
fn the_decrypted_payload_lists_with_tar_zstd() {
    let dir = tempfile::tempdir().unwrap();
    let key = ContentKey::generate();
    let payload = small_payload();
    let sealed = seal_with(&payload, &[&key]);
    let (_, tar_zst) = pack::decrypt(&sealed, &ring(&key), &Limits::DEFAULT).unwrap();
    let archive = write(dir.path(), "payload.tar.zst", &tar_zst);

    let mut cmd = tool("tar");
    cmd.arg("--zstd").arg("-tf").arg(&archive);
    let out = run(cmd);
    let listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let mut expected = vec![pack_format::payload::INDEX_PATH.to_string()];
    expected.extend(payload.files().keys().cloned());
    assert_eq!(listed, expected);

    // And extracts to the same bytes.
    let out_dir = dir.path().join("x");
    std::fs::create_dir(&out_dir).unwrap();
    let mut cmd = tool("tar");
    cmd.arg("--zstd")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(&out_dir);
    run(cmd);
    for (path, bytes) in payload.files() {
        assert_eq!(&std::fs::read(out_dir.join(path)).unwrap(), bytes, "{path}");
    }
}

#[test]
fn an_implementation_written_from_the_docs_agrees_with_the_vectors() {
    // A second implementation written from docs/FORMAT.md alone (Python's standard
    // library, the `cryptography` package for AES-GCM and Ed25519, the stock `zstd`): if
    // the docs and the bytes drift apart, this fails.
    tool("zstd");
    let has_cryptography = tool("python3")
        .args(["-c", "import cryptography"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        has_cryptography,
        "this interop test needs Python's `cryptography` package: apt-get install python3-cryptography"
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/check_vectors.py");
    let mut cmd = tool("python3");
    cmd.arg(&script);
    let out = run(cmd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("ok:"), "{stdout}");
}
