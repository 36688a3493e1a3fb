//! The URLs among the config's `instructions` (OpenCode configs list some): each is fetched
//! once when a session's instruction sources are set up, under `web_fetch`'s address rules
//! and download cap and within [`URL_TIMEOUT`], and the text is kept for the whole session
//! (its helpers included). A URL that cannot be fetched is left out of the prompt with a
//! warning the user sees; the session goes on without it.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::tools::{WebSettings, fetch_text};

/// How long one instruction URL may take: a slow server must not hold up the start of
/// every session.
pub const URL_TIMEOUT: Duration = Duration::from_secs(5);

/// What fetching each of `urls` gave: its text, or why there is none. All are fetched at
/// once, so the wait is the slowest one's, never more than [`URL_TIMEOUT`].
pub fn fetch_urls(web: &WebSettings, urls: &[String]) -> BTreeMap<String, Result<String, String>> {
    if urls.is_empty() {
        return BTreeMap::new();
    }
    // Callers run inside an async runtime (a session) or outside one (`agent prompt`); a
    // thread with a runtime of its own serves both.
    let fetched = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("cannot start the fetch: {e}"))?;
                Ok::<_, String>(
                    runtime.block_on(futures_util::future::join_all(urls.iter().map(
                        |url| async move { (url.clone(), fetch_text(web, url, URL_TIMEOUT).await) },
                    ))),
                )
            })
            .join()
    });
    match fetched {
        Ok(Ok(results)) => results.into_iter().collect(),
        Ok(Err(why)) => urls
            .iter()
            .map(|url| (url.clone(), Err(why.clone())))
            .collect(),
        Err(_) => urls
            .iter()
            .map(|url| {
                (
                    url.clone(),
                    Err("the fetch failed unexpectedly".to_string()),
                )
            })
            .collect(),
    }
}
