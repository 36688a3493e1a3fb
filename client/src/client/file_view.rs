//! Keeping the file view (when the config turns it on) in step with what the store serves.

use super::*;

/// What this process last did to the file view.
#[derive(Debug, Default)]
pub(super) struct FilesState {
    /// SHA-256 of the pack whose directory this process last made the link name.
    pub(super) published: Option<String>,
    pub(super) error: Option<String>,
    /// What the last projection into the configured targets placed and refused.
    pub(super) projection: Option<crate::targets::Projection>,
}

impl Client {
    /// The file view, when the config turns it on.
    pub fn file_view(&self) -> Option<&FileView> {
        self.files.as_ref()
    }

    /// Brings the file view (when on) up to date with what the store serves now, then
    /// removes version directories out of their grace period. Blocking disk work, run at
    /// start-up, after every refresh and periodically by [`crate::schedule::start`]. A failure is
    /// logged, kept for the status and told to listeners once; serving is not affected and
    /// the link keeps naming what it named.
    pub fn sync_files(&self) {
        self.sync_view();
        self.project_targets();
    }

    /// Projects what the view's link (and the links of the `before` caches) name into the
    /// configured targets. A path refused or failed keeps what it had; a new refusal is
    /// told to listeners once, like a failed refresh, and the status lists it.
    fn project_targets(&self) {
        let (Some(view), false) = (&self.files, self.config.targets.is_empty()) else {
            return;
        };
        let absolute = |p: std::path::PathBuf| std::path::absolute(&p).unwrap_or(p);
        // Another channel's cache is named by its directory (its own config may differ).
        let other = |cache: &std::path::PathBuf| crate::targets::PackSource {
            channel: cache
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
            link: absolute(
                cache
                    .join(crate::files::FILES_DIR)
                    .join(crate::config::DEFAULT_FILES_LINK),
            ),
        };
        let sources: Vec<crate::targets::PackSource> = (self.config.targets_before.iter())
            .map(other)
            .chain([crate::targets::PackSource {
                channel: self.config.label().to_string(),
                link: absolute(view.link_path()),
            }])
            .chain(self.config.targets_after.iter().map(other))
            .collect();
        let record = (self.config.targets_record.clone())
            .unwrap_or_else(|| self.config.cache_dir.join(crate::targets::RECORD));
        let projection = crate::targets::project(&self.config.targets, &sources, &record);
        let mut files = lock(&self.files_state);
        let before = files.projection.as_ref().map(|p| &p.refused);
        if before != Some(&projection.refused) {
            for refused in &projection.refused {
                let error = format!("target {}: {}", refused.path.display(), refused.reason);
                tracing::warn!("{error}");
                self.activity.emit(Event::FilesFailed { error });
            }
        }
        files.projection = Some(projection);
    }

    /// What the last projection placed and refused, `None` before the first or without targets.
    pub fn projection(&self) -> Option<crate::targets::Projection> {
        lock(&self.files_state).projection.clone()
    }

    fn sync_view(&self) {
        let Some(view) = &self.files else {
            return;
        };
        let mut files = lock(&self.files_state);
        let snapshot = self.store.capture();
        let now = std::time::SystemTime::now();
        // The link still names what this process published (nobody removed the view):
        // only the sweep is due.
        let linked = std::fs::read_link(view.link_path())
            .is_ok_and(|dir| dir == Path::new(&crate::files::dir_name(snapshot.meta())));
        if files.error.is_none() && files.published.as_deref() == Some(snapshot.sha256()) && linked
        {
            if let Err(e) = view.sweep(now) {
                tracing::warn!("{e}");
            }
            return;
        }
        // A process whose state is older than the one on disk (another process installed
        // meanwhile) must not move the link back: that process publishes what it installed.
        let held = lock(&self.state).sequence;
        let (cache, channel) = (&self.cache, &self.config.channel);
        let still_current = || match cache.load_state() {
            Ok(Some(disk)) => disk.channel != *channel || disk.sequence <= held,
            Ok(None) | Err(_) => true,
        };
        match view.publish(&snapshot, now, still_current) {
            Ok(Published::Current { dir, moved }) => {
                let recovered = files.error.take().is_some();
                files.published = Some(snapshot.sha256().to_string());
                if moved || recovered {
                    tracing::info!("file view {} -> {dir}", view.link_path().display());
                    self.activity.emit(Event::FilesPublished {
                        link: view.link_path().display().to_string(),
                        dir,
                    });
                }
            }
            Ok(Published::Superseded) => {
                tracing::debug!("file view left to the process that wrote the newer state");
            }
            Err(e) => {
                let error = e.to_string();
                tracing::warn!("{error}");
                if files.error.as_deref() != Some(&error) {
                    self.activity.emit(Event::FilesFailed {
                        error: error.clone(),
                    });
                }
                files.error = Some(error);
            }
        }
    }
}
