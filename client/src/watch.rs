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
//! backoff on the shared schedule (`pack_format::retry`: jittered, doubling from
//! [`MIN_BACKOFF`], under [`MAX_BACKOFF`]; and at least a `Retry-After`); a server that
//! does not watch at all is asked again only every half to whole [`MAX_BACKOFF`]. Two refreshes a watch starts are at least [`MIN_REFRESH_GAP`] apart.
//! With `auto_update = false` (or `watch = false`) nothing watches; a local pin is
//! honoured by the refresh, and a change the pin skips is not acted on twice.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pack_format::retry::{Backoff, Delays};
use pack_protocol::{headers, paths};
use tokio::task::JoinHandle;

use crate::activity::Event;
use crate::{Client, ClientError, RefreshOutcome};

/// The wait asked of the server (it may grant less). Under the 60 s idle timeout common in
/// load balancers, stretch included.
pub const WAIT: Duration = Duration::from_secs(50);
/// The first pause after a failure.
pub const MIN_BACKOFF: Duration = Duration::from_secs(1);
/// The longest pause, and how often a server that does not watch is asked again.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// The least time between the starts of two refreshes a watch triggers.
pub const MIN_REFRESH_GAP: Duration = Duration::from_secs(1);
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
    let response = client
        .request(&url)
        .header(reqwest::header::IF_NONE_MATCH, &held.etag)
        .timeout(wait + wait / 16 + SLACK)
        .send()
        .await
        .map_err(|e| fail(ClientError::http(&url, &e)))?;
    let status = response.status();
    let granted = response
        .headers()
        .get(headers::WAIT)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_secs);
    if status == reqwest::StatusCode::NOT_MODIFIED {
        return Ok(match granted {
            Some(granted) => Answer::Unchanged { granted },
            None => Answer::Unsupported,
        });
    }
    if status.is_success() {
        let etag = response
            .headers()
            .get(reqwest::header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let sequence = response
            .headers()
            .get(headers::SEQUENCE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        // The body is the new document; the refresh fetches and verifies it with its
        // signature, so it is not read here (the connection is not reused, that is all).
        return Ok(Answer::Changed { etag, sequence });
    }
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| RETRY_AFTER.capped(Duration::from_secs(s)));
    Err(Failure {
        error: ClientError::Status {
            url,
            status: status.as_u16(),
            detail: crate::client::error_detail(response).await,
        },
        retry_after,
    })
}

/// The watch's pauses on the shared schedule ([`pack_format::retry::Backoff`]): jittered,
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
async fn run(client: Arc<Client>) {
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
                channel: client.config().channel.clone(),
            });
            announced = true;
        }
        let sent = Instant::now();
        match watch_once(&client, &held, WAIT).await {
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
        tokio::time::sleep_until((at + MIN_REFRESH_GAP).into()).await;
    }
    *last = Some(Instant::now());
}

#[cfg(test)]
mod tests {
    use super::*;

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
