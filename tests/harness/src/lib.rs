//! What the tests of packd (`server/tests`), packer (`packer/tests`) and the end-to-end suite
//! (`promptpack-tests`) share: the workspace's binaries ([`bin`]), a real `packd` on loopback
//! ([`Packd`]) and a publisher's keys, token and packd config ([`Publisher`]).

#![allow(clippy::print_stderr)]

mod binaries;
mod packd;
mod publisher;

pub use binaries::{bin, build, packer, run, workspace};
pub use packd::{Backend, ConfigFile, Packd, Storage};
pub use publisher::{Publisher, copy_tree, packd_config, walk};

/// Says on stderr, in the line `scripts/test.sh` counts as a skip, that the running test
/// returns without testing anything (`SKIPPED: <test> (<why>)`). Straight to the file
/// descriptor: the harness captures `eprintln!` of a passing test, and this must be seen.
pub fn skipped(why: &str) {
    use std::io::Write as _;
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let _ = std::io::stderr().write_all(format!("\nSKIPPED: {test} ({why})\n").as_bytes());
}
