//! A pack refresh that lands between two model calls of one run: the next call renders
//! from the new pack, and the model is told its system prompt changed.

use crate::common;
use crate::model_server;

use std::sync::Arc;

use agent_runtime::agent_loop::{AgentLoop, Event, LoopState};
use agent_runtime::permissions::Policy;
use agent_runtime::provider::{Api, Message, Provider, ProviderSettings};
use agent_runtime::tools::ToolContext;
use agent_runtime::transcript::{SessionHeader, Transcript};
use model_server::{ModelServer, openai_calls, openai_text};
use pack_client::snapshot::SnapshotMeta;
use pack_client::{PromptStore, Snapshot, Source};
use serde_json::json;

/// The built-in pack's files as a remote pack of another version.
fn updated_pack() -> Arc<Snapshot> {
    let builtin = common::builtin();
    let files: Vec<(String, Vec<u8>)> = builtin
        .keys()
        .into_iter()
        .map(|key| (key.to_string(), builtin.get(key).unwrap().to_vec()))
        .collect();
    let meta = SnapshotMeta {
        name: "team".to_string(),
        version: semver::Version::new(2, 1, 0),
        sequence: 7,
        source: Source::Remote,
        sha256: "ab".repeat(32),
        schema: 1,
    };
    Arc::new(Snapshot::new(meta, files).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pack_that_changes_mid_run_is_announced_to_the_model() {
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![
        openai_calls(&[("g1", "glob", json!({"pattern": "*"}))]),
        openai_text("done"),
    ]);
    let turn = common::Turn::new("mavis");
    let store = PromptStore::new(common::builtin());
    let provider = Provider::new(ProviderSettings::for_tests(
        Api::OpenAi,
        &server.openai_base(),
    ))
    .unwrap();
    let header = SessionHeader {
        id: Transcript::new_id(),
        created_at: "2026-12-01T00:00:00Z".into(),
        agent: "mavis".into(),
        mode: turn.mode,
        provider: "test".into(),
        model: "test-model".into(),
        cwd: work.path().to_path_buf(),
    };
    let mut transcript = Transcript::create(&work.path().join("sessions"), &header).unwrap();
    let mut agent_loop = AgentLoop {
        store: &store,
        request: turn.request(),
        provider: &provider,
        tools: Arc::new(ToolContext::new(
            work.path().to_path_buf(),
            Policy::unrestricted(work.path().to_path_buf()),
        )),
        max_steps: 10,
        session_id: header.id.clone(),
        context_limit: None,
        state: LoopState::default(),
        live: None,
    };
    let mut messages = vec![Message::User {
        content: "look around".into(),
    }];
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    let update = updated_pack();
    // The refresh lands while the first call's tool runs.
    let mut sink = |event: Event| {
        if matches!(event, Event::ToolCallCompleted { .. }) {
            store.install(update.clone());
        }
    };
    agent_loop
        .run(&mut messages, &mut transcript, 0, cancel, &mut sink)
        .await
        .unwrap();
    let requests = server.requests();
    let told = |i: usize| {
        requests[i].body["messages"]
            .to_string()
            .contains("The prompt pack was updated during this session (now team 2.1.0)")
    };
    assert!(!told(0));
    assert!(told(1), "{}", requests[1].body["messages"]);
}
