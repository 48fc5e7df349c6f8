//! Text embeddings for the vector layer.
//!
//! The local models are the `memex-embed` crate's (re-exported here); this module chooses the
//! embedder the settings ask for and adds the HTTP providers of the LLM layer (Ollama,
//! OpenAI-compatible, `[vector] provider`) behind the same [`Embedder`] interface. When the
//! local model's files are missing, the feature-hashing stand-in is used and everyone is told:
//! the log, `memex status` and every search response say so.

pub use memex_embed::{
    EmbedError, Embedder, chunk_chars, e5, fast_int8, hashing, minilm, model, normalized, wordpiece,
};

use std::sync::Arc;

use crate::config::{self, CompactSettings, Provider, VectorSettings};
use crate::llm::EmbeddingProvider;

/// The embedder the settings ask for. `local` is the in-process model, or the hashing
/// embedder when its files are missing or broken (with the reason recorded).
pub fn from_settings(
    v: &VectorSettings,
    compact: &CompactSettings,
    data_dir: &std::path::Path,
) -> Result<Arc<dyn Embedder>, EmbedError> {
    if v.provider == config::VECTOR_HASHING {
        return Ok(Arc::new(hashing::Hashing::new(None)));
    }
    if let Some(provider) = Provider::from_name(&v.provider).filter(|p| p.embeds()) {
        let p = crate::llm::embedding_provider(provider, compact).ok_or_else(|| {
            EmbedError::Setup(format!(
                "[vector] provider = \"{0}\" needs [compact.{0}] embedding_model",
                v.provider
            ))
        })?;
        let model = &compact.provider_settings(provider).embedding_model;
        return Ok(Arc::new(Remote::new(p, model, v.remote_dimension)));
    }
    let spec = model::configured(&v.model);
    let dir = model::locate(spec, &v.model_dir, data_dir);
    let int8 = v.precision == "int8";
    let loaded = model::verify(spec, &dir).and_then(|files| -> Result<Arc<dyn Embedder>, _> {
        Ok(if spec.name == model::E5.name {
            Arc::new(e5::E5::load(&files, v.threads, int8)?)
        } else {
            Arc::new(minilm::MiniLm::load(&files, v.threads, int8)?)
        })
    });
    match loaded {
        Ok(m) => Ok(m),
        Err(e) => {
            let reason = format!(
                "the embedding model {} is not usable ({e}); semantic search runs on a \
                 feature-hashing stand-in that only matches shared words. Install the model with \
                 `memex models install`",
                spec.name
            );
            tracing::warn!("{reason}");
            Ok(Arc::new(hashing::Hashing::new(Some(reason))))
        }
    }
}

/// An HTTP embedding provider (Ollama, OpenAI-compatible) behind the blocking interface.
pub struct Remote {
    inner: Arc<dyn EmbeddingProvider>,
    id: String,
    dimension: usize,
}

impl Remote {
    fn new(inner: Arc<dyn EmbeddingProvider>, model: &str, dimension: usize) -> Remote {
        let id = format!("{}:{model}", inner.name());
        Remote {
            inner,
            id,
            dimension,
        }
    }
}

impl Embedder for Remote {
    fn id(&self) -> &str {
        &self.id
    }

    fn dimension(&self) -> usize {
        self.dimension
    }

    fn chunk(&self, text: &str, max: usize) -> Vec<String> {
        // Remote models read ~512 tokens at least; about 4 characters make a token.
        chunk_chars(text, 1800, max)
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        // Whatever leaves the machine is redacted: stored text is already (unless `[store]
        // redact` is off), a search query or a hook's prompt is not.
        let redacted: Vec<String> = texts
            .iter()
            .map(|t| crate::redact::redact_text(t).0.into_owned())
            .collect();
        let texts = &redacted[..];
        // On the blocking pool of the service's runtime, that runtime drives the request;
        // from plain code (the CLI), a short-lived one does.
        let out = match tokio::runtime::Handle::try_current() {
            Ok(h) => h.block_on(self.inner.embed_batch(texts)),
            Err(_) => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| EmbedError::Setup(e.to_string()))?
                .block_on(self.inner.embed_batch(texts)),
        }
        .map_err(|e| EmbedError::Provider(Box::new(e)))?;
        if let Some(v) = out.iter().find(|v| v.len() != self.dimension) {
            return Err(EmbedError::Model(format!(
                "{} answered vectors of {} dimensions; [vector] remote_dimension says {}",
                self.id,
                v.len(),
                self.dimension
            )));
        }
        Ok(out.into_iter().map(normalized).collect())
    }
}
