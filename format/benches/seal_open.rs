//! The library's ceiling: seal and open a ~100 MB synthetic template tree with `pack_format`
//! alone, and do the same with the stock pipeline in the same run. No template validation,
//! no check that the sealed pack opens, no fsync: this is what the format code can do, not
//! what `packer build` and `packer extract` do for a user. Those are timed as whole
//! processes by `scripts/bench-seal-open.sh`, on the same tree (`benches/tree/mod.rs`).
//!
//!
//! - seal: `tar --zstd -cf - | age -e -r RECIPIENT`, then `minisign -S` on the result;
//! - open: `minisign -V`, then `age -d -i KEY | tar --zstd -xf -`.
//!
//! Ours: seal = read the tree from disk (`pack_format::read_pack_dir`),
//! `pack_format::seal`, write the pack; open = read the pack, `pack_format::open_into`
//! writing every file to disk as it is checked (as `tar -x` does), relative to the output
//! directory.
//!
//! MB/s = tree bytes (10^6) / wall time, best of `BENCH_RUNS` (default 10) runs each.
//! `BENCH_MB` sets the tree size (default 100), `BENCH_SHAPE` its layout (`mixed`, the
//! default, or another of `benches/tree/mod.rs`'s shapes). Needs `tar`, `zstd`, `age`, `age-keygen`
//! and `minisign` on the PATH.
//!
//! `cargo bench -p pack-format --bench seal_open`
#![allow(clippy::print_stdout, reason = "a benchmark binary reports on stdout")]

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pack_format::pack::SealInput;
use pack_format::{ContentKey, ContentKeyRing, IndexEntry, Limits, Payload, Unpack};
use rustix::fd::OwnedFd;
use rustix::fs::{Mode, OFlags};

mod tree;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Our side must fit a 100 MB tree of thousands of files; everything else stays default.
const BENCH_LIMITS: Limits = Limits {
    max_sealed_len: 1 << 30,
    max_decompressed_len: 1 << 30,
    max_file_count: 1_000_000,
    ..Limits::DEFAULT
};

