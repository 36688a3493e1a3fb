//! The console's pages: each handler checks who is looking, loads what its page shows and
//! renders it; a failure becomes an error page with the API's status.

mod channel;
mod history;
mod overview;
mod packs;
mod rollouts;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use maud::Markup;
use serde::Deserialize;

use crate::error::ApiError;

use super::access::{Viewer, viewer};
use super::{ConsoleState, error_page, html_response};

#[derive(Debug, Default, Deserialize)]
pub struct PageQuery {
    /// Overview: 1-based page of channels.
    page: Option<usize>,
    /// History: show sequences below this one.
    before: Option<u64>,
    /// Sequence page: compare with this sequence instead of the one before.
    with: Option<u64>,
}

/// Runs one page: who is looking, then `render`; errors become pages.
async fn run<F>(
    state: &ConsoleState,
    headers: &HeaderMap,
    uri: &Uri,
    query: Result<Query<PageQuery>, QueryRejection>,
    render: impl FnOnce(Viewer, PageQuery) -> F,
) -> Response
where
    F: Future<Output = Result<Markup, ApiError>>,
{
    let here = uri
        .path_and_query()
        .map_or_else(|| uri.path().to_string(), |pq| pq.as_str().to_string());
    let viewer = match viewer(state, headers, &here) {
        Ok(viewer) => viewer,
        Err(response) => return *response,
    };
    let query = match query {
        Ok(Query(query)) => query,
        Err(rejection) => {
            let error = ApiError::InvalidBody {
                reason: format!("query: {rejection}"),
            };
            return error_page(Some(&viewer), &error);
        }
    };
    let shown = viewer.clone();
    match render(viewer, query).await {
        Ok(markup) => html_response(StatusCode::OK, markup),
        Err(error) => error_page(Some(&shown), &error),
    }
}

pub async fn overview(
    State(state): State<ConsoleState>,
    uri: Uri,
    headers: HeaderMap,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Response {
    run(&state, &headers, &uri, query, |viewer, query| {
        overview::render(&state, viewer, query.page)
    })
    .await
}

pub async fn packs(
    State(state): State<ConsoleState>,
    uri: Uri,
    headers: HeaderMap,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Response {
    run(&state, &headers, &uri, query, |viewer, _| {
        packs::render(&state, viewer)
    })
    .await
}

pub async fn channel(
    State(state): State<ConsoleState>,
    Path(channel): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Response {
    run(&state, &headers, &uri, query, |viewer, _| {
        channel::render(&state, viewer, &channel)
    })
    .await
}

pub async fn history(
    State(state): State<ConsoleState>,
    Path(channel): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Response {
    run(&state, &headers, &uri, query, |viewer, query| {
        history::render_page(&state, viewer, &channel, query.before)
    })
    .await
}

pub async fn sequence(
    State(state): State<ConsoleState>,
    Path((channel, sequence)): Path<(String, u64)>,
    uri: Uri,
    headers: HeaderMap,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Response {
    run(&state, &headers, &uri, query, |viewer, query| {
        history::render_sequence(&state, viewer, &channel, sequence, query.with)
    })
    .await
}
