//! `packer build`: validate every template, then seal the directory into a pack.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use pack_contract::{Contract, validate_template_all};
use pack_format::payload::validate_path;
use pack_format::{ContentKeyRing, Limits, Payload, PayloadFile, SealInput, validate_name};
use serde_json::json;

use crate::fsio::{self, bar, read_limited, spinner};
use crate::keys::content_keys;
use crate::{ContentKeyArgs, print_json, shown};

#[derive(clap::Args)]
#[command(
    after_help = "Every file under PACK_DIR goes into the pack, in path order; nothing \
    is skipped (there is no manifest file). Empty directories carry nothing and are left out. \
    Symbolic links, special files, non-UTF-8 names, unsafe names and files over the size \
    limit are errors.\n\n\
    Every *.hbs file is a template: it must be UTF-8 and pass strict validation against the \
    runtime's variable contract for --schema, and every template that contract requires (the \
    files the runtime renders) must be present. All problems are listed as FILE:LINE: message \
    and nothing is written.\n\n\
    Builds are reproducible: the payload (the tar.zst before encryption) depends only on the \
    files and SOURCE_DATE_EPOCH (default 0), which is written as every file's mtime. The \
    sealed file itself differs on every build because each seal uses a fresh key and nonce."
)]
pub struct BuildArgs {
    /// Directory of templates to pack.
    #[arg(value_name = "PACK_DIR")]
    pack_dir: PathBuf,

    /// Pack version (semver), e.g. 1.4.0.
    #[arg(long, value_parser = crate::parse_version)]
    version: semver::Version,

    /// Key directory (from `packer keygen`); the pack is sealed for KEYS/content.key.
    #[arg(long, value_name = "DIR")]
    keys: PathBuf,

    /// Output file for the sealed pack.
    #[arg(short = 'o', long = "output", value_name = "OUT.pack")]
    output: PathBuf,

    /// Variable-contract schema the templates are written for.
    #[arg(long, default_value_t = 1)]
    schema: u32,

    /// Pack name (default: the directory's name).
    #[arg(long)]
    name: Option<String>,

    /// zstd level, 1-22. The default, 19, makes the smallest packs and takes well under a
    /// second for a prompt-sized tree; for trees of tens of MB, 3 (zstd's own default) is
    /// about 60x faster, for packs about 40% larger.
    #[arg(long, default_value_t = 19, value_parser = clap::value_parser!(i32).range(1..=22))]
    zstd_level: i32,

    /// Overwrite an existing output file. Without it a build never replaces a pack, which
    /// may already be published: packd refuses other bytes under a published version.
    #[arg(long)]
    force: bool,

    #[command(flatten)]
    extra_keys: ContentKeyArgs,
}

