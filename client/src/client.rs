//! The refresh state machine (DESIGN.md, "Client state machine"), start-up load, and status.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pack_format::contract::Contract;
use pack_format::{ChannelDocument, EntryTarget, PackRef, channel, pack, sha256_hex};
use serde::Serialize;
use time::OffsetDateTime;

use crate::cache::{Cache, Installed, State};
use crate::snapshot::{Snapshot, SnapshotMeta, Source};
use crate::{
    ClientConfig, ClientError, HEADER_CLIENT_VERSION, HEADER_INSTALLED_PACK, PromptStore, builtin,
};

/// What one refresh did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RefreshOutcome {
    /// The server answered 304: the channel did not change.
    NotModified,
    /// A new document, but it selects what is already served.
    Unchanged { sequence: u64 },
    Installed {
        name: String,
        version: String,
        sha256: String,
        sequence: u64,
    },
    /// The channel sends this client to the built-in pack.
    Builtin { sequence: u64, reason: String },
    /// Nothing was fetched or installed, on purpose.
    Skipped { reason: String },
}

/// What the client serves and how its last refresh went.
#[derive(Debug, Clone, Serialize)]
pub struct ClientStatus {
    pub serving: SnapshotMeta,
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
    /// Why the last refresh or the start-up load failed, if it did.
    pub last_error: Option<String>,
    pub bad_packs: Vec<String>,
}

/// A client: a [`PromptStore`] kept up to date from one channel.
pub struct Client {
    config: ClientConfig,
    cache: Cache,
    store: Arc<PromptStore>,
    http: reqwest::Client,
    install_id: String,
    state: Mutex<State>,
    last_outcome: Mutex<Option<RefreshOutcome>>,
    last_error: Mutex<Option<String>>,
    /// One refresh at a time.
    refreshing: tokio::sync::Mutex<()>,
}

impl Client {
    /// Opens the cache and loads what it holds, re-verified; anything wrong → built-in,
    /// with the reason in [`ClientStatus::last_error`].
    pub fn new(config: ClientConfig) -> Result<Self, ClientError> {
        let cache = Cache::open(&config.cache_dir)?;
        let install_id = cache.install_id()?;
        let store = Arc::new(PromptStore::new(builtin::snapshot()));
        let http = reqwest::Client::builder()
            // No per-request timeout: the whole refresh runs under one deadline
            // (`refresh_now`), which then reports itself as such rather than as a body error.
            .connect_timeout(config.connect_timeout)
            .user_agent(format!("promptpack-client/{}", config.client_version))
            .build()
            .map_err(|e| ClientError::Http {
                url: config.server.clone().unwrap_or_default(),
                reason: e.to_string(),
            })?;
        let mut last_error = None;
        let state = match cache.load_state() {
            Ok(Some(state)) if state.channel == config.channel => state,
            Ok(Some(other)) => {
                tracing::info!(
                    "cache was for channel {:?}; starting over for {:?}",
                    other.channel,
                    config.channel
                );
                State::new(&config.channel)
            }
            Ok(None) => State::new(&config.channel),
            Err(e) => {
                tracing::warn!(
                    "{e}; serving the built-in pack until the next refresh repairs the cache"
                );
                last_error = Some(e.to_string());
                State::new(&config.channel)
            }
        };
        let client = Client {
            config,
            cache,
            store,
            http,
            install_id,
            state: Mutex::new(state),
            last_outcome: Mutex::new(None),
            last_error: Mutex::new(last_error),
            refreshing: tokio::sync::Mutex::new(()),
        };
        if let Err(e) = client.load_installed() {
            tracing::warn!(
                "installed pack failed verification at start-up: {e}; serving the built-in pack"
            );
            *lock(&client.last_error) = Some(format!("start-up: {e}"));
            // Forget what cannot be loaded, but keep the rollback high-water mark.
            let mut state = lock(&client.state);
            state.installed = None;
            state.etag = None;
        }
        Ok(client)
    }

