//! The server configuration: an optional TOML file, overridden by command-line flags.
//!
//! ```toml
//! listen = "127.0.0.1:8470"
//! data_dir = "/var/lib/packd"
//! # storage = "s3://bucket/prefix"        # instead of data_dir
//! publisher_keys = ["keys/signing.pub"]    # files (relative to this file) or inline base64 keys
//!
//! [[tokens]]
//! name = "release-ci"
//! sha256 = "…"                             # packd hash-token
//! scopes = ["publish"]
//!
//! [limits]
//! request_timeout_secs = 60
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pack_format::{FormatError, Limits, TrustedKeys};
use serde::Deserialize;

use crate::auth::{BadTokenHash, TokenConfig, Tokens};
use crate::fleet::{FleetSettings, ViewScope};
use pack_format::SigningKey;
use std::sync::Arc;

/// The default port: `127.0.0.1:8470`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8470";
/// The default data directory, relative to the working directory.
pub const DEFAULT_DATA_DIR: &str = "packd-data";

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading config {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config {path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("publisher key {entry:?}: {source}")]
    PublisherKey {
        entry: String,
        #[source]
        source: FormatError,
    },
    #[error(transparent)]
    Token(#[from] BadTokenHash),
    #[error("invalid listen address {found:?}: expected HOST:PORT such as 127.0.0.1:8470")]
    Listen { found: String },
    #[error("give either data_dir or storage, not both")]
    StorageConflict,
    #[error("[guard] {reason}")]
    Guard { reason: String },
    #[error(
        "[limits] max_watchers = {watchers} must be below max_connections = {connections}: \
         every watch holds a connection, and plain requests need some too"
    )]
    Watchers { watchers: usize, connections: usize },
}

/// The TOML file, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    pub listen: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub storage: Option<String>,
    #[serde(default)]
    pub publisher_keys: Vec<String>,
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
    #[serde(default)]
    pub limits: LimitsFile,
    #[serde(default)]
    pub fleet: FleetFile,
    #[serde(default)]
    pub guard: GuardFile,
}

/// `[guard]`: the guard key and its test; without `key` packd never signs.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardFile {
    /// The guard's minisign secret key (`packer keygen --guard`), relative to this file.
    pub key: Option<PathBuf>,
    /// A file whose first line is the key's password, if it has one.
    pub password_file: Option<PathBuf>,
    /// Seconds between looks at each watched rollout (default 300).
    pub interval_secs: Option<u64>,
    /// UTC days of outcome counts compared (default 7).
    pub window_days: Option<u32>,
    /// The chance of a false stop over a whole rollout (default 0.01).
    pub alpha: Option<f64>,
    /// The regression size the test is most sensitive to, as a rate difference (default 0.05).
    pub tau: Option<f64>,
    /// Distinct installs each side needs before any decision (default 30, at least 2).
    pub min_installs: Option<u64>,
    /// Replaced by `min_installs`: named here only to say so.
    pub min_trials: Option<toml::Value>,
}

/// `[fleet]`: every field optional; defaults in [`FleetSettings::default`].
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetFile {
    /// Count installs and accept failure reports (default true).
    pub enabled: Option<bool>,
    /// How often each node writes its counts to storage.
    pub flush_secs: Option<u64>,
    /// Client release × pack cells per channel and day (and failure cells).
    pub max_cells: Option<usize>,
    pub reports_per_install_per_hour: Option<u32>,
    /// Reports one address (IPv4, or IPv6 /64) may send per hour, per node (default 2000).
    pub reports_per_address_per_hour: Option<u32>,
    pub reports_per_second: Option<u32>,
    /// `read` (as the deployment's reads) or `publish` (publisher tokens only).
    pub view: Option<ViewScope>,
}

/// `[limits]`: every field optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    /// Largest sealed pack accepted, in bytes (at most the format's own limit).
    pub max_blob_bytes: Option<u64>,
    /// Whole-request deadline (headers to response headers, uploads included).
    pub request_timeout_secs: Option<u64>,
    /// How long a client may take to send its request headers.
    pub header_timeout_secs: Option<u64>,
    /// How long in-flight requests get to finish after SIGTERM.
    pub shutdown_grace_secs: Option<u64>,
    /// Uploads buffered in memory at once (each at most `max_blob_bytes`).
    pub max_concurrent_uploads: Option<usize>,
    /// Open connections at once.
    pub max_connections: Option<usize>,
    /// Watches (long-polls) held at once by this node; each holds a connection, so this
    /// must be below `max_connections`.
    pub max_watchers: Option<usize>,
    /// The longest wait a watch is granted, in seconds.
    pub max_watch_secs: Option<u64>,
    /// How often a watched channel's storage is checked for a newer document, in
    /// milliseconds; also how old a confirmation may be before a request checks storage
    /// itself (the staleness bound of answers from memory).
    pub watch_poll_ms: Option<u64>,
}

