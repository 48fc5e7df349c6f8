//! The compact layers: L1 observations (one per tool call, after pruning and merging), L2 talk
//! summaries (one per prompt once its talk is complete), L3 session summaries (from the L2s
//! only). Optional and regenerable: raw (L0) stays the truth.
//!
//! - [`heuristic`]: the deterministic, zero-token compactor (the default and the last resort).
//! - [`prompt`]: what an LLM is asked and how its answer is read.
//! - [`Engine`]: runs one item through the provider chain (budget, outages, fallback).
//! - [`queue`]: the persistent job queue, the planner that fills it, and the worker component.

pub mod heuristic;
pub mod prompt;
pub mod queue;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::config::{self, CompactSettings};
use crate::layer::Layer;
use crate::llm::{self, ChatProvider, ChatRequest, LlmError};

/// The language a conversation is written in (summaries follow it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Lang {
    En,
    Zh,
    Ja,
}

/// A tool call with its result.
#[derive(Debug, Clone)]
pub struct Call {
    pub message_id: String,
    pub tool_name: String,
    pub input: Value,
    pub output: String,
    pub is_error: bool,
    pub ts: Option<i64>,
}

/// Who wrote a [`Note`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteKind {
    /// The agent program itself: Aider's commit and lint lines, an API error, a hook's output.
    Program,
    /// The person, outside a prompt: a shell command they ran, a slash command, an answer to a
    /// confirmation.
    User,
    /// The context was compacted here.
    Compaction,
}

/// Something a talk holds besides the agent's text and its tool calls.
#[derive(Debug, Clone)]
pub struct Note {
    pub kind: NoteKind,
    pub text: String,
}

/// One talk: a prompt and everything up to the next one.
#[derive(Debug, Clone)]
pub struct Talk {
    pub prompt_number: i64,
    pub prompt: String,
    pub assistant_texts: Vec<String>,
    pub calls: Vec<Call>,
    /// Notes, in order; `notes_after` of them came after the agent's last text.
    pub notes: Vec<Note>,
    pub notes_after: usize,
    /// Estimated tokens of everything in it (for "tokens saved").
    pub raw_tokens: u64,
    pub lang: Lang,
    pub ts: Option<i64>,
}

pub use crate::store::compact::{Observation, Provenance, SessionSummary, TalkSummary};

/// The text a model writes into a row (checked against what it was shown).
pub trait Prose {
    fn prose(&self) -> Vec<&str>;
}

impl Prose for Observation {
    fn prose(&self) -> Vec<&str> {
        let mut v = vec![self.title.as_str(), &self.subtitle, &self.narrative];
        v.extend(self.facts.iter().map(String::as_str));
        v
    }
}

impl Prose for TalkSummary {
    fn prose(&self) -> Vec<&str> {
        vec![&self.user_request, &self.summary, &self.completed]
    }
}

impl Prose for SessionSummary {
    fn prose(&self) -> Vec<&str> {
        let mut v = vec![self.summary.as_str()];
        v.extend(self.key_points.iter().map(String::as_str));
        v
    }
}

/// The heuristic's own version, recorded like a prompt version (v2: talk summaries keep what
/// the talk found before its closing message; v3: labelled facts of what was asked, done,
/// found and left open, L1 without tools' stock text, L3 led by the talk that did the most).
/// `memex compact regenerate` moves an archive's rows to it.
pub const HEURISTIC_VERSION: &str = "heuristic-v3";

/// What the heuristic records of a row it wrote.
fn heuristic_provenance(fallback_reason: Option<String>) -> Provenance {
    Provenance {
        provider: config::HEURISTIC.into(),
        model: None,
        prompt_version: HEURISTIC_VERSION.into(),
        tokens_input: 0,
        tokens_output: 0,
        confidence: heuristic::CONFIDENCE,
        fallback_reason,
    }
}