    fn load_installed(&self) -> Result<(), ClientError> {
        let state = lock(&self.state).clone();
        let Some(installed) = &state.installed else {
            return Ok(());
        };
        let (Some(document), Some(signature)) = (&state.document, &state.signature) else {
            return Err(ClientError::Cache {
                path: self.cache.state_path().display().to_string(),
                reason: "installed pack without its channel document".to_string(),
            });
        };
        // Expiry is not checked here: an offline client keeps what it verified.
        let verified = channel::verify_ignoring_expiry(
            document.as_bytes(),
            signature,
            &self.config.trusted_keys,
            &self.config.limits,
        )
        .map_err(ClientError::Document)?;
        // The stored document must still vouch for the installed pack.
        let vouched = verified.document.entries.iter().any(|entry| {
            matches!(&entry.target, EntryTarget::Pack(p) if p.sha256 == installed.sha256 && p.version == installed.version)
        });
        if !vouched {
            return Err(ClientError::Cache {
                path: self.cache.state_path().display().to_string(),
                reason: format!(
                    "the stored channel document (sequence {}) has no entry for installed pack {}",
                    verified.document.sequence, installed.sha256
                ),
            });
        }
        let bytes = self
            .cache
            .read_pack(&installed.sha256, self.config.limits.max_sealed_len)?;
        let entry = PackRef {
            version: installed.version.clone(),
            sha256: installed.sha256.clone(),
            size: bytes.len() as u64,
            schema: installed.schema,
        };
        let snapshot = self.open_pack(&bytes, &entry, &verified.document)?;
        self.store.install(Arc::new(snapshot));
        Ok(())
    }

    pub fn store(&self) -> &Arc<PromptStore> {
        &self.store
    }

    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    pub fn install_id(&self) -> &str {
        &self.install_id
    }

    pub fn status(&self) -> ClientStatus {
        let state = lock(&self.state).clone();
        let ts = |t: Option<i64>| t.and_then(|t| OffsetDateTime::from_unix_timestamp(t).ok());
        ClientStatus {
            serving: self.store.capture().meta().clone(),
            channel: self.config.channel.clone(),
            server: self.config.server.clone(),
            sequence: state.sequence,
            auto_update: self.config.auto_update,
            pin: self.config.pin.as_ref().map(ToString::to_string),
            install_id: self.install_id.clone(),
            last_check: ts(state.last_check),
            last_success: ts(state.last_success),
            last_outcome: lock(&self.last_outcome).clone(),
            last_error: lock(&self.last_error).clone(),
            bad_packs: state.bad.iter().cloned().collect(),
        }
    }

    /// Seconds since the last successful check, `None` if there never was one.
    pub fn since_last_success(&self, now: OffsetDateTime) -> Option<Duration> {
        let last = lock(&self.state).last_success?;
        Some(Duration::from_secs(
            (now.unix_timestamp() - last).max(0) as u64
        ))
    }

    /// A scheduled refresh: does nothing when auto-update is off.
    pub async fn refresh(&self) -> Result<RefreshOutcome, ClientError> {
        if !self.config.auto_update {
            let outcome = RefreshOutcome::Skipped {
                reason: "auto-update is off".to_string(),
            };
            *lock(&self.last_outcome) = Some(outcome.clone());
            return Ok(outcome);
        }
        self.refresh_now().await
    }

    /// A refresh the user asked for: runs even with auto-update off (a local pin still holds).
    pub async fn refresh_now(&self) -> Result<RefreshOutcome, ClientError> {
        let _one_at_a_time = self.refreshing.lock().await;
        let now = OffsetDateTime::now_utc();
        let deadline = self.config.deadline;
        let result = match tokio::time::timeout(deadline, self.refresh_inner(now)).await {
            Ok(result) => result,
            Err(_) => Err(ClientError::Deadline {
                seconds: deadline.as_secs(),
            }),
        };
        let mut state = lock(&self.state).clone();
        state.last_check = Some(now.unix_timestamp());
        match &result {
            Ok(outcome) => {
                state.last_success = Some(now.unix_timestamp());
                *lock(&self.last_outcome) = Some(outcome.clone());
                *lock(&self.last_error) = None;
            }
            Err(e) => {
                tracing::warn!("refresh failed, still serving the previous pack: {e}");
                *lock(&self.last_error) = Some(e.to_string());
            }
        }
        // Check times are bookkeeping: failing to record them must not fail the refresh.
        if let Err(e) = self.cache.write_state(&state) {
            tracing::warn!("could not record the check time: {e}");
        }
        *lock(&self.state) = state;
        result
    }

