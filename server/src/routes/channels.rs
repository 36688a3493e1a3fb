//! `/v1/channels`: signed channel documents, the live one per channel and every one ever
//! published.
//!
//! A channel is its history: `history/{sequence}` objects written create-only, each a signed
//! document. Writing the next one *is* the publish (there is no lock and no second write that
//! could be lost): two publishers cannot both create one sequence, and a crash either
//! committed it or not. The live document is the highest committed sequence. Sequences are
//! contiguous (a publish must be exactly live + 1), so the live one is found cheaply: from
//! any committed sequence, walk forward while the next one exists. `head.json` is a hint
//! where to start walking, written after the create on a best-effort basis and never
//! trusted further than that. Finding the live document, and holding watches on it, is
//! [`crate::live`]'s.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use pack_format::{ChannelDocument, EntryTarget, VerifiedChannel};
use serde::Deserialize;
use time::OffsetDateTime;
use utoipa::IntoParams;

use pack_protocol::{headers, paths};

use crate::auth::Scope;
use crate::claims::{self, Claim, Purpose, Release, Taken};
use crate::error::{ApiError, ErrorBody};
use crate::live::{self, WaitEnd, Watched};
use crate::metrics::FetchResult;
use crate::model::{
    ChannelHistory, ChannelList, ChannelRecord, ChannelSummary, PackRecord, PublishRequest,
    PublishResponse, rfc3339,
};
use crate::range::if_none_match;
use crate::routes::{check_name, etag, header_str, read_body};
use crate::state::SharedState;
use crate::storage::{Created, keys};

/// Room for a document at its limit plus a signature, JSON-escaped.
fn publish_limit(state: &SharedState) -> u64 {
    let l = &state.settings.limits;
    (2 * l.max_channel_len + 2 * l.max_signature_len + 4096) as u64
}

/// Publish a signed channel document.
///
/// Body: `{"document": "<document text exactly as signed>", "signature": "<minisign signature text>"}`.
/// The signature must verify against one of the server's publisher keys, the document must
/// name this channel and not be expired, every pack it references must have been uploaded
/// (same pack name, version, SHA-256, size and schema), and its sequence must be the live
/// sequence + 1 (1 on a new channel). Re-publishing the live document is a no-op (200). Of
/// two publishers racing for one sequence exactly one gets 201; the other gets 409 and should
/// re-read the channel, sign the change as the next sequence and retry.
#[utoipa::path(
    put,
    path = paths::CHANNEL_ROUTE,
    tag = "channels",
    params(("channel" = String, Path, description = "Channel name")),
    request_body(content = PublishRequest, content_type = "application/json"),
    security(("bearer" = ["publish"])),
    responses(
        (status = 201, description = "Published: now live", body = PublishResponse),
        (status = 200, description = "This exact document is already live (no-op)", body = PublishResponse),
        (status = 400, description = "`invalid_name` or `invalid_body`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 409, description = "`stale_sequence` (not the live sequence + 1; `current_sequence` says which is live) or `sequence_taken` (another publisher just took it)", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 422, description = "`invalid_signature`, `invalid_document`, `expired`, `channel_mismatch`, `missing_blobs` or `pack_mismatch`", body = ErrorBody),
        (status = 503, description = "`publishing_disabled` or `storage_unavailable`", body = ErrorBody),
    )
)]
pub async fn publish(
    State(state): State<SharedState>,
    Path(channel): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<
    (
        StatusCode,
        [(header::HeaderName, HeaderValue); 1],
        Json<PublishResponse>,
    ),
    ApiError,
> {
    let token = state.settings.tokens.authorize(&headers, Scope::Publish)?;
    check_name("channel", &channel)?;
    let bytes = read_body(&headers, body, publish_limit(&state)).await?;
    let request: PublishRequest =
        serde_json::from_slice(&bytes).map_err(|e| ApiError::InvalidBody {
            reason: format!("expected {{\"document\": string, \"signature\": string}}: {e}"),
        })?;
    let (record, created) = publish_signed(
        &state,
        &channel,
        request.document,
        request.signature,
        &token,
    )
    .await?;
    let tag = etag(&record.summary.sha256);
    let location = HeaderValue::from_str(&format!("/v1/channels/{channel}"))
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok((
        if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        },
        [(header::LOCATION, location)],
        Json(PublishResponse {
            created,
            channel: record.summary,
            etag: tag,
        }),
    ))
}

