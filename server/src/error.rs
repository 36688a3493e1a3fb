//! The one error type of the HTTP API. Every variant maps to a status code and a stable
//! machine-readable `code`; the message says what was expected and what was found.
//!
//! On the wire: `{"error": {"code": "stable_code", "message": "human text", ...details}}`.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use pack_format::FormatError;

use crate::auth::{AuthError, Scope};
use crate::storage::StorageError;

/// Everything a request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("expected a SHA-256 as 64 lowercase hex digits, found {found:?}")]
    InvalidSha256 { found: String },
    #[error("{0}")]
    InvalidName(FormatError),
    #[error("invalid request body: {reason}")]
    InvalidBody { reason: String },
    #[error("missing or unknown bearer token")]
    Unauthorized,
    #[error("this token lacks the {needed} scope")]
    Forbidden { needed: Scope },
    #[error("{what} not found")]
    NotFound { what: String },
    #[error("request took longer than {secs} s")]
    Timeout { secs: u64 },
    #[error("request body is over the limit of {limit} bytes")]
    PayloadTooLarge { limit: u64 },
    #[error("range not satisfiable: the blob is {size} bytes")]
    RangeNotSatisfiable { size: u64 },
    #[error("sha256 mismatch: the URL says {expected}, the body hashes to {found}")]
    HashMismatch { expected: String, found: String },
    #[error("not a valid sealed pack: {0}")]
    InvalidPack(FormatError),
    #[error(
        "pack {name} {version} already exists with sha256 {existing}; this upload is {found}: \
         {held}"
    )]
    VersionExists {
        name: String,
        version: String,
        existing: String,
        found: String,
        /// Boxed: the variant would otherwise make every `ApiError` large.
        held: Box<VersionHeld>,
    },
    #[error("signature check failed: {0}")]
    InvalidSignature(FormatError),
    #[error("invalid channel document: {0}")]
    InvalidDocument(FormatError),
    #[error("{0}")]
    Expired(FormatError),
    #[error("the URL names channel {path:?}, the signed document is for {document:?}")]
    ChannelMismatch { path: String, document: String },
    #[error("the document references blobs that were not uploaded: {}", missing.join(", "))]
    MissingBlobs { missing: Vec<String> },
    #[error("the document does not match the uploaded pack: {reason}")]
    PackMismatch { reason: String },
    /// The document's sequence is not the live one + 1 (`current` 0: nothing published).
    #[error("{}", stale_message(*found, *current))]
    StaleSequence { found: u64, current: u64 },
    #[error(
        "sequence {sequence} was just published by someone else with a different document: \
         re-read the channel and sign the next sequence"
    )]
    SequenceTaken { sequence: u64 },
    #[error("publishing is disabled: no publisher keys are configured")]
    PublishingDisabled,
    #[error("invalid wait {found:?}: expected whole seconds, such as wait=50")]
    InvalidWait { found: String },
    #[error(
        "invalid after {found:?}: expected the sequence of the document the watch holds, a \
         whole number such as after=41"
    )]
    InvalidAfter { found: String },
    #[error(
        "this node holds its limit of {limit} watches: retry in {retry_after} s, or fetch \
         without `wait`"
    )]
    WatchersFull { limit: usize, retry_after: u64 },
    #[error("rate limited: {reason}; try again in {retry_after_secs} s")]
    RateLimited {
        reason: String,
        retry_after_secs: u64,
    },
    #[error("fleet data is off on this server ([fleet] enabled = false)")]
    FleetDisabled,
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    #[error("internal error: {0}")]
    Internal(String),
}

