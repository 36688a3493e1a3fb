//! The tests of this package, one test binary: each file under tests/ is a module of it
//! (linking one binary instead of one per file is most of what a clean test build costs).
//! Helpers the files share are modules here, reached as `crate::common` and so on.

mod common;
#[path = "../../tests/shared/lock_closure.rs"]
mod lock_closure;
#[path = "../../tests/shared/module_layers.rs"]
mod module_layers;
#[path = "../../tests/shared/ports.rs"]
mod ports;

mod cli;
mod connect_retry;
mod contracts;
mod dependencies;
mod diff;
mod extract_sync;
mod guard;
mod hostile_server;
mod key_files;
mod no_replace;
mod outcomes;
mod publish_check;
mod ramps;
mod release_check;
mod release_guards;
mod republish;
mod server;
mod template_errors;
