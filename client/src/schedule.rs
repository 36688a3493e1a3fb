//! The periodic work of a long-running process, all of it jobs of one [`JobScheduler`]: the
//! six-hour refresh (a cron job with a per-install offset so a fleet does not poll at the
//! same second), the failure reports queued while it runs, the outcome counts, and the file
//! view's sweep. [`Schedule::shutdown`] stops every one of them. Also a refresh at start-up
//! when the last success is over six hours old. Long-running processes also watch the
//! channel ([`crate::watch`]); the schedule is the floor under the watch. The timings are
//! [`crate::policy`]'s.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio_cron_scheduler::{Job, JobScheduler, JobSchedulerError};

use crate::Client;
use crate::watch::Watch;

pub use crate::policy::{
    INTERVAL, RETRY_AFTER, cron_for, files_sweep_interval, outcomes_check_interval, spread,
};

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

    /// Stops the watch and every job of the scheduler (a run already going finishes).
    pub async fn shutdown(mut self) -> Result<(), JobSchedulerError> {
        self.watch = None;
        self.scheduler.shutdown().await
    }
}

/// Adds `job` to `scheduler`, run every `every` from a first run `every` after the start.
/// The scheduler counts in whole seconds (at least one) on the wall clock. A run still going
/// when the next is due makes that one pass, as a loop that sleeps between runs would.
async fn add_repeated<F, Fut>(
    scheduler: &JobScheduler,
    every: Duration,
    job: F,
) -> Result<(), JobSchedulerError>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let job = Arc::new(job);
    let running = Arc::new(tokio::sync::Mutex::new(()));
    let every = every.max(Duration::from_secs(1));
    scheduler
        .add(Job::new_repeated_async(every, move |_, _| {
            let (job, running) = (job.clone(), running.clone());
            Box::pin(async move {
                let Ok(_running) = running.try_lock_owned() else {
                    return;
                };
                job().await;
            })
        })?)
        .await?;
    Ok(())
}

/// Starts the schedule and the watch (see [`crate::watch::spawn`]). Dropping the result
/// stops the watch; `shutdown` stops both.
pub async fn start(client: Arc<Client>) -> Result<Schedule, JobSchedulerError> {
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
                // Outcome counts that may go out (see [`crate::outcomes`]); their own job
                // below sends them between refreshes.
                crate::outcomes::send_due(&client).await;
            })
        })?)
        .await?;
    // A failure report queued while this process runs (a template that failed to render)
    // goes out within seconds, not at the next refresh.
    let reporter = client.clone();
    add_repeated(
        &scheduler,
        crate::policy::REPORTS_CHECK_INTERVAL,
        move || {
            let client = reporter.clone();
            async move {
                if client.report_queued().now_or_never().is_none() {
                    return;
                }
                if let Err(e) = client.send_reports().await {
                    tracing::info!("failure reports not sent: {e}");
                }
            }
        },
    )
    .await?;
    // Outcome counts go out while their day runs (see [`crate::outcomes`]), not only at
    // the six-hour refresh: a ramp's guard decides on them. The first look is at once.
    match crate::outcomes::OutcomeLog::for_client(&client) {
        Ok(Some(log)) => {
            let log = Arc::new(log);
            let every = outcomes_check_interval(log.interval());
            let (first, outcomes) = (client.clone(), client.clone());
            let first_log = log.clone();
            tokio::spawn(async move {
                first_log.send_due(&first).await;
            });
            add_repeated(&scheduler, every, move || {
                let (log, client) = (log.clone(), outcomes.clone());
                async move {
                    log.send_due(&client).await;
                }
            })
            .await?;
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
        add_repeated(&scheduler, every, move || {
            let client = files.clone();
            async move {
                let _ = tokio::task::spawn_blocking(move || client.sync_files()).await;
            }
        })
        .await?;
    }
    scheduler.start().await?;
    tracing::info!("refresh scheduled as '{cron}' (UTC)");
    if client.install_pending()
        || client
            .since_last_success(client.config().clock.now())
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

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The scheduler reads the wall clock (`chrono::Utc::now`), not tokio's, so this runs in
    /// real time: a few seconds, every job at its shortest period.
    #[tokio::test]
    async fn after_shutdown_no_job_runs_again() {
        let scheduler = JobScheduler::new().await.unwrap();
        let runs: Vec<Arc<AtomicUsize>> = (0..3).map(|_| Arc::default()).collect();
        let (ran, mut all_ran) = tokio::sync::watch::channel(());
        let ran = Arc::new(ran);
        for count in &runs {
            let (count, ran) = (count.clone(), ran.clone());
            add_repeated(&scheduler, Duration::from_secs(1), move || {
                count.fetch_add(1, Ordering::SeqCst);
                ran.send_replace(());
                std::future::ready(())
            })
            .await
            .unwrap();
        }
        scheduler.start().await.unwrap();
        let schedule = Schedule {
            scheduler,
            watch: None,
        };
        // A sign of life from every job before the absence is asserted.
        tokio::time::timeout(Duration::from_secs(20), async {
            while runs.iter().any(|r| r.load(Ordering::SeqCst) == 0) {
                all_ran.changed().await.unwrap();
            }
        })
        .await
        .expect("every job ran within 20 s");
        schedule.shutdown().await.unwrap();
        let after: Vec<usize> = runs.iter().map(|r| r.load(Ordering::SeqCst)).collect();
        // Three periods: each job would have run again at least twice. A run the scheduler
        // started just before the shutdown still finishes (and counts) after it: one each.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let later: Vec<usize> = runs.iter().map(|r| r.load(Ordering::SeqCst)).collect();
        assert!(
            after.iter().zip(&later).all(|(a, l)| *l <= a + 1),
            "a job ran again after shutdown: {after:?} then {later:?}"
        );
    }

    #[tokio::test]
    async fn a_run_still_going_makes_the_next_pass() {
        let scheduler = JobScheduler::new().await.unwrap();
        let (started, running) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let most = Arc::new(AtomicUsize::new(0));
        let (tx, mut rx) = tokio::sync::watch::channel(0usize);
        let tx = Arc::new(tx);
        {
            let (started, running, most, tx) =
                (started.clone(), running.clone(), most.clone(), tx.clone());
            add_repeated(&scheduler, Duration::from_secs(1), move || {
                let (started, running, most, tx) =
                    (started.clone(), running.clone(), most.clone(), tx.clone());
                async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    // Longer than two periods.
                    tokio::time::sleep(Duration::from_millis(2500)).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    tx.send_replace(started.fetch_add(1, Ordering::SeqCst) + 1);
                }
            })
            .await
            .unwrap();
        }
        scheduler.start().await.unwrap();
        let schedule = Schedule {
            scheduler,
            watch: None,
        };
        tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|done| *done >= 2))
            .await
            .expect("two runs finished within 30 s")
            .unwrap();
        schedule.shutdown().await.unwrap();
        assert_eq!(most.load(Ordering::SeqCst), 1, "two runs overlapped");
    }
}
