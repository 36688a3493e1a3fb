//! `/v1/blobs/{sha256}`: sealed packs, addressed by the SHA-256 of their bytes.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use time::OffsetDateTime;

use crate::error::{ApiError, ErrorBody};
use crate::model::{PackRecord, UploadResponse, rfc3339};
use crate::range::{RangeRequest, if_none_match, parse_range};
use crate::routes::{check_sha256, etag, header_str, read_body};
use crate::state::SharedState;
use crate::storage::{Created, Storage, keys};

const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// Upload a sealed pack.
///
/// The body is the sealed pack's bytes. The server recomputes the SHA-256, parses the pack
/// header (name, version, schema) without decrypting, and records `name` + `version` →
/// `sha256` create-only: the same name and version can never point at different bytes.
#[utoipa::path(
    put,
    path = "/v1/blobs/{sha256}",
    tag = "blobs",
    params(("sha256" = String, Path, description = "Lowercase hex SHA-256 of the body")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "The sealed pack"),
    security(("bearer" = ["publish"])),
    responses(
        (status = 201, description = "Stored", body = UploadResponse),
        (status = 200, description = "The same bytes were already stored (no-op)", body = UploadResponse),
        (status = 400, description = "`invalid_sha256`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no or unknown token", body = ErrorBody),
        (status = 403, description = "`forbidden`: token lacks the publish scope", body = ErrorBody),
        (status = 409, description = "`version_exists`: this name and version hold other bytes", body = ErrorBody),
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
    let bytes = read_body(&headers, body, limit).await?;
    let found = pack_format::sha256_hex(&bytes);
    if found != sha256 {
        return Err(ApiError::HashMismatch {
            expected: sha256,
            found,
        });
    }
    let (header, _) =
        pack_format::read_header(&bytes, &state.settings.limits).map_err(ApiError::InvalidPack)?;
    let version = header.version.to_string();
    let record_key = keys::pack_record(&header.name, &version);
    let record = PackRecord {
        name: header.name.clone(),
        version: version.clone(),
        schema: header.schema,
        sha256: sha256.clone(),
        size: bytes.len() as u64,
        uploaded_at: rfc3339(OffsetDateTime::now_utc()),
    };

    let result = store_upload(&state, &sha256, bytes, &record_key, &record).await;
    if let Ok((StatusCode::CREATED, _)) = &result {
        tracing::info!(
            token,
            pack = record.name,
            version,
            sha256,
            size = record.size,
            "pack uploaded"
        );
    }
    result
}

/// Stores an upload without a lock: both writes are create-only, and the record's create
/// decides. Of two uploads of one name and version with different bytes exactly one record
/// is created; the other upload gets `409 version_exists` (its blob stays, unreferenced and
/// harmless: blobs are content-addressed).
async fn store_upload(
    state: &SharedState,
    sha256: &str,
    bytes: Bytes,
    record_key: &str,
    record: &PackRecord,
) -> Result<(StatusCode, Json<UploadResponse>), ApiError> {
    if let Some(existing) = load_record(state, record_key).await? {
        return same_or_conflict(existing, record);
    }
    // Blob first, record second: a record always points at a blob that is there. A blob that
    // exists already holds these bytes (its key is their hash).
    state.storage.create(&keys::blob(sha256), bytes).await?;
    let json = serde_json::to_vec_pretty(record).map_err(|e| ApiError::Internal(e.to_string()))?;
    match state.storage.create(record_key, Bytes::from(json)).await? {
        Created::Created => Ok((
            StatusCode::CREATED,
            Json(UploadResponse {
                created: true,
                pack: record.clone(),
            }),
        )),
        Created::AlreadyExists => match load_record(state, record_key).await? {
            Some(existing) => same_or_conflict(existing, record),
            None => Err(ApiError::Internal(format!(
                "{record_key} exists but cannot be read"
            ))),
        },
    }
}

async fn load_record(state: &SharedState, key: &str) -> Result<Option<PackRecord>, ApiError> {
    let Some(stored) = state.storage.get(key).await? else {
        return Ok(None);
    };
    serde_json::from_slice(&stored)
        .map(Some)
        .map_err(|e| ApiError::Internal(format!("stored record {key} is corrupt: {e}")))
}

fn same_or_conflict(
    existing: PackRecord,
    upload: &PackRecord,
) -> Result<(StatusCode, Json<UploadResponse>), ApiError> {
    if existing.sha256 == upload.sha256 {
        return Ok((
            StatusCode::OK,
            Json(UploadResponse {
                created: false,
                pack: existing,
            }),
        ));
    }
    Err(ApiError::VersionExists {
        name: existing.name,
        version: existing.version,
        existing: existing.sha256,
        found: upload.sha256.clone(),
    })
}

/// Download a sealed pack.
///
/// Immutable and cacheable forever. Supports `If-None-Match` (304) and a single
/// `Range: bytes=…` (206, or 416 past the end); `If-Range` with the ETag is honoured.
#[utoipa::path(
    get,
    path = "/v1/blobs/{sha256}",
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
    path = "/v1/blobs/{sha256}",
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

    if if_none_match(header_str(headers, "if-none-match"), &tag) {
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
