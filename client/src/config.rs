//! Client configuration: where to refresh from, what to trust, and what the user chose
//! (auto-update, a local pin).

use std::path::{Path, PathBuf};
use std::time::Duration;

use pack_format::{ContentKey, ContentKeyRing, Limits, TrustedKeys};
use serde::{Deserialize, Serialize};

use crate::ClientError;
use crate::clock::Clock;

/// Everything a [`crate::Client`] needs.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Base URL of packd, e.g. `http://127.0.0.1:8470`. `None`: never refresh.
    pub server: Option<String>,
    pub channel: String,
    /// The pack name the channel must be for.
    pub pack: String,
    pub auto_update: bool,
    /// Long-running processes watch the channel (a long-poll on packd) and refresh as soon
    /// as it changes; the six-hour schedule stays the floor. Only with `auto_update`.
    pub watch: bool,
    /// Stay on this pack version: refreshes install nothing else.
    pub pin: Option<semver::Version>,
    pub trusted_keys: TrustedKeys,
    pub content_keys: ContentKeyRing,
    /// This client release, matched against channel entry ranges.
    pub client_version: semver::Version,
    /// Where installed packs and the state file live.
    pub cache_dir: PathBuf,
    pub connect_timeout: Duration,
    /// The whole refresh (channel, signature, pack) must finish within this.
    pub deadline: Duration,
    /// Attempts per request for transient failures (network errors, 429, 5xx).
    pub attempts: u32,
    /// First retry delay; doubles each time, each pause drawn between it and twice it, always
    /// under 30 s ([`pack_protocol::retry::Backoff`]).
    pub backoff: Duration,
    pub limits: Limits,
    /// Share usage with the server: the install hash on requests (the fleet view) and
    /// failure reports. `[updates] telemetry = false`, or `DO_NOT_TRACK=1` in the
    /// environment, turns both off. Nothing else changes: refreshes, verification and the
    /// device-side rollback work the same.
    pub telemetry: bool,
    /// A remote pack whose templates fail to render this many times in a row on this device
    /// is marked bad here, and the built-in pack serves until the mark is cleared or the
    /// channel offers other bytes.
    pub mark_bad_after_failures: u32,
    /// The file view (`[files]` in the config file, see [`crate::files`]): a read-only
    /// directory per pack version under `<cache>/files/` and a link to the one that serves,
    /// for agents that read their prompts from files. `None`: off (the default).
    pub files: Option<FilesConfig>,
    /// Coding agents the served pack is projected into (`[targets.claude-code]`,
    /// `[targets.codex]`, `[targets.opencode]`, see [`crate::targets`]). Any target turns the
    /// file view on: the projected links go through its link.
    pub targets: Vec<Target>,
    /// Other channels' caches whose packs are projected with this one, before it (the
    /// organisation's before the team's): `[targets] before = ["../org-cache"]`. Each is a
    /// pack-client cache of its own, with its own config, keys, pin and rollout.
    pub targets_before: Vec<PathBuf>,
    /// Other channels' caches projected after this one (`[targets] after = [...]`). Every
    /// channel's pack-client may list the same targets with the others before and after it
    /// in one order: whichever installs then projects the whole combination.
    pub targets_after: Vec<PathBuf>,
    /// Where the record of projected files is kept (see [`TARGETS_RECORD`]); `None`:
    /// in this cache. The channels of one config share one, at the top of the `--cache`
    /// directory, since they project into the same places.
    pub targets_record: Option<PathBuf>,
    /// This channel's name among the channels of one config (`[[channels]] name`), which
    /// its cache directory (`<cache>/channels/<name>`) and the projected files' origins
    /// (`name:key@version`) carry; `None` for a config of one channel, named by `channel`.
    pub name: Option<String>,
    /// The pack that serves when nothing else can, read from this directory when the client
    /// opens (`[updates] builtin_dir`, checked as `packs/builtin` is at build time, see
    /// [`crate::builtin::from_dir`]) instead of the one compiled in: for an app whose
    /// bundled prompts are not ours, such as a third-party agent reading the file view.
    pub builtin_dir: Option<PathBuf>,
    /// The contract this app's packs must satisfy (`[updates] contract`; by default the
    /// agent's, or the app contract `builtin_dir` ships as `contract.json`): packs of
    /// another kind are refused, and the built-in directory is held to it.
    pub contract: crate::accepts::Accepts,
    /// A row of today's outcome counts goes to the server at most this often, and only when
    /// it changed (`[updates] outcomes_interval_secs`, see [`crate::outcomes`]).
    pub outcomes_interval: Duration,
    /// The wall clock the client decides by (expiry, ramps, check times): the system clock,
    /// or one a test moves (see [`crate::clock`]).
    pub clock: Clock,
    /// The file the settings came from, named by errors whose fix is a setting (`server`,
    /// `channel`, `trusted_keys`). `None`: the defaults, or a config the caller built.
    pub config_path: Option<PathBuf>,
}

