//! Which model endpoint to call, from the config file, the environment and flags.
//!
//! ```toml
//! provider = "local"                  # which [providers.*] entry to use
//!
//! [providers.local]
//! api = "openai"                      # or "anthropic"
//! base_url = "http://127.0.0.1:8080/v1"
//! model = "qwen3-coder"
//! api_key_env = "LOCAL_API_KEY"       # optional: the variable holding the key
//! max_tokens = 8192                   # optional
//! idle_timeout_secs = 120             # optional
//! max_retries = 4                     # optional
//! max_retry_wait_secs = 60            # optional: longest pause between two attempts
//! context_tokens = 131072             # optional: used when the server does not say
//! ```
//!
//! A 429 or 5xx answer is retried after the pause the server asks for (`Retry-After` in
//! seconds or as an HTTP date, or `retry-after-ms`), else after an exponential backoff with
//! jitter (the n-th pause drawn between 0.5 s·2^(n−1) and twice that, always under
//! `max_retry_wait_secs`); either way never longer than `max_retry_wait_secs`. A value that is neither a plain
//! number nor a date (`-5`, `1e20`, `NaN`) is ignored and the backoff applies.
//!
//! Precedence, highest first: flags, then `AGENT_BASE_URL`, `AGENT_API`, `AGENT_MODEL`,
//! `AGENT_API_KEY`, `AGENT_CONTEXT_TOKENS` and `AGENT_MAX_TOKENS`, then the file. For `openai` the base URL includes the version
//! path (`…/v1`), as OpenAI's own clients expect; for `anthropic` it does not.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

pub const BASE_URL_ENV: &str = "AGENT_BASE_URL";
pub const API_ENV: &str = "AGENT_API";
pub const MODEL_ENV: &str = "AGENT_MODEL";
pub const API_KEY_ENV: &str = "AGENT_API_KEY";
/// The model's context window in tokens; history is compacted past it.
pub const CONTEXT_TOKENS_ENV: &str = "AGENT_CONTEXT_TOKENS";
/// The most tokens one answer may take (`max_tokens`); a small local model can otherwise
/// ramble at a few tokens a second until its context is full.
pub const MAX_TOKENS_ENV: &str = "AGENT_MAX_TOKENS";
/// The longest pause between two attempts of a model call when the config sets none.
pub const DEFAULT_MAX_RETRY_WAIT_SECS: u64 = 60;
/// The context window of [`ProviderSettings::for_tests`]. Elsewhere, when neither the file
/// nor the environment gives one, the model family's default applies
/// ([`super::context::family_default`]), unless the server says (see [`super::context`]).
pub const DEFAULT_CONTEXT_TOKENS: u64 = 128_000;

/// The wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    #[serde(rename = "openai")]
    OpenAi,
    Anthropic,
}

impl std::str::FromStr for Api {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "openai" => Ok(Api::OpenAi),
            "anthropic" => Ok(Api::Anthropic),
            other => Err(format!(
                "unknown api {other:?}; expected openai or anthropic"
            )),
        }
    }
}

impl std::fmt::Display for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Api::OpenAi => "openai",
            Api::Anthropic => "anthropic",
        })
    }
}

#[derive(Debug, Default, Deserialize)]
struct File {
    provider: Option<String>,
    #[serde(default)]
    providers: BTreeMap<String, Entry>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    api: Option<Api>,
    base_url: Option<String>,
    model: Option<String>,
    api_key_env: Option<String>,
    max_tokens: Option<u32>,
    idle_timeout_secs: Option<u64>,
    max_retries: Option<u32>,
    max_retry_wait_secs: Option<u64>,
    context_tokens: Option<u64>,
}

/// Values given on the command line.
#[derive(Debug, Clone, Default)]
pub struct ProviderOverrides {
    pub provider: Option<String>,
    pub api: Option<Api>,
    pub base_url: Option<String>,
    pub model: Option<String>,
}

/// A resolved provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSettings {
    /// The `[providers.<id>]` entry, or `env` when only the environment configured it.
    pub id: String,
    pub api: Api,
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    pub max_tokens: Option<u32>,
    pub idle_timeout: Duration,
    pub max_retries: u32,
    pub retry_base: Duration,
    /// The longest pause between two attempts, whatever the server asks for.
    pub max_retry_wait: Duration,
    /// The most bytes one streamed answer may take on the wire.
    pub max_response_bytes: usize,
    /// The context window as configured, else the model family's default. The server's
    /// own word, when it gives one, beats it ([`super::Provider::context_tokens`]).
    pub context_tokens: u64,
}

