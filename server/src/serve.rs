//! The accept loops, one per core, each on a thread of its own with a single-threaded
//! runtime and its own `SO_REUSEPORT` socket on the one address: every connection served by
//! hyper's HTTP/1.1 with the router ([`crate::app`]), the peer's address in each request's
//! extensions, a header-read timeout, one cap on open connections for all the loops, and a
//! graceful shutdown that lets in-flight requests finish.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use pack_protocol::retry::Backoff;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, oneshot, watch};

use crate::config::{Settings, StorageConfig};
use crate::live::LiveChannels;
use crate::storage::{Storage, StorageError};

/// How old a staging file under a data directory must be before the start-up sweep removes
/// it. Several nodes may share one data directory, so a staging file can be another live
/// node's write in progress; a write lasts at most one request (bounded by the request
/// timeout, and the sweep waits at least twice that), so an hour is far past any live one.
pub const STALE_STAGING_AGE: Duration = Duration::from_secs(3600);

/// How long the start-up write probe may take. object_store retries a storage that does
/// not answer for minutes; a node that cannot reach its storage at start says so sooner.
pub const START_PROBE_TIMEOUT: Duration = Duration::from_secs(30);

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
    #[error(
        "the {storage} did not answer a write probe within {secs} s; check that it is up and \
         reachable"
    )]
    StorageSilent { storage: String, secs: u64 },
    #[error("setting up metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// File descriptors beyond the connections: storage files, the listener, logs.
const SPARE_FILES: u64 = 256;

/// Raises the soft limit on open files towards the hard one, enough for `connections`
/// (each watch holds one for its whole wait; the usual soft limit of 1024 would cap a node
/// far below its watcher limit). Says so when the hard limit is too low.
fn raise_open_file_limit(connections: usize) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let wanted = connections as u64 + SPARE_FILES;
    let limit = getrlimit(Resource::Nofile);
    let current = limit.current.unwrap_or(u64::MAX);
    if current >= wanted {
        return;
    }
    let target = limit.maximum.map_or(wanted, |hard| hard.min(wanted));
    if target > current
        && let Err(err) = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(target),
                maximum: limit.maximum,
            },
        )
    {
        tracing::warn!(%err, "could not raise the open-file limit");
        return;
    }
    let now = target.max(current);
    if now < wanted {
        tracing::warn!(
            open_files = now,
            max_connections = connections,
            "the open-file limit (ulimit -n) is below max_connections; raise the hard limit \
             or lower [limits] max_connections and max_watchers"
        );
    }
}

/// A bound, not yet running server.
pub struct Server {
    listener: std::net::TcpListener,
    router: axum::Router,
    header_timeout: Duration,
    shutdown_grace: Duration,
    max_connections: usize,
    storage: String,
    live: Arc<LiveChannels>,
    fleet: Arc<crate::fleet::Fleet>,
    store: Storage,
}