/// Verifies a signed document as clients will (a guard document against the live one too),
/// checks the packs it names, and commits it as `channel`'s next sequence. `by` is who
/// published it (a token name, or `guard`). Whether it was new: an identical live document
/// is not published twice.
pub(crate) async fn publish_signed(
    state: &SharedState,
    channel: &str,
    document: String,
    signature: String,
    by: &str,
) -> Result<(ChannelRecord, bool), ApiError> {
    if state.settings.trusted_keys.is_empty() {
        return Err(ApiError::PublishingDisabled);
    }
    let verified = pack_format::channel::verify(
        document.as_bytes(),
        &signature,
        &state.settings.trusted_keys,
        OffsetDateTime::now_utc(),
        &state.settings.limits,
    )
    .map_err(ApiError::from_verify)?;
    if verified.document.channel != channel {
        return Err(ApiError::ChannelMismatch {
            path: channel.to_string(),
            document: verified.document.channel,
        });
    }
    if verified.base.is_some() {
        check_guarded(state, channel, &verified).await?;
    }
    let checked = check_packs(state, &verified).await?;
    let record = ChannelRecord::new(summary(&verified, by), document, signature);
    let created = commit(state, &record, &checked).await?;
    if created {
        tracing::info!(
            by,
            channel,
            sequence = record.summary.sequence,
            sha256 = record.summary.sha256,
            key_id = record.summary.key_id,
            "channel document published"
        );
    }
    Ok((record, created))
}

/// A guard document restricts what clients follow now, as clients will check: packd does not
/// publish one they would refuse.
async fn check_guarded(
    state: &SharedState,
    channel: &str,
    verified: &VerifiedChannel,
) -> Result<(), ApiError> {
    let Some(live) = state.live.check(channel).await? else {
        return Ok(());
    };
    let held = pack_format::channel::verify_ignoring_expiry(
        live.document.as_bytes(),
        &live.signature,
        &state.settings.trusted_keys,
        &state.settings.limits,
    )
    .map_err(|e| {
        ApiError::InvalidDocument(pack_format::FormatError::GuardOverreach {
            reason: format!(
                "the live document no longer verifies ({e}), so nothing can be checked against it"
            ),
        })
    })?;
    pack_format::guard::check_live(verified, &held.document).map_err(ApiError::from_verify)
}

fn summary(verified: &VerifiedChannel, token: &str) -> ChannelSummary {
    let doc = &verified.document;
    ChannelSummary {
        channel: doc.channel.clone(),
        pack: doc.pack.clone(),
        sequence: doc.sequence,
        sha256: verified.sha256.clone(),
        key_id: verified.key_id.clone(),
        issued_at: doc.issued_at,
        expires_at: doc.expires_at,
        published_at: OffsetDateTime::now_utc(),
        published_by: Some(token.to_string()),
    }
}

/// A pack version a document names, as its record was when the publish checked it.
#[derive(Debug)]
struct Checked {
    version: String,
    sha256: String,
    /// SHA-256 of the record's bytes as read: the record a release claims.
    record: String,
}

