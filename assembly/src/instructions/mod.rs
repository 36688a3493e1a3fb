//! Instruction files: the user's global file, the project's file in each directory from
//! the worktree root down to the working directory (the first non-empty one of the names
//! `instruction_files` lists, by default `CLAUDE.md`, `AGENTS.md`, `CONTEXT.md`), and the
//! files and URLs the config's `instructions` names ([`sources`] says where they are looked
//! for). They are data: their text goes into the prompt as written and is never compiled
//! as a template.
//!
//! Budgets: each file 32 KiB (a project or configured file is cut, the global file is left
//! out whole), and 64 KiB for all of them together, spent in prompt order. The file that
//! crosses the total is cut there; those after it are left out and named in a note, so
//! the model knows to read them when they matter.

use std::io::Read;
use std::path::{Path, PathBuf};

pub mod sources;

pub use sources::{Configured, Sources, Switches, is_url, worktree_root};

/// Byte budget of each instruction file.
pub const INSTRUCTIONS_MAX_BYTES: usize = 32 * 1024;
/// Byte budget of all instruction files of one prompt together.
pub const INSTRUCTIONS_TOTAL_BYTES: usize = 64 * 1024;
/// The names tried in each project directory by default, in order; the first non-empty
/// one is used. `CLAUDE.md` comes first so a project written for Claude Code reads as it
/// always did; `AGENTS.md` is the name most other agents share; `CONTEXT.md` is the older
/// name some projects still carry. The config's `instruction_files` replaces the list.
pub const PROJECT_FILES: [&str; 3] = ["CLAUDE.md", "AGENTS.md", "CONTEXT.md"];
/// The most characters of a per-directory name in `instruction_files`.
pub const NAME_MAX: usize = 255;

/// One instruction file as it goes into the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstructionFile {
    pub path: PathBuf,
    /// The text to include (already cut, with the note, when the file was too large).
    pub text: String,
    /// The file's size when it was cut to fit a budget.
    pub truncated_from: Option<u64>,
}

/// A file left out because the total budget was spent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    pub path: PathBuf,
    pub size: u64,
}

/// The instruction files of one turn, plus what the user should hear about them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Instructions {
    pub global: Option<InstructionFile>,
    /// The project's files, the worktree root's first, the working directory's last.
    pub project: Vec<InstructionFile>,
    /// The files the config's `instructions` names, in the order listed.
    pub configured: Vec<InstructionFile>,
    /// What did not fit in [`INSTRUCTIONS_TOTAL_BYTES`].
    pub left_out: Vec<LeftOut>,
    pub warnings: Vec<String>,
}

/// A file read within its own budget, before the total is applied.
struct Found {
    path: PathBuf,
    /// The trimmed text kept.
    kept: String,
    size: u64,
    cut: bool,
}

/// Which list a found file goes to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Global,
    Project,
    Configured,
}