    async fn refresh_inner(&self, now: OffsetDateTime) -> Result<RefreshOutcome, ClientError> {
        let server = self.config.server.as_deref().ok_or(ClientError::NoServer)?;
        let state = lock(&self.state).clone();
        let channel_url = format!("{server}/v1/channels/{}", self.config.channel);

        // 1. Conditional GET of the document; 304 → done.
        let etag = state.installed.as_ref().and(state.etag.as_deref());
        let Some((document, new_etag)) = self
            .get_capped(
                &channel_url,
                "channel document",
                self.config.limits.max_channel_len as u64,
                None,
                etag,
            )
            .await?
        else {
            return Ok(RefreshOutcome::NotModified);
        };
        let sig_url = format!("{channel_url}/signature");
        let Some((signature, _)) = self
            .get_capped(
                &sig_url,
                "channel signature",
                self.config.limits.max_signature_len as u64,
                None,
                None,
            )
            .await?
        else {
            return Err(ClientError::Status {
                url: sig_url,
                status: 304,
            });
        };
        let signature = String::from_utf8(signature).map_err(|_| {
            ClientError::Document(pack_format::FormatError::Malformed {
                what: "channel signature",
                reason: "not UTF-8".to_string(),
            })
        })?;

        // 2. Signature, channel, sequence, expiry.
        let verified = channel::verify(
            &document,
            &signature,
            &self.config.trusted_keys,
            now,
            &self.config.limits,
        )
        .map_err(ClientError::Document)?;
        let doc = &verified.document;
        if doc.channel != self.config.channel {
            return Err(ClientError::WrongChannel {
                expected: self.config.channel.clone(),
                found: doc.channel.clone(),
            });
        }
        if doc.pack != self.config.pack {
            return Err(ClientError::WrongPack {
                expected: self.config.pack.clone(),
                found: doc.pack.clone(),
            });
        }
        if doc.sequence < state.sequence {
            return Err(ClientError::Rollback {
                found: doc.sequence,
                installed: state.sequence,
            });
        }

        // 3. The entry for this client.
        let selected = doc.select(&self.config.client_version, &self.install_id);
        let target = match selected.map(|e| &e.target) {
            Some(EntryTarget::Pack(entry)) => Some(entry.clone()),
            Some(EntryTarget::Builtin) | None => None,
        };
        let serving = self.store.capture();
        let record = |installed: Option<Installed>| {
            let mut next = state.clone();
            next.sequence = doc.sequence;
            next.etag = new_etag.clone();
            next.document = Some(String::from_utf8_lossy(&document).into_owned());
            next.signature = Some(signature.clone());
            next.installed = installed;
            next
        };

        if let Some(pin) = &self.config.pin {
            let wanted = target.as_ref().map(|t| &t.version);
            if wanted != Some(pin) {
                return Ok(RefreshOutcome::Skipped {
                    reason: format!(
                        "pinned to {pin}; the channel offers {}",
                        wanted.map_or("the built-in pack".to_string(), ToString::to_string)
                    ),
                });
            }
        }

        let Some(entry) = target else {
            let reason = match selected {
                Some(_) => "the channel sends this client to the built-in pack".to_string(),
                None => format!(
                    "no channel entry matches client version {}",
                    self.config.client_version
                ),
            };
            self.commit(&record(None), None)?;
            self.store.reset_to_builtin();
            return Ok(RefreshOutcome::Builtin {
                sequence: doc.sequence,
                reason,
            });
        };

        if serving.source() == Source::Remote && serving.sha256() == entry.sha256 {
            let installed = state.installed.clone().map(|i| Installed {
                sequence: doc.sequence,
                ..i
            });
            self.commit(&record(installed), None)?;
            return Ok(RefreshOutcome::Unchanged {
                sequence: doc.sequence,
            });
        }
        if state.bad.contains(&entry.sha256) {
            return Err(ClientError::KnownBad {
                sha256: entry.sha256.clone(),
            });
        }
        if Contract::builtin(entry.schema).is_none() {
            return Err(ClientError::IncompatibleSchema {
                schema: entry.schema,
                known: Contract::builtin_schemas().to_vec(),
            });
        }
        if entry.size > self.config.limits.max_sealed_len {
            return Err(ClientError::Pack(pack_format::FormatError::TooLarge {
                what: "signed pack size",
                found: entry.size,
                limit: self.config.limits.max_sealed_len,
            }));
        }

        // 4. Download, never more than the signed size; hash before parsing anything.
        let blob_url = format!("{server}/v1/blobs/{}", entry.sha256);
        let Some((bytes, _)) = self
            .get_capped(&blob_url, "pack", entry.size, Some(entry.size), None)
            .await?
        else {
            return Err(ClientError::Status {
                url: blob_url,
                status: 304,
            });
        };
        let found = sha256_hex(&bytes);
        if found != entry.sha256 {
            return Err(ClientError::HashMismatch {
                expected: entry.sha256.clone(),
                found,
            });
        }

        // 5-6. Header against the entry, decrypt, untar, validate. The bytes match what the
        // publisher signed, so a failure here is the pack's own: remember it.
        let snapshot = match self.open_pack(&bytes, &entry, doc) {
            Ok(s) => s,
            // A header that disagrees with its entry is the document's fault, not the
            // pack's: a corrected document may point at the same bytes.
            Err(
                e @ (ClientError::HeaderMismatch { .. } | ClientError::IncompatibleSchema { .. }),
            ) => return Err(e),
            Err(e) => {
                let mut bad_state = state.clone();
                bad_state.bad.insert(entry.sha256.clone());
                self.cache.write_state(&bad_state)?;
                *lock(&self.state) = bad_state;
                return Err(e);
            }
        };

        // 7. Install crash-safely, then swap.
        self.cache.write_pack(&entry.sha256, &bytes)?;
        let installed = Installed {
            name: doc.pack.clone(),
            version: entry.version.clone(),
            schema: entry.schema,
            sha256: entry.sha256.clone(),
            sequence: doc.sequence,
        };
        self.commit(&record(Some(installed)), Some(&entry.sha256))?;
        self.store.install(Arc::new(snapshot));
        Ok(RefreshOutcome::Installed {
            name: doc.pack.clone(),
            version: entry.version.to_string(),
            sha256: entry.sha256.clone(),
            sequence: doc.sequence,
        })
    }