/// The agents a pack can be projected for.
/// Named as the layout table names them (`claude-code`, `codex`, `opencode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Agent {
    #[serde(rename = "claude-code")]
    Claude,
    #[serde(rename = "codex")]
    Codex,
    #[serde(rename = "opencode")]
    OpenCode,
}

impl Agent {
    /// The same agent in the layout table ([`pack_contract::layout`]).
    pub fn layout(self) -> pack_contract::layout::Target {
        use pack_contract::layout::Target;
        match self {
            Agent::Claude => Target::ClaudeCode,
            Agent::Codex => Target::Codex,
            Agent::OpenCode => Target::OpenCode,
        }
    }
}

impl std::fmt::Display for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.layout().name())
    }
}

/// One agent's places: its user directory (`~/.claude`, `$CODEX_HOME`,
/// `~/.config/opencode`) and, when set, its machine directory (`/etc/claude-code`,
/// `/etc/codex`), where the managed files go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub agent: Agent,
    pub user_dir: PathBuf,
    pub machine_dir: Option<PathBuf>,
}

/// Where the file view's link is and how long a version stays after it stops serving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilesConfig {
    /// The link's name under `<cache>/files/` (default `current`).
    pub link: String,
    /// How long a version directory stays on disk after the link stops naming it: a reader
    /// that resolved the link just before the swap reads it whole if its request takes less.
    pub grace: Duration,
}

impl Default for FilesConfig {
    fn default() -> Self {
        FilesConfig {
            link: DEFAULT_FILES_LINK.to_string(),
            grace: DEFAULT_FILES_GRACE,
        }
    }
}

/// The default of [`FilesConfig::link`].
pub const DEFAULT_FILES_LINK: &str = "current";
/// The default of [`FilesConfig::grace`]: ten minutes.
pub const DEFAULT_FILES_GRACE: Duration = Duration::from_secs(10 * 60);
/// The longest grace period a config may ask for (a week).
pub const MAX_FILES_GRACE: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// The default of [`ClientConfig::mark_bad_after_failures`].
pub const MARK_BAD_AFTER_FAILURES: u32 = 3;

/// Whether the environment asks for no telemetry (`DO_NOT_TRACK` set to anything but empty
/// or `0`, the consoledonottrack.com convention).
pub fn do_not_track() -> bool {
    std::env::var("DO_NOT_TRACK").is_ok_and(|v| !v.trim().is_empty() && v.trim() != "0")
}

impl ClientConfig {
    /// Defaults for `cache_dir`: no server, channel `stable`, pack `builtin`, auto-update on,
    /// the compiled-in keys (if the build had any), 5 s connect, 60 s deadline, 3 attempts.
    pub fn new(cache_dir: impl Into<PathBuf>, client_version: semver::Version) -> Self {
        ClientConfig {
            server: None,
            channel: "stable".to_string(),
            pack: "builtin".to_string(),
            auto_update: true,
            watch: true,
            pin: None,
            trusted_keys: compiled_in_trusted_keys(),
            content_keys: compiled_in_content_keys(),
            client_version,
            cache_dir: cache_dir.into(),
            connect_timeout: Duration::from_secs(5),
            deadline: Duration::from_secs(60),
            attempts: 3,
            backoff: Duration::from_millis(250),
            limits: Limits::DEFAULT,
            telemetry: !do_not_track(),
            mark_bad_after_failures: MARK_BAD_AFTER_FAILURES,
            files: None,
            targets: Vec::new(),
            targets_before: Vec::new(),
            targets_after: Vec::new(),
            targets_record: None,
            name: None,
            builtin_dir: None,
            contract: crate::accepts::Accepts::Agent,
            outcomes_interval: crate::policy::PROVISIONAL_INTERVAL,
            clock: Clock::system(),
            config_path: None,
        }
    }

