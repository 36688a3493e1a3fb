//! The one reader of a pack directory: every regular file under it, in path order, with
//! the same rules for everyone who turns a directory into a pack (`packer build`, the
//! client's built-in pack, `agent prompt --pack`, the benchmarks).
//!
//! The rules: every file goes in, nothing is skipped (no manifest, no ignore file); empty
//! directories carry nothing; symbolic links, devices, sockets and FIFOs, names that are
//! not UTF-8 or not safe in a pack ([`crate::payload::validate_path`]), files over the
//! per-file limit, more files than the limit, more bytes than the limit, and a directory
//! without a single file are problems. Reading goes on past a problem, so the author sees
//! every one at once: [`FormatError::PackDirectory`] lists them all, in path order, and
//! the caller's check of each file's bytes (strict template validation) adds its own.
//!
//! Files are read from the directory that was listed, opened relative to it: a root moved
//! away after the listing is still the one read, and a file or directory swapped for a
//! symbolic link since is refused rather than followed.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use rayon::prelude::*;
use rustix::buffer::spare_capacity;
use rustix::fd::OwnedFd;
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

pub use crate::frames::{FileCheck, FileProblem};
use crate::frames::{PayloadEntry, frame_payload};
use crate::layout::{INDEX_PATH, Layout};
use crate::pack::{PackMeta, SealSecrets, SealedPack, check_seal, room_for, seal_frames};
use crate::payload::{IndexEntry, validate_path};
use crate::{ContentKey, FormatError, Limits, Payload, PayloadFile};

/// One problem in a pack directory. Displays as `PATH: MESSAGE` or `PATH:LINE: MESSAGE`,
/// with the path on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirProblem {
    pub path: PathBuf,
    pub line: Option<usize>,
    pub message: String,
    pub hint: Option<String>,
}

impl DirProblem {
    pub fn new(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        DirProblem {
            path: path.into(),
            line: None,
            message: message.into(),
            hint: None,
        }
    }

    /// A directory (`dir` true) or file under the pack directory that a system call failed on.
    fn unreadable(path: impl Into<PathBuf>, dir: bool, errno: rustix::io::Errno) -> Self {
        let what = if dir {
            "cannot read the directory"
        } else {
            "cannot read"
        };
        DirProblem::new(path, format!("{what}: {}", std::io::Error::from(errno)))
    }

    fn of_file(path: PathBuf, problem: FileProblem) -> Self {
        DirProblem {
            path,
            line: problem.line,
            message: problem.message,
            hint: problem.hint,
        }
    }
}

impl std::fmt::Display for DirProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.path.display(), self.message),
            None => write!(f, "{}: {}", self.path.display(), self.message),
        }
    }
}

/// One regular file of a pack directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirFile {
    /// Its path in the pack: relative, `/`-separated.
    pub path: String,
    /// Its path on disk.
    pub disk: PathBuf,
    /// Its size when the directory was read.
    pub len: u64,
}

/// A pack directory as found on disk: its files in path order, and the problems so far.
/// Nothing of the files' contents is read until [`PackDir::read`] or [`PackDir::seal`].
#[derive(Debug, Clone)]
pub struct PackDir {
    root: PathBuf,
    /// `root`, opened when it was listed: each file is opened relative to it, one name after
    /// another below it rather than the whole path from `/` again (none when it could not
    /// be opened; the listing reports why, and nothing is read then).
    at: Option<Arc<OwnedFd>>,
    files: Vec<DirFile>,
    problems: Vec<DirProblem>,
}

/// What [`PackDir::seal`] needs besides the files and the keys.
pub struct SealOptions<'a> {
    /// The container format to write: [`crate::FORMAT_VERSION`], the only one written; any
    /// other is refused.
    pub format: u32,
    pub name: &'a str,
    pub version: &'a semver::Version,
    pub schema: u32,
    /// Modification time written into every tar header (`SOURCE_DATE_EPOCH`).
    pub mtime: u64,
    /// zstd level; 3 is zstd's own default.
    pub zstd_level: i32,
}

/// A sealed pack made from a directory, and what went into it.
#[derive(Debug, Clone)]
pub struct SealedDir {
    pub sealed: SealedPack,
    /// Every file's path, size and SHA-256, as in the pack's index.
    pub index: Vec<IndexEntry>,
}

