//! `packer build`: validate every template, then seal the directory into a pack.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use pack_contract::layout::{CLAUDE_INSTRUCTIONS, Role};
use pack_contract::{APP_CONTRACT_PATH, Contract, Kind, template_check};
use pack_format::{
    ContentKeyRing, DirProblem, FormatError, IndexEntry, Limits, PackDir, SealOptions, SealedDir,
    Unpack, sha256_hex, validate_name,
};
use serde_json::json;

use crate::fsio::{self, Placed, spinner};
use crate::keys::content_keys;
use crate::{ContentKeyArgs, print_json, shown};

#[derive(clap::Args)]
#[command(
    after_help = "Every file under PACK_DIR goes into the pack, in path order; nothing \
    is skipped (there is no manifest file). Empty directories carry nothing and are left out. \
    Symbolic links, special files, non-UTF-8 names, unsafe names and files over the size \
    limit are errors.\n\n\
    Every *.hbs file is a template: it must be UTF-8 and pass strict validation against the \
    pack's contract, and every template that contract requires must be present. The contract \
    is --contract: `agent` (the default), the agent runtime's variables for --schema; `app`, \
    an app's own, read from PACK_DIR/contract.json and shipped in the pack; `files`, plain \
    files for coding agents, nothing required (templates must parse; skill and agent front \
    matter, managed-settings.json and requirements.toml are checked, and the build lists which \
    agent reads each file). All problems are listed as FILE:LINE: message and nothing is \
    written.\n\n\
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

    /// The contract the pack declares: `agent` (the agent runtime's, of --schema), `app`
    /// (the app's own, in PACK_DIR/contract.json) or `files` (plain files, nothing
    /// required).
    #[arg(long, value_enum, default_value_t = ContractArg::Agent)]
    contract: ContractArg,

    /// Agent variable-contract schema the templates are written for (default 1); only with
    /// `--contract agent`.
    #[arg(long)]
    schema: Option<u32>,

    /// Pack name (default: the directory's name). packd keeps each name and version for
    /// good, and a channel serves one pack name: choose it here rather than by where the
    /// directory happens to be.
    #[arg(long)]
    name: Option<String>,

    /// zstd level, 1-22. The default, 19, makes the smallest packs and takes well under a
    /// second for a prompt-sized tree; for trees of tens of MB, 3 (zstd's own default) is
    /// many times faster, for somewhat larger packs.
    #[arg(long, default_value_t = 19, value_parser = clap::value_parser!(i32).range(1..=22))]
    zstd_level: i32,

    /// Pack format: 2, the only one packer seals and the one every client reads. Any other
    /// is refused, saying what to use.
    #[arg(long, default_value_t = pack_format::FORMAT_VERSION)]
    format: u32,

    /// Overwrite an existing output file. Without it a build never replaces a pack, which
    /// may already be published: packd refuses other bytes under a published version. Of
    /// two builds to the same output at once, without --force, the first to finish writes
    /// it and the other fails, replacing nothing.
    #[arg(long)]
    force: bool,

    /// Skip the strict validation of every *.hbs template (the templates clients require
    /// must still be there). Clients validate every template of a pack they install and
    /// keep the pack they have when one fails, so a broken template never reaches a model
    /// call; it only fails the release. For trees validated already, say by an earlier
    /// `packer build` of the same files in CI. Validation compiles each distinct top-level
    /// tag or block once per build, leaving out the text between tags, and checks a template
    /// whole only to report a problem in it, so it costs a small part of a build
    /// (templates are limited to 128 KiB each).
    #[arg(long)]
    no_validate: bool,

    /// Skip opening the sealed pack under the clients' limits before writing it. Clients
    /// still refuse a pack that does not open; the check catches a packer bug before the
    /// pack is published rather than after.
    #[arg(long)]
    no_check_open: bool,

    #[command(flatten)]
    extra_keys: ContentKeyArgs,
}