/// Where data lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageConfig {
    Local(PathBuf),
    S3(String),
}

/// Resolved settings the server runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    pub storage: StorageConfig,
    pub trusted_keys: TrustedKeys,
    pub tokens: Tokens,
    pub limits: Limits,
    pub max_blob_bytes: u64,
    pub request_timeout: Duration,
    pub header_timeout: Duration,
    pub shutdown_grace: Duration,
    pub max_concurrent_uploads: usize,
    pub max_connections: usize,
    pub max_watchers: usize,
    pub max_watch_wait: Duration,
    pub watch_poll: Duration,
    pub fleet: FleetSettings,
    pub guard: GuardSettings,
}

/// Default `[limits] max_connections`: room for the default watchers and plain requests.
pub const DEFAULT_MAX_CONNECTIONS: usize = 12_288;
/// Default `[limits] max_watchers`.
pub const DEFAULT_MAX_WATCHERS: usize = 10_000;
/// Default `[limits] max_watch_secs`: under the 60 s idle timeout common in load balancers
/// (AWS ALB, nginx `proxy_read_timeout`), with the sixteenth of stretch included.
pub const DEFAULT_MAX_WATCH_SECS: u64 = 50;
/// Default `[limits] watch_poll_ms`.
pub const DEFAULT_WATCH_POLL_MS: u64 = 1000;

/// Command-line overrides.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub listen: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub storage: Option<String>,
}

impl Settings {
    /// Loads `config` (if any) and applies `overrides`.
    pub fn load(config: Option<&Path>, overrides: Overrides) -> Result<Self, ConfigError> {
        let (file, base) = match config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
                let file: ConfigFile =
                    toml::from_str(&text).map_err(|source| ConfigError::Parse {
                        path: path.to_path_buf(),
                        source,
                    })?;
                (
                    file,
                    path.parent().map(Path::to_path_buf).unwrap_or_default(),
                )
            }
            None => (ConfigFile::default(), PathBuf::new()),
        };
        Self::from_file(file, &base, overrides)
    }

    /// Resolves a parsed file; relative paths in it are relative to `base`.
    pub fn from_file(
        file: ConfigFile,
        base: &Path,
        overrides: Overrides,
    ) -> Result<Self, ConfigError> {
        let listen_text = overrides
            .listen
            .or(file.listen)
            .unwrap_or_else(|| DEFAULT_LISTEN.to_string());
        let listen = listen_text
            .parse()
            .map_err(|_| ConfigError::Listen { found: listen_text })?;

        let storage = match (overrides.storage, overrides.data_dir) {
            (Some(_), Some(_)) => return Err(ConfigError::StorageConflict),
            (Some(url), None) => StorageConfig::S3(url),
            (None, Some(dir)) => StorageConfig::Local(dir),
            (None, None) => match (file.storage, file.data_dir) {
                (Some(_), Some(_)) => return Err(ConfigError::StorageConflict),
                (Some(url), None) => StorageConfig::S3(url),
                (None, Some(dir)) => StorageConfig::Local(base.join(dir)),
                (None, None) => StorageConfig::Local(PathBuf::from(DEFAULT_DATA_DIR)),
            },
        };

        let mut trusted_keys = TrustedKeys::new();
        for entry in &file.publisher_keys {
            let added = trusted_keys.add_entry(base, entry);
            added.map_err(|source| ConfigError::PublisherKey {
                entry: entry.clone(),
                source,
            })?;
        }

        let defaults = FleetSettings::default();
        let f = &file.fleet;
        let fleet = FleetSettings {
            enabled: f.enabled.unwrap_or(defaults.enabled),
            flush_interval: f
                .flush_secs
                .map_or(defaults.flush_interval, |s| Duration::from_secs(s.max(1))),
            max_cells: f.max_cells.unwrap_or(defaults.max_cells).clamp(2, 4096),
            reports_per_install_per_hour: f
                .reports_per_install_per_hour
                .unwrap_or(defaults.reports_per_install_per_hour),
            reports_per_address_per_hour: f
                .reports_per_address_per_hour
                .unwrap_or(defaults.reports_per_address_per_hour),
            reports_per_second: f.reports_per_second.unwrap_or(defaults.reports_per_second),
            view: f.view.unwrap_or(defaults.view),
        };
        let limits = Limits::default();
        let l = &file.limits;
        let max_connections = l.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS).max(1);
        let max_watchers = l
            .max_watchers
            .unwrap_or(DEFAULT_MAX_WATCHERS.min(max_connections - max_connections / 8 - 1));
        if max_watchers >= max_connections {
            return Err(ConfigError::Watchers {
                watchers: max_watchers,
                connections: max_connections,
            });
        }
        Ok(Settings {
            listen,
            storage,
            trusted_keys,
            tokens: Tokens::new(&file.tokens)?,
            max_blob_bytes: l
                .max_blob_bytes
                .unwrap_or(limits.max_sealed_len)
                .min(limits.max_sealed_len),
            limits,
            request_timeout: Duration::from_secs(l.request_timeout_secs.unwrap_or(60).max(1)),
            header_timeout: Duration::from_secs(l.header_timeout_secs.unwrap_or(15).max(1)),
            shutdown_grace: Duration::from_secs(l.shutdown_grace_secs.unwrap_or(30)),
            max_concurrent_uploads: l.max_concurrent_uploads.unwrap_or(4).max(1),
            max_connections,
            max_watchers,
            max_watch_wait: Duration::from_secs(
                l.max_watch_secs
                    .unwrap_or(DEFAULT_MAX_WATCH_SECS)
                    .clamp(1, 600),
            ),
            watch_poll: Duration::from_millis(
                l.watch_poll_ms
                    .unwrap_or(DEFAULT_WATCH_POLL_MS)
                    .clamp(50, 60_000),
            ),
            fleet,
            guard: guard_settings(&file.guard, base)?,
        })
    }
}

