//! Commands that read a sealed pack: `inspect`, `verify`, `extract`.

use std::collections::HashSet;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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
    temporary directory next to it as each is checked; once all are, each file and each \
    directory made is synced to disk, and the directory is renamed to OUT_DIR only then: \
    after a crash there is either the whole OUT_DIR or none. Only what extract wrote is \
    synced, never the rest of the file system."
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
    if !args.no_fsync {
        fsio::sync_dir(&parent);
    }

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
/// Durability covers what extract wrote and nothing else: once every file is written, each
/// file is synced (`fdatasync`) and each directory made, the root included, too (`fsync`,
/// for their entries). A `syncfs` of the file system would be one call, but it writes back
/// whatever anyone else left dirty there as well (someone's build, a VM image), so its time
/// depends on them; before Linux 5.8 it reports no write-back error, and only Linux has it.
///
/// The syncs run together on [`SYNC_THREADS`] threads rather than one by one as the files
/// are written: on ext4 every `fsync` waits for a journal commit or a device flush of its
/// own unless others are waiting at the same moment, when one commit or flush serves them
/// all, so syncing together at the end takes a fraction of syncing each file as it is
/// written (BENCHMARKS.md). Before the syncs, one thread starts every file's write-back
/// ([`start_write_back`]), which brings the whole close to one `syncfs`. A file system in
/// memory (tmpfs) is not synced at all: there is no disk to write to.
struct IntoDir {
    root: OwnedFd,
    /// Directories made so far, so each is made once, parents first, with no failed calls.
    made: Mutex<HashSet<String>>,
    /// Files written so far, to sync at the end (none when syncing is off).
    written: Mutex<Vec<String>>,
    sync: bool,
}

/// How many syncs wait at once: enough for the file system to serve many with one journal
/// commit or device flush, each thread on a small stack; many more than this were slower
/// again (BENCHMARKS.md).
const SYNC_THREADS: usize = 128;

impl IntoDir {
    fn new(root: &Path, sync: bool) -> std::io::Result<Self> {
        let root = rustix::fs::open(root, DIR_FLAGS, Mode::empty())?;
        let sync = sync && !in_memory(&root);
        Ok(IntoDir {
            root,
            made: Mutex::new(HashSet::new()),
            written: Mutex::new(Vec::new()),
            sync,
        })
    }

    /// Makes everything written durable (unless syncing is off): each file, each directory
    /// made and the root.
    fn finish(self) -> std::io::Result<()> {
        if !self.sync {
            return Ok(());
        }
        let files = self.written.into_inner().unwrap_or_else(|p| p.into_inner());
        let dirs = self.made.into_inner().unwrap_or_else(|p| p.into_inner());
        start_write_back(&self.root, &files);
        let syncs: Vec<ToSync<'_>> = (files.iter().map(|f| ToSync::File(f)))
            .chain(dirs.iter().map(|d| ToSync::Dir(d)))
            .chain([ToSync::Dir(".")])
            .collect();
        let next = AtomicUsize::new(0);
        let failed = AtomicBool::new(false);
        let root = &self.root;
        let worker = || {
            while !failed.load(Ordering::Relaxed) {
                let Some(sync) = syncs.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    return Ok(());
                };
                sync.run(root)
                    .inspect_err(|_| failed.store(true, Ordering::Relaxed))?;
            }
            Ok(())
        };
        std::thread::scope(|scope| {
            let mut threads = Vec::new();
            for _ in 1..SYNC_THREADS.min(syncs.len()) {
                let thread = std::thread::Builder::new().stack_size(64 << 10);
                // Fewer threads if the system refuses more: they share one queue.
                match thread.spawn_scoped(scope, worker) {
                    Ok(thread) => threads.push(thread),
                    Err(_) => break,
                }
            }
            let here = worker();
            threads.into_iter().try_for_each(fsio::joined).and(here)
        })
    }
}

/// Starts writing each file's data to disk without waiting for it (Linux: `posix_fadvise`
/// `DONTNEED`, which starts the write-back, then drops from the page cache only the pages
/// already clean). Run on one thread over every file before the syncs, which then take
/// about the time of one `syncfs`; likely because ext4 allocates all their blocks in one
/// pass, into few journal transactions, and each `fdatasync` finds its data written or on
/// its way. Each file is opened again for this: several threads
/// doing it were slower than one, and so was the writing thread giving the hint right after
/// each file, with the handle it had (BENCHMARKS.md). Only a hint: a file that cannot be
/// opened here is reported by its sync.
#[cfg(target_os = "linux")]
fn start_write_back(root: &OwnedFd, files: &[String]) {
    for path in files {
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        if let Ok(file) = rustix::fs::openat(root, path.as_str(), flags, Mode::empty()) {
            let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed);
        }
    }
}

/// Elsewhere the syncs alone write the files.
#[cfg(not(target_os = "linux"))]
fn start_write_back(_root: &OwnedFd, _files: &[String]) {}

/// One file or directory to sync, by its path under the root.
enum ToSync<'a> {
    File(&'a str),
    Dir(&'a str),
}

impl ToSync<'_> {
    fn run(&self, root: &OwnedFd) -> std::io::Result<()> {
        match self {
            ToSync::File(path) => {
                let flags = OFlags::RDONLY | OFlags::CLOEXEC;
                File::from(rustix::fs::openat(root, *path, flags, Mode::empty())?).sync_data()
            }
            ToSync::Dir(path) => {
                let dir = File::from(rustix::fs::openat(root, *path, DIR_FLAGS, Mode::empty())?);
                match dir.sync_all() {
                    // A file system that cannot sync a directory says EINVAL: there is
                    // nothing more to make durable there.
                    Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                        Ok(())
                    }
                    synced => synced,
                }
            }
        }
    }
}

/// Whether `dir` is on a file system kept only in memory (tmpfs, ramfs), where a sync has
/// nothing to write: Linux's `fsync` there returns at once, and thousands of them would only
/// cost their system calls.
#[cfg(target_os = "linux")]
fn in_memory(dir: &OwnedFd) -> bool {
    const TMPFS_MAGIC: u64 = 0x0102_1994;
    const RAMFS_MAGIC: u64 = 0x8584_58f6;
    rustix::fs::fstatfs(dir)
        .is_ok_and(|fs| matches!(u64::try_from(fs.f_type), Ok(TMPFS_MAGIC | RAMFS_MAGIC)))
}

/// Elsewhere every file system is synced.
#[cfg(not(target_os = "linux"))]
fn in_memory(_dir: &OwnedFd) -> bool {
    false
}

const DIR_FLAGS: OFlags = OFlags::DIRECTORY
    .union(OFlags::RDONLY)
    .union(OFlags::CLOEXEC);

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
        let mut file = File::from(file);
        file.write_all(bytes)?;
        if self.sync
            && let Ok(mut written) = self.written.lock()
        {
            written.push(path.to_string());
        }
        Ok(())
    }
}
