//! Watching the channel, so that an urgent change (a rollback) reaches a long-running client
//! in seconds rather than at the next six-hour check.
//!
//! A watch is a long-poll on packd (`GET /v1/channels/{channel}?wait=N&after=S`, `S` the
//! sequence of the accepted document, with that document's `If-None-Match`; see
//! `pack_protocol::paths::channel_watch`): packd holds it while `S` is live, until the live
//! document changes or the wait is over. The sequence is in the URL because a caching proxy
//! may drop `If-None-Match` on its way to packd (nginx's `proxy_cache` does), which would turn
//! every watch into an instant answer; the ETag is still sent for an older packd, which holds
//! the watch by it. The answer is only a hint. A change starts the normal refresh —
//! signature, sequence, expiry, hash, everything — so a server that lies about a change gains
//! nothing but a refresh, and the six-hour schedule stays the floor whatever the watch does.
//!
//! Nothing here may spin. Errors, early answers (a `304` long before the granted wait, as a
//! server that does not watch gives), changes that a refresh does not confirm: each waits a
//! backoff on the shared schedule (`pack_protocol::retry`: jittered, doubling from
//! [`MIN_BACKOFF`], under [`MAX_BACKOFF`]; and at least a `Retry-After`); a server that
//! does not watch at all is asked again only every half to whole [`MAX_BACKOFF`]. Two refreshes a watch starts are at least [`MIN_REFRESH_GAP`] apart.
//! With `auto_update = false` (or `watch = false`) nothing watches; a local pin is
//! honoured by the refresh, and a change the pin skips is not acted on twice.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use pack_protocol::retry::{Backoff, Delays};
use pack_protocol::{headers, paths};
use tokio::task::JoinHandle;

use crate::activity::Event;
use crate::http::{StatusCode, error_detail};
use crate::{Client, ClientError, RefreshOutcome};

/// The wait asked of the server (it may grant less). Under the 60 s idle timeout common in
/// load balancers, stretch included.
pub const WAIT: Duration = Duration::from_secs(50);
/// The first pause after a failure.
pub const MIN_BACKOFF: Duration = Duration::from_secs(1);
/// The longest pause, and how often a server that does not watch is asked again.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);
pub use crate::policy::MIN_REFRESH_GAP;
/// Added to the longest the server may hold a watch before the request counts as lost.
const SLACK: Duration = Duration::from_secs(15);
/// The longest `Retry-After` honoured (its cap; it is never retried on by itself).
const RETRY_AFTER: Backoff = Backoff {
    first: MAX_BACKOFF,
    cap: Duration::from_secs(600),
    retries: None,
};

/// A running watch; dropping it stops it.
#[derive(Debug)]
pub struct Watch {
    task: JoinHandle<()>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching `client`'s channel on the current tokio runtime. `None` when there is
/// nothing to watch: no server, auto-update off, or `watch = false`.
pub fn spawn(client: Arc<Client>) -> Option<Watch> {
    let config = client.config();
    if config.server.is_none() || !config.auto_update || !config.watch {
        return None;
    }
    Some(Watch {
        task: tokio::spawn(run(client)),
    })
}

/// What the watch loop needs of a client: what it holds, one watch request, a refresh, and
/// someone to tell. [`Client`] is the real one (over HTTP); the loop's tests drive it on a
/// paused clock with a scripted one, so its pauses are checked to the millisecond without
/// any wall time passing.
pub trait Watched: Send + Sync + 'static {
    /// The ETag of the accepted channel document, if any.
    fn accepted_etag(&self) -> Option<String>;
    /// The sequence of the accepted channel document.
    fn accepted_sequence(&self) -> u64;
    /// One watch request (see [`watch_once`]).
    fn watch(
        &self,
        held: &Held,
        wait: Duration,
    ) -> impl Future<Output = Result<Answer, Failure>> + Send;
    /// A scheduled refresh (see [`Client::refresh`]).
    fn refresh(&self) -> impl Future<Output = Result<RefreshOutcome, ClientError>> + Send;
    /// The channel watched, for the operator's log.
    fn channel(&self) -> String;
    /// Tells the process's listeners (see [`crate::activity`]).
    fn emit(&self, event: Event);
}