    /// Makes `next` durable and current, then drops packs nothing points at.
    fn commit(&self, next: &State, keep: Option<&str>) -> Result<(), ClientError> {
        self.cache.write_state(next)?;
        *lock(&self.state) = next.clone();
        let keep: Vec<&str> = keep
            .into_iter()
            .chain(next.installed.as_ref().map(|i| i.sha256.as_str()))
            .collect();
        self.cache.collect_garbage(&keep);
        Ok(())
    }

    /// Steps 5-6: header against the signed entry, decrypt, untar, check the index, compile
    /// and validate every template, and check the runtime's required templates exist.
    fn open_pack(
        &self,
        bytes: &[u8],
        entry: &PackRef,
        doc: &ChannelDocument,
    ) -> Result<Snapshot, ClientError> {
        let (header, _) =
            pack::read_header(bytes, &self.config.limits).map_err(ClientError::Pack)?;
        let mismatch =
            |field: &'static str, expected: String, found: String| ClientError::HeaderMismatch {
                field,
                expected,
                found,
            };
        if header.name != doc.pack {
            return Err(mismatch("name", doc.pack.clone(), header.name));
        }
        if header.version != entry.version {
            return Err(mismatch(
                "version",
                entry.version.to_string(),
                header.version.to_string(),
            ));
        }
        if header.schema != entry.schema {
            return Err(mismatch(
                "schema",
                entry.schema.to_string(),
                header.schema.to_string(),
            ));
        }
        let opened = pack::open(bytes, &self.config.content_keys, &self.config.limits)
            .map_err(ClientError::Pack)?;
        let meta = SnapshotMeta {
            name: opened.header.name.clone(),
            version: opened.header.version.clone(),
            sequence: doc.sequence,
            source: Source::Remote,
            sha256: opened.sha256.clone(),
            schema: opened.header.schema,
        };
        let snapshot =
            Snapshot::new(meta, opened.payload.into_files()).map_err(ClientError::Snapshot)?;
        let contract = Contract::builtin(header.schema).ok_or(ClientError::IncompatibleSchema {
            schema: header.schema,
            known: Contract::builtin_schemas().to_vec(),
        })?;
        let required: Vec<&str> = contract
            .required_templates()
            .iter()
            .map(String::as_str)
            .collect();
        snapshot.require(&required).map_err(ClientError::Snapshot)?;
        Ok(snapshot)
    }

    /// GET with a byte cap, optional exact length and `If-None-Match`, retried with
    /// exponential backoff and jitter on transient failures. `None` means 304.
    async fn get_capped(
        &self,
        url: &str,
        what: &'static str,
        cap: u64,
        exact: Option<u64>,
        etag: Option<&str>,
    ) -> Result<Option<(Vec<u8>, Option<String>)>, ClientError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.get_once(url, what, cap, exact, etag).await {
                Err(e) if e.is_transient() && attempt < self.config.attempts => {
                    let base =
                        self.config.backoff.as_millis() as u64 * (1 << (attempt - 1).min(10));
                    let jitter = rand::random_range(0..=base / 2 + 1);
                    tracing::info!("{e}; retrying in {} ms", base + jitter);
                    tokio::time::sleep(Duration::from_millis(base + jitter)).await;
                }
                other => return other,
            }
        }
    }

    async fn get_once(
        &self,
        url: &str,
        what: &'static str,
        cap: u64,
        exact: Option<u64>,
        etag: Option<&str>,
    ) -> Result<Option<(Vec<u8>, Option<String>)>, ClientError> {
        let http_err = |e: reqwest::Error| ClientError::Http {
            url: url.to_string(),
            reason: e.to_string(),
        };
        let installed = match self.store.capture().source() {
            Source::Remote => self.store.capture().sha256().to_string(),
            Source::Builtin => "builtin".to_string(),
        };
        let mut request = self
            .http
            .get(url)
            .header(
                HEADER_CLIENT_VERSION,
                self.config.client_version.to_string(),
            )
            .header(HEADER_INSTALLED_PACK, installed);
        if let Some(etag) = etag {
            request = request.header(reqwest::header::IF_NONE_MATCH, etag);
        }
        let mut response = request.send().await.map_err(http_err)?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_MODIFIED {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(ClientError::Status {
                url: url.to_string(),
                status: status.as_u16(),
            });
        }
        let too_long = || ClientError::BodyTooLong {
            what,
            url: url.to_string(),
            limit: cap,
        };
        if response.content_length().is_some_and(|len| len > cap) {
            return Err(too_long());
        }
        let new_etag = response
            .headers()
            .get(reqwest::header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut body = Vec::with_capacity(response.content_length().unwrap_or(0).min(cap) as usize);
        while let Some(chunk) = response.chunk().await.map_err(http_err)? {
            if body.len() as u64 + chunk.len() as u64 > cap {
                return Err(too_long());
            }
            body.extend_from_slice(&chunk);
        }
        if let Some(expected) = exact
            && (body.len() as u64) < expected
        {
            return Err(ClientError::Truncated {
                what,
                url: url.to_string(),
                expected,
                found: body.len() as u64,
            });
        }
        Ok(Some((body, new_etag)))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind; keep serving.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