pub fn run(args: &BuildArgs, json: bool) -> Result<()> {
    let limits = Limits::DEFAULT;
    check_format(args.format)?;
    let (name, name_from) = pack_name(args)?;
    let contract = declared_contract(args)?;
    let schema = contract.schema();
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

    // One reader of pack directories, for everyone: every file, or every problem.
    let mut dir = PackDir::scan(&args.pack_dir, &limits);
    // Clients check this after opening and mark a pack without them bad: refuse here.
    for missing in missing_templates(&contract, |path| dir.contains(path)) {
        dir.add_problem(DirProblem::new(
            args.pack_dir.join(missing),
            match contract.kind() {
                Kind::App => format!(
                    "missing; {APP_CONTRACT_PATH} lists it in \"templates\", so the app renders \
                     it and clients refuse a pack without it"
                ),
                Kind::Agent(_) | Kind::Files => format!(
                    "missing; clients of schema {schema} render {missing} and refuse a pack \
                     without it"
                ),
            },
        ));
    }
    // Every file is read once, straight into the payload, and validated, hashed and
    // compressed on every core while the rest is read: no more than the sealed pack and a
    // few frames in memory, however large the tree.
    let progress = spinner("reading, validating and sealing");
    let check = template_check(&contract);
    let key_refs: Vec<_> = keys.iter().collect();
    let options = SealOptions {
        format: args.format,
        name: &name,
        version: &args.version,
        schema,
        mtime,
        zstd_level: args.zstd_level,
    };
    let sealed = dir.seal(
        &options,
        &key_refs,
        (!args.no_validate).then_some(&check as _),
    );
    let SealedDir { sealed, index } = match sealed {
        Ok(sealed) => sealed,
        Err(FormatError::PackDirectory { problems, .. }) => {
            progress.finish_and_clear();
            for problem in &problems {
                eprintln!("{}", shown_problem(problem));
            }
            bail!(
                "{} problem(s) in {}; fix them and build again (nothing was written)",
                problems.len(),
                shown(&args.pack_dir)
            );
        }
        Err(other) => {
            progress.finish_and_clear();
            return Err(other).with_context(|| format!("packing {}", shown(&args.pack_dir)));
        }
    };
    // What clients will do, before anything is written: a pack that does not open under
    // the limits they apply must not leave this machine. Every check `open` makes, with
    // the files dropped as they pass rather than kept.
    progress.set_message("checking the sealed pack opens");
    let ring = ContentKeyRing::new(keys.iter().cloned());
    // The pack goes to a synced temporary file beside the output while it is checked (or
    // hashed) on this thread; it is renamed into place only once the check has passed.
    // With the check, the pack's SHA-256 is taken on a third thread meanwhile.
    let (staged, opened, sha256) = std::thread::scope(|scope| {
        let staging = scope.spawn(|| fsio::stage(&args.output, &sealed, 0o644));
        let (opened, sha256) = if args.no_check_open {
            (Ok(()), sha256_hex(&sealed))
        } else {
            let hashing = scope.spawn(|| sha256_hex(&sealed));
            let opened = pack_format::open_into(&sealed, &ring, &limits, &Discard).map(drop);
            (opened, fsio::joined(hashing))
        };
        (fsio::joined(staging), opened, sha256)
    });
    if let Err(error) = opened {
        progress.finish_and_clear();
        // Dropping the staged file removes it.
        drop(staged);
        bail!(
            "the sealed pack does not open under the limits clients apply ({error}); nothing \
             was written"
        );
    }
    let staged = staged?;
    fsio::pause_before_placing();
    // The check above was seconds ago: another build may have written the output since.
    // Without --force the pack goes into place only where nothing is, in one step.
    if args.force {
        staged.commit()?;
    } else if let Placed::Taken = staged.commit_new()? {
        progress.finish_and_clear();
        bail!(
            "{} appeared while building; nothing was replaced (another build wrote it: check \
             which pack you meant to keep, and build again with --force to replace it)",
            shown(&args.output)
        );
    }
    progress.finish_and_clear();

    let key_ids: Vec<&str> = keys.iter().map(|k| k.id()).collect();
    let content_bytes: u64 = index.iter().map(|entry| entry.size).sum();
    // Who reads each file, for a pack of plain files: the table of `layout`.
    let readers: Vec<(&str, Role, Vec<&str>)> = match contract.kind() {
        Kind::Files => {
            let has_claude_md = index.iter().any(|e| e.path == CLAUDE_INSTRUCTIONS);
            index
                .iter()
                .map(|entry| {
                    let role = Role::of(&entry.path);
                    let targets = role
                        .readers(has_claude_md)
                        .iter()
                        .map(|t| t.name())
                        .collect();
                    (entry.path.as_str(), role, targets)
                })
                .collect()
        }
        Kind::Agent(_) | Kind::App => Vec::new(),
    };
    if json {
        print_json(&json!({
            "name": name,
            "name_from": match &name_from {
                NameFrom::Option => "option",
                NameFrom::Directory(_) => "directory",
            },
            "version": args.version.to_string(),
            "schema": schema,
            "contract": contract_name(contract.kind()),
            "read_by": readers
                .iter()
                .map(|(path, _, targets)| (path.to_string(), json!(targets)))
                .collect::<serde_json::Map<_, _>>(),
            "format": args.format,
            "sha256": sha256,
            "size": sealed.len(),
            "files": index.len(),
            "content_bytes": content_bytes,
            "key_ids": key_ids,
            "output": shown(&args.output),
        }));
    } else {
        outln!("built     {} -> {}", name, shown(&args.output));
        outln!("name      {name} ({})", name_from.describe());
        outln!("version   {}", args.version);
        outln!("schema    {schema}");
        if !matches!(contract.kind(), Kind::Agent(_)) {
            outln!("contract  {}", contract.kind());
        }
        outln!("format    {}", args.format);
        outln!("files     {} ({content_bytes} bytes)", index.len());
        outln!("size      {} bytes", sealed.len());
        outln!("sha256    {sha256}");
        outln!("key ids   {}", key_ids.join(", "));
        if !readers.is_empty() {
            outln!("read by");
            let width = readers
                .iter()
                .map(|(path, ..)| path.len())
                .max()
                .unwrap_or(0);
            for (path, role, targets) in &readers {
                let who = if targets.is_empty() {
                    "no agent".to_string()
                } else {
                    targets.join(", ")
                };
                outln!("  {path:width$}  {who} ({})", role.describe());
            }
        }
    }
    Ok(())
}

