//! The HTTP handlers, one file per resource.

pub mod blobs;
pub mod channels;
pub mod fleet;
pub mod ops;
pub mod outcomes;
pub mod packs;

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::header::AsHeaderName;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use pack_protocol::headers;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use crate::error::ApiError;
use crate::model::ChannelRecord;
use crate::reports::ReportLimiter;
use crate::state::SharedState;

/// Reads a request body of at most `limit` bytes: `413` as soon as it is known to be longer,
/// from `Content-Length` before reading anything, or while reading.
pub async fn read_body(headers: &HeaderMap, body: Body, limit: u64) -> Result<Bytes, ApiError> {
    read_body_with(headers, body, limit, |_| {}).await
}

/// [`read_body`], and the body's SHA-256 (lowercase hex). The hash takes each piece as it
/// arrives: hashing 64 MiB in one go would hold the thread for tens of milliseconds, and with
/// it every other connection that thread serves.
pub async fn read_body_sha256(
    headers: &HeaderMap,
    body: Body,
    limit: u64,
) -> Result<(Bytes, String), ApiError> {
    let mut hasher = Sha256::new();
    let bytes = read_body_with(headers, body, limit, |piece| hasher.update(piece)).await?;
    Ok((bytes, hex::encode(hasher.finalize())))
}

/// [`read_body`], calling `each` with every piece of the body as it arrives.
async fn read_body_with(
    headers: &HeaderMap,
    body: Body,
    limit: u64,
    mut each: impl FnMut(&[u8]),
) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    let mut buf = BytesMut::with_capacity(declared.unwrap_or(0).min(limit) as usize);
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::InvalidBody {
            reason: format!("reading the body failed: {e}"),
        })?;
        if (buf.len() + chunk.len()) as u64 > limit {
            return Err(ApiError::PayloadTooLarge { limit });
        }
        each(&chunk);
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// What a client sends about its own install (a failure report, outcome counts), and how
/// its route words what is missing.
pub struct ClientPost<T> {
    /// Largest body taken.
    pub max_bytes: usize,
    /// The start of the error without an install hash: `a report needs`.
    pub needs: &'static str,
    /// What the body must hold, in the error of one that does not parse.
    pub expected: &'static str,
    /// The channel the body names, which must be the URL's.
    pub channel: fn(&T) -> &str,
}

/// The address a request came from, when the server that took its connection said
/// (`ConnectInfo<SocketAddr>` in the request's extensions); `None` otherwise.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Peer(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(peer)| peer.ip()),
        ))
    }
}

/// The checks every client POST passes before anything is counted: a read token, the fleet
/// enabled, a valid channel name, the sender's install hash, a body within `post.max_bytes`
/// that parses and names the URL's channel, a channel that exists (so a POST cannot make
/// packd store anything under a new name), and room in `limiter` for this install and for
/// the address it came from (429 with `Retry-After`). Returns the install hash, the body and
/// the channel's live record.
pub async fn accept_client_post<T: DeserializeOwned>(
    state: &SharedState,
    channel: &str,
    headers: &HeaderMap,
    peer: Peer,
    body: Body,
    limiter: &ReportLimiter,
    post: &ClientPost<T>,
) -> Result<(String, T, Arc<ChannelRecord>), ApiError> {
    state.settings.tokens.authorize_read(headers)?;
    if !state.fleet.settings().enabled {
        return Err(ApiError::FleetDisabled);
    }
    check_name("channel", channel)?;
    let install = header_str(headers, headers::INSTALL)
        .filter(|i| pack_protocol::fleet::is_install_hash(i))
        .ok_or_else(|| ApiError::InvalidBody {
            reason: format!(
                "{} the sender's install hash in {} (32 lowercase hex digits)",
                post.needs,
                headers::INSTALL
            ),
        })?
        .to_string();
    let bytes = read_body(headers, body, post.max_bytes as u64).await?;
    let report: T = serde_json::from_slice(&bytes).map_err(|e| ApiError::InvalidBody {
        reason: format!("expected {} and nothing else: {e}", post.expected),
    })?;
    let named = (post.channel)(&report);
    if named != channel {
        return Err(ApiError::ChannelMismatch {
            path: channel.to_string(),
            document: named.to_string(),
        });
    }
    let record = channels::live(state, channel, headers).await?;
    limiter.check(&install, peer.0)?;
    Ok((install, report, record))
}

/// A path segment that must be a lowercase hex SHA-256.
/// Who may read the fleet's views (the fleet view, outcome counts, the guard's): the
/// deployment's readers, or only publishers under `[fleet] view = "publish"`.
pub fn authorize_fleet_view(state: &SharedState, headers: &HeaderMap) -> Result<(), ApiError> {
    match state.fleet.settings().view {
        crate::fleet::ViewScope::Read => state.settings.tokens.authorize_read(headers)?,
        crate::fleet::ViewScope::Publish => {
            state
                .settings
                .tokens
                .authorize(headers, crate::auth::Scope::Publish)?;
        }
    }
    Ok(())
}

/// The `days` of a fleet or outcome view: 1 to [`crate::fleet::MAX_WINDOW_DAYS`], all of
/// them when not given.
pub fn window_days(days: Option<u32>) -> Result<u32, ApiError> {
    let max = crate::fleet::MAX_WINDOW_DAYS;
    let days = days.unwrap_or(max);
    if !(1..=max).contains(&days) {
        return Err(ApiError::InvalidBody {
            reason: format!("days must be 1 to {max}, found {days}"),
        });
    }
    Ok(days)
}

pub fn check_sha256(found: &str) -> Result<(), ApiError> {
    let ok = found.len() == 64
        && found
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(())
    } else {
        Err(ApiError::InvalidSha256 {
            found: found.chars().take(80).collect(),
        })
    }
}

pub fn check_name(what: &'static str, name: &str) -> Result<(), ApiError> {
    pack_format::validate_name(what, name).map_err(ApiError::InvalidName)
}

/// The value of header `name` when it is visible ASCII. A `HeaderName` as `name` is looked up
/// without parsing it first, as a `&str` is.
pub fn header_str(headers: &HeaderMap, name: impl AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The strong ETag of content with this SHA-256.
pub fn etag(sha256: &str) -> String {
    format!("\"{sha256}\"")
}
