//! Instruction files: the user's global `AGENTS.md` in the data directory and the project's
//! `CLAUDE.md` or `AGENTS.md` at the workspace root. They are data: their text goes into
//! the prompt as written and is never compiled as a template.

use std::io::Read;
use std::path::{Path, PathBuf};

/// Byte budget of each instruction file.
pub const INSTRUCTIONS_MAX_BYTES: usize = 32 * 1024;
/// Project files, in the order they are tried; the first non-empty one wins.
pub const PROJECT_FILES: [&str; 2] = ["CLAUDE.md", "AGENTS.md"];

/// One instruction file as it goes into the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstructionFile {
    pub path: PathBuf,
    /// The text to include (already cut, with the note, when the file was too large).
    pub text: String,
    /// The file's size when it was cut to fit the budget.
    pub truncated_from: Option<u64>,
}

/// The instruction files of one turn, plus what the user should hear about them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Instructions {
    pub global: Option<InstructionFile>,
    pub project: Option<InstructionFile>,
    pub warnings: Vec<String>,
}

impl Instructions {
    /// Reads both files for a turn.
    pub fn read(global_path: &Path, workspace_root: &Path) -> Instructions {
        let mut warnings = Vec::new();
        let global = read_global(global_path, &mut warnings);
        let project = read_project(workspace_root, &mut warnings);
        Instructions {
            global,
            project,
            warnings,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.global.is_none() && self.project.is_none()
    }
}

/// The global file: over budget it is dropped whole (a user-wide file that large is more
/// likely a mistake than instructions), unreadable it is skipped.
pub fn read_global(path: &Path, warnings: &mut Vec<String>) -> Option<InstructionFile> {
    let (bytes, size) = match read_prefix(path, INSTRUCTIONS_MAX_BYTES) {
        Ok(read) => read,
        Err(e) => {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::debug!("skipping unreadable {}: {e}", path.display());
            }
            return None;
        }
    };
    if size > INSTRUCTIONS_MAX_BYTES as u64 {
        let warning = format!(
            "{} is {size} bytes, over the {INSTRUCTIONS_MAX_BYTES}-byte limit for global instructions; it was left out of the prompt",
            path.display()
        );
        tracing::warn!("{warning}");
        warnings.push(warning);
        return None;
    }
    let text = String::from_utf8_lossy(&bytes);
    let text = text.trim();
    (!text.is_empty()).then(|| InstructionFile {
        path: path.to_path_buf(),
        text: text.to_string(),
        truncated_from: None,
    })
}

/// The project file: `CLAUDE.md`, else `AGENTS.md`, at the workspace root only; the first
/// that is non-empty after trimming wins. Over budget it is cut at a UTF-8 boundary (at the
/// last newline when that falls in the final fifth), with a note to read the rest.
pub fn read_project(root: &Path, warnings: &mut Vec<String>) -> Option<InstructionFile> {
    for name in PROJECT_FILES {
        let path = root.join(name);
        let (bytes, size) = match read_prefix(&path, INSTRUCTIONS_MAX_BYTES) {
            Ok(read) => read,
            Err(e) => {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::debug!("skipping unreadable {}: {e}", path.display());
                }
                continue;
            }
        };
        if size <= INSTRUCTIONS_MAX_BYTES as u64 {
            let text = String::from_utf8_lossy(&bytes);
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            return Some(InstructionFile {
                path,
                text: text.to_string(),
                truncated_from: None,
            });
        }
        let kept = cut(&bytes);
        let kept = String::from_utf8_lossy(kept);
        let kept = kept.trim_end();
        if kept.trim().is_empty() {
            continue;
        }
        let warning = format!(
            "{} is {size} bytes; only the first {} bytes are in the prompt",
            path.display(),
            kept.len()
        );
        tracing::warn!("{warning}");
        warnings.push(warning);
        let text = format!(
            "{kept}\n\n[{} continues beyond this point: the file is {size} bytes and only the first {} are shown. Read the file itself when the rest matters.]",
            path.display(),
            kept.len()
        );
        return Some(InstructionFile {
            path,
            text,
            truncated_from: Some(size),
        });
    }
    None
}

/// The instruction files (CLAUDE.md or AGENTS.md, first non-empty, as at the root) of the
/// directories between the workspace root and `file`, outermost first. The root's own is
/// not among them: it is in the system prompt already. Empty for a file outside the
/// workspace.
pub fn nested(workspace_root: &Path, file: &Path) -> Vec<InstructionFile> {
    let Ok(relative) = file.strip_prefix(workspace_root) else {
        return Vec::new();
    };
    let mut dirs = Vec::new();
    let mut dir = workspace_root.to_path_buf();
    let parents: Vec<_> = relative
        .parent()
        .into_iter()
        .flat_map(|p| p.components())
        .collect();
    for component in parents {
        dir.push(component);
        dirs.push(dir.clone());
    }
    dirs.iter()
        .filter_map(|dir| read_project(dir, &mut Vec::new()))
        .collect()
}

/// The part of `bytes` (the first budget's worth of a larger file) to keep: up to the last
/// complete UTF-8 character, then back to the last newline if that newline lies within the
/// final 20 % of what is kept.
pub fn cut(bytes: &[u8]) -> &[u8] {
    let mut end = bytes.len().min(INSTRUCTIONS_MAX_BYTES);
    // Step back over continuation bytes to the start of the character the budget split.
    // `end` itself is a boundary when the byte there starts a character (or is the end).
    while end > 0 && end < bytes.len() && (bytes[end] & 0xC0) == 0x80 {
        end -= 1;
    }
    let kept = &bytes[..end];
    match kept.iter().rposition(|&b| b == b'\n') {
        Some(newline) if newline >= end - end / 5 => &kept[..newline],
        _ => kept,
    }
}

/// Reads at most `budget + 1` bytes (enough to know the file is over budget) and returns
/// them with the file's size.
fn read_prefix(path: &Path, budget: usize) -> std::io::Result<(Vec<u8>, u64)> {
    let file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    let mut bytes = Vec::with_capacity((size as usize).min(budget + 1));
    file.take(budget as u64 + 1).read_to_end(&mut bytes)?;
    // Trust what was read over the metadata, which can be stale or zero for special files.
    let size = size.max(bytes.len() as u64);
    Ok((bytes, size))
}