/// `--contract`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ContractArg {
    Agent,
    App,
    Files,
}

fn contract_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Agent(_) => "agent",
        Kind::App => "app",
        Kind::Files => "files",
    }
}

/// The contract the pack declares, from `--contract` and `--schema`.
fn declared_contract(args: &BuildArgs) -> Result<Contract> {
    let other = match args.contract {
        ContractArg::Agent => {
            let schema = args.schema.unwrap_or(1);
            return Contract::builtin(schema).with_context(|| {
                format!(
                    "schema {schema} is not known to this packer; it knows schema {}",
                    join_numbers(Contract::builtin_schemas())
                )
            });
        }
        ContractArg::App => "app",
        ContractArg::Files => "files",
    };
    if let Some(schema) = args.schema {
        bail!(
            "--schema {schema} names an agent schema, and --contract {other} declares no agent \
             schema; leave out --schema (or use --contract agent)"
        );
    }
    if args.contract == ContractArg::Files {
        return Ok(Contract::files());
    }
    let path = args.pack_dir.join(APP_CONTRACT_PATH);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "--contract app reads the app's contract from {}, which does not exist; write \
             it there (it ships in the pack), e.g. {{\"templates\": [\"prompts/main.hbs\"], \
             \"variables\": {{\"user\": \"string\"}}}}; nothing was written",
            shown(&path)
        ),
        Err(e) => return Err(e).with_context(|| format!("reading {}", shown(&path))),
    };
    Contract::app_from_json(&text).with_context(|| {
        format!(
            "{} is not an app contract; fix it and build again (nothing was written)",
            shown(&path)
        )
    })
}

/// Where the pack's name came from, said with the name so that a publisher sees it before
/// publishing: packd keeps a name and version for good, and a channel takes one pack name.
enum NameFrom {
    Option,
    Directory(PathBuf),
}

impl NameFrom {
    fn describe(&self) -> String {
        match self {
            NameFrom::Option => "from --name".to_string(),
            NameFrom::Directory(dir) => format!(
                "from the directory name {}; pass --name NAME to choose",
                shown(dir)
            ),
        }
    }
}

fn pack_name(args: &BuildArgs) -> Result<(String, NameFrom)> {
    if let Some(name) = &args.name {
        validate_name("pack", name).context("--name")?;
        return Ok((name.clone(), NameFrom::Option));
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
    // The path as typed, unless it does not end in the name (`.`, `..`, a link).
    let typed = args.pack_dir.file_name().and_then(|n| n.to_str()) == Some(name);
    let shown_dir = if typed {
        args.pack_dir.clone()
    } else {
        dir.clone()
    };
    Ok((name.to_string(), NameFrom::Directory(shown_dir)))
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

/// Where the check-open puts the files: nowhere. `open_into` has checked each one (path,
/// size, SHA-256 against the index) before it gets here.
struct Discard;

impl Unpack for Discard {
    fn index(&self, _files: &[IndexEntry]) -> std::io::Result<()> {
        Ok(())
    }

    fn file(&self, _path: &str, _bytes: &[u8]) -> std::io::Result<()> {
        Ok(())
    }
}

/// A problem as the author reads it: `PATH[:LINE]: MESSAGE`, and its hint on the next line.
fn shown_problem(problem: &DirProblem) -> String {
    let place = match problem.line {
        Some(line) => format!("{}:{line}", shown(&problem.path)),
        None => shown(&problem.path),
    };
    match &problem.hint {
        Some(hint) => format!("{place}: {}\n    hint: {hint}", problem.message),
        None => format!("{place}: {}", problem.message),
    }
}

fn join_numbers(numbers: &[u32]) -> String {
    numbers
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Refuses a `--format` that packer does not seal, before anything is read.
fn check_format(format: u32) -> Result<()> {
    let sealed = pack_format::FORMAT_VERSION;
    match format {
        _ if format == sealed => Ok(()),
        3 => bail!(
            "--format 3 is no longer sealed: format 3 was withdrawn before any client read it. \
             Use format {sealed}, which every client reads: leave out --format (or pass \
             --format {sealed}); nothing was written"
        ),
        other => bail!(
            "--format {other} is not a format packer seals: it seals format {sealed} only, \
             which every client reads. Leave out --format (or pass --format {sealed}); nothing \
             was written"
        ),
    }
}