/// `[guard]` resolved.
#[derive(Clone)]
pub struct GuardSettings {
    /// The guard key; without it packd never signs.
    pub key: Option<Arc<SigningKey>>,
    /// How often each watched rollout is looked at.
    pub interval: Duration,
    /// The outcome window compared, in UTC days.
    pub window_days: u32,
    pub test: crate::sequential::Settings,
}

impl std::fmt::Debug for GuardSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardSettings")
            .field("key", &self.key.as_ref().map(|k| k.key_id()))
            .field("interval", &self.interval)
            .field("window_days", &self.window_days)
            .field("test", &self.test)
            .finish()
    }
}

impl Default for GuardSettings {
    fn default() -> Self {
        GuardSettings {
            key: None,
            interval: Duration::from_secs(300),
            window_days: 7,
            test: crate::sequential::Settings::default(),
        }
    }
}

fn guard_settings(file: &GuardFile, base: &Path) -> Result<GuardSettings, ConfigError> {
    let defaults = GuardSettings::default();
    let bad = |reason: String| ConfigError::Guard { reason };
    let key = match &file.key {
        None => None,
        Some(path) => {
            let path = base.join(path);
            let password = match &file.password_file {
                None => None,
                Some(file) => {
                    let file = base.join(file);
                    let text = std::fs::read_to_string(&file)
                        .map_err(|e| bad(format!("password_file {}: {e}", file.display())))?;
                    Some(text.lines().next().unwrap_or_default().to_string())
                }
            };
            let key = SigningKey::load(&path, password.as_deref())
                .map_err(|e| bad(format!("key: {e}")))?;
            Some(Arc::new(key))
        }
    };
    if file.min_trials.is_some() {
        return Err(bad(
            "min_trials is replaced by min_installs: the guard counts distinct installs, not \
             tool calls, since one sender can claim any number of calls (docs/ROLLOUTS.md, \
             \"Evidence\"); write min_installs = 30 or another number of installs"
                .to_string(),
        ));
    }
    let alpha = file.alpha.unwrap_or(defaults.test.alpha);
    if !(alpha > 0.0 && alpha < 0.5) {
        return Err(bad(format!(
            "alpha must be above 0 and below 0.5, found {alpha}"
        )));
    }
    let tau = file.tau.unwrap_or(defaults.test.tau);
    if !(tau > 0.0 && tau <= 1.0) {
        return Err(bad(format!(
            "tau must be above 0 and at most 1, found {tau}"
        )));
    }
    Ok(GuardSettings {
        key,
        interval: file.interval_secs.map_or(defaults.interval, |s| {
            Duration::from_secs(s.clamp(1, 86_400))
        }),
        window_days: file
            .window_days
            .unwrap_or(defaults.window_days)
            .clamp(1, crate::fleet::MAX_WINDOW_DAYS),
        test: crate::sequential::Settings {
            alpha,
            tau,
            min_installs: file
                .min_installs
                .unwrap_or(defaults.test.min_installs)
                .max(2),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_config_listens_on_loopback_and_stores_on_disk() {
        let s = Settings::from_file(ConfigFile::default(), Path::new(""), Overrides::default())
            .unwrap();
        assert_eq!(s.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(
            s.storage,
            StorageConfig::Local(PathBuf::from(DEFAULT_DATA_DIR))
        );
        assert!(s.trusted_keys.is_empty());
        assert!(!s.tokens.reads_need_token());
    }

    /// The settings of a config file of `text` alone, or why it does not parse.
    fn settings_of(text: &str) -> Result<Settings, toml::de::Error> {
        let file: ConfigFile = toml::from_str(text)?;
        Ok(Settings::from_file(file, Path::new(""), Overrides::default()).unwrap())
    }

    /// Settings of the serving machinery that is gone: a file still naming one is refused
    /// with the key's name, instead of starting a node that quietly ignores it.
    #[test]
    fn removed_serving_settings_are_refused_by_name() {
        for (text, key) in [
            ("pin_accept_loops = false", "pin_accept_loops"),
            ("blob_send = \"sendfile\"", "blob_send"),
        ] {
            let err = settings_of(text).unwrap_err().to_string();
            assert!(err.contains(key) && err.contains("unknown field"), "{err}");
        }
    }

    #[test]
    fn file_is_parsed_and_flags_win() {
        let dir = tempfile::tempdir().unwrap();
        let key = pack_format::SigningKey::generate(None).unwrap();
        std::fs::write(dir.path().join("signing.pub"), &key.public_file).unwrap();
        let text = format!(
            r#"
listen = "127.0.0.1:9000"
data_dir = "data"
publisher_keys = ["signing.pub"]
[[tokens]]
sha256 = "{}"
scopes = ["publish"]
[limits]
max_blob_bytes = 1000
"#,
            crate::auth::hash_token("t")
        );
        let file: ConfigFile = toml::from_str(&text).unwrap();
        let s = Settings::from_file(
            file,
            dir.path(),
            Overrides {
                listen: Some("127.0.0.1:0".into()),
                ..Overrides::default()
            },
        )
        .unwrap();
        assert_eq!(s.listen.port(), 0);
        assert_eq!(s.storage, StorageConfig::Local(dir.path().join("data")));
        assert_eq!(s.trusted_keys.ids(), vec![key.key.key_id().as_str()]);
        assert_eq!(s.max_blob_bytes, 1000);
    }

    #[test]
    fn watchers_must_leave_connections_for_plain_requests() {
        let file: ConfigFile =
            toml::from_str("[limits]\nmax_connections = 100\nmax_watchers = 100\n").unwrap();
        let err = Settings::from_file(file, Path::new(""), Overrides::default()).unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::Watchers {
                    watchers: 100,
                    connections: 100
                }
            ),
            "{err}"
        );
        // Without max_watchers, a smaller max_connections lowers the default watchers.
        let file: ConfigFile = toml::from_str("[limits]\nmax_connections = 800\n").unwrap();
        let s = Settings::from_file(file, Path::new(""), Overrides::default()).unwrap();
        assert_eq!(s.max_watchers, 699);
    }

    #[test]
    fn the_guard_counts_installs_and_says_min_trials_is_replaced() {
        let file: ConfigFile = toml::from_str("[guard]\nmin_installs = 50\n").unwrap();
        let s = Settings::from_file(file, Path::new(""), Overrides::default()).unwrap();
        assert_eq!(s.guard.test.min_installs, 50);
        let file: ConfigFile = toml::from_str("[guard]\nmin_trials = 300\n").unwrap();
        let err = Settings::from_file(file, Path::new(""), Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("min_installs"), "{err}");
        let file: ConfigFile =
            toml::from_str("[fleet]\nreports_per_address_per_hour = 7\n").unwrap();
        let s = Settings::from_file(file, Path::new(""), Overrides::default()).unwrap();
        assert_eq!(s.fleet.reports_per_address_per_hour, 7);
    }

    #[test]
    fn unknown_fields_are_refused() {
        assert!(toml::from_str::<ConfigFile>("listn = \"x\"").is_err());
    }
}
