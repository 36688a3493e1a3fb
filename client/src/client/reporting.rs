//! Failure reports a refused refresh calls for, queued in the cache and sent to packd
//! (reason codes only, see [`crate::report`]).

use super::*;

impl Client {
    /// Queues the failure report a refused refresh calls for, if any.
    pub(super) async fn report_refusal(&self, error: &ClientError) {
        let Some(outbox) = &self.outbox else {
            return;
        };
        let considered = lock(&self.considering).clone();
        let serving = {
            let snapshot = self.store.capture();
            match snapshot.source() {
                Source::Remote => snapshot.sha256().to_string(),
                Source::Builtin => headers::INSTALLED_BUILTIN.to_string(),
            }
        };
        let (pack, reason) = match error {
            ClientError::HashMismatch { expected, .. } => {
                (expected.clone(), ReportReason::HashMismatch)
            }
            ClientError::Pack(FormatError::UnknownContentKey { .. })
            | ClientError::Pack(FormatError::WrongContentKey { .. }) => {
                (considered.unwrap_or(serving), ReportReason::ContentKey)
            }
            ClientError::Pack(_) | ClientError::Snapshot(_) => {
                (considered.unwrap_or(serving), ReportReason::InvalidPack)
            }
            ClientError::IncompatibleSchema { .. } => (
                considered.unwrap_or(serving),
                ReportReason::IncompatibleSchema,
            ),
            ClientError::HeaderMismatch { .. } => {
                (considered.unwrap_or(serving), ReportReason::HeaderMismatch)
            }
            ClientError::Document(FormatError::Expired { .. }) => (serving, ReportReason::Expired),
            // Transport trouble, refused documents (a mirror's doing, not the publisher's
            // rollout), packs refused before and the client's own state: nothing to report.
            ClientError::NoServer
            | ClientError::Http { .. }
            | ClientError::Status { .. }
            | ClientError::BodyTooLong { .. }
            | ClientError::Truncated { .. }
            | ClientError::Deadline { .. }
            | ClientError::Busy { .. }
            | ClientError::Document(_)
            | ClientError::UntrustedKey { .. }
            | ClientError::WrongChannel { .. }
            | ClientError::WrongPack { .. }
            | ClientError::Rollback { .. }
            | ClientError::Equivocation { .. }
            | ClientError::KnownBad { .. }
            | ClientError::Cache { .. }
            | ClientError::Config { .. }
            | ClientError::NotMarked { .. }
            | ClientError::Builtin { .. }
            | ClientError::Worker { .. } => return,
        };
        let outbox = outbox.clone();
        if let Err(e) = blocking(move || outbox.queue(&pack, reason)).await {
            tracing::warn!("could not queue a failure report: {e}");
        }
    }

    /// Whether failure reports wait to be sent (telemetry on, a server configured).
    pub fn reports_due(&self, now: OffsetDateTime) -> bool {
        self.config.server.is_some() && self.outbox.as_ref().is_some_and(|o| o.due(now))
    }

    /// Failure reports waiting to be sent, oldest first (none with telemetry off).
    pub fn pending_reports(&self) -> Vec<pack_protocol::FailureReport> {
        self.outbox.as_ref().map_or_else(Vec::new, |o| o.pending())
    }

    /// Sends the failure reports that wait (see [`crate::report`]).
    pub async fn send_reports(&self) -> Result<SendOutcome, ClientError> {
        let (Some(outbox), Some(server), Some(install)) = (
            self.outbox.clone(),
            self.config.server.clone(),
            self.install_hash.clone(),
        ) else {
            return Ok(SendOutcome::default());
        };
        Ok(outbox.send(self.transport(), &server, &install).await)
    }

    /// Resolves when a failure report is queued in this process (never with telemetry off):
    /// long-running processes send it then rather than at the next refresh.
    pub async fn report_queued(&self) {
        match &self.outbox {
            Some(outbox) => outbox.queued().await,
            None => std::future::pending().await,
        }
    }
}
