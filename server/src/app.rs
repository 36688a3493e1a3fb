//! The router: every route, its OpenAPI description, and the middleware that bounds and
//! measures each request.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::HttpBody;
use axum::extract::{MatchedPath, Request};
use axum::http::{Method, header};
use axum::response::{IntoResponse, Response};
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

/// The router with its state, and the live channels (to end their watches at shutdown).
pub fn router(
    settings: Settings,
    storage: Storage,
) -> Result<(axum::Router, Arc<LiveChannels>), prometheus::Error> {
    let fleet = Arc::new(Fleet::new(settings.fleet.clone()));
    router_with_fleet(settings, storage, fleet)
}

/// The router, counting the fleet into `fleet` (which the caller flushes), and the live
/// channels.
pub fn router_with_fleet(
    settings: Settings,
    storage: Storage,
    fleet: Arc<Fleet>,
) -> Result<(axum::Router, Arc<LiveChannels>), prometheus::Error> {
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
        .layer(ObserveLayer(state.clone()));
    Ok((router, live))
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
    let status = response.status();
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
/// after this returns; a watch gets its longest wait on top), then counts and logs it. A
/// layer of its own rather than `middleware::from_fn`, which boxes a future and clones the
/// route's service for every request (BENCHMARKS.md, packd).
#[derive(Clone)]
struct ObserveLayer(SharedState);

impl<S> tower_layer::Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe {
            inner,
            state: self.0.clone(),
        }
    }
}

#[derive(Clone)]
struct Observe<S> {
    inner: S,
    state: SharedState,
}

impl<S> tower_service::Service<Request> for Observe<S>
where
    S: tower_service::Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Observed<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let start = Instant::now();
        // A clone of the matched path is a reference count, not a copy of the string.
        let route = request.extensions().get::<MatchedPath>().cloned();
        let method = match *request.method() {
            Method::GET => "GET",
            Method::HEAD => "HEAD",
            Method::PUT => "PUT",
            Method::POST => "POST",
            Method::DELETE => "DELETE",
            _ => "OTHER",
        };
        let settings = &self.state.settings;
        let mut timeout = settings.request_timeout;
        if route.as_ref().map(MatchedPath::as_str) == Some(paths::CHANNEL_ROUTE) && method == "GET"
        {
            // The most a watch is held: the cap plus a sixteenth of stretch.
            let wait = settings.max_watch_wait;
            timeout += wait + wait / 16;
        }
        Observed {
            response: tokio::time::timeout(timeout, self.inner.call(request)),
            state: self.state.clone(),
            route,
            method,
            start,
            timeout,
        }
    }
}

pin_project_lite::pin_project! {
    /// A request's response under its timeout, counted when it is ready.
    struct Observed<F> {
        #[pin]
        response: tokio::time::Timeout<F>,
        state: SharedState,
        route: Option<MatchedPath>,
        method: &'static str,
        start: Instant,
        timeout: Duration,
    }
}

impl<F: Future<Output = Result<Response, Infallible>>> Future for Observed<F> {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = match std::task::ready!(this.response.poll(cx)) {
            Ok(Ok(response)) => response,
            Ok(Err(never)) => match never {},
            Err(_) => ApiError::Timeout {
                secs: this.timeout.as_secs(),
            }
            .into_response(),
        };
        let route = if response.extensions().get::<Watched>().is_some() {
            WATCH_ROUTE
        } else {
            this.route.as_ref().map_or("unmatched", MatchedPath::as_str)
        };
        count(
            this.state,
            route,
            this.method,
            &response,
            this.start.elapsed(),
        );
        Poll::Ready(Ok(response))
    }
}