pub fn run(args: &BuildArgs, json: bool) -> Result<()> {
    let limits = Limits::DEFAULT;
    let name = pack_name(args)?;
    let Some(contract) = Contract::builtin(args.schema) else {
        bail!(
            "schema {} is not known to this packer; it knows schema {}",
            args.schema,
            join_numbers(Contract::builtin_schemas())
        );
    };
    let keys = content_keys(Some(&args.keys), &args.extra_keys.content_keys)?;
    let mtime = source_date_epoch()?;
    check_output_outside(&args.pack_dir, &args.output)?;
    if !args.force && args.output.exists() {
        bail!(
            "{} already exists; nothing was written. --force overwrites it (if that pack is \
             published, packd refuses other bytes for its version: build a higher --version)",
            shown(&args.output)
        );
    }

    let mut problems = Vec::new();
    let mut found = Vec::new();
    walk(
        &args.pack_dir,
        &args.pack_dir,
        &limits,
        &mut found,
        &mut problems,
    )?;

    let progress = bar(found.len() as u64, "validating");
    let mut files = Vec::with_capacity(found.len());
    for (path, relative) in found {
        progress.inc(1);
        let bytes = match read_limited(&path, limits.max_file_len, "file") {
            Ok(bytes) => bytes,
            Err(error) => {
                problems.push(format!("{error:#}"));
                continue;
            }
        };
        if relative.ends_with(".hbs") {
            match std::str::from_utf8(&bytes) {
                Ok(source) => {
                    for error in validate_template_all(&shown(&path), source, &contract) {
                        problems.push(match &error.hint {
                            Some(hint) => format!("{error}\n    hint: {hint}"),
                            None => error.to_string(),
                        });
                    }
                }
                Err(e) => problems.push(format!(
                    "{}: not UTF-8 (invalid byte at offset {}); templates must be UTF-8 text",
                    shown(&path),
                    e.valid_up_to()
                )),
            }
        }
        files.push(PayloadFile {
            path: relative,
            bytes,
        });
    }
    progress.finish_and_clear();
    // Clients check this after opening and mark a pack without them bad: refuse here.
    for missing in missing_templates(&contract, |path| files.iter().any(|f| f.path == path)) {
        problems.push(format!(
            "{}: missing; clients of schema {} render {missing} and refuse a pack without it",
            shown(&args.pack_dir.join(missing)),
            args.schema
        ));
    }

    if !problems.is_empty() {
        for problem in &problems {
            eprintln!("{problem}");
        }
        bail!(
            "{} problem(s) in {}; fix them and build again (nothing was written)",
            problems.len(),
            shown(&args.pack_dir)
        );
    }
    if files.is_empty() {
        bail!(
            "{} holds no files; a pack needs at least one template",
            shown(&args.pack_dir)
        );
    }

    let payload = Payload::new(files, &limits)
        .with_context(|| format!("packing {}", shown(&args.pack_dir)))?;
    let progress = spinner("compressing and sealing");
    let key_refs: Vec<_> = keys.iter().collect();
    let sealed = pack_format::seal(
        &SealInput {
            name: &name,
            version: &args.version,
            schema: args.schema,
            payload: &payload,
            mtime,
            zstd_level: args.zstd_level,
        },
        &key_refs,
    )?;
    // What clients will do, before anything is written: a pack that does not open under
    // the limits they apply must not leave this machine.
    progress.set_message("checking the sealed pack opens");
    let ring = ContentKeyRing::new(keys.iter().cloned());
    // Opening also hashes the sealed bytes: that is the pack's SHA-256.
    let sha256 = match pack_format::open(&sealed, &ring, &limits) {
        Ok(opened) => opened.sha256,
        Err(error) => {
            progress.finish_and_clear();
            bail!(
                "the sealed pack does not open under the limits clients apply ({error}); \
                 nothing was written"
            );
        }
    };
    fsio::write_atomic(&args.output, &sealed, 0o644)?;
    progress.finish_and_clear();

    let key_ids: Vec<&str> = keys.iter().map(|k| k.id()).collect();
    if json {
        print_json(&json!({
            "name": name,
            "version": args.version.to_string(),
            "schema": args.schema,
            "sha256": sha256,
            "size": sealed.len(),
            "files": payload.len(),
            "content_bytes": payload.total_size(),
            "key_ids": key_ids,
            "output": shown(&args.output),
        }));
    } else {
        outln!("built     {} -> {}", name, shown(&args.output));
        outln!("name      {name}");
        outln!("version   {}", args.version);
        outln!("schema    {}", args.schema);
        outln!(
            "files     {} ({} bytes)",
            payload.len(),
            payload.total_size()
        );
        outln!("size      {} bytes", sealed.len());
        outln!("sha256    {sha256}");
        outln!("key ids   {}", key_ids.join(", "));
    }
    Ok(())
}