impl PackDir {
    /// Lists every entry under `root` and checks each against the rules; does not read any
    /// file. Problems are kept for [`PackDir::read`] / [`PackDir::seal`] (or
    /// [`PackDir::into_result`]) to report with the rest.
    pub fn scan(root: &Path, limits: &Limits) -> PackDir {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let mut dir = PackDir {
            root: root.to_path_buf(),
            at: rustix::fs::open(root, flags, Mode::empty())
                .ok()
                .map(Arc::new),
            files: Vec::new(),
            problems: Vec::new(),
        };
        let (files, problems) = walk(root, limits);
        dir.files = files;
        dir.problems = problems;
        // Path order is byte order of the pack paths (`a-b/x` before `a/x`), which is not
        // the order a directory-by-directory walk gives.
        dir.files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        if dir.files.is_empty() && dir.problems.is_empty() {
            dir.problems.push(DirProblem::new(
                root,
                "holds no files; a pack needs at least one",
            ));
        }
        if dir.files.len() > limits.max_file_count {
            dir.problems.push(DirProblem::new(
                root,
                format!(
                    "{} files, over the limit of {} files in a pack",
                    dir.files.len(),
                    limits.max_file_count
                ),
            ));
        }
        let total: u64 = dir.files.iter().map(|f| f.len).sum();
        if total > limits.max_decompressed_len {
            dir.problems.push(DirProblem::new(
                root,
                format!(
                    "{total} bytes of files, over the limit of {} bytes in a pack",
                    limits.max_decompressed_len
                ),
            ));
        }
        dir
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The files that passed, in path order.
    pub fn files(&self) -> &[DirFile] {
        &self.files
    }

    /// Whether the pack will hold `path`.
    pub fn contains(&self, path: &str) -> bool {
        self.files
            .binary_search_by(|f| f.path.as_str().cmp(path))
            .is_ok()
    }

    /// The problems found so far.
    pub fn problems(&self) -> &[DirProblem] {
        &self.problems
    }

    /// Adds a problem of the caller's (a template the contract requires but the directory
    /// lacks, say), to be reported with the others.
    pub fn add_problem(&mut self, problem: DirProblem) {
        self.problems.push(problem);
    }

    /// Every problem so far as one error, or the directory if there is none.
    pub fn into_result(self) -> Result<PackDir, FormatError> {
        if self.problems.is_empty() {
            Ok(self)
        } else {
            Err(self.error(Vec::new()))
        }
    }

    fn error(self, mut more: Vec<DirProblem>) -> FormatError {
        let mut problems = self.problems;
        problems.append(&mut more);
        problems.sort_by(|a, b| (&a.path, a.line).cmp(&(&b.path, b.line)));
        FormatError::PackDirectory {
            dir: self.root,
            problems,
        }
    }

    /// Reads every file into memory and runs `check` on each: the payload, or every problem
    /// found (the scan's, the reads', the check's).
    pub fn read(
        self,
        limits: &Limits,
        check: Option<&FileCheck<'_>>,
    ) -> Result<Payload, FormatError> {
        let mut problems = Vec::new();
        let mut files = Vec::with_capacity(self.files.len());
        for file in &self.files {
            let mut bytes = Vec::new();
            match self.read_file(file, &mut bytes) {
                Ok(()) => files.push(PayloadFile {
                    path: file.path.clone(),
                    bytes,
                }),
                Err(e) => problems.push(DirProblem::new(file.disk.clone(), e.to_string())),
            }
        }
        if let Some(check) = check {
            let found = check_all(&files, check);
            for (path, problem) in found {
                problems.push(DirProblem::of_file(self.root.join(path), problem));
            }
        }
        if !self.problems.is_empty() || !problems.is_empty() {
            return Err(self.error(problems));
        }
        Payload::new(files, limits)
    }

    /// Seals the directory for `keys` without holding its files in memory: each file is
    /// read once, straight into the `tar`, which is hashed, checked (`check`) and
    /// compressed on every core as it is read. The sealed pack (format 2, with fresh random
    /// secrets), or every problem found.
    pub fn seal(
        self,
        options: &SealOptions<'_>,
        keys: &[&ContentKey],
        check: Option<&FileCheck<'_>>,
    ) -> Result<SealedDir, FormatError> {
        crate::pack::check_seal_format(options.format)?;
        let meta = PackMeta {
            format: options.format,
            name: options.name,
            version: options.version,
            schema: options.schema,
        };
        let secrets = SealSecrets::random(keys.len());
        check_seal(&meta, keys, &secrets)?;
        if !self.problems.is_empty() {
            // Nothing will be sealed: report every file's own problems too, without
            // compressing anything (at level 19, most of a seal's time).
            let problems = self.problems_of_files(check);
            return Err(self.error(problems));
        }
        let layout = Layout {
            room: room_for(keys.len()) + index_room(&self.files),
            tags: true,
        };
        let entries: Vec<PayloadEntry<'_>> = self
            .files
            .iter()
            .map(|file| PayloadEntry {
                path: &file.path,
                len: file.len,
            })
            .collect();
        let read = |i: usize, out: &mut Vec<u8>| self.read_file(&self.files[i], out);
        let framed = frame_payload(
            options.mtime,
            options.zstd_level,
            &entries,
            layout,
            check,
            &read,
        )?;
        let mut problems: Vec<DirProblem> = framed
            .unread
            .iter()
            .map(|(i, e)| DirProblem::new(self.files[*i].disk.clone(), e.to_string()))
            .collect();
        for (path, problem) in framed.problems {
            problems.push(DirProblem::of_file(self.root.join(path), problem));
        }
        if !self.problems.is_empty() || !problems.is_empty() {
            return Err(self.error(problems));
        }
        let sealed = seal_frames(&meta, keys, secrets, framed.placed, &framed.segments)?;
        Ok(SealedDir {
            sealed,
            index: framed.index,
        })
    }

    /// Reads every file and runs `check` on it, on every core, one file at a time per
    /// thread (nothing kept): every problem found, in no particular order.
    fn problems_of_files(&self, check: Option<&FileCheck<'_>>) -> Vec<DirProblem> {
        let problems = |bytes: &mut Vec<u8>, file: &DirFile| -> Vec<DirProblem> {
            bytes.clear();
            if let Err(e) = self.read_file(file, bytes) {
                return vec![DirProblem::new(file.disk.clone(), e.to_string())];
            }
            let Some(check) = check else {
                return Vec::new();
            };
            check(&file.path, bytes)
                .into_iter()
                .map(|problem| DirProblem::of_file(self.root.join(&file.path), problem))
                .collect()
        };
        self.files
            .par_iter()
            .map_init(Vec::new, problems)
            .flatten_iter()
            .collect()
    }
}

/// What listing directories found: files, problems, and subdirectories not listed yet.
#[derive(Default)]
struct Listed {
    files: Vec<DirFile>,
    problems: Vec<DirProblem>,
}

/// Directories waiting to be listed, and how many are being listed right now.
struct Pending {
    dirs: Vec<(PathBuf, String)>,
    listing: usize,
}

/// Lists every directory under `root` on [`SCAN_THREADS`] threads: listing a tree of
/// thousands of directories is system calls more than anything, and the seal that follows
/// cannot start before it ends. The files come back in no particular order. As many threads
/// on any machine, even one of fewer cores: a listing thread is often blocked, in the kernel
/// or waiting for a directory another thread shares.
///
/// Each thread lists a directory and then the directories under it, opening each relative
/// to its parent (`openat`: one name looked up, not the whole path again), except that it
/// hands a subdirectory to the shared queue when another thread has nothing to do, or when
/// it is [`LOCAL_DEPTH`] directories down already.
fn walk(root: &Path, limits: &Limits) -> (Vec<DirFile>, Vec<DirProblem>) {
    let walker = Walker {
        limits,
        pending: Mutex::new(Pending {
            dirs: vec![(root.to_path_buf(), String::new())],
            listing: 0,
        }),
        changed: Condvar::new(),
        idle: AtomicUsize::new(0),
    };
    let mut all = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..SCAN_THREADS)
            .map(|_| scope.spawn(|| walker.lister()))
            .collect();
        let mut all = walker.lister();
        for helper in helpers {
            let mut found = crate::joined(helper);
            all.files.append(&mut found.files);
            all.problems.append(&mut found.problems);
        }
        all
    });
    all.problems.sort_by(|a, b| a.path.cmp(&b.path));
    (all.files, all.problems)
}

