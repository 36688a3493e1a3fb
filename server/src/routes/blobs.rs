//! `/v1/blobs/{sha256}`: sealed packs, addressed by the SHA-256 of their bytes.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use pack_protocol::paths;
use time::OffsetDateTime;

use crate::error::{ApiError, ErrorBody, VersionHeld};
use crate::model::{PackRecord, UploadResponse};
use crate::range::{RangeRequest, if_none_match, parse_range};
use crate::routes::{check_sha256, etag, header_str, read_body_sha256};
use crate::state::SharedState;
use crate::storage::{Created, Storage, keys};

mod replace;

use replace::Found;

pub(crate) const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// Upload a sealed pack.
///
/// The body is the sealed pack's bytes. The server recomputes the SHA-256, parses the pack
/// header (name, version, schema) without decrypting, and records `name` + `version` →
/// `sha256`. Other bytes under a recorded name and version replace the record while no
/// channel document (live or in any channel's history) names that version; once one does,
/// the version never points at other bytes again.
#[utoipa::path(
    put,
    path = paths::BLOB_ROUTE,
    tag = "blobs",
    params(("sha256" = String, Path, description = "Lowercase hex SHA-256 of the body")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "The sealed pack"),
    security(("bearer" = ["publish"])),
    responses(
        (status = 201, description = "Stored (also when it replaced other bytes under a version never released)", body = UploadResponse),
        (status = 200, description = "The same bytes were already stored (no-op)", body = UploadResponse),
        (status = 400, description = "`invalid_sha256`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no or unknown token", body = ErrorBody),
        (status = 403, description = "`forbidden`: token lacks the publish scope", body = ErrorBody),
        (status = 409, description = "`version_exists`: this name and version hold other bytes and were released (the message names the channel and sequence), or another upload is replacing them", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 422, description = "`hash_mismatch` or `invalid_pack`", body = ErrorBody),
        (status = 503, description = "`storage_unavailable`", body = ErrorBody),
    )
)]
pub async fn put_blob(
    State(state): State<SharedState>,
    Path(sha256): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<UploadResponse>), ApiError> {
    let token = state
        .settings
        .tokens
        .authorize(&headers, crate::auth::Scope::Publish)?;
    check_sha256(&sha256)?;
    let limit = state.settings.max_blob_bytes;
    // Uploads are buffered whole (the header can only be checked against the full length),
    // so only a few run at once.
    let _permit = state
        .uploads
        .acquire()
        .await
        .map_err(|_| ApiError::Internal("upload semaphore closed".to_string()))?;
    let (bytes, found) = read_body_sha256(&headers, body, limit).await?;
    let result = store_checked(&state, &token, sha256, found, bytes.clone()).await;
    free_off_thread(bytes);
    result
}

/// Bodies at least this large are freed on the blocking pool ([`free_off_thread`]).
const FREE_OFF_THREAD: usize = 1 << 20;

/// Drops what may be the last reference to a request body. Freeing 64 MiB hands 16,384 pages
/// back to the kernel, milliseconds of this thread's time, and the connections it serves
/// would wait for it as for a hash in one go. One body is freed at a time: uploads that end
/// together would otherwise take as many threads as there are uploads, and the serving
/// threads only a share of the cores while they run.
fn free_off_thread(bytes: Bytes) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if bytes.len() >= FREE_OFF_THREAD {
        tokio::task::spawn_blocking(move || {
            let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
            drop(bytes);
        });
    }
}

/// Checks an upload whose body hashes to `found` against the URL's `sha256` and the pack
/// header, and stores it.
async fn store_checked(
    state: &SharedState,
    token: &str,
    sha256: String,
    found: String,
    bytes: Bytes,
) -> Result<(StatusCode, Json<UploadResponse>), ApiError> {
    if found != sha256 {
        return Err(ApiError::HashMismatch {
            expected: sha256,
            found,
        });
    }
    let (header, _) =
        pack_format::read_header(&bytes, &state.settings.limits).map_err(ApiError::InvalidPack)?;
    let record_key = keys::pack_record(&header.name, &header.version.to_string());
    let record = PackRecord {
        name: header.name.clone(),
        version: header.version.clone(),
        schema: header.schema,
        sha256: sha256.clone(),
        size: bytes.len() as u64,
        uploaded_at: OffsetDateTime::now_utc(),
    };

    let result = store_upload(state, token, bytes, &record_key, &record).await;
    if let Ok((StatusCode::CREATED, _)) = &result {
        tracing::info!(
            token,
            pack = record.name,
            version = %record.version,
            sha256,
            size = record.size,
            "pack uploaded"
        );
    }
    result
}