impl Server {
    /// Opens the storage and binds the listening socket.
    pub async fn bind(settings: Settings) -> Result<Self, ServeError> {
        raise_open_file_limit(settings.max_connections);
        let storage = match &settings.storage {
            StorageConfig::Local(dir) => Storage::local(dir)?,
            StorageConfig::S3(url) => Storage::s3(url)?,
        };
        // A node that cannot store anything would answer every publish with a 503 that
        // reads as "retry later": it does not start, and says why and what to do.
        match tokio::time::timeout(START_PROBE_TIMEOUT, storage.check_writable()).await {
            Ok(probed) => probed?,
            Err(_) => {
                return Err(ServeError::StorageSilent {
                    storage: storage.describe().to_string(),
                    secs: START_PROBE_TIMEOUT.as_secs(),
                });
            }
        }
        let listener = bind_listener(settings.listen).map_err(|source| ServeError::Bind {
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
        let (router, live) =
            crate::app::router_with_fleet(settings, storage.clone(), fleet.clone())?;
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
            router,
            live,
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
            router,
            header_timeout,
            shutdown_grace,
            max_connections,
            live,
            fleet,
            store,
            ..
        } = self;
        let (phase, phases) = watch::channel(Phase::Serve);
        let serving = Serving::new(router, header_timeout, max_connections, phases);
        // One accept loop per core, each on its own thread with its own single-threaded
        // runtime and its own socket on the same port: the kernel spreads new connections
        // over the sockets, and a connection's requests never move between threads (nginx's
        // worker model; BENCHMARKS.md has what it buys). This runtime keeps only the
        // background work (fleet flushes, the staging sweep, the guard, shutdown).
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let addr = listener.local_addr();
        let mut first = Some(listener);
        let mut loops = Vec::new();
        for core in 0..cores {
            let socket = match first.take() {
                Some(bound) => Ok(bound),
                None => addr
                    .as_ref()
                    .map_err(|e| std::io::Error::new(e.kind(), e.to_string()))
                    .and_then(|addr| reuse_port_listener(*addr)),
            };
            match socket.and_then(|socket| spawn_accept_thread(core, socket, serving.clone())) {
                Ok(finished) => loops.push(finished),
                Err(err) if core == 0 => {
                    tracing::error!(%err, "cannot serve: no accept loop could start");
                    return;
                }
                Err(err) => {
                    tracing::warn!(%err, core, "serving on fewer threads: no accept loop for this core");
                    break;
                }
            }
        }
        tokio::select! {
            () = shutdown => {}
            () = all_ended(&mut loops) => {
                tracing::error!("every accept loop ended: packd no longer serves");
                return;
            }
        }
        let _ = phase.send(Phase::Drain);
        // Watches are answered now (304, or the newer document) instead of holding the
        // shutdown for their whole wait; their clients reconnect, to another node.
        live.close();
        tracing::info!(
            grace_secs = shutdown_grace.as_secs(),
            "shutting down: finishing in-flight requests"
        );
        tokio::select! {
            () = all_ended(&mut loops) => tracing::info!("all connections closed"),
            () = tokio::time::sleep(shutdown_grace) => {
                tracing::warn!("grace period over; closing remaining connections");
            }
        }
        // The loops drop what is still open and end.
        let _ = phase.send(Phase::Abort);
        for finished in loops {
            let _ = finished.await;
        }
        // What this node counted since its last write would otherwise be lost.
        fleet.flush(&store).await;
    }
}

/// Waits until every loop in `loops` has ended. A loop leaves the list once it has ended, so
/// none is awaited twice when this is started again after being dropped.
async fn all_ended(loops: &mut Vec<oneshot::Receiver<()>>) {
    while let Some(finished) = loops.last_mut() {
        let _ = finished.await;
        loops.pop();
    }
}

/// What every accept loop serves its connections with.
#[derive(Clone)]
struct Serving {
    router: axum::Router,
    http: hyper::server::conn::http1::Builder,
    /// One cap on open connections for all the loops.
    connections: Arc<Semaphore>,
    /// Whether the node serves, drains or is past its grace period.
    phases: watch::Receiver<Phase>,
}

impl Serving {
    fn new(
        router: axum::Router,
        header_timeout: Duration,
        max_connections: usize,
        phases: watch::Receiver<Phase>,
    ) -> Self {
        let mut http = hyper::server::conn::http1::Builder::new();
        // The header-read timeout also closes a keep-alive connection idle that long.
        http.timer(TokioTimer::new())
            .header_read_timeout(header_timeout);
        Serving {
            router,
            http,
            connections: Arc::new(Semaphore::new(max_connections)),
            phases,
        }
    }
}

/// Where the node is: serving, draining (no new connections; open ones finish their
/// request and close), or past the grace period (whatever is still open is dropped).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Serve,
    Drain,
    Abort,
}

/// Accepts connections on `listener` until the node drains, each served on its own task of
/// this thread's runtime and watched by `graceful`.
async fn accept_loop(
    core: usize,
    listener: TcpListener,
    serving: &Serving,
    graceful: &GracefulShutdown,
) {
    let mut phases = serving.phases.clone();
    let draining = phases.wait_for(|p| *p != Phase::Serve);
    tokio::pin!(draining);
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
            permit = serving.connections.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = &mut draining => break,
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
                    tracing::warn!(%err, core, pause_ms = pause.as_millis() as u64, "accept failed");
                    tokio::time::sleep(pause).await;
                    continue;
                }
            },
            _ = &mut draining => break,
        };
        let connection = serve_connection(
            stream,
            peer,
            serving.router.clone(),
            &serving.http,
            graceful,
        );
        // A connection still open past the grace period goes with this thread's runtime.
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(%peer, %err, "connection ended with an error");
            }
            drop(permit);
        });
    }
}

