//! The tests of this package, one test binary: each file under tests/ is a module of it
//! (linking one binary instead of one per file is most of what a clean test build costs).
//! Helpers the files share are modules here, reached as `crate::common` and so on.

#[path = "../../tests/shared/lock_closure.rs"]
mod lock_closure;
#[path = "../../tests/shared/module_layers.rs"]
mod module_layers;
#[path = "../../tests/shared/ports.rs"]
mod ports;

mod builtin_dir;
mod channels;
mod dependencies;
mod errors;
mod files_and_render;
mod files_killed;
mod scripted_transport;
