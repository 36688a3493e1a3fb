//! Steps 1-6 of a refresh, the part that talks to packd: the channel document, its
//! signature and the pack, each GET capped and retried on transient failures, then the pack
//! hashed and opened on a blocking thread.

use super::install::open_pack;
use super::*;

/// A response body read under its cap, with what the client uses from the headers.
pub(super) struct Fetched {
    body: Vec<u8>,
    etag: Option<String>,
    /// `X-Promptpack-Sequence`: the channel sequence of the document sent.
    sequence: Option<u64>,
}

/// Longest ETag kept.
const MAX_ETAG_LEN: usize = 256;

/// Every pause between attempts is shorter than this.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

impl Client {
    /// The signature of exactly the sequence a document response carried, so a release
    /// landing between the two requests cannot pair one publish's document with another's
    /// signature. A server that does not say which sequence it sent gets the live one.
    async fn fetch_signature(
        &self,
        server: &str,
        channel: &str,
        sequence: Option<u64>,
    ) -> Result<String, ClientError> {
        let sig_url = match sequence {
            Some(sequence) => format!("{server}{}", paths::history_signature(channel, sequence)),
            None => format!("{server}{}", paths::channel_signature(channel)),
        };
        let Some(signature) = self
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
                detail: "Not Modified, to a request that was not conditional".to_string(),
            });
        };
        String::from_utf8(signature.body).map_err(|_| {
            ClientError::Document(FormatError::Malformed {
                what: "channel signature",
                reason: "not UTF-8".to_string(),
            })
        })
    }

    /// Steps 1-6 of a refresh: everything but writing. `Err` means nothing is to be written
    /// beyond the check time.
    pub(super) async fn prepare(&self, now: OffsetDateTime) -> Result<Plan, ClientError> {
        let server = self.config.server.as_deref().ok_or(ClientError::NoServer)?;
        let state = lock(&self.state).clone();
        let channel = &self.config.channel;
        let channel_url = format!("{server}{}", paths::channel(channel));

        // 1. Conditional GET of the document, sent whenever a document is held; the
        // signature of the sequence it carried with a new one.
        let etag = state.document.as_ref().and(state.etag.as_deref());
        let fetched = self
            .get_capped(
                &channel_url,
                "channel document",
                self.config.limits.max_channel_len as u64,
                None,
                etag,
            )
            .await?;
        let answer = match fetched {
            None => Answer::NotModified { url: channel_url },
            Some(fetched) => Answer::Document {
                signature: self
                    .fetch_signature(server, channel, fetched.sequence)
                    .await?,
                body: fetched.body,
                etag: fetched.etag,
            },
        };

        // 2-3. Verify, select, and the checks before a download (`policy::refresh`).
        let serving = self.store.capture();
        let render_marked = |sha256: &str| self.health.is_marked(sha256);
        let render_detail = self.health.detail();
        let held = Held {
            state: &state,
            serving: &serving,
            render_marked: &render_marked,
            render_detail: &render_detail,
        };
        let decided = refresh::decide(&self.config, &self.install_id, &held, answer, now);
        *lock(&self.considering) = decided.considering;
        let download = match decided.next? {
            Next::Plan(plan) => return Ok(plan),
            Next::Download(download) => download,
        };

        // 4. Download, never more than the signed size; hash before parsing anything.
        let entry = download.entry.clone();
        let blob_url = format!("{server}{}", paths::blob(&entry.sha256));
        let Some(fetched) = self
            .get_capped(&blob_url, "pack", entry.size, Some(entry.size), None)
            .await?
        else {
            return Err(ClientError::Status {
                url: blob_url,
                status: 304,
                detail: "Not Modified, to a request that was not conditional".to_string(),
            });
        };

        // 5-6. Hash, header against the entry, decrypt, untar, validate: on a blocking
        // thread, so the async workers stay free for the network (and the model stream).
        let opened = {
            let pack_name = download.pack_name.clone();
            let sequence = download.sequence;
            let keys = self.config.content_keys.clone();
            let limits = self.config.limits;
            let accepts = self.config.contract.clone();
            blocking(move || {
                let bytes = fetched.body;
                let found = sha256_hex(&bytes);
                if found != entry.sha256 {
                    return Err(ClientError::HashMismatch {
                        expected: entry.sha256.clone(),
                        found,
                    });
                }
                let snapshot = open_pack(
                    &bytes, &entry, &pack_name, sequence, &keys, &limits, &accepts,
                );
                Ok(Opened { bytes, snapshot })
            })
            .await?
        };
        Ok(refresh::decide_pack(
            &state,
            download,
            opened,
            &key_set_fingerprint(&self.config.content_keys),
            now,
        ))
    }

    /// GET with a byte cap, optional exact length and `If-None-Match`, retried on transient
    /// failures on the shared [`Backoff`] schedule (jitter, under [`MAX_BACKOFF`]). `None`
    /// means 304.
    async fn get_capped(
        &self,
        url: &str,
        what: &'static str,
        cap: u64,
        exact: Option<u64>,
        etag: Option<&str>,
    ) -> Result<Option<Fetched>, ClientError> {
        let backoff = Backoff {
            first: self.config.backoff,
            cap: MAX_BACKOFF,
            retries: Some(self.config.attempts.saturating_sub(1) as usize),
        };
        // The refresh deadline still bounds the whole refresh, waits included.
        (|| self.get_once(url, what, cap, exact, etag))
            .retry(backoff.delays())
            .when(ClientError::is_transient)
            .notify(|e, wait| tracing::info!("{e}; retrying in {} ms", wait.as_millis()))
            .await
    }

    /// A GET of `url` with the headers every request to packd carries (this release, the
    /// installed pack, and the install hash with telemetry on).
    pub(crate) fn request(&self, url: &str) -> Request {
        let installed = match self.store.capture().source() {
            Source::Remote => self.store.capture().sha256().to_string(),
            Source::Builtin => headers::INSTALLED_BUILTIN.to_string(),
        };
        let request = Request::get(url)
            .header(
                HeaderName::from_static(headers::CLIENT_VERSION),
                self.config.client_version.to_string(),
            )
            .header(HeaderName::from_static(headers::INSTALLED_PACK), installed);
        match &self.install_hash {
            Some(install) => request.header(HeaderName::from_static(headers::INSTALL), install),
            None => request,
        }
    }

    /// What this client sends its requests to packd through.
    pub fn transport(&self) -> &dyn Transport {
        &*self.transport
    }

    async fn get_once(
        &self,
        url: &str,
        what: &'static str,
        cap: u64,
        exact: Option<u64>,
        etag: Option<&str>,
    ) -> Result<Option<Fetched>, ClientError> {
        let http_err = |e: TransportError| e.at(url);
        let mut request = self.request(url);
        if let Some(etag) = etag {
            request = request.header(reqwest::header::IF_NONE_MATCH, etag);
        }
        let mut response = self.transport.send(request).await.map_err(http_err)?;
        let status = response.status;
        if status == StatusCode::NOT_MODIFIED {
            // Only an answer to `If-None-Match`: otherwise there is nothing it can refer to.
            if etag.is_none() {
                return Err(ClientError::Status {
                    url: url.to_string(),
                    status: 304,
                    detail: "Not Modified, to a request that was not conditional".to_string(),
                });
            }
            return Ok(None);
        }
        if !status.is_success() {
            return Err(ClientError::Status {
                url: url.to_string(),
                status: status.as_u16(),
                detail: error_detail(response).await,
            });
        }
        let too_long = || ClientError::BodyTooLong {
            what,
            url: url.to_string(),
            limit: cap,
        };
        if response.content_length.is_some_and(|len| len > cap) {
            return Err(too_long());
        }
        // Stored in the state and sent back: an oversized one is dropped (no conditional
        // request next time) rather than kept.
        let new_etag = response
            .header(reqwest::header::ETAG)
            .filter(|v| v.len() <= MAX_ETAG_LEN)
            .map(str::to_string);
        // Anything but a plain number is ignored: the signature is then fetched as the live
        // one, and the signature check decides.
        let sequence = response
            .header(headers::SEQUENCE)
            .and_then(|v| v.parse::<u64>().ok());
        // The server's length is only a hint: never reserve more than a bounded first piece.
        let hint = response.content_length.unwrap_or(0).min(cap).min(1 << 20);
        let mut body = Vec::with_capacity(usize::try_from(hint).unwrap_or(0));
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
        Ok(Some(Fetched {
            body,
            etag: new_etag,
            sequence,
        }))
    }
}