impl Instructions {
    /// Reads every source for a turn.
    pub fn read(sources: &Sources) -> Instructions {
        let mut warnings = Vec::new();
        let mut found: Vec<(Place, Found)> = Vec::new();
        if let Some(global) = read_global(&sources.global_candidates(), &mut warnings) {
            found.push((Place::Global, global));
        }
        let names = sources.project_names();
        for dir in sources.project_dirs() {
            if let Some(file) = read_dir_file(&dir, &names) {
                found.push((Place::Project, file));
            }
        }
        for entry in sources.configured_entries(&mut warnings) {
            let path = match entry {
                Configured::File(path) => path,
                Configured::Url(url) => {
                    match sources.fetched.get(&url) {
                        Some(Ok(text)) => {
                            let bytes = text.as_bytes();
                            if let Some(file) = capped(Path::new(&url), bytes, bytes.len() as u64)
                            {
                                found.push((Place::Configured, file));
                            }
                        }
                        Some(Err(why)) => warnings.push(format!(
                            "instructions: {url} was left out of the prompt: {why}"
                        )),
                        None => warnings.push(format!(
                            "instructions: {url} was left out of the prompt: it was not fetched (only agent sessions and `agent prompt` fetch instruction URLs)"
                        )),
                    }
                    continue;
                }
            };
            // A configured file the walk read already (the root's AGENTS.md) is not shown twice.
            let same = |f: &Found| real(&f.path) == real(&path);
            if found.iter().any(|(_, f)| same(f)) {
                continue;
            }
            if let Some(file) = read_capped(&path) {
                found.push((Place::Configured, file));
            }
        }

        let mut instructions = Instructions::default();
        let mut left = INSTRUCTIONS_TOTAL_BYTES;
        for (place, mut file) in found {
            if file.kept.len() <= left {
                left -= file.kept.len();
            } else {
                // The file that crosses the total is cut there; every later one is left out.
                let kept = String::from_utf8_lossy(cut_to(file.kept.as_bytes(), left))
                    .trim_end()
                    .to_string();
                left = 0;
                if kept.trim().is_empty() {
                    instructions.left_out.push(LeftOut {
                        path: file.path,
                        size: file.size,
                    });
                    continue;
                }
                file.kept = kept;
                file.cut = true;
            }
            let file = finish(file, &mut warnings);
            match place {
                Place::Global => instructions.global = Some(file),
                Place::Project => instructions.project.push(file),
                Place::Configured => instructions.configured.push(file),
            }
        }
        if !instructions.left_out.is_empty() {
            let names: Vec<String> = instructions
                .left_out
                .iter()
                .map(|f| f.path.display().to_string())
                .collect();
            let warning = format!(
                "instruction files over the {INSTRUCTIONS_TOTAL_BYTES}-byte total were left out of the prompt: {}",
                names.join(", ")
            );
            tracing::warn!("{warning}");
            warnings.push(warning);
        }
        instructions.warnings = warnings;
        instructions
    }

    pub fn is_empty(&self) -> bool {
        self.global.is_none()
            && self.project.is_empty()
            && self.configured.is_empty()
            && self.left_out.is_empty()
    }

    /// The files in prompt order: global, project (root first), configured.
    pub fn files(&self) -> impl Iterator<Item = &InstructionFile> {
        self.global
            .iter()
            .chain(&self.project)
            .chain(&self.configured)
    }

    /// What the prompt says about the files left out, if any.
    pub fn left_out_note(&self) -> Option<String> {
        if self.left_out.is_empty() {
            return None;
        }
        let mut note = format!(
            "[More instruction files apply here, but the {INSTRUCTIONS_TOTAL_BYTES}-byte budget for instruction files is spent. Read these yourself when they matter to the task:"
        );
        for file in &self.left_out {
            note.push_str(&format!(
                "\n- {} ({} bytes)",
                file.path.display(),
                file.size
            ));
        }
        note.push(']');
        Some(note)
    }
}

