//! What the client installs and serves: the selection from the stored channel document
//! (at start-up, after another process refreshed), the pack opened and checked against its
//! signed entry, and step 7 of a refresh, which makes the plan durable and serves it whole.

use super::*;
use crate::SnapshotError;
use crate::accepts::Accepts;

/// What the store serves after [`Client::load_selected`].
pub(super) enum Loaded {
    /// No channel document is held: the built-in pack.
    Nothing,
    /// The pack the document selects serves.
    Pack,
    /// The document sends this release to the built-in pack.
    Builtin { reason: String },
    /// The document selects a pack for this release that is not in the cache.
    Missing {
        version: semver::Version,
        sha256: String,
    },
}

/// What [`select`] needs: owned, so it runs on the blocking pool.
struct Selector {
    state: State,
    config: ClientConfig,
    install_id: String,
    cache: Cache,
    health: Arc<Health>,
    serving: Arc<Snapshot>,
    /// The clock ramps are read at.
    now: OffsetDateTime,
}

/// What [`select`] chose; [`Client::serve_selection`] makes the store serve it.
enum Selection {
    Loaded(Loaded),
    /// The selected pack, opened and verified: to install.
    Open(Box<Snapshot>),
}

/// What the stored document selects for this client's release of now, loaded and
/// verified again (the release may have changed since the document was accepted: an app
/// upgrade or downgrade, or another release sharing the cache). With a local pin, the
/// installed pack while the document still names it. Expiry is not checked here: an
/// offline client keeps what it verified.
fn select(selector: Selector) -> Result<Selection, ClientError> {
    let Selector {
        state,
        config,
        install_id,
        cache,
        health,
        serving,
        now,
    } = selector;
    let (Some(document), Some(signature)) = (&state.document, &state.signature) else {
        if state.installed.is_some() {
            return Err(ClientError::Cache {
                path: cache.state_path().display().to_string(),
                reason: "installed pack without its channel document".to_string(),
            });
        }
        return Ok(Selection::Loaded(Loaded::Nothing));
    };
    let verified = channel::verify_ignoring_expiry(
        document.as_bytes(),
        signature,
        &config.trusted_keys,
        &config.limits,
    )
    .map_err(ClientError::Document)?;
    let doc = &verified.document;
    let entry = if config.pin.is_some() {
        // The stored document must still vouch for the installed pack.
        let vouched = state.installed.as_ref().and_then(|installed| {
            doc.entries.iter().find_map(|entry| match &entry.target {
                EntryTarget::Pack(p)
                    if p.sha256 == installed.sha256 && p.version == installed.version =>
                {
                    Some(p.clone())
                }
                EntryTarget::Pack(_) | EntryTarget::Builtin => None,
            })
        });
        match (vouched, &state.installed) {
            (Some(entry), _) => entry,
            (None, None) => return Ok(Selection::Loaded(Loaded::Nothing)),
            (None, Some(installed)) => {
                return Err(ClientError::Cache {
                    path: cache.state_path().display().to_string(),
                    reason: format!(
                        "the stored channel document (sequence {}) has no entry for installed pack {}",
                        doc.sequence, installed.sha256
                    ),
                });
            }
        }
    } else {
        match doc.select(&config.client_version, &install_id, now) {
            Some(EntryTarget::Pack(entry)) => entry.clone(),
            selected @ (Some(EntryTarget::Builtin) | None) => {
                return Ok(Selection::Loaded(Loaded::Builtin {
                    reason: match selected {
                        Some(_) => format!(
                            "channel sequence {} sends release {} to the built-in pack",
                            doc.sequence, config.client_version
                        ),
                        None => format!(
                            "no entry of channel sequence {} matches release {}",
                            doc.sequence, config.client_version
                        ),
                    },
                }));
            }
        }
    };
    if serving.source() == Source::Remote && serving.sha256() == entry.sha256 {
        return Ok(Selection::Loaded(Loaded::Pack));
    }
    if health.is_marked(&entry.sha256) {
        return Err(ClientError::KnownBad {
            sha256: entry.sha256.clone(),
            reason: health.detail(),
        });
    }
    if let Some(mark) = state.bad.get(&entry.sha256) {
        return Err(ClientError::KnownBad {
            sha256: entry.sha256.clone(),
            reason: mark.detail.clone(),
        });
    }
    let bytes = match cache.read_pack(&entry.sha256, config.limits.max_sealed_len) {
        Ok(bytes) => bytes,
        // Selected for this release but never downloaded here: the next refresh does.
        // (After adopting another process's state, the current pack serves meanwhile.)
        // The pack the state says was installed is damage, not news: an error.
        Err(_)
            if !cache.pack_path(&entry.sha256).exists()
                && state
                    .installed
                    .as_ref()
                    .is_none_or(|i| i.sha256 != entry.sha256) =>
        {
            return Ok(Selection::Loaded(Loaded::Missing {
                version: entry.version.clone(),
                sha256: entry.sha256.clone(),
            }));
        }
        Err(e) => return Err(e),
    };
    if bytes.len() as u64 != entry.size || sha256_hex(&bytes) != entry.sha256 {
        return Err(ClientError::Cache {
            path: cache.pack_path(&entry.sha256).display().to_string(),
            reason: "the cached pack does not match its signed size and SHA-256".to_string(),
        });
    }
    let snapshot = open_pack(
        &bytes,
        &entry,
        &doc.pack,
        doc.sequence,
        &config.content_keys,
        &config.limits,
        &config.contract,
    )?;
    Ok(Selection::Open(Box::new(snapshot)))
}