/// Tokens one provider spent on one item.
#[derive(Debug, Clone, PartialEq)]
pub struct Spend {
    pub provider: String,
    pub tokens_input: u64,
    pub tokens_output: u64,
}

/// The outcome of one item.
#[derive(Debug, Clone)]
pub struct Written<T> {
    pub value: T,
    pub provenance: Provenance,
    pub spend: Vec<Spend>,
    /// The LLM answered, but not with what was asked.
    pub malformed: bool,
}

/// Why an item could not be written now.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{reason}")]
pub struct NotNow {
    /// Every provider was out (outage, open circuit, budget): wait, do not count an attempt.
    pub outage: bool,
    pub reason: String,
    pub retry_after: Option<Duration>,
}

/// One provider's spend against the daily budget, for status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BudgetState {
    pub provider: String,
    /// Tokens (in + out) spent today (UTC).
    pub tokens_today: u64,
    /// Counts against the budget (not a local provider exempted by `budget_exempt_local`).
    pub paid: bool,
    /// The daily limit; `None`: unlimited (`daily_token_budget = 0`) or not paid.
    pub limit: Option<u64>,
    /// The limit is reached: its jobs wait for the next UTC day.
    pub paused: bool,
}

impl BudgetState {
    /// Why the provider is paused, for status.
    pub fn why(&self) -> Option<String> {
        self.paused.then(|| {
            format!(
                "daily token budget reached ({} of {} tokens today): its jobs wait until 00:00 UTC; \
                 raise [compact] daily_token_budget, or 0 for no limit",
                self.tokens_today,
                self.limit.unwrap_or(0)
            )
        })
    }
}

enum Link {
    Heuristic,
    Llm(Arc<dyn ChatProvider>),
}

/// Runs items through the configured provider chain.
pub struct Engine {
    pub settings: CompactSettings,
    chain: Vec<Link>,
    /// Tokens spent today per provider (UTC day), for the budget.
    spent: Mutex<HashMap<String, (String, u64)>>,
}

fn today() -> String {
    chrono::Utc::now().format("%Y-%m-%d").to_string()
}

impl Engine {
    pub fn new(settings: CompactSettings) -> Engine {
        let chain = settings
            .chain()
            .iter()
            .map(|name| match llm::chat_provider(name, &settings) {
                Some(p) => Link::Llm(p),
                None => Link::Heuristic,
            })
            .collect();
        Engine {
            settings,
            chain,
            spent: Mutex::default(),
        }
    }

    /// An engine with given providers (tests, and the real-model script).
    pub fn with_chain(
        settings: CompactSettings,
        providers: Vec<Option<Arc<dyn ChatProvider>>>,
    ) -> Engine {
        Engine {
            settings,
            chain: providers
                .into_iter()
                .map(|p| p.map_or(Link::Heuristic, Link::Llm))
                .collect(),
            spent: Mutex::default(),
        }
    }

    /// Someone asked for the work now: providers forget past failures.
    pub fn reset_circuits(&self) {
        for l in &self.chain {
            if let Link::Llm(p) = l {
                p.reset();
            }
        }
    }

    /// Whether only the heuristic writes (no provider to wait for).
    pub fn heuristic_only(&self) -> bool {
        matches!(self.chain.first(), Some(Link::Heuristic) | None)
    }

    /// Seeds today's spend from the archive.
    pub fn load_spend(&self, rows: Vec<(String, u64)>) {
        let day = today();
        let mut s = self.spent.lock().unwrap_or_else(|e| e.into_inner());
        for (provider, tokens) in rows {
            s.insert(provider, (day.clone(), tokens));
        }
    }

    /// Whether a provider is paid: its tokens count against the daily budget, and
    /// regenerating much with it needs confirmation. Every provider is, except local ones
    /// (Ollama, a loopback endpoint) while `budget_exempt_local` is on.
    fn paid(&self, p: &dyn ChatProvider) -> bool {
        !(self.settings.budget_exempt_local && p.is_local())
    }

