//! `packer diff`: what changes between two packs, file by file and in the system prompts the
//! runtime assembles from them.
//!
//! The prompts come from the runtime's own assembly library (`prompt_assembly::preview`):
//! the same assembly code an agent runs each turn, fed a fixed sample context, so what this prints is
//! what the model would see, and it cannot drift from the runtime.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use pack_format::{FormatError, Limits, read_pack_dir};
use pack_serving::snapshot::SnapshotMeta;
use pack_serving::{Snapshot, Source};
use prompt_assembly::preview::{SAMPLE_MODEL, sample_prompts};
use serde_json::json;
use similar::TextDiff;

use crate::fsio::read_limited;
use crate::keys::content_key_ring;
use crate::{ContentKeyArgs, print_json, shown};

#[derive(clap::Args)]
#[command(
    after_help = "OLD and NEW are each a sealed pack (a .pack file; --keys or \
    --content-key must hold its content key) or a pack directory (read as `packer build` \
    reads it: every regular file, the same limits, templates checked against the contract of \
    --schema).\n\n\
    First the files: each added, removed or changed file as a unified diff. Then the system \
    prompt of every built-in agent (mavis, explore, worker, verifier) in every prompt mode \
    (tui, coding, work), assembled by the agent runtime's own code from a fixed sample \
    context: mavis at the root of an interactive session, the others as tasks delegated by \
    mavis; the default config; a Linux machine in /home/dev/project, a git repository, dated \
    2026-01-01; a one-line global and project AGENTS.md; the pack's own skills, no custom \
    agents, no MCP servers; the model id of --model. A prompt that differs names the \
    changed files it reads.\n\n\
    Only content is compared: a sealed pack and the directory it was built from are the \
    same, whatever the pack's version.\n\n\
    Exit status, as diff(1): 0 when files and prompts are the same, 1 when anything differs, \
    2 on trouble (a file that cannot be read, a pack that does not open, a missing key, a \
    directory `packer build` would refuse)."
)]
pub struct DiffArgs {
    /// The old pack: a sealed pack file or a pack directory.
    #[arg(value_name = "OLD")]
    old: PathBuf,

    /// The new pack: a sealed pack file or a pack directory.
    #[arg(value_name = "NEW")]
    new: PathBuf,

    /// Key directory holding content.key, to open sealed packs.
    #[arg(long, value_name = "DIR")]
    keys: Option<PathBuf>,

    #[command(flatten)]
    extra_keys: ContentKeyArgs,

    /// Variable-contract schema of a pack directory (a sealed pack names its own).
    #[arg(long, default_value_t = 1)]
    schema: u32,

    /// Model id the prompts are rendered for; it picks the model-family template (the
    /// default matches no family, so the pack's default family template is used).
    #[arg(long, default_value = SAMPLE_MODEL)]
    model: String,

    /// Lines of context around each change.
    #[arg(
        short = 'U',
        long = "unified",
        value_name = "LINES",
        default_value_t = 3
    )]
    context: usize,

    /// Print nothing: the exit status alone says whether the packs differ.
    #[arg(short, long)]
    quiet: bool,
}

/// One side of the comparison.
struct Side {
    /// How the user named it.
    path: PathBuf,
    /// What it is, for the header line.
    describe: String,
    files: BTreeMap<String, Vec<u8>>,
    snapshot: Snapshot,
}

/// What happened to one file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Change {
    Added,
    Removed,
    Changed,
}

impl Change {
    fn as_str(self) -> &'static str {
        match self {
            Change::Added => "added",
            Change::Removed => "removed",
            Change::Changed => "changed",
        }
    }
}

struct FileDiff {
    path: String,
    change: Change,
    /// `None` for a file that is not UTF-8 text.
    diff: Option<String>,
}

struct PromptDiff {
    agent: &'static str,
    mode: String,
    /// Unified diff of the rendered prompt, `None` when it is the same.
    diff: Option<String>,
    /// Changed files this prompt reads, on either side.
    uses_changed: Vec<String>,
}

