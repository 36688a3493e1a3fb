//! The tests of this package, one test binary: each file under tests/ is a module of it
//! (linking one binary instead of one per file is most of what a clean test build costs).
//! Helpers the files share are modules here, reached as `crate::common` and so on.

#[path = "../../tests/shared/ports.rs"]
mod ports;

mod coding_agents;
mod console_browser;
mod contracts;
mod crash_safety;
mod file_view;
mod first_hour;
mod fleet;
mod guard_evidence;
mod guarded_rollout;
mod guarded_rollout_binaries;
mod hostile_guard;
mod hostile_server;
mod proxy_watch;
mod publish_to_prompt;
mod readme;
mod refresh;
mod test_layout;
mod third_party_agent;
mod transitions;
mod watch;