    /// The chain's providers that can be reached: a heuristic link always answers, so nothing
    /// after it is ever asked.
    fn reachable(&self) -> impl Iterator<Item = &Arc<dyn ChatProvider>> {
        self.chain.iter().map_while(|l| match l {
            Link::Llm(p) => Some(p),
            Link::Heuristic => None,
        })
    }

    /// The paid providers the chain may ask, as `name (endpoint)`.
    pub fn paid_providers(&self) -> Vec<String> {
        self.reachable()
            .filter(|p| self.paid(p.as_ref()))
            .map(|p| {
                let endpoint = config::Provider::from_name(p.name())
                    .map_or("", |x| self.settings.provider_settings(x).endpoint.as_str());
                format!("{} ({endpoint})", p.name())
            })
            .collect()
    }

    fn over_budget(&self, p: &dyn ChatProvider) -> bool {
        let budget = self.settings.daily_token_budget;
        if budget == 0 || !self.paid(p) {
            return false;
        }
        let s = self.spent.lock().unwrap_or_else(|e| e.into_inner());
        s.get(p.name())
            .is_some_and(|(day, used)| *day == today() && *used >= budget)
    }

    fn add_spend(&self, provider: &str, tokens: u64) {
        let day = today();
        let mut s = self.spent.lock().unwrap_or_else(|e| e.into_inner());
        let e = s.entry(provider.to_owned()).or_insert((day.clone(), 0));
        if e.0 != day {
            *e = (day, 0);
        }
        e.1 += tokens;
    }

    /// Today's spend and budget of each provider the chain may ask.
    pub fn budget_state(&self) -> Vec<BudgetState> {
        let day = today();
        self.reachable()
            .map(|p| {
                let tokens_today = {
                    let s = self.spent.lock().unwrap_or_else(|e| e.into_inner());
                    s.get(p.name())
                        .filter(|(d, _)| *d == day)
                        .map_or(0, |x| x.1)
                };
                let paid = self.paid(p.as_ref());
                let budget = self.settings.daily_token_budget;
                BudgetState {
                    provider: p.name().to_owned(),
                    tokens_today,
                    paid,
                    limit: (paid && budget > 0).then_some(budget),
                    paused: self.over_budget(p.as_ref()),
                }
            })
            .collect()
    }

