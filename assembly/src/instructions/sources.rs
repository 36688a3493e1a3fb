//! Where instruction files are looked for: the global file (the data directory's
//! `AGENTS.md`, else `~/.claude/CLAUDE.md`), the project's files in every directory from
//! the worktree root down to the working directory, and the files and URLs the config's
//! `instructions` names. Reading them, under budgets, is the parent module's job; fetching
//! the URLs is the host's (this crate does no I/O beyond the disk), which hands their text
//! in through [`Sources::fetched`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::paths::{normalise, real_path};

use super::PROJECT_FILES;

/// Any of these, set to anything but empty, `0`, `false`, `no` or `off`, leaves every
/// `CLAUDE.md` out: the global fallback, the project's and the nested ones.
pub const NO_CLAUDE_MD_ENV: [&str; 2] = [
    "OPENCODE_DISABLE_CLAUDE_CODE",
    "OPENCODE_DISABLE_CLAUDE_CODE_PROMPT",
];
/// Set (as above), the project's own instruction files are not looked for, nor its custom
/// agents (`.agents/agents/`).
pub const NO_PROJECT_ENV: &str = "OPENCODE_DISABLE_PROJECT_CONFIG";
/// The global fallback, relative to the home directory (where Claude Code keeps it).
pub const GLOBAL_FALLBACK: &str = ".claude/CLAUDE.md";
/// The most files one `instructions` glob brings in; a glob matching more is a mistake
/// more often than a wish (and the total budget would leave most of them out anyway).
pub const MATCHES_MAX: usize = 64;

/// The environment switches that leave instruction sources out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Switches {
    /// No `CLAUDE.md` anywhere: `AGENTS.md` only.
    pub no_claude_md: bool,
    /// No project instruction files (and no workspace agents).
    pub no_project: bool,
}

impl Switches {
    /// The switches as `var` reports the environment.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Switches {
        let on = |name: &str| {
            var(name).is_some_and(|value| {
                let value = value.trim().to_ascii_lowercase();
                !matches!(value.as_str(), "" | "0" | "false" | "no" | "off")
            })
        };
        Switches {
            no_claude_md: NO_CLAUDE_MD_ENV.into_iter().any(on),
            no_project: on(NO_PROJECT_ENV),
        }
    }

    /// The switches of this process's environment.
    pub fn from_process() -> Switches {
        Switches::from_env(|name| std::env::var(name).ok())
    }

    /// `names` without `CLAUDE.md` when the switch leaves it out.
    pub fn project_names(self, names: &[String]) -> Vec<String> {
        names
            .iter()
            .filter(|name| !(self.no_claude_md && name.eq_ignore_ascii_case("CLAUDE.md")))
            .cloned()
            .collect()
    }
}

/// The default per-directory names, as owned strings.
pub fn default_names() -> Vec<String> {
    PROJECT_FILES.iter().map(|name| name.to_string()).collect()
}

/// Whether an `instructions` entry is a URL (fetched over HTTP) rather than a path.
pub fn is_url(entry: &str) -> bool {
    let lower = entry.trim_start().to_ascii_lowercase();
    lower.starts_with("https://") || lower.starts_with("http://")
}

/// One `instructions` entry as it resolved: a file on disk, or a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Configured {
    File(PathBuf),
    Url(String),
}

/// The nearest directory at or above `cwd` holding `.git` (a directory, or the file a
/// linked worktree or submodule has).
pub fn worktree_root(cwd: &Path) -> Option<PathBuf> {
    cwd.ancestors()
        .find(|dir| dir.join(".git").exists())
        .map(Path::to_path_buf)
}

/// Everything that decides a session's instruction files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sources {
    /// The data directory's `AGENTS.md`.
    pub global: PathBuf,
    /// For `~/.claude/CLAUDE.md` and `~/` in `instructions`; `None` leaves both out.
    pub home: Option<PathBuf>,
    /// Where the session runs.
    pub cwd: PathBuf,
    /// The config's `instructions`: paths and globs, relative ones inside the workspace,
    /// and `http(s)://` URLs.
    pub configured: Vec<String>,
    /// The names tried in each project directory, in order (`instruction_files`); the first
    /// non-empty one is read.
    pub names: Vec<String>,
    /// What fetching each URL of `configured` gave: its text, or why there is none. A URL
    /// missing here was never fetched, and is left out with a warning.
    pub fetched: BTreeMap<String, Result<String, String>>,
    pub switches: Switches,
}

