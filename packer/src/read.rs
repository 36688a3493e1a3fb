//! Commands that read a sealed pack: `inspect`, `verify`, `extract`.

use std::collections::HashSet;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result, bail};
use pack_format::{IndexEntry, Limits, PackHeader, sha256_hex};
use rustix::fd::OwnedFd;
use rustix::fs::{Mode, OFlags};
use serde_json::json;

use crate::check::open_as_client;
use crate::fsio::{self, read_limited, spinner};
use crate::keys::content_key_ring;
use crate::{ContentKeyArgs, print_json, shown};

#[derive(clap::Args)]
pub struct InspectArgs {
    /// The sealed pack.
    #[arg(value_name = "PACK")]
    pack: PathBuf,

    /// Key directory; with a content key the file list is shown too.
    #[arg(long, value_name = "DIR")]
    keys: Option<PathBuf>,

    #[command(flatten)]
    extra_keys: ContentKeyArgs,
}

#[derive(clap::Args)]
pub struct VerifyArgs {
    /// The sealed pack.
    #[arg(value_name = "PACK")]
    pack: PathBuf,

    /// Key directory holding content.key.
    #[arg(long, value_name = "DIR")]
    keys: PathBuf,

    #[command(flatten)]
    extra_keys: ContentKeyArgs,
}

#[derive(clap::Args)]
#[command(
    after_help = "OUT_DIR must not exist or be empty. Files are written into a \
    temporary directory next to it as each is checked, all of them are synced to disk \
    together (one syncfs of that file system), and the directory is renamed to OUT_DIR only \
    then: after a crash there is either the whole OUT_DIR or none."
)]
pub struct ExtractArgs {
    /// The sealed pack.
    #[arg(value_name = "PACK")]
    pack: PathBuf,

    /// Key directory holding content.key.
    #[arg(long, value_name = "DIR")]
    keys: PathBuf,

    /// Directory to create with the pack's files.
    #[arg(short = 'o', long = "output", value_name = "OUT_DIR")]
    output: PathBuf,

    /// Do not sync the files to disk before OUT_DIR is moved into place. Faster on a slow
    /// disk; other programs still see OUT_DIR appear whole or not at all, but a crash or power
    /// loss soon after can leave it with empty or missing files.
    #[arg(long)]
    no_fsync: bool,

    #[command(flatten)]
    extra_keys: ContentKeyArgs,
}

fn read_pack(path: &Path) -> Result<Vec<u8>> {
    read_limited(path, Limits::DEFAULT.max_sealed_len, "pack")
}

fn header_json(header: &PackHeader, sha256: &str, size: usize) -> serde_json::Value {
    json!({
        "name": header.name,
        "version": header.version.to_string(),
        "schema": header.schema,
        "format": header.format,
        "sha256": sha256,
        "size": size,
        "payload_len": header.plaintext_len,
        "key_ids": header.key_slots.iter().map(|s| s.key_id.as_str()).collect::<Vec<_>>(),
    })
}

pub fn inspect(args: &InspectArgs, json: bool) -> Result<()> {
    let bytes = read_pack(&args.pack)?;
    let (header, _) = pack_format::read_header(&bytes, &Limits::DEFAULT)
        .with_context(|| format!("{} is not a readable pack", shown(&args.pack)))?;
    let sha256 = sha256_hex(&bytes);
    let wants_files = args.keys.is_some() || !args.extra_keys.content_keys.is_empty();
    let opened = if wants_files {
        let ring = content_key_ring(args.keys.as_deref(), &args.extra_keys.content_keys)?;
        let progress = spinner("decrypting and checking");
        let opened = pack_format::open(&bytes, &ring, &Limits::DEFAULT);
        progress.finish_and_clear();
        Some(opened.with_context(|| format!("{} does not open", shown(&args.pack)))?)
    } else {
        None
    };
    let index = opened.as_ref().map(|o| o.payload.index());

    if json {
        let mut value = header_json(&header, &sha256, bytes.len());
        value["files"] = match &index {
            Some(index) => index
                .iter()
                .map(|e| json!({"path": e.path, "size": e.size, "sha256": e.sha256}))
                .collect(),
            None => serde_json::Value::Null,
        };
        print_json(&value);
        return Ok(());
    }
    let key_ids: Vec<&str> = header.key_slots.iter().map(|s| s.key_id.as_str()).collect();
    outln!("pack      {}", shown(&args.pack));
    outln!("name      {}", header.name);
    outln!("version   {}", header.version);
    outln!("schema    {}", header.schema);
    outln!("format    {}", header.format);
    outln!(
        "size      {} bytes (payload {} bytes compressed)",
        bytes.len(),
        header.plaintext_len
    );
    outln!("sha256    {sha256}");
    outln!("key ids   {}", key_ids.join(", "));
    match &index {
        Some(index) => {
            let total: u64 = index.iter().map(|e| e.size).sum();
            outln!("files     {} ({total} bytes)", index.len());
            let width = index.iter().map(|e| e.path.len()).max().unwrap_or(0);
            for entry in index {
                outln!(
                    "  {:width$}  {:>8}  {}",
                    entry.path,
                    entry.size,
                    entry.sha256
                );
            }
        }
        None => outln!("files     (give --keys DIR to decrypt and list them)"),
    }
    Ok(())
}

