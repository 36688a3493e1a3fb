//! What a client serves and how its refreshes went: [`Client::status`] and its parts.

use super::*;

/// What the client serves and how its last refresh went.
#[derive(Debug, Clone, Serialize)]
pub struct ClientStatus {
    pub serving: SnapshotMeta,
    /// The channel's name among the channels of one config (`[[channels]] name`); absent
    /// for a config of one channel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub channel: String,
    pub server: Option<String>,
    pub sequence: u64,
    pub auto_update: bool,
    pub pin: Option<String>,
    pub install_id: String,
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_check: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_success: Option<OffsetDateTime>,
    pub last_outcome: Option<RefreshOutcome>,
    /// Why the last refresh or the start-up load failed, if nothing succeeded since: this
    /// process's, else the last failure any process sharing the cache recorded.
    pub last_error: Option<String>,
    /// The last failed refresh or start-up load of any process sharing the cache, even when
    /// a success followed.
    pub last_failure: Option<FailureRecord>,
    /// The client release channel entries are matched against.
    pub release: String,
    /// Why the built-in pack serves although a channel document is held, if it does.
    pub serving_reason: Option<String>,
    /// Packs refused after their bytes matched the signed hash, not downloaded again until
    /// the mark is lifted (a content-key mark lifts when the content keys change), and
    /// packs marked bad here after failing to render (`reason: render`).
    pub bad_packs: Vec<RefusedPack>,
    /// Whether the install hash and failure reports are sent.
    pub telemetry: bool,
    /// Failure reports waiting to be sent.
    pub pending_reports: usize,
    /// The file view, when the config turns it on.
    pub files: Option<FilesStatus>,
    /// Every path projected into a coding agent's places, with the pack version it shows,
    /// and every path refused with its reason; `None` without `[targets]`.
    pub targets: Option<crate::targets::Projection>,
}

/// The file view's state, for [`ClientStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FilesStatus {
    /// The link readers resolve (`<cache>/files/<link>`).
    pub link: String,
    /// The version directory it names now, resolved; `None` before the first publish.
    pub dir: Option<String>,
    /// Why this process could not bring the view up to date, if its last try failed.
    pub error: Option<String>,
}

/// A failure as the cache recorded it, for [`ClientStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailureRecord {
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// The release of the process that failed.
    pub release: String,
    /// A stable name for the kind of failure (`ClientError::kind`).
    pub kind: String,
    pub message: String,
    /// Whether a refresh succeeded after it (the client repaired what failed, or the cause
    /// went away): then it is history, not why anything serves now.
    pub resolved: bool,
}

impl FailureRecord {
    /// `KIND, release RELEASE): MESSAGE` and, when a later refresh succeeded (at
    /// `succeeded_at`, as the caller writes times), that it is resolved: the part of a status
    /// line after the failure's time and an opening parenthesis.
    pub fn summary(&self, succeeded_at: &str) -> String {
        let resolved = if self.resolved {
            format!("; resolved: the refresh at {succeeded_at} succeeded")
        } else {
            String::new()
        };
        format!(
            "{}, release {}): {}{resolved}",
            self.kind, self.release, self.message
        )
    }
}

/// One bad-pack mark, for [`ClientStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusedPack {
    pub sha256: String,
    pub reason: BadReason,
    pub detail: String,
}

impl Client {
    pub fn status(&self) -> ClientStatus {
        let state = lock(&self.state).clone();
        let ts = |t: Option<i64>| t.and_then(|t| OffsetDateTime::from_unix_timestamp(t).ok());
        let record = self.activity.record();
        let last_failure = record.last_failure.and_then(|f| {
            Some(FailureRecord {
                at: OffsetDateTime::from_unix_timestamp(f.at).ok()?,
                release: f.release,
                kind: f.kind,
                message: f.message,
                // Records written before the flag: a success in a later second.
                resolved: f.resolved || state.last_success.is_some_and(|s| s > f.at),
            })
        });
        // Another process's failure counts while nothing succeeded after it.
        let last_error = lock(&self.last_error).clone().or_else(|| {
            let failure = last_failure.as_ref()?;
            (!failure.resolved).then(|| failure.message.clone())
        });
        ClientStatus {
            serving: self.store.capture().meta().clone(),
            name: self.config.name.clone(),
            channel: self.config.channel.clone(),
            server: self.config.server.clone(),
            sequence: state.sequence,
            auto_update: self.config.auto_update,
            pin: self.config.pin.as_ref().map(ToString::to_string),
            install_id: self.install_id.clone(),
            last_check: ts(state.last_check),
            last_success: ts(state.last_success),
            last_outcome: lock(&self.last_outcome).clone(),
            last_error,
            last_failure,
            release: self.config.client_version.to_string(),
            serving_reason: lock(&self.serving_reason).clone(),
            bad_packs: state
                .bad
                .iter()
                .map(|(sha256, mark)| RefusedPack {
                    sha256: sha256.clone(),
                    reason: mark.reason,
                    detail: mark.detail.clone(),
                })
                .chain(self.health.marked().into_keys().map(|sha256| RefusedPack {
                    sha256,
                    reason: BadReason::Render,
                    detail: self.health.detail(),
                }))
                .collect(),
            telemetry: self.config.telemetry,
            pending_reports: self.outbox.as_ref().map_or(0, |o| o.pending().len()),
            files: self.files.as_ref().map(|view| FilesStatus {
                link: std::path::absolute(view.link_path())
                    .unwrap_or_else(|_| view.link_path())
                    .display()
                    .to_string(),
                dir: view.resolve().map(|dir| dir.display().to_string()),
                error: lock(&self.files_state).error.clone(),
            }),
            targets: self.projection(),
        }
    }

    /// The ETag of the accepted channel document: what a watch waits to see change.
    pub fn accepted_etag(&self) -> Option<String> {
        lock(&self.state).etag.clone()
    }

    /// The channel sequence of the accepted document (0 before any): what a watch holds.
    pub fn accepted_sequence(&self) -> u64 {
        lock(&self.state).sequence
    }

    /// Seconds since the last successful check, `None` if there never was one.
    pub fn since_last_success(&self, now: OffsetDateTime) -> Option<Duration> {
        let last = lock(&self.state).last_success?;
        // `last` comes from the state file: saturate rather than trust it.
        Some(Duration::from_secs(
            u64::try_from(now.unix_timestamp().saturating_sub(last)).unwrap_or(0),
        ))
    }
}
