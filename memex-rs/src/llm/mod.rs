//! The LLM layer: [`ChatProvider`] and [`EmbeddingProvider`] behind one shared HTTP core
//! ([`http::HttpCore`]: timeouts, retries with backoff and jitter, `Retry-After`, a circuit
//! breaker), one implementation per wire format (`ollama`, `openai` for every
//! OpenAI-compatible endpoint, `anthropic`), and the daily token budget.
//!
//! Memex never runs an agent CLI: every model is reached over HTTP.

/// The parts of [`ChatProvider`] every HTTP provider shares: its name and circuit from the
/// core, its model, and `chat` through its own `chat_impl`.
macro_rules! chat_common {
    () => {
        fn name(&self) -> &str {
            &self.core.name
        }

        fn model(&self) -> &str {
            &self.model
        }

        fn reset(&self) {
            self.core.reset();
        }

        fn chat<'a>(
            &'a self,
            req: &'a ChatRequest,
        ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
            Box::pin(self.chat_impl(req))
        }
    };
}

pub mod anthropic;
pub mod http;
pub mod ollama;
pub mod openai;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{CompactSettings, Provider};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One chat request: a system prompt and one user message, answered as JSON when `json`, and
/// in the shape of `schema` when one is given (each provider's own structured-output
/// mechanism, so that the answer is valid by construction).
#[derive(Debug, Clone)]
pub struct ChatRequest {
    pub system: String,
    pub user: String,
    pub max_tokens: u32,
    pub json: bool,
    pub schema: Option<Schema>,
}

/// A JSON Schema for an answer (an object whose keys are all required, nothing else allowed),
/// with the name the providers that want one show. Its strings and arrays carry length limits,
/// so that a small local model whose grammar enforces them closes its answer within its token
/// budget instead of being cut off mid-string.
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    pub name: &'static str,
    pub schema: serde_json::Value,
}

impl Schema {
    /// The schema without length limits: the subset OpenAI's strict mode takes.
    pub fn without_limits(&self) -> serde_json::Value {
        fn strip(v: &mut serde_json::Value) {
            match v {
                serde_json::Value::Object(m) => {
                    for k in ["maxLength", "minLength", "maxItems", "minItems"] {
                        m.remove(k);
                    }
                    m.values_mut().for_each(strip);
                }
                serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
                _ => {}
            }
        }
        let mut s = self.schema.clone();
        strip(&mut s);
        s
    }
}

/// How much of a [`Schema`] an endpoint takes, learnt from its refusals (a 400 or 422 to the
/// request): all of it; without length limits (OpenAI's strict subset); or none, JSON mode only
/// (DeepSeek, older Ollama and llama.cpp servers). Kept per provider for the process.
#[derive(Debug, Default)]
pub struct SchemaSupport(std::sync::atomic::AtomicU8);

impl SchemaSupport {
    pub const FULL: u8 = 0;
    pub const NO_LIMITS: u8 = 1;
    pub const JSON_ONLY: u8 = 2;

    pub fn level(&self) -> u8 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// After a refusal at `level`: whether a lesser level is left to try.
    pub fn refused(&self, level: u8, last: u8) -> bool {
        if level >= last {
            return false;
        }
        self.0
            .fetch_max(level + 1, std::sync::atomic::Ordering::Relaxed);
        true
    }

    /// Asks (`ask(level)`) at the level the endpoint takes; when it refuses the schema (a 400
    /// or 422 to a request that carries one), asks again with less of it, down to `last`.
    pub async fn ask<F, Fut>(
        &self,
        provider: &str,
        req: &ChatRequest,
        last: u8,
        ask: F,
    ) -> Result<ChatResponse, LlmError>
    where
        F: Fn(u8) -> Fut,
        Fut: Future<Output = Result<ChatResponse, LlmError>>,
    {
        loop {
            let level = self.level();
            match ask(level).await {
                Err(LlmError::Rejected { status, .. })
                    if req.schema.is_some()
                        && matches!(status, 400 | 422)
                        && self.refused(level, last) =>
                {
                    tracing::info!(
                        provider,
                        "the endpoint refused the answer's schema; asking with less of it"
                    );
                }
                other => return other,
            }
        }
    }
}

/// What a provider answered and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    pub content: String,
    pub tokens_input: u64,
    pub tokens_output: u64,
    pub model: String,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    /// An outage: transport error, timeout, 429, 5xx, an open circuit or a spent budget.
    /// The work waits (at least `retry_after`) and is tried again.
    #[error("{provider} is unavailable: {reason}")]
    Unavailable {
        provider: String,
        reason: String,
        retry_after: Option<Duration>,
    },
    /// The provider refused the request (bad key, unknown model, bad request): retrying the
    /// same request will not help.
    #[error("{provider} rejected the request ({status}): {message}")]
    Rejected {
        provider: String,
        status: u16,
        message: String,
    },
}