/// Runs the comparison and prints it. `Ok(true)` when the packs differ.
pub fn run(args: &DiffArgs, json: bool) -> Result<bool> {
    let old = load(args, &args.old, "OLD")?;
    let new = load(args, &args.new, "NEW")?;

    let files = file_diffs(&old, &new, args.context);
    let changed: BTreeSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let prompts = prompt_diffs(&old, &new, &args.model, args.context, &changed);
    let differs = !files.is_empty() || prompts.iter().any(|p| p.diff.is_some());

    if args.quiet {
        return Ok(differs);
    }
    if json {
        print_json(&json!({
            "old": {"path": shown(&old.path), "describe": old.describe, "files": old.files.len()},
            "new": {"path": shown(&new.path), "describe": new.describe, "files": new.files.len()},
            "model": args.model,
            "differs": differs,
            "files": files.iter().map(|f| json!({
                "path": f.path,
                "change": f.change.as_str(),
                "binary": f.diff.is_none(),
                "diff": f.diff,
            })).collect::<Vec<_>>(),
            "prompts": prompts.iter().map(|p| json!({
                "agent": p.agent,
                "mode": p.mode,
                "differs": p.diff.is_some(),
                "diff": p.diff,
                "uses_changed": p.uses_changed,
            })).collect::<Vec<_>>(),
        }));
        return Ok(differs);
    }

    outln!("old: {} ({})", shown(&old.path), old.describe);
    outln!("new: {} ({})", shown(&new.path), new.describe);
    for file in &files {
        outln!();
        match &file.diff {
            Some(diff) => outln!("{}", diff.trim_end_matches('\n')),
            None => outln!("binary file {} {}", file.path, file.change.as_str()),
        }
    }
    let differing: Vec<&PromptDiff> = prompts.iter().filter(|p| p.diff.is_some()).collect();
    for prompt in &differing {
        outln!();
        if prompt.uses_changed.is_empty() {
            outln!("prompt {}/{}", prompt.agent, prompt.mode);
        } else {
            outln!(
                "prompt {}/{} (reads changed {})",
                prompt.agent,
                prompt.mode,
                prompt.uses_changed.join(", ")
            );
        }
        if let Some(diff) = &prompt.diff {
            outln!("{}", diff.trim_end_matches('\n'));
        }
    }
    outln!();
    let count = |change| files.iter().filter(|f| f.change == change).count();
    if differs {
        outln!(
            "files: {} changed, {} added, {} removed; prompts: {} of {} differ (model {})",
            count(Change::Changed),
            count(Change::Added),
            count(Change::Removed),
            differing.len(),
            prompts.len(),
            args.model
        );
    } else {
        outln!(
            "no differences: {} files and {} rendered prompts are the same (model {})",
            new.files.len(),
            prompts.len(),
            args.model
        );
    }
    Ok(differs)
}

/// Reads one side: a pack directory, or a sealed pack opened with the given keys.
fn load(args: &DiffArgs, path: &Path, which: &str) -> Result<Side> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => bail!(
            "{which} {} does not exist; give a sealed pack file or a pack directory",
            shown(path)
        ),
        Err(error) => return Err(error).with_context(|| format!("{which} {}", shown(path))),
    };
    let limits = Limits::DEFAULT;
    let (name, version, schema, source_sha, describe, files) = if meta.is_dir() {
        let files = read_dir(path, &limits).with_context(|| format!("{which} {}", shown(path)))?;
        let name = std::fs::canonicalize(path)
            .ok()
            .and_then(|dir| dir.file_name()?.to_str().map(str::to_string))
            .unwrap_or_else(|| "pack".to_string());
        let describe = format!("directory, schema {}, {} files", args.schema, files.len());
        (
            name,
            semver::Version::new(0, 0, 0),
            args.schema,
            String::new(),
            describe,
            files,
        )
    } else {
        let bytes = read_limited(path, limits.max_sealed_len, "pack")
            .with_context(|| format!("{which} {}", shown(path)))?;
        if args.keys.is_none() && args.extra_keys.content_keys.is_empty() {
            bail!(
                "{which} {} is a sealed pack: give --keys DIR (or --content-key FILE) with its \
                 content key to open it",
                shown(path)
            );
        }
        let ring = content_key_ring(args.keys.as_deref(), &args.extra_keys.content_keys)?;
        let opened = pack_format::open(&bytes, &ring, &limits)
            .with_context(|| format!("{which} {} does not open", shown(path)))?;
        let header = opened.header;
        let files = opened.payload.into_files();
        let describe = format!(
            "{} {}, schema {}, sha256 {}, {} files",
            header.name,
            header.version,
            header.schema,
            opened.sha256,
            files.len()
        );
        (
            header.name,
            header.version,
            header.schema,
            opened.sha256,
            describe,
            files,
        )
    };
    let snapshot = Snapshot::new(
        SnapshotMeta {
            name,
            version,
            sequence: 0,
            source: Source::Remote,
            sha256: source_sha,
            schema,
        },
        files.iter().map(|(k, v)| (k.clone(), v.clone())),
    )
    .with_context(|| format!("{which} {}", shown(path)))?;
    Ok(Side {
        path: path.to_path_buf(),
        describe,
        files,
        snapshot,
    })
}