/// Threads for blocking work at most, per accept loop: each loop's runtime has its own pool
/// (file reads of the data directory), capped so that a machine with many cores does not
/// multiply tokio's default of 512 threads by its core count.
const BLOCKING_THREADS_PER_LOOP: usize = 64;

/// Starts the accept loop of one core on `listener`: a thread with a single-threaded
/// runtime. The receiver fires once the thread's runtime is gone, every connection of it
/// closed.
fn spawn_accept_thread(
    core: usize,
    listener: std::net::TcpListener,
    serving: Serving,
) -> std::io::Result<oneshot::Receiver<()>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(BLOCKING_THREADS_PER_LOOP)
        .build()?;
    let (done, finished) = oneshot::channel();
    std::thread::Builder::new()
        .name(format!("packd-accept-{core}"))
        .spawn(move || {
            runtime.block_on(async move {
                let listener = match TcpListener::from_std(listener) {
                    Ok(listener) => listener,
                    Err(err) => {
                        tracing::error!(%err, core, "no accept loop for this core");
                        return;
                    }
                };
                let graceful = GracefulShutdown::new();
                accept_loop(core, listener, &serving, &graceful).await;
                let mut aborting = serving.phases.clone();
                tokio::select! {
                    () = graceful.shutdown() => {}
                    _ = aborting.wait_for(|p| *p == Phase::Abort) => {}
                }
            });
            // Dropping the runtime closes every connection still open on it.
            drop(runtime);
            let _ = done.send(());
        })?;
    Ok(finished)
}

/// The first listening socket, on an address nobody listens on yet. The accept loops'
/// sockets share their port (`SO_REUSEPORT`), which would let a second packd started on the
/// same address silently take half the connections: a plain bind first refuses an address
/// in use, another packd's included, the way a single socket always did.
fn bind_listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let probe = tcp_socket(addr)?;
    probe.bind(addr)?;
    // With port 0 the probe picked the port; the real sockets take that one.
    let addr = probe.local_addr()?;
    drop(probe);
    reuse_port_listener(addr)
}

/// A listening socket that other sockets of this process may bind beside it
/// (`SO_REUSEPORT`): the kernel spreads new connections over them.
fn reuse_port_listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = tcp_socket(addr)?;
    #[cfg(unix)]
    socket.set_reuseport(true)?;
    socket.bind(addr)?;
    socket.listen(1024)?.into_std()
}

/// A TCP socket for `addr`'s family that may bind an address still in `TIME_WAIT` (as
/// `TcpListener::bind` does).
fn tcp_socket(addr: SocketAddr) -> std::io::Result<tokio::net::TcpSocket> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    Ok(socket)
}

/// Serves one connection with `router` until the client closes it or, once `graceful`
/// shuts down, its request in flight is answered. Each request carries the peer's address as
/// [`ConnectInfo`] (what limits by address read).
fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: axum::Router,
    http: &hyper::server::conn::http1::Builder,
    graceful: &GracefulShutdown,
) -> impl Future<Output = Result<(), hyper::Error>> + Send + use<> {
    let router = TowerToHyperService::new(router);
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        hyper::service::Service::call(&router, request)
    });
    graceful
        .watcher()
        .watch(http.serve_connection(TokioIo::new(stream), service))
}

#[cfg(test)]
mod tests {
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Every request on a connection, not only its first, reaches the router with the peer's
    /// address, which limits by address read as `ConnectInfo`.
    #[tokio::test]
    async fn every_request_carries_the_peer_s_address() {
        let router = axum::Router::new().route(
            "/peer",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (phase, phases) = watch::channel(Phase::Serve);
        let serving = Serving::new(router, Duration::from_secs(5), 16, phases);
        let graceful = GracefulShutdown::new();
        let client = async {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let local = stream.local_addr().unwrap();
            stream
                .write_all(
                    b"GET /peer HTTP/1.1\r\nhost: t\r\n\r\n\
                      GET /peer HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n",
                )
                .await
                .unwrap();
            let mut answers = String::new();
            stream.read_to_string(&mut answers).await.unwrap();
            let _ = phase.send(Phase::Drain);
            (local, answers)
        };
        let ((), (local, answers)) =
            tokio::join!(accept_loop(0, listener, &serving, &graceful), client);
        assert_eq!(answers.matches("HTTP/1.1 200 OK").count(), 2, "{answers}");
        assert_eq!(
            answers.matches(&local.to_string()).count(),
            2,
            "{local} in {answers}"
        );
    }
}