/// [`Event::Installed`], or [`Event::RolledBack`] when `after` is an older version of the
/// pack `before` served.
pub(super) fn installed_event(before: &Snapshot, after: &Snapshot) -> Event {
    if before.source() == Source::Remote
        && before.name() == after.name()
        && after.version() < before.version()
    {
        Event::RolledBack {
            name: after.name().to_string(),
            version: after.version().to_string(),
            from: before.version().to_string(),
            sha256: after.sha256().to_string(),
            sequence: after.meta().sequence,
        }
    } else {
        Event::Installed {
            name: after.name().to_string(),
            version: after.version().to_string(),
            sha256: after.sha256().to_string(),
            sequence: after.meta().sequence,
        }
    }
}

/// The packs a state keeps on disk: the installed one and every pack its document names, so
/// that a process of another client release sharing the cache finds the pack its release
/// selects (a document names a bounded number of packs: see `Limits`).
fn kept_packs(state: &State) -> Vec<String> {
    let mut keep: Vec<String> = state.installed.iter().map(|i| i.sha256.clone()).collect();
    // The stored document was verified before it was stored.
    if let Some(doc) = state
        .document
        .as_deref()
        .and_then(|d| serde_json::from_str::<channel::ChannelDocument>(d).ok())
    {
        keep.extend(
            doc.entries
                .into_iter()
                .filter_map(|entry| match entry.target {
                    EntryTarget::Pack(p) => Some(p.sha256),
                    EntryTarget::Builtin => None,
                }),
        );
    }
    keep
}

/// Lifts the content-key marks made under another set of content keys: a key added since
/// may open those packs now. Marks against the pack itself stay.
pub(super) fn lift_key_marks(state: &mut State, keys: &str) {
    state.bad.retain(|sha256, mark| match mark.reason {
        BadReason::ContentKey if mark.content_keys != keys => {
            tracing::info!("the content keys changed: pack {sha256} will be tried again");
            false
        }
        BadReason::ContentKey | BadReason::Pack | BadReason::Render => true,
    });
}

/// Steps 5-6: header against the signed entry, decrypt, untar, check the index, compile
/// and validate every template, and check the runtime's required templates exist.
pub(super) fn open_pack(
    bytes: &[u8],
    entry: &PackRef,
    pack_name: &str,
    sequence: u64,
    content_keys: &ContentKeyRing,
    limits: &Limits,
    accepts: &Accepts,
) -> Result<Snapshot, ClientError> {
    let (header, _) = pack::read_header(bytes, limits).map_err(ClientError::Pack)?;
    let mismatch =
        |field: &'static str, expected: String, found: String| ClientError::HeaderMismatch {
            field,
            expected,
            found,
        };
    if header.name != pack_name {
        return Err(mismatch("name", pack_name.to_string(), header.name));
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
    // Before decrypting: a pack of a contract this client does not take is refused as an
    // unknown schema is, whatever it holds.
    if !accepts.takes(header.schema) {
        return Err(ClientError::IncompatibleSchema {
            schema: header.schema,
            known: accepts.schemas(),
        });
    }
    let opened = pack::open(bytes, content_keys, limits).map_err(ClientError::Pack)?;
    let meta = SnapshotMeta {
        name: opened.header.name.clone(),
        version: opened.header.version.clone(),
        sequence,
        source: Source::Remote,
        sha256: opened.sha256.clone(),
        schema: opened.header.schema,
    };
    // Every template is checked against the contract the pack declares (its agent schema,
    // its own contract.json, or none for plain files) as the snapshot compiles it.
    let snapshot =
        Snapshot::new(meta, opened.payload.into_files()).map_err(ClientError::Snapshot)?;
    if let Err(problems) = accepts.check(snapshot.contract()) {
        return Err(ClientError::Snapshot(SnapshotError::Invalid {
            pack: format!("{} {}", snapshot.name(), snapshot.version()),
            problems,
        }));
    }
    let required: Vec<&str> = (snapshot.contract().required_templates().iter())
        .map(String::as_str)
        .collect();
    snapshot.require(&required).map_err(ClientError::Snapshot)?;
    Ok(snapshot)
}