/// Why an uploaded version takes no other bytes (`version_exists`).
#[derive(Debug)]
pub enum VersionHeld {
    /// A channel document names it; the first found, by channel name and sequence.
    Released { channel: String, sequence: u64 },
    /// A publish claimed the record this upload found, to commit a document naming it, and
    /// no committed document names it yet: the publish is committing, or it failed after its
    /// claim (see `claims`).
    Releasing {
        channel: String,
        sequence: u64,
        since: String,
        claim: String,
    },
    /// Another upload claimed the replacement of the record this upload found and has not
    /// written its own (see `routes::blobs::replace`).
    Replacing {
        sha256: String,
        since: String,
        claim: String,
    },
    /// Other uploads replaced it again and again while this one was stored.
    Contended { rounds: usize },
}

impl std::fmt::Display for VersionHeld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VersionHeld::Released { channel, sequence } => write!(
                f,
                "it was released (channel {channel} sequence {sequence} names it), and a \
                 released version never takes other bytes: publish these as a new version"
            ),
            VersionHeld::Releasing {
                channel,
                sequence,
                since,
                claim,
            } => write!(
                f,
                "a publish of channel {channel} sequence {sequence} claimed it for release at \
                 {since}, and a version being released never takes other bytes: publish these \
                 as a new version (if no document ever names it, that publish failed after its \
                 claim; removing {claim} from the storage frees the version)"
            ),
            VersionHeld::Replacing {
                sha256,
                since,
                claim,
            } => write!(
                f,
                "it was never released, but an upload of {sha256} began replacing it at {since} \
                 and has not finished: try again in a moment (if this persists, the packd \
                 storing that upload stopped mid-way: publish as a new version, or remove \
                 {claim} from the storage)"
            ),
            VersionHeld::Contended { rounds } => write!(
                f,
                "it was never released, but other uploads replaced it {rounds} times while this \
                 one was stored: try again"
            ),
        }
    }
}

impl From<AuthError> for ApiError {
    fn from(err: AuthError) -> Self {
        match err {
            AuthError::Unauthorized => ApiError::Unauthorized,
            AuthError::Forbidden { needed } => ApiError::Forbidden { needed },
        }
    }
}

