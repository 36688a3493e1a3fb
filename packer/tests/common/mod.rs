//! Output helpers shared by the packer integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::process::Output;

pub fn s(path: &Path) -> &str {
    path.to_str().expect("temp paths are UTF-8")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[track_caller]
pub fn assert_ok(output: &Output) {
    assert!(
        output.status.success(),
        "packer failed\nstdout:\n{}\nstderr:\n{}",
        stdout(output),
        stderr(output)
    );
}

#[track_caller]
pub fn assert_fails(output: &Output) {
    assert!(
        !output.status.success(),
        "packer should have failed\nstdout:\n{}\nstderr:\n{}",
        stdout(output),
        stderr(output)
    );
}