/// Every pack the document points at was uploaded as that pack, version, size and schema.
async fn check_packs(
    state: &SharedState,
    verified: &VerifiedChannel,
) -> Result<Vec<Checked>, ApiError> {
    let doc = &verified.document;
    let refs: BTreeSet<_> = doc
        .entries
        .iter()
        .filter_map(|e| match &e.target {
            EntryTarget::Pack(r) => {
                Some((r.version.to_string(), r.sha256.clone(), r.size, r.schema))
            }
            EntryTarget::Builtin => None,
        })
        .collect();
    let mut missing = Vec::new();
    let mut checked = Vec::new();
    for (version, sha256, size, schema) in refs {
        if state.storage.head(&keys::blob(&sha256)).await?.is_none() {
            missing.push(sha256);
            continue;
        }
        let record_key = keys::pack_record(&doc.pack, &version);
        let Some(stored) = state.storage.get(&record_key).await? else {
            return Err(ApiError::PackMismatch {
                reason: format!(
                    "blob {sha256} is on the server but no upload recorded it as pack {} {version}; upload it again",
                    doc.pack
                ),
            });
        };
        let record: PackRecord = serde_json::from_slice(&stored).map_err(|e| {
            ApiError::Internal(format!("stored record {record_key} is corrupt: {e}"))
        })?;
        if record.sha256 != sha256 {
            return Err(other_blob(&doc.pack, &version, &record.sha256, &sha256));
        }
        if record.size != size || record.schema != schema {
            return Err(ApiError::PackMismatch {
                reason: format!(
                    "pack {} {version}: uploaded size {} schema {}, the document says size {size} schema {schema}",
                    doc.pack, record.size, record.schema
                ),
            });
        }
        checked.push(Checked {
            version,
            sha256,
            record: pack_format::sha256_hex(&stored),
        });
    }
    if missing.is_empty() {
        Ok(checked)
    } else {
        Err(ApiError::MissingBlobs { missing })
    }
}

fn other_blob(pack: &str, version: &str, recorded: &str, named: &str) -> ApiError {
    ApiError::PackMismatch {
        reason: format!("pack {pack} {version} is blob {recorded}, the document says {named}"),
    }
}

/// Claims as released the record of every pack version `record`'s document names and the
/// live document (`live`) does not, each as `check_packs` read it. An upload that has not
/// claimed one of these records yet never will; one that has wins, and the document is
/// refused. Exactly one of the two, on disk and on S3: see `claims`. A version the live
/// document names was claimed when that document was published (or, published before
/// claims, is found released by every upload's look at the histories).
async fn release(
    state: &SharedState,
    record: &ChannelRecord,
    checked: &[Checked],
    live: Option<&ChannelRecord>,
) -> Result<(), ApiError> {
    let pack = &record.summary.pack;
    let live_names: BTreeSet<(String, String)> = live
        .and_then(|l| serde_json::from_str::<ChannelDocument>(&l.document).ok())
        .filter(|doc| &doc.pack == pack)
        .map(|doc| {
            doc.entries
                .iter()
                .filter_map(|e| match &e.target {
                    EntryTarget::Pack(r) => Some((r.version.to_string(), r.sha256.clone())),
                    EntryTarget::Builtin => None,
                })
                .collect()
        })
        .unwrap_or_default();
    for named in checked {
        if live_names.contains(&(named.version.clone(), named.sha256.clone())) {
            continue;
        }
        let claim = Claim {
            record: named.record.clone(),
            from: named.sha256.clone(),
            at: rfc3339(OffsetDateTime::now_utc()),
            by: record.summary.published_by.clone().unwrap_or_default(),
            purpose: Purpose::Release {
                release: Release {
                    channel: record.summary.channel.clone(),
                    sequence: record.summary.sequence,
                    document: record.summary.sha256.clone(),
                },
            },
        };
        let (key, claim) = match claims::take(&state.storage, pack, &named.version, &claim).await? {
            Taken::Ours => continue,
            Taken::Theirs { key, claim } => (key, claim),
        };
        match claim.purpose {
            // Another publish released this record (or is releasing it): it stays.
            Purpose::Release { .. } => {}
            Purpose::Replace { to } => {
                return Err(replaced(state, pack, named, &key, &to, &claim.at).await);
            }
        }
    }
    Ok(())
}

