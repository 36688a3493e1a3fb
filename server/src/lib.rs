//! `pack-server`: the `packd` HTTP server.
//!
//! The server is trusted with storage and availability, never with authority: it checks
//! what it can (hashes, pack headers, signatures against the configured publisher keys,
//! contiguous sequences) so a publisher's mistake is caught early, but clients verify
//! everything again themselves.
//!
//! - [`config`]: TOML config and command-line overrides.
//! - [`storage`]: the object store (disk or S3-compatible) and its key layout.
//! - [`app`]: routes, OpenAPI, middleware; [`routes`]: the handlers.
//! - [`auth`]: bearer tokens with scopes; [`metrics`]: Prometheus counters.
//! - [`serve`]: the accept loop and graceful shutdown.

pub mod app;
pub mod auth;
pub mod config;
pub mod error;
pub mod metrics;
pub mod model;
pub mod range;
pub mod routes;
pub mod serve;
pub mod storage;

pub use config::{Overrides, Settings};
pub use error::ApiError;
pub use serve::{ServeError, Server};
