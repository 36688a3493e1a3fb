//! `pack-server`: the `packd` HTTP server.
//!
//! The server is trusted with storage and availability, never with authority: it checks
//! what it can (hashes, pack headers, signatures against the configured publisher keys,
//! contiguous sequences) so a publisher's mistake is caught early, but clients verify
//! everything again themselves.
//!
//! Modules depend on each other in one direction only, each on the ones listed before it
//! (`tests/module_layers.rs` fails on any `crate::` path that closes a cycle):
//!
//! 1. [`model`] (the JSON records), [`range`] (`Range` / `If-None-Match`), [`metrics`]
//!    (Prometheus counters), [`storage`] (the object store, disk or S3-compatible, and its
//!    key layout), [`auth`] (bearer tokens with scopes): nothing else of the crate.
//! 2. [`cache`]: the in-memory blob cache; [`readiness`]: `/readyz`'s answer, a write probe
//!    of [`storage`] kept for a few seconds; [`fleet`]: this node's fleet counts and
//!    outcome counts, and the readers that merge every node's (uses [`metrics`], [`model`]
//!    and [`storage`]).
//! 3. [`config`]: TOML config and command-line overrides (uses [`auth`]).
//! 4. [`error`]: the one API error type, converting [`auth`]'s and [`storage`]'s errors;
//!    then [`reports`]: the per-node bounds on failure reports, and [`claims`]: the
//!    create-only claims that decide whether a pack record is replaced or released (both
//!    use [`error`]).
//! 5. [`live`]: the live document of each channel, in memory within a bounded staleness
//!    (checked against [`storage`] at least once per poll interval), and the watches
//!    waiting for it to change (uses [`config`], [`error`], [`metrics`], [`model`]).
//! 6. [`state`]: what every handler can reach.
//! 7. [`routes`]: the handlers, one file per resource.
//! 8. [`guard`]: the guard, which looks at watched rollouts and publishes the freeze or
//!    rollback it signs through the same path as a publisher's document ([`routes`]); the
//!    mixture sequential test it decides with is [`sequential`] (pure arithmetic, nothing
//!    else of the crate).
//! 9. [`console`]: the read-only publisher console under `/console`, HTML pages over the
//!    same storage, live-document lookup and fleet view as [`routes`].
//! 10. [`app`]: the router (every route with its OpenAPI description) and its middleware.
//! 11. [`serve`]: the accept loop, each connection served by hyper with [`app`]'s router, and
//!     the graceful shutdown (ends the watches of [`live`]).

// `unwrap` and `expect` are for tests: shipped code says what failed (STYLE.md, "Weight").
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod app;
pub mod auth;
pub mod cache;
pub mod claims;
pub mod config;
pub mod console;
pub mod error;
pub mod fleet;
pub mod guard;
pub mod live;
pub mod metrics;
pub mod model;
pub mod range;
pub mod readiness;
pub mod reports;
pub mod routes;
pub mod sequential;
pub mod serve;
pub mod state;
pub mod storage;

pub use config::{Overrides, Settings};
pub use error::ApiError;
pub use serve::{ServeError, Server};