fn main() -> Result<()> {
    // `cargo bench` passes `--bench`; without it this is `cargo test --benches`, which
    // should not spend a minute generating and sealing 100 MB. A filter argument means
    // another benchmark was asked for.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") || args.iter().any(|a| !a.starts_with('-')) {
        return Ok(());
    }
    let mb: u64 = env_or("BENCH_MB", 100);
    let runs: usize = env_or("BENCH_RUNS", 10);
    for tool in ["tar", "zstd", "age", "age-keygen", "minisign"] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()?
            .stdout
            .is_empty()
        {
            return Err(format!("{tool} is not on the PATH; the comparison needs it").into());
        }
    }

    // `BENCH_DIR` picks the file system (say /dev/shm to leave the disk out of it).
    let parent = std::env::var_os("BENCH_DIR")
        .filter(|dir| !dir.is_empty())
        .map_or_else(std::env::temp_dir, PathBuf::from);
    let mut work = tempfile::Builder::new()
        .prefix("seal-open-bench")
        .tempdir_in(parent)?;
    // `BENCH_KEEP=1` leaves the tree and the packs behind, for profiling.
    if std::env::var_os("BENCH_KEEP").is_some() {
        work.disable_cleanup(true);
    }
    let dir = work.path();
    let tree = dir.join("tree");
    let shape_name = std::env::var("BENCH_SHAPE").unwrap_or_else(|_| "mixed".to_string());
    let shape = tree::shape(&shape_name).ok_or_else(|| {
        let known: Vec<&str> = tree::SHAPES.iter().map(|shape| shape.name).collect();
        format!(
            "no BENCH_SHAPE {shape_name:?}; the shapes are {}",
            known.join(", ")
        )
    })?;
    let (files, tree_bytes) = tree::generate_shape(&tree, mb * 1_000_000, 0x5eed, shape)?;
    let levels = max_depth(&tree)?;
    println!(
        "tree: {files} files, {:.1} MB, {levels} directory levels, in {}",
        tree_bytes as f64 / 1e6,
        dir.display()
    );

    let stock = StockPipeline::new(dir)?;
    let key = ContentKey::from_parts("bench", [7; 32])?;
    let keys = ContentKeyRing::new([key.clone()]);
    let version = semver::Version::new(1, 0, 0);
    let ours_pack = dir.join("ours.pack");

    let seal_ours = || -> Result<()> {
        let payload = read_tree(&tree)?;
        let input = SealInput {
            format: pack_format::FORMAT_VERSION,
            name: "bench",
            version: &version,
            schema: 1,
            payload: &payload,
            mtime: 0,
            zstd_level: 3,
        };
        std::fs::write(&ours_pack, pack_format::seal(&input, &[&key])?)?;
        Ok(())
    };
    let open_ours = |out: &Path| -> Result<()> {
        let sealed = std::fs::read(&ours_pack)?;
        std::fs::create_dir(out)?;
        pack_format::open_into(&sealed, &keys, &BENCH_LIMITS, &IntoDir::new(out)?)?;
        Ok(())
    };

    println!("load average before: {}", load_average());
    let mut seal = [Best::default(); 3];
    let mut open = [Best::default(); 2];
    for run in 1..=runs {
        seal[0].add(measure(seal_ours)?);
        seal[1].add(measure(|| stock.seal(&tree, "zstd"))?);
        seal[2].add(measure(|| stock.seal(&tree, "zstd -T0"))?);
        // A fresh directory per run: deleting thousands of files and creating them again
        // at once makes ext4 hunt for free inodes, which would time the file system.
        let ours_out = dir.join(format!("ours-out-{run}"));
        open[0].add(measure(|| open_ours(&ours_out))?);
        let stock_out = dir.join(format!("stock-out-{run}"));
        open[1].add(measure(|| stock.open(&stock_out))?);
        println!("run {run}/{runs} done");
    }
    println!("load average after: {}", load_average());

    // Both sides must have produced the tree they were given.
    for out in [
        dir.join(format!("ours-out-{runs}")),
        dir.join(format!("stock-out-{runs}")),
    ] {
        let (count, bytes) = tree_size(&out)?;
        if (count, bytes) != (files, tree_bytes) {
            return Err(format!(
                "{}: {count} files / {bytes} bytes, expected {files} / {tree_bytes}",
                out.display()
            )
            .into());
        }
    }
    let ours_len = std::fs::metadata(&ours_pack)?.len();
    let stock_len = std::fs::metadata(&stock.sealed)?.len();
    println!(
        "sealed size: ours {:.1} MB (ratio {:.2}x), stock {:.1} MB (ratio {:.2}x)",
        ours_len as f64 / 1e6,
        tree_bytes as f64 / ours_len as f64,
        stock_len as f64 / 1e6,
        tree_bytes as f64 / stock_len as f64
    );

    let rate = |d: Duration| tree_bytes as f64 / 1e6 / d.as_secs_f64();
    println!();
    println!("| step | ours | stock pipeline | ours / stock | target | CPU s ours / stock |");
    println!("|---|---|---|---|---|---|");
    for (step, ours, theirs, target) in [
        ("seal", seal[0], seal[1], Some(1.5)),
        ("seal vs `zstd -T0`", seal[0], seal[2], None),
        ("open", open[0], open[1], Some(2.0)),
    ] {
        let ratio = rate(ours.wall) / rate(theirs.wall);
        let verdict = match target {
            Some(t) if ratio >= t => format!("≥ {t}x: met"),
            Some(t) => format!("≥ {t}x: MISSED"),
            None => "-".to_string(),
        };
        println!(
            "| {step} | {:.0} MB/s ({:.3} s) | {:.0} MB/s ({:.3} s) | {ratio:.2}x | {verdict} | {:.2} / {:.2} |",
            rate(ours.wall),
            ours.wall.as_secs_f64(),
            rate(theirs.wall),
            theirs.wall.as_secs_f64(),
            ours.cpu,
            theirs.cpu,
        );
    }
    Ok(())
}

/// One run: wall time, and CPU time (user + system) of this process and of the child
/// processes it waited for — the stock tools run as children, ours in-process.
#[derive(Clone, Copy)]
struct Sample {
    wall: Duration,
    cpu: f64,
}

/// The fastest wall time and the smallest CPU time over the runs. CPU time hardly moves
/// when other work shares the cores; wall time does.
#[derive(Clone, Copy)]
struct Best {
    wall: Duration,
    cpu: f64,
}

impl Default for Best {
    fn default() -> Self {
        Best {
            wall: Duration::MAX,
            cpu: f64::MAX,
        }
    }
}

impl Best {
    fn add(&mut self, sample: Sample) {
        self.wall = self.wall.min(sample.wall);
        self.cpu = self.cpu.min(sample.cpu);
    }
}

fn measure(f: impl FnOnce() -> Result<()>) -> Result<Sample> {
    let cpu = cpu_seconds()?;
    let start = Instant::now();
    f()?;
    Ok(Sample {
        wall: start.elapsed(),
        cpu: cpu_seconds()? - cpu,
    })
}

/// User + system time of this process and its waited-for children, from /proc/self/stat
/// (fields 14-17, in clock ticks of 1/100 s on Linux).
fn cpu_seconds() -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let after = stat.rsplit(')').next().ok_or("odd /proc/self/stat")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let mut ticks = 0u64;
    for i in 11..15 {
        ticks += fields
            .get(i)
            .ok_or("short /proc/self/stat")?
            .parse::<u64>()?;
    }
    Ok(ticks as f64 / 100.0)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The stock tools with their keys: an age identity and an unencrypted minisign key.
