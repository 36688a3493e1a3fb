//! The built-in pack, from [`pack_serving::builtin`]: the one compiled in, or one read from
//! a directory, failing as a [`ClientError`] like everything else the client loads.

use std::sync::Arc;

pub use pack_serving::builtin::{BUILTIN_FILES, BUILTIN_NAME, BUILTIN_SHA256, snapshot};

use crate::ClientError;
use crate::snapshot::Snapshot;

/// [`pack_serving::builtin::from_dir`], its failure as [`ClientError::Builtin`].
pub fn from_dir(dir: &std::path::Path) -> Result<Arc<Snapshot>, ClientError> {
    pack_serving::builtin::from_dir(dir).map_err(|e| ClientError::Builtin {
        path: e.path,
        reason: e.reason,
    })
}

/// [`from_dir`] held to the contract this client takes packs of (see
/// [`crate::accepts::Accepts`]): the built-in pack of an app with its own contract must
/// satisfy it, and one of plain files only has to parse.
pub fn from_dir_for(
    dir: &std::path::Path,
    accepts: &crate::accepts::Accepts,
) -> Result<Arc<Snapshot>, ClientError> {
    let Some(contract) = accepts.builtin_contract() else {
        return from_dir(dir);
    };
    pack_serving::builtin::from_dir_for(dir, &contract).map_err(|e| ClientError::Builtin {
        path: e.path,
        reason: e.reason,
    })
}