/// A pack directory's files, by the rules and limits of `packer build` (the one reader of
/// pack directories; templates are not validated here, the preview renders them).
fn read_dir(dir: &Path, limits: &Limits) -> Result<BTreeMap<String, Vec<u8>>> {
    match read_pack_dir(dir, limits, None) {
        Ok(payload) => Ok(payload.into_files()),
        Err(FormatError::PackDirectory { problems, .. }) => bail!(
            "{} problem(s) reading the pack directory:\n{}",
            problems.len(),
            problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        ),
        Err(other) => Err(other).with_context(|| format!("reading {}", shown(dir))),
    }
}

fn file_diffs(old: &Side, new: &Side, context: usize) -> Vec<FileDiff> {
    let paths: BTreeSet<&String> = old.files.keys().chain(new.files.keys()).collect();
    let mut diffs = Vec::new();
    for path in paths {
        let (before, after) = (old.files.get(path), new.files.get(path));
        let change = match (before, after) {
            (Some(a), Some(b)) if a == b => continue,
            (Some(_), Some(_)) => Change::Changed,
            (None, Some(_)) => Change::Added,
            (Some(_), None) => Change::Removed,
            (None, None) => continue,
        };
        fn text(bytes: Option<&Vec<u8>>) -> Option<&str> {
            match bytes {
                Some(bytes) => std::str::from_utf8(bytes).ok(),
                None => Some(""),
            }
        }
        let diff = match (text(before), text(after)) {
            (Some(a), Some(b)) => {
                let old_name = match before {
                    Some(_) => format!("old/{path}"),
                    None => "/dev/null".to_string(),
                };
                let new_name = match after {
                    Some(_) => format!("new/{path}"),
                    None => "/dev/null".to_string(),
                };
                Some(unified(a, b, &old_name, &new_name, context))
            }
            _ => None,
        };
        diffs.push(FileDiff {
            path: path.clone(),
            change,
            diff,
        });
    }
    diffs
}

fn prompt_diffs(
    old: &Side,
    new: &Side,
    model: &str,
    context: usize,
    changed: &BTreeSet<&str>,
) -> Vec<PromptDiff> {
    let before = sample_prompts(&old.snapshot, model);
    let after = sample_prompts(&new.snapshot, model);
    before
        .into_iter()
        .zip(after)
        .map(|(a, b)| {
            let label = format!("{}/{}", a.agent, a.mode);
            let mut uses_changed = BTreeSet::new();
            for prompt in [&a.rendered, &b.rendered].into_iter().flatten() {
                for key in prompt.metadata.templates.keys() {
                    if changed.contains(key.as_str()) {
                        uses_changed.insert(key.clone());
                    }
                }
            }
            let text = |rendered: &Result<prompt_assembly::AssembledPrompt, _>| match rendered {
                Ok(prompt) => prompt.text.clone(),
                Err(error) => format!("[{label} does not render from this pack: {error}]\n"),
            };
            let (a_text, b_text) = (text(&a.rendered), text(&b.rendered));
            let diff = (a_text != b_text).then(|| {
                unified(
                    &a_text,
                    &b_text,
                    &format!("old prompt {label}"),
                    &format!("new prompt {label}"),
                    context,
                )
            });
            PromptDiff {
                agent: a.agent,
                mode: a.mode.to_string(),
                diff,
                uses_changed: uses_changed.into_iter().collect(),
            }
        })
        .collect()
}

fn unified(old: &str, new: &str, old_name: &str, new_name: &str, context: usize) -> String {
    TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(context)
        .header(old_name, new_name)
        .to_string()
}