/// The refusal of a document naming a record that an upload claimed for replacement.
async fn replaced(
    state: &SharedState,
    pack: &str,
    named: &Checked,
    key: &str,
    to: &str,
    since: &str,
) -> ApiError {
    let record_key = keys::pack_record(pack, &named.version);
    let now = match state.storage.get(&record_key).await {
        Ok(Some(bytes)) => serde_json::from_slice::<PackRecord>(&bytes).ok(),
        Ok(None) | Err(_) => None,
    };
    match now {
        Some(record) if record.sha256 != named.sha256 => {
            other_blob(pack, &named.version, &record.sha256, &named.sha256)
        }
        Some(_) | None => ApiError::PackMismatch {
            reason: format!(
                "pack {pack} {} is being replaced by blob {to} (an upload claimed it at {since}), \
                 the document says {}: sign a document naming the new blob (if the upload \
                 stopped mid-way, remove {key} from the storage to keep the old one)",
                named.version, named.sha256
            ),
        },
    }
}

/// Commits `record` as the next sequence of its channel, once the pack records it names
/// (`checked`) are claimed as released. `Ok(true)`: created, now live; `Ok(false)`: this
/// exact document is already live.
async fn commit(
    state: &SharedState,
    record: &ChannelRecord,
    checked: &[Checked],
) -> Result<bool, ApiError> {
    let channel = &record.summary.channel;
    let sequence = record.summary.sequence;
    // Storage's answer, not memory's: the sequence check must see the latest commit.
    let live = state.live.check(channel).await?;
    let current = live.as_ref().map_or(0, |l| l.summary.sequence);
    if let Some(live) = &live
        && live.summary.sha256 == record.summary.sha256
    {
        return Ok(false);
    }
    if sequence != current.saturating_add(1) {
        return Err(ApiError::StaleSequence {
            found: sequence,
            current,
        });
    }
    // Only now, when nothing but a racing publisher can still stop this one: a claim taken
    // for a document that is then not committed holds its version all the same.
    release(state, record, checked, live.as_deref()).await?;
    let key = keys::history(channel, sequence);
    // Storage held nothing newer than the live document before this create.
    let before = Instant::now();
    match state.storage.create(&key, encode(record)?).await? {
        Created::Created => {}
        Created::AlreadyExists => {
            // The same document may be there already: an identical racer, or our own PUT
            // retried by the store client after a lost response. Either way it is live now.
            let existing = live::load_record(&state.storage, &key).await?;
            if existing.is_some_and(|e| e.summary.sha256 == record.summary.sha256) {
                return Ok(false);
            }
            return Err(ApiError::SequenceTaken { sequence });
        }
    }
    // Committed: from here on every reader sees it (they check for live + 1). The hint only
    // saves a later cold reader some steps, so a failure to write it is not the publisher's
    // failure. A slow writer may even move it back behind a newer publish; readers walk
    // forward from wherever it points.
    if let Err(err) = state
        .storage
        .put(&keys::head(channel), encode(record)?)
        .await
    {
        tracing::warn!(channel, sequence, %err, "could not update the head hint; the publish stands");
    }
    state.live.published(Arc::new(record.clone()), before);
    Ok(true)
}

fn encode(record: &ChannelRecord) -> Result<Bytes, ApiError> {
    serde_json::to_vec(record)
        .map(Bytes::from)
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// Whether a reader asked for storage's current answer (`Cache-Control: no-cache`, as packer
/// sends) rather than one from memory, which may be up to a poll interval old.
fn wants_storage(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(asks_storage)
}

/// Whether one `Cache-Control` value names `no-cache` or `max-age=0`.
fn asks_storage(value: &str) -> bool {
    value
        .split(',')
        .any(|d| matches!(d.trim(), "no-cache" | "max-age=0"))
}

/// What a fetch of a channel's live document reads from the request beyond its path: its
/// condition, and what the client says of itself. Each value is the header's first, when it
/// is visible ASCII (as [`HeaderMap::get`] and `to_str` give it).
struct FetchHeaders<'a> {
    if_none_match: Option<&'a str>,
    client_version: Option<&'a str>,
    installed: Option<&'a str>,
    install: Option<&'a str>,
}