impl Sources {
    /// The global file and the project's files only: no home, no configured files, no
    /// switches.
    pub fn new(global: &Path, cwd: &Path) -> Sources {
        Sources {
            global: global.to_path_buf(),
            home: None,
            cwd: cwd.to_path_buf(),
            configured: Vec::new(),
            names: default_names(),
            fetched: BTreeMap::new(),
            switches: Switches::default(),
        }
    }

    /// The names tried in each project directory, under the switches.
    pub fn project_names(&self) -> Vec<String> {
        self.switches.project_names(&self.names)
    }

    /// The URLs among the configured entries, in the order listed.
    pub fn urls(&self) -> Vec<String> {
        self.configured
            .iter()
            .filter(|entry| is_url(entry))
            .map(|entry| entry.trim().to_string())
            .collect()
    }

    /// The workspace: the worktree root, or the working directory outside a repository
    /// (walking up to `/` would pick up whatever sits in the home directory).
    pub fn root(&self) -> PathBuf {
        worktree_root(&self.cwd).unwrap_or_else(|| self.cwd.clone())
    }

    /// The global files in the order they are tried; the first non-empty one is used.
    pub fn global_candidates(&self) -> Vec<PathBuf> {
        let mut files = vec![self.global.clone()];
        if !self.switches.no_claude_md
            && let Some(home) = &self.home
        {
            files.push(home.join(GLOBAL_FALLBACK));
        }
        files
    }

    /// The directories whose instruction files are read, the worktree root first, down
    /// to the working directory; none when the project switch is on.
    pub fn project_dirs(&self) -> Vec<PathBuf> {
        if self.switches.no_project {
            return Vec::new();
        }
        let root = self.root();
        let mut dirs: Vec<PathBuf> = self
            .cwd
            .ancestors()
            .take_while(|dir| dir.starts_with(&root))
            .map(Path::to_path_buf)
            .collect();
        dirs.reverse();
        dirs
    }

    /// The files the config's `instructions` names, in the order listed (a glob's matches
    /// sorted by path). A relative entry that leads outside the workspace, by `..` or
    /// through a symbolic link, is skipped with a warning: an absolute path (or `~/`)
    /// says so on purpose.
    pub fn configured_files(&self, warnings: &mut Vec<String>) -> Vec<PathBuf> {
        self.configured_entries(warnings)
            .into_iter()
            .filter_map(|entry| match entry {
                Configured::File(path) => Some(path),
                Configured::Url(_) => None,
            })
            .collect()
    }

    /// The configured entries in the order listed: files as [`Sources::configured_files`]
    /// finds them, URLs as written.
    pub fn configured_entries(&self, warnings: &mut Vec<String>) -> Vec<Configured> {
        let root = self.root();
        let mut files = Vec::new();
        for entry in &self.configured {
            if is_url(entry) {
                let url = Configured::Url(entry.trim().to_string());
                if !files.contains(&url) {
                    files.push(url);
                }
                continue;
            }
            let (base, relative) = match (entry.strip_prefix("~/"), &self.home) {
                (Some(rest), Some(home)) => (home.join(rest), false),
                (Some(_), None) => {
                    warnings.push(format!(
                        "instructions: {entry:?} left out: no home directory is known"
                    ));
                    continue;
                }
                (None, _) if Path::new(entry).is_absolute() => (PathBuf::from(entry), false),
                (None, _) => (root.join(entry), true),
            };
            let path = normalise(&base);
            let outside =
                |found: &Path| relative && !real_path(found).starts_with(real_path(&root));
            if relative && !path.starts_with(&root) {
                warnings.push(format!(
                    "instructions: {entry:?} is outside the workspace {}; name a file elsewhere by its absolute path",
                    root.display()
                ));
                continue;
            }
            let matched = if has_glob(entry) {
                match expand(&path) {
                    Ok(matched) => matched,
                    Err(reason) => {
                        warnings.push(format!("instructions: {entry:?}: {reason}"));
                        continue;
                    }
                }
            } else if path.is_file() {
                vec![path]
            } else {
                tracing::debug!("instructions: {entry:?} names no file");
                Vec::new()
            };
            if matched.len() > MATCHES_MAX {
                warnings.push(format!(
                    "instructions: {entry:?} matches {} files; only the first {MATCHES_MAX} are read",
                    matched.len()
                ));
            }
            for found in matched.into_iter().take(MATCHES_MAX) {
                if outside(&found) {
                    warnings.push(format!(
                        "instructions: {} leads outside the workspace {} through a symbolic link; left out",
                        found.display(),
                        root.display()
                    ));
                    continue;
                }
                let found = Configured::File(found);
                if !files.contains(&found) {
                    files.push(found);
                }
            }
        }
        files
    }