impl Client {
    /// Serves what the stored document selects for this client's release of now, loaded and
    /// verified again (see [`select`]). For start-up, which runs before any async work.
    pub(super) fn load_selected(&self) -> Result<Loaded, ClientError> {
        let selection = select(self.selector())?;
        Ok(self.serve_selection(selection))
    }

    /// [`Client::load_selected`] with the disk and CPU work on the blocking pool.
    async fn load_selected_off_thread(&self) -> Result<Loaded, ClientError> {
        let selector = self.selector();
        let selection = blocking(move || select(selector)).await??;
        Ok(self.serve_selection(selection))
    }

    fn selector(&self) -> Selector {
        Selector {
            state: lock(&self.state).clone(),
            config: self.config.clone(),
            install_id: self.install_id.clone(),
            cache: self.cache.clone(),
            health: self.health.clone(),
            serving: self.store.capture(),
            now: self.config.clock.now(),
        }
    }

    /// Makes the store serve what [`select`] chose.
    fn serve_selection(&self, selection: Selection) -> Loaded {
        match selection {
            Selection::Loaded(
                loaded @ (Loaded::Nothing | Loaded::Pack | Loaded::Missing { .. }),
            ) => loaded,
            Selection::Loaded(Loaded::Builtin { reason }) => {
                if self.store.capture().source() == Source::Remote {
                    self.store.reset_to_builtin();
                }
                Loaded::Builtin { reason }
            }
            Selection::Open(snapshot) => {
                self.store.install(Arc::new(*snapshot));
                Loaded::Pack
            }
        }
    }

    /// Step 7: makes the plan durable (pack first, then the state naming it, with the check
    /// times), swaps what is served, and drops packs nothing points at. Runs whole: the
    /// deadline is over by now, and the disk work runs on a blocking thread.
    pub(super) async fn apply(
        &self,
        plan: Plan,
        now: OffsetDateTime,
    ) -> Result<RefreshOutcome, ClientError> {
        let Plan {
            next,
            pack,
            serve,
            result,
        } = plan;
        let changed = next.is_some();
        let mut state = next.unwrap_or_else(|| lock(&self.state).clone());
        state.last_check = Some(now.unix_timestamp());
        if result.is_ok() {
            state.last_success = Some(now.unix_timestamp());
        }
        let cache = self.cache.clone();
        let to_write = state.clone();
        let written = blocking(move || -> Result<(), ClientError> {
            if let Some((sha256, bytes)) = &pack {
                cache.write_pack(sha256, bytes)?;
            }
            cache.write_state(&to_write)?;
            if changed {
                let keep = kept_packs(&to_write);
                cache.collect_garbage(&keep.iter().map(String::as_str).collect::<Vec<_>>());
            }
            Ok(())
        })
        .await
        .and_then(|written| written);
        match written {
            Ok(()) => {
                *lock(&self.state) = state;
                match serve {
                    Serve::Keep => {}
                    Serve::Builtin => self.store.reset_to_builtin(),
                    Serve::Snapshot(snapshot) => self.store.install(snapshot),
                }
                result
            }
            // Nothing new is durable, so nothing new is served.
            Err(e) if changed => match result {
                Ok(_) => Err(e),
                Err(original) => {
                    tracing::warn!("could not record the refused pack: {e}");
                    Err(original)
                }
            },
            // Check times are bookkeeping: failing to record them must not fail the refresh.
            Err(e) => {
                tracing::warn!("could not record the check time: {e}");
                *lock(&self.state) = state;
                result
            }
        }
    }

    /// Takes the state on disk when another process wrote a newer one (a higher sequence, or
    /// the same with later checks), and serves what it installed: otherwise this refresh
    /// would answer 304 to the adopted ETag and keep serving the old pack for good.
    pub(super) async fn adopt_newer_state(&self) {
        let cache = self.cache.clone();
        let Ok(Ok(Some(disk))) = blocking(move || cache.load_state()).await else {
            return;
        };
        {
            let mut state = lock(&self.state);
            let newer = disk.sequence > state.sequence
                || (disk.sequence == state.sequence && disk.last_check > state.last_check);
            if disk.channel != state.channel || !newer {
                return;
            }
            *state = disk;
            lift_key_marks(&mut state, &key_set_fingerprint(&self.config.content_keys));
        }
        let serving = self.store.capture();
        // Loaded and verified as at start-up; on failure the current pack keeps serving.
        match self.load_selected_off_thread().await {
            Ok(Loaded::Builtin { reason }) => {
                if serving.source() == Source::Remote {
                    self.activity.emit(Event::FellBack {
                        reason: reason.clone(),
                    });
                }
                *lock(&self.serving_reason) = Some(reason);
            }
            Ok(Loaded::Pack) => {
                let now = self.store.capture();
                if now.sha256() != serving.sha256() {
                    *lock(&self.serving_reason) = None;
                    self.activity.emit(installed_event(&serving, &now));
                }
            }
            Ok(Loaded::Nothing | Loaded::Missing { .. }) => {}
            Err(e) => tracing::warn!(
                "the state another process wrote does not load: {e}; still serving {} {}",
                serving.name(),
                serving.version()
            ),
        }
    }
}