/// Threads listing directories: a few keep the kernel busy while one of them waits on a
/// directory; beyond a few, they wait on each other in the kernel's directory locks.
const SCAN_THREADS: usize = 4;

/// Directories a thread goes down below one it took from the queue before it queues the
/// next instead: that many directories (and their descriptors) open at once at most.
const LOCAL_DEPTH: usize = 32;

struct Walker<'l> {
    limits: &'l Limits,
    pending: Mutex<Pending>,
    changed: Condvar,
    /// Threads waiting for a directory to list.
    idle: AtomicUsize,
}

impl Walker<'_> {
    /// Lists directories from the queue until none is left and none is being listed.
    fn lister(&self) -> Listed {
        let mut found = Listed::default();
        loop {
            let (dir, prefix) = {
                let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
                loop {
                    if let Some(next) = pending.dirs.pop() {
                        pending.listing += 1;
                        break next;
                    }
                    if pending.listing == 0 {
                        // Nothing left and nothing being listed that could add more.
                        self.changed.notify_all();
                        return found;
                    }
                    self.idle.fetch_add(1, Ordering::Relaxed);
                    pending = self
                        .changed
                        .wait(pending)
                        .unwrap_or_else(PoisonError::into_inner);
                    self.idle.fetch_sub(1, Ordering::Relaxed);
                }
            };
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            match rustix::fs::open(&dir, flags, Mode::empty()) {
                Ok(fd) => self.list_tree(fd, &dir, &prefix, 0, &mut found),
                Err(e) => found.problems.push(DirProblem::unreadable(&dir, true, e)),
            }
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            pending.listing -= 1;
            if pending.listing == 0 {
                self.changed.notify_all();
            }
        }
    }

    /// Queues a directory for whichever thread takes it.
    fn share(&self, dir: PathBuf, prefix: String) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.dirs.push((dir, prefix));
        self.changed.notify_one();
    }

    /// Lists the open directory `fd` (`dir` on disk, `prefix` in the pack) and, `depth`
    /// below the one taken from the queue, the directories under it: files and problems go
    /// into `out`.
    fn list_tree(&self, fd: OwnedFd, dir: &Path, prefix: &str, depth: usize, out: &mut Listed) {
        let cannot_read =
            |out: &mut Listed, e| out.problems.push(DirProblem::unreadable(dir, true, e));
        let mut listing = match Dir::new(fd) {
            Ok(listing) => listing,
            Err(e) => return cannot_read(out, e),
        };
        let mut entries = Vec::new();
        for entry in &mut listing {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => return cannot_read(out, e),
            };
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                entries.push((OsStr::from_bytes(name).to_owned(), entry.file_type()));
            }
        }
        let fd = match listing.fd() {
            Ok(fd) => fd,
            Err(e) => return cannot_read(out, e),
        };
        for (name, kind) in entries {
            let disk = dir.join(&name);
            // The entry's own type, not its target's: a link is not followed.
            let stat = |fd| rustix::fs::statat(fd, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW);
            let kind = match kind {
                FileType::Unknown => match stat(fd) {
                    Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                    Err(e) => {
                        out.problems.push(DirProblem::unreadable(disk, false, e));
                        continue;
                    }
                },
                kind => kind,
            };
            if kind == FileType::Symlink {
                out.problems.push(DirProblem::new(
                    disk,
                    "is a symbolic link; packs hold regular files only (replace the link with a \
                     copy of the file)",
                ));
                continue;
            }
            let Some(name) = name.to_str() else {
                out.problems
                    .push(DirProblem::new(disk, "the name is not UTF-8; rename it"));
                continue;
            };
            let path = if prefix.is_empty() {
                name.to_string()
            } else {
                format!("{prefix}/{name}")
            };
            if kind == FileType::Directory {
                if depth + 1 >= LOCAL_DEPTH || self.idle.load(Ordering::Relaxed) > 0 {
                    self.share(disk, path);
                    continue;
                }
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
                match rustix::fs::openat(fd, name, flags, Mode::empty()) {
                    Ok(child) => self.list_tree(child, &disk, &path, depth + 1, out),
                    Err(e) => out.problems.push(DirProblem::unreadable(disk, true, e)),
                }
                continue;
            }
            if kind != FileType::RegularFile {
                out.problems.push(DirProblem::new(
                    disk,
                    "not a regular file (a device, socket or FIFO); remove it",
                ));
                continue;
            }
            if let Err(e) = validate_path(&path, self.limits) {
                let message = match e {
                    FormatError::UnsafeEntry { reason, .. } => {
                        format!("unsafe name in a pack: {reason}")
                    }
                    other => format!("unsafe name in a pack: {other}"),
                };
                out.problems.push(DirProblem::new(disk, message));
                continue;
            }
            let len = match stat(fd) {
                Ok(stat) => stat.st_size as u64,
                Err(e) => {
                    out.problems.push(DirProblem::unreadable(disk, false, e));
                    continue;
                }
            };
            if len > self.limits.max_file_len {
                out.problems.push(DirProblem::new(
                    disk,
                    format!(
                        "{len} bytes, over the per-file limit of {} bytes",
                        self.limits.max_file_len
                    ),
                ));
                continue;
            }
            out.files.push(DirFile { path, disk, len });
        }
    }
}