impl<'a> FetchHeaders<'a> {
    fn from_map(incoming: &'a HeaderMap) -> Self {
        // The names every client sends, each looked up without parsing it.
        const CLIENT_VERSION: HeaderName = HeaderName::from_static(headers::CLIENT_VERSION);
        const INSTALLED_PACK: HeaderName = HeaderName::from_static(headers::INSTALLED_PACK);
        const INSTALL: HeaderName = HeaderName::from_static(headers::INSTALL);
        FetchHeaders {
            if_none_match: header_str(incoming, header::IF_NONE_MATCH),
            client_version: header_str(incoming, CLIENT_VERSION),
            installed: header_str(incoming, INSTALLED_PACK),
            install: header_str(incoming, INSTALL),
        }
    }
}

/// The live record of `channel`: from memory (at most a poll interval old), or from storage
/// when `headers` ask for it; `404` when nothing was published on it.
pub(crate) async fn live(
    state: &SharedState,
    channel: &str,
    headers: &HeaderMap,
) -> Result<Arc<ChannelRecord>, ApiError> {
    check_name("channel", channel)?;
    let found = if wants_storage(headers) {
        state.live.check(channel).await?
    } else {
        state.live.find(channel).await?
    };
    found.ok_or_else(|| ApiError::NotFound {
        what: format!("channel {channel}"),
    })
}

/// Builds a `200` (or `304` when `If-None-Match` matches) for a document or signature.
fn revalidated(
    headers: &HeaderMap,
    body: &str,
    tag: &str,
    content_type: &'static str,
    summary: &ChannelSummary,
) -> Result<Response, ApiError> {
    let unchanged = if_none_match(header_str(headers, header::IF_NONE_MATCH), tag);
    let tag = HeaderValue::from_str(tag).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(answer(unchanged, body, tag, content_type, summary))
}

