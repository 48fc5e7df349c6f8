//! The LLM providers against local HTTP servers speaking each provider's documented wire format
//! (OpenAI JSON and SSE, Ollama JSON and NDJSON, Anthropic Messages): the requests Memex sends
//! (path, headers, body) and what it makes of 429 + Retry-After, 500s, broken streams, slow
//! replies, garbage, refusals; and the engine's fallback, malformed-output and budget rules.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use memex::compact::{Engine, Lang, TalkSummary};
use memex::config::{CompactSettings, ProviderSettings};
use memex::llm::{self, ChatRequest, LlmError};
use serde_json::{Value, json};

/// What the fake server answers next.
#[derive(Clone)]
enum Reply {
    Json(u16, Value),
    Header(u16, &'static str, &'static str, Value),
    Text(u16, &'static str),
    /// A streamed body in chunks, with a pause between them.
    Stream(&'static str, Vec<String>),
    Slow(Duration, Value),
}

#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    headers: HeaderMap,
    body: Value,
}

#[derive(Clone, Default)]
struct Fake {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

async fn handle(
    State(f): State<Fake>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    f.seen.lock().unwrap().push(Seen {
        method: method.to_string(),
        path: uri.path().to_owned(),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    let reply = f
        .replies
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Reply::Json(500, json!({"error": "no reply scripted"})));
    match reply {
        Reply::Json(s, v) => (StatusCode::from_u16(s).unwrap(), axum::Json(v)).into_response(),
        Reply::Header(s, k, v, body) => {
            (StatusCode::from_u16(s).unwrap(), [(k, v)], axum::Json(body)).into_response()
        }
        Reply::Text(s, t) => (StatusCode::from_u16(s).unwrap(), t).into_response(),
        Reply::Stream(ct, chunks) => {
            let stream = async_stream(chunks);
            Response::builder()
                .header("content-type", ct)
                .body(Body::from_stream(stream))
                .unwrap()
        }
        Reply::Slow(d, v) => {
            tokio::time::sleep(d).await;
            axum::Json(v).into_response()
        }
    }
}

fn async_stream(
    chunks: Vec<String>,
) -> impl futures_core::Stream<Item = Result<String, std::io::Error>> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        for c in chunks {
            if tx.send(Ok(c)).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    tokio_stream_from(rx)
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<String, std::io::Error>>,
) -> impl futures_core::Stream<Item = Result<String, std::io::Error>> {
    futures_util_unfold(move |cx| rx.poll_recv(cx))
}

/// A minimal `Stream` from a poll function (no extra crates).
fn futures_util_unfold<T>(
    f: impl FnMut(&mut std::task::Context<'_>) -> std::task::Poll<Option<T>> + Unpin,
) -> impl futures_core::Stream<Item = T> {
    struct S<F>(F);
    impl<T, F: FnMut(&mut std::task::Context<'_>) -> std::task::Poll<Option<T>> + Unpin>
        futures_core::Stream for S<F>
    {
        type Item = T;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<T>> {
            (self.0)(cx)
        }
    }
    S(f)
}

async fn fake(replies: Vec<Reply>) -> (String, Fake) {
    let f = Fake::default();
    f.replies.lock().unwrap().extend(replies);
    let app = axum::Router::new().fallback(handle).with_state(f.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), f)
}

fn settings(provider: &str, endpoint: &str, stream: bool, timeout_secs: u64) -> CompactSettings {
    let mut c = CompactSettings {
        provider: provider.into(),
        ..Default::default()
    };
    let p = ProviderSettings {
        endpoint: endpoint.into(),
        api_key: "sk-test-key-123".into(),
        model: "test-model".into(),
        stream,
        timeout_secs,
        max_tokens: 512,
        embedding_model: "embed-model".into(),
    };
    match provider {
        "ollama" => c.ollama = p,
        "anthropic" => c.anthropic = p,
        "openrouter" => c.openrouter = p,
        _ => c.openai = p,
    }
    c
}

fn req() -> ChatRequest {
    ChatRequest {
        system: "be brief".into(),
        user: "summarise this".into(),
        max_tokens: 100,
        json: true,
        schema: None,
    }
}

/// A request with the talk summary's schema, as the compact layer sends it.
fn req_with_schema() -> ChatRequest {
    ChatRequest {
        schema: Some(memex::compact::prompt::l2_schema()),
        ..req()
    }
}

fn openai_answer(content: &str) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "test-model-0125",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28}})
}