/// The invariant of declared contracts, over generated app contracts, pack contracts and
/// templates: a pack opens for installing only when every template keeps the pack's own
/// `contract.json`, that contract fits the app's, and every template either requires is
/// in the pack. Anything else never installs.
#[cfg(test)]
mod contract_property {
    use std::collections::BTreeMap;

    use pack_contract::APP_SCHEMA;
    use pack_format::{ContentKey, Payload, PayloadFile, SealInput};
    use proptest::prelude::*;

    use super::*;

    const NAMES: [&str; 4] = ["user", "team", "tone", "mode"];

    /// `{"templates": [...], "variables": {...}}` with each variable a string or a bool.
    fn contract(variables: &BTreeMap<usize, bool>, templates: &[&str]) -> String {
        let variables: serde_json::Map<String, serde_json::Value> = variables
            .iter()
            .map(|(name, is_bool)| {
                let shape = if *is_bool { "bool" } else { "string" };
                (NAMES[*name].to_string(), shape.into())
            })
            .collect();
        serde_json::json!({"templates": templates, "variables": variables}).to_string()
    }

    fn names() -> impl Strategy<Value = BTreeMap<usize, bool>> {
        prop::collection::btree_map(0..NAMES.len(), any::<bool>(), 0..=NAMES.len())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn a_pack_that_breaks_its_contract_or_the_apps_never_opens(
            app in names(),
            pack in names(),
            used in prop::collection::btree_set(0..NAMES.len(), 0..3),
            app_renders_second in any::<bool>(),
            pack_lists_second in any::<bool>(),
            ships_second in any::<bool>(),
        ) {
            let app_templates: &[&str] =
                if app_renders_second { &["main.hbs", "second.hbs"] } else { &["main.hbs"] };
            let pack_templates: &[&str] =
                if pack_lists_second { &["main.hbs", "second.hbs"] } else { &["main.hbs"] };
            let main: String = used.iter().map(|n| format!("{{{{#if {}}}}}x{{{{/if}}}}", NAMES[*n])).collect();
            let mut files = vec![
                PayloadFile { path: "contract.json".into(), bytes: contract(&pack, pack_templates).into_bytes() },
                PayloadFile { path: "main.hbs".into(), bytes: main.into_bytes() },
            ];
            if ships_second {
                files.push(PayloadFile { path: "second.hbs".into(), bytes: b"second".to_vec() });
            }
            let payload = Payload::new(files, &Limits::DEFAULT).unwrap();
            let key = ContentKey::generate();
            let version = semver::Version::new(1, 0, 0);
            let sealed = pack_format::seal(
                &SealInput {
                    format: pack_format::FORMAT_VERSION,
                    name: "p",
                    version: &version,
                    schema: APP_SCHEMA,
                    payload: &payload,
                    mtime: 0,
                    zstd_level: 1,
                },
                &[&key],
            )
            .unwrap();
            let entry = PackRef {
                version,
                sha256: pack_format::sha256_hex(&sealed),
                size: sealed.len() as u64,
                schema: APP_SCHEMA,
            };
            let accepts = Accepts::App(
                pack_contract::Contract::app_from_json(&contract(&app, app_templates)).unwrap(),
            );
            let ring = ContentKeyRing::new([key]);
            let opened = open_pack(&sealed, &entry, "p", 1, &ring, &Limits::DEFAULT, &accepts);

            let templates_keep_the_pack = used.iter().all(|n| pack.contains_key(n));
            let pack_fits_the_app = pack.iter().all(|(n, shape)| app.get(n) == Some(shape))
                && app_templates.iter().all(|t| pack_templates.contains(t));
            let complete = ships_second || !pack_lists_second;
            prop_assert_eq!(
                opened.is_ok(),
                templates_keep_the_pack && pack_fits_the_app && complete,
                "{:?}",
                opened.err().map(|e| e.to_string())
            );
        }
    }
}
