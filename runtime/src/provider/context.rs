//! How large the model's context is, and how much of it a request may fill.
//!
//! The server's word comes first: an OpenAI-compatible `GET {base_url}/models` entry for
//! the model that carries a context length (`context_length` on OpenRouter and Together,
//! `max_model_len` on vLLM, `context_window` on Groq, `max_context_length` on LM Studio),
//! else llama.cpp's `GET /props` (`n_ctx`, the context the server was started with).
//! Without either, the configured `context_tokens`; without that, a conservative default
//! for the model's family ([`family_default`]).

use std::time::Duration;

use serde_json::Value;

use super::settings::{Api, ProviderSettings};

/// The longest answer a discovery request may have: a hosted catalogue lists hundreds of
/// models with their descriptions, well under this.
const MAX_DISCOVERY_BODY: usize = 8 * 1024 * 1024;
/// How long one discovery request may take, whole. A server that does not answer quickly
/// does not hold up the session: the settings apply.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(3);
/// A context length outside this range is not believed.
const PLAUSIBLE: std::ops::RangeInclusive<u64> = 512..=100_000_000;

/// A context for model ids no family below matches: small enough that a local model of
/// unknown size is summarised before it overflows, large enough for a working session.
pub const UNKNOWN_FAMILY_CONTEXT: u64 = 32_768;

/// The context assumed for a model when neither the server nor the config says: the
/// smallest window the family's current models are served with, matched on the id without
/// a vendor prefix (`anthropic/claude-…`, `meta-llama/Llama-…`).
pub fn family_default(model: &str) -> u64 {
    let id = model.rsplit('/').next().unwrap_or(model).to_lowercase();
    // Longer names before the shorter ones they contain (`gpt-4o` before `gpt-4`).
    const FAMILIES: &[(&str, u64)] = &[
        ("claude", 200_000),
        ("gpt-5", 128_000),
        ("gpt-4.1", 128_000),
        ("gpt-4o", 128_000),
        ("gpt-4-turbo", 128_000),
        ("gpt-4", 8_192),
        ("gpt-3.5", 16_385),
        ("o1", 128_000),
        ("o3", 128_000),
        ("o4", 128_000),
        ("gemini", 128_000),
        ("deepseek", 64_000),
        ("codestral", 32_000),
        ("devstral", 32_000),
        ("mistral", 32_000),
        ("mixtral", 32_000),
        ("qwen", 32_768),
        ("codellama", 16_384),
        ("llama", 8_192),
        ("gemma", 8_192),
        ("phi", 4_096),
    ];
    FAMILIES
        .iter()
        .find(|(family, _)| names(&id, family))
        .map_or(UNKNOWN_FAMILY_CONTEXT, |(_, tokens)| *tokens)
}

/// Whether `family` starts a word of `id`: `llama` in `llama-3`, not in `codellama`; the
/// two-letter `o1`, `o3`, `o4` only as a whole word (`o3-mini`).
fn names(id: &str, family: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    id.match_indices(family).any(|(at, _)| {
        let starts_word = !id[..at].ends_with(alnum);
        let ends_word = family.len() > 2 || !id[at + family.len()..].starts_with(alnum);
        starts_word && ends_word
    })
}

/// Where compaction starts: the context less a reserve for the answer (the request's
/// `max_tokens`) and a margin for the estimate's error (a sixteenth of the context),
/// never below half the context, whatever `max_tokens` says.
pub fn compaction_trigger(context_tokens: u64, max_output_tokens: u64) -> u64 {
    let reserve = max_output_tokens.saturating_add(context_tokens / 16);
    context_tokens
        .saturating_sub(reserve)
        .max(context_tokens / 2)
}

/// Asks the server how large its context is. `None` when it does not say, or not in time.
pub(crate) async fn discover(http: &reqwest::Client, settings: &ProviderSettings) -> Option<u64> {
    let models = match settings.api {
        Api::OpenAi => format!("{}/models", settings.base_url),
        Api::Anthropic => format!("{}/v1/models", settings.base_url),
    };
    if let Some(body) = get_json(http, settings, &models).await
        && let Some(tokens) = from_models(&body, &settings.model)
    {
        tracing::debug!(tokens, url = %models, "context length from the model list");
        return Some(tokens);
    }
    // llama.cpp serves `/props` at its root, beside `/v1`.
    let root = settings
        .base_url
        .strip_suffix("/v1")
        .unwrap_or(&settings.base_url);
    let props = format!("{root}/props");
    let tokens = from_props(&get_json(http, settings, &props).await?)?;
    tracing::debug!(tokens, url = %props, "context length from llama.cpp's props");
    Some(tokens)
}

