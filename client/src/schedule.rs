//! The six-hour refresh: a cron job with a per-install offset so a fleet does not poll at
//! the same second, plus a refresh at start-up when the last success is over six hours old.
//! Long-running processes also watch the channel ([`crate::watch`]); the schedule is the
//! floor under the watch.

use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;
use tokio_cron_scheduler::{Job, JobScheduler};

use crate::Client;
use crate::watch::Watch;

/// How often a client checks.
pub const INTERVAL: Duration = Duration::from_secs(6 * 60 * 60);

/// After a check, short-lived processes start no background refresh for this long, even
/// when the check failed.
pub const RETRY_AFTER: Duration = Duration::from_secs(15 * 60);

/// This install's spread on top of the interval for background refreshes, in seconds
/// (under an hour).
pub fn spread(install_id: &str) -> u64 {
    offset_for(install_id) % 3600
}

/// The cron expression (`sec min hour day month weekday`) for an install: every six hours,
/// offset within the six-hour window by the install id.
pub fn cron_for(install_id: &str) -> String {
    let offset = offset_for(install_id) % (6 * 60 * 60);
    let (hour, minute, second) = (offset / 3600, offset / 60 % 60, offset % 60);
    format!("{second} {minute} {hour}/6 * * *")
}

/// How often a long-running process syncs and sweeps the file view: half its grace
/// period, between 1 s and a minute, so a directory goes at most that long after its grace.
pub fn files_sweep_interval(grace: Duration) -> Duration {
    (grace / 2).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

/// How often a long-running process looks for outcome counts to send: a twelfth of the
/// provisional interval, between 5 s and 5 minutes, so a row goes out at most that long
/// after it may. Each look is one `stat` when nothing is due.
pub fn outcomes_check_interval(interval: Duration) -> Duration {
    (interval / 12).clamp(Duration::from_secs(5), Duration::from_secs(5 * 60))
}

/// A stable spread value from the install id (FNV-1a; no secrecy needed).
fn offset_for(install_id: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in install_id.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The running schedule and watch of a long-running process.
pub struct Schedule {
    scheduler: JobScheduler,
    watch: Option<Watch>,
}

impl Schedule {
    /// Whether the channel is watched (a server, auto-update and `watch` on).
    pub fn watching(&self) -> bool {
        self.watch.is_some()
    }

    /// Stops the watch and the scheduler.
    pub async fn shutdown(mut self) -> Result<(), tokio_cron_scheduler::JobSchedulerError> {
        self.watch = None;
        self.scheduler.shutdown().await
    }
}

/// Starts the schedule and the watch (see [`crate::watch::spawn`]). Dropping the result
/// stops the watch; `shutdown` stops both.
pub async fn start(
    client: Arc<Client>,
) -> Result<Schedule, tokio_cron_scheduler::JobSchedulerError> {
    let scheduler = JobScheduler::new().await?;
    let cron = cron_for(client.install_id());
    let job_client = client.clone();
    scheduler
        .add(Job::new_async(cron.as_str(), move |_, _| {
            let client = job_client.clone();
            Box::pin(async move {
                if let Err(e) = client.refresh().await {
                    tracing::warn!("scheduled refresh failed: {e}");
                }
                // Outcome counts that may go out (see [`crate::outcomes`]); the timer below
                // sends them between refreshes.
                crate::outcomes::send_due(&client).await;
            })
        })?)
        .await?;
    scheduler.start().await?;
    tracing::info!("refresh scheduled as '{cron}' (UTC)");
    // A failure report queued while this process runs (a template that failed to render)
    // goes out within seconds, not at the next refresh.
    let reporter = client.clone();
    tokio::spawn(async move {
        loop {
            reporter.report_queued().await;
            // Let a burst (a render failure, then the bad mark) go together.
            tokio::time::sleep(Duration::from_secs(1)).await;
            if let Err(e) = reporter.send_reports().await {
                tracing::info!("failure reports not sent: {e}");
            }
        }
    });
    // Outcome counts go out while their day runs (see [`crate::outcomes`]), not only at
    // the six-hour refresh: a ramp's guard decides on them. The first look is at once.
    match crate::outcomes::OutcomeLog::for_client(&client) {
        Ok(Some(log)) => {
            let outcomes = client.clone();
            tokio::spawn(async move {
                let mut looks = tokio::time::interval(outcomes_check_interval(log.interval()));
                looks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    looks.tick().await;
                    log.send_due(&outcomes).await;
                }
            });
        }
        Ok(None) => {}
        Err(e) => tracing::warn!("outcome counts not sent while this process runs: {e}"),
    }
    // The file view's old versions go once their grace period is over, and a switch to the
    // built-in pack made while serving (a pack marked bad) reaches the view, without
    // waiting for a refresh.
    if let Some(view) = client.file_view() {
        let every = files_sweep_interval(view.grace());
        let files = client.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let client = files.clone();
                let _ = tokio::task::spawn_blocking(move || client.sync_files()).await;
            }
        });
    }
    if client.install_pending()
        || client
            .since_last_success(OffsetDateTime::now_utc())
            .is_none_or(|age| age > INTERVAL)
    {
        let client = client.clone();
        tokio::spawn(async move {
            if let Err(e) = client.refresh().await {
                tracing::warn!("start-up refresh failed: {e}");
            }
        });
    }
    Ok(Schedule {
        scheduler,
        watch: crate::watch::spawn(client),
    })
}