pub fn verify(args: &VerifyArgs, json: bool) -> Result<()> {
    let bytes = read_pack(&args.pack)?;
    let ring = content_key_ring(Some(&args.keys), &args.extra_keys.content_keys)?;
    // What a client does before installing: the templates must fit the contract the pack
    // claims, not just decrypt.
    let opened = open_as_client(&bytes, &ring, &shown(&args.pack))?;
    let (header, size) = (&opened.header, bytes.len());
    let files = opened.payload.len();
    if json {
        let mut value = header_json(header, &opened.sha256, size);
        value["ok"] = json!(true);
        value["files"] = json!(files);
        print_json(&value);
    } else {
        outln!(
            "ok: {} {} (schema {}), {files} files, sha256 {}",
            header.name,
            header.version,
            header.schema,
            opened.sha256
        );
    }
    Ok(())
}

pub fn extract(args: &ExtractArgs, json: bool) -> Result<()> {
    let out = &args.output;
    if out.exists() {
        if !out.is_dir() {
            bail!(
                "{} exists and is not a directory; choose a new directory",
                shown(out)
            );
        }
        let not_empty = std::fs::read_dir(out)
            .with_context(|| format!("reading {}", shown(out)))?
            .next()
            .is_some();
        if not_empty {
            bail!(
                "{} exists and is not empty; extract into a new or empty directory",
                shown(out)
            );
        }
    }
    // A pack in a regular file is read as it is decoded, a segment at a time on each thread,
    // never whole in memory. --json shows the pack's SHA-256: then the pack is read into
    // memory once, so that the bytes hashed are the bytes opened.
    let file = if json {
        None
    } else {
        let file = File::open(&args.pack)
            .with_context(|| format!("opening pack {}", shown(&args.pack)))?;
        file.metadata().is_ok_and(|m| m.is_file()).then_some(file)
    };
    let sealed = match file {
        Some(file) => Sealed::InFile(file),
        None => Sealed::InMemory(read_pack(&args.pack)?),
    };
    let ring = content_key_ring(Some(&args.keys), &args.extra_keys.content_keys)?;

    let parent = fsio::parent_dir(out);
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", shown(&parent)))?;
    let staging = tempfile::Builder::new()
        .prefix(".packer-extract-")
        .tempdir_in(&parent)
        .with_context(|| format!("creating a temporary directory in {}", shown(&parent)))?;
    // Files are written as they are checked, while the rest of the pack is still being
    // decompressed, and synced together at the end; the staging directory is removed if
    // anything fails.
    let progress = spinner("decrypting, checking and writing");
    let into = IntoDir::new(staging.path(), !args.no_fsync)
        .with_context(|| format!("opening {}", shown(staging.path())))?;
    // Only --json shows the pack's SHA-256: it is taken on another thread meanwhile.
    let (unpacked, sha256) = match &sealed {
        Sealed::InFile(file) => (
            pack_format::open_file_into(file, &ring, &Limits::DEFAULT, &into),
            None,
        ),
        Sealed::InMemory(bytes) => std::thread::scope(|scope| {
            let hashing = json.then(|| scope.spawn(|| sha256_hex(bytes)));
            let unpacked = pack_format::open_into(bytes, &ring, &Limits::DEFAULT, &into);
            (unpacked, hashing.map(fsio::joined))
        }),
    };
    // Nothing to make durable when the pack did not open: the staging directory goes.
    let synced = match &unpacked {
        Ok(_) => into.finish(),
        Err(_) => Ok(()),
    };
    progress.finish_and_clear();
    let unpacked = unpacked.with_context(|| format!("{} does not open", shown(&args.pack)))?;
    synced.with_context(|| format!("syncing the files extracted to {}", shown(staging.path())))?;
    // A temporary directory is private (0700); the result should look like any directory.
    fsio::set_mode(staging.path(), 0o755)?;
    if out.exists() {
        std::fs::remove_dir(out)
            .with_context(|| format!("replacing empty directory {}", shown(out)))?;
    }
    let staged = staging.keep();
    if let Err(e) = std::fs::rename(&staged, out) {
        let _ = std::fs::remove_dir_all(&staged);
        return Err(e).with_context(|| format!("moving the extracted files to {}", shown(out)));
    }
    fsio::sync_dir(&parent);

    if json {
        print_json(&json!({
            "name": unpacked.header.name,
            "version": unpacked.header.version.to_string(),
            "sha256": sha256,
            "files": unpacked.index.len(),
            "output": shown(out),
        }));
    } else {
        outln!(
            "extracted {} files of {} {} into {}",
            unpacked.index.len(),
            unpacked.header.name,
            unpacked.header.version,
            shown(out)
        );
    }
    Ok(())
}