    /// Where a setting is changed, for an error's fix: `client.toml` (the file it was loaded
    /// from, as it was given), or `the client config` when there is none.
    pub fn config_name(&self) -> String {
        self.config_path.as_ref().map_or_else(
            || "the client config".to_string(),
            |path| path.display().to_string(),
        )
    }

    /// Reads a TOML config file of one channel on top of the defaults. Paths in it are
    /// relative to the file's directory. A file naming several channels (`[[channels]]`) is
    /// refused: [`ClientConfig::load_channels`] reads those.
    pub fn load(
        path: &Path,
        cache_dir: PathBuf,
        client_version: semver::Version,
    ) -> Result<Self, ClientError> {
        let mut configs = Self::load_channels(path, cache_dir, client_version)?;
        match (configs.pop(), configs.is_empty()) {
            (Some(config), true) if config.name.is_none() => Ok(config),
            (Some(_) | None, _) => Err(ClientError::Config {
                path: path.display().to_string(),
                reason: "it names channels ([[channels]]), which only `pack-client` follows; \
                         give this program a config of one channel (an [updates] table)"
                    .to_string(),
            }),
        }
    }

    /// Reads a TOML config file: one config per channel it follows, in its order (the
    /// organisation's first). A file without `[[channels]]` is one channel, read as it always
    /// was, its cache `cache_dir`. With `[[channels]]`, `[updates]` holds what every channel
    /// shares, each `[[channels]]` table (a `name` and the keys of `[updates]`) what is its
    /// own, and each channel's cache is `<cache_dir>/channels/<name>`; the `[targets]` they
    /// project into combine every channel in order.
    pub fn load_channels(
        path: &Path,
        cache_dir: PathBuf,
        client_version: semver::Version,
    ) -> Result<Vec<Self>, ClientError> {
        let bad = |reason: String| ClientError::Config {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let file: ClientFile = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let channels = file
            .channels
            .into_iter()
            .enumerate()
            .map(|(i, table)| ChannelSection::parse(i, table))
            .collect::<Result<Vec<_>, String>>()
            .map_err(bad)?;
        if let Some(twice) = channels
            .iter()
            .enumerate()
            .find(|(i, c)| channels[..*i].iter().any(|o| o.name == c.name))
        {
            return Err(bad(format!(
                "[[channels]]: the name {:?} is given twice; each channel needs its own (its cache is channels/<name>)",
                twice.1.name
            )));
        }
        let one = |cache_dir: PathBuf, own: Option<UpdatesSection>| -> Result<Self, String> {
            let mut config = ClientConfig::new(cache_dir, client_version.clone());
            config.config_path = Some(path.to_path_buf());
            // The shared [updates] table, parsed again for each channel (it owns no state).
            let shared: ClientFile = toml::from_str(&text).map_err(|e| e.to_string())?;
            ConfigFile {
                updates: shared.updates,
            }
            .apply(base, &mut config)?;
            if let Some(own) = own {
                ConfigFile { updates: own }.apply(base, &mut config)?;
            }
            if let Some(files) = shared.files {
                config.files = files.apply().map_err(|e| format!("[files]: {e}"))?;
            }
            if let Some(targets) = shared.targets {
                targets
                    .apply(base, &mut config)
                    .map_err(|e| format!("[targets]: {e}"))?;
            }
            Ok(config)
        };
        if channels.is_empty() {
            return Ok(vec![one(cache_dir, None).map_err(bad)?]);
        }
        let caches: Vec<PathBuf> = channels
            .iter()
            .map(|c| cache_dir.join(CHANNELS_DIR).join(&c.name))
            .collect();
        let mut configs = Vec::new();
        for (i, channel) in channels.into_iter().enumerate() {
            let name = channel.name;
            let mut config = one(caches[i].clone(), Some(channel.updates))
                .map_err(|e| bad(format!("channel {name:?}: {e}")))?;
            // The other channels, in order around this one: whichever installs projects
            // the whole combination, through the same record.
            let before = std::mem::take(&mut config.targets_before);
            config.targets_before = before
                .into_iter()
                .chain(caches[..i].iter().cloned())
                .collect();
            let after = std::mem::take(&mut config.targets_after);
            config.targets_after = caches[i + 1..].iter().cloned().chain(after).collect();
            config.targets_record = Some(cache_dir.join(TARGETS_RECORD));
            config.name = Some(name);
            configs.push(config);
        }
        Ok(configs)
    }

    /// The name the channel goes by in this config: its `[[channels]]` name, or `channel`.
    pub fn label(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.channel)
    }
}

