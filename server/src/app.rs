//! The router: every route, its OpenAPI description, and the middleware that bounds and
//! measures each request; and [`App`], the service each connection runs, which answers a
//! plain `GET` of a channel document from memory in front of the router.

use std::convert::Infallible;
use std::future::Ready;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::HttpBody;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use futures_util::future::Either;
use hyper::body::Incoming;
use hyper_util::service::{TowerToHyperService, TowerToHyperServiceFuture};
use pack_protocol::paths;
use tokio::sync::Semaphore;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::cache::BlobCache;
use crate::config::Settings;
use crate::error::ApiError;
use crate::fleet::Fleet;
use crate::live::{LiveChannels, Watched};
use crate::metrics::Metrics;
use crate::readiness::Readiness;
use crate::reports::ReportLimiter;
use crate::routes::{blobs, channels, fleet, ops, outcomes, packs};
use crate::state::{AppState, SharedState};
use crate::storage::Storage;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "packd",
        description = "Hosts sealed prompt packs (content-addressed blobs) and signed channel documents. \
                       Errors are `{\"error\": {\"code\": \"stable_code\", \"message\": \"…\"}}`."
    ),
    modifiers(&BearerAuth),
    tags(
        (name = "blobs", description = "Sealed packs by SHA-256"),
        (name = "packs", description = "Uploaded pack names and versions"),
        (name = "channels", description = "Signed channel documents"),
        (name = "fleet", description = "Distinct installs and failure reports"),
        (name = "outcomes", description = "Outcome counts per pack version and client release"),
        (name = "guard", description = "What the guard saw on each watched rollout, and what it did"),
        (name = "ops", description = "Health, readiness, metrics"),
    )
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// Every route, registered together with its OpenAPI path so the two cannot drift apart.
fn api_routes() -> OpenApiRouter<SharedState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(blobs::put_blob, blobs::get_blob, blobs::head_blob))
        .routes(routes!(packs::list_packs))
        .routes(routes!(packs::pack_versions))
        .routes(routes!(channels::list_channels))
        .routes(routes!(channels::publish, channels::get_channel))
        .routes(routes!(channels::get_signature))
        .routes(routes!(channels::history))
        .routes(routes!(channels::history_document))
        .routes(routes!(channels::history_signature))
        .routes(routes!(fleet::get_fleet))
        .routes(routes!(fleet::post_report))
        .routes(routes!(outcomes::post_outcomes, outcomes::get_outcomes))
        .routes(routes!(crate::guard::get_guard))
        .routes(routes!(ops::healthz))
        .routes(routes!(ops::readyz))
        .routes(routes!(ops::metrics))
        .routes(routes!(ops::openapi))
}

/// The OpenAPI description of every route.
pub fn openapi() -> utoipa::openapi::OpenApi {
    api_routes().split_for_parts().1
}

/// The application with its state, and the live channels (to end their watches at shutdown).
pub fn router(
    settings: Settings,
    storage: Storage,
) -> Result<(App, Arc<LiveChannels>), prometheus::Error> {
    let fleet = Arc::new(Fleet::new(settings.fleet.clone()));
    router_with_fleet(settings, storage, fleet)
}

/// The application, counting the fleet into `fleet` (which the caller flushes), and the live
/// channels.
pub fn router_with_fleet(
    settings: Settings,
    storage: Storage,
    fleet: Arc<Fleet>,
) -> Result<(App, Arc<LiveChannels>), prometheus::Error> {
    let (routes, api) = api_routes().split_for_parts();
    let metrics = Metrics::new()?;
    let live = Arc::new(LiveChannels::new(storage.clone(), &settings, &metrics)?);
    let state = Arc::new(AppState {
        report_limiter: ReportLimiter::new(
            "failure reports",
            settings.fleet.reports_per_install_per_hour,
            settings.fleet.reports_per_address_per_hour,
            settings.fleet.reports_per_second,
        ),
        outcome_limiter: ReportLimiter::new(
            "outcome reports",
            settings.fleet.reports_per_install_per_hour,
            settings.fleet.reports_per_address_per_hour,
            settings.fleet.reports_per_second,
        ),
        fleet,
        uploads: Semaphore::new(settings.max_concurrent_uploads),
        settings,
        readiness: Readiness::new(storage.clone()),
        storage,
        metrics,
        live: live.clone(),
        blobs: BlobCache::default(),
        openapi: serde_json::to_value(&api).unwrap_or_default(),
        guard_looks: crate::state::GuardLooks::default(),
    });
    // The guard looks only where it holds a key, and only inside a runtime (a router built
    // for a test outside one has no guard).
    if state.settings.guard.key.is_some()
        && let Ok(runtime) = tokio::runtime::Handle::try_current()
    {
        runtime.spawn(crate::guard::run(state.clone()));
    }
    let console = crate::console::router(state.clone());
    let router = routes
        .with_state(state.clone())
        .merge(console)
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), observe));
    Ok((App { router, state }, live))
}

