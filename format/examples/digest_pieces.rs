//! How much faster a large file is hashed when its digest is taken over fixed pieces: the
//! SHA-256 of the file's bytes (one chain of blocks, one core, one lane) against the SHA-256
//! of the SHA-256s of its pieces, the pieces hashed side by side (`tape_sha256::hash_many`,
//! which runs 16 lanes of AVX-512 or four interleaved SHA-NI streams where the CPU has
//! them). The file sizes are those of the `few-large` tree's large documents.
//!
//! `cargo run --release -p pack-format --example digest_pieces`
//!
//! Best of 20 runs of each, on bytes already in the caches, as they are right after a frame
//! is decoded. BENCHMARKS.md has the figures and what they would change in the format.
#![allow(clippy::print_stdout, reason = "reports what it measured")]

use sha2::Digest;
use std::time::{Duration, Instant};

const RUNS: usize = 20;

fn best(mut step: impl FnMut()) -> Duration {
    (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            step();
            start.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn pieces_digest(message: &[u8], piece: usize) -> [u8; 32] {
    let pieces: Vec<&[u8]> = message.chunks(piece).collect();
    let mut digests = vec![[0u8; 32]; pieces.len()];
    tape_sha256::hash_many(&pieces, &mut digests);
    let mut list = sha2::Sha256::new();
    for digest in &digests {
        list.update(digest);
    }
    list.finalize().into()
}

fn main() {
    let mut bytes = vec![0u8; 11 << 20];
    rand::fill(&mut bytes[..]);
    println!("| piece | file | SHA-256 of the bytes | over the pieces | faster |");
    println!("|---|---|---|---|---|");
    for piece_kib in [64usize, 128, 256, 1024] {
        for mib in [3usize, 7, 11] {
            let message = &bytes[..mib << 20];
            let whole = best(|| {
                std::hint::black_box(sha2::Sha256::digest(message));
            });
            let pieces = best(|| {
                std::hint::black_box(pieces_digest(message, piece_kib << 10));
            });
            println!(
                "| {piece_kib} KiB | {mib} MiB | {:.2} ms | {:.2} ms | {:.2}x |",
                whole.as_secs_f64() * 1e3,
                pieces.as_secs_f64() * 1e3,
                whole.as_secs_f64() / pieces.as_secs_f64()
            );
        }
    }
}