/// The JSON error body: the protocol crate's, shared with every reader.
pub use pack_protocol::{ErrorBody, ErrorDetail};

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidSha256 { .. }
            | ApiError::InvalidName(_)
            | ApiError::InvalidBody { .. }
            | ApiError::InvalidWait { .. }
            | ApiError::InvalidAfter { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::NotFound { .. } | ApiError::FleetDisabled => StatusCode::NOT_FOUND,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Timeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RangeNotSatisfiable { .. } => StatusCode::RANGE_NOT_SATISFIABLE,
            ApiError::HashMismatch { .. }
            | ApiError::InvalidPack(_)
            | ApiError::InvalidSignature(_)
            | ApiError::InvalidDocument(_)
            | ApiError::Expired(_)
            | ApiError::ChannelMismatch { .. }
            | ApiError::MissingBlobs { .. }
            | ApiError::PackMismatch { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::VersionExists { .. }
            | ApiError::StaleSequence { .. }
            | ApiError::SequenceTaken { .. } => StatusCode::CONFLICT,
            ApiError::PublishingDisabled | ApiError::WatchersFull { .. } | ApiError::Storage(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::InvalidSha256 { .. } => "invalid_sha256",
            ApiError::InvalidName(_) => "invalid_name",
            ApiError::InvalidBody { .. } => "invalid_body",
            ApiError::Unauthorized => "unauthorized",
            ApiError::Forbidden { .. } => "forbidden",
            ApiError::NotFound { .. } => "not_found",
            ApiError::Timeout { .. } => "timeout",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::RangeNotSatisfiable { .. } => "range_not_satisfiable",
            ApiError::HashMismatch { .. } => "hash_mismatch",
            ApiError::InvalidPack(_) => "invalid_pack",
            ApiError::VersionExists { .. } => "version_exists",
            ApiError::InvalidSignature(_) => "invalid_signature",
            ApiError::InvalidDocument(_) => "invalid_document",
            ApiError::Expired(_) => "expired",
            ApiError::ChannelMismatch { .. } => "channel_mismatch",
            ApiError::MissingBlobs { .. } => "missing_blobs",
            ApiError::PackMismatch { .. } => "pack_mismatch",
            ApiError::StaleSequence { .. } => "stale_sequence",
            ApiError::SequenceTaken { .. } => "sequence_taken",
            ApiError::PublishingDisabled => "publishing_disabled",
            ApiError::InvalidWait { .. } => "invalid_wait",
            ApiError::InvalidAfter { .. } => "invalid_after",
            ApiError::WatchersFull { .. } => "watchers_full",
            ApiError::RateLimited { .. } => "rate_limited",
            ApiError::FleetDisabled => "fleet_disabled",
            ApiError::Storage(_) => "storage_unavailable",
            ApiError::Internal(_) => "internal",
        }
    }

    /// Sorts a failed channel verification into what the publisher has to fix.
    pub fn from_verify(err: FormatError) -> Self {
        match err {
            FormatError::Expired { .. } => ApiError::Expired(err),
            FormatError::UntrustedKey { .. }
            | FormatError::LegacySignature
            | FormatError::BadSignature { .. }
            | FormatError::CommentMismatch { .. }
            | FormatError::GuardNotDelegated { .. } => ApiError::InvalidSignature(err),
            FormatError::Malformed {
                what: "channel signature",
                ..
            } => ApiError::InvalidSignature(err),
            FormatError::TooLarge { .. }
            | FormatError::Truncated { .. }
            | FormatError::BadMagic { .. }
            | FormatError::UnsupportedVersion { .. }
            | FormatError::Malformed { .. }
            | FormatError::InvalidName { .. }
            | FormatError::UnknownContentKey { .. }
            | FormatError::WrongContentKey { .. }
            | FormatError::Tampered
            | FormatError::HashMismatch { .. }
            | FormatError::SizeMismatch { .. }
            | FormatError::UnsafeEntry { .. }
            | FormatError::TooManyFiles { .. }
            | FormatError::IndexMismatch { .. }
            | FormatError::DecompressionBomb { .. }
            | FormatError::KeyFile { .. }
            | FormatError::SequenceOutOfRange { .. }
            | FormatError::GuardOverreach { .. }
            | FormatError::Signing(_)
            | FormatError::PackDirectory { .. }
            | FormatError::Io { .. } => ApiError::InvalidDocument(err),
        }
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code().to_string(),
                message: self.to_string(),
                missing: if let ApiError::MissingBlobs { missing } = self {
                    Some(missing.clone())
                } else {
                    None
                },
                current_sequence: if let ApiError::StaleSequence { current, .. } = self {
                    Some(*current)
                } else {
                    None
                },
            },
        }
    }
}

/// What a publisher sees for a sequence that is not the next one, with what to do about it.
fn stale_message(found: u64, current: u64) -> String {
    let next = current.saturating_add(1);
    if current == 0 {
        format!("the channel has no documents yet, so the first must be sequence 1; found {found}")
    } else if found <= current {
        format!(
            "sequence {found} is not greater than the current sequence {current}: re-read the \
             channel and sign the change as sequence {next}"
        )
    } else {
        format!(
            "sequence {found} skips ahead of the current sequence {current}: the next document \
             must be sequence {next}"
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(code = self.code(), error = %self, "request failed");
        } else {
            tracing::debug!(code = self.code(), error = %self, "request refused");
        }
        let mut response = (status, Json(self.body())).into_response();
        let headers = response.headers_mut();
        if let ApiError::Unauthorized = &self {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let ApiError::WatchersFull { retry_after, .. } = &self {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after));
        }
        if let ApiError::RateLimited {
            retry_after_secs, ..
        } = &self
        {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
        }
        if let ApiError::RangeNotSatisfiable { size } = &self
            && let Ok(value) = HeaderValue::from_str(&format!("bytes */{size}"))
        {
            headers.insert(header::CONTENT_RANGE, value);
        }
        response
    }
}
