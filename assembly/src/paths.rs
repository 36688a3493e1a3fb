//! Paths compared as the file system sees them: lexically normalised, and with symlinks
//! resolved.

use std::path::{Component, Path, PathBuf};

/// `.` and `..` resolved lexically.
pub fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The path with every existing part resolved (symlinks followed, dangling ones too), so
/// a link inside the workspace that points outside it is seen for what it is.
pub fn real_path(path: &Path) -> PathBuf {
    let mut path = normalise(path);
    // A dangling link cannot be canonicalised, but writing to it creates its target.
    for _ in 0..40 {
        match std::fs::read_link(&path) {
            Ok(target) => {
                let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
                path = normalise(&base.join(target));
            }
            Err(_) => break,
        }
    }
    let mut existing = path.clone();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (
            existing.file_name().map(|n| n.to_os_string()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path,
        }
    }
}