/// Reads `root` and every file under it: the payload, or every problem found. `check`
/// runs on every file's bytes (strict template validation, say).
pub fn read_pack_dir(
    root: &Path,
    limits: &Limits,
    check: Option<&FileCheck<'_>>,
) -> Result<Payload, FormatError> {
    PackDir::scan(root, limits).read(limits, check)
}

/// Room for the compressed index frame: the uncompressed entry, which zstd never makes much
/// longer (the index is mostly SHA-256 hex and paths, and compresses to about half).
fn index_room(files: &[DirFile]) -> usize {
    let json: usize = files.iter().map(|f| f.path.len() + 160).sum::<usize>() + 64;
    let entry = 3 * 512 + json.next_multiple_of(512) + INDEX_PATH.len();
    zstd::zstd_safe::compress_bound(entry)
}

impl PackDir {
    /// Appends `file`'s bytes to `out`: exactly its listed length, or an error saying the
    /// file changed since the directory was read. The file is opened below the listed root,
    /// through no link (one put on its way since the listing is refused), and read
    /// with as few calls as the kernel allows: one `read` into room for one byte more than
    /// the listed length, which comes back short at the end of the file.
    fn read_file(&self, file: &DirFile, out: &mut Vec<u8>) -> std::io::Result<()> {
        let cannot = |e: std::io::Error| std::io::Error::new(e.kind(), format!("cannot read: {e}"));
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let opened = match &self.at {
            Some(at) => open_below(at, &file.path, flags),
            None => rustix::fs::open(&file.disk, flags, Mode::empty()),
        };
        let fd = opened.map_err(|e| match e {
            Errno::LOOP => std::io::Error::other(
                "cannot read: it, or a directory on its way, is a symbolic link now and was not \
                 when the directory was read; packs hold regular files only (build again)",
            ),
            e => cannot(e.into()),
        })?;
        let before = out.len();
        let len = file.len;
        let want = usize::try_from(len).map_err(|e| cannot(std::io::Error::other(e)))?;
        // Room for one byte more than listed: a file that grew shows it in the same call,
        // and a read that reaches the listed length without filling the room stopped at
        // the end of the file.
        out.reserve(want + 1);
        let read = loop {
            match rustix::io::read(&fd, spare_capacity(out)) {
                Ok(n) if n == 0 || out.len() - before >= want => break out.len() - before,
                Ok(_) => {}
                Err(Errno::INTR) => {}
                Err(e) => {
                    out.truncate(before);
                    return Err(cannot(e.into()));
                }
            }
        };
        if read != want {
            out.truncate(before);
            return Err(std::io::Error::other(format!(
                "changed while being read ({len} bytes when the directory was read, {read} now{}); \
                 build again",
                if read > want { " or more" } else { "" }
            )));
        }
        Ok(())
    }
}

