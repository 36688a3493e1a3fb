//! `pack-client`: the promise to the end user. Prompts are never half-updated, never
//! unsigned, and the agent keeps working offline.
//!
//! - [`PromptStore`] hands out immutable [`Snapshot`]s: capture once, read many. Both live
//!   in `pack-serving` (with the compiled-in pack), which renderers depend on without
//!   linking the network side; they are re-exported here at their old paths.
//! - [`Client`] refreshes from `packd` following the state machine in DESIGN.md, installs
//!   crash-safely into a [`cache`] directory, and swaps the snapshot atomically.
//! - [`schedule`] runs the refresh every six hours with a per-install offset, and
//!   [`watch`] refreshes long-running processes within seconds of a change.
//! - When anything is wrong the store serves the pack compiled into the binary, whole;
//!   [`health`] marks a pack that keeps failing to render bad on the device, and [`report`]
//!   tells the server what failed (reason codes only); [`outcomes`] keeps how the turns
//!   of each pack version went (counts only) and sends them as the day runs (at most once an
//!   hour a row, when it changed) and once more, final, when it is over.
//! - [`files`] keeps, when the config asks for it, what serves as read-only files behind
//!   one link, for agents that read their prompts from files.

// `unwrap` and `expect` are for tests: shipped code says what failed (STYLE.md, "Weight").
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod accepts;
pub mod activity;
pub mod builtin;
pub mod cache;
pub mod client;
pub mod clock;
pub mod config;
pub mod error;
pub mod files;
pub mod health;
pub mod http;
pub mod outcomes;
pub mod policy;
pub mod report;
pub mod schedule;
pub mod targets;
pub mod watch;

pub use pack_serving::{snapshot, store};

pub use client::{Client, ClientStatus, FailureRecord, FilesStatus, RefreshOutcome, RefusedPack};
pub use clock::{Clock, ManualClock};
pub use config::ClientConfig;
pub use error::ClientError;
pub use snapshot::{Snapshot, SnapshotError, Source};
pub use store::{PromptStore, ServeObserver, Served};