impl LlmError {
    pub fn is_outage(&self) -> bool {
        matches!(self, LlmError::Unavailable { .. })
    }
}

/// A chat model.
pub trait ChatProvider: Send + Sync {
    /// The provider's name (`ollama`, `openai`, ...).
    fn name(&self) -> &str;
    fn model(&self) -> &str;
    /// Whether spending on it is exempt from the daily budget (local models).
    fn is_local(&self) -> bool;
    fn chat<'a>(&'a self, req: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse, LlmError>>;
    /// A cheap reachability check (no tokens spent).
    fn is_available(&self) -> BoxFuture<'_, bool>;
    /// Forgets past failures (someone asked for the work now).
    fn reset(&self) {}
}

/// An embedding model.
pub trait EmbeddingProvider: Send + Sync {
    fn name(&self) -> &str;
    /// Vector length; 0 until the first answer when the model does not say.
    fn dimension(&self) -> usize;
    fn embed_batch<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, LlmError>>;
    fn embed<'a>(&'a self, text: &'a str) -> BoxFuture<'a, Result<Vec<f32>, LlmError>> {
        Box::pin(async move {
            let v = self
                .embed_batch(std::slice::from_ref(&text.to_owned()))
                .await?;
            v.into_iter().next().ok_or_else(|| LlmError::Unavailable {
                provider: self.name().to_owned(),
                reason: "the answer held no vector".into(),
                retry_after: None,
            })
        })
    }
    fn is_available(&self) -> BoxFuture<'_, bool>;
}

/// Whether an endpoint is on this machine.
pub fn is_loopback(endpoint: &str) -> bool {
    let host = endpoint
        .split("://")
        .nth(1)
        .unwrap_or(endpoint)
        .split(['/', '?'])
        .next()
        .unwrap_or("");
    let host = host
        .rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(host, |(h, _)| h);
    matches!(
        host.trim_matches(['[', ']']),
        "localhost" | "127.0.0.1" | "::1"
    ) || host.starts_with("127.")
}

/// Builds the chat provider named `name` from the settings; `None` for `heuristic`.
pub fn chat_provider(name: &str, c: &CompactSettings) -> Option<Arc<dyn ChatProvider>> {
    let provider = Provider::from_name(name)?;
    let p = c.provider_settings(provider);
    let core = http::HttpCore::new(name, Duration::from_secs(p.timeout_secs));
    Some(match provider {
        Provider::Ollama => Arc::new(ollama::Ollama::new(core, p)),
        Provider::Anthropic => Arc::new(anthropic::Anthropic::new(core, p)),
        Provider::OpenAi => Arc::new(openai::OpenAi::new(core, p, false)),
        Provider::OpenRouter => Arc::new(openai::OpenAi::new(core, p, true)),
    })
}

/// Builds the embedding provider `provider`, if it embeds and has an embedding model
/// configured.
pub fn embedding_provider(
    provider: Provider,
    c: &CompactSettings,
) -> Option<Arc<dyn EmbeddingProvider>> {
    let p = c.provider_settings(provider);
    if p.embedding_model.is_empty() {
        return None;
    }
    let core = http::HttpCore::new(provider.name(), Duration::from_secs(p.timeout_secs));
    match provider {
        Provider::Ollama => Some(Arc::new(ollama::Ollama::new(core, p))),
        Provider::OpenAi => Some(Arc::new(openai::OpenAi::new(core, p, false))),
        Provider::OpenRouter => Some(Arc::new(openai::OpenAi::new(core, p, true))),
        Provider::Anthropic => None,
    }
}

/// Checks an embedding answer (one non-empty vector per input) and records its dimension.
pub(crate) fn vectors(
    core: &http::HttpCore,
    out: Vec<Vec<f32>>,
    inputs: usize,
    dimension: &std::sync::atomic::AtomicUsize,
) -> Result<Vec<Vec<f32>>, LlmError> {
    if out.len() != inputs || out.iter().any(Vec::is_empty) {
        return Err(core.broken("the answer does not hold one vector per input"));
    }
    dimension.store(out[0].len(), std::sync::atomic::Ordering::Relaxed);
    Ok(out)
}

/// A JSON array of numbers as a vector (anything else: empty).
pub(crate) fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_f64())
                .map(|x| x as f32)
                .collect()
        })
        .unwrap_or_default()
}

/// Text of an error body, cut short, with anything that looks like a secret redacted (some
/// providers echo part of a rejected key). Never the request: keys live in headers only.
pub(crate) fn short(body: &str) -> String {
    let body = crate::redact::redact_text(body).0;
    let flat: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > 300 {
        format!("{}…", flat.chars().take(300).collect::<String>())
    } else {
        flat
    }
}