/// The record of what a projection into the targets placed, under a cache (see
/// [`crate::targets`]).
pub const TARGETS_RECORD: &str = "targets.json";

/// The directory under the `--cache` directory that holds one cache per channel of a
/// config with `[[channels]]`.
pub const CHANNELS_DIR: &str = "channels";

/// One `[[channels]]` table: `name`, then any key of `[updates]`.
struct ChannelSection {
    name: String,
    updates: UpdatesSection,
}

impl ChannelSection {
    fn parse(index: usize, mut table: toml::Table) -> Result<Self, String> {
        let at = format!("[[channels]] number {}", index + 1);
        let name = match table.remove("name") {
            Some(toml::Value::String(name)) => name,
            Some(other) => {
                return Err(format!(
                    "{at}: name must be a string, found {}",
                    other.type_str()
                ));
            }
            None => {
                return Err(format!(
                    "{at}: no name; add one such as name = \"org\" (its cache is channels/<name>)"
                ));
            }
        };
        pack_format::validate_name("channel name", &name).map_err(|e| format!("{at}: {e}"))?;
        let updates = toml::Value::Table(table)
            .try_into()
            .map_err(|e| format!("{at} ({name}): {e}"))?;
        Ok(ChannelSection { name, updates })
    }
}

/// A `pack-client` config file: the `[updates]` table every client reads, and the
/// `[files]` table of the file view. (The agent reads `[updates]` out of its own config
/// through [`ConfigFile`].)
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientFile {
    #[serde(default)]
    updates: UpdatesSection,
    files: Option<FilesSection>,
    targets: Option<TargetsSection>,
    /// `[[channels]]`: the channels one client follows, in order (see
    /// [`ClientConfig::load_channels`]).
    #[serde(default)]
    channels: Vec<toml::Table>,
}

/// The `[targets]` table: one sub-table per agent the pack is projected into.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetsSection {
    /// Caches of other channels projected before this one (see
    /// [`ClientConfig::targets_before`]).
    #[serde(default)]
    pub before: Vec<String>,
    /// Caches of other channels projected after this one.
    #[serde(default)]
    pub after: Vec<String>,
    #[serde(rename = "claude-code")]
    pub claude: Option<TargetSection>,
    pub codex: Option<TargetSection>,
    pub opencode: Option<TargetSection>,
}

/// `[targets.<agent>]`: where the agent's user files and (optionally) its managed files are.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSection {
    pub enabled: Option<bool>,
    /// Default: `$CLAUDE_CONFIG_DIR` or `~/.claude`; `$CODEX_HOME` or `~/.codex`;
    /// `$XDG_CONFIG_HOME/opencode` or `~/.config/opencode`.
    pub user_dir: Option<String>,
    /// The machine-wide directory of managed files (`/etc/claude-code`, `/etc/codex`); unset:
    /// no managed files are projected.
    pub machine_dir: Option<String>,
}