/// How many times an upload looks again at a record that changed under it before it gives
/// up: each look means another upload created or replaced the record meanwhile.
const ROUNDS: usize = 4;

/// Stores an upload without a lock: the blob and a new record are written create-only, and
/// the record's create decides. A record that holds other bytes is replaced when no channel
/// document names its version ([`replace`]), else the upload gets `409 version_exists` saying
/// why. An upload that finds the record changed under it (created or replaced by another
/// upload) looks again; a refused upload's blob may stay, unreferenced and harmless: blobs
/// are content-addressed.
async fn store_upload(
    state: &SharedState,
    token: &str,
    bytes: Bytes,
    record_key: &str,
    record: &PackRecord,
) -> Result<(StatusCode, Json<UploadResponse>), ApiError> {
    let encoded = Bytes::from(
        serde_json::to_vec_pretty(record).map_err(|e| ApiError::Internal(e.to_string()))?,
    );
    let mut blob = PendingBlob {
        key: keys::blob(&record.sha256),
        bytes: Some(bytes),
    };
    for _ in 0..ROUNDS {
        let Some(found) = load_record(state, record_key).await? else {
            blob.store(&state.storage).await?;
            match state.storage.create(record_key, encoded.clone()).await? {
                Created::Created => return Ok(stored(record)),
                // Another upload created it first: look at what it holds.
                Created::AlreadyExists => continue,
            }
        };
        if found.record.sha256 == record.sha256 {
            return Ok((
                StatusCode::OK,
                Json(UploadResponse {
                    created: false,
                    pack: found.record,
                }),
            ));
        }
        let replaced = found.record.clone();
        let outcome = replace::replace(
            &state.storage,
            token,
            found,
            record,
            &mut blob,
            encoded.clone(),
        )
        .await?;
        match outcome {
            replace::Outcome::Replaced => {
                tracing::info!(
                    token,
                    pack = record.name,
                    version = %record.version,
                    sha256 = record.sha256,
                    replaced = replaced.sha256,
                    "an unreleased pack version was replaced"
                );
                return Ok(stored(record));
            }
            replace::Outcome::Held(held) => return Err(version_exists(&replaced, record, held)),
            replace::Outcome::Moved => {}
        }
    }
    // The record changed under every look: say what it holds now.
    let last = load_record(state, record_key)
        .await?
        .ok_or_else(|| ApiError::Internal(format!("{record_key} cannot be read")))?;
    Err(version_exists(
        &last.record,
        record,
        VersionHeld::Contended { rounds: ROUNDS },
    ))
}

/// An upload's blob, written once, and only when a record is about to point at it: blob
/// first, record second, so a record always points at a blob that is there. A blob that
/// exists already holds these bytes (its key is their hash).
struct PendingBlob {
    key: String,
    bytes: Option<Bytes>,
}

impl PendingBlob {
    async fn store(&mut self, storage: &Storage) -> Result<(), ApiError> {
        if let Some(bytes) = self.bytes.take() {
            storage.create(&self.key, bytes).await?;
        }
        Ok(())
    }
}

fn stored(record: &PackRecord) -> (StatusCode, Json<UploadResponse>) {
    (
        StatusCode::CREATED,
        Json(UploadResponse {
            created: true,
            pack: record.clone(),
        }),
    )
}

fn version_exists(existing: &PackRecord, upload: &PackRecord, held: VersionHeld) -> ApiError {
    ApiError::VersionExists {
        name: existing.name.clone(),
        version: existing.version.to_string(),
        existing: existing.sha256.clone(),
        found: upload.sha256.clone(),
        held: Box::new(held),
    }
}

async fn load_record(state: &SharedState, key: &str) -> Result<Option<Found>, ApiError> {
    let Some(stored) = state.storage.get(key).await? else {
        return Ok(None);
    };
    let record = serde_json::from_slice(&stored)
        .map_err(|e| ApiError::Internal(format!("stored record {key} is corrupt: {e}")))?;
    Ok(Some(Found {
        key: key.to_string(),
        bytes: stored,
        record,
    }))
}