#[tokio::test]
async fn openai_json_request_and_answer() {
    let (url, f) = fake(vec![Reply::Json(
        200,
        openai_answer("{\"summary\": \"ok\"}"),
    )])
    .await;
    let p = llm::chat_provider(
        "openai",
        &settings("openai", &format!("{url}/v1"), false, 5),
    )
    .unwrap();
    let r = p.chat(&req()).await.unwrap();
    assert_eq!(r.content, "{\"summary\": \"ok\"}");
    assert_eq!((r.tokens_input, r.tokens_output), (21, 7));
    assert_eq!(r.model, "test-model-0125");
    let seen = f.seen.lock().unwrap()[0].clone();
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(seen.headers["authorization"], "Bearer sk-test-key-123");
    assert_eq!(seen.body["model"], "test-model");
    assert_eq!(
        seen.body["messages"][0],
        json!({"role": "system", "content": "be brief"})
    );
    assert_eq!(seen.body["messages"][1]["role"], "user");
    assert_eq!(seen.body["response_format"], json!({"type": "json_object"}));
    assert_eq!(seen.body["max_tokens"], 100);
    assert!(seen.body.get("stream").is_none());
}

#[tokio::test]
async fn openai_sse_stream_joins_deltas_and_reads_usage() {
    let events = vec![
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n".to_string(),
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n".to_string(),
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}]}\n".to_string(),
        "\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n\n".to_string(),
        "data: [DONE]\n\n".to_string(),
    ];
    let (url, f) = fake(vec![Reply::Stream("text/event-stream", events)]).await;
    let p =
        llm::chat_provider("openai", &settings("openai", &format!("{url}/v1"), true, 5)).unwrap();
    let r = p.chat(&req()).await.unwrap();
    assert_eq!(r.content, "Hello");
    assert_eq!((r.tokens_input, r.tokens_output), (9, 2));
    let body = f.seen.lock().unwrap()[0].body.clone();
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn a_stream_that_breaks_off_is_an_outage_and_is_not_half_used() {
    let events =
        vec!["data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n".to_string()];
    let (url, _f) = fake(vec![Reply::Stream("text/event-stream", events)]).await;
    let p =
        llm::chat_provider("openai", &settings("openai", &format!("{url}/v1"), true, 5)).unwrap();
    let err = p.chat(&req()).await.unwrap_err();
    assert!(err.is_outage(), "{err}");
    assert!(err.to_string().contains("[DONE]"), "{err}");
}

#[tokio::test]
async fn openrouter_sends_its_attribution_headers() {
    let (url, f) = fake(vec![Reply::Json(200, openai_answer("x"))]).await;
    let p = llm::chat_provider(
        "openrouter",
        &settings("openrouter", &format!("{url}/api/v1"), false, 5),
    )
    .unwrap();
    p.chat(&req()).await.unwrap();
    let seen = f.seen.lock().unwrap()[0].clone();
    assert_eq!(seen.path, "/api/v1/chat/completions");
    assert_eq!(seen.headers["x-title"], "Memex");
    assert!(seen.headers.contains_key("http-referer"));
}

