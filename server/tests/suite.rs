//! The tests of this package, one test binary: each file under tests/ is a module of it
//! (linking one binary instead of one per file is most of what a clean test build costs).
//! Helpers the files share are modules here, reached as `crate::common` and so on.

#[macro_use]
mod common;
#[path = "../../tests/shared/lock_closure.rs"]
mod lock_closure;
#[path = "../../tests/shared/module_layers.rs"]
mod module_layers;

mod accept_backoff;
mod api;
mod blob_bytes;
mod connections;
mod console;
mod console_cookie;
mod dependencies;
mod errors;
mod fleet;
mod layering;
mod metrics_bounds;
mod no_stall;
mod operations;
mod outcomes;
mod ready_file;
mod routes;
mod storage_writable;
mod unreleased;
mod watch;