impl TargetsSection {
    fn apply(self, base: &Path, config: &mut ClientConfig) -> Result<(), String> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let path = |text: &str| -> Result<PathBuf, String> {
            match text.strip_prefix("~/") {
                Some(rest) => home
                    .as_ref()
                    .map(|h| h.join(rest))
                    .ok_or_else(|| format!("{text:?} starts with ~/ but HOME is not set")),
                None => Ok(base.join(text)),
            }
        };
        let env_dir = |var: &str, under_home: &str| -> Result<PathBuf, String> {
            match std::env::var_os(var).filter(|v| !v.is_empty()) {
                Some(dir) => Ok(PathBuf::from(dir)),
                None => path(&format!("~/{under_home}")),
            }
        };
        let tables = [
            (Agent::Claude, self.claude),
            (Agent::Codex, self.codex),
            (Agent::OpenCode, self.opencode),
        ];
        for (agent, table) in tables {
            let Some(table) = table else { continue };
            if table.enabled == Some(false) {
                continue;
            }
            let user_dir = match &table.user_dir {
                Some(dir) => path(dir)?,
                None => match agent {
                    Agent::Claude => env_dir("CLAUDE_CONFIG_DIR", ".claude")?,
                    Agent::Codex => env_dir("CODEX_HOME", ".codex")?,
                    Agent::OpenCode => match std::env::var_os("XDG_CONFIG_HOME") {
                        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("opencode"),
                        _ => path("~/.config/opencode")?,
                    },
                },
            };
            let machine_dir = table.machine_dir.as_deref().map(path).transpose()?;
            config.targets.push(Target {
                agent,
                user_dir: std::path::absolute(&user_dir).unwrap_or(user_dir),
                machine_dir: machine_dir.map(|d| std::path::absolute(&d).unwrap_or(d)),
            });
        }
        for dir in self.before {
            config.targets_before.push(path(&dir)?);
        }
        for dir in self.after {
            config.targets_after.push(path(&dir)?);
        }
        if !config.targets.is_empty() && config.files.is_none() {
            config.files = Some(FilesConfig::default());
        }
        Ok(())
    }
}

/// The `[files]` table: present turns the file view on, unless `enabled = false`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesSection {
    pub enabled: Option<bool>,
    /// The link's name under `<cache>/files/`.
    pub link: Option<String>,
    pub grace_secs: Option<u64>,
}

impl FilesSection {
    /// The file view this table asks for (`None`: off).
    pub fn apply(self) -> Result<Option<FilesConfig>, String> {
        if self.enabled == Some(false) {
            return Ok(None);
        }
        let mut files = FilesConfig::default();
        if let Some(link) = self.link {
            pack_format::validate_name("link", &link).map_err(|e| e.to_string())?;
            files.link = link;
        }
        if let Some(secs) = self.grace_secs {
            let grace = Duration::from_secs(secs);
            if secs == 0 || grace > MAX_FILES_GRACE {
                return Err(format!(
                    "grace_secs must be between 1 and {} (a week), found {secs}",
                    MAX_FILES_GRACE.as_secs()
                ));
            }
            files.grace = grace;
        }
        Ok(Some(files))
    }
}

/// The `[updates]` table of a config file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    #[serde(default)]
    pub updates: UpdatesSection,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdatesSection {
    pub server: Option<String>,
    pub channel: Option<String>,
    pub pack: Option<String>,
    pub auto_update: Option<bool>,
    pub watch: Option<bool>,
    pub pin: Option<String>,
    /// minisign public key files or bare base64 keys, trusted in addition to compiled-in ones.
    #[serde(default)]
    pub trusted_keys: Vec<String>,
    /// `content.key` files, added to the compiled-in ones.
    #[serde(default)]
    pub content_keys: Vec<String>,
    pub deadline_secs: Option<u64>,
    pub connect_timeout_secs: Option<u64>,
    pub attempts: Option<u32>,
    /// `false`: send no install hash and no failure reports.
    pub telemetry: Option<bool>,
    /// Render failures in a row before a remote pack is marked bad on this device (≥ 1).
    pub mark_bad_after_failures: Option<u32>,
    /// A directory laid out as a pack, served instead of the compiled-in built-in pack.
    pub builtin_dir: Option<String>,
    /// `"agent"`, `"files"`, or the path of an app contract file (see
    /// [`crate::accepts::Accepts::parse`]).
    pub contract: Option<String>,
    /// Seconds between sends of a row of today's outcome counts (60 to 86400).
    pub outcomes_interval_secs: Option<u64>,
}

