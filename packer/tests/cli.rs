//! Drives the real `packer` binary the way a publisher does.

use crate::common;

use common::{assert_fails, assert_ok, s, stderr, stdout, write_required_templates};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pack_format::{ContentKey, ContentKeyRing, EntryTarget, Limits, TrustedKeys};
use tempfile::TempDir;

const GOOD_TEMPLATE: &str = "\
You are {{persona}}.
{{#if tools.read}}Read before you write.{{else}}You cannot read files.{{/if}}
{{#each skills}}- {{name}}: {{description}}
{{/each}}";

fn packer(args: &[&str]) -> Output {
    packer_env(args, &[])
}

fn packer_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_packer"));
    command
        .args(args)
        .env_remove("PROMPTPACK_KEY_PASSWORD")
        .env_remove("SOURCE_DATE_EPOCH");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("packer runs")
}

struct Fixture {
    dir: TempDir,
}

impl Fixture {
    /// A key directory and a pack directory `prompts/` with a few files.
    fn new() -> Fixture {
        let fixture = Fixture {
            dir: tempfile::tempdir().unwrap(),
        };
        assert_ok(&packer(&["keygen", "--dir", s(&fixture.keys())]));
        fixture.write("prompts/agents/mavis/system.hbs", GOOD_TEMPLATE.as_bytes());
        fixture.write(
            "prompts/shared/rules.hbs",
            b"{{#unless surface.interactive}}Work alone.{{/unless}}\n",
        );
        fixture.write(
            "prompts/notes.txt",
            b"not a template: {{anything}} is fine here\n",
        );
        fixture.write("prompts/data.bin", &[0, 159, 146, 150, 255]);
        write_required_templates(&fixture.pack_dir());
        fixture
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    fn keys(&self) -> PathBuf {
        self.path("keys")
    }

    fn pack_dir(&self) -> PathBuf {
        self.path("prompts")
    }

    fn write(&self, relative: &str, bytes: &[u8]) {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    fn build(&self, out: &str, env: &[(&str, &str)]) -> Output {
        let out = self.path(out);
        packer_env(
            &[
                "build",
                s(&self.pack_dir()),
                "--version",
                "1.2.0",
                "--keys",
                s(&self.keys()),
                "-o",
                s(&out),
            ],
            env,
        )
    }

    /// `packer extract PACK --keys KEYS -o OUT` plus `extra` arguments.
    fn extract(&self, pack: &Path, out: &Path, extra: &[&str]) -> Output {
        let keys = self.keys();
        let mut args = vec!["extract", s(pack), "--keys", s(&keys), "-o", s(out)];
        args.extend_from_slice(extra);
        packer(&args)
    }

    fn ring(&self) -> ContentKeyRing {
        ContentKeyRing::new([ContentKey::load(&self.keys().join("content.key")).unwrap()])
    }
}

fn files_under(root: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let name = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_string();
                out.push((name, std::fs::read(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

#[test]
fn keygen_writes_private_keys_and_refuses_to_overwrite() {
    let fixture = Fixture::new();
    let keys = fixture.keys();
    let before = files_under(&keys);
    let names: Vec<&str> = before.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["content.key", "signing.key", "signing.pub"]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for secret in ["signing.key", "content.key"] {
            let mode = std::fs::metadata(keys.join(secret))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{secret} must be private");
        }
    }

    let again = packer(&["keygen", "--dir", s(&keys)]);
    assert_fails(&again);
    let message = stderr(&again);
    assert!(message.contains("signing.key already exists"), "{message}");
    assert!(message.contains("--force"), "{message}");
    assert_eq!(
        files_under(&keys),
        before,
        "a refused keygen must not touch the keys"
    );

    assert_ok(&packer(&["keygen", "--dir", s(&keys), "--force"]));
    let after = files_under(&keys);
    assert_ne!(after, before, "--force writes new keys");
}

#[test]
fn build_verify_inspect_extract_round_trip() {
    let fixture = Fixture::new();
    let build = fixture.build("out/prompts-1.2.0.pack", &[]);
    assert_ok(&build);
    let built = stdout(&build);
    assert!(
        built.contains("prompts"),
        "pack name defaults to the directory name: {built}"
    );
    assert!(built.contains("1.2.0"), "{built}");
    let pack = fixture.path("out/prompts-1.2.0.pack");
    let sha = pack_format::sha256_hex(&std::fs::read(&pack).unwrap());
    assert!(built.contains(&sha), "build prints the sha256: {built}");

    let verify = packer(&["verify", s(&pack), "--keys", s(&fixture.keys())]);
    assert_ok(&verify);
    assert!(
        stdout(&verify).starts_with("ok: prompts 1.2.0"),
        "{}",
        stdout(&verify)
    );

    // Without a key: header only.
    let header = packer(&["inspect", s(&pack), "--json"]);
    assert_ok(&header);
    let header: serde_json::Value = serde_json::from_slice(&header.stdout).unwrap();
    assert_eq!(header["name"], "prompts");
    assert_eq!(header["version"], "1.2.0");
    assert_eq!(header["schema"], 1);
    assert_eq!(header["sha256"], sha.as_str());
    assert!(header["files"].is_null());

    // With a key: the file list, matching the source files.
    let listed = packer(&["inspect", s(&pack), "--keys", s(&fixture.keys()), "--json"]);
    assert_ok(&listed);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let source = files_under(&fixture.pack_dir());
    let listed_files: Vec<(String, u64, String)> = listed["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["size"].as_u64().unwrap(),
                f["sha256"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected: Vec<(String, u64, String)> = source
        .iter()
        .map(|(path, bytes)| {
            (
                path.clone(),
                bytes.len() as u64,
                pack_format::sha256_hex(bytes),
            )
        })
        .collect();
    assert_eq!(listed_files, expected);

    let out = fixture.path("extracted");
    assert_ok(&fixture.extract(&pack, &out, &[]));
    assert_eq!(
        files_under(&out),
        source,
        "extract gives back the exact bytes"
    );

    // A non-empty output directory is refused and left alone.
    let refused = fixture.extract(&pack, &out, &[]);
    assert_fails(&refused);
    assert!(
        stderr(&refused).contains("not empty"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(files_under(&out), source);
}

#[test]
fn extract_of_a_pack_of_many_frames_gives_back_every_byte() {
    let fixture = Fixture::new();
    // 20 MB of poorly compressible notes in nested directories: several zstd frames,
    // decompressed in parallel and written while later frames decode.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..400 {
        let len = 10_000 + (i * 7_919) % 90_000;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                b'a' + (state % 26) as u8
            })
            .collect();
        fixture.write(
            &format!("prompts/notes/d{}/e{}/n{i}.txt", i % 9, i % 4),
            &bytes,
        );
    }
    assert_ok(&packer(&[
        "build",
        s(&fixture.pack_dir()),
        "--version",
        "1.0.0",
        "--keys",
        s(&fixture.keys()),
        "--zstd-level",
        "3",
        "-o",
        s(&fixture.path("big.pack")),
    ]));
    let out = fixture.path("big-out");
    let extracted = fixture.extract(&fixture.path("big.pack"), &out, &["--json"]);
    assert_ok(&extracted);
    let summary: serde_json::Value = serde_json::from_slice(&extracted.stdout).unwrap();
    let source = files_under(&fixture.pack_dir());
    assert_eq!(summary["files"], source.len());
    let sealed = std::fs::read(fixture.path("big.pack")).unwrap();
    assert_eq!(summary["sha256"], pack_format::sha256_hex(&sealed));
    assert!(source.len() > 400, "{}", source.len());
    assert_eq!(files_under(&out), source);
    // Without the syncs, the same files.
    let unsynced = fixture.path("big-out-unsynced");
    assert_ok(&fixture.extract(&fixture.path("big.pack"), &unsynced, &["--no-fsync"]));
    assert_eq!(files_under(&unsynced), source);
}

#[test]
fn build_seals_format_2_and_refuses_any_other_format_saying_what_to_use() {
    let fixture = Fixture::new();
    let build = |format: &str, out: &str| {
        packer(&[
            "build",
            s(&fixture.pack_dir()),
            "--version",
            "1.0.0",
            "--keys",
            s(&fixture.keys()),
            "--zstd-level",
            "3",
            "--format",
            format,
            "--json",
            "-o",
            s(&fixture.path(out)),
        ])
    };
    let built = build("2", "v2.pack");
    assert_ok(&built);
    let summary: serde_json::Value = serde_json::from_slice(&built.stdout).unwrap();
    assert_eq!(summary["format"], 2);

    // Format 2 is the default.
    let default = fixture.build("default.pack", &[]);
    assert_ok(&default);
    let sealed = std::fs::read(fixture.path("default.pack")).unwrap();
    let (header, _) = pack_format::read_header(&sealed, &pack_format::Limits::DEFAULT).unwrap();
    assert_eq!(header.format, 2);

    for format in ["1", "3", "4"] {
        let refused = build(format, "refused.pack");
        assert!(!refused.status.success(), "--format {format} was accepted");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains(&format!("--format {format}")), "{stderr}");
        assert!(stderr.contains("--format 2"), "what to use: {stderr}");
        assert!(!fixture.path("refused.pack").exists());
    }
}

#[test]
fn a_reader_that_stops_early_ends_the_listing_quietly() {
    let fixture = Fixture::new();
    // Enough files that the listing is far bigger than a pipe's buffer.
    for i in 0..2000 {
        fixture.write(&format!("prompts/many/file-{i:04}.txt"), b"x\n");
    }
    assert_ok(&fixture.build("many.pack", &[]));
    let mut child = Command::new(env!("CARGO_BIN_EXE_packer"))
        .args([
            "inspect",
            s(&fixture.path("many.pack")),
            "--keys",
            s(&fixture.keys()),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 64];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(child.stdout.take()); // like `| head`: the reader goes away
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn extract_of_a_tampered_pack_leaves_nothing_behind() {
    let fixture = Fixture::new();
    assert_ok(&fixture.build("p.pack", &[]));
    let mut bytes = std::fs::read(fixture.path("p.pack")).unwrap();
    let last = bytes.len() - 20;
    bytes[last] ^= 1;
    std::fs::create_dir(fixture.path("bad")).unwrap();
    std::fs::write(fixture.path("bad/p.pack"), &bytes).unwrap();
    let out = fixture.path("bad/out");
    let refused = fixture.extract(&fixture.path("bad/p.pack"), &out, &[]);
    assert_fails(&refused);
    assert!(
        stderr(&refused).contains("does not open"),
        "{}",
        stderr(&refused)
    );
    let left: Vec<_> = std::fs::read_dir(fixture.path("bad"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("p.pack")]);
}

#[test]
fn verify_rejects_a_tampered_pack_and_a_wrong_key() {
    let fixture = Fixture::new();
    assert_ok(&fixture.build("p.pack", &[]));
    let pack = fixture.path("p.pack");
    let mut bytes = std::fs::read(&pack).unwrap();
    let last = bytes.len() - 20;
    bytes[last] ^= 1;
    let tampered = fixture.path("tampered.pack");
    std::fs::write(&tampered, &bytes).unwrap();
    let result = packer(&["verify", s(&tampered), "--keys", s(&fixture.keys())]);
    assert_fails(&result);
    assert!(stderr(&result).contains("modified"), "{}", stderr(&result));

    let other_keys = fixture.path("other-keys");
    assert_ok(&packer(&["keygen", "--dir", s(&other_keys)]));
    let result = packer(&["verify", s(&pack), "--keys", s(&other_keys)]);
    assert_fails(&result);
    assert!(
        stderr(&result).contains("no content key"),
        "{}",
        stderr(&result)
    );
}

#[test]
fn build_reports_every_undeclared_variable_with_file_and_line() {
    let fixture = Fixture::new();
    fixture.write(
        "prompts/agents/mavis/system.hbs",
        b"You are {{persona}}.\n{{#if tools.read}}ok{{else}}\n{{nope}}{{/if}}\n",
    );
    fixture.write(
        "prompts/shared/rules.hbs",
        b"{{#each skills}}{{name}} {{version}}{{/each}}\n",
    );
    let result = fixture.build("p.pack", &[]);
    assert_fails(&result);
    let message = stderr(&result);
    let mavis = fixture.path("prompts/agents/mavis/system.hbs");
    let rules = fixture.path("prompts/shared/rules.hbs");
    assert!(
        message.contains(&format!("{}:3: unknown variable 'nope'", s(&mavis))),
        "{message}"
    );
    assert!(
        message.contains(&format!("{}:1: unknown variable 'version'", s(&rules))),
        "{message}"
    );
    assert!(
        !fixture.path("p.pack").exists(),
        "nothing is written on failure"
    );
}

#[test]
fn a_missing_template_and_a_broken_one_are_reported_together() {
    // A required template missing means nothing will be sealed; the other templates are
    // still validated, so one build names every problem.
    let fixture = Fixture::new();
    std::fs::remove_file(fixture.pack_dir().join("shared/memory.hbs")).unwrap();
    fixture.write("prompts/shared/rules.hbs", b"line one\n{{nope}}\n");
    let result = fixture.build("p.pack", &[]);
    assert_fails(&result);
    let message = stderr(&result);
    let memory = fixture.pack_dir().join("shared/memory.hbs");
    let rules = fixture.pack_dir().join("shared/rules.hbs");
    assert!(
        message.contains(&format!("{}: missing", s(&memory))),
        "{message}"
    );
    assert!(
        message.contains(&format!("{}:2: unknown variable 'nope'", s(&rules))),
        "{message}"
    );
    assert!(message.contains("2 problem(s)"), "{message}");
    assert!(!fixture.path("p.pack").exists());
}

#[test]
fn build_refuses_a_pack_without_the_templates_clients_require() {
    let fixture = Fixture::new();
    let gone = ["agents/mavis/tui.hbs", "shared/memory.hbs"];
    for template in gone {
        std::fs::remove_file(fixture.pack_dir().join(template)).unwrap();
    }
    let result = fixture.build("p.pack", &[]);
    assert_fails(&result);
    let message = stderr(&result);
    for template in gone {
        let expected = fixture.pack_dir().join(template);
        assert!(
            message.contains(&format!("{}: missing", s(&expected))),
            "names where {template} is expected: {message}"
        );
    }
    assert!(message.contains("2 problem(s)"), "{message}");
    assert!(
        !message.contains("shared/persona.hbs"),
        "only what is missing is named: {message}"
    );
    assert!(
        !fixture.path("p.pack").exists(),
        "nothing is written on failure"
    );
}

#[test]
fn verify_refuses_a_pack_without_the_templates_clients_require() {
    let fixture = Fixture::new();
    // Sealed without packer build, which would refuse it: a pack from another tool or an
    // older packer, holding one template.
    let payload = pack_format::Payload::new(
        [pack_format::PayloadFile {
            path: "agents/mavis/system.hbs".to_string(),
            bytes: GOOD_TEMPLATE.as_bytes().to_vec(),
        }],
        &Limits::DEFAULT,
    )
    .unwrap();
    let key = ContentKey::load(&fixture.keys().join("content.key")).unwrap();
    let sealed = pack_format::seal(
        &pack_format::SealInput {
            format: pack_format::FORMAT_VERSION,
            name: "builtin",
            version: &semver::Version::new(1, 0, 0),
            schema: 1,
            payload: &payload,
            mtime: 0,
            zstd_level: 3,
        },
        &[&key],
    )
    .unwrap();
    let pack = fixture.path("incomplete.pack");
    std::fs::write(&pack, sealed).unwrap();

    let result = packer(&["verify", s(&pack), "--keys", s(&fixture.keys())]);
    assert_fails(&result);
    assert!(
        stdout(&result).is_empty(),
        "no ok line: {}",
        stdout(&result)
    );
    let message = stderr(&result);
    let required = pack_contract::Contract::builtin(1).unwrap();
    for template in required.required_templates() {
        assert!(
            message.contains(&format!("{template}: missing from the pack")),
            "names {template}: {message}"
        );
    }
    assert!(
        message.contains("every client would refuse it"),
        "{message}"
    );

    // The complete pack packer build makes verifies.
    assert_ok(&fixture.build("complete.pack", &[]));
    assert_ok(&packer(&[
        "verify",
        s(&fixture.path("complete.pack")),
        "--keys",
        s(&fixture.keys()),
    ]));
}

#[test]
fn build_rejects_a_symlink_and_names_it() {
    let fixture = Fixture::new();
    let link = fixture.path("prompts/agents/alias.hbs");
    std::os::unix::fs::symlink(fixture.path("prompts/shared/rules.hbs"), &link).unwrap();
    let result = fixture.build("p.pack", &[]);
    assert_fails(&result);
    let message = stderr(&result);
    assert!(message.contains(s(&link)), "{message}");
    assert!(message.contains("symbolic link"), "{message}");
    assert!(!fixture.path("p.pack").exists());
}

#[test]
fn build_rejects_a_template_that_is_not_utf8() {
    let fixture = Fixture::new();
    fixture.write("prompts/bad.hbs", b"caf\xe9 {{persona}}");
    let result = fixture.build("p.pack", &[]);
    assert_fails(&result);
    assert!(
        stderr(&result).contains("bad.hbs: not UTF-8"),
        "{}",
        stderr(&result)
    );
}

#[test]
fn build_rejects_a_template_over_the_size_limit_and_names_it() {
    let fixture = Fixture::new();
    let long = "Say hello to {{persona}}.\n".repeat(pack_contract::MAX_TEMPLATE_LEN / 20);
    fixture.write("prompts/long.hbs", long.as_bytes());
    let result = fixture.build("p.pack", &[]);
    assert_fails(&result);
    let message = stderr(&result);
    assert!(message.contains("long.hbs:1: template is"), "{message}");
    assert!(
        message.contains(&format!(
            "over the limit of {} bytes per template",
            pack_contract::MAX_TEMPLATE_LEN
        )),
        "{message}"
    );
    assert!(!fixture.path("p.pack").exists());
}

#[test]
fn builds_with_the_same_source_date_epoch_have_identical_payloads() {
    let fixture = Fixture::new();
    let epoch = [("SOURCE_DATE_EPOCH", "1700000000")];
    assert_ok(&fixture.build("a.pack", &epoch));
    assert_ok(&fixture.build("b.pack", &epoch));
    assert_ok(&fixture.build("c.pack", &[("SOURCE_DATE_EPOCH", "1700000001")]));
    let read = |name: &str| std::fs::read(fixture.path(name)).unwrap();
    let payload = |name: &str| {
        let (header, plain) =
            pack_format::pack::decrypt(&read(name), &fixture.ring(), &Limits::DEFAULT).unwrap();
        (header.name, header.version, plain)
    };
    // Every seal uses a fresh data key and nonce, so the sealed bytes differ...
    assert_ne!(read("a.pack"), read("b.pack"));
    // ...but what was sealed is the same, byte for byte.
    assert_eq!(payload("a.pack"), payload("b.pack"));
    // And the mtime really is taken from SOURCE_DATE_EPOCH.
    assert_ne!(payload("a.pack").2, payload("c.pack").2);
}

#[test]
fn channel_document_verifies_with_pack_format_and_with_minisign() {
    let fixture = Fixture::new();
    assert_ok(&fixture.build("prompts-1.2.0.pack", &[]));
    let pack = fixture.path("prompts-1.2.0.pack");
    let pack_bytes = std::fs::read(&pack).unwrap();
    let document_path = fixture.path("dist/channel.json");
    let first_entry = format!(">=1.4.0, <1.5.0={}@10%", s(&pack));
    let result = packer(&[
        "channel",
        "--keys",
        s(&fixture.keys()),
        "--channel",
        "stable",
        "--pack",
        "prompts",
        "--sequence",
        "7",
        "--expires",
        "30d",
        "--entry",
        &first_entry,
        "--entry",
        "<1.4.0=builtin",
        "-o",
        s(&document_path),
    ]);
    assert_ok(&result);

    let document = std::fs::read(&document_path).unwrap();
    let signature = std::fs::read_to_string(fixture.path("dist/channel.json.minisig")).unwrap();
    let mut trusted = TrustedKeys::new();
    trusted
        .add_file(&fixture.keys().join("signing.pub"))
        .unwrap();
    let now = time::OffsetDateTime::now_utc();
    let verified =
        pack_format::channel::verify(&document, &signature, &trusted, now, &Limits::DEFAULT)
            .unwrap();
    let doc = verified.document;
    assert_eq!(
        (doc.channel.as_str(), doc.pack.as_str(), doc.sequence),
        ("stable", "prompts", 7)
    );
    let days = (doc.expires_at - doc.issued_at).whole_days();
    assert_eq!(days, 30);
    assert_eq!(doc.entries.len(), 2);
    let EntryTarget::Pack(pack_ref) = &doc.entries[0].target else {
        panic!("first entry should be a pack: {:?}", doc.entries[0]);
    };
    assert_eq!(pack_ref.version, semver::Version::new(1, 2, 0));
    assert_eq!(pack_ref.sha256, pack_format::sha256_hex(&pack_bytes));
    assert_eq!(pack_ref.size, pack_bytes.len() as u64);
    assert_eq!(pack_ref.schema, 1);
    assert_eq!(doc.entries[0].rollout.as_ref().map(|r| r.percent), Some(10));
    assert_eq!(doc.entries[1].target, EntryTarget::Builtin);
    assert!(
        doc.entries[1]
            .clients
            .matches(&semver::Version::new(1, 3, 9))
    );

    let minisign = Path::new("/usr/bin/minisign");
    if minisign.exists() {
        let stock = Command::new(minisign)
            .args([
                "-Vm",
                s(&document_path),
                "-p",
                s(&fixture.keys().join("signing.pub")),
            ])
            .output()
            .unwrap();
        assert_ok(&stock);
        // The same check must fail on a modified document, or it proves nothing.
        let mut tampered = document.clone();
        let at = tampered.iter().position(|&b| b == b'7').unwrap();
        tampered[at] = b'8';
        std::fs::write(&document_path, &tampered).unwrap();
        let stock = Command::new(minisign)
            .args([
                "-Vm",
                s(&document_path),
                "-p",
                s(&fixture.keys().join("signing.pub")),
            ])
            .output()
            .unwrap();
        assert_fails(&stock);
    }
}

/// `packer channel` writing `out`: channel stable, every client on the built-in pack.
fn builtin_channel(fixture: &Fixture, out: &std::path::Path, sequence: &str) -> Output {
    packer(&[
        "channel",
        "--keys",
        s(&fixture.keys()),
        "--channel",
        "stable",
        "--pack",
        "prompts",
        "--sequence",
        sequence,
        "--expires",
        "2h",
        "--entry",
        "*=builtin",
        "-o",
        s(out),
    ])
}

#[test]
fn channel_refuses_a_sequence_that_does_not_increase() {
    let fixture = Fixture::new();
    let out = fixture.path("channel.json");
    let channel = |sequence: &str| builtin_channel(&fixture, &out, sequence);
    assert_ok(&channel("5"));
    let before = std::fs::read(&out).unwrap();
    let again = channel("5");
    assert_fails(&again);
    assert!(
        stderr(&again).contains("--sequence 6"),
        "{}",
        stderr(&again)
    );
    assert_eq!(std::fs::read(&out).unwrap(), before);
    assert_ok(&channel("6"));
}

#[test]
fn channel_refuses_a_sequence_over_the_limit_and_never_wraps() {
    let fixture = Fixture::new();
    let out = fixture.path("channel.json");
    let channel = |sequence: &str| builtin_channel(&fixture, &out, sequence);
    let over = channel("9007199254740992");
    assert_fails(&over);
    assert!(
        stderr(&over).contains("over the limit of 9007199254740991"),
        "{}",
        stderr(&over)
    );
    assert!(!out.exists(), "nothing is written");

    // The limit itself is a valid sequence...
    assert_ok(&channel("9007199254740991"));
    let at_limit = std::fs::read(&out).unwrap();
    // ...after which the channel can take no further document: the advice is a new
    // channel, not a sequence that would be refused.
    let full = channel("9007199254740991");
    assert_fails(&full);
    let message = stderr(&full);
    assert!(message.contains("new channel name"), "{message}");
    assert!(
        !message.contains("--sequence 9007199254740992"),
        "{message}"
    );
    assert_eq!(std::fs::read(&out).unwrap(), at_limit);

    // A document some other tool wrote at u64::MAX: refused with advice, no overflow.
    let text = String::from_utf8(at_limit).unwrap().replace(
        "\"sequence\": 9007199254740991",
        "\"sequence\": 18446744073709551615",
    );
    std::fs::write(&out, &text).unwrap();
    let wrapped = channel("5");
    assert_fails(&wrapped);
    let message = stderr(&wrapped);
    assert!(!message.contains("panicked"), "{message}");
    assert!(message.contains("new channel name"), "{message}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), text);
}

#[test]
fn channel_rejects_a_pack_of_another_name_and_a_bad_entry() {
    let fixture = Fixture::new();
    assert_ok(&fixture.build("p.pack", &[]));
    let entry = format!("*={}", s(&fixture.path("p.pack")));
    let (keys, out) = (fixture.keys(), fixture.path("c.json"));
    let base = [
        "channel",
        "--keys",
        s(&keys),
        "--channel",
        "stable",
        "--pack",
        "other",
        "--sequence",
        "1",
        "--expires",
        "1d",
        "-o",
        s(&out),
    ];
    let result = packer(&[&base[..], &["--entry", &entry]].concat());
    assert_fails(&result);
    assert!(
        stderr(&result).contains("is pack \"prompts\""),
        "{}",
        stderr(&result)
    );
    let result = packer(&[&base[..], &["--entry", "builtin"]].concat());
    assert_fails(&result);
    assert!(
        stderr(&result).contains("RANGE=TARGET"),
        "{}",
        stderr(&result)
    );
    assert!(!fixture.path("c.json").exists());
}

#[test]
fn a_password_protected_signing_key_needs_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let password_file = dir.path().join("password");
    std::fs::write(&password_file, "correct horse\n").unwrap();
    assert_ok(&packer(&[
        "keygen",
        "--dir",
        s(&keys),
        "--password-file",
        s(&password_file),
    ]));
    let secret = std::fs::read_to_string(keys.join("signing.key")).unwrap();
    assert!(secret.starts_with("untrusted comment:"), "{secret}");

    let channel = |env: &[(&str, &str)]| {
        packer_env(
            &[
                "channel",
                "--keys",
                s(&keys),
                "--channel",
                "stable",
                "--pack",
                "prompts",
                "--sequence",
                "1",
                "--expires",
                "1d",
                "--entry",
                "*=builtin",
                "-o",
                s(&dir.path().join("channel.json")),
            ],
            env,
        )
    };
    let without = channel(&[]);
    assert_fails(&without);
    assert!(
        stderr(&without).contains("PROMPTPACK_KEY_PASSWORD"),
        "{}",
        stderr(&without)
    );
    assert_ok(&channel(&[("PROMPTPACK_KEY_PASSWORD", "correct horse")]));
}

#[test]
fn build_refuses_to_overwrite_an_existing_pack_without_force() {
    let fixture = Fixture::new();
    assert_ok(&fixture.build("p.pack", &[]));
    let first = std::fs::read(fixture.path("p.pack")).unwrap();

    let again = fixture.build("p.pack", &[]);
    assert_fails(&again);
    assert_eq!(
        stderr(&again),
        format!(
            "error: {} already exists; nothing was written. --force overwrites it (if that pack \
             is published, packd refuses other bytes for its version: build a higher --version)\n",
            fixture.path("p.pack").display()
        )
    );
    // The published-or-not pack is untouched: same bytes, not a fresh sealing.
    assert_eq!(std::fs::read(fixture.path("p.pack")).unwrap(), first);

    let out = fixture.path("p.pack");
    assert_ok(&packer(&[
        "build",
        s(&fixture.pack_dir()),
        "--version",
        "1.2.0",
        "--keys",
        s(&fixture.keys()),
        "-o",
        s(&out),
        "--force",
    ]));
    assert_ne!(std::fs::read(&out).unwrap(), first);
}

#[test]
fn a_version_missing_its_patch_number_says_so() {
    let fixture = Fixture::new();
    let out = packer(&[
        "build",
        s(&fixture.pack_dir()),
        "--version",
        "1.2",
        "--keys",
        s(&fixture.keys()),
        "-o",
        s(&fixture.path("p.pack")),
    ]);
    assert_fails(&out);
    let err = stderr(&out);
    assert!(
        err.starts_with(
            "error: invalid value '1.2' for '--version <VERSION>': malformed version: expected \
             MAJOR.MINOR.PATCH such as 1.2.0, found \"1.2\": the patch number is missing\n"
        ),
        "{err}"
    );
}

#[test]
fn a_bare_version_as_a_range_is_explained() {
    let fixture = Fixture::new();
    assert_ok(&fixture.build("p.pack", &[]));
    let entry = format!("1.4={}", fixture.path("p.pack").display());
    let out = packer(&[
        "channel",
        "--keys",
        s(&fixture.keys()),
        "--channel",
        "stable",
        "--pack",
        "prompts",
        "--sequence",
        "1",
        "--expires",
        "30d",
        "--entry",
        &entry,
        "-o",
        s(&fixture.path("channel.json")),
    ]);
    assert_ok(&out);
    assert!(
        stderr(&out).contains(
            "note: range '1.4' means '^1.4' (a caret range); for 1.4.x only write '~1.4'\n"
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn build_without_validation_seals_a_bad_template_that_verify_then_refuses() {
    let fixture = Fixture::new();
    fixture.write("prompts/shared/rules.hbs", b"{{nope}}\n");
    assert_fails(&fixture.build("checked.pack", &[]));
    let out = fixture.path("unchecked.pack");
    let keys = fixture.keys();
    let dir = fixture.pack_dir();
    let args = [
        "build",
        s(&dir),
        "--version",
        "1.2.0",
        "--keys",
        s(&keys),
        "-o",
        s(&out),
    ];
    let mut unchecked = args.to_vec();
    unchecked.push("--no-validate");
    assert_ok(&packer(&unchecked));
    // What clients do on install: the template does not fit the contract.
    let result = packer(&["verify", s(&out), "--keys", s(&keys)]);
    assert_fails(&result);
    assert!(
        stderr(&result).contains("shared/rules.hbs:1: unknown variable 'nope'"),
        "{}",
        stderr(&result)
    );

    // Without the check-open, a good tree still builds a pack that opens.
    fixture.write("prompts/shared/rules.hbs", b"{{persona}}\n");
    let fast = fixture.path("fast.pack");
    let mut no_open = args.to_vec();
    no_open[7] = s(&fast);
    no_open.push("--no-check-open");
    let built = packer(&[no_open.as_slice(), &["--json"]].concat());
    assert_ok(&built);
    let summary: serde_json::Value = serde_json::from_slice(&built.stdout).unwrap();
    let sealed = std::fs::read(&fast).unwrap();
    assert_eq!(summary["sha256"], pack_format::sha256_hex(&sealed));
    assert_ok(&packer(&["verify", s(&fast), "--keys", s(&keys)]));
}

#[test]
fn build_says_which_name_it_seals_and_where_the_name_came_from() {
    let fixture = Fixture::new();
    let from_dir = fixture.build("from-dir.pack", &[]);
    assert_ok(&from_dir);
    assert!(
        stdout(&from_dir).contains(&format!(
            "name      prompts (from the directory name {}; pass --name NAME to choose)",
            s(&fixture.pack_dir())
        )),
        "{}",
        stdout(&from_dir)
    );

    let keys = fixture.keys();
    let dir = fixture.pack_dir();
    let out = fixture.path("named.pack");
    let named = packer(&[
        "--json",
        "build",
        s(&dir),
        "--name",
        "builtin",
        "--version",
        "1.2.0",
        "--keys",
        s(&keys),
        "-o",
        s(&out),
    ]);
    assert_ok(&named);
    let summary: serde_json::Value = serde_json::from_slice(&named.stdout).unwrap();
    assert_eq!(summary["name"], "builtin");
    assert_eq!(summary["name_from"], "option");
}

#[test]
fn a_missing_keys_directory_is_named_without_suggesting_a_new_key_set() {
    let fixture = Fixture::new();
    let missing = fixture.path("keyz");
    let out = fixture.path("p.pack");
    let dir = fixture.pack_dir();
    let build = packer(&[
        "build",
        s(&dir),
        "--version",
        "1.2.0",
        "--keys",
        s(&missing),
        "-o",
        s(&out),
    ]);
    let document = fixture.path("channel.json");
    let channel = packer(&[
        "channel",
        "--keys",
        s(&missing),
        "--channel",
        "stable",
        "--pack",
        "prompts",
        "--sequence",
        "1",
        "--expires",
        "30d",
        "--entry",
        "*=builtin",
        "-o",
        s(&document),
    ]);
    for refused in [&build, &channel] {
        assert_fails(refused);
        let err = stderr(refused);
        assert!(
            err.contains(&format!("--keys {}: no such directory", s(&missing))),
            "{err}"
        );
        assert!(err.contains("existing key directory"), "{err}");
        assert!(!err.contains("keygen --dir"), "{err}");
    }
    assert!(!out.exists() && !document.exists() && !missing.exists());
}
