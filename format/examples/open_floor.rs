//! What opening a pack cannot do without, each step timed alone on one thread: the least CPU
//! any reader of the format spends on it, whatever its threads do.
//!
//! `cargo run --release -p pack-format --example open_floor -- PACK KEY_FILE OUT_DIR`
//!
//! The steps, best of five runs each: read the sealed file; authenticate and decrypt its
//! segments; decompress the `tar.zst`; take the SHA-256 of every file (the format requires
//! it of a reader: docs/FORMAT.md, "Reading the `tar`"); write every file into `OUT_DIR`
//! (removed and made again before each run). Their sum over the number of cores is the
//! shortest an open can take on this machine; BENCHMARKS.md compares it with `packer
//! extract` and the stock open.
//!
//! It is a floor for a pack whose bytes are in large files (the `few-large` tree), where a
//! file's SHA-256 is one chain of blocks nothing can split. For thousands of small files it
//! overstates: it hashes them one by one and writes each by its full path, where `packer
//! extract` hashes small files side by side and creates each relative to its directory.
#![allow(clippy::print_stdout, reason = "reports what it measured")]

use sha2::Digest;
use std::path::Path;
use std::time::{Duration, Instant};

const RUNS: usize = 5;

fn best<T>(mut step: impl FnMut() -> T) -> (Duration, T) {
    let mut fastest = Duration::MAX;
    let mut last = None;
    for _ in 0..RUNS {
        let start = Instant::now();
        let value = step();
        fastest = fastest.min(start.elapsed());
        last = Some(value);
    }
    (fastest, last.expect("RUNS is not zero"))
}

/// The payload's zstd frames, each with the size its header declares.
fn frames(mut compressed: &[u8]) -> std::io::Result<Vec<(&[u8], usize)>> {
    let mut frames = Vec::new();
    while !compressed.is_empty() {
        let frame_len = zstd::zstd_safe::find_frame_compressed_size(compressed)
            .map_err(|code| std::io::Error::other(zstd::zstd_safe::get_error_name(code)))?;
        let (frame, rest) = compressed.split_at(frame_len);
        let content_len = zstd::zstd_safe::get_frame_content_size(frame)
            .ok()
            .flatten()
            .ok_or_else(|| std::io::Error::other("a frame without its content size"))?;
        frames.push((frame, content_len as usize));
        compressed = rest;
    }
    Ok(frames)
}

/// Decodes every frame into `out` (as large as the largest frame, its pages touched already,
/// as a reader's reused buffers are), one after the other; gives the bytes decoded.
fn decode_each(frames: &[(&[u8], usize)], out: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut context = zstd::bulk::Decompressor::new()?;
    let mut decoded = 0;
    for (frame, _) in frames {
        out.clear();
        decoded += context.decompress_to_buffer(frame, out)?;
    }
    Ok(decoded)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [pack, key, out] = args.as_slice() else {
        return Err("usage: open_floor PACK KEY_FILE OUT_DIR".into());
    };
    let (out, limits) = (Path::new(out), pack_format::Limits::default());
    if out.exists() {
        return Err(format!("{} exists; give a new directory", out.display()).into());
    }
    let keys = pack_format::ContentKeyRing::new([pack_format::ContentKey::load(Path::new(key))?]);

    let (read, sealed) = best(|| std::fs::read(pack));
    let sealed = sealed?;
    let (decrypt, plain) = best(|| pack_format::pack::decrypt(&sealed, &keys, &limits));
    let (_, compressed) = plain?;
    let frames = frames(&compressed)?;
    let largest = frames.iter().map(|(_, len)| *len).max().unwrap_or(0);
    let mut buffer = vec![0xa5; largest];
    let (decompress, decoded) = best(|| decode_each(&frames, &mut buffer));
    decoded?;
    let payload = pack_format::open(&sealed, &keys, &limits)?.payload;
    let files = payload.files();
    let (hash, digests) = best(|| {
        files
            .values()
            .map(|bytes| sha2::Sha256::digest(bytes)[0])
            .fold(0u8, |a, b| a ^ b)
    });
    let (write, written) = best(|| -> std::io::Result<()> {
        if out.exists() {
            std::fs::remove_dir_all(out)?;
        }
        for (path, bytes) in files {
            let path = out.join(path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(path, bytes)?;
        }
        Ok(())
    });
    // Nothing left behind, whether the writes went through or not.
    let removed = if out.exists() {
        std::fs::remove_dir_all(out)
    } else {
        Ok(())
    };
    written?;
    removed?;

    let bytes: usize = files.values().map(Vec::len).sum();
    let total = read + decrypt + decompress + hash + write;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{} files, {bytes} bytes; sealed {} bytes (digests fold to {digests:02x})",
        files.len(),
        sealed.len()
    );
    for (step, took) in [
        ("read the sealed file", read),
        ("authenticate and decrypt", decrypt),
        ("decompress", decompress),
        ("SHA-256 of every file", hash),
        ("write every file", write),
    ] {
        println!(
            "{step:<26} {:7.1} ms  {:5.1}%",
            ms(took),
            100.0 * took.as_secs_f64() / total.as_secs_f64()
        );
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "{:<26} {:7.1} ms; over {cores} cores at best {:.1} ms",
        "all of them",
        ms(total),
        ms(total) / cores as f64
    );
    Ok(())
}
