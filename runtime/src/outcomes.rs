//! How this process's turns went, counted per pack version for the outcome counts the pack
//! client keeps and sends ([`pack_client::outcomes`]). Counts only: the loop adds numbers
//! where the events happen (a turn started, fell back to the built-in pack, failed at the
//! model, was interrupted; a tool call failed or was refused; history was summarised;
//! `agent exec` exited), and never hands over any text.
//!
//! Counts build up in memory and go to `<data_dir>/packs/outcomes.json` in one locked write
//! at the end of each run of the loop ([`OutcomeRecorder::flush`]): one write per user
//! message, not per event. A process killed mid-run loses that run's counts, never the
//! file. There is a recorder only when the client shares usage data (see
//! [`crate::packs::Packs::outcomes`]).

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use pack_client::outcomes::{OutcomeCounts, OutcomeLog, PackKey};

/// Counts of this process not yet written, and the pack of the latest turn.
#[derive(Debug)]
pub struct OutcomeRecorder {
    log: OutcomeLog,
    tally: Mutex<Tally>,
}

#[derive(Debug, Default)]
struct Tally {
    rows: BTreeMap<PackKey, OutcomeCounts>,
    last: Option<PackKey>,
}

impl OutcomeRecorder {
    pub fn new(log: OutcomeLog) -> OutcomeRecorder {
        OutcomeRecorder {
            log,
            tally: Mutex::new(Tally::default()),
        }
    }

    /// Adds `counts` under `pack`, the pack the turn was meant to be served by.
    pub fn count(&self, pack: &PackKey, counts: OutcomeCounts) {
        let mut tally = self.tally.lock().unwrap_or_else(PoisonError::into_inner);
        // Summed without the device caps: parts and wholes of one run arrive at different
        // moments (a denial before the turn's tool errors), and are capped together when
        // written.
        tally.rows.entry(pack.clone()).or_default().sum(&counts);
        if tally.last.as_ref() != Some(pack) {
            tally.last = Some(pack.clone());
        }
    }

    /// Adds `counts` under the pack of the latest turn, or `otherwise` when no turn ran in
    /// this process: for what belongs to a session rather than a turn (a compaction, an
    /// `agent exec` exit).
    pub fn count_latest(&self, otherwise: &PackKey, counts: OutcomeCounts) {
        let latest = self
            .tally
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .last
            .clone();
        self.count(latest.as_ref().unwrap_or(otherwise), counts);
    }

    /// Writes what was counted since the last flush to the outcome file, under today's UTC
    /// date. Blocking (a locked, fsynced write): call it through
    /// [`pack_client::cache::off_async`] from async code. A failed write is logged; those
    /// counts are lost, nothing else is.
    pub fn flush(&self) {
        let rows: Vec<(PackKey, OutcomeCounts)> = {
            let mut tally = self.tally.lock().unwrap_or_else(PoisonError::into_inner);
            std::mem::take(&mut tally.rows).into_iter().collect()
        };
        if rows.is_empty() {
            return;
        }
        if let Err(e) = self.log.add(time::OffsetDateTime::now_utc(), &rows) {
            tracing::warn!("outcome counts not kept: {e}");
        }
    }
}
