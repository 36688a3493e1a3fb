//! The HTTP handlers, one file per resource.

pub mod blobs;
pub mod channels;
pub mod fleet;
pub mod ops;
pub mod outcomes;
pub mod packs;

use axum::body::Body;
use axum::http::{HeaderMap, header};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use crate::error::ApiError;

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

/// A path segment that must be a lowercase hex SHA-256.
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

pub fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The strong ETag of content with this SHA-256.
pub fn etag(sha256: &str) -> String {
    format!("\"{sha256}\"")
}
