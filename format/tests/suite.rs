//! The tests of this package, one test binary: each file under tests/ is a module of it
//! (linking one binary instead of one per file is most of what a clean test build costs).
//! Helpers the files share are modules here, reached as `crate::common` and so on.
//! Kept as binaries of their own: header_limits.rs.

mod common;
#[path = "../../tests/shared/lock_closure.rs"]
mod lock_closure;
#[path = "../../tests/shared/module_layers.rs"]
mod module_layers;

mod channel_selection;
mod compat;
mod dependencies;
mod guard;
mod guard_property;
mod interop;
mod key_errors;
mod pack_dir;
mod payload_safety;
mod roundtrip;
mod segments;
mod sequence_bound;
mod tamper;
mod unpack;
mod vectors;
mod zstd_frames;
