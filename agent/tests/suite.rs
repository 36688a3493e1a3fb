//! The agent's tests, one test binary: each file under tests/ is a module of it (linking
//! one binary instead of one per file is most of what a clean test build costs). Helpers
//! the files share are modules here, reached as `crate::common`, `crate::model_server`, ...

mod common;
mod model_server;
#[path = "../../tests/shared/module_layers.rs"]
mod module_layers;
#[path = "../../tests/shared/ports.rs"]
mod ports;
mod pty;

mod agents;
mod approvals;
mod background;
mod capabilities;
mod compaction;
mod context_window;
mod contract;
mod delegation;
mod errors;
mod exec;
mod fallback;
mod frozen_helper;
mod handoff_cap;
mod hostile_model;
mod init;
mod instructions;
mod landlock_abi;
mod layering;
mod live_context;
mod live_model;
mod mcp;
mod notes;
mod outcomes;
mod pack_change;
mod packs;
mod permissions;
mod pin_concurrent;
mod pin_status;
mod plan;
mod prompt_cache;
mod prompt_command;
mod prompt_inputs;
mod prompts;
mod providers;
mod real_server;
mod repl;
mod roster;
mod sandbox;
mod skills;
mod stream_properties;
mod tools;
mod trimming;
mod web_fetch;
mod workspace_trust;
