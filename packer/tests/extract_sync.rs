//! `packer extract` makes durable what it wrote and nothing else: each file it wrote and each
//! directory it made is synced, never the whole file system (`syncfs`, which writes back
//! everything anyone left dirty there). Checked on the system calls themselves, with
//! `strace`, which also sees the hint (`posix_fadvise`) that starts each file's write-back
//! before the syncs.

use crate::common;

use common::{assert_ok, s, write_required_templates};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// strace, or `None` where it is missing outside CI (the test then says it was skipped);
/// under CI (env CI set) a missing strace fails the test.
fn strace() -> Option<&'static str> {
    let found = Command::new("strace")
        .arg("-V")
        .output()
        .is_ok_and(|out| out.status.success());
    if found {
        return Some("strace");
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "strace is missing under CI: scripts/test.sh installs it"
    );
    promptpack_harness::skipped("strace is not installed (apt-get install strace)");
    None
}

/// Whether `path` is on tmpfs or ramfs, which extract does not sync (nothing to write to).
fn in_memory(path: &Path) -> bool {
    let fs = rustix::fs::statfs(path).unwrap();
    matches!(u64::try_from(fs.f_type), Ok(0x0102_1994 | 0x8584_58f6))
}

/// The calls counted: the syncs, and the hint that starts each file's write-back first.
const TRACED: &str = "trace=syncfs,sync,fsync,fdatasync,fadvise64";

#[test]
fn extract_syncs_each_file_and_directory_it_wrote_and_never_the_file_system() {
    let Some(strace) = strace() else {
        return;
    };
    // Under target/, on the disk the build writes to (/tmp may be tmpfs).
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    if in_memory(dir.path()) {
        assert!(
            std::env::var_os("CI").is_none(),
            "under CI the target directory must be on a disk to test extract's syncs"
        );
        promptpack_harness::skipped(
            "the target directory is on tmpfs, which extract does not sync",
        );
        return;
    }
    let keys = dir.path().join("keys");
    let prompts = dir.path().join("prompts");
    write_required_templates(&prompts);
    for i in 0..30 {
        let path = prompts.join(format!("notes/deep/{}/note-{i}.txt", i % 3));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("note {i}\n")).unwrap();
    }
    let packer = env!("CARGO_BIN_EXE_packer");
    let run = |args: &[&str]| Command::new(packer).args(args).output().unwrap();
    assert_ok(&run(&["keygen", "--dir", s(&keys)]));
    let pack = dir.path().join("p.pack");
    assert_ok(&run(&[
        "build",
        s(&prompts),
        "--version",
        "1.0.0",
        "--keys",
        s(&keys),
        "-o",
        s(&pack),
    ]));

    let out = dir.path().join("out");
    let log = dir.path().join("strace.log");
    let traced = Command::new(strace)
        .args(["-f", "-qq", "-e", TRACED, "-o"])
        .arg(&log)
        .arg(packer)
        .args(["extract", s(&pack), "--keys", s(&keys), "-o", s(&out)])
        .output()
        .unwrap();
    assert_ok(&traced);
    let calls = sync_calls(&std::fs::read_to_string(&log).unwrap());

    let (files, dirs) = count_tree(&out);
    assert_eq!(calls.get("syncfs"), None, "no syncfs: {calls:?}");
    assert_eq!(calls.get("sync"), None, "no sync: {calls:?}");
    assert_eq!(
        calls.get("fdatasync"),
        Some(&files),
        "one fdatasync per file written: {calls:?}"
    );
    // Each file's write-back is started once, before the syncs wait on it.
    assert_eq!(
        calls.get("fadvise64"),
        Some(&files),
        "one write-back hint per file written: {calls:?}"
    );
    // Every directory made, the extracted directory itself, and the directory it was
    // renamed into.
    assert_eq!(
        calls.get("fsync"),
        Some(&(dirs + 2)),
        "one fsync per directory: {calls:?}"
    );

    // --no-fsync syncs nothing.
    let quiet = dir.path().join("quiet");
    let traced = Command::new(strace)
        .args(["-f", "-qq", "-e", TRACED, "-o"])
        .arg(&log)
        .arg(packer)
        .args(["extract", s(&pack), "--keys", s(&keys), "-o", s(&quiet)])
        .arg("--no-fsync")
        .output()
        .unwrap();
    assert_ok(&traced);
    let calls = sync_calls(&std::fs::read_to_string(&log).unwrap());
    assert!(calls.is_empty(), "--no-fsync syncs nothing: {calls:?}");

    // Nor does an extract into tmpfs, where there is no disk to write to.
    let shm = Path::new("/dev/shm");
    if !(shm.is_dir() && in_memory(shm)) {
        return;
    }
    let in_shm = tempfile::tempdir_in(shm).unwrap();
    let traced = Command::new(strace)
        .args(["-f", "-qq", "-e", TRACED, "-o"])
        .arg(&log)
        .arg(packer)
        .args(["extract", s(&pack), "--keys", s(&keys), "-o"])
        .arg(in_shm.path().join("out"))
        .output()
        .unwrap();
    assert_ok(&traced);
    let calls = sync_calls(&std::fs::read_to_string(&log).unwrap());
    assert_eq!(
        calls.get("fdatasync").or(calls.get("syncfs")),
        None,
        "tmpfs: no file synced: {calls:?}"
    );
    assert_eq!(count_tree(&in_shm.path().join("out")), (files, dirs));
}

/// How many times each system call appears in an `strace -f -qq` log (`PID name(args) = N`).
fn sync_calls(log: &str) -> BTreeMap<String, usize> {
    let mut calls = BTreeMap::new();
    for line in log.lines() {
        let Some(call) = line.split_whitespace().nth(1) else {
            continue;
        };
        if let Some((name, _)) = call.split_once('(') {
            *calls.entry(name.to_string()).or_default() += 1;
        }
    }
    calls
}

/// Files and directories under `root` (not counting `root`).
fn count_tree(root: &Path) -> (usize, usize) {
    let (mut files, mut dirs) = (0, 0);
    for entry in std::fs::read_dir(root).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            let (f, d) = count_tree(&entry.path());
            files += f;
            dirs += d + 1;
        } else {
            files += 1;
        }
    }
    (files, dirs)
}