/// What every connection serves: the router and its middleware, with one way around them. A
/// plain `GET` of a channel's live document (no query) that memory can answer, as almost
/// every client request is, is answered by `routes::channels::from_memory` without the
/// router, and counted and logged as the middleware counts and logs every request; it waits
/// for nothing, so it needs no timeout. Anything else, or anything about that request the
/// router's path would answer differently, goes through the router.
#[derive(Clone)]
pub struct App {
    router: axum::Router,
    state: SharedState,
}

impl App {
    /// `routes::channels::from_memory`'s answer, counted, if the request is a plain `GET` of a
    /// channel's document.
    fn answer_from_memory<B>(&self, request: &hyper::Request<B>) -> Option<Response> {
        if request.method() != Method::GET || request.uri().query().is_some() {
            return None;
        }
        let channel = request
            .uri()
            .path()
            .strip_prefix(paths::CHANNELS)?
            .strip_prefix('/')?;
        let start = Instant::now();
        let fetch = channels::FetchHeaders::from_map(request.headers());
        let channels::FromMemory::Answer(answer) =
            channels::from_memory(&self.state, channel, &fetch)
        else {
            return None;
        };
        let response = answer
            .into_response()
            .unwrap_or_else(IntoResponse::into_response);
        count(
            &self.state,
            paths::CHANNEL_ROUTE,
            "GET",
            &response,
            start.elapsed(),
        );
        Some(response)
    }

    /// What every request is answered with: the state of this node.
    pub(crate) fn state(&self) -> &SharedState {
        &self.state
    }
}

impl hyper::service::Service<hyper::Request<Incoming>> for App {
    type Response = Response;
    type Error = Infallible;
    type Future = Either<
        Ready<Result<Response, Infallible>>,
        TowerToHyperServiceFuture<axum::Router, hyper::Request<Incoming>>,
    >;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        match self.answer_from_memory(&request) {
            Some(response) => Either::Left(std::future::ready(Ok(response))),
            None => Either::Right(TowerToHyperService::new(self.router.clone()).call(request)),
        }
    }
}

/// Counts `response` to a `method` request on `route` in the request metrics, and logs it
/// (at debug level for reads).
fn count(state: &AppState, route: &str, method: &str, response: &Response, elapsed: Duration) {
    // Blobs carry an explicit Content-Length; other bodies know their exact size.
    let bytes = response
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .or_else(|| HttpBody::size_hint(response.body()).exact());
    count_answer(state, route, method, response.status(), bytes, elapsed);
}

/// [`count`] for an answer of `status` with a body of `bytes`, however it was written.
pub(crate) fn count_answer(
    state: &AppState,
    route: &str,
    method: &str,
    status: StatusCode,
    bytes: Option<u64>,
    elapsed: Duration,
) {
    state
        .metrics
        .request(route, method, status.as_str(), bytes, elapsed.as_secs_f64());
    let elapsed_ms = elapsed.as_millis() as u64;
    if method == "GET" || method == "HEAD" {
        tracing::debug!(
            method,
            route,
            status = status.as_u16(),
            elapsed_ms,
            "request"
        );
    } else {
        tracing::info!(
            method,
            route,
            status = status.as_u16(),
            elapsed_ms,
            "request"
        );
    }
}

/// The label watches are counted under in the request metrics: their time is waiting.
const WATCH_ROUTE: &str = "/v1/channels/{channel}?wait";

async fn not_found(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound {
        what: format!("route {method} {}", uri.path()),
    }
}