/// Opens `path` below the directory `at` without following a symbolic link anywhere on
/// the way (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`). Where the kernel or a
/// seccomp filter offers no `openat2` (Linux before 5.6, some container profiles), a plain
/// `openat` that does not follow a link in the last name only, and a warning, once per
/// process, that the guarantee was lost.
fn open_below(at: &OwnedFd, path: &str, flags: OFlags) -> rustix::io::Result<OwnedFd> {
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS;
    let mut opened = Err(Errno::AGAIN);
    // `EAGAIN`: a rename somewhere in the file system raced the lookup; it is tried again,
    // a few times, and then reported rather than opened with fewer checks.
    for _ in 0..8 {
        opened = rustix::fs::openat2(at, path, flags, Mode::empty(), resolve);
        match opened {
            Err(Errno::AGAIN) => continue,
            Err(errno @ (Errno::NOSYS | Errno::PERM)) => {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    tracing::warn!(
                        %errno,
                        "openat2 is not available (Linux before 5.6, or a seccomp filter): files \
                         are opened with plain openat, which follows a symbolic link in a \
                         directory on the way if one is swapped in while the tree is read; \
                         only the last name of each path is checked"
                    );
                });
                return rustix::fs::openat(at, path, flags, Mode::empty());
            }
            _ => break,
        }
    }
    opened
}

/// Runs `check` over every file, on every core for a large set; problems in file order.
fn check_all(files: &[PayloadFile], check: &FileCheck<'_>) -> Vec<(String, FileProblem)> {
    let total: usize = files.iter().map(|f| f.bytes.len()).sum();
    let problems = |f: &PayloadFile| -> Vec<(String, FileProblem)> {
        check(&f.path, &f.bytes)
            .into_iter()
            .map(|p| (f.path.clone(), p))
            .collect()
    };
    if total < crate::PARALLEL_MIN_LEN {
        return files.iter().flat_map(problems).collect();
    }
    files.par_iter().flat_map_iter(problems).collect()
}
