//! Anthropic's Messages API: `POST {endpoint}/v1/messages` with `x-api-key` and
//! `anthropic-version`.

use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::json;

use super::http::HttpCore;
use super::{BoxFuture, ChatProvider, ChatRequest, ChatResponse, LlmError};
use crate::config::ProviderSettings;

/// The API version Memex speaks.
pub const VERSION: &str = "2023-06-01";

pub struct Anthropic {
    core: HttpCore,
    endpoint: String,
    api_key: String,
    model: String,
    max_tokens: u32,
}

impl Anthropic {
    pub fn new(core: HttpCore, p: &ProviderSettings) -> Anthropic {
        Anthropic {
            core,
            endpoint: p.endpoint.trim_end_matches('/').to_owned(),
            api_key: p.api_key.clone(),
            model: p.model.clone(),
            max_tokens: p.max_tokens,
        }
    }

    fn headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Ok(mut v) = HeaderValue::from_str(&self.api_key) {
            v.set_sensitive(true);
            h.insert("x-api-key", v);
        }
        h.insert("anthropic-version", HeaderValue::from_static(VERSION));
        h
    }

    async fn chat_impl(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let mut system = req.system.clone();
        if req.json && req.schema.is_none() {
            system.push_str("\nAnswer with one JSON object and nothing else.");
        }
        let mut body = json!({
            "model": self.model,
            "max_tokens": req.max_tokens.min(self.max_tokens),
            "temperature": 0.2,
            "system": system,
            "messages": [{"role": "user", "content": req.user}],
        });
        // Structured output: one tool whose input is the answer, and the model made to call it.
        if let Some(s) = &req.schema {
            body["tools"] = json!([{"name": s.name, "description": "Record the answer.",
                                    "input_schema": s.schema}]);
            body["tool_choice"] = json!({"type": "tool", "name": s.name});
        }
        let url = format!("{}/v1/messages", self.endpoint);
        let v = self.core.post_json(&url, self.headers(), &body).await?;
        let blocks = v["content"]
            .as_array()
            .ok_or_else(|| self.core.broken("the answer has no content blocks"))?;
        let tool_input = req.schema.as_ref().and_then(|s| {
            blocks
                .iter()
                .find(|b| b["type"] == "tool_use" && b["name"] == s.name)
                .map(|b| b["input"].to_string())
        });
        let content: String = match tool_input {
            Some(input) => input,
            None => blocks
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str())
                .collect(),
        };
        Ok(ChatResponse {
            content,
            tokens_input: v["usage"]["input_tokens"].as_u64().unwrap_or(0),
            tokens_output: v["usage"]["output_tokens"].as_u64().unwrap_or(0),
            model: v["model"].as_str().unwrap_or(&self.model).to_owned(),
        })
    }
}

impl ChatProvider for Anthropic {
    chat_common!();

    fn is_local(&self) -> bool {
        super::is_loopback(&self.endpoint)
    }

    fn is_available(&self) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            self.core
                .reachable(&format!("{}/v1/models", self.endpoint), self.headers())
                .await
        })
    }
}