/// Builds a `304` when the client holds this document (`unchanged`), else a `200`.
fn answer(
    unchanged: bool,
    body: &str,
    tag: HeaderValue,
    content_type: &'static str,
    summary: &ChannelSummary,
) -> Response {
    const SEQUENCE: HeaderName = HeaderName::from_static(headers::SEQUENCE);
    // The headers go straight into the response's own map (no second map to merge).
    let mut response = if unchanged {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (StatusCode::OK, body.to_owned()).into_response()
    };
    let out = response.headers_mut();
    out.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    out.insert(header::ETAG, tag);
    out.insert(SEQUENCE, HeaderValue::from(summary.sequence));
    if !unchanged {
        out.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    response
}

/// The live channel document, byte for byte as signed; with `wait`, a watch.
///
/// Strong ETag (the document's SHA-256 in quotes); `If-None-Match` → 304;
/// `Cache-Control: no-cache`; `X-Promptpack-Sequence` carries the sequence. Clients may send
/// `X-Promptpack-Client-Version` and `X-Promptpack-Installed-Pack` for the metrics. Fetch the
/// matching signature from `/v1/channels/{channel}/history/{sequence}/signature` to be immune
/// to a publish landing between the two requests.
///
/// A watch (`?wait=N&after=S`, `S` the sequence of the document the client holds) is held
/// while the live sequence is `S`, until it changes (200, the new document) or the wait is
/// over (304); a live sequence other than `S` is answered at once (200). Without `after`
/// (older clients) the watch is held while `If-None-Match` matches the live document, and
/// ends as a conditional GET. The wait is capped by the server's `max_watch_secs` and
/// stretched by up to a sixteenth; `X-Promptpack-Wait` says the seconds granted. Every
/// answer to a request naming `wait` is `Cache-Control: no-store`: a cache that kept one
/// would answer the next watch at once. The answer is only a hint: the client verifies the
/// document as on any refresh.
#[utoipa::path(
    get,
    path = paths::CHANNEL_ROUTE,
    tag = "channels",
    params(
        ("channel" = String, Path, description = "Channel name"),
        ("wait" = Option<u64>, Query, description = "Seconds to hold the request while the client holds the live document (a watch); capped by the server. Every answer is `Cache-Control: no-store`"),
        ("after" = Option<u64>, Query, description = "With `wait`: the sequence of the document the client holds; the watch is held while it is the live sequence. Without it the watch holds by `If-None-Match`"),
        ("If-None-Match" = Option<String>, Header, description = "ETag from an earlier answer"),
        ("X-Promptpack-Client-Version" = Option<String>, Header, description = "Client version, for metrics"),
        ("X-Promptpack-Installed-Pack" = Option<String>, Header, description = "SHA-256 of the installed sealed pack, or `builtin`: metrics and the fleet view"),
        ("X-Promptpack-Install" = Option<String>, Header, description = "The client's install hash (32 hex digits): counted once per install in the fleet view"),
    ),
    responses(
        (status = 200, description = "The document (for a watch: the live document is not the one held, or changed)", content_type = "application/json", body = String,
            headers(("X-Promptpack-Wait" = u64, description = "On watch answers: the seconds of waiting granted"))),
        (status = 304, description = "Not modified (for a watch: nothing changed within the wait)",
            headers(("X-Promptpack-Wait" = u64, description = "On watch answers: the seconds of waiting granted"))),
        (status = 400, description = "`invalid_name`, `invalid_wait` or `invalid_after`", body = ErrorBody),
        (status = 404, description = "`not_found`: nothing published on this channel", body = ErrorBody),
        (status = 503, description = "`watchers_full` (with `Retry-After`): this node holds its limit of watches", body = ErrorBody),
    )
)]
pub async fn get_channel(
    State(state): State<SharedState>,
    Path(channel): Path<String>,
    RawQuery(query): RawQuery,
    // The request itself rather than a `HeaderMap` extractor, which would copy the headers:
    // this is the route every client revalidates on.
    request: Request,
) -> Response {
    let watch = live::names_wait(query.as_deref());
    let mut response = channel_answer(&state, &channel, query.as_deref(), request.headers())
        .await
        .unwrap_or_else(IntoResponse::into_response);
    if watch {
        // A watch's answer is about one client and one moment. Kept by a proxy or CDN, it
        // would answer the next watch at once instead of holding it.
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// [`get_channel`]'s answer, before a watch's `Cache-Control`.
async fn channel_answer(
    state: &SharedState,
    channel: &str,
    query: Option<&str>,
    incoming: &HeaderMap,
) -> Result<Response, ApiError> {
    state.settings.tokens.authorize_read(incoming)?;
    let wait = live::requested_wait(query, state.settings.max_watch_wait)?;
    let after = live::requested_after(query)?;
    let mut record = live(state, channel, incoming).await?;
    // What the client holds: the sequence in the URL, which no proxy drops, or (an older
    // client) the document's ETag in `If-None-Match`.
    let holds = |record: &ChannelRecord| match after {
        Some(after) => record.summary.sequence == after,
        None => sent_etag_of(record, header_str(incoming, header::IF_NONE_MATCH)),
    };
    if let Some(granted) = wait
        && holds(&record)
    {
        let seen = record.summary.sequence;
        let end = state
            .live
            .wait(channel, seen, live::stretch(granted))
            .await?;
        match end {
            WaitEnd::Changed | WaitEnd::TimedOut => record = live(state, channel, incoming).await?,
            // Answered from memory: storage may be going away with the node.
            WaitEnd::Closing => {}
        }
    }
    // A watch from a sequence ends in `304` while that is still live, whatever a proxy did
    // to `If-None-Match`.
    let unchanged = (wait.is_some() && after.is_some()).then(|| holds(&record));
    let fetch = FetchHeaders::from_map(incoming);
    let mut response = counted_answer(state, channel, &record, unchanged, &fetch)?;
    if let Some(granted) = wait {
        response
            .headers_mut()
            .insert(WAIT, HeaderValue::from(granted.as_secs()));
        response.extensions_mut().insert(Watched);
    }
    Ok(response)
}

/// The content type of a channel document.
const DOCUMENT_TYPE: &str = "application/json";

/// The header a watch's answer says its granted wait in.
const WAIT: HeaderName = HeaderName::from_static(headers::WAIT);

/// The `200` or `304` for a client fetching `record`, counted in the metrics and the fleet
/// view. `unchanged` says whether the client holds it; `None` asks its `If-None-Match`.
fn counted_answer(
    state: &SharedState,
    channel: &str,
    record: &ChannelRecord,
    unchanged: Option<bool>,
    fetch: &FetchHeaders<'_>,
) -> Result<Response, ApiError> {
    let tag = record.etag().ok_or_else(|| {
        ApiError::Internal(format!(
            "channel {channel}: the stored record's sha256 cannot be an ETag"
        ))
    })?;
    let unchanged = unchanged.unwrap_or_else(|| sent_etag_of(record, fetch.if_none_match));
    let response = answer(
        unchanged,
        &record.document,
        tag.clone(),
        DOCUMENT_TYPE,
        &record.summary,
    );
    count_fetch(state, channel, unchanged, fetch);
    Ok(response)
}

/// Whether an `If-None-Match` value (`sent`) names `record`'s ETag; a record without one
/// is held by no client.
fn sent_etag_of(record: &ChannelRecord, sent: Option<&str>) -> bool {
    record
        .etag()
        .and_then(|tag| tag.to_str().ok())
        .is_some_and(|tag| if_none_match(sent, tag))
}

/// Counts a fetch of `channel`'s document in the metrics and the fleet view.
fn count_fetch(state: &SharedState, channel: &str, unchanged: bool, fetch: &FetchHeaders<'_>) {
    let result = if unchanged {
        FetchResult::NotModified
    } else {
        FetchResult::Sent
    };
    state
        .metrics
        .channel_fetch(channel, result, fetch.client_version, fetch.installed);
    // The fleet view counts installs only: no clock read for a request that names none.
    if let Some(install) = fetch.install {
        state.fleet.record_fetch(
            channel,
            fetch.client_version,
            fetch.installed,
            Some(install),
            OffsetDateTime::now_utc(),
        );
    }
}

/// The minisign signature of the live channel document.
#[utoipa::path(
    get,
    path = paths::CHANNEL_SIGNATURE_ROUTE,
    tag = "channels",
    params(("channel" = String, Path, description = "Channel name")),
    responses(
        (status = 200, description = "The minisign signature file text", content_type = "text/plain", body = String),
        (status = 304, description = "Not modified"),
        (status = 404, description = "`not_found`", body = ErrorBody),
    )
)]
pub async fn get_signature(
    State(state): State<SharedState>,
    Path(channel): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    state.settings.tokens.authorize_read(&headers)?;
    let record = live(&state, &channel, &headers).await?;
    let tag = etag(&pack_format::sha256_hex(record.signature.as_bytes()));
    revalidated(
        &headers,
        &record.signature,
        &tag,
        "text/plain; charset=utf-8",
        &record.summary,
    )
}