impl Watched for Client {
    fn accepted_etag(&self) -> Option<String> {
        Client::accepted_etag(self)
    }

    fn accepted_sequence(&self) -> u64 {
        Client::accepted_sequence(self)
    }

    fn watch(
        &self,
        held: &Held,
        wait: Duration,
    ) -> impl Future<Output = Result<Answer, Failure>> + Send {
        watch_once(self, held, wait)
    }

    fn refresh(&self) -> impl Future<Output = Result<RefreshOutcome, ClientError>> + Send {
        Client::refresh(self)
    }

    fn channel(&self) -> String {
        self.config().channel.clone()
    }

    fn emit(&self, event: Event) {
        Client::emit(self, event);
    }
}

/// The document a watch holds: the watch waits for the live one to be another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Its ETag, sent as `If-None-Match` (an older packd holds the watch by it).
    pub etag: String,
    /// Its channel sequence, sent as `after` in the URL.
    pub sequence: u64,
}

/// What one watch request came back with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `304` from a server that watches: nothing changed within the `granted` wait.
    Unchanged { granted: Duration },
    /// `200`: the live document is another one (its ETag and sequence, if the server sent
    /// them).
    Changed {
        etag: Option<String>,
        sequence: Option<u64>,
    },
    /// `304` without `X-Promptpack-Wait`: the server answered a plain conditional GET and
    /// does not watch.
    Unsupported,
}

/// A failed watch request, with the server's `Retry-After` when it sent one.
#[derive(Debug)]
pub struct Failure {
    pub error: ClientError,
    pub retry_after: Option<Duration>,
}

/// One watch request for the channel, holding `held` (the accepted document, or one a
/// refresh acted on), asking for `wait`.
pub async fn watch_once(client: &Client, held: &Held, wait: Duration) -> Result<Answer, Failure> {
    let config = client.config();
    let server = config.server.as_deref().ok_or(Failure {
        error: ClientError::NoServer,
        retry_after: None,
    })?;
    let url = format!(
        "{server}{}",
        paths::channel_watch(&config.channel, wait.as_secs(), held.sequence)
    );
    let fail = |error| Failure {
        error,
        retry_after: None,
    };
    let mut request = client
        .request(&url)
        .header(reqwest::header::IF_NONE_MATCH, &held.etag);
    request.timeout = Some(wait + wait / 16 + SLACK);
    let response = client
        .transport()
        .send(request)
        .await
        .map_err(|e| fail(e.at(&url)))?;
    let status = response.status;
    let granted = response
        .header(headers::WAIT)
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_secs);
    if status == StatusCode::NOT_MODIFIED {
        return Ok(match granted {
            Some(granted) => Answer::Unchanged { granted },
            None => Answer::Unsupported,
        });
    }
    if status.is_success() {
        let etag = response.header(reqwest::header::ETAG).map(str::to_string);
        let sequence = response
            .header(headers::SEQUENCE)
            .and_then(|v| v.parse::<u64>().ok());
        // The body is the new document; the refresh fetches and verifies it with its
        // signature, so it is not read here (the connection is not reused, that is all).
        return Ok(Answer::Changed { etag, sequence });
    }
    let retry_after = response
        .header(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| RETRY_AFTER.capped(Duration::from_secs(s)));
    Err(Failure {
        error: ClientError::Status {
            url,
            status: status.as_u16(),
            detail: error_detail(response).await.to_string(),
        },
        retry_after,
    })
}

/// The watch's pauses on the shared schedule ([`pack_protocol::retry::Backoff`]): jittered,
/// doubling from [`MIN_BACKOFF`], each under [`MAX_BACKOFF`].
#[derive(Debug)]
pub struct Pauses {
    delays: Delays,
}

impl Default for Pauses {
    fn default() -> Self {
        Pauses {
            delays: SCHEDULE.delays(),
        }
    }
}

impl Pauses {
    /// The next pause (each longer, until the cap).
    pub fn pause(&mut self) -> Duration {
        // The schedule has no retry limit, so it never runs out.
        self.delays.next().unwrap_or(MAX_BACKOFF / 2)
    }