#[tokio::test]
async fn ollama_json_and_ndjson() {
    let (url, f) = fake(vec![
        Reply::Json(200, json!({"model": "test-model", "created_at": "2026-11-29T10:00:00Z",
            "message": {"role": "assistant", "content": "{\"a\":1}"}, "done": true,
            "prompt_eval_count": 33, "eval_count": 5})),
        Reply::Stream("application/x-ndjson", vec![
            "{\"model\":\"test-model\",\"message\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"done\":false}\n".into(),
            "{\"model\":\"test-model\",\"message\":{\"role\":\"assistant\",\"content\":\" there\"},\"done\":false}\n".into(),
            "{\"model\":\"test-model\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"prompt_eval_count\":12,\"eval_count\":3}\n".into(),
        ]),
    ])
    .await;
    let p = llm::chat_provider("ollama", &settings("ollama", &url, false, 5)).unwrap();
    let r = p.chat(&req()).await.unwrap();
    assert_eq!(
        (r.content.as_str(), r.tokens_input, r.tokens_output),
        ("{\"a\":1}", 33, 5)
    );
    let seen = f.seen.lock().unwrap()[0].clone();
    assert_eq!(seen.path, "/api/chat");
    assert_eq!(seen.body["stream"], false);
    assert_eq!(seen.body["format"], "json");
    assert_eq!(seen.body["options"]["num_predict"], 100);
    assert!(!seen.headers.contains_key("authorization"));
    let p = llm::chat_provider("ollama", &settings("ollama", &url, true, 5)).unwrap();
    let r = p.chat(&req()).await.unwrap();
    assert_eq!(
        (r.content.as_str(), r.tokens_input, r.tokens_output),
        ("Hi there", 12, 3)
    );
    assert_eq!(f.seen.lock().unwrap()[1].body["stream"], true);
}

/// Structured output, each provider its own way: the answer is valid by construction, so the
/// tolerant parser stays a last resort.
#[tokio::test]
async fn structured_output_asks_each_provider_for_the_schema() {
    let schema = memex::compact::prompt::l2_schema().schema;
    let mut required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    required.sort();
    assert_eq!(required, ["completed", "summary", "user_request"]);
    assert_eq!(schema["additionalProperties"], false);
    let answer = "{\"user_request\":\"a\",\"summary\":\"b\",\"completed\":\"c\"}";
    // OpenAI-compatible (llama.cpp's server turns it into a grammar): response_format.
    let (url, f) = fake(vec![Reply::Json(200, openai_answer(answer))]).await;
    let p = llm::chat_provider(
        "openai",
        &settings("openai", &format!("{url}/v1"), false, 5),
    )
    .unwrap();
    assert_eq!(p.chat(&req_with_schema()).await.unwrap().content, answer);
    let rf = f.seen.lock().unwrap()[0].body["response_format"].clone();
    assert_eq!(rf["type"], "json_schema");
    assert_eq!(rf["json_schema"]["name"], "talk_summary");
    assert_eq!(rf["json_schema"]["strict"], true);
    assert_eq!(rf["json_schema"]["schema"], schema);
    assert_eq!(schema["properties"]["summary"]["maxLength"], 800);
    // Ollama: the schema as `format`.
    let (url, f) = fake(vec![Reply::Json(
        200,
        json!({"model": "m",
        "message": {"role": "assistant", "content": answer}, "done": true}),
    )])
    .await;
    let p = llm::chat_provider("ollama", &settings("ollama", &url, false, 5)).unwrap();
    assert_eq!(p.chat(&req_with_schema()).await.unwrap().content, answer);
    assert_eq!(f.seen.lock().unwrap()[0].body["format"], schema);
    // Anthropic: one tool whose input is the answer, and the model made to call it; the answer
    // is that input.
    let (url, f) = fake(vec![Reply::Json(
        200,
        json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "talk_summary",
                     "input": {"user_request": "a", "summary": "b", "completed": "c"}}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 40, "output_tokens": 8}}),
    )])
    .await;
    let p = llm::chat_provider("anthropic", &settings("anthropic", &url, false, 5)).unwrap();
    let r = p.chat(&req_with_schema()).await.unwrap();
    let got: Value = serde_json::from_str(&r.content).unwrap();
    assert_eq!(got["summary"], "b");
    let body = f.seen.lock().unwrap()[0].body.clone();
    assert_eq!(body["tools"][0]["name"], "talk_summary");
    assert_eq!(body["tools"][0]["input_schema"], schema);
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "talk_summary"})
    );
    // What the compact layer parses from it.
    let base = base_talk();
    let parsed = memex::compact::prompt::parse_l2(&r.content, &base).unwrap();
    assert_eq!(parsed.completed, "c");
}

