//! `pack-serving`: what a renderer reads prompts from, and nothing that fetches them.
//!
//! - [`PromptStore`] hands out immutable [`Snapshot`]s: capture once, read many. A request
//!   that fails on a remote snapshot is redone whole from the built-in one, and a
//!   [`ServeObserver`] is told how each went (the client counts render failures with it).
//! - [`builtin`] is the pack compiled into the binary (`packs/builtin`, validated by
//!   `build.rs`), or one read from a directory at run time.
//!
//! Fetching, verifying and installing packs is `pack-client`'s job; the agent's prompt
//! assembly and `packer diff` need only this crate, so they link no HTTP client and no
//! async runtime.

// `unwrap` and `expect` are for tests: shipped code says what failed (STYLE.md, "Weight").
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod builtin;
pub mod snapshot;
pub mod store;

pub use builtin::BuiltinError;
pub use snapshot::{Snapshot, SnapshotError, SnapshotMeta, Source};
pub use store::{PromptStore, ServeObserver, Served};
