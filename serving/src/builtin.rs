//! The pack compiled into the binary (`packs/builtin`, validated by `build.rs`).

use std::sync::Arc;

use crate::snapshot::{Snapshot, SnapshotMeta, Source};

include!(concat!(env!("OUT_DIR"), "/builtin_pack.rs"));

/// A built-in pack directory that cannot serve (see [`from_dir`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("built-in pack {path}: {reason}")]
pub struct BuiltinError {
    pub path: String,
    /// Every problem found, `; `-separated.
    pub reason: String,
}

/// Name and version the built-in pack reports.
pub const BUILTIN_NAME: &str = "builtin";

/// The built-in snapshot. `build.rs` already validated every template against the contract,
/// so compiling them again here cannot fail in a build that passed.
#[allow(
    clippy::expect_used,
    reason = "compiled-in templates that build.rs validated: a failure is a broken build"
)]
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

/// A built-in pack read from a directory at run time, for programs that do not compile one
/// in (the Python package takes its bundled prompts this way). It is held to what `build.rs`
/// holds `packs/builtin` to: every file passes the pack-directory reader (no unsafe path,
/// no link, no oversize file), every template fits the contract of schema 1, and every
/// template the contract requires is there. Its `sha256` is that of its canonical tar, as
/// for the compiled-in pack, so the same files give the same digest either way.
pub fn from_dir(dir: &std::path::Path) -> Result<Arc<Snapshot>, BuiltinError> {
    let contract = pack_contract::Contract::builtin(1).ok_or_else(|| BuiltinError {
        path: dir.display().to_string(),
        reason: "the contract of schema 1 is not compiled into this build".to_string(),
    })?;
    from_dir_for(dir, &contract)
}

/// [`from_dir`] held to `contract` rather than the agent's schema 1: the contract the app
/// takes packs of (an app's own, or plain files), which the built-in pack must satisfy as
/// every pack it installs does.
pub fn from_dir_for(
    dir: &std::path::Path,
    contract: &pack_contract::Contract,
) -> Result<Arc<Snapshot>, BuiltinError> {
    use pack_format::{FormatError, Limits};

    let failed = |reason: String| BuiltinError {
        path: dir.display().to_string(),
        reason,
    };
    if !dir.is_dir() {
        return Err(failed("not a directory".to_string()));
    }
    let payload = match pack_contract::read_complete_pack(dir, contract, &Limits::DEFAULT) {
        Ok(payload) => payload,
        Err(FormatError::PackDirectory { problems, .. }) => {
            let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
            return Err(failed(lines.join("; ")));
        }
        Err(e) => return Err(failed(e.to_string())),
    };
    let tar = payload.to_tar(0).map_err(|e| failed(e.to_string()))?;
    let meta = SnapshotMeta {
        name: BUILTIN_NAME.to_string(),
        version: semver::Version::new(0, 0, 0),
        sequence: 0,
        source: Source::Builtin,
        sha256: pack_format::sha256_hex(&tar),
        schema: contract.schema(),
    };
    let snapshot = Snapshot::with_contract(meta, payload.into_files(), contract.clone())
        .map_err(|e| failed(e.to_string()))?;
    Ok(Arc::new(snapshot))
}
