//! Ollama: `POST /api/chat` (one JSON answer, or NDJSON when streaming) and `POST /api/embed`.

use serde_json::{Value, json};

use super::http::HttpCore;
use super::{BoxFuture, ChatProvider, ChatRequest, ChatResponse, EmbeddingProvider, LlmError};
use crate::config::ProviderSettings;

pub struct Ollama {
    core: HttpCore,
    endpoint: String,
    model: String,
    embedding_model: String,
    stream: bool,
    max_tokens: u32,
    dimension: std::sync::atomic::AtomicUsize,
    schemas: super::SchemaSupport,
}

impl Ollama {
    pub fn new(core: HttpCore, p: &ProviderSettings) -> Ollama {
        Ollama {
            core,
            endpoint: p.endpoint.trim_end_matches('/').to_owned(),
            model: p.model.clone(),
            embedding_model: p.embedding_model.clone(),
            stream: p.stream,
            max_tokens: p.max_tokens,
            dimension: Default::default(),
            schemas: Default::default(),
        }
    }

    async fn chat_impl(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        // Ollama before 0.5 takes only `"json"`: one step down is all there is.
        let last = super::SchemaSupport::NO_LIMITS;
        self.schemas
            .ask(&self.core.name, req, last, |level| self.chat_at(req, level))
            .await
    }

    async fn chat_at(&self, req: &ChatRequest, level: u8) -> Result<ChatResponse, LlmError> {
        use super::SchemaSupport as S;
        let mut body = json!({
            "model": self.model,
            "messages": [
                {"role": "system", "content": req.system},
                {"role": "user", "content": req.user},
            ],
            "stream": self.stream,
            "options": {"temperature": 0.2, "num_predict": req.max_tokens.min(self.max_tokens)},
        });
        match &req.schema {
            // Ollama constrains the output to the schema itself.
            Some(s) if level == S::FULL => body["format"] = s.schema.clone(),
            _ if req.json || req.schema.is_some() => body["format"] = json!("json"),
            _ => {}
        }
        let url = format!("{}/api/chat", self.endpoint);
        let answer = self.core.post(&url, Default::default(), &body).await?;
        let mut out = ChatResponse {
            content: String::new(),
            tokens_input: 0,
            tokens_output: 0,
            model: self.model.clone(),
        };
        let read = |v: &Value, out: &mut ChatResponse| {
            if let Some(c) = v["message"]["content"].as_str() {
                out.content.push_str(c);
            }
            if let Some(n) = v["prompt_eval_count"].as_u64() {
                out.tokens_input = n;
            }
            if let Some(n) = v["eval_count"].as_u64() {
                out.tokens_output = n;
            }
            if let Some(m) = v["model"].as_str() {
                out.model = m.to_owned();
            }
            v["done"].as_bool() == Some(true)
        };
        if !self.stream {
            let v: Value = answer
                .body
                .json()
                .await
                .map_err(|e| self.core.broken(format!("the answer is not JSON: {e}")))?;
            if v["message"]["content"].as_str().is_none() {
                return Err(self.core.broken("the answer has no message.content"));
            }
            read(&v, &mut out);
            return Ok(out);
        }
        // NDJSON: one object per line, the last with "done": true and the token counts.
        let mut lines = super::http::Lines::new(answer.body);
        while let Some(line) = lines.next(&self.core).await? {
            let v: Value = serde_json::from_str(&line)
                .map_err(|e| self.core.broken(format!("a stream line is not JSON: {e}")))?;
            if let Some(err) = v["error"].as_str() {
                return Err(self.core.broken(format!("the model failed: {err}")));
            }
            if read(&v, &mut out) {
                return Ok(out);
            }
        }
        Err(self.core.broken("the stream ended before \"done\": true"))
    }
}

impl ChatProvider for Ollama {
    chat_common!();

    fn is_local(&self) -> bool {
        true
    }

    fn is_available(&self) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            self.core
                .reachable(&format!("{}/api/tags", self.endpoint), Default::default())
                .await
        })
    }
}

impl EmbeddingProvider for Ollama {
    fn name(&self) -> &str {
        &self.core.name
    }

    fn dimension(&self) -> usize {
        self.dimension.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn embed_batch<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, LlmError>> {
        Box::pin(async move {
            let body = json!({"model": self.embedding_model, "input": texts});
            let url = format!("{}/api/embed", self.endpoint);
            let v = self.core.post_json(&url, Default::default(), &body).await?;
            let out: Vec<Vec<f32>> = v["embeddings"]
                .as_array()
                .ok_or_else(|| self.core.broken("the answer has no embeddings"))?
                .iter()
                .map(super::floats)
                .collect();
            super::vectors(&self.core, out, texts.len(), &self.dimension)
        })
    }

    fn is_available(&self) -> BoxFuture<'_, bool> {
        ChatProvider::is_available(self)
    }
}