/// Download a sealed pack.
///
/// Immutable and cacheable forever. Supports `If-None-Match` (304) and a single
/// `Range: bytes=…` (206, or 416 past the end); `If-Range` with the ETag is honoured.
#[utoipa::path(
    get,
    path = paths::BLOB_ROUTE,
    tag = "blobs",
    params(
        ("sha256" = String, Path, description = "Lowercase hex SHA-256"),
        ("Range" = Option<String>, Header, description = "One byte range, e.g. `bytes=0-1023`"),
        ("If-None-Match" = Option<String>, Header, description = "ETag from an earlier answer"),
    ),
    responses(
        (status = 200, description = "The sealed pack", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 206, description = "The requested range", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 304, description = "Not modified"),
        (status = 400, description = "`invalid_sha256`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 416, description = "`range_not_satisfiable`", body = ErrorBody),
    )
)]
pub async fn get_blob(
    State(state): State<SharedState>,
    Path(sha256): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    serve_blob(&state, &sha256, &headers, true).await
}

/// Size and headers of a sealed pack, without the body.
#[utoipa::path(
    head,
    path = paths::BLOB_ROUTE,
    tag = "blobs",
    params(("sha256" = String, Path, description = "Lowercase hex SHA-256")),
    responses(
        (status = 200, description = "Present; `Content-Length` is its size"),
        (status = 404, description = "Not uploaded"),
    )
)]
pub async fn head_blob(
    State(state): State<SharedState>,
    Path(sha256): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    serve_blob(&state, &sha256, &headers, false).await
}

async fn serve_blob(
    state: &SharedState,
    sha256: &str,
    headers: &HeaderMap,
    with_body: bool,
) -> Result<Response, ApiError> {
    state.settings.tokens.authorize_read(headers)?;
    check_sha256(sha256)?;
    let key = keys::blob(sha256);
    let not_found = || ApiError::NotFound {
        what: format!("blob {sha256}"),
    };
    let size = state.storage.size(&key).await?.ok_or_else(not_found)?;
    let tag = etag(sha256);
    let mut response_headers = HeaderMap::new();
    response_headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(IMMUTABLE));
    response_headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    response_headers.insert(header::ETAG, header_value(&tag)?);

    if if_none_match(header_str(headers, header::IF_NONE_MATCH), &tag) {
        return Ok((StatusCode::NOT_MODIFIED, response_headers).into_response());
    }
    let range_header = match header_str(headers, "if-range") {
        Some(validator) if validator.trim() != tag => None,
        Some(_) | None => header_str(headers, "range"),
    };
    let (status, range) = if with_body {
        match parse_range(range_header, size) {
            RangeRequest::Full => (StatusCode::OK, 0..size),
            RangeRequest::Partial(r) => (StatusCode::PARTIAL_CONTENT, r),
            RangeRequest::Unsatisfiable => return Err(ApiError::RangeNotSatisfiable { size }),
        }
    } else {
        (StatusCode::OK, 0..size)
    };
    response_headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    response_headers.insert(
        header::CONTENT_LENGTH,
        HeaderValue::from(range.end - range.start),
    );
    if status == StatusCode::PARTIAL_CONTENT {
        let value = format!(
            "bytes {}-{}/{size}",
            range.start,
            range.end.saturating_sub(1)
        );
        response_headers.insert(header::CONTENT_RANGE, header_value(&value)?);
    }
    if !with_body {
        return Ok((status, response_headers).into_response());
    }
    let slice = |bytes: Bytes| Body::from(bytes.slice(range.start as usize..range.end as usize));
    if let Some(bytes) = state.blobs.get(sha256, size) {
        return Ok((status, response_headers, slice(bytes)).into_response());
    }
    if let Some(_fill) = state.blobs.try_fill(size) {
        let bytes = state.storage.get(&key).await?.ok_or_else(not_found)?;
        if bytes.len() as u64 == size {
            state.blobs.put(sha256, bytes.clone());
            return Ok((status, response_headers, slice(bytes)).into_response());
        }
    }
    let get_range = (range.start != 0 || range.end != size).then_some(range);
    let result = state
        .storage
        .get_stream(&key, get_range)
        .await?
        .ok_or_else(not_found)?;
    // Too large to cache, or the cache is being filled: streamed in chunks (FILE_CHUNK on
    // disk), so a slow reader holds a chunk or two, never the whole blob.
    let body = Body::from_stream(Storage::into_chunks(result));
    Ok((status, response_headers, body).into_response())
}

fn header_value(text: &str) -> Result<HeaderValue, ApiError> {
    HeaderValue::from_str(text)
        .map_err(|e| ApiError::Internal(format!("header value {text:?}: {e}")))
}