/// One discovery GET, with the provider's credentials, read up to
/// [`MAX_DISCOVERY_BODY`] bytes within [`DISCOVERY_TIMEOUT`].
async fn get_json(http: &reqwest::Client, settings: &ProviderSettings, url: &str) -> Option<Value> {
    let mut request = http.get(url).timeout(DISCOVERY_TIMEOUT);
    request = match (settings.api, &settings.api_key) {
        (Api::OpenAi, Some(key)) => request.bearer_auth(key),
        (Api::Anthropic, Some(key)) => request
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01"),
        (_, None) => request,
    };
    let read = async {
        let mut response = request.send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.ok()? {
            if bytes.len() + chunk.len() > MAX_DISCOVERY_BODY {
                tracing::debug!("{url}: more than {MAX_DISCOVERY_BODY} bytes, not read");
                return None;
            }
            bytes.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&bytes).ok()
    };
    tokio::time::timeout(DISCOVERY_TIMEOUT, read)
        .await
        .ok()
        .flatten()
}

/// The context length in a model list's entry for `model` (`{"data": [{"id", …}]}`),
/// or in its only entry when the server lists one model under another name, as local
/// servers do (llama.cpp lists the file it loaded).
pub fn from_models(body: &Value, model: &str) -> Option<u64> {
    let entries = body
        .get("data")
        .or_else(|| body.get("models"))?
        .as_array()?;
    let entry = entries
        .iter()
        .find(|e| e.get("id").and_then(Value::as_str) == Some(model))
        .or(match entries.as_slice() {
            [only] => Some(only),
            _ => None,
        })?;
    [
        "context_length",
        "max_model_len",
        "context_window",
        "max_context_length",
    ]
    .iter()
    .find_map(|key| entry.get(*key).and_then(Value::as_u64))
    .or_else(|| {
        entry
            .pointer("/top_provider/context_length")
            .and_then(Value::as_u64)
    })
    .filter(|n| PLAUSIBLE.contains(n))
}

/// llama.cpp's `/props`: `n_ctx` in `default_generation_settings`, the context one
/// request gets (the server's, divided among its slots), or at the top level.
pub fn from_props(body: &Value) -> Option<u64> {
    body.pointer("/default_generation_settings/n_ctx")
        .or_else(|| body.get("n_ctx"))
        .and_then(Value::as_u64)
        .filter(|n| PLAUSIBLE.contains(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn families() {
        assert_eq!(family_default("claude-sonnet-4-20250514"), 200_000);
        assert_eq!(family_default("anthropic/claude-3.5-haiku"), 200_000);
        assert_eq!(family_default("gpt-4o-mini"), 128_000);
        assert_eq!(family_default("gpt-4-0613"), 8_192);
        assert_eq!(family_default("o3-mini"), 128_000);
        assert_eq!(family_default("meta-llama/Llama-3-8B-Instruct"), 8_192);
        assert_eq!(family_default("qwen2.5-coder:7b"), 32_768);
        assert_eq!(family_default("Qwen3-Coder-30B"), 32_768);
        // A family name inside another word is not that family.
        assert_eq!(family_default("foo1-bar"), UNKNOWN_FAMILY_CONTEXT);
        assert_eq!(family_default("dolphin-2"), UNKNOWN_FAMILY_CONTEXT);
        assert_eq!(family_default("codellama-13b"), 16_384);
        assert_eq!(family_default("test-model"), UNKNOWN_FAMILY_CONTEXT);
    }

    #[test]
    fn the_trigger_leaves_room_for_the_answer() {
        // 128k context, 8192-token answers: 128000 - 8192 - 8000.
        assert_eq!(compaction_trigger(128_000, 8_192), 111_808);
        // A small local context: 8192 - 2048 - 512.
        assert_eq!(compaction_trigger(8_192, 2_048), 5_632);
        // max_tokens as large as the context still leaves half of it to work in.
        assert_eq!(compaction_trigger(8_192, 8_192), 4_096);
    }

    #[test]
    fn model_lists_and_props() {
        let vllm = json!({"object": "list", "data": [{"id": "m", "max_model_len": 32768}]});
        assert_eq!(from_models(&vllm, "m"), Some(32_768));
        let openrouter = json!({"data": [
            {"id": "a", "context_length": 1000},
            {"id": "m", "context_length": 200000}
        ]});
        assert_eq!(from_models(&openrouter, "m"), Some(200_000));
        assert_eq!(from_models(&openrouter, "other"), None);
        let openai = json!({"data": [{"id": "gpt-4o", "object": "model", "owned_by": "openai"}]});
        assert_eq!(from_models(&openai, "gpt-4o"), None);
        let absurd = json!({"data": [{"id": "m", "context_length": 3}]});
        assert_eq!(from_models(&absurd, "m"), None);
        let llama = json!({"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1});
        assert_eq!(from_props(&llama), Some(8192));
        assert_eq!(from_props(&json!({"n_ctx": 4096})), Some(4096));
        assert_eq!(from_props(&json!({})), None);
    }
}
