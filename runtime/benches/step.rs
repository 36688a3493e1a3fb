//! Per-step overhead of the agent loop without the model: capture + assemble the prompt
//! and tool list, build the request body for a 50-message session, dispatch one `read`
//! call, and append the step's records to the session file. Prints p50 / p99 of the whole
//! step and of each part.
//!
//! `cargo bench -p agent-runtime --bench step`

#![allow(clippy::print_stdout)] // a bench binary reports on stdout

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_runtime::agent_loop::{dispatch, prepare_turn};
use agent_runtime::config::Config;
use agent_runtime::environment::Environment;
use agent_runtime::instructions::{Instructions, Sources};
use agent_runtime::permissions::Policy;
use agent_runtime::provider::{
    Api, Message, ModelRequest, Provider, ProviderSettings, ToolCall, Usage,
};
use agent_runtime::tools::ToolContext;
use agent_runtime::transcript::{Record, SessionHeader, Transcript};
use agent_runtime::{Occasion, Profile, PromptMode, TurnRequest};
use pack_client::PromptStore;

const WARMUP: usize = 200;
const RUNS: usize = 3_000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "{what:<28} p50 {:>7.1} µs   p99 {:>7.1} µs",
        percentile(&samples, 0.50).as_secs_f64() * 1e6,
        percentile(&samples, 0.99).as_secs_f64() * 1e6,
    );
}

fn main() {
    let work = std::env::temp_dir().join(format!("agent-step-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let file = work.join("main.rs");
    let source: String = (1..=200)
        .map(|i| format!("fn f{i}() -> u32 {{ {i} }}\n"))
        .collect();
    std::fs::write(&file, &source).unwrap();

    // A 50-message session: the task, then 24 read calls with their results, then a reply.
    let mut messages = vec![Message::User {
        content: "Find where f120 is defined and explain it.".into(),
    }];
    for i in 0..24 {
        messages.push(Message::Assistant {
            content: format!("Looking at part {i}."),
            reasoning: None,
            tool_calls: vec![ToolCall {
                id: format!("call_{i}"),
                name: "read".into(),
                arguments: format!(
                    r#"{{"path":"{}","offset":{},"limit":8}}"#,
                    file.display(),
                    i * 8 + 1
                ),
            }],
        });
        messages.push(Message::Tool {
            call_id: format!("call_{i}"),
            name: "read".into(),
            content: source
                .lines()
                .skip(i * 8)
                .take(8)
                .enumerate()
                .map(|(n, l)| format!("{}|{l}\n", i * 8 + n + 1))
                .collect(),
            is_error: false,
        });
    }
    messages.push(Message::User {
        content: "Now read the whole file.".into(),
    });
    assert_eq!(messages.len(), 50);

    let environment = Environment::detect(&work, &work);
    let instructions = Instructions::read(&Sources::new(&work.join("none"), &work));
    let config = Config::default();
    let store = PromptStore::new(pack_client::builtin::snapshot());
    let request = TurnRequest {
        agent: "mavis",
        mode: PromptMode::Tui,
        model: "claude-sonnet-4",
        occasion: Occasion::Root,
        profile: Profile::Cli,
        interactive: false,
        config: &config,
        custom_agents: &[],
        frozen: None,
        environment: &environment,
        instructions: &instructions,
        memory: None,
        session: None,
        disk_skills: &[],
        mcp: None,
    };
    let tools = Arc::new(ToolContext::new(
        work.clone(),
        Policy::unrestricted(work.clone()),
    ));
    let provider = Provider::new(ProviderSettings::for_tests(
        Api::OpenAi,
        "http://127.0.0.1:9",
    ))
    .unwrap();
    let sessions = work.join("sessions");
    let header = SessionHeader {
        id: Transcript::new_id(),
        created_at: "2026-03-14T00:00:00Z".into(),
        agent: "mavis".into(),
        mode: PromptMode::Tui,
        provider: "bench".into(),
        model: "claude-sonnet-4".into(),
        cwd: work.clone(),
    };
    let mut transcript = Transcript::create(&sessions, &header).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let call = vec![ToolCall {
        id: "call_bench".into(),
        name: "read".into(),
        arguments: format!(r#"{{"path":"{}","offset":100,"limit":20}}"#, file.display()),
    }];

    let mut total = Vec::with_capacity(RUNS);
    let mut parts: [Vec<Duration>; 4] = Default::default();
    for run in 0..WARMUP + RUNS {
        let t0 = Instant::now();
        let turn = prepare_turn(&store, &request, &tools).unwrap();
        let t1 = Instant::now();
        let body = provider.body(&ModelRequest {
            system: &turn.prompt.text,
            messages: &messages,
            tools: &turn.specs,
        });
        std::hint::black_box(serde_json::to_vec(&body).unwrap());
        let t2 = Instant::now();
        let outputs = runtime.block_on(dispatch(&turn.toolbox, &call, &cancel, &mut |_| {}));
        let t3 = Instant::now();
        transcript
            .append(&Record::Turn {
                turn: 1,
                prompt: turn.prompt.metadata.clone(),
            })
            .unwrap();
        transcript
            .append(&Record::Message {
                message: Message::Assistant {
                    content: String::new(),
                    reasoning: None,
                    tool_calls: call.clone(),
                },
            })
            .unwrap();
        transcript
            .append(&Record::Message {
                message: Message::Tool {
                    call_id: "call_bench".into(),
                    name: "read".into(),
                    content: outputs[0].content.clone(),
                    is_error: false,
                },
            })
            .unwrap();
        transcript
            .append(&Record::Usage {
                turn: 1,
                usage: Usage::default(),
                stop_reason: None,
            })
            .unwrap();
        let t4 = Instant::now();
        if run >= WARMUP {
            total.push(t4 - t0);
            parts[0].push(t1 - t0);
            parts[1].push(t2 - t1);
            parts[2].push(t3 - t2);
            parts[3].push(t4 - t3);
        }
    }
    println!("per-step overhead, 50-message session, {RUNS} runs:");
    report("whole step", total);
    let [prepare, body, dispatch, persist] = parts;
    report("capture + assemble + tools", prepare);
    report("request body (50 messages)", body);
    report("dispatch one read", dispatch);
    report("persist 4 records", persist);
    let _ = std::fs::remove_dir_all(&work);
}
