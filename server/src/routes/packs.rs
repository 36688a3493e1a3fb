//! `/v1/packs`: which packs and versions were uploaded.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use futures_util::{StreamExt, TryStreamExt};
use pack_protocol::paths;

use crate::error::{ApiError, ErrorBody};
use crate::model::{PackList, PackRecord, PackVersions};
use crate::routes::check_name;
use crate::state::SharedState;
use crate::storage::keys;

async fn records(state: &SharedState, prefix: &str) -> Result<Vec<PackRecord>, ApiError> {
    let listing = state.storage.list(prefix).await?;
    futures_util::stream::iter(listing)
        .filter(|meta| std::future::ready(meta.location.as_ref().ends_with(".json")))
        .map(|meta| {
            let state = state.clone();
            async move {
                let key = meta.location.to_string();
                let stored = state
                    .storage
                    .get(&key)
                    .await?
                    .ok_or_else(|| ApiError::Internal(format!("{key} vanished")))?;
                serde_json::from_slice::<PackRecord>(&stored)
                    .map_err(|e| ApiError::Internal(format!("stored record {key} is corrupt: {e}")))
            }
        })
        .buffered(8)
        .try_collect()
        .await
}

fn group(records: Vec<PackRecord>) -> Vec<PackVersions> {
    let mut by_name: BTreeMap<String, Vec<PackRecord>> = BTreeMap::new();
    for record in records {
        by_name.entry(record.name.clone()).or_default().push(record);
    }
    by_name
        .into_iter()
        .map(|(name, mut versions)| {
            versions.sort_by(|a, b| a.version.cmp(&b.version));
            PackVersions { name, versions }
        })
        .collect()
}

/// Every uploaded pack with its versions.
#[utoipa::path(
    get,
    path = paths::PACKS,
    tag = "packs",
    responses((status = 200, description = "Packs by name, versions oldest first", body = PackList))
)]
pub async fn list_packs(
    State(state): State<SharedState>,
    headers: HeaderMap,
) -> Result<Json<PackList>, ApiError> {
    state.settings.tokens.authorize_read(&headers)?;
    Ok(Json(PackList {
        packs: group(records(&state, keys::PACKS).await?),
    }))
}

/// Every uploaded version of one pack.
#[utoipa::path(
    get,
    path = paths::PACK_ROUTE,
    tag = "packs",
    params(("name" = String, Path, description = "Pack name")),
    responses(
        (status = 200, description = "Versions oldest first", body = PackVersions),
        (status = 404, description = "`not_found`: no version uploaded", body = ErrorBody),
    )
)]
pub async fn pack_versions(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<PackVersions>, ApiError> {
    state.settings.tokens.authorize_read(&headers)?;
    check_name("pack", &name)?;
    let prefix = format!("{}/{name}", keys::PACKS);
    group(records(&state, &prefix).await?)
        .into_iter()
        .next()
        .map(Json)
        .ok_or(ApiError::NotFound {
            what: format!("pack {name}"),
        })
}
