//! Output helpers shared by the packer integration tests.
#![allow(dead_code)]

pub mod packd;

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

/// Writes every template the runtime requires for schema 1 under `pack_dir`, each a line of
/// plain text that passes validation: without them clients refuse a pack, and so does
/// `packer build`.
pub fn write_required_templates(pack_dir: &Path) {
    let contract = pack_contract::Contract::builtin(1).expect("schema 1 is built in");
    for template in contract.required_templates() {
        let path = pack_dir.join(template);
        std::fs::create_dir_all(path.parent().expect("a template path has a parent")).unwrap();
        std::fs::write(&path, format!("Required template {template}.\n")).unwrap();
    }
}
