//! Any OpenAI-compatible endpoint: OpenAI, OpenRouter (with its attribution headers),
//! DeepSeek, vLLM, LM Studio, llama.cpp's server. `POST {endpoint}/chat/completions` (JSON or
//! SSE) and `POST {endpoint}/embeddings`.

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::{Value, json};

use super::http::HttpCore;
use super::{BoxFuture, ChatProvider, ChatRequest, ChatResponse, EmbeddingProvider, LlmError};
use crate::config::ProviderSettings;

pub struct OpenAi {
    core: HttpCore,
    endpoint: String,
    api_key: String,
    model: String,
    embedding_model: String,
    stream: bool,
    max_tokens: u32,
    openrouter: bool,
    dimension: std::sync::atomic::AtomicUsize,
    schemas: super::SchemaSupport,
}

impl OpenAi {
    pub fn new(core: HttpCore, p: &ProviderSettings, openrouter: bool) -> OpenAi {
        OpenAi {
            core,
            endpoint: p.endpoint.trim_end_matches('/').to_owned(),
            api_key: p.api_key.clone(),
            model: p.model.clone(),
            embedding_model: p.embedding_model.clone(),
            stream: p.stream,
            max_tokens: p.max_tokens,
            openrouter,
            dimension: Default::default(),
            schemas: Default::default(),
        }
    }

    fn headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        if !self.api_key.is_empty()
            && let Ok(v) = HeaderValue::from_str(&format!("Bearer {}", self.api_key))
        {
            let mut v = v;
            v.set_sensitive(true);
            h.insert(AUTHORIZATION, v);
        }
        if self.openrouter {
            // OpenRouter's optional attribution headers.
            h.insert(
                "HTTP-Referer",
                HeaderValue::from_static("https://github.com/memex-rs/memex"),
            );
            h.insert("X-Title", HeaderValue::from_static("Memex"));
        }
        h
    }

    async fn chat_impl(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let last = super::SchemaSupport::JSON_ONLY;
        self.schemas
            .ask(&self.core.name, req, last, |level| self.chat_at(req, level))
            .await
    }

    /// One request, with as much of the schema as `level` says (see [`super::SchemaSupport`]).
    async fn chat_at(&self, req: &ChatRequest, level: u8) -> Result<ChatResponse, LlmError> {
        use super::SchemaSupport as S;
        let mut body = json!({
            "model": self.model,
            "messages": [
                {"role": "system", "content": req.system},
                {"role": "user", "content": req.user},
            ],
            "max_tokens": req.max_tokens.min(self.max_tokens),
            "temperature": 0.2,
        });
        match &req.schema {
            // llama.cpp's server turns the schema into a grammar; OpenAI enforces it (strict).
            Some(s) if level < S::JSON_ONLY => {
                let schema = if level == S::FULL {
                    s.schema.clone()
                } else {
                    s.without_limits()
                };
                body["response_format"] = json!({"type": "json_schema", "json_schema": {
                    "name": s.name, "strict": true, "schema": schema}});
            }
            _ if req.json || req.schema.is_some() => {
                body["response_format"] = json!({"type": "json_object"})
            }
            _ => {}
        }
        if self.stream {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
        }
        let url = format!("{}/chat/completions", self.endpoint);
        let answer = self.core.post(&url, self.headers(), &body).await?;
        let mut out = ChatResponse {
            content: String::new(),
            tokens_input: 0,
            tokens_output: 0,
            model: self.model.clone(),
        };
        if !self.stream {
            let v: Value = answer
                .body
                .json()
                .await
                .map_err(|e| self.core.broken(format!("the answer is not JSON: {e}")))?;
            let content = v["choices"][0]["message"]["content"]
                .as_str()
                .ok_or_else(|| {
                    self.core
                        .broken("the answer has no choices[0].message.content")
                })?;
            out.content = content.to_owned();
            read_usage(&v, &mut out);
            return Ok(out);
        }
        // Server-sent events: `data: {json}` lines, ending with `data: [DONE]`.
        let mut lines = super::http::Lines::new(answer.body);
        let mut done = false;
        while let Some(line) = lines.next(&self.core).await? {
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let data = data.trim();
            if data == "[DONE]" {
                done = true;
                break;
            }
            let v: Value = serde_json::from_str(data)
                .map_err(|e| self.core.broken(format!("a stream event is not JSON: {e}")))?;
            if let Some(delta) = v["choices"][0]["delta"]["content"].as_str() {
                out.content.push_str(delta);
            }
            read_usage(&v, &mut out);
        }
        if !done {
            return Err(self.core.broken("the stream ended before [DONE]"));
        }
        Ok(out)
    }
}

fn read_usage(v: &Value, out: &mut ChatResponse) {
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        out.tokens_input = u["prompt_tokens"].as_u64().unwrap_or(out.tokens_input);
        out.tokens_output = u["completion_tokens"].as_u64().unwrap_or(out.tokens_output);
    }
    if let Some(m) = v["model"].as_str() {
        out.model = m.to_owned();
    }
}

impl ChatProvider for OpenAi {
    chat_common!();

    fn is_local(&self) -> bool {
        super::is_loopback(&self.endpoint)
    }

    fn is_available(&self) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            self.core
                .reachable(&format!("{}/models", self.endpoint), self.headers())
                .await
        })
    }
}

impl EmbeddingProvider for OpenAi {
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
            let url = format!("{}/embeddings", self.endpoint);
            let v = self.core.post_json(&url, self.headers(), &body).await?;
            let mut rows: Vec<(u64, Vec<f32>)> = v["data"]
                .as_array()
                .ok_or_else(|| self.core.broken("the answer has no data array"))?
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    (
                        d["index"].as_u64().unwrap_or(i as u64),
                        super::floats(&d["embedding"]),
                    )
                })
                .collect();
            rows.sort_by_key(|r| r.0);
            let out = rows.into_iter().map(|r| r.1).collect();
            super::vectors(&self.core, out, texts.len(), &self.dimension)
        })
    }

    fn is_available(&self) -> BoxFuture<'_, bool> {
        ChatProvider::is_available(self)
    }
}