/// Where `extract` opens a pack from.
enum Sealed {
    /// A regular file, read as it is decoded.
    InFile(File),
    /// The whole pack, read first.
    InMemory(Vec<u8>),
}

/// A pack's files written under a (staging) directory as `open_into` hands them over, from
/// several threads, relative to a handle on the directory (`openat` / `mkdirat`, as `tar`
/// does, rather than resolving the whole path for every file).
///
/// Durability is one `syncfs` of the directory's file system once every file is written,
/// not an `fsync` per file: it writes back the files' data and commits their metadata
/// (directories included) together, where thousands of `fsync`s each wait for a commit of
/// their own — or, handed to a pool of threads, cost a wake-up per file even on a file
/// system with nothing to write back. It also writes back whatever else on that file system
/// is waiting to be, which on a file system busy with other writes is the price of one call.
/// Since Linux 5.8 `syncfs` reports a write-back error the file system met since the
/// directory was opened, so a failed write is not mistaken for a durable one.
struct IntoDir {
    root: OwnedFd,
    /// Directories made so far, so each is made once, parents first, with no failed calls.
    made: Mutex<HashSet<String>>,
    sync: bool,
}

impl IntoDir {
    fn new(root: &Path, sync: bool) -> std::io::Result<Self> {
        let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC;
        let root = rustix::fs::open(root, flags, Mode::empty())?;
        Ok(IntoDir {
            root,
            made: Mutex::new(HashSet::new()),
            sync,
        })
    }

    /// Makes every file written so far durable (unless syncing is off).
    fn finish(self) -> std::io::Result<()> {
        if self.sync {
            rustix::fs::syncfs(&self.root)?;
        }
        Ok(())
    }
}

impl pack_format::Unpack for IntoDir {
    fn index(&self, _files: &[IndexEntry]) -> std::io::Result<()> {
        Ok(())
    }

    fn file(&self, path: &str, bytes: &[u8]) -> std::io::Result<()> {
        // Payload paths are relative with no `..` (checked before they get here), so they
        // stay inside the root.
        for (end, _) in path.match_indices('/') {
            let dir = &path[..end];
            if self.made.lock().is_ok_and(|made| made.contains(dir)) {
                continue;
            }
            match rustix::fs::mkdirat(&self.root, dir, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            if let Ok(mut made) = self.made.lock() {
                made.insert(dir.to_string());
            }
        }
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC;
        let file = rustix::fs::openat(&self.root, path, flags, Mode::from_raw_mode(0o644))?;
        std::fs::File::from(file).write_all(bytes)
    }
}
