//! Headers of the protocol (lowercase, as HTTP/2 and `http::HeaderName` want them).

/// Request, on channel fetches: the client's release (semver), e.g. `1.4.2`. packd counts
/// fetches by it.
pub const CLIENT_VERSION: &str = "x-promptpack-client-version";

/// Request, on channel fetches: what the client serves — the lowercase hex SHA-256 of the
/// installed sealed pack, or `builtin` for the pack compiled into the client. packd counts
/// fetches by it.
pub const INSTALLED_PACK: &str = "x-promptpack-installed-pack";

/// The [`INSTALLED_PACK`] value of a client serving its built-in pack.
pub const INSTALLED_BUILTIN: &str = "builtin";

/// Response, on channel documents and signatures: the channel sequence of the document
/// served. A client fetches the signature of exactly this sequence
/// ([`crate::paths::history_signature`]), so a release between its two requests cannot pair
/// one publish's document with another's signature.
pub const SEQUENCE: &str = "x-promptpack-sequence";

/// Response, on answers to a watch (`GET /v1/channels/{channel}?wait=N` with
/// `If-None-Match`): the seconds of waiting the server granted (the request's `wait`, capped
/// by the server). A `304` that carries it came at the end of the wait (or when the server
/// shut down); a `304` without it came from a server that does not watch, which answers at
/// once. See [`crate::paths::channel_watch`].
pub const WAIT: &str = "x-promptpack-wait";

/// Request, on every request a client makes while it shares usage data (the default): its
/// install hash ([`crate::fleet::install_hash`]), 32 lowercase hex digits. packd counts
/// distinct installs by it and rate-limits failure reports per install; it never sees the
/// install id itself. Not sent when the client's `telemetry` is off.
pub const INSTALL: &str = "x-promptpack-install";
