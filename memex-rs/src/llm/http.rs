//! The HTTP core every provider shares: connect and total timeouts, retries with exponential
//! backoff and jitter on 429 / 5xx / transport errors, `Retry-After` honoured, and a circuit
//! breaker that stops calling a provider that keeps failing.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use reqwest::header::HeaderMap;

use super::{LlmError, short};

/// Tries per request (the first and two retries).
const ATTEMPTS: u32 = 3;
/// First backoff; doubled each retry, plus up to half of it again as jitter.
const BACKOFF: Duration = Duration::from_millis(400);
/// A `Retry-After` longer than this is not waited out inside the request: the job waits.
const MAX_INLINE_WAIT: Duration = Duration::from_secs(20);
/// Consecutive failed requests that open the circuit, and for how long.
const BREAKER_FAILURES: u32 = 5;
const BREAKER_OPEN: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
struct Breaker {
    failures: u32,
    open_until: Option<Instant>,
}

/// One provider's HTTP client.
pub struct HttpCore {
    pub name: String,
    client: reqwest::Client,
    breaker: Mutex<Breaker>,
}

/// A successful answer: status 2xx and its body.
pub struct Answer {
    pub body: reqwest::Response,
}

impl HttpCore {
    pub fn new(name: &str, timeout: Duration) -> HttpCore {
        HttpCore {
            name: name.to_owned(),
            client: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5).min(timeout))
                .timeout(timeout)
                .user_agent(concat!("memex/", env!("CARGO_PKG_VERSION")))
                .build()
                .expect("an HTTP client with static settings"),
            breaker: Mutex::default(),
        }
    }

    fn unavailable(&self, reason: String, retry_after: Option<Duration>) -> LlmError {
        LlmError::Unavailable {
            provider: self.name.clone(),
            reason,
            retry_after,
        }
    }

    fn check_breaker(&self) -> Result<(), LlmError> {
        let b = self.breaker.lock().unwrap_or_else(|e| e.into_inner());
        match b.open_until {
            Some(t) if t > Instant::now() => Err(self.unavailable(
                format!("{} failures in a row; not called for a while", b.failures),
                Some(t - Instant::now()),
            )),
            _ => Ok(()),
        }
    }

    fn record(&self, ok: bool) {
        let mut b = self.breaker.lock().unwrap_or_else(|e| e.into_inner());
        if ok {
            *b = Breaker::default();
        } else {
            b.failures += 1;
            if b.failures >= BREAKER_FAILURES {
                b.open_until = Some(Instant::now() + BREAKER_OPEN);
            }
        }
    }

    /// POSTs JSON and returns the 2xx response (its body still to read), retrying what is
    /// worth retrying.
    pub async fn post(
        &self,
        url: &str,
        headers: HeaderMap,
        body: &serde_json::Value,
    ) -> Result<Answer, LlmError> {
        self.check_breaker()?;
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            let res = self
                .client
                .post(url)
                .headers(headers.clone())
                .json(body)
                .send()
                .await;
            let wait = match res {
                Ok(r) if r.status().is_success() => {
                    self.record(true);
                    return Ok(Answer { body: r });
                }
                Ok(r) => {
                    let status = r.status().as_u16();
                    let retry_after = retry_after(r.headers());
                    let text = r.text().await.unwrap_or_default();
                    if status != 429 && status < 500 {
                        // The request itself is wrong: no retry, and not the provider's fault.
                        self.record(true);
                        return Err(LlmError::Rejected {
                            provider: self.name.clone(),
                            status,
                            message: short(&text),
                        });
                    }
                    last = format!("HTTP {status}: {}", short(&text));
                    if let Some(ra) = retry_after
                        && ra > MAX_INLINE_WAIT
                    {
                        self.record(false);
                        return Err(self.unavailable(last, Some(ra)));
                    }
                    retry_after
                }
                Err(e) => {
                    last = transport_reason(&e);
                    None
                }
            };
            if attempt + 1 < ATTEMPTS {
                tokio::time::sleep(wait.unwrap_or_else(|| backoff(attempt))).await;
            }
        }
        self.record(false);
        Err(self.unavailable(last, None))
    }

    /// POSTs JSON and reads a JSON answer.
    pub async fn post_json(
        &self,
        url: &str,
        headers: HeaderMap,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, LlmError> {
        self.post(url, headers, body)
            .await?
            .body
            .json()
            .await
            .map_err(|e| self.broken(format!("the answer is not JSON: {e}")))
    }

    /// A GET that only says whether the server answers.
    pub async fn reachable(&self, url: &str, headers: HeaderMap) -> bool {
        if self.check_breaker().is_err() {
            return false;
        }
        matches!(
            self.client.get(url).headers(headers).timeout(Duration::from_secs(3)).send().await,
            Ok(r) if r.status().is_success()
        )
    }

    /// Closes the circuit: the next request goes out whatever happened before.
    pub fn reset(&self) {
        *self.breaker.lock().unwrap_or_else(|e| e.into_inner()) = Breaker::default();
    }

    /// Wraps an error met while reading a streamed or JSON body.
    pub fn broken(&self, what: impl std::fmt::Display) -> LlmError {
        self.record(false);
        self.unavailable(format!("{what}"), None)
    }
}

fn transport_reason(e: &reqwest::Error) -> String {
    // reqwest's Display carries the URL, never headers: keys cannot leak here.
    if e.is_timeout() {
        "timed out".into()
    } else if e.is_connect() {
        "cannot connect".into()
    } else {
        format!("transport error: {e}")
    }
}

/// Exponential backoff with jitter for retry `attempt` (0-based).
pub fn backoff(attempt: u32) -> Duration {
    let base = BACKOFF * 2u32.saturating_pow(attempt);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    base + base.mul_f64(f64::from(nanos % 1000) / 2000.0)
}

/// `Retry-After` as seconds or an HTTP date.
fn retry_after(h: &HeaderMap) -> Option<Duration> {
    let v = h.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let ms = when.timestamp_millis() - chrono::Utc::now().timestamp_millis();
    Some(Duration::from_millis(ms.max(0) as u64))
}

/// Complete lines of a streamed body (SSE or NDJSON).
pub(crate) struct Lines {
    body: reqwest::Response,
    buf: Vec<u8>,
    ended: bool,
}

impl Lines {
    pub(crate) fn new(body: reqwest::Response) -> Lines {
        Lines {
            body,
            buf: Vec::new(),
            ended: false,
        }
    }

    /// The next non-empty line; `None` at the end of the body.
    pub(crate) async fn next(&mut self, core: &HttpCore) -> Result<Option<String>, LlmError> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                let line = String::from_utf8_lossy(&line).trim().to_owned();
                if line.is_empty() {
                    continue;
                }
                return Ok(Some(line));
            }
            if self.ended {
                let rest = String::from_utf8_lossy(&std::mem::take(&mut self.buf))
                    .trim()
                    .to_owned();
                return Ok((!rest.is_empty()).then_some(rest));
            }
            match self.body.chunk().await {
                Ok(Some(c)) => self.buf.extend_from_slice(&c),
                Ok(None) => self.ended = true,
                Err(e) => return Err(core.broken(format!("the stream broke: {e}"))),
            }
        }
    }
}