/// Bounds each request by the request timeout (body upload included; a download streams
/// after this returns; a watch gets its longest wait on top), then counts and logs it.
async fn observe(State(state): State<SharedState>, request: Request, next: Next) -> Response {
    // A clone of the matched path is a reference count, not a copy of the string.
    let matched = request.extensions().get::<MatchedPath>().cloned();
    let route = matched.as_ref().map_or("unmatched", MatchedPath::as_str);
    let method = match *request.method() {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::PUT => "PUT",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        _ => "OTHER",
    };
    let start = Instant::now();
    let mut timeout = state.settings.request_timeout;
    if route == paths::CHANNEL_ROUTE && method == "GET" {
        // The most a watch is held: the cap plus a sixteenth of stretch.
        let wait = state.settings.max_watch_wait;
        timeout += wait + wait / 16;
    }
    let response = match tokio::time::timeout(timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::Timeout {
            secs: timeout.as_secs(),
        }
        .into_response(),
    };
    let route = if response.extensions().get::<Watched>().is_some() {
        WATCH_ROUTE
    } else {
        route
    };
    count(&state, route, method, &response, start.elapsed());
    response
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use axum::http::StatusCode;
    use time::OffsetDateTime;

    use super::*;
    use crate::config::{ConfigFile, Overrides};
    use crate::model::{ChannelRecord, ChannelSummary};

    const DOCUMENT: &str = "{\"channel\":\"stable\"}";

    fn app(config: &str, dir: &Path) -> (App, Arc<LiveChannels>) {
        let file: ConfigFile = toml::from_str(config).unwrap();
        let overrides = Overrides {
            data_dir: Some(dir.to_path_buf()),
            ..Overrides::default()
        };
        let settings = Settings::from_file(file, Path::new(""), overrides).unwrap();
        router(settings, Storage::local(dir).unwrap()).unwrap()
    }

    /// `stable`'s document, in memory as if this node had just published it.
    fn publish(live: &LiveChannels) -> String {
        let sha256 = pack_format::sha256_hex(DOCUMENT.as_bytes());
        let now = OffsetDateTime::now_utc();
        let summary = ChannelSummary {
            channel: "stable".into(),
            pack: "core".into(),
            sequence: 7,
            sha256: sha256.clone(),
            key_id: "0123456789ABCDEF".into(),
            issued_at: now,
            expires_at: now + time::Duration::days(1),
            published_at: now,
            published_by: None,
        };
        let record = ChannelRecord {
            summary,
            document: DOCUMENT.into(),
            signature: String::new(),
        };
        live.published(Arc::new(record), Instant::now());
        format!("\"{sha256}\"")
    }

    fn request(method: Method, uri: &str, headers: &[(&str, &str)]) -> hyper::Request<()> {
        let mut request = hyper::Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap()
    }

    fn get(uri: &str, headers: &[(&str, &str)]) -> hyper::Request<()> {
        request(Method::GET, uri, headers)
    }

    fn header<'a>(response: &'a Response, name: &str) -> &'a str {
        response.headers()[name].to_str().unwrap()
    }

    #[tokio::test]
    async fn a_plain_get_of_a_document_in_memory_is_answered_and_counted_without_the_router() {
        let dir = tempfile::tempdir().unwrap();
        let (app, live) = app("", dir.path());
        let plain = get("/v1/channels/stable", &[]);
        assert!(
            app.answer_from_memory(&plain).is_none(),
            "nothing in memory yet: the router looks at storage"
        );
        let etag = publish(&live);

        let sent = app
            .answer_from_memory(&plain)
            .expect("answered from memory");
        assert_eq!(sent.status(), StatusCode::OK);
        assert_eq!(header(&sent, "etag"), etag);
        assert_eq!(header(&sent, "cache-control"), "no-cache");
        assert_eq!(header(&sent, "x-promptpack-sequence"), "7");
        assert_eq!(header(&sent, "content-type"), "application/json");
        let body = axum::body::to_bytes(sent.into_body(), 1 << 20)
            .await
            .unwrap();
        assert_eq!(body, DOCUMENT.as_bytes());

        let held = get("/v1/channels/stable", &[("if-none-match", &etag)]);
        let not_modified = app.answer_from_memory(&held).expect("answered from memory");
        assert_eq!(not_modified.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(header(&not_modified, "etag"), etag);
        assert_eq!(header(&not_modified, "x-promptpack-sequence"), "7");
        assert!(not_modified.headers().get("content-type").is_none());

        // Counted where the router's middleware counts a request to the same route.
        let metrics = app.state.metrics.render().unwrap();
        for status in ["200", "304"] {
            let line = format!(
                "packd_http_requests_total{{method=\"GET\",route=\"/v1/channels/{{channel}}\",status=\"{status}\"}} 1"
            );
            assert!(metrics.contains(&line), "{line} in\n{metrics}");
        }
        let bytes = format!(
            "packd_http_response_bytes_total{{route=\"/v1/channels/{{channel}}\"}} {}",
            DOCUMENT.len()
        );
        assert!(metrics.contains(&bytes), "{bytes} in\n{metrics}");
        assert!(
            metrics.contains(
                "packd_http_request_duration_seconds_count{route=\"/v1/channels/{channel}\"} 2"
            ),
            "{metrics}"
        );
    }

    #[tokio::test]
    async fn a_connection_answers_a_plain_get_around_the_router_and_the_rest_through_it() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let dir = tempfile::tempdir().unwrap();
        let (app, live) = app("", dir.path());
        publish(&live);
        // A router that knows no route (404 to everything): only the way around it answers 200.
        let app = App {
            router: axum::Router::new(),
            state: app.state,
        };
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let connection = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(server), app);
        tokio::spawn(connection);
        client
            .write_all(
                b"GET /v1/channels/stable HTTP/1.1\r\nhost: packd\r\n\r\n\
                  GET /v1/channels/stable?wait=1 HTTP/1.1\r\nhost: packd\r\nconnection: close\r\n\r\n",
            )
            .await
            .unwrap();
        let mut answers = String::new();
        client.read_to_string(&mut answers).await.unwrap();
        // The second status line follows the first answer's body on the same line.
        let statuses: Vec<&str> = answers
            .split("HTTP/1.1 ")
            .skip(1)
            .map(|answer| &answer[..3])
            .collect();
        assert_eq!(statuses, ["200", "404"], "{answers}");
        assert!(answers.contains(DOCUMENT), "{answers}");
    }

    #[tokio::test]
    async fn every_other_request_is_left_to_the_router() {
        let dir = tempfile::tempdir().unwrap();
        let (app, live) = app("", dir.path());
        let etag = publish(&live);
        let cases = [
            (get("/v1/channels/stable?wait=30", &[]), "a watch"),
            (
                get("/v1/channels/stable?after=7&wait=30", &[]),
                "a watch from a sequence",
            ),
            (get("/v1/channels/stable?", &[]), "an empty query"),
            (request(Method::HEAD, "/v1/channels/stable", &[]), "a HEAD"),
            (get("/v1/channels/stable/signature", &[]), "the signature"),
            (get("/v1/channels/stable/", &[]), "a trailing slash"),
            (
                get("/v1/channels/st%61ble", &[]),
                "an encoded name, which the router decodes",
            ),
            (
                get("/v1/channels/other", &[]),
                "a channel memory does not hold",
            ),
            (get("/v1/channels/", &[]), "no name"),
            (get("/v1/channels", &[]), "the list"),
            (get("/v1/channelsstable", &[]), "another path"),
            (
                get("/v1/channels/stable", &[("cache-control", "no-cache")]),
                "a request for what storage holds now",
            ),
            (
                get(
                    "/v1/channels/stable",
                    &[("if-none-match", &etag), ("cache-control", "max-age=0")],
                ),
                "a revalidation asking for storage",
            ),
        ];
        for (request, what) in cases {
            assert!(app.answer_from_memory(&request).is_none(), "{what}");
        }
        let metrics = app.state.metrics.render().unwrap();
        assert!(
            !metrics.contains("packd_http_requests_total{"),
            "nothing counted for requests left to the router: {metrics}"
        );
    }

    #[tokio::test]
    async fn a_private_deployment_answers_from_memory_only_a_reader_with_a_token() {
        let dir = tempfile::tempdir().unwrap();
        let token = "ppt_reader_token";
        let config = format!(
            "[[tokens]]\nname = \"reader\"\nsha256 = \"{}\"\nscopes = [\"read\"]\n",
            crate::auth::hash_token(token)
        );
        let (app, live) = app(&config, dir.path());
        publish(&live);
        for (headers, what) in [
            (vec![], "no token"),
            (vec![("authorization", "Bearer ppt_wrong")], "a wrong token"),
        ] {
            let request = get("/v1/channels/stable", &headers);
            assert!(
                app.answer_from_memory(&request).is_none(),
                "{what}: the router refuses it"
            );
        }
        let bearer = format!("Bearer {token}");
        let reader = get("/v1/channels/stable", &[("authorization", &bearer)]);
        assert_eq!(
            app.answer_from_memory(&reader).map(|r| r.status()),
            Some(StatusCode::OK)
        );
    }
}
