//! Why a refresh or a start-up load did not install anything. Each variant says what was
//! expected and what was found; the previous snapshot keeps serving in every case.

use pack_format::FormatError;

use crate::snapshot::SnapshotError;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no server configured: set `server` in the client config")]
    NoServer,
    #[error("request to {url} failed: {reason}")]
    Http { url: String, reason: String },
    #[error("{url} answered {status}{}", if detail.is_empty() { String::new() } else { format!(": {detail}") })]
    Status {
        url: String,
        status: u16,
        /// What the server said, cut to [`crate::http::ERROR_BODY_LIMIT`] bytes; may be empty.
        detail: String,
    },
    #[error("{what} from {url} is longer than the {limit} bytes allowed")]
    BodyTooLong {
        what: &'static str,
        url: String,
        limit: u64,
    },
    #[error("{what} from {url} is truncated: expected {expected} bytes, got {found}")]
    Truncated {
        what: &'static str,
        url: String,
        expected: u64,
        found: u64,
    },
    #[error("refresh did not finish within its {seconds}s deadline")]
    Deadline { seconds: u64 },
    #[error(
        "another process sharing the cache held its refresh lock {path} for the whole {seconds}s deadline (a refresh suspended with Ctrl-Z?); nothing was changed"
    )]
    Busy { path: String, seconds: u64 },
    #[error("channel document rejected: {0}")]
    Document(#[source] FormatError),
    #[error(
        "channel document rejected: it is signed by key {key_id}, which this client does not trust (trusted: [{trusted}]); add the publisher's public key (the signing.pub beside its signing.key) to `trusted_keys` in {config}"
    )]
    UntrustedKey {
        key_id: String,
        /// The trusted key ids, comma-separated.
        trusted: String,
        /// Where `trusted_keys` is set ([`crate::ClientConfig::config_name`]).
        config: String,
    },
    #[error("channel document is for channel {found:?}, expected {expected:?}")]
    WrongChannel { expected: String, found: String },
    #[error("channel document is for pack {found:?}, expected {expected:?}")]
    WrongPack { expected: String, found: String },
    #[error("rollback refused: channel sequence {found} is older than installed {installed}")]
    Rollback { found: u64, installed: u64 },
    #[error(
        "equivocation refused: channel sequence {sequence} was installed as document {installed}, but the server now sends {found} with the same sequence"
    )]
    Equivocation {
        sequence: u64,
        /// SHA-256 of the accepted document and of the one offered.
        installed: String,
        found: String,
    },
    #[error(
        "pack {sha256} failed before and is not retried ({reason}); `pack-client forget-bad` or `agent packs forget-bad` clears the mark"
    )]
    KnownBad { sha256: String, reason: String },
    #[error("downloaded pack has sha256 {found}, but the signed entry says {expected}")]
    HashMismatch { expected: String, found: String },
    #[error("pack header {field} is {found:?}, but the signed entry says {expected:?}")]
    HeaderMismatch {
        field: &'static str,
        expected: String,
        found: String,
    },
    #[error(
        "pack declares {}; this client takes {} (its [updates] contract)",
        contract_of(*schema),
        known.iter().map(|n| contract_of(*n)).collect::<Vec<_>>().join(" or ")
    )]
    IncompatibleSchema { schema: u32, known: Vec<u32> },
    #[error("pack rejected: {0}")]
    Pack(#[source] FormatError),
    #[error("pack is not usable: {0}")]
    Snapshot(#[source] SnapshotError),
    #[error("cache {path}: {reason}")]
    Cache { path: String, reason: String },
    #[error("config {path}: {reason}")]
    Config { path: String, reason: String },
    #[error("no bad-pack mark for {sha256}; marked: [{}] (see the client's status)", marked.join(", "))]
    NotMarked { sha256: String, marked: Vec<String> },
    #[error("built-in pack {path}: {reason}")]
    Builtin { path: String, reason: String },
    #[error("refresh worker thread failed: {reason}")]
    Worker { reason: String },
}

impl ClientError {
    /// A stable, machine-readable name for the kind of failure (`snake_case`), kept with the
    /// message in the cache's refresh record and shown by `status`.
    pub fn kind(&self) -> &'static str {
        match self {
            ClientError::NoServer => "no_server",
            ClientError::Http { .. } => "unreachable",
            ClientError::Status { .. } => "http_status",
            ClientError::BodyTooLong { .. } => "body_too_long",
            ClientError::Truncated { .. } => "truncated",
            ClientError::Deadline { .. } => "deadline",
            ClientError::Busy { .. } => "busy",
            ClientError::Document(pack_format::FormatError::Expired { .. }) => "expired",
            ClientError::Document(_) | ClientError::UntrustedKey { .. } => "document_rejected",
            ClientError::WrongChannel { .. } => "wrong_channel",
            ClientError::WrongPack { .. } => "wrong_pack",
            ClientError::Rollback { .. } => "rollback",
            ClientError::Equivocation { .. } => "equivocation",
            ClientError::KnownBad { .. } => "known_bad",
            ClientError::HashMismatch { .. } => "hash_mismatch",
            ClientError::HeaderMismatch { .. } => "header_mismatch",
            ClientError::IncompatibleSchema { .. } => "incompatible_schema",
            ClientError::Pack(_) => "pack_rejected",
            ClientError::Snapshot(_) => "pack_unusable",
            ClientError::Cache { .. } => "cache",
            ClientError::Config { .. } => "config",
            ClientError::NotMarked { .. } => "not_marked",
            ClientError::Builtin { .. } => "builtin",
            ClientError::Worker { .. } => "worker",
        }
    }

    /// Whether trying again later may succeed without anything changing on the publisher's
    /// side (network trouble, server errors).
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Http { .. }
            | ClientError::Deadline { .. }
            | ClientError::Busy { .. }
            | ClientError::Truncated { .. } => true,
            ClientError::Status { status, .. } => *status == 429 || *status >= 500,
            ClientError::NoServer
            | ClientError::BodyTooLong { .. }
            | ClientError::Document(_)
            | ClientError::UntrustedKey { .. }
            | ClientError::WrongChannel { .. }
            | ClientError::WrongPack { .. }
            | ClientError::Rollback { .. }
            | ClientError::Equivocation { .. }
            | ClientError::KnownBad { .. }
            | ClientError::HashMismatch { .. }
            | ClientError::HeaderMismatch { .. }
            | ClientError::IncompatibleSchema { .. }
            | ClientError::Pack(_)
            | ClientError::Snapshot(_)
            | ClientError::Cache { .. }
            | ClientError::Config { .. }
            | ClientError::NotMarked { .. }
            | ClientError::Builtin { .. }
            | ClientError::Worker { .. } => false,
        }
    }
}

/// A header `schema` as the contract it names, for [`ClientError::IncompatibleSchema`].
fn contract_of(schema: u32) -> String {
    use pack_contract::Kind;
    match Kind::of_schema(schema) {
        Kind::Agent(n) => format!("agent schema {n}"),
        Kind::App => format!("an app contract (schema {schema})"),
        Kind::Files => format!("plain files (schema {schema})"),
    }
}
