//! The fleet view's counting error, as BENCHMARKS.md reports it: one sketch per fleet of
//! `n` distinct installs, the mean and worst relative error over many fleets, and the memory
//! one count takes. `cargo run --release -p pack-server --example fleet_error_figures`.

#![allow(clippy::print_stdout)]

use pack_server::fleet::{Sketch, install_key};

fn main() {
    for n in [50u64, 512, 1_000, 10_000, 100_000] {
        let runs = if n >= 100_000 { 20 } else { 100 };
        let (mut sum, mut worst) = (0.0f64, 0.0f64);
        let mut memory = 0;
        for seed in 0..runs {
            let mut sketch = Sketch::default();
            for i in 0..n {
                let install = format!("{}-{i}", 1_000 + seed);
                sketch.insert(install_key(&pack_protocol::fleet::install_hash(
                    "http://test",
                    "stable",
                    &install,
                )));
            }
            let error = (sketch.estimate() as f64 - n as f64).abs() / n as f64;
            sum += error;
            worst = worst.max(error);
            memory = sketch.memory();
        }
        println!(
            "{n} installs: mean |error| {:.3} %, worst {:.3} % over {runs} fleets; {memory} bytes per cell",
            100.0 * sum / runs as f64,
            100.0 * worst
        );
    }
}