/// The live document of every channel.
#[utoipa::path(
    get,
    path = paths::CHANNELS,
    tag = "channels",
    responses((status = 200, description = "Channels, sorted by name", body = ChannelList))
)]
pub async fn list_channels(
    State(state): State<SharedState>,
    headers: HeaderMap,
) -> Result<Json<ChannelList>, ApiError> {
    state.settings.tokens.authorize_read(&headers)?;
    let mut names = state.storage.list_dirs(keys::CHANNELS).await?;
    names.sort();
    let mut channels = Vec::with_capacity(names.len());
    for name in names {
        // A directory name that is no valid channel name is nothing packd wrote.
        if check_name("channel", &name).is_err() {
            continue;
        }
        let found = if wants_storage(&headers) {
            state.live.check(&name).await?
        } else {
            state.live.find(&name).await?
        };
        if let Some(record) = found {
            channels.push(record.summary.clone());
        }
    }
    Ok(Json(ChannelList { channels }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// Return only the newest `limit` documents.
    pub limit: Option<usize>,
}

/// Every document ever published on a channel, oldest first.
#[utoipa::path(
    get,
    path = paths::HISTORY_ROUTE,
    tag = "channels",
    params(("channel" = String, Path, description = "Channel name"), HistoryQuery),
    responses(
        (status = 200, description = "The history", body = ChannelHistory),
        (status = 404, description = "`not_found`: nothing published on this channel", body = ErrorBody),
    )
)]
pub async fn history(
    State(state): State<SharedState>,
    Path(channel): Path<String>,
    Query(query): Query<HistoryQuery>,
    headers: HeaderMap,
) -> Result<Json<ChannelHistory>, ApiError> {
    state.settings.tokens.authorize_read(&headers)?;
    check_name("channel", &channel)?;
    let sequences = live::history_sequences(&state.storage, &channel).await?;
    if sequences.is_empty() {
        return Err(ApiError::NotFound {
            what: format!("channel {channel}"),
        });
    }
    let total = sequences.len();
    let skip = total.saturating_sub(query.limit.unwrap_or(total));
    let entries: Vec<ChannelSummary> =
        futures_util::stream::iter(sequences[skip..].iter().copied())
            .map(|sequence| {
                let state = state.clone();
                let key = keys::history(&channel, sequence);
                async move {
                    live::load_record(&state.storage, &key)
                        .await?
                        .map(|r| r.summary)
                        .ok_or_else(|| ApiError::Internal(format!("{key} vanished")))
                }
            })
            .buffered(8)
            .try_collect()
            .await?;
    // Listed from storage just now: the live sequence too.
    let live_sequence = state
        .live
        .check(&channel)
        .await?
        .map(|r| r.summary.sequence);
    Ok(Json(ChannelHistory {
        channel,
        live_sequence,
        total,
        entries,
    }))
}