    /// Starts over from [`MIN_BACKOFF`].
    pub fn reset(&mut self) {
        self.delays = SCHEDULE.delays();
    }
}

/// The watch's retry schedule.
const SCHEDULE: Backoff = Backoff {
    first: MIN_BACKOFF,
    cap: MAX_BACKOFF,
    retries: None,
};

/// A wait drawn from the upper half of `cap` (`[cap / 2, cap)`), from the shared schedule:
/// clients that fail together come back apart.
fn spread(cap: Duration) -> Duration {
    Backoff {
        first: cap / 2,
        cap,
        retries: Some(1),
    }
    .delays()
    .next()
    .unwrap_or(cap / 2)
}

/// Watches until the task is dropped.
async fn run<W: Watched>(client: Arc<W>) {
    let mut backoff = Pauses::default();
    // A change a refresh acted on without the accepted document moving (a pin skipped it,
    // or the document was refused), with the accepted ETag of that moment: watched from, so
    // that it is not acted on again, until the accepted document moves some other way (the
    // schedule's refresh, another process sharing the cache).
    let mut acted_on: Option<(Held, Option<String>)> = None;
    let mut last_refresh: Option<Instant> = None;
    let mut failing = false;
    // Whether the operator was told the watch runs (again, after a failure).
    let mut announced = false;
    loop {
        let accepted = client.accepted_etag();
        if acted_on.as_ref().is_some_and(|(_, then)| *then != accepted) {
            acted_on = None;
        }
        // Read apart: a refresh between the two reads pairs an older ETag with a newer
        // sequence, which costs an older packd's early answer at most.
        let held = acted_on.as_ref().map(|(seen, _)| seen.clone()).or_else(|| {
            accepted.map(|etag| Held {
                etag,
                sequence: client.accepted_sequence(),
            })
        });
        let Some(held) = held else {
            // Nothing accepted yet to watch from (the start-up refresh may be running).
            pause_for_refresh(&mut last_refresh).await;
            match client.refresh().await {
                Ok(_) if client.accepted_etag().is_some() => backoff.reset(),
                Ok(_) | Err(_) => tokio::time::sleep(backoff.pause()).await,
            }
            continue;
        };
        if !announced {
            client.emit(Event::Watching {
                channel: client.channel(),
            });
            announced = true;
        }
        let sent = Instant::now();
        match client.watch(&held, WAIT).await {
            Ok(Answer::Unchanged { granted }) => {
                if failing {
                    tracing::info!("watching the channel again");
                    failing = false;
                }
                // A 304 long before the wait is over is not a watch: back off.
                if granted >= MIN_BACKOFF && sent.elapsed() >= granted / 2 {
                    backoff.reset();
                } else {
                    let pause = backoff.pause();
                    tracing::debug!(
                        "the server answered a {granted:?} watch after {:?}; waiting {pause:?}",
                        sent.elapsed()
                    );
                    tokio::time::sleep(pause).await;
                }
            }
            Ok(Answer::Unsupported) => {
                let pause = spread(MAX_BACKOFF);
                tracing::info!("the server does not watch; asking again in {pause:?}");
                tokio::time::sleep(pause).await;
            }
            Ok(Answer::Changed { etag, sequence }) => {
                let new = etag.filter(|new| *new != held.etag).zip(sequence);
                let Some((etag, sequence)) = new else {
                    // The same document again, or one without an ETag or a sequence to watch
                    // from.
                    tokio::time::sleep(backoff.pause()).await;
                    continue;
                };
                let new = Held { etag, sequence };
                tracing::info!("the channel changed; refreshing");
                pause_for_refresh(&mut last_refresh).await;
                let before = client.accepted_etag();
                let result = client.refresh().await;
                let after = client.accepted_etag();
                // Moved, or already there (another process installed it meanwhile).
                let caught_up = after != before || after.as_deref() == Some(new.etag.as_str());
                match result {
                    Ok(_) if caught_up => {
                        acted_on = None;
                        backoff.reset();
                    }
                    Ok(RefreshOutcome::Skipped { .. }) => {
                        acted_on = Some((new, after));
                        backoff.reset();
                    }
                    // The refresh saw no change: the hint was early (another node that has
                    // not seen the publish yet) or false. Try again, later each time.
                    Ok(_) => tokio::time::sleep(backoff.pause()).await,
                    Err(e) if e.is_transient() => tokio::time::sleep(backoff.pause()).await,
                    // Refused for good (a bad signature, a rollback, a known-bad pack): the
                    // same answer would come again.
                    Err(_) => {
                        acted_on = Some((new, after));
                        tokio::time::sleep(backoff.pause()).await;
                    }
                }
            }
            Err(Failure { error, retry_after }) => {
                let pause = backoff
                    .pause()
                    .max(retry_after.map_or(Duration::ZERO, |r| r + spread(r / 4)));
                client.emit(Event::Reconnecting {
                    error: error.to_string(),
                    retry_in_ms: u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                });
                announced = false;
                if !failing {
                    tracing::info!("watching the channel failed: {error}; retrying in {pause:?}");
                    failing = true;
                } else {
                    tracing::debug!("watching the channel failed: {error}; retrying in {pause:?}");
                }
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// Waits until [`MIN_REFRESH_GAP`] has passed since the last refresh a watch started.
async fn pause_for_refresh(last: &mut Option<Instant>) {
    if let Some(at) = *last {
        tokio::time::sleep_until(at + MIN_REFRESH_GAP).await;
    }
    *last = Some(Instant::now());
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::Mutex;

    /// What a scripted server does with one watch request: how long it holds it, and what
    /// it answers then.
    type Script = Box<dyn FnMut(&Held) -> (Duration, Result<Answer, Failure>) + Send>;

    /// What a refresh does: the document it makes accepted (if it moves), and its answer.
    type OnRefresh = Box<dyn FnMut() -> (Option<Held>, Result<RefreshOutcome, ClientError>) + Send>;

    /// A client whose watch requests a script answers, on tokio's clock: with the clock
    /// paused, hours of backoff run in milliseconds, and every moment is exact.
    struct Scripted {
        script: Mutex<Script>,
        /// The accepted document, moved by a refresh that installs.
        accepted: Mutex<Option<Held>>,
        /// What a refresh does to the accepted document and answers.
        on_refresh: Mutex<OnRefresh>,
        watches: Mutex<Vec<(Instant, Held)>>,
        refreshes: Mutex<Vec<Instant>>,
        events: Mutex<Vec<Event>>,
    }

    fn held(n: u64) -> Held {
        Held {
            etag: format!("\"{n}\""),
            sequence: n,
        }
    }

    fn scripted(script: Script) -> Arc<Scripted> {
        Arc::new(Scripted {
            script: Mutex::new(script),
            accepted: Mutex::new(Some(held(1))),
            on_refresh: Mutex::new(Box::new(|| (None, Ok(RefreshOutcome::NotModified)))),
            watches: Mutex::default(),
            refreshes: Mutex::default(),
            events: Mutex::default(),
        })
    }

    impl Watched for Scripted {
        fn accepted_etag(&self) -> Option<String> {
            self.accepted
                .lock()
                .unwrap()
                .as_ref()
                .map(|h| h.etag.clone())
        }

        fn accepted_sequence(&self) -> u64 {
            self.accepted
                .lock()
                .unwrap()
                .as_ref()
                .map_or(0, |h| h.sequence)
        }

        fn watch(
            &self,
            held: &Held,
            _wait: Duration,
        ) -> impl Future<Output = Result<Answer, Failure>> + Send {
            self.watches
                .lock()
                .unwrap()
                .push((Instant::now(), held.clone()));
            let (hold, answer) = (self.script.lock().unwrap())(held);
            async move {
                tokio::time::sleep(hold).await;
                answer
            }
        }

        fn refresh(&self) -> impl Future<Output = Result<RefreshOutcome, ClientError>> + Send {
            self.refreshes.lock().unwrap().push(Instant::now());
            let (moved, outcome) = (self.on_refresh.lock().unwrap())();
            if let Some(moved) = moved {
                *self.accepted.lock().unwrap() = Some(moved);
            }
            std::future::ready(outcome)
        }

        fn channel(&self) -> String {
            "stable".to_string()
        }

        fn emit(&self, event: Event) {
            self.events.lock().unwrap().push(event);
        }
    }

    /// Runs the watch for `simulated` time on the paused clock; the start and the gaps
    /// between watch requests.
    async fn watch_for(client: &Arc<Scripted>, simulated: Duration) -> Vec<Duration> {
        let _ = tokio::time::timeout(simulated, run(client.clone())).await;
        let watches = client.watches.lock().unwrap();
        watches.windows(2).map(|w| w[1].0 - w[0].0).collect()
    }

    const HOUR: Duration = Duration::from_secs(3600);

    /// The backoff from [`MIN_BACKOFF`] to the cap: about ten pauses, then one every 2.5-5
    /// minutes — 12 to 40 requests an hour, not thousands.
    fn assert_backs_off(gaps: &[Duration]) {
        assert!(
            gaps.len() >= 10 && gaps.len() <= 40,
            "{} gaps: {gaps:?}",
            gaps.len()
        );
        assert!(gaps[0] >= MIN_BACKOFF, "{gaps:?}");
        for gap in &gaps[gaps.len() - 5..] {
            assert!(
                *gap >= MAX_BACKOFF / 2 - Duration::from_millis(1) && *gap < MAX_BACKOFF,
                "{gaps:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_answering_304_at_once_forever_gets_a_backoff() {
        let client = scripted(Box::new(|_| {
            (Duration::ZERO, Ok(Answer::Unchanged { granted: WAIT }))
        }));
        assert_backs_off(&watch_for(&client, HOUR).await);
        assert!(client.refreshes.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_holding_each_watch_gets_the_next_at_once() {
        let client = scripted(Box::new(|_| {
            (WAIT, Ok(Answer::Unchanged { granted: WAIT }))
        }));
        // Requests at 0, 50 s, ..., 3550 s.
        let gaps = watch_for(&client, HOUR - Duration::from_secs(1)).await;
        assert_eq!(gaps.len(), 71, "{gaps:?}");
        assert!(gaps.iter().all(|gap| *gap == WAIT), "{gaps:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_announcing_the_held_document_as_a_change_forever_gets_a_backoff() {
        let client = scripted(Box::new(|held| {
            (
                Duration::ZERO,
                Ok(Answer::Changed {
                    etag: Some(held.etag.clone()),
                    sequence: Some(held.sequence),
                }),
            )
        }));
        assert_backs_off(&watch_for(&client, HOUR).await);
        assert!(client.refreshes.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn changes_a_refresh_does_not_confirm_get_a_backoff_and_refreshes_a_gap_apart() {
        let next = std::sync::atomic::AtomicU64::new(10);
        let client = scripted(Box::new(move |_| {
            let n = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            (
                Duration::ZERO,
                Ok(Answer::Changed {
                    etag: Some(format!("\"{n}\"")),
                    sequence: Some(n),
                }),
            )
        }));
        assert_backs_off(&watch_for(&client, HOUR).await);
        let refreshes = client.refreshes.lock().unwrap();
        assert!(!refreshes.is_empty());
        for pair in refreshes.windows(2) {
            assert!(pair[1] - pair[0] >= MIN_REFRESH_GAP, "{refreshes:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_failing_forever_gets_a_backoff_and_at_least_its_retry_after() {
        let client = scripted(Box::new(|_| {
            (
                Duration::ZERO,
                Err(Failure {
                    error: ClientError::Status {
                        url: "http://packd/v1/channels/stable".to_string(),
                        status: 503,
                        detail: "watchers_full".to_string(),
                    },
                    retry_after: Some(Duration::from_secs(120)),
                }),
            )
        }));
        let gaps = watch_for(&client, HOUR).await;
        assert!(!gaps.is_empty());
        // A Retry-After, plus up to a quarter more, and never under the backoff.
        for gap in &gaps {
            assert!(
                *gap >= Duration::from_secs(120) && *gap < MAX_BACKOFF + Duration::from_secs(150),
                "{gaps:?}"
            );
        }
        // Each failure is told as a reconnect; the watch is announced once, before the first.
        let events = client.events.lock().unwrap();
        let reconnects = events
            .iter()
            .filter(|e| matches!(e, Event::Reconnecting { .. }))
            .count();
        assert_eq!(reconnects, gaps.len() + 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_does_not_watch_is_asked_again_only_every_few_minutes() {
        let client = scripted(Box::new(|_| (Duration::ZERO, Ok(Answer::Unsupported))));
        let gaps = watch_for(&client, HOUR).await;
        assert!(gaps.len() >= 11 && gaps.len() <= 24, "{gaps:?}");
        for gap in &gaps {
            assert!(
                *gap >= MAX_BACKOFF / 2 - Duration::from_millis(1) && *gap < MAX_BACKOFF,
                "{gaps:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_refreshes_once_and_the_watch_then_holds_the_new_document() {
        let client = scripted(Box::new(|held| {
            if held.sequence == 1 {
                (
                    Duration::from_secs(5),
                    Ok(Answer::Changed {
                        etag: Some(self::held(2).etag),
                        sequence: Some(2),
                    }),
                )
            } else {
                (WAIT, Ok(Answer::Unchanged { granted: WAIT }))
            }
        }));
        *client.on_refresh.lock().unwrap() =
            Box::new(|| (Some(held(2)), Ok(RefreshOutcome::Unchanged { sequence: 2 })));
        let gaps = watch_for(&client, Duration::from_secs(5 + 3 * 50 + 1)).await;
        assert_eq!(client.refreshes.lock().unwrap().len(), 1);
        let watches = client.watches.lock().unwrap();
        assert_eq!(watches[0].1, held(1));
        assert!(
            watches[1..].iter().all(|(_, h)| *h == held(2)),
            "{watches:?}"
        );
        // The next watch went out at once after the refresh, and then back to back.
        assert_eq!(gaps[0], Duration::from_secs(5));
        assert!(gaps[1..].iter().all(|gap| *gap == WAIT), "{gaps:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_a_pin_skips_is_watched_from_and_not_acted_on_again() {
        let client = scripted(Box::new(|held| {
            if held.sequence == 1 {
                (
                    Duration::ZERO,
                    Ok(Answer::Changed {
                        etag: Some(self::held(2).etag),
                        sequence: Some(2),
                    }),
                )
            } else {
                (WAIT, Ok(Answer::Unchanged { granted: WAIT }))
            }
        }));
        *client.on_refresh.lock().unwrap() = Box::new(|| {
            (
                None,
                Ok(RefreshOutcome::Skipped {
                    reason: "pinned to 1.0.0".to_string(),
                }),
            )
        });
        let _ = watch_for(&client, Duration::from_secs(10 * 60)).await;
        assert_eq!(client.refreshes.lock().unwrap().len(), 1);
        let watches = client.watches.lock().unwrap();
        assert!(
            watches[1..].iter().all(|(_, h)| *h == held(2)),
            "{watches:?}"
        );
    }

    #[test]
    fn pauses_double_on_the_shared_schedule_under_the_cap_and_reset() {
        let mut pauses = Pauses::default();
        let mut base = MIN_BACKOFF;
        for _ in 0..20 {
            let pause = pauses.pause();
            // The schedule computes in f32 seconds: allow a millisecond of rounding.
            let slack = Duration::from_millis(1);
            assert!(
                pause + slack >= base && pause < MAX_BACKOFF && pause <= base * 2 + slack,
                "{pause:?} for {base:?}"
            );
            base = (base * 2).min(MAX_BACKOFF / 2);
        }
        assert!(pauses.pause() >= MAX_BACKOFF / 2 - Duration::from_millis(1));
        pauses.reset();
        assert!(pauses.pause() < MIN_BACKOFF * 2);
    }

    #[test]
    fn a_spread_wait_lies_in_the_upper_half_and_a_retry_after_is_capped() {
        for _ in 0..100 {
            let wait = spread(MAX_BACKOFF);
            assert!(wait >= MAX_BACKOFF / 2 - Duration::from_millis(1) && wait < MAX_BACKOFF);
        }
        assert_eq!(
            RETRY_AFTER.capped(Duration::from_secs(86_400)),
            Duration::from_secs(600)
        );
    }
}
