//! The pack compiled into the binary (`packs/builtin`, validated by `build.rs`).

use std::sync::Arc;

use crate::snapshot::{Snapshot, SnapshotMeta, Source};

include!(concat!(env!("OUT_DIR"), "/builtin_pack.rs"));

/// Name and version the built-in pack reports.
pub const BUILTIN_NAME: &str = "builtin";

/// The built-in snapshot. `build.rs` already validated every template against the contract,
/// so compiling them again here cannot fail in a build that passed.
pub fn snapshot() -> Arc<Snapshot> {
    let files = BUILTIN_FILES
        .iter()
        .map(|(path, bytes)| ((*path).to_string(), bytes.to_vec()));
    let meta = SnapshotMeta {
        name: BUILTIN_NAME.to_string(),
        version: semver::Version::new(0, 0, 0),
        sequence: 0,
        source: Source::Builtin,
        sha256: BUILTIN_SHA256.to_string(),
        schema: 1,
    };
    Arc::new(Snapshot::new(meta, files).expect("packs/builtin was validated at build time"))
}
