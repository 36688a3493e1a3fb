//! Per-turn assembly cost: the `mavis` prompt with a 32 KiB project AGENTS.md, from a
//! snapshot captured once. Prints p50 / p99 of single assemblies (plain timing loop: one
//! assembly is tens of microseconds, far above the clock's resolution).
//!
//! `cargo bench -p agent-runtime --bench assemble`

#![allow(clippy::print_stdout)] // a bench binary reports on stdout

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agent_runtime::config::Config;
use agent_runtime::environment::{Environment, Locale};
use agent_runtime::instructions::{INSTRUCTIONS_MAX_BYTES, Instructions, Sources};
use agent_runtime::{Occasion, Profile, PromptMode, TurnRequest, assemble};
use pack_client::PromptStore;

const WARMUP: usize = 200;
const RUNS: usize = 5_000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "{what}: p50 {:.1} µs, p99 {:.1} µs, min {:.1} µs ({} runs)",
        percentile(&samples, 0.50).as_secs_f64() * 1e6,
        percentile(&samples, 0.99).as_secs_f64() * 1e6,
        samples[0].as_secs_f64() * 1e6,
        samples.len()
    );
}

fn main() {
    let work = std::env::temp_dir().join(format!("agent-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let mut agents_md = String::new();
    let mut n = 0;
    while agents_md.len() < INSTRUCTIONS_MAX_BYTES - 64 {
        agents_md.push_str(&format!(
            "- Convention {n}: keep modules small and name them after their type.\n"
        ));
        n += 1;
    }
    std::fs::write(work.join("AGENTS.md"), &agents_md).unwrap();
    let global = work.join("no-global-AGENTS.md");

    let environment = Environment {
        cwd: work.clone(),
        is_git_repo: true,
        platform: "linux".to_string(),
        shell: "/bin/bash".to_string(),
        os_version: "Linux".to_string(),
        date: "2026-03-14".to_string(),
        data_dir: PathBuf::from("/home/dev/.local/share/promptpack"),
        worktree_root: Some(work.clone()),
        provider: Some("anthropic".to_string()),
        locale: Locale {
            language: Some("en".to_string()),
            locale: Some("en_US.UTF-8".to_string()),
        },
    };
    let config = Config::default();
    let store = PromptStore::new(pack_client::builtin::snapshot());
    let snapshot = store.capture();
    let instructions = Instructions::read(&Sources::new(&global, &work));
    assert!(!instructions.project.is_empty());

    let run = |instructions: &Instructions| {
        let request = TurnRequest {
            agent: "mavis",
            mode: PromptMode::Tui,
            model: "claude-sonnet-4",
            occasion: Occasion::Root,
            profile: Profile::Cli,
            interactive: true,
            config: &config,
            custom_agents: &[],
            frozen: None,
            environment: &environment,
            instructions,
            memory: None,
            session: None,
            disk_skills: &[],
            mcp: None,
        };
        assemble(&snapshot, &request).unwrap()
    };
    let size = run(&instructions).text.len();
    println!(
        "prompt size: {size} bytes (AGENTS.md {} bytes)",
        agents_md.len()
    );

    let mut samples = Vec::with_capacity(RUNS);
    for i in 0..WARMUP + RUNS {
        let start = Instant::now();
        std::hint::black_box(run(&instructions));
        if i >= WARMUP {
            samples.push(start.elapsed());
        }
    }
    report("assemble (instructions already read)", samples);

    let mut samples = Vec::with_capacity(RUNS);
    for i in 0..WARMUP + RUNS {
        let start = Instant::now();
        let instructions = Instructions::read(&Sources::new(&global, &work));
        std::hint::black_box(run(&instructions));
        if i >= WARMUP {
            samples.push(start.elapsed());
        }
    }
    report("read AGENTS.md + assemble", samples);
    std::fs::remove_dir_all(&work).ok();
}
