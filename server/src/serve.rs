//! The accept loop: HTTP/1.1 with a header-read timeout, a cap on open connections, and a
//! graceful shutdown that lets in-flight requests finish.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use pack_format::retry::Backoff;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::config::{Settings, StorageConfig};
use crate::storage::{Storage, StorageError};

/// How old a staging file under a data directory must be before the start-up sweep removes
/// it. Several nodes may share one data directory, so a staging file can be another live
/// node's write in progress; a write lasts at most one request (bounded by the request
/// timeout, and the sweep waits at least twice that), so an hour is far past any live one.
pub const STALE_STAGING_AGE: Duration = Duration::from_secs(3600);

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("setting up metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// A bound, not yet running server.
pub struct Server {
    listener: TcpListener,
    app: axum::Router,
    header_timeout: Duration,
    shutdown_grace: Duration,
    max_connections: usize,
    storage: String,
    fleet: Arc<crate::fleet::Fleet>,
    store: Storage,
}

impl Server {
    /// Opens the storage and binds the listening socket.
    pub async fn bind(settings: Settings) -> Result<Self, ServeError> {
        let storage = match &settings.storage {
            StorageConfig::Local(dir) => Storage::local(dir)?,
            StorageConfig::S3(url) => Storage::s3(url)?,
        };
        let listener =
            TcpListener::bind(settings.listen)
                .await
                .map_err(|source| ServeError::Bind {
                    addr: settings.listen,
                    source,
                })?;
        let min_age = STALE_STAGING_AGE.max(settings.request_timeout.saturating_mul(2));
        let (header_timeout, shutdown_grace, max_connections) = (
            settings.header_timeout,
            settings.shutdown_grace,
            settings.max_connections,
        );
        let describe = storage.describe().to_string();
        let sweeping = storage.clone();
        let fleet = Arc::new(crate::fleet::Fleet::new(settings.fleet.clone()));
        let app = crate::app::router_with_fleet(settings, storage.clone(), fleet.clone())?;
        tokio::spawn(fleet.clone().run_flusher(storage.clone()));
        // Only once the node can start: one that cannot sweeps nothing.
        tokio::spawn(async move {
            match sweeping.sweep_staging(min_age).await {
                Ok(sweep) => tracing::info!(
                    removed = sweep.removed,
                    kept = sweep.kept,
                    failed = sweep.failed,
                    "staging sweep done"
                ),
                Err(err) => tracing::warn!(%err, "staging sweep failed"),
            }
        });
        Ok(Server {
            listener,
            header_timeout,
            shutdown_grace,
            max_connections,
            storage: describe,
            app,
            fleet,
            store: storage,
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn storage(&self) -> &str {
        &self.storage
    }

    /// Serves until `shutdown` resolves, then stops accepting and gives in-flight requests
    /// up to the shutdown grace period to finish.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let Server {
            listener,
            app,
            header_timeout,
            shutdown_grace,
            max_connections,
            fleet,
            store,
            ..
        } = self;
        let graceful = GracefulShutdown::new();
        let connections = Arc::new(Semaphore::new(max_connections));
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(header_timeout);
        tokio::pin!(shutdown);
        // Failed accepts (out of file descriptors and the like) pause on the shared schedule:
        // growing, jittered, each under a second; a successful accept starts it over.
        let backoff = Backoff {
            first: Duration::from_millis(10),
            cap: Duration::from_secs(1),
            retries: None,
        };
        let mut pauses = backoff.delays();
        let mut failing = false;
        loop {
            let permit = tokio::select! {
                permit = connections.clone().acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => break,
                },
                () = &mut shutdown => break,
            };
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => {
                        if failing {
                            pauses = backoff.delays();
                            failing = false;
                        }
                        a
                    }
                    Err(err) => {
                        // Back off instead of spinning; the schedule has no retry limit.
                        failing = true;
                        let pause = pauses.next().unwrap_or(backoff.cap / 2);
                        tracing::warn!(%err, pause_ms = pause.as_millis() as u64, "accept failed");
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                },
                () = &mut shutdown => break,
            };
            let service = TowerToHyperService::new(app.clone());
            let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
            tokio::spawn(async move {
                if let Err(err) = connection.await {
                    tracing::debug!(%peer, %err, "connection ended with an error");
                }
                drop(permit);
            });
        }
        drop(listener);
        tracing::info!(
            grace_secs = shutdown_grace.as_secs(),
            "shutting down: finishing in-flight requests"
        );
        tokio::select! {
            () = graceful.shutdown() => tracing::info!("all connections closed"),
            () = tokio::time::sleep(shutdown_grace) => tracing::warn!("grace period over; closing remaining connections"),
        }
        // What this node counted since its last write would otherwise be lost.
        fleet.flush(&store).await;
    }
}