    /// Every file whose change could change the instructions: what [`super::Instructions::read`]
    /// reads now, and the files it would read if they appeared.
    pub fn watched(&self) -> Vec<PathBuf> {
        let mut files = self.global_candidates();
        for dir in self.project_dirs() {
            files.extend(self.project_names().iter().map(|name| dir.join(name)));
        }
        files.extend(self.configured_files(&mut Vec::new()));
        files
    }
}

/// Whether an `instructions` entry is a glob.
fn has_glob(entry: &str) -> bool {
    entry.contains(['*', '?', '[', '{'])
}

/// Checks a glob as the config gives it, so a typo stops the run when the config is read
/// rather than quietly matching nothing.
pub fn check_glob(entry: &str) -> Result<(), String> {
    if !has_glob(entry) {
        return Ok(());
    }
    globset::GlobBuilder::new(entry)
        .literal_separator(true)
        .build()
        .map(|_| ())
        .map_err(|e| format!("invalid glob {entry:?}: {e}"))
}

/// The files matching an absolute glob, sorted. Only the directory before the first
/// component with a glob character is walked, and no deeper than the pattern reaches
/// unless it has `**`; ignored files (`.gitignore`) are skipped.
fn expand(pattern: &Path) -> Result<Vec<PathBuf>, String> {
    let mut base = PathBuf::new();
    let mut rest = Vec::new();
    for component in pattern.components() {
        let text = component.as_os_str().to_string_lossy();
        if rest.is_empty() && !has_glob(&text) {
            base.push(component);
        } else {
            rest.push(text.into_owned());
        }
    }
    let relative = rest.join("/");
    let matcher = globset::GlobBuilder::new(&relative)
        .literal_separator(true)
        .build()
        .map_err(|e| format!("invalid glob: {e}"))?
        .compile_matcher();
    if !base.is_dir() {
        return Ok(Vec::new());
    }
    let mut walker = ignore::WalkBuilder::new(&base);
    walker
        .hidden(false)
        .require_git(false)
        .max_depth((!relative.contains("**")).then_some(rest.len()))
        .sort_by_file_name(|a, b| a.cmp(b));
    let mut found: Vec<PathBuf> = walker
        .build()
        .flatten()
        .filter(|entry| entry.file_type().is_some_and(|t| t.is_file()))
        .filter(|entry| {
            entry
                .path()
                .strip_prefix(&base)
                .is_ok_and(|rel| matcher.is_match(rel))
        })
        .map(ignore::DirEntry::into_path)
        .collect();
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_read_truthy_values() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(Switches::from_env(env(&[])), Switches::default());
        let off = Switches::from_env(env(&[("OPENCODE_DISABLE_CLAUDE_CODE", "0")]));
        assert!(!off.no_claude_md);
        let on = Switches::from_env(env(&[
            ("OPENCODE_DISABLE_CLAUDE_CODE_PROMPT", "true"),
            ("OPENCODE_DISABLE_PROJECT_CONFIG", "1"),
        ]));
        assert!(on.no_claude_md && on.no_project);
        assert_eq!(
            on.project_names(&default_names()),
            ["AGENTS.md", "CONTEXT.md"]
        );
    }

    #[test]
    fn a_glob_walks_only_below_its_literal_part() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("rules/deep")).unwrap();
        for file in ["rules/a.md", "rules/b.md", "rules/c.txt", "rules/deep/d.md"] {
            std::fs::write(dir.path().join(file), "x").unwrap();
        }
        let shallow = expand(&dir.path().join("rules/*.md")).unwrap();
        assert_eq!(
            shallow,
            [dir.path().join("rules/a.md"), dir.path().join("rules/b.md")]
        );
        let deep = expand(&dir.path().join("rules/**/*.md")).unwrap();
        assert_eq!(deep.len(), 3, "{deep:?}");
    }
}