async fn historic(
    state: &SharedState,
    channel: &str,
    sequence: u64,
) -> Result<ChannelRecord, ApiError> {
    check_name("channel", channel)?;
    live::load_committed(&state.storage, channel, sequence)
        .await?
        .ok_or_else(|| ApiError::NotFound {
            what: format!("channel {channel} sequence {sequence}"),
        })
}

/// One published document, byte for byte as signed.
#[utoipa::path(
    get,
    path = paths::HISTORY_DOCUMENT_ROUTE,
    tag = "channels",
    params(("channel" = String, Path, description = "Channel name"), ("sequence" = u64, Path, description = "Sequence")),
    responses(
        (status = 200, description = "The document", content_type = "application/json", body = String),
        (status = 304, description = "Not modified"),
        (status = 404, description = "`not_found`", body = ErrorBody),
    )
)]
pub async fn history_document(
    State(state): State<SharedState>,
    Path((channel, sequence)): Path<(String, u64)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    state.settings.tokens.authorize_read(&headers)?;
    let record = historic(&state, &channel, sequence).await?;
    let tag = etag(&record.summary.sha256);
    revalidated(
        &headers,
        &record.document,
        &tag,
        "application/json",
        &record.summary,
    )
}

/// The signature of one published document.
#[utoipa::path(
    get,
    path = paths::HISTORY_SIGNATURE_ROUTE,
    tag = "channels",
    params(("channel" = String, Path, description = "Channel name"), ("sequence" = u64, Path, description = "Sequence")),
    responses(
        (status = 200, description = "The minisign signature file text", content_type = "text/plain", body = String),
        (status = 304, description = "Not modified"),
        (status = 404, description = "`not_found`", body = ErrorBody),
    )
)]
pub async fn history_signature(
    State(state): State<SharedState>,
    Path((channel, sequence)): Path<(String, u64)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    state.settings.tokens.authorize_read(&headers)?;
    let record = historic(&state, &channel, sequence).await?;
    let tag = etag(&pack_format::sha256_hex(record.signature.as_bytes()));
    revalidated(
        &headers,
        &record.signature,
        &tag,
        "text/plain; charset=utf-8",
        &record.summary,
    )
}