impl ProviderSettings {
    /// The provider part of a provider-qualified model id (`provider/model`): the
    /// `[providers.<id>]` entry, or the API's name when only the environment configured it.
    pub fn provider_name(&self) -> String {
        if self.id == "env" {
            self.api.to_string()
        } else {
            self.id.clone()
        }
    }

    /// The schedule failed model calls are retried on: `max_retries` retries from
    /// `retry_base`, doubling, jittered, every pause under `max_retry_wait`.
    pub fn backoff(&self) -> pack_protocol::retry::Backoff {
        pack_protocol::retry::Backoff {
            first: self.retry_base,
            cap: self.max_retry_wait,
            retries: Some(self.max_retries as usize),
        }
    }

    /// Resolves settings from the config file's text, the command line and `env`.
    pub fn resolve(
        config_text: &str,
        overrides: &ProviderOverrides,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ProviderSettings, String> {
        let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let file: File = toml::from_str(config_text).map_err(|e| e.to_string())?;
        let chosen = overrides.provider.clone().or(file.provider.clone());
        let (id, entry) = match chosen {
            Some(id) => match file.providers.get(&id) {
                Some(entry) => (id, entry.clone()),
                None => {
                    let known: Vec<&str> = file.providers.keys().map(String::as_str).collect();
                    return Err(format!(
                        "no [providers.{id}] in the config file; configured: {}",
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    ));
                }
            },
            None => match (file.providers.len(), file.providers.iter().next()) {
                (_, None) => ("env".to_string(), Entry::default()),
                (1, Some((id, entry))) => (id.clone(), entry.clone()),
                (_, Some(_)) => {
                    let known: Vec<&str> = file.providers.keys().map(String::as_str).collect();
                    return Err(format!(
                        "several providers configured ({}); pick one with --provider or `provider = \"…\"`",
                        known.join(", ")
                    ));
                }
            },
        };
        let api = match (overrides.api, env(API_ENV)) {
            (Some(api), _) => api,
            (None, Some(text)) => text.parse().map_err(|e| format!("{API_ENV}: {e}"))?,
            (None, None) => entry.api.unwrap_or(Api::OpenAi),
        };
        // Everything missing is said at once, not one setting per run.
        let base_url = overrides
            .base_url
            .clone()
            .or_else(|| env(BASE_URL_ENV))
            .or(entry.base_url);
        let model = overrides
            .model
            .clone()
            .or_else(|| env(MODEL_ENV))
            .or(entry.model);
        let mut unset: Vec<(&str, &str, &str)> = Vec::new();
        if base_url.is_none() {
            unset.push(("base_url", "--base-url URL", BASE_URL_ENV));
        }
        if model.is_none() {
            unset.push(("model", "--model NAME", MODEL_ENV));
        }
        let mut problems = Vec::new();
        if !unset.is_empty() {
            let list = |pick: fn(&(&str, &str, &str)) -> String| {
                unset.iter().map(pick).collect::<Vec<_>>().join(" and ")
            };
            problems.push(format!(
                "{} {} not set: pass {}, set {}, or set {} under [providers.<id>] in config.toml",
                list(|u| format!("`{}`", u.0)),
                if unset.len() == 1 { "is" } else { "are" },
                list(|u| u.1.to_string()),
                list(|u| u.2.to_string()),
                list(|u| format!("`{}`", u.0)),
            ));
        }
        let api_key = match (env(API_KEY_ENV), &entry.api_key_env) {
            (Some(key), _) => Some(key),
            (None, Some(var)) => {
                let key = env(var);
                if key.is_none() {
                    problems.push(format!(
                        "[providers.{id}] api_key_env = {var:?}, but {var} is not set"
                    ));
                }
                key
            }
            (None, None) => None,
        };
        let (Some(base_url), Some(model), true) = (base_url, model, problems.is_empty()) else {
            return Err(problems.join("; "));
        };
        let context_tokens = match env(CONTEXT_TOKENS_ENV) {
            Some(text) => text
                .trim()
                .parse()
                .map_err(|e| format!("{CONTEXT_TOKENS_ENV}: {e}"))?,
            None => entry
                .context_tokens
                .unwrap_or_else(|| super::context::family_default(&model)),
        };
        Ok(ProviderSettings {
            id,
            api,
            base_url: base_url.trim_end_matches('/').to_string(),
            model,
            api_key,
            max_tokens: match env(MAX_TOKENS_ENV) {
                Some(text) => Some(
                    text.trim()
                        .parse()
                        .map_err(|e| format!("{MAX_TOKENS_ENV}: {e}"))?,
                ),
                None => entry.max_tokens,
            },
            idle_timeout: Duration::from_secs(entry.idle_timeout_secs.unwrap_or(120).max(1)),
            max_retries: entry.max_retries.unwrap_or(4),
            retry_base: Duration::from_millis(500),
            max_retry_wait: Duration::from_secs(
                entry
                    .max_retry_wait_secs
                    .unwrap_or(DEFAULT_MAX_RETRY_WAIT_SECS),
            ),
            max_response_bytes: super::MAX_RESPONSE_BYTES,
            context_tokens,
        })
    }

    /// The URL one model call is posted to.
    pub fn endpoint(&self) -> String {
        match self.api {
            Api::OpenAi => format!("{}/chat/completions", self.base_url),
            Api::Anthropic => format!("{}/v1/messages", self.base_url),
        }
    }

    /// Settings for a local test server: short timeouts, quick retries.
    pub fn for_tests(api: Api, base_url: &str) -> ProviderSettings {
        ProviderSettings {
            id: "test".to_string(),
            api,
            base_url: base_url.trim_end_matches('/').to_string(),
            model: "test-model".to_string(),
            api_key: None,
            max_tokens: None,
            idle_timeout: Duration::from_secs(5),
            max_retries: 3,
            retry_base: Duration::from_millis(10),
            max_retry_wait: Duration::from_secs(DEFAULT_MAX_RETRY_WAIT_SECS),
            max_response_bytes: super::MAX_RESPONSE_BYTES,
            context_tokens: DEFAULT_CONTEXT_TOKENS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
provider = "local"
[providers.local]
api = "anthropic"
base_url = "http://file/"
model = "file-model"
api_key_env = "MY_KEY"
[providers.other]
base_url = "http://other"
model = "m"
"#;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn file_then_env_then_flags() {
        let s = ProviderSettings::resolve(
            FILE,
            &ProviderOverrides::default(),
            env(&[("MY_KEY", "k1")]),
        )
        .unwrap();
        assert_eq!(
            (s.id.as_str(), s.api, s.base_url.as_str(), s.model.as_str()),
            ("local", Api::Anthropic, "http://file", "file-model")
        );
        assert_eq!(s.api_key.as_deref(), Some("k1"));

        let vars = [
            ("MY_KEY", "k1"),
            (MODEL_ENV, "env-model"),
            (API_ENV, "openai"),
            (API_KEY_ENV, "k2"),
        ];
        let s = ProviderSettings::resolve(FILE, &ProviderOverrides::default(), env(&vars)).unwrap();
        assert_eq!((s.api, s.model.as_str()), (Api::OpenAi, "env-model"));
        assert_eq!(s.api_key.as_deref(), Some("k2"));

        let flags = ProviderOverrides {
            provider: Some("other".into()),
            model: Some("flag-model".into()),
            ..Default::default()
        };
        let s = ProviderSettings::resolve(FILE, &flags, env(&vars)).unwrap();
        assert_eq!(
            (s.id.as_str(), s.base_url.as_str(), s.model.as_str()),
            ("other", "http://other", "flag-model")
        );
    }

    #[test]
    fn the_context_comes_from_the_config_else_the_model_family() {
        let flags = |model: &str| ProviderOverrides {
            base_url: Some("http://x".into()),
            model: Some(model.into()),
            ..Default::default()
        };
        let resolve = |text: &str, model: &str, vars: &[(&str, &str)]| {
            ProviderSettings::resolve(text, &flags(model), env(vars))
                .unwrap()
                .context_tokens
        };
        assert_eq!(resolve("", "claude-sonnet-4", &[]), 200_000);
        assert_eq!(resolve("", "llama-3-8b", &[]), 8_192);
        assert_eq!(
            resolve("", "some-new-model", &[]),
            super::super::context::UNKNOWN_FAMILY_CONTEXT
        );
        let file = "[providers.p]\ncontext_tokens = 65536\n";
        assert_eq!(resolve(file, "llama-3-8b", &[]), 65_536);
        assert_eq!(
            resolve(file, "llama-3-8b", &[(CONTEXT_TOKENS_ENV, "4096")]),
            4_096
        );
    }

    #[test]
    fn errors_name_the_way_out() {
        let err =
            ProviderSettings::resolve("", &ProviderOverrides::default(), env(&[])).unwrap_err();
        assert!(err.contains(BASE_URL_ENV), "{err}");
        let err =
            ProviderSettings::resolve(FILE, &ProviderOverrides::default(), env(&[])).unwrap_err();
        assert!(err.contains("MY_KEY is not set"), "{err}");
        let flags = ProviderOverrides {
            provider: Some("nope".into()),
            ..Default::default()
        };
        let err = ProviderSettings::resolve(FILE, &flags, env(&[])).unwrap_err();
        assert!(err.contains("configured: local, other"), "{err}");
    }
}
