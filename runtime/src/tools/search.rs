//! `grep` and `glob`: walk the tree the way ripgrep does, skipping what the project's
//! ignore files (`.gitignore`, `.ignore`) and hidden directories leave out.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Call, Gate, Tool, ToolContext, ToolError, ToolResult, blocking};
use crate::capabilities::ToolId;
use crate::permissions::Access;

#[derive(Deserialize, JsonSchema)]
pub(super) struct GrepArgs {
    /// A regular expression.
    pattern: String,
    /// Directory or file to search (default: the working directory).
    #[serde(default)]
    path: Option<String>,
    /// Only files whose path matches this glob, e.g. *.rs.
    #[serde(default)]
    include: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
pub(super) struct GlobArgs {
    /// A glob such as src/**/*.rs; without a slash it matches file names at any depth.
    pattern: String,
    /// Directory to search (default: the working directory).
    #[serde(default)]
    path: Option<String>,
}

pub(super) struct Grep;

impl Tool for Grep {
    type Args = GrepArgs;

    fn name(&self) -> &'static str {
        "grep"
    }

    fn gate(&self) -> Gate {
        Gate::Tool(ToolId::Grep)
    }

    fn read_only(&self) -> bool {
        true
    }

    fn access(&self, context: &ToolContext, args: &GrepArgs) -> Access {
        Access::Read(Some(context.resolve(args.path.as_deref().unwrap_or("."))))
    }

    async fn run(&self, call: Call<'_>, args: GrepArgs) -> ToolResult {
        blocking(call.context, move |context| grep(context, args)).await
    }
}

pub(super) struct Glob;

impl Tool for Glob {
    type Args = GlobArgs;

    fn name(&self) -> &'static str {
        "glob"
    }

    fn gate(&self) -> Gate {
        Gate::Tool(ToolId::Glob)
    }

    fn read_only(&self) -> bool {
        true
    }

    fn access(&self, context: &ToolContext, args: &GlobArgs) -> Access {
        Access::Read(Some(context.resolve(args.path.as_deref().unwrap_or("."))))
    }

    async fn run(&self, call: Call<'_>, args: GlobArgs) -> ToolResult {
        blocking(call.context, move |context| glob(context, args)).await
    }
}

/// Longest line shown in a grep result.
const MAX_LINE_CHARS: usize = 300;
/// Files bigger than this are not searched: they are data, not source.
const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

fn root(context: &ToolContext, path: Option<&str>) -> Result<PathBuf, ToolError> {
    let root = match path {
        Some(p) if !p.trim().is_empty() => context.resolve(p),
        _ => context.cwd.clone(),
    };
    if !root.exists() {
        return Err(ToolError::new(format!("{} does not exist", root.display())));
    }
    Ok(root)
}

fn walker(root: &Path) -> ignore::WalkBuilder {
    let mut builder = ignore::WalkBuilder::new(root);
    // Honour .gitignore even outside a git checkout: a fresh project has one before `git
    // init`, and the user still means it.
    builder
        .require_git(false)
        .sort_by_file_name(|a, b| a.cmp(b));
    builder
}

fn glob_matcher(pattern: &str) -> Result<globset::GlobMatcher, ToolError> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| ToolError::new(format!("invalid glob {pattern:?}: {e}")))
}

/// A glob without a slash matches file names at any depth (`*.rs`), one with a slash
/// matches paths relative to the search root (`src/**/*.rs`).
fn matches(matcher: &globset::GlobMatcher, pattern: &str, root: &Path, path: &Path) -> bool {
    if pattern.contains('/') {
        path.strip_prefix(root)
            .is_ok_and(|rel| matcher.is_match(rel))
    } else {
        path.file_name().is_some_and(|name| matcher.is_match(name))
    }
}

fn grep(context: &ToolContext, args: GrepArgs) -> ToolResult {
    let regex = regex::Regex::new(&args.pattern)
        .map_err(|e| ToolError::new(format!("invalid regular expression: {e}")))?;
    let root = root(context, args.path.as_deref())?;
    let include = match &args.include {
        Some(glob) if !glob.trim().is_empty() => Some((glob_matcher(glob)?, glob.as_str())),
        _ => None,
    };
    let max = context.limits.search_results;
    let mut out = String::new();
    let mut shown = 0;
    let mut more = 0;
    for entry in walker(&root).build().flatten() {
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        if let Some((matcher, pattern)) = &include
            && !matches(matcher, pattern, &root, path)
        {
            continue;
        }
        if entry.metadata().is_ok_and(|m| m.len() > MAX_FILE_BYTES) {
            continue;
        }
        let Ok(file) = std::fs::File::open(path) else {
            continue;
        };
        let mut reader = std::io::BufReader::new(file);
        if reader.fill_buf().is_ok_and(|head| head.contains(&0)) {
            continue;
        }
        let mut line = Vec::new();
        let mut number = 0;
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => number += 1,
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\n', '\r']);
            if !regex.is_match(text) {
                continue;
            }
            if shown == max {
                more += 1;
                continue;
            }
            shown += 1;
            let text: String = if text.chars().count() > MAX_LINE_CHARS {
                text.chars()
                    .take(MAX_LINE_CHARS)
                    .chain("…".chars())
                    .collect()
            } else {
                text.to_string()
            };
            out.push_str(&format!("{}:{number}: {text}\n", path.display()));
        }
    }
    if shown == 0 {
        return Ok(format!(
            "no matches for {:?} under {}",
            args.pattern,
            root.display()
        ));
    }
    if more > 0 {
        out.push_str(&format!(
            "… {more} more matches not shown; narrow the search with path or include\n"
        ));
    }
    Ok(out)
}

fn glob(context: &ToolContext, args: GlobArgs) -> ToolResult {
    let root = root(context, args.path.as_deref())?;
    let pattern = args.pattern.trim_start_matches("./");
    let matcher = glob_matcher(pattern)?;
    let mut found: Vec<(SystemTime, PathBuf)> = walker(&root)
        .build()
        .flatten()
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .filter(|e| matches(&matcher, pattern, &root, e.path()))
        .map(|e| {
            let modified = e
                .metadata()
                .ok()
                .and_then(|m| m.modified().ok())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            (modified, e.into_path())
        })
        .collect();
    if found.is_empty() {
        return Ok(format!(
            "no files match {pattern:?} under {}",
            root.display()
        ));
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let max = context.limits.search_results;
    let total = found.len();
    let mut out: String = found
        .iter()
        .take(max)
        .map(|(_, p)| format!("{}\n", p.display()))
        .collect();
    if total > max {
        out.push_str(&format!(
            "… {} more files not shown; use a narrower pattern\n",
            total - max
        ));
    }
    Ok(out)
}