/// An endpoint that refuses the schema (a 400): asked again with OpenAI's strict subset (no
/// length limits), then in JSON mode (DeepSeek's only mode), and remembered: the next request
/// goes straight to what it takes. Ollama before 0.5: `"json"` after one refusal.
#[tokio::test]
async fn an_endpoint_that_refuses_the_schema_is_asked_with_less_of_it() {
    let answer = "{\"user_request\":\"a\",\"summary\":\"b\",\"completed\":\"c\"}";
    let refused = || {
        Reply::Json(
            400,
            json!({"error": {"message": "unsupported response_format"}}),
        )
    };
    let (url, f) = fake(vec![
        refused(),
        refused(),
        Reply::Json(200, openai_answer(answer)),
        Reply::Json(200, openai_answer(answer)),
    ])
    .await;
    let p = llm::chat_provider(
        "openai",
        &settings("openai", &format!("{url}/v1"), false, 5),
    )
    .unwrap();
    assert_eq!(p.chat(&req_with_schema()).await.unwrap().content, answer);
    assert_eq!(p.chat(&req_with_schema()).await.unwrap().content, answer);
    let seen = f.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 4);
    let rf: Vec<Value> = seen
        .iter()
        .map(|s| s.body["response_format"].clone())
        .collect();
    assert_eq!(
        rf[0]["json_schema"]["schema"]["properties"]["summary"]["maxLength"],
        800
    );
    assert_eq!(rf[1]["type"], "json_schema");
    assert!(
        rf[1]["json_schema"]["schema"]["properties"]["summary"]
            .get("maxLength")
            .is_none()
    );
    assert_eq!(rf[2], json!({"type": "json_object"}));
    assert_eq!(rf[3], json!({"type": "json_object"}), "remembered");
    let (url, f) = fake(vec![
        refused(),
        Reply::Json(
            200,
            json!({"model": "m",
            "message": {"role": "assistant", "content": answer}, "done": true}),
        ),
    ])
    .await;
    let p = llm::chat_provider("ollama", &settings("ollama", &url, false, 5)).unwrap();
    assert_eq!(p.chat(&req_with_schema()).await.unwrap().content, answer);
    let seen = f.seen.lock().unwrap().clone();
    assert!(seen[0].body["format"].is_object());
    assert_eq!(seen[1].body["format"], "json");
    // A refusal that is not about the schema (a bad key) is not retried.
    let (url, f) = fake(vec![Reply::Json(401, json!({"error": "bad key"}))]).await;
    let p = llm::chat_provider(
        "openai",
        &settings("openai", &format!("{url}/v1"), false, 5),
    )
    .unwrap();
    assert!(p.chat(&req_with_schema()).await.is_err());
    assert_eq!(f.seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn anthropic_messages_api() {
    let (url, f) = fake(vec![Reply::Json(
        200,
        json!({"id": "msg_1", "type": "message", "role": "assistant",
        "model": "claude-3-haiku-20240307",
        "content": [{"type": "text", "text": "{\"summary\":"}, {"type": "text", "text": " \"x\"}"}],
        "stop_reason": "end_turn", "usage": {"input_tokens": 40, "output_tokens": 8}}),
    )])
    .await;
    let p = llm::chat_provider("anthropic", &settings("anthropic", &url, false, 5)).unwrap();
    let r = p.chat(&req()).await.unwrap();
    assert_eq!(r.content, "{\"summary\": \"x\"}");
    assert_eq!((r.tokens_input, r.tokens_output), (40, 8));
    let seen = f.seen.lock().unwrap()[0].clone();
    assert_eq!(seen.path, "/v1/messages");
    assert_eq!(seen.headers["x-api-key"], "sk-test-key-123");
    assert_eq!(seen.headers["anthropic-version"], "2023-06-01");
    assert!(
        seen.body["system"]
            .as_str()
            .unwrap()
            .starts_with("be brief")
    );
    assert_eq!(
        seen.body["messages"],
        json!([{"role": "user", "content": "summarise this"}])
    );
    assert_eq!(seen.body["max_tokens"], 100);
}

#[tokio::test]
async fn retry_after_is_honoured_and_5xx_retried() {
    let (url, f) = fake(vec![
        Reply::Header(429, "retry-after", "1", json!({"error": "slow down"})),
        Reply::Json(503, json!({"error": "overloaded"})),
        Reply::Json(200, openai_answer("fine")),
    ])
    .await;
    let p = llm::chat_provider(
        "openai",
        &settings("openai", &format!("{url}/v1"), false, 5),
    )
    .unwrap();
    let t = Instant::now();
    let r = p.chat(&req()).await.unwrap();
    assert_eq!(r.content, "fine");
    assert_eq!(f.seen.lock().unwrap().len(), 3);
    assert!(
        t.elapsed() >= Duration::from_secs(1),
        "Retry-After: 1 was not waited"
    );
}

#[tokio::test]
async fn a_long_retry_after_makes_the_work_wait_instead_of_blocking() {
    let (url, f) = fake(vec![Reply::Header(429, "retry-after", "120", json!({}))]).await;
    let p = llm::chat_provider(
        "openai",
        &settings("openai", &format!("{url}/v1"), false, 5),
    )
    .unwrap();
    match p.chat(&req()).await.unwrap_err() {
        LlmError::Unavailable { retry_after, .. } => {
            assert_eq!(retry_after, Some(Duration::from_secs(120)))
        }
        other => panic!("{other}"),
    }
    assert_eq!(f.seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn garbage_slow_and_refused_answers() {
    let (url, f) = fake(vec![
        Reply::Text(200, "<html>not json</html>"),
        Reply::Slow(Duration::from_secs(3), openai_answer("late")),
        Reply::Slow(Duration::from_secs(3), openai_answer("late")),
        Reply::Slow(Duration::from_secs(3), openai_answer("late")),
        Reply::Json(401, json!({"error": {"message": "invalid api key"}})),
    ])
    .await;
    let p = llm::chat_provider(
        "openai",
        &settings("openai", &format!("{url}/v1"), false, 1),
    )
    .unwrap();
    let err = p.chat(&req()).await.unwrap_err();
    assert!(
        err.is_outage() && err.to_string().contains("not JSON"),
        "{err}"
    );
    let err = p.chat(&req()).await.unwrap_err();
    assert!(
        err.is_outage() && err.to_string().contains("timed out"),
        "{err}"
    );
    let err = p.chat(&req()).await.unwrap_err();
    match &err {
        LlmError::Rejected {
            status, message, ..
        } => {
            assert_eq!(*status, 401);
            assert!(message.contains("invalid api key"));
        }
        other => panic!("{other}"),
    }
    // 1 garbage + 3 timed-out tries + 1 refusal (not retried); the key is never in an error.
    assert_eq!(f.seen.lock().unwrap().len(), 5);
    assert!(!err.to_string().contains("sk-test-key-123"));
}

#[tokio::test]
async fn the_circuit_opens_after_repeated_failures() {
    let replies = (0..20)
        .map(|_| Reply::Json(500, json!({"error": "down"})))
        .collect();
    let (url, f) = fake(replies).await;
    let p = llm::chat_provider("ollama", &settings("ollama", &url, false, 5)).unwrap();
    for _ in 0..5 {
        assert!(p.chat(&req()).await.unwrap_err().is_outage());
    }
    let calls = f.seen.lock().unwrap().len();
    assert_eq!(calls, 15, "5 requests × 3 tries");
    let err = p.chat(&req()).await.unwrap_err();
    assert!(err.to_string().contains("failures in a row"), "{err}");
    assert_eq!(
        f.seen.lock().unwrap().len(),
        calls,
        "an open circuit sends nothing"
    );
}

#[tokio::test]
async fn embeddings_over_openai_and_ollama() {
    let (url, f) = fake(vec![
        Reply::Json(
            200,
            json!({"object": "list", "model": "embed-model", "data": [
            {"object": "embedding", "index": 1, "embedding": [0.0, 1.0, 0.5]},
            {"object": "embedding", "index": 0, "embedding": [1.0, 0.0, 0.5]}],
            "usage": {"prompt_tokens": 4, "total_tokens": 4}}),
        ),
        Reply::Json(
            200,
            json!({"model": "embed-model", "embeddings": [[0.25, 0.75]]}),
        ),
    ])
    .await;
    let c = settings("openai", &format!("{url}/v1"), false, 5);
    let e = llm::embedding_provider(memex::config::Provider::OpenAi, &c).unwrap();
    let v = e.embed_batch(&["a".into(), "b".into()]).await.unwrap();
    assert_eq!(
        v,
        vec![vec![1.0, 0.0, 0.5], vec![0.0, 1.0, 0.5]],
        "ordered by index"
    );
    assert_eq!(e.dimension(), 3);
    let seen = f.seen.lock().unwrap()[0].clone();
    assert_eq!(seen.path, "/v1/embeddings");
    assert_eq!(
        seen.body,
        json!({"model": "embed-model", "input": ["a", "b"]})
    );
    let c = settings("ollama", &url, false, 5);
    let e = llm::embedding_provider(memex::config::Provider::Ollama, &c).unwrap();
    assert_eq!(e.embed("x").await.unwrap(), vec![0.25, 0.75]);
    assert_eq!(f.seen.lock().unwrap()[1].path, "/api/embed");
}

fn base_talk() -> TalkSummary {
    TalkSummary {
        prompt_number: 1,
        user_request: "fix the date parser".into(),
        summary: "heuristic summary".into(),
        completed: String::new(),
        files_involved: vec!["src/date.ts".into()],
    }
}

async fn write(
    engine: &Engine,
) -> Result<memex::compact::Written<TalkSummary>, memex::compact::NotNow> {
    engine
        .write(
            base_talk(),
            |l| format!("write in {l}"),
            || "the talk".into(),
            memex::compact::prompt::l2_schema(),
            Lang::Zh,
            memex::compact::prompt::parse_l2,
        )
        .await
}

#[tokio::test]
async fn engine_uses_the_llm_falls_back_on_malformed_output_and_on_outages() {
    let (url, f) = fake(vec![
        Reply::Json(200, openai_answer("```json\n{\"user_request\": \"修复日期解析\", \"summary\": \"修复了解析器。\", \"completed\": \"测试通过\"}\n```")),
        Reply::Json(200, openai_answer("I cannot answer in JSON, sorry.")),
    ])
    .await;
    let mut c = settings("openai", &format!("{url}/v1"), false, 5);
    c.fallback = vec!["heuristic".into()];
    let engine = Engine::new(c);
    let w = write(&engine).await.unwrap();
    assert_eq!(w.value.summary, "修复了解析器。");
    assert_eq!(
        w.value.files_involved,
        vec!["src/date.ts"],
        "files stay deterministic"
    );
    assert_eq!(w.provenance.provider, "openai");
    assert_eq!(
        (w.provenance.tokens_input, w.provenance.tokens_output),
        (21, 7)
    );
    assert!(
        f.seen.lock().unwrap()[0].body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("Chinese")
    );
    // Malformed: the heuristic's row, the reason recorded, the tokens still counted.
    let w = write(&engine).await.unwrap();
    assert!(w.malformed);
    assert_eq!(w.value.summary, "heuristic summary");
    assert_eq!(w.provenance.provider, "heuristic");
    assert!(
        w.provenance
            .fallback_reason
            .as_deref()
            .unwrap()
            .contains("malformed output from openai")
    );
    assert_eq!(w.spend.len(), 1);
    // Outage (nothing scripted → 500s): the chain's heuristic writes, and says why.
    let w = write(&engine).await.unwrap();
    assert_eq!(w.provenance.provider, "heuristic");
    assert!(
        w.provenance
            .fallback_reason
            .unwrap()
            .contains("openai is unavailable")
    );
}

#[tokio::test]
async fn a_summary_naming_a_file_the_model_was_not_shown_is_not_stored() {
    let (url, _f) = fake(vec![
        Reply::Json(200, openai_answer("{\"user_request\": \"fix the parser\", \"summary\": \"Fixed the parser in date.ts; tests pass.\", \"completed\": \"done\"}")),
        Reply::Json(200, openai_answer("{\"user_request\": \"fix the parser\", \"summary\": \"Fixed src/date.ts and updated config/billing.py.\", \"completed\": \"done\"}")),
        Reply::Json(200, openai_answer("{\"user_request\": \"fix the parser\", \"summary\": \"user_summary\", \"completed\": \"done\"}")),
    ])
    .await;
    let mut c = settings("openai", &format!("{url}/v1"), false, 5);
    c.fallback = vec!["heuristic".into()];
    let engine = Engine::new(c);
    let ask = || {
        engine.write(
            base_talk(),
            |l| format!("write in {l}"),
            || "Developer: the date parser in src/date.ts drops the time zone".into(),
            memex::compact::prompt::l2_schema(),
            Lang::En,
            memex::compact::prompt::parse_l2,
        )
    };
    // Every file it names is in what it was shown: the model's row.
    let w = ask().await.unwrap();
    assert_eq!(w.provenance.provider, "openai");
    assert!(!w.malformed);
    // One file it invented: the heuristic's row, and the reason names the file.
    let w = ask().await.unwrap();
    assert_eq!(w.provenance.provider, "heuristic");
    assert_eq!(w.value.summary, "heuristic summary");
    assert!(w.malformed);
    let why = w.provenance.fallback_reason.unwrap();
    assert!(
        why.contains("named `config/billing.py`, which is not in what it summarised"),
        "{why}"
    );
    assert_eq!(w.spend.len(), 1, "its tokens are still counted");
    // A field's name where the summary belongs (seen from Gemma 3 270M): the heuristic's row.
    let w = ask().await.unwrap();
    assert_eq!(w.provenance.provider, "heuristic");
    let why = w.provenance.fallback_reason.unwrap();
    assert!(
        why.contains("wrote `user_summary` where a summary belongs"),
        "{why}"
    );
}

#[tokio::test]
async fn without_a_fallback_an_outage_waits_and_a_spent_budget_pauses() {
    // A closed port: an outage, and no heuristic in the chain.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        drop(l);
        format!("http://{a}/v1")
    };
    let mut c = settings("openai", &closed, false, 2);
    // Not loopback-exempt: this test is about the budget.
    c.budget_exempt_local = false;
    let engine = Engine::new(c.clone());
    let err = write(&engine).await.unwrap_err();
    assert!(err.outage, "{}", err.reason);
    assert!(err.reason.contains("cannot connect"), "{}", err.reason);

    let (url, f) = fake(vec![Reply::Json(
        200,
        openai_answer("{\"summary\": \"one\"}"),
    )])
    .await;
    c.openai.endpoint = format!("{url}/v1");
    c.daily_token_budget = 20;
    let engine = Engine::new(c);
    let w = write(&engine).await.unwrap();
    assert_eq!(w.value.summary, "one");
    // 28 tokens spent ≥ 20: the next item waits, without a request.
    let err = write(&engine).await.unwrap_err();
    assert!(
        err.outage && err.reason.contains("daily token budget"),
        "{}",
        err.reason
    );
    assert_eq!(f.seen.lock().unwrap().len(), 1);
    let state = &engine.budget_state()[0];
    assert!(state.paused, "status says the provider is paused");
    assert!(
        state.why().unwrap().contains("daily token budget reached"),
        "{state:?}"
    );
}

#[tokio::test]
async fn the_default_budget_pauses_a_paid_provider_and_zero_lifts_it() {
    use memex::config::DEFAULT_DAILY_TOKEN_BUDGET;
    let (url, f) = fake(
        (0..4)
            .map(|_| Reply::Json(200, openai_answer("{\"summary\": \"ok\"}")))
            .collect(),
    )
    .await;
    let mut c = settings("openai", &format!("{url}/v1"), false, 5);
    // A loopback server standing in for a remote one: counted as paid.
    c.budget_exempt_local = false;
    assert_eq!(
        c.daily_token_budget, DEFAULT_DAILY_TOKEN_BUDGET,
        "nobody set one"
    );
    let engine = Engine::new(c.clone());
    // Today's spend so far (as the service loads it from the archive): just under the budget.
    engine.load_spend(vec![("openai".into(), DEFAULT_DAILY_TOKEN_BUDGET - 1)]);
    assert!(!engine.budget_state()[0].paused);
    assert_eq!(write(&engine).await.unwrap().provenance.provider, "openai");
    // That item took it over: the next one waits, without a request.
    let err = write(&engine).await.unwrap_err();
    assert!(err.outage, "{}", err.reason);
    assert!(
        err.reason
            .contains("openai: daily token budget reached (200000 tokens)"),
        "{}",
        err.reason
    );
    assert_eq!(err.retry_after, Some(Duration::from_secs(600)));
    assert_eq!(f.seen.lock().unwrap().len(), 1);
    let state = &engine.budget_state()[0];
    assert!(state.paid && state.paused, "{state:?}");
    assert_eq!(state.limit, Some(DEFAULT_DAILY_TOKEN_BUDGET));

    // 0 is no limit.
    c.daily_token_budget = 0;
    let engine = Engine::new(c.clone());
    engine.load_spend(vec![("openai".into(), 50 * DEFAULT_DAILY_TOKEN_BUDGET)]);
    assert_eq!(write(&engine).await.unwrap().provenance.provider, "openai");
    assert_eq!(engine.budget_state()[0].limit, None);

    // A local provider (loopback, exempt as by default) is never paused.
    c.daily_token_budget = DEFAULT_DAILY_TOKEN_BUDGET;
    c.budget_exempt_local = true;
    let engine = Engine::new(c);
    engine.load_spend(vec![("openai".into(), 50 * DEFAULT_DAILY_TOKEN_BUDGET)]);
    assert_eq!(write(&engine).await.unwrap().provenance.provider, "openai");
    let state = &engine.budget_state()[0];
    assert!(
        !state.paid && !state.paused && state.limit.is_none(),
        "{state:?}"
    );
    assert_eq!(f.seen.lock().unwrap().len(), 3);
}

#[test]
fn paid_providers_are_the_reachable_ones_that_are_not_local() {
    use memex::compact::queue::{REGENERATE_CONFIRM_ABOVE, RegenerateGuard, RegenerateScope};
    fn paid(provider: &str, fallback: &[&str], edit: impl Fn(&mut CompactSettings)) -> Vec<String> {
        let mut c = CompactSettings {
            provider: provider.into(),
            fallback: fallback.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        edit(&mut c);
        Engine::new(c).paid_providers()
    }
    let none: Vec<String> = Vec::new();
    assert_eq!(paid("heuristic", &[], |_| {}), none);
    assert_eq!(
        paid("openai", &["heuristic"], |_| {}),
        vec!["openai (https://api.openai.com/v1)"]
    );
    assert_eq!(
        paid("ollama", &["anthropic"], |_| {}),
        vec!["anthropic (https://api.anthropic.com)"]
    );
    // After the heuristic nothing is ever asked.
    assert_eq!(paid("heuristic", &["openai"], |_| {}), none);
    assert_eq!(paid("ollama", &["heuristic", "openai"], |_| {}), none);
    // A loopback endpoint is local, unless local providers are counted too.
    let loopback = |c: &mut CompactSettings| c.openai.endpoint = "http://127.0.0.1:8080/v1".into();
    assert_eq!(paid("openai", &[], loopback), none);
    assert_eq!(
        paid("openai", &["ollama"], |c| {
            loopback(c);
            c.budget_exempt_local = false;
        }),
        vec![
            "openai (http://127.0.0.1:8080/v1)",
            "ollama (http://localhost:11434)"
        ]
    );

    let engine = Engine::new(CompactSettings {
        provider: "openai".into(),
        ..Default::default()
    });
    let scope = |talks| RegenerateScope { sessions: 3, talks };
    let guard = RegenerateGuard::new(&engine, false);
    assert!(guard.check(scope(REGENERATE_CONFIRM_ABOVE)).is_ok());
    let err = guard
        .check(scope(REGENERATE_CONFIRM_ABOVE + 1))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "regenerating would queue 51 talks in 3 sessions for the paid provider openai \
         (https://api.openai.com/v1); more than 50 talks need confirmation"
    );
    assert!(
        RegenerateGuard::new(&engine, true)
            .check(scope(10_000))
            .is_ok()
    );
    let local = Engine::new(CompactSettings::default());
    assert!(
        RegenerateGuard::new(&local, false)
            .check(scope(10_000))
            .is_ok()
    );
}