impl ConfigFile {
    pub fn apply(self, base: &Path, config: &mut ClientConfig) -> Result<(), String> {
        let u = self.updates;
        if let Some(server) = u.server {
            if !(server.starts_with("http://") || server.starts_with("https://")) {
                return Err(format!(
                    "server must be an http:// or https:// URL, found {server:?}"
                ));
            }
            config.server = Some(server.trim_end_matches('/').to_string());
        }
        if let Some(channel) = u.channel {
            pack_format::validate_name("channel", &channel).map_err(|e| e.to_string())?;
            config.channel = channel;
        }
        if let Some(pack) = u.pack {
            pack_format::validate_name("pack", &pack).map_err(|e| e.to_string())?;
            config.pack = pack;
        }
        if let Some(auto) = u.auto_update {
            config.auto_update = auto;
        }
        if let Some(watch) = u.watch {
            config.watch = watch;
        }
        if let Some(pin) = u.pin {
            config.pin = Some(
                pin.parse()
                    .map_err(|e| format!("pin must be a semver version, found {pin:?}: {e}"))?,
            );
        }
        for key in u.trusted_keys {
            config
                .trusted_keys
                .add_entry(base, &key)
                .map_err(|e| format!("trusted key {key:?}: {e}"))?;
        }
        for key in u.content_keys {
            config.content_keys.add(
                ContentKey::load_entry(base, &key)
                    .map_err(|e| format!("content key {key:?}: {e}"))?,
            );
        }
        if let Some(s) = u.deadline_secs {
            config.deadline = Duration::from_secs(s);
        }
        if let Some(s) = u.connect_timeout_secs {
            config.connect_timeout = Duration::from_secs(s);
        }
        if let Some(n) = u.attempts {
            config.attempts = n.max(1);
        }
        if let Some(dir) = u.builtin_dir {
            config.builtin_dir = Some(base.join(dir));
        }
        config.contract = match u.contract {
            Some(value) => crate::accepts::Accepts::parse(base, &value)?,
            None => crate::accepts::Accepts::default_for(config.builtin_dir.as_deref())?,
        };
        // The environment's "do not track" wins over a config that leaves telemetry on.
        if let Some(on) = u.telemetry {
            config.telemetry = on && !do_not_track();
        }
        if let Some(n) = u.mark_bad_after_failures {
            if n == 0 {
                return Err("mark_bad_after_failures must be at least 1, found 0".to_string());
            }
            config.mark_bad_after_failures = n;
        }
        if let Some(secs) = u.outcomes_interval_secs {
            use crate::policy::{MAX_PROVISIONAL_INTERVAL as MAX, MIN_PROVISIONAL_INTERVAL as MIN};
            let interval = Duration::from_secs(secs);
            if !(MIN..=MAX).contains(&interval) {
                return Err(format!(
                    "outcomes_interval_secs must be between {} and {} (a day), found {secs}",
                    MIN.as_secs(),
                    MAX.as_secs()
                ));
            }
            config.outcomes_interval = interval;
        }
        Ok(())
    }
}

/// Signing keys compiled in with `PROMPTPACK_TRUSTED_KEYS` (base64 minisign public keys,
/// comma-separated) at build time. None by default: a build must not trust the demo keys.
fn compiled_in_trusted_keys() -> TrustedKeys {
    let mut keys = TrustedKeys::new();
    for key in option_env!("PROMPTPACK_TRUSTED_KEYS")
        .unwrap_or("")
        .split(',')
    {
        let key = key.trim();
        if !key.is_empty()
            && keys
                .add_text(Path::new("PROMPTPACK_TRUSTED_KEYS"), key)
                .is_err()
        {
            tracing::error!("ignoring a malformed compiled-in trusted key");
        }
    }
    keys
}

