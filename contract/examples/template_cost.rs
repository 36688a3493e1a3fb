//! What strict validation costs per template size: templates of 1 KB up to the limit, made
//! of the same mix as the benchmark tree's (prose with an expression every few sentences,
//! `{{#if}}` and `{{#each}}` blocks), each validated against the contract the way
//! `packer build` and the clients do. Prints, per size, the elements in the template, the
//! time per template and the rate.
//!
//! `cargo run --release -p pack-contract --example template_cost`
#![allow(clippy::print_stdout, reason = "reports what it measured")]

use std::time::{Duration, Instant};

use pack_contract::{Contract, MAX_TEMPLATE_LEN, validate_template_all};

/// About 560 bytes: a heading, prose naming a variable, a conditional and a list of skills.
const CHUNK: &str = "## Working with {{persona}}\n\n\
Read the file before you change it, and say what you changed and why. Never run a command \
the user did not ask for when a read would answer the question.\n\n\
{{#if tools.bash}}\nYou may run shell commands in {{data_dir}}; keep them short.\n{{else}}\n\
You cannot run commands: ask the user to run them and paste the output.\n{{/if}}\n\n\
{{#each skills}}\n* {{this.name}}: {{this.description}}\n{{/each}}\n\
When a task is done, check it the way the user would before you answer. If something is \
unclear, ask one short question instead of guessing.\n\n";

fn main() {
    let contract = Contract::builtin(1).expect("schema 1 is built in");
    println!("| template | elements | validation | rate |");
    println!("|---|---|---|---|");
    let mut size = 1024;
    while size <= MAX_TEMPLATE_LEN {
        let mut source = String::with_capacity(size + CHUNK.len());
        while source.len() + CHUNK.len() <= size {
            source.push_str(CHUNK);
        }
        source.push_str(&"x".repeat(size - source.len()));
        let elements = source.matches("{{").count() * 2 + 1;
        let problems = validate_template_all("t.hbs", &source, &contract);
        assert!(problems.is_empty(), "{problems:?}");
        // At least 0.3 s of validating per size, for a stable figure.
        let (mut runs, started) = (0u32, Instant::now());
        while runs < 3 || started.elapsed() < Duration::from_millis(300) {
            std::hint::black_box(validate_template_all("t.hbs", &source, &contract));
            runs += 1;
        }
        let each = started.elapsed() / runs;
        println!(
            "| {} KiB | ~{elements} | {:.2} ms | {:.1} MB/s |",
            size / 1024,
            each.as_secs_f64() * 1e3,
            size as f64 / each.as_secs_f64() / 1e6
        );
        size *= 2;
    }
}
