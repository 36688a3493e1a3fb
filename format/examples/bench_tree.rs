//! Writes the seal/open benchmarks' synthetic template tree (see `benches/tree/mod.rs`) into
//! a new directory, for timing the shipped binaries on it (`scripts/bench-seal-open.sh`).
//!
//! `cargo run --release -p pack-format --example bench_tree -- DIR [MB] [SEED] [SHAPE]`
//!
//! SHAPE is one of `mixed` (the default), `small-shallow`, `few-large`, `markdown`,
//! `templates` and `corpus`.
#![allow(clippy::print_stdout, reason = "reports what it wrote")]

#[path = "../benches/tree/mod.rs"]
mod tree;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .ok_or("usage: bench_tree DIR [MB] [SEED] [SHAPE]")?;
    let mb: u64 = args.next().map_or(Ok(100), |a| a.parse())?;
    let seed: u64 = args.next().map_or(Ok(0x5eed), |a| a.parse())?;
    let shape_name = args.next().unwrap_or_else(|| "mixed".to_string());
    let Some(shape) = tree::shape(&shape_name) else {
        let known: Vec<&str> = tree::SHAPES.iter().map(|shape| shape.name).collect();
        return Err(format!(
            "no shape {shape_name:?}; the shapes are {}",
            known.join(", ")
        )
        .into());
    };
    let dir = std::path::Path::new(&dir);
    if dir.exists() {
        return Err(format!("{} exists; give a new directory", dir.display()).into());
    }
    let (files, bytes) = tree::generate_shape(dir, mb * 1_000_000, seed, shape)?;
    println!(
        "{files} files, {bytes} bytes in {} ({})",
        dir.display(),
        shape.name
    );
    Ok(())
}
