//! Keys and packs are never silently replaced: a `packer build` or `packer keygen` that loses
//! the race for its output to another writer fails and leaves the winner's files as they are.

use crate::common;

use common::{assert_fails, assert_ok, s, stderr, stdout, write_required_templates};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use tempfile::TempDir;

fn packer() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_packer"));
    command
        .env_remove("PROMPTPACK_KEY_PASSWORD")
        .env_remove("SOURCE_DATE_EPOCH")
        .env_remove(PAUSE_ENV);
    command
}

fn run(args: &[&str]) -> Output {
    packer().args(args).output().expect("packer runs")
}

/// Debug builds of packer stop before placing their output while this names a file that
/// exists (README: packer build).
const PAUSE_ENV: &str = "PACKER_TEST_PAUSE_BEFORE_PLACING";

struct Fixture {
    dir: TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let fixture = Fixture {
            dir: tempfile::tempdir().unwrap(),
        };
        assert_ok(&run(&["keygen", "--dir", s(&fixture.keys())]));
        write_required_templates(&fixture.path("prompts"));
        fixture
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    fn keys(&self) -> PathBuf {
        self.path("keys")
    }

    fn build(&self, out: &Path) -> Command {
        let mut command = packer();
        command.args([
            "--json",
            "build",
            s(&self.path("prompts")),
            "--version",
            "1.0.0",
            "--keys",
            s(&self.keys()),
            "--zstd-level",
            "1",
            "-o",
            s(out),
        ]);
        command
    }

    /// The pack at `out` opens with the fixture's key: `packer verify` says so, and its
    /// SHA-256 is the one returned.
    fn verified_sha256(&self, out: &Path) -> String {
        let verify = run(&["--json", "verify", s(out), "--keys", s(&self.keys())]);
        assert_ok(&verify);
        json(&verify)["sha256"].as_str().unwrap().to_string()
    }
}

fn json(output: &Output) -> serde_json::Value {
    serde_json::from_str(&stdout(output)).expect("--json prints JSON")
}

/// Whether the packer under test has the pause (debug builds, as `cargo test` makes them);
/// says through the harness when it has not, and under CI (where `scripts/test.sh` runs
/// debug builds) a missing pause is a failure, not a skip.
fn has_pause_hook() -> bool {
    if cfg!(debug_assertions) {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "under CI the packer under test must be a debug build, which has {PAUSE_ENV}"
    );
    promptpack_harness::skipped(&format!("release builds of packer have no {PAUSE_ENV}"));
    false
}

/// Waits for `child` to create `path` (the signal that it has reached the pause), failing
/// if it exits first.
fn wait_for_pause(child: &mut Child, path: &Path) {
    while !path.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("packer exited ({status}) before reaching the pause");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_build_that_loses_the_race_for_its_output_replaces_nothing() {
    if !has_pause_hook() {
        return;
    }
    let fixture = Fixture::new();
    let out = fixture.path("dist/prompts-1.0.0.pack");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();

    // The first build checks that the output is free, seals, and stops just before placing
    // the pack; a second build of the same output runs from start to end meanwhile.
    let pause = fixture.path("pause");
    let mut first = fixture
        .build(&out)
        .env(PAUSE_ENV, &pause)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_pause(&mut first, &pause);
    let second = fixture.build(&out).output().unwrap();
    assert_ok(&second);
    let winner = json(&second)["sha256"].as_str().unwrap().to_string();

    std::fs::remove_file(&pause).unwrap();
    let first = first.wait_with_output().unwrap();
    assert_fails(&first);
    assert_eq!(
        stderr(&first),
        format!(
            "error: {} appeared while building; nothing was replaced (another build wrote it: \
             check which pack you meant to keep, and build again with --force to replace it)\n",
            out.display()
        )
    );
    assert_eq!(stdout(&first), "", "a failed build reports no pack");
    assert_eq!(
        fixture.verified_sha256(&out),
        winner,
        "the pack in place is the second build's, whole"
    );
    let left: Vec<_> = std::fs::read_dir(out.parent().unwrap())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(left, ["prompts-1.0.0.pack"], "no temporary file is left");
}

#[test]
fn concurrent_builds_to_one_output_leave_exactly_one_whole_pack() {
    let fixture = Fixture::new();
    let out = fixture.path("race.pack");
    let builds: Vec<Child> = (0..6)
        .map(|_| {
            fixture
                .build(&out)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<Output> = builds
        .into_iter()
        .map(|child| child.wait_with_output().unwrap())
        .collect();

    let winners: Vec<&Output> = outputs.iter().filter(|o| o.status.success()).collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one build places its pack; stderr of each:\n{}",
        outputs.iter().map(stderr).collect::<Vec<_>>().join("---\n")
    );
    for lost in outputs.iter().filter(|o| !o.status.success()) {
        let message = stderr(lost);
        let expected = [
            "already exists; nothing was written",
            "appeared while building; nothing was replaced",
        ];
        assert!(
            expected.iter().any(|e| message.contains(e)),
            "a losing build says why: {message}"
        );
    }
    let winner = json(winners[0])["sha256"].as_str().unwrap().to_string();
    assert_eq!(fixture.verified_sha256(&out), winner);
}

#[test]
fn keygen_into_an_existing_directory_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    std::fs::create_dir(&keys).unwrap();
    std::fs::write(keys.join("notes.txt"), "mine\n").unwrap();

    let refused = run(&["keygen", "--dir", s(&keys)]);
    assert_fails(&refused);
    assert_eq!(
        stderr(&refused),
        format!(
            "error: {} already exists; nothing was written. keygen writes a new key directory \
             whole: name one that does not exist yet (--force writes the keys into this one)\n",
            keys.display()
        )
    );
    let names: Vec<_> = std::fs::read_dir(&keys)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(names, ["notes.txt"], "a refused keygen writes nothing");
    let beside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(beside, ["keys"], "and leaves no temporary directory");
}

#[test]
fn a_keygen_that_loses_the_race_for_its_directory_replaces_nothing() {
    if !has_pause_hook() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");

    let pause = dir.path().join("pause");
    let mut first = packer()
        .args(["--json", "keygen", "--dir", s(&keys)])
        .env(PAUSE_ENV, &pause)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_pause(&mut first, &pause);
    let second = run(&["--json", "keygen", "--dir", s(&keys)]);
    assert_ok(&second);
    let placed = std::fs::read(keys.join("signing.pub")).unwrap();

    std::fs::remove_file(&pause).unwrap();
    let first = first.wait_with_output().unwrap();
    assert_fails(&first);
    assert_eq!(
        stderr(&first),
        format!(
            "error: {} appeared while the keys were generated; nothing was replaced (another \
             keygen wrote it: keep the key set packd and your clients trust)\n",
            keys.display()
        )
    );
    assert_eq!(std::fs::read(keys.join("signing.pub")).unwrap(), placed);
    assert_eq!(
        json(&second)["signing_key_id"],
        key_id_of_pub(&placed),
        "the key set in place is the second keygen's, whole"
    );
    let beside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(beside, ["keys"], "no temporary directory is left");
}

/// The key id in a minisign `.pub` file's comment line ("minisign public key ID").
fn key_id_of_pub(text: &[u8]) -> String {
    let text = String::from_utf8_lossy(text);
    let comment = text.lines().next().unwrap();
    comment.rsplit(' ').next().unwrap().to_string()
}