fn pack_name(args: &BuildArgs) -> Result<String> {
    if let Some(name) = &args.name {
        validate_name("pack", name).context("--name")?;
        return Ok(name.clone());
    }
    // `canonicalize` so that `packer build .` uses the real directory name.
    let dir = std::fs::canonicalize(&args.pack_dir)
        .with_context(|| format!("opening pack directory {}", shown(&args.pack_dir)))?;
    let Some(name) = dir.file_name().and_then(|n| n.to_str()) else {
        bail!(
            "cannot take a pack name from {}; pass --name",
            shown(&args.pack_dir)
        );
    };
    validate_name("pack", name).with_context(|| {
        format!("the directory name {name:?} is not a valid pack name; pass --name")
    })?;
    Ok(name.to_string())
}

fn source_date_epoch() -> Result<u64> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(value) => value.trim().parse().with_context(|| {
            format!("SOURCE_DATE_EPOCH={value:?} is not a number of seconds since 1970")
        }),
        Err(std::env::VarError::NotPresent) => Ok(0),
        Err(e) => bail!("SOURCE_DATE_EPOCH: {e}"),
    }
}

/// The templates `contract` requires that `has` does not find, in the contract's order.
pub(crate) fn missing_templates(contract: &Contract, has: impl Fn(&str) -> bool) -> Vec<&str> {
    contract
        .required_templates()
        .iter()
        .map(String::as_str)
        .filter(|path| !has(path))
        .collect()
}

/// A pack written inside its own directory would be packed by the next build.
fn check_output_outside(pack_dir: &Path, output: &Path) -> Result<()> {
    let dir = std::fs::canonicalize(pack_dir)
        .with_context(|| format!("opening pack directory {}", shown(pack_dir)))?;
    if let Ok(out_dir) = std::fs::canonicalize(fsio::parent_dir(output))
        && out_dir.starts_with(&dir)
    {
        bail!(
            "output {} is inside the pack directory {}; write it elsewhere or the next build would pack it",
            shown(output),
            shown(pack_dir)
        );
    }
    Ok(())
}

/// Collects every regular file under `dir` in path order as (path on disk, path in the
/// pack). Problems that concern one entry are collected so the author sees all of them.
pub(crate) fn walk(
    root: &Path,
    dir: &Path,
    limits: &Limits,
    found: &mut Vec<(PathBuf, String)>,
    problems: &mut Vec<String>,
) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading directory {}", shown(dir)))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("reading directory {}", shown(dir)))?;
    entries.sort_by_key(|entry| entry.file_name());
    for entry in entries {
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path)
            .with_context(|| format!("reading {}", shown(&path)))?;
        let kind = meta.file_type();
        if kind.is_symlink() {
            problems.push(format!(
                "{}: is a symbolic link; packs hold regular files only (replace the link with a copy of the file)",
                shown(&path)
            ));
            continue;
        }
        let Some(relative) = relative_name(root, &path) else {
            problems.push(format!(
                "{}: the name is not UTF-8; rename it",
                shown(&path)
            ));
            continue;
        };
        if kind.is_dir() {
            walk(root, &path, limits, found, problems)?;
            continue;
        }
        if !kind.is_file() {
            problems.push(format!(
                "{}: not a regular file (a device, socket or FIFO); remove it",
                shown(&path)
            ));
            continue;
        }
        if let Err(e) = validate_path(&relative, limits) {
            problems.push(format!("{}: unsafe name in a pack: {e}", shown(&path)));
            continue;
        }
        if meta.len() > limits.max_file_len {
            problems.push(format!(
                "{}: {} bytes, over the per-file limit of {} bytes",
                shown(&path),
                meta.len(),
                limits.max_file_len
            ));
            continue;
        }
        found.push((path, relative));
    }
    Ok(())
}

/// `path` relative to `root`, `/`-separated; `None` if any part is not UTF-8.
fn relative_name(root: &Path, path: &Path) -> Option<String> {
    let relative = path.strip_prefix(root).ok()?;
    let parts: Option<Vec<&str>> = relative
        .components()
        .map(|c| c.as_os_str().to_str())
        .collect();
    Some(parts?.join("/"))
}

fn join_numbers(numbers: &[u32]) -> String {
    numbers
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