/// The global file: the first candidate that exists and is not empty. Over budget it is
/// dropped whole (a user-wide file that large is more likely a mistake than instructions),
/// and the fallback is not tried: the user has a global file, it is only too large.
fn read_global(candidates: &[PathBuf], warnings: &mut Vec<String>) -> Option<Found> {
    for path in candidates {
        let Some((bytes, size)) = open(path) else {
            continue;
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
        if text.is_empty() {
            continue;
        }
        return Some(Found {
            path: path.clone(),
            kept: text.to_string(),
            size,
            cut: false,
        });
    }
    None
}

/// One directory's file: the first of `names` that is non-empty after trimming.
fn read_dir_file(dir: &Path, names: &[String]) -> Option<Found> {
    names.iter().find_map(|name| read_capped(&dir.join(name)))
}

/// A project or configured file within [`INSTRUCTIONS_MAX_BYTES`]: over it, the text is
/// cut (see [`cut`]). `None` when the file is missing, unreadable or empty.
fn read_capped(path: &Path) -> Option<Found> {
    let (bytes, size) = open(path)?;
    capped(path, &bytes, size)
}

/// `bytes` (the start of something `size` bytes long) within [`INSTRUCTIONS_MAX_BYTES`];
/// `None` when empty after trimming.
fn capped(path: &Path, bytes: &[u8], size: u64) -> Option<Found> {
    let cut = size > INSTRUCTIONS_MAX_BYTES as u64;
    let kept = if cut { self::cut(bytes) } else { bytes };
    let kept = String::from_utf8_lossy(kept);
    let kept = if cut { kept.trim_end() } else { kept.trim() };
    if kept.trim().is_empty() {
        return None;
    }
    Some(Found {
        path: path.to_path_buf(),
        kept: kept.to_string(),
        size,
        cut,
    })
}

/// The file as the prompt shows it: a cut one ends in a note to read the rest, and the
/// user hears about it.
fn finish(file: Found, warnings: &mut Vec<String>) -> InstructionFile {
    if !file.cut {
        return InstructionFile {
            path: file.path,
            text: file.kept,
            truncated_from: None,
        };
    }
    let (path, size, shown) = (file.path.display(), file.size, file.kept.len());
    let warning = format!("{path} is {size} bytes; only the first {shown} bytes are in the prompt");
    tracing::warn!("{warning}");
    warnings.push(warning);
    InstructionFile {
        text: format!(
            "{}\n\n[{path} continues beyond this point: the file is {size} bytes and only the first {shown} are shown. Read the file itself when the rest matters.]",
            file.kept
        ),
        truncated_from: Some(file.size),
        path: file.path,
    }
}

/// The instruction files (per directory as at the root) of the directories between the
/// workspace root and `file`, outermost first. The root's own is not among them: it is in
/// the system prompt already. Empty for a file outside the workspace, and when the
/// project switch is on.
pub fn nested(
    workspace_root: &Path,
    file: &Path,
    switches: Switches,
    names: &[String],
) -> Vec<InstructionFile> {
    let names = switches.project_names(names);
    if switches.no_project {
        return Vec::new();
    }
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
        .filter_map(|dir| read_dir_file(dir, &names))
        .map(|file| finish(file, &mut Vec::new()))
        .collect()
}

/// The part of `bytes` (the first budget's worth of a larger file) to keep within
/// [`INSTRUCTIONS_MAX_BYTES`]: see [`cut_to`].
pub fn cut(bytes: &[u8]) -> &[u8] {
    cut_to(bytes, INSTRUCTIONS_MAX_BYTES)
}

/// The part of `bytes` to keep within `budget`: up to the last complete UTF-8 character,
/// then back to the last newline if that newline lies within the final 20 % of what is
/// kept.
pub fn cut_to(bytes: &[u8], budget: usize) -> &[u8] {
    let mut end = bytes.len().min(budget);
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

/// A file's first `budget + 1` bytes (enough to know it is over budget) and its size;
/// `None` when it is missing or unreadable.
fn open(path: &Path) -> Option<(Vec<u8>, u64)> {
    match read_prefix(path, INSTRUCTIONS_MAX_BYTES) {
        Ok(read) => Some(read),
        Err(e) => {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::debug!("skipping unreadable {}: {e}", path.display());
            }
            None
        }
    }
}

fn real(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// Reads at most `budget + 1` bytes and returns them with the file's size.
fn read_prefix(path: &Path, budget: usize) -> std::io::Result<(Vec<u8>, u64)> {
    let file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    let mut bytes = Vec::with_capacity((size as usize).min(budget + 1));
    file.take(budget as u64 + 1).read_to_end(&mut bytes)?;
    // Trust what was read over the metadata, which can be stale or zero for special files.
    let size = size.max(bytes.len() as u64);
    Ok((bytes, size))
}
