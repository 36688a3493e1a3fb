//! The workspace's binaries, found beside the running test and built when cargo has not built
//! them for it, and the commands that run them.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// `target/<profile>`: the test executable runs from `target/<profile>/deps/` (an example from
/// `target/<profile>/examples/`), and cargo puts the binaries one level up.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(Path::parent)
        .expect("the test executable is in target/<profile>/deps")
        .to_path_buf()
}

/// Path of the binary `name` of workspace package `package`, fresh: built once per test
/// process ([`build`]) unless it is the running test's own package, whose binaries
/// `cargo test` has just built.
pub fn bin(package: &str, name: &str) -> PathBuf {
    let path = profile_dir().join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let own = std::env::var("CARGO_PKG_NAME").is_ok_and(|running| running == package);
    if !(own && path.exists()) {
        build(package);
    }
    assert!(
        path.exists(),
        "{name} of {package} is missing at {}",
        path.display()
    );
    path
}

/// The workspace packages that ship binaries.
const BINARY_PACKAGES: [&str; 4] = ["packer", "pack-server", "pack-client", "agent"];

/// Builds the binaries of `package` for the running test's profile and target directory,
/// once per test process: a stale binary would test yesterday's code. Tests of a package of
/// their own (no binary of theirs is built) get every binary package in one build at the
/// first call, so the build is paid once, up front, and never inside what a test times;
/// tests of a binary package build only what they ask for, never their own binary while it
/// runs.
pub fn build(package: &str) {
    static BUILT: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Mutex::default).lock().unwrap();
    if built.contains(package) {
        return;
    }
    let running = std::env::var("CARGO_PKG_NAME").unwrap_or_default();
    let packages: Vec<&str> = if BINARY_PACKAGES.contains(&running.as_str()) {
        vec![package]
    } else {
        BINARY_PACKAGES.to_vec()
    };
    let dir = profile_dir();
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev",
        Some(other) => other,
    };
    let mut cargo = Command::new(env!("CARGO"));
    cargo.args(["build", "-q"]);
    for package in &packages {
        cargo.args(["-p", package]);
    }
    let status = cargo
        .args(["--bins", "--profile", profile])
        .arg("--target-dir")
        .arg(dir.parent().unwrap())
        .current_dir(workspace())
        .status()
        .unwrap();
    assert!(
        status.success(),
        "building the binaries of {} failed",
        packages.join(", ")
    );
    built.extend(packages.iter().map(|p| p.to_string()));
}

/// `packer`, the publisher's tool.
pub fn packer() -> Command {
    Command::new(bin("packer", "packer"))
}

/// Runs a command, panicking with its output if it fails.
pub fn run(mut cmd: Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