struct StockPipeline {
    dir: PathBuf,
    age_key: PathBuf,
    recipient: String,
    minisign_key: PathBuf,
    minisign_pub: PathBuf,
    sealed: PathBuf,
}

impl StockPipeline {
    fn new(dir: &Path) -> Result<Self> {
        let age_key = dir.join("age.key");
        run(Command::new("age-keygen").arg("-o").arg(&age_key))?;
        let recipient =
            String::from_utf8(run(Command::new("age-keygen").arg("-y").arg(&age_key))?)?
                .trim()
                .to_string();
        let minisign_key = dir.join("minisign.key");
        let minisign_pub = dir.join("minisign.pub");
        run(Command::new("minisign")
            .args(["-G", "-W", "-f", "-s"])
            .arg(&minisign_key)
            .arg("-p")
            .arg(&minisign_pub))?;
        Ok(StockPipeline {
            dir: dir.to_path_buf(),
            age_key,
            recipient,
            minisign_key,
            minisign_pub,
            sealed: dir.join("stock.tar.zst.age"),
        })
    }

    /// `tar --zstd -cf - | age -e`, then `minisign -S`. `zstd` is the compressor tar runs:
    /// plain `zstd` is what `tar --zstd` runs.
    fn seal(&self, tree: &Path, zstd: &str) -> Result<()> {
        let script = r#"set -euo pipefail
tar -I "$ZSTD" -cf - -C "$TREE" . | age -e -r "$RECIPIENT" -o "$SEALED"
minisign -S -s "$KEY" -m "$SEALED" -x "$SEALED.minisig" >/dev/null"#;
        run(Command::new("bash")
            .args(["-c", script])
            .env("ZSTD", zstd)
            .env("TREE", tree)
            .env("RECIPIENT", &self.recipient)
            .env("SEALED", &self.sealed)
            .env("KEY", &self.minisign_key))?;
        Ok(())
    }

    /// `minisign -V`, then `age -d | tar --zstd -xf -`.
    fn open(&self, out: &Path) -> Result<()> {
        std::fs::create_dir_all(out)?;
        let script = r#"set -euo pipefail
minisign -V -q -p "$PUB" -m "$SEALED" -x "$SEALED.minisig"
age -d -i "$AGE_KEY" "$SEALED" | tar --zstd -xf - -C "$OUT""#;
        run(Command::new("bash")
            .args(["-c", script])
            .env("PUB", &self.minisign_pub)
            .env("SEALED", &self.sealed)
            .env("AGE_KEY", &self.age_key)
            .env("OUT", out)
            .current_dir(&self.dir))?;
        Ok(())
    }
}

fn run(cmd: &mut Command) -> Result<Vec<u8>> {
    let output = cmd.output()?;
    if !output.status.success() {
        return Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(output.stdout)
}

/// Reads the tree with the one pack-directory reader (`pack_format::read_pack_dir`, what
/// `packer build`, the client's build script and `agent prompt --pack` use), no check.
fn read_tree(root: &Path) -> Result<Payload> {
    Ok(pack_format::read_pack_dir(root, &BENCH_LIMITS, None)?)
}

/// Unpacks into a directory, as `tar -x` does: each file as `open_into` hands it over (on
/// every core), its directories made first. Like `tar`, it works relative to the output
/// directory (`openat` / `mkdirat` on a handle to it) rather than resolving the whole path
/// for every file.
struct IntoDir {
    root: OwnedFd,
    /// Directories known to exist, so each is made once, top down, with no failed calls.
    made: Mutex<HashSet<String>>,
}

impl IntoDir {
    fn new(root: &Path) -> std::io::Result<Self> {
        let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC;
        Ok(IntoDir {
            root: rustix::fs::open(root, flags, Mode::empty())?,
            made: Mutex::default(),
        })
    }
}

impl Unpack for IntoDir {
    fn index(&self, _files: &[IndexEntry]) -> std::io::Result<()> {
        Ok(())
    }

    fn file(&self, path: &str, bytes: &[u8]) -> std::io::Result<()> {
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
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC;
        let file = rustix::fs::openat(&self.root, path, flags, Mode::from_raw_mode(0o644))?;
        std::fs::File::from(file).write_all(bytes)
    }
}

fn tree_size(root: &Path) -> Result<(usize, u64)> {
    let mut count = 0;
    let mut bytes = 0;
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                pending.push(entry.path());
            } else {
                count += 1;
                bytes += entry.metadata()?.len();
            }
        }
    }
    Ok((count, bytes))
}

fn max_depth(dir: &Path) -> Result<usize> {
    let mut deepest = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            deepest = deepest.max(1 + max_depth(&entry.path())?);
        }
    }
    Ok(deepest)
}