/// Content keys compiled in with `PROMPTPACK_CONTENT_KEYS` (`id:base64`, comma-separated).
fn compiled_in_content_keys() -> ContentKeyRing {
    use base64::Engine as _;
    let mut ring = ContentKeyRing::default();
    for item in option_env!("PROMPTPACK_CONTENT_KEYS")
        .unwrap_or("")
        .split(',')
    {
        let Some((id, b64)) = item.trim().split_once(':') else {
            continue;
        };
        let key = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .ok()
            .and_then(|raw| <[u8; 32]>::try_from(raw.as_slice()).ok())
            .and_then(|raw| ContentKey::from_parts(id, raw).ok());
        match key {
            Some(key) => ring.add(key),
            None => tracing::error!("ignoring a malformed compiled-in content key {id:?}"),
        }
    }
    ring
}

/// Identifies a set of content keys (ids and key bytes), for [`crate::cache::BadPack`]
/// marks: a mark made because no held key opened a pack lifts when this changes.
pub fn key_set_fingerprint(keys: &ContentKeyRing) -> String {
    let mut each: Vec<String> = keys
        .ids()
        .into_iter()
        .filter_map(|id| keys.get(id))
        .map(|key| pack_format::sha256_hex(key.to_file_text().as_bytes()))
        .collect();
    each.sort();
    pack_format::sha256_hex(each.join("\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<ClientConfig, ClientError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client.toml");
        std::fs::write(&path, text).unwrap();
        ClientConfig::load(&path, dir.path().join("cache"), "1.0.0".parse().unwrap())
    }

    #[test]
    fn targets_name_each_agents_places_and_turn_the_file_view_on() {
        let config = load(
            "[targets]\nbefore = [\"/var/cache/org\"]\n[targets.claude-code]\nuser_dir = \"/h/.claude\"\nmachine_dir = \"/etc/claude-code\"\n[targets.codex]\nuser_dir = \"/h/.codex\"\n[targets.opencode]\nenabled = false\n",
        )
        .unwrap();
        let agents: Vec<(Agent, String, Option<String>)> = config
            .targets
            .iter()
            .map(|t| {
                (
                    t.agent,
                    t.user_dir.display().to_string(),
                    t.machine_dir.as_ref().map(|d| d.display().to_string()),
                )
            })
            .collect();
        assert_eq!(
            agents,
            [
                (
                    Agent::Claude,
                    "/h/.claude".to_string(),
                    Some("/etc/claude-code".to_string())
                ),
                (Agent::Codex, "/h/.codex".to_string(), None),
            ]
        );
        assert_eq!(config.targets_before, [PathBuf::from("/var/cache/org")]);
        assert_eq!(config.files, Some(FilesConfig::default()));

        let error = load("[targets.cursor]\n").unwrap_err().to_string();
        assert!(error.contains("cursor"), "{error}");
        assert!(load("").unwrap().targets.is_empty());
        assert!(load("").unwrap().files.is_none());
    }

    fn load_all(text: &str) -> Result<(tempfile::TempDir, Vec<ClientConfig>), ClientError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client.toml");
        std::fs::write(&path, text).unwrap();
        let configs =
            ClientConfig::load_channels(&path, dir.path().join("cache"), "1.0.0".parse().unwrap())?;
        Ok((dir, configs))
    }

    #[test]
    fn a_config_without_channels_is_one_channel_as_before() {
        let (dir, configs) =
            load_all("[updates]\nserver = \"http://127.0.0.1:1/\"\nchannel = \"beta\"\n").unwrap();
        assert_eq!(configs.len(), 1);
        let config = &configs[0];
        assert_eq!(config.name, None);
        assert_eq!(config.label(), "beta");
        assert_eq!(config.cache_dir, dir.path().join("cache"));
        assert_eq!(config.targets_record, None);
        assert_eq!(config.server.as_deref(), Some("http://127.0.0.1:1"));
    }

    #[test]
    fn channels_share_updates_keep_their_own_keys_pin_and_cache_and_project_in_order() {
        let keys = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packs/dev-keys");
        let text = format!(
            "[updates]\nserver = \"http://shared:1\"\nattempts = 2\n\
             [targets.codex]\nuser_dir = \"/h/.codex\"\n\
             [[channels]]\nname = \"org\"\nchannel = \"stable\"\npack = \"org\"\n\
             trusted_keys = [{:?}]\ncontent_keys = [{:?}]\npin = \"3.0.0\"\n\
             [[channels]]\nname = \"team-payments\"\nserver = \"http://team:2\"\n\
             channel = \"payments\"\nwatch = false\n",
            keys.join("signing.pub").display().to_string(),
            keys.join("content.key").display().to_string(),
        );
        let (dir, configs) = load_all(&text).unwrap();
        let cache = dir.path().join("cache");
        let [org, team] = configs.as_slice() else {
            panic!("two channels expected, found {}", configs.len());
        };
        assert_eq!((org.label(), team.label()), ("org", "team-payments"));
        assert_eq!(org.cache_dir, cache.join("channels/org"));
        assert_eq!(team.cache_dir, cache.join("channels/team-payments"));
        // [updates] is shared, a channel's table is its own.
        assert_eq!(org.server.as_deref(), Some("http://shared:1"));
        assert_eq!(team.server.as_deref(), Some("http://team:2"));
        assert_eq!((org.attempts, team.attempts), (2, 2));
        assert_eq!((org.channel.as_str(), org.pack.as_str()), ("stable", "org"));
        assert_eq!(
            (team.channel.as_str(), team.pack.as_str()),
            ("payments", "builtin")
        );
        assert_eq!(org.pin, Some("3.0.0".parse().unwrap()));
        assert_eq!(team.pin, None);
        assert!((org.watch, team.watch) == (true, false));
        assert_eq!(
            org.trusted_keys.ids().len(),
            1 + compiled_in_trusted_keys().ids().len()
        );
        assert_eq!(team.trusted_keys.ids(), compiled_in_trusted_keys().ids());
        assert_ne!(
            key_set_fingerprint(&org.content_keys),
            key_set_fingerprint(&team.content_keys)
        );
        // Both project into the same targets through one record, the organisation's first.
        assert_eq!(org.targets, team.targets);
        assert_eq!(org.targets.len(), 1);
        assert!(org.targets_before.is_empty());
        assert_eq!(org.targets_after, [cache.join("channels/team-payments")]);
        assert_eq!(team.targets_before, [cache.join("channels/org")]);
        assert!(team.targets_after.is_empty());
        assert_eq!(org.targets_record, Some(cache.join(TARGETS_RECORD)));
        assert_eq!(org.targets_record, team.targets_record);
        assert!(org.files.is_some() && team.files.is_some());
    }

    #[test]
    fn a_bad_channel_table_is_refused_with_where_and_what() {
        let error = |text: &str| {
            load_all(text)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let no_name = error("[[channels]]\nchannel = \"org\"\n");
        assert!(
            no_name.contains("[[channels]] number 1: no name"),
            "{no_name}"
        );
        let twice = error("[[channels]]\nname = \"org\"\n[[channels]]\nname = \"org\"\n");
        assert!(twice.contains("\"org\" is given twice"), "{twice}");
        let unknown = error("[[channels]]\nname = \"org\"\nservr = \"http://x\"\n");
        assert!(
            unknown.contains("org") && unknown.contains("servr"),
            "{unknown}"
        );
        let bad_pin = error("[[channels]]\nname = \"team\"\npin = \"latest\"\n");
        assert!(
            bad_pin.contains("channel \"team\"") && bad_pin.contains("pin"),
            "{bad_pin}"
        );
        let bad_name = error("[[channels]]\nname = \"../up\"\n");
        assert!(bad_name.contains("number 1"), "{bad_name}");
        // A program that follows one channel refuses a config of several, saying why.
        let one = load("[[channels]]\nname = \"org\"\n")
            .unwrap_err()
            .to_string();
        assert!(one.contains("[[channels]]"), "{one}");
    }
}