    /// Writes one item: the chain's first provider that answers usefully, else the heuristic
    /// when the chain ends in it (or the answer was malformed, or named a file the model was
    /// not shown), else [`NotNow`].
    pub async fn write<T: Clone + Prose>(
        &self,
        heuristic: T,
        system: impl Fn(&str) -> String,
        user: impl Fn() -> String,
        schema: crate::llm::Schema,
        lang: Lang,
        parse: impl Fn(&str, &T) -> Option<T>,
    ) -> Result<Written<T>, NotNow> {
        let mut reasons: Vec<String> = Vec::new();
        let mut spend = Vec::new();
        let mut all_outage = true;
        let mut wait: Option<Duration> = None;
        for link in &self.chain {
            let p = match link {
                Link::Heuristic => {
                    return Ok(Written {
                        value: heuristic,
                        provenance: heuristic_provenance(
                            (!reasons.is_empty()).then(|| reasons.join("; ")),
                        ),
                        spend,
                        malformed: false,
                    });
                }
                Link::Llm(p) => p,
            };
            if self.over_budget(p.as_ref()) {
                reasons.push(format!(
                    "{}: daily token budget reached ({} tokens)",
                    p.name(),
                    self.settings.daily_token_budget
                ));
                wait = Some(wait.unwrap_or(Duration::MAX).min(Duration::from_secs(600)));
                continue;
            }
            let language = prompt::language(lang, &self.settings.language);
            // Stored text is redacted already, unless `[store] redact` is off; what leaves for
            // a provider is redacted either way.
            let req = ChatRequest {
                system: system(&language),
                user: crate::redact::redact_text(&user()).0.into_owned(),
                max_tokens: 1024,
                json: true,
                schema: Some(schema.clone()),
            };
            match p.chat(&req).await {
                Ok(resp) => {
                    // A server that reports no usage still spent tokens: estimate them.
                    let tin = if resp.tokens_input > 0 {
                        resp.tokens_input
                    } else {
                        heuristic::estimate_tokens(&req.system)
                            + heuristic::estimate_tokens(&req.user)
                    };
                    let tout = if resp.tokens_output > 0 {
                        resp.tokens_output
                    } else {
                        heuristic::estimate_tokens(&resp.content)
                    };
                    self.add_spend(p.name(), tin + tout);
                    spend.push(Spend {
                        provider: p.name().to_owned(),
                        tokens_input: tin,
                        tokens_output: tout,
                    });
                    let parsed = parse(&resp.content, &heuristic);
                    let invented = parsed
                        .as_ref()
                        .and_then(|v| prompt::ungrounded(&v.prose(), &req.user));
                    let parsed = match &invented {
                        Some(what) => {
                            reasons.push(format!("{} ({}) {what}", p.name(), p.model()));
                            None
                        }
                        None => parsed,
                    };
                    return Ok(match parsed {
                        Some(value) => Written {
                            value,
                            provenance: Provenance {
                                provider: p.name().to_owned(),
                                model: Some(resp.model),
                                prompt_version: prompt::PROMPT_VERSION.into(),
                                tokens_input: tin,
                                tokens_output: tout,
                                confidence: 0.8,
                                fallback_reason: (!reasons.is_empty()).then(|| reasons.join("; ")),
                            },
                            spend,
                            malformed: false,
                        },
                        None => {
                            if invented.is_none() {
                                reasons.push(format!(
                                    "malformed output from {} ({})",
                                    p.name(),
                                    p.model()
                                ));
                            }
                            let mut prov = heuristic_provenance(Some(reasons.join("; ")));
                            prov.tokens_input = tin;
                            prov.tokens_output = tout;
                            Written {
                                value: heuristic,
                                provenance: prov,
                                spend,
                                malformed: true,
                            }
                        }
                    });
                }
                Err(e) => {
                    if let LlmError::Unavailable { retry_after, .. } = &e {
                        if let Some(r) = retry_after {
                            wait = Some(wait.map_or(*r, |w| w.min(*r)));
                        }
                    } else {
                        all_outage = false;
                    }
                    tracing::debug!(error = %e, "provider failed; trying the next one");
                    reasons.push(e.to_string());
                }
            }
        }
        Err(NotNow {
            outage: all_outage,
            reason: reasons.join("; "),
            retry_after: wait,
        })
    }
}

/// The compact layers that are on (`[compact] l1_observations`, `l2_talk_summary`,
/// `l3_session_summary`), after "L3 turns L2 on".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switches([bool; Layer::ALL.len()]);

impl Switches {
    /// Every compact layer on.
    pub const ALL: Switches = Switches([false, true, true, true]);

    /// Only `layers` on (the raw layer is never compacted: it is ignored).
    pub fn only(layers: &[Layer]) -> Switches {
        let mut on = [false; Layer::ALL.len()];
        for l in layers.iter().filter(|l| l.job().is_some()) {
            on[l.index()] = true;
        }
        Switches(on)
    }

    pub fn from(c: &CompactSettings) -> Switches {
        if c.l3_session_summary && !c.l2_talk_summary {
            tracing::info!("l3_session_summary needs l2_talk_summary: turning L2 on");
        }
        let mut on = [false; Layer::ALL.len()];
        on[Layer::Observations.index()] = c.l1_observations;
        on[Layer::Talks.index()] = c.l2_talk_summary || c.l3_session_summary;
        on[Layer::Sessions.index()] = c.l3_session_summary;
        Switches(on)
    }

    pub fn on(self, layer: Layer) -> bool {
        self.0[layer.index()]
    }

    pub fn any(self) -> bool {
        self.0.contains(&true)
    }
}
