//! Settings, resolved once: built-in defaults < `config.toml` < `MEMEX_*` environment
//! variables < command-line flags. Nothing here writes to the process environment.
//!
//! Every key `section.name` can be set from the environment as `MEMEX_SECTION_NAME` (upper
//! case), e.g. `MEMEX_STORE_REDACT=false`, `MEMEX_DATA_DIR=/srv/memex`. `${VAR}` in string
//! values is expanded, and a leading `~/` means the home directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use memex_embed::model;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    pub data: DataSettings,
    /// Per agent: whether it is read, and from where. An agent without a section is read
    /// from its default folders.
    pub agents: BTreeMap<String, AgentSettings>,
    /// Transcript roots per agent, as before `[agents]` existed; `[agents.<name>] roots` wins
    /// when both are set.
    pub sources: BTreeMap<String, Vec<String>>,
    pub store: StoreSettings,
    pub import: ImportSettings,
    pub watch: WatchSettings,
    pub api: ApiSettings,
    pub compact: CompactSettings,
    pub vector: VectorSettings,
    pub inject: InjectSettings,
    pub sync: SyncSettings,
    pub share: ShareSettings,
    pub usage: UsageSettings,
}

/// `memex usage`: the prices and the time zone reports use.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct UsageSettings {
    /// A price file in LiteLLM's format (`model_prices_and_context_window.json`, or a few
    /// models of it): its models replace or add to the table shipped in the binary.
    pub prices: String,
    /// The zone whose days reports count (an IANA name such as `Europe/Berlin`, or `UTC`);
    /// empty: the system's.
    pub timezone: String,
}

/// What this machine shares with a team (`memex share`): levels per project folder. A level
/// set with `memex share` for the same folder wins.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ShareSettings {
    /// `[[share.project]]` tables: `path`, `level` (hidden, summaries or full) and an optional
    /// `name` (the project's name in the team; default: the folder's name).
    pub project: Vec<ShareProject>,
    /// Seconds between pushes to the team archive while `memex serve` runs.
    pub interval_secs: u64,
}

impl Default for ShareSettings {
    fn default() -> Self {
        ShareSettings {
            project: Vec::new(),
            interval_secs: 60,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ShareProject {
    pub path: String,
    pub level: String,
    #[serde(default)]
    pub name: Option<String>,
}

/// Sync between one person's machines (`memex sync`), end-to-end encrypted. Off until a target
/// is known: `url` here, or the one `memex sync setup` / `join` recorded in the data folder.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SyncSettings {
    /// Where this machine's batches go and the others' come from: `postgres://…` (a database)
    /// or `file:///folder` (a folder that Syncthing, Dropbox, NFS or rsync carries). Empty: the
    /// target recorded by `memex sync setup` or `join`, if any.
    pub url: String,
    /// The sync key's file; empty: `sync.key` in the data folder.
    pub key_file: String,
    /// Seconds between pulls while `memex serve` runs.
    pub interval_secs: u64,
}

impl Default for SyncSettings {
    fn default() -> Self {
        SyncSettings {
            url: String::new(),
            key_file: String::new(),
            interval_secs: 30,
        }
    }
}

impl ShareSettings {
    /// The config's rules, as the push reads them (checked when the settings were resolved).
    pub fn rules(&self) -> Vec<memex_team::share::ConfigRule> {
        self.project
            .iter()
            .filter_map(|p| {
                Some(memex_team::share::ConfigRule {
                    path: p.path.clone(),
                    level: p.level.parse().ok()?,
                    name: p.name.clone(),
                })
            })
            .collect()
    }
}

/// The schemes `[sync] url` accepts.
pub const SYNC_SCHEMES: &[&str] = &["postgres://", "postgresql://", "file:///"];

/// `url` with the password of a `scheme://user:password@host` URL replaced, for display.
pub fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (auth, host) = match rest.rsplit_once('@') {
        Some(parts) => parts,
        None => return url.to_owned(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:(set)@{host}"),
        None => url.to_owned(),
    }
}

/// Memory pushed into Claude Code's context by its hooks (`memex inject`). Read by the hook
/// command on every call, so a change takes effect at the next prompt, without a restart.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct InjectSettings {
    /// Off by default: what is injected is paid for in the agent's tokens.
    pub enabled: bool,
    /// `project`: only history of the prompt's project (its git root, or its folder); `all`.
    pub project_scope: String,
    /// Smart mode keeps items whose confidence (the estimated probability that the item is
    /// relevant, calibrated per level) is at least this.
    pub similarity_threshold: f64,
    /// Smart mode: at most this many items.
    pub max_results: usize,
    /// Smart mode: at most this many tokens injected per prompt.
    pub max_tokens: usize,
    /// Full mode (SessionStart): at most this many session summaries.
    pub full_max_sessions: usize,
    /// Full mode: at most this many tokens.
    pub full_max_tokens: usize,
    /// Prompts shorter than this (characters) get nothing: "yes", "go on", "fix it".
    pub min_prompt_chars: usize,
    /// Skip headless runs (`claude -p`, the Agent SDK).
    pub skip_headless: bool,
    /// Projects (folders; their sub-folders too) that never get anything injected. A file
    /// `.memex-no-inject` in a project folder or any folder above it does the same.
    pub exclude_projects: Vec<String>,
    /// Keep each smart prompt's text in the injection log (redacted like everything stored).
    pub record_prompts: bool,
    /// The hook's whole budget: reading its input, asking the service, answering.
    pub timeout_ms: u64,
    /// Days the injection log keeps each hook call (0: forever).
    pub log_days: u64,
    /// Smart mode also looks in the team archive this machine joined (`memex team join`).
    pub team: bool,
    /// Smart mode keeps a team item whose confidence is at least this.
    pub team_threshold: f64,
    /// Smart mode: at most this many team items per prompt (within `max_tokens`).
    pub team_max_results: usize,
}

impl Default for InjectSettings {
    fn default() -> Self {
        InjectSettings {
            enabled: false,
            project_scope: "project".into(),
            similarity_threshold: 0.6,
            max_results: 5,
            max_tokens: 1000,
            full_max_sessions: 5,
            full_max_tokens: 2000,
            min_prompt_chars: 20,
            skip_headless: true,
            exclude_projects: Vec::new(),
            record_prompts: false,
            timeout_ms: 1000,
            log_days: 90,
            team: false,
            team_threshold: 0.7,
            team_max_results: 2,
        }
    }
}

/// What `[inject] project_scope` accepts.
pub const PROJECT_SCOPES: &[&str] = &["project", "all"];

/// The vector layer: which embedder, what gets embedded, and how the index is kept.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct VectorSettings {
    /// `local` (all-MiniLM-L6-v2 inside Memex), `hashing`, `ollama`, `openai`, `openrouter`
    /// (their `[compact.*] embedding_model`), or `off`.
    pub provider: String,
    /// Which raw messages get vectors: `prompts+answers`, `all` (tool output too), `off`.
    pub raw: String,
    /// The local model (`provider = "local"`): `all-MiniLM-L6-v2` (English) or
    /// `multilingual-e5-small` (about 100 languages, Chinese and Japanese among them).
    pub model: String,
    /// Folder of the local model's files; empty: MEMEX_MODEL_DIR, else
    /// `<data dir>/models/<model>`.
    pub model_dir: String,
    /// Threads the local model computes with (0 = one per core).
    pub threads: usize,
    /// How the local model multiplies: `int8` (its linear layers in 8-bit integers, on CPUs
    /// with AVX-512 VNNI; f32 elsewhere) or `f32`.
    pub precision: String,
    /// Rows embedded per batch by the indexer.
    pub batch: usize,
    /// Pieces a long text is cut into, at most (the rest is found by full-text search).
    pub max_chunks: usize,
    /// A table with this many rows gets an approximate (IVF-PQ) index; smaller ones are
    /// searched exactly.
    pub ann_min_rows: usize,
    /// Vector length of a remote provider's model.
    pub remote_dimension: usize,
    /// Vector results less similar than this (cosine, -1 to 1) are not results: without it,
    /// every search would return the nearest texts however unrelated. Unset: the local
    /// model's own floor (each model spreads its cosines differently), 0.3 for the others.
    pub min_similarity: Option<f64>,
    /// When the stored vectors were made by another model: drop and rebuild them at start
    /// instead of refusing to start.
    pub drop_stale_index: bool,
}

impl Default for VectorSettings {
    fn default() -> Self {
        VectorSettings {
            provider: VECTOR_LOCAL.into(),
            raw: "prompts+answers".into(),
            model: model::MODEL_NAME.into(),
            model_dir: String::new(),
            threads: 1,
            precision: "int8".into(),
            batch: 256,
            max_chunks: 4,
            ann_min_rows: 20_000,
            remote_dimension: 768,
            min_similarity: None,
            drop_stale_index: false,
        }
    }
}

impl VectorSettings {
    /// The cosine below which a vector result is dropped: `min_similarity`, else the local
    /// model's own floor, else 0.3.
    pub fn similarity_floor(&self) -> f64 {
        let local = model::spec(&self.model).filter(|_| self.provider == VECTOR_LOCAL);
        self.min_similarity
            .unwrap_or(local.map_or(model::MINILM.similarity_floor, |m| m.similarity_floor))
    }
}

/// What `[vector] raw` accepts.
pub const VECTOR_RAW: &[&str] = &["prompts+answers", "all", "off"];
pub const VECTOR_PRECISIONS: &[&str] = &["int8", "f32"];

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DataSettings {
    /// Where the archive lives.
    pub dir: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StoreSettings {
    /// Replace API keys, tokens, private keys and `<private>` blocks before storing.
    pub redact: bool,
    /// At most this many bytes of one message are full-text indexed (all of it is stored).
    pub fts_max_bytes: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ImportSettings {
    /// Parser threads; 0 = one per CPU but one, which is left to the writer (two on two CPUs).
    pub threads: usize,
    /// Bytes of transcript per batch (batches that follow each other share a transaction).
    pub batch_bytes: usize,
}

/// One agent's `[agents.<name>]` section.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSettings {
    /// Read this agent's transcripts (import, watch) at all.
    pub enabled: bool,
    /// Folders to read; empty means the agent's defaults. For agents that keep their files in
    /// project folders (aider, crush) these are project folders.
    pub roots: Vec<String>,
    /// Agents that keep their files in project folders: also look in every project folder the
    /// archive knows from other agents' sessions (one look per folder, at the agent's file).
    pub known_projects: bool,
}

impl Default for AgentSettings {
    fn default() -> Self {
        AgentSettings {
            enabled: true,
            roots: Vec::new(),
            known_projects: true,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct WatchSettings {
    /// Poll the roots instead of subscribing to file-system events (network file systems).
    pub poll: bool,
    /// How often to poll, when polling.
    pub poll_interval_ms: u64,
    /// A burst of changes is gathered until the files have been quiet this long.
    pub debounce_ms: u64,
    /// A session with no new message for this long gets its idle event.
    pub idle_minutes: u64,
}

/// The shortest `[api] token` accepted: 24 characters (the secret the service makes itself is
/// 64 hexadecimal digits, 256 bits).
pub const MIN_TOKEN_CHARS: usize = 24;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ApiSettings {
    /// Address of the HTTP API.
    pub bind: String,
    /// The secret TCP callers need (`Authorization: Bearer <token>`, or a browser signed in
    /// with it); at least 24 characters. Empty: the service makes a random one and keeps it in
    /// `api-token` in the data folder. Required (set here) for a non-loopback bind. From the
    /// environment: MEMEX_API_TOKEN.
    pub token: String,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// `Host` values served besides the bound address's own (`127.0.0.1:PORT`,
    /// `localhost:PORT`, `[::1]:PORT`): a name without a port means that name on the bound
    /// port. Every other `Host` is refused, so a web page whose name re-resolves to this
    /// machine (DNS rebinding) cannot read the archive. `"*"` accepts any, only with a token.
    pub allowed_hosts: Vec<String>,
    /// Web origins (`https://app.example`) that may call the API from a browser: they get CORS
    /// headers. Every other cross-site request is refused.
    pub cors_origins: Vec<String>,
    /// Let the hook and CLI clients send the token over plain HTTP to a non-loopback address
    /// (where anyone on the path can read it).
    pub allow_remote_token: bool,
}

/// The compact layers (L1 observations, L2 talk summaries, L3 session summaries) and who writes
/// them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CompactSettings {
    pub l1_observations: bool,
    pub l2_talk_summary: bool,
    /// Needs L2, and turns it on.
    pub l3_session_summary: bool,
    /// heuristic | ollama | openai | openrouter | anthropic.
    pub provider: String,
    /// Providers tried, in order, when the one before is unavailable.
    pub fallback: Vec<String>,
    /// Jobs run at once.
    pub concurrency: usize,
    /// A job that keeps failing (not an outage) is given up after this many tries.
    pub max_attempts: u32,
    /// Tokens per paid provider per UTC day; 0 = no limit. Reached: that provider's jobs
    /// wait for the next day. The default is [`DEFAULT_DAILY_TOKEN_BUDGET`], so a paid
    /// provider never spends without a limit unless someone writes `0`.
    pub daily_token_budget: u64,
    /// Ollama and providers on a loopback address are not paid: they do not count against the
    /// budget, and regenerating with them needs no confirmation. `false` counts them too.
    pub budget_exempt_local: bool,
    /// `auto` writes in the conversation's language; anything else names a language.
    pub language: String,
    pub l1: L1Settings,
    pub ollama: ProviderSettings,
    pub openai: ProviderSettings,
    pub openrouter: ProviderSettings,
    pub anthropic: ProviderSettings,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct L1Settings {
    /// Skip tool calls whose output is empty.
    pub prune_empty: bool,
    /// Merge runs of the same kind of operation.
    pub merge_consecutive: bool,
    /// A run of at least this many becomes one observation.
    pub merge_threshold: usize,
}

/// One LLM provider's endpoint and model.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ProviderSettings {
    pub endpoint: String,
    pub api_key: String,
    pub model: String,
    /// Ask for a streamed answer (SSE / NDJSON).
    pub stream: bool,
    /// Total time for one request.
    pub timeout_secs: u64,
    /// Most tokens of one answer.
    pub max_tokens: u32,
    /// Embedding model, for the vector layer.
    pub embedding_model: String,
}

impl Default for CompactSettings {
    fn default() -> Self {
        let p =
            |endpoint: &str, api_key: &str, model: &str, embedding_model: &str| ProviderSettings {
                endpoint: endpoint.into(),
                api_key: api_key.into(),
                model: model.into(),
                stream: false,
                timeout_secs: 120,
                max_tokens: 1024,
                embedding_model: embedding_model.into(),
            };
        CompactSettings {
            l1_observations: true,
            l2_talk_summary: true,
            l3_session_summary: true,
            provider: HEURISTIC.into(),
            fallback: Vec::new(),
            concurrency: 2,
            max_attempts: 5,
            daily_token_budget: DEFAULT_DAILY_TOKEN_BUDGET,
            budget_exempt_local: true,
            language: "auto".into(),
            l1: L1Settings {
                prune_empty: true,
                merge_consecutive: true,
                merge_threshold: 3,
            },
            ollama: p("http://localhost:11434", "", "qwen3:8b", "nomic-embed-text"),
            openai: p(
                "https://api.openai.com/v1",
                "${OPENAI_API_KEY}",
                "gpt-4o-mini",
                "text-embedding-3-small",
            ),
            openrouter: p(
                "https://openrouter.ai/api/v1",
                "${OPENROUTER_API_KEY}",
                "xiaomi/mimo-v2-flash:free",
                "",
            ),
            anthropic: p(
                "https://api.anthropic.com",
                "${ANTHROPIC_API_KEY}",
                "claude-3-haiku-20240307",
                "",
            ),
        }
    }
}

impl Default for L1Settings {
    fn default() -> Self {
        CompactSettings::default().l1
    }
}

/// `[compact] daily_token_budget` when the user sets none: tokens (in + out) per paid
/// provider per UTC day. A talk costs about 2,500 tokens on average with every layer on (L1
/// dominates; L2 alone about 550), measured on the fixtures with `memex-bench talk-cost` (see
/// BENCHMARKS.md), so this is about 80 talks a day with L1 + L2 + L3, or 350 with L2 + L3: a
/// working day, for 5 to 10 cents with the default models (claude-3-haiku, gpt-4o-mini) and
/// about a dollar with a frontier model. Beyond it jobs wait for the next day; none is dropped.
pub const DEFAULT_DAILY_TOKEN_BUDGET: u64 = 200_000;

/// A language-model service Memex can ask (`[compact.NAME]` configures each): the one place
/// its names are spelled. `[compact] provider` and `fallback` name one of these or
/// [`HEURISTIC`]; `[vector] provider` names one that [`embeds`](Provider::embeds) or a local
/// embedder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    Ollama,
    OpenAi,
    OpenRouter,
    Anthropic,
}

impl Provider {
    pub const ALL: [Provider; 4] = [
        Provider::Ollama,
        Provider::OpenAi,
        Provider::OpenRouter,
        Provider::Anthropic,
    ];

    /// The name settings, logs and the `llm_usage` table use.
    pub fn name(self) -> &'static str {
        match self {
            Provider::Ollama => "ollama",
            Provider::OpenAi => "openai",
            Provider::OpenRouter => "openrouter",
            Provider::Anthropic => "anthropic",
        }
    }

    pub fn from_name(name: &str) -> Option<Provider> {
        Provider::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether it offers an embedding endpoint Memex speaks (Anthropic has none).
    pub fn embeds(self) -> bool {
        self != Provider::Anthropic
    }

    /// The environment variable its key is read from when the settings name none.
    pub fn key_variable(self) -> Option<&'static str> {
        match self {
            Provider::Ollama => None,
            Provider::OpenAi => Some("OPENAI_API_KEY"),
            Provider::OpenRouter => Some("OPENROUTER_API_KEY"),
            Provider::Anthropic => Some("ANTHROPIC_API_KEY"),
        }
    }
}

/// The summariser inside Memex, which needs no model: the default `[compact] provider`.
pub const HEURISTIC: &str = memex_store::HEURISTIC;

/// The embedders `[vector] provider` accepts besides the [`Provider`]s that embed: the model
/// inside Memex, its feature-hashing stand-in, and none.
pub const VECTOR_LOCAL: &str = "local";
pub const VECTOR_HASHING: &str = "hashing";
pub const VECTOR_OFF: &str = "off";

/// What `[compact] provider` and `fallback` accept.
pub fn compact_providers() -> Vec<&'static str> {
    std::iter::once(HEURISTIC)
        .chain(Provider::ALL.map(Provider::name))
        .collect()
}

/// What `[vector] provider` accepts.
pub fn vector_providers() -> Vec<&'static str> {
    [VECTOR_LOCAL, VECTOR_HASHING]
        .into_iter()
        .chain(
            Provider::ALL
                .into_iter()
                .filter(|p| p.embeds())
                .map(Provider::name),
        )
        .chain([VECTOR_OFF])
        .collect()
}

impl CompactSettings {
    pub fn provider_settings(&self, p: Provider) -> &ProviderSettings {
        match p {
            Provider::Ollama => &self.ollama,
            Provider::OpenAi => &self.openai,
            Provider::OpenRouter => &self.openrouter,
            Provider::Anthropic => &self.anthropic,
        }
    }

    fn provider_settings_mut(&mut self, p: Provider) -> &mut ProviderSettings {
        match p {
            Provider::Ollama => &mut self.ollama,
            Provider::OpenAi => &mut self.openai,
            Provider::OpenRouter => &mut self.openrouter,
            Provider::Anthropic => &mut self.anthropic,
        }
    }

    /// The chain of providers to try, in order, without repeats.
    pub fn chain(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for p in std::iter::once(&self.provider).chain(&self.fallback) {
            if !out.contains(p) {
                out.push(p.clone());
            }
        }
        out
    }
}

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings {
            poll: false,
            poll_interval_ms: 2000,
            debounce_ms: 50,
            idle_minutes: 5,
        }
    }
}

impl Default for ApiSettings {
    fn default() -> Self {
        ApiSettings {
            bind: "127.0.0.1:10013".into(),
            token: String::new(),
            max_body_bytes: 1 << 20,
            allowed_hosts: Vec::new(),
            cors_origins: Vec::new(),
            allow_remote_token: false,
        }
    }
}

impl Default for DataSettings {
    fn default() -> Self {
        DataSettings {
            dir: "~/.local/share/memex".into(),
        }
    }
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings {
            redact: true,
            fts_max_bytes: 1 << 20,
        }
    }
}

impl Default for ImportSettings {
    fn default() -> Self {
        ImportSettings {
            threads: 0,
            batch_bytes: 8 << 20,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {0} does not exist")]
    Missing(PathBuf),
    #[error("invalid configuration in {origin}: {message}")]
    Invalid { origin: String, message: String },
    #[error("invalid value for `{key}`: {message}")]
    Value { key: String, message: String },
}

/// Where settings come from; the environment is passed in so that tests and callers decide.
pub struct Inputs<'a> {
    pub home: &'a Path,
    pub env: &'a BTreeMap<String, String>,
    /// `--config`, else `MEMEX_CONFIG`, else `~/.config/memex/config.toml` (optional).
    pub config_file: Option<PathBuf>,
    /// Flag overrides as (key, value).
    pub overrides: Vec<(String, String)>,
}

/// The resolved settings and the file they were read from.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub settings: Settings,
    pub file: PathBuf,
    pub file_exists: bool,
}

/// Flattened `section.key` (and `section.sub.key`) names of every setting.
fn keys() -> Vec<String> {
    fn walk(prefix: &str, v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(fields) => {
                for (k, inner) in fields {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, inner, out);
                }
            }
            _ => out.push(prefix.to_owned()),
        }
    }
    let v = serde_json::to_value(Settings::default()).expect("settings serialize");
    let mut out = Vec::new();
    walk("", &v, &mut out);
    // Per-agent keys exist only when set, and can still be set from the environment.
    let names = ai_cli_session_collector::AdapterRegistry::new().names();
    for n in names {
        out.extend([
            format!("sources.{n}"),
            format!("agents.{n}.enabled"),
            format!("agents.{n}.roots"),
            format!("agents.{n}.known_projects"),
        ]);
    }
    out
}

fn env_name(key: &str) -> String {
    format!("MEMEX_{}", key.replace(['.', '-'], "_").to_uppercase())
}

pub fn resolve(inputs: Inputs<'_>) -> Result<Resolved, ConfigError> {
    let explicit = inputs.config_file.clone().or_else(|| {
        inputs
            .env
            .get("MEMEX_CONFIG")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
    });
    let file = explicit
        .clone()
        .unwrap_or_else(|| inputs.home.join(".config/memex/config.toml"));
    let file_exists = file.is_file();
    if explicit.is_some() && !file_exists {
        return Err(ConfigError::Missing(file));
    }
    let defaults =
        config::Config::try_from(&Settings::default()).map_err(|e| ConfigError::Invalid {
            origin: "defaults".into(),
            message: e.to_string(),
        })?;
    let mut b = config::Config::builder().add_source(defaults);
    if file_exists {
        b = b.add_source(config::File::from(file.as_path()).format(config::FileFormat::Toml));
    }
    let names = ai_cli_session_collector::AdapterRegistry::new().names();
    let list_keys: Vec<String> = names
        .iter()
        .flat_map(|k| [format!("sources.{k}"), format!("agents.{k}.roots")])
        .chain([
            "compact.fallback".to_owned(),
            "inject.exclude_projects".to_owned(),
            "api.allowed_hosts".to_owned(),
            "api.cors_origins".to_owned(),
        ])
        .collect();
    let set = |b: config::ConfigBuilder<config::builder::DefaultState>, key: &str, val: &str| {
        if list_keys.iter().any(|k| k == key) {
            let items: Vec<String> = val
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            b.set_override(key, items)
        } else {
            b.set_override(key, val)
        }
    };
    for key in keys() {
        if let Some(v) = inputs.env.get(&env_name(&key)) {
            b = set(b, &key, v).map_err(|e| ConfigError::Value {
                key: key.clone(),
                message: e.to_string(),
            })?;
        }
    }
    for (key, v) in &inputs.overrides {
        b = set(b, key, v).map_err(|e| ConfigError::Value {
            key: key.clone(),
            message: e.to_string(),
        })?;
    }
    let origin = if file_exists {
        format!("{} or MEMEX_* variables", file.display())
    } else {
        "MEMEX_* variables".into()
    };
    let mut settings: Settings =
        b.build()
            .and_then(|c| c.try_deserialize())
            .map_err(|e| ConfigError::Invalid {
                origin,
                message: e.to_string(),
            })?;
    settings.data.dir = expand(&settings.data.dir, inputs.home, inputs.env);
    settings.api.token = expand(&settings.api.token, inputs.home, inputs.env);
    if settings.vector.model_dir.is_empty()
        && let Some(d) = inputs.env.get("MEMEX_MODEL_DIR")
    {
        settings.vector.model_dir = d.clone();
    }
    if !settings.vector.model_dir.is_empty() {
        settings.vector.model_dir = expand(&settings.vector.model_dir, inputs.home, inputs.env);
    }
    for provider in Provider::ALL {
        let p = settings.compact.provider_settings_mut(provider);
        p.api_key = expand(&p.api_key, inputs.home, inputs.env);
        p.endpoint = expand(&p.endpoint, inputs.home, inputs.env);
        // The provider's own variable, when the config does not name a key.
        if p.api_key.is_empty()
            && let Some(v) = provider.key_variable().and_then(|var| inputs.env.get(var))
        {
            p.api_key = v.clone();
        }
    }
    if !settings.sync.key_file.is_empty() {
        settings.sync.key_file = expand(&settings.sync.key_file, inputs.home, inputs.env);
    }
    for p in settings.share.project.iter_mut() {
        p.path = expand(&p.path, inputs.home, inputs.env);
    }
    if !settings.usage.prices.is_empty() {
        settings.usage.prices = expand(&settings.usage.prices, inputs.home, inputs.env);
    }
    for p in settings.inject.exclude_projects.iter_mut() {
        *p = expand(p, inputs.home, inputs.env);
    }
    let agent_roots = settings.agents.values_mut().map(|a| &mut a.roots);
    for roots in settings.sources.values_mut().chain(agent_roots) {
        for r in roots.iter_mut() {
            *r = expand(r, inputs.home, inputs.env);
        }
    }
    validate(&settings)?;
    Ok(Resolved {
        settings,
        file,
        file_exists,
    })
}

fn validate(s: &Settings) -> Result<(), ConfigError> {
    let bad = |key: &str, message: String| {
        Err(ConfigError::Value {
            key: key.into(),
            message,
        })
    };
    let names = ai_cli_session_collector::AdapterRegistry::new().names();
    if let Some(k) = s.sources.keys().find(|k| !names.contains(&k.as_str())) {
        return bad(
            &format!("sources.{k}"),
            format!("unknown agent; accepted: {}", names.join(", ")),
        );
    }
    if let Some(k) = s.agents.keys().find(|k| !names.contains(&k.as_str())) {
        return bad(
            &format!("agents.{k}"),
            format!("unknown agent; accepted: {}", names.join(", ")),
        );
    }
    if s.data.dir.trim().is_empty() {
        return bad("data.dir", "must be a directory path".into());
    }
    if !(1024..=64 << 20).contains(&s.store.fts_max_bytes) {
        return bad(
            "store.fts_max_bytes",
            format!("accepts 1024 to 67108864, got {}", s.store.fts_max_bytes),
        );
    }
    if s.import.threads > 256 {
        return bad(
            "import.threads",
            format!(
                "accepts 0 (one per CPU but one) to 256, got {}",
                s.import.threads
            ),
        );
    }
    let range = |key: &str, v: u64, lo: u64, hi: u64| {
        if (lo..=hi).contains(&v) {
            Ok(())
        } else {
            bad(key, format!("accepts {lo} to {hi}, got {v}"))
        }
    };
    range(
        "watch.poll_interval_ms",
        s.watch.poll_interval_ms,
        100,
        3_600_000,
    )?;
    range("watch.debounce_ms", s.watch.debounce_ms, 0, 10_000)?;
    range("inject.log_days", s.inject.log_days, 0, 36_500)?;
    range("sync.interval_secs", s.sync.interval_secs, 5, 86_400)?;
    range("share.interval_secs", s.share.interval_secs, 5, 86_400)?;
    if let Err(e) = memex_usage::Zone::parse(&s.usage.timezone) {
        return bad("usage.timezone", e.to_string());
    }
    for p in &s.share.project {
        if !p.path.starts_with('/') {
            return bad(
                "share.project.path",
                format!(
                    "must be an absolute folder (or start with ~/), got `{}`",
                    p.path
                ),
            );
        }
        if p.level.parse::<memex_team::Level>().is_err() {
            return bad(
                "share.project.level",
                format!(
                    "must be one of {}, got `{}` (for {})",
                    memex_team::LEVELS.join(", "),
                    p.level,
                    p.path
                ),
            );
        }
        if let Some(n) = &p.name
            && let Err(e) = memex_team::check_project(n)
        {
            return bad("share.project.name", format!("{e} (for {})", p.path));
        }
    }
    if !s.sync.url.is_empty() && !SYNC_SCHEMES.iter().any(|p| s.sync.url.starts_with(p)) {
        return bad(
            "sync.url",
            format!(
                "must start with {}, got `{}`",
                SYNC_SCHEMES.join(", "),
                without_password(&s.sync.url)
            ),
        );
    }
    range("watch.idle_minutes", s.watch.idle_minutes, 1, 10_080)?;
    range(
        "api.max_body_bytes",
        s.api.max_body_bytes as u64,
        1024,
        64 << 20,
    )?;
    if let Err(e) = s.api.bind.parse::<std::net::SocketAddr>() {
        return bad(
            "api.bind",
            format!(
                "expects an address and port such as 127.0.0.1:10013, got `{}` ({e})",
                s.api.bind
            ),
        );
    }
    if s.api.token.chars().any(|c| c.is_control() || c == ' ') {
        return bad(
            "api.token",
            "must not contain spaces or control characters".into(),
        );
    }
    if !s.api.token.is_empty() {
        let n = s.api.token.chars().count();
        if n < MIN_TOKEN_CHARS {
            return bad(
                "api.token",
                format!(
                    "must have at least {} characters, got {n} (e.g. `openssl rand -hex 32`; or leave it empty: the service makes its own)",
                    MIN_TOKEN_CHARS
                ),
            );
        }
    }
    for h in &s.api.allowed_hosts {
        if h == "*" {
            if s.api.token.is_empty() {
                return bad(
                    "api.allowed_hosts",
                    "`*` (any Host) is accepted only together with api.token".into(),
                );
            }
        } else if h.is_empty() || h.contains(['/', ' ', '@']) || h.chars().any(char::is_control) {
            return bad(
                "api.allowed_hosts",
                format!("expects host names such as `memex.lan` or `memex.lan:10013`, got `{h}`"),
            );
        }
    }
    for o in &s.api.cors_origins {
        let host = o
            .strip_prefix("http://")
            .or_else(|| o.strip_prefix("https://"))
            .map(|h| h.trim_end_matches('/'));
        if !host.is_some_and(|h| {
            !h.is_empty()
                && !h.contains(['/', ' ', '@', '?', '#'])
                && !h.chars().any(char::is_control)
        }) {
            return bad(
                "api.cors_origins",
                format!("expects origins such as `https://app.example`, got `{o}`"),
            );
        }
    }
    let c = &s.compact;
    for (key, name) in std::iter::once(("compact.provider", &c.provider))
        .chain(c.fallback.iter().map(|f| ("compact.fallback", f)))
    {
        let accepted = compact_providers();
        if !accepted.contains(&name.as_str()) {
            return bad(
                key,
                format!(
                    "unknown provider `{name}`; accepted: {}",
                    accepted.join(", ")
                ),
            );
        }
    }
    range("compact.concurrency", c.concurrency as u64, 1, 16)?;
    let v = &s.vector;
    for (key, val, accepted) in [
        ("vector.provider", &v.provider, &vector_providers()[..]),
        ("vector.raw", &v.raw, VECTOR_RAW),
        ("vector.precision", &v.precision, VECTOR_PRECISIONS),
        (
            "inject.project_scope",
            &s.inject.project_scope,
            PROJECT_SCOPES,
        ),
    ] {
        if !accepted.contains(&val.as_str()) {
            return bad(
                key,
                format!("unknown value `{val}`; accepted: {}", accepted.join(", ")),
            );
        }
    }
    if model::spec(&v.model).is_none() {
        let names: Vec<&str> = model::MODELS.iter().map(|m| m.name).collect();
        return bad(
            "vector.model",
            format!(
                "unknown model `{}`; accepted: {}",
                v.model,
                names.join(", ")
            ),
        );
    }
    if let Some(f) = v.min_similarity
        && !(-1.0..=1.0).contains(&f)
    {
        return bad(
            "vector.min_similarity",
            format!("{f} is not a cosine between -1.0 and 1.0"),
        );
    }
    range("vector.threads", v.threads as u64, 0, 64)?;
    range("vector.batch", v.batch as u64, 1, 4096)?;
    range("vector.max_chunks", v.max_chunks as u64, 1, 64)?;
    range(
        "vector.ann_min_rows",
        v.ann_min_rows as u64,
        256,
        100_000_000,
    )?;
    range(
        "vector.remote_dimension",
        v.remote_dimension as u64,
        8,
        8192,
    )?;
    range("compact.max_attempts", u64::from(c.max_attempts), 1, 100)?;
    range(
        "compact.l1.merge_threshold",
        c.l1.merge_threshold as u64,
        2,
        1000,
    )?;
    if c.language.trim().is_empty() {
        return bad(
            "compact.language",
            "`auto` or a language name such as `English`".into(),
        );
    }
    for provider in Provider::ALL {
        let (name, p) = (provider.name(), c.provider_settings(provider));
        let scheme_ok = p.endpoint.starts_with("http://") || p.endpoint.starts_with("https://");
        if !scheme_ok || p.endpoint.len() < 10 {
            return bad(
                &format!("compact.{name}.endpoint"),
                format!("expects an http:// or https:// URL, got `{}`", p.endpoint),
            );
        }
        range(
            &format!("compact.{name}.timeout_secs"),
            p.timeout_secs,
            1,
            3600,
        )?;
        range(
            &format!("compact.{name}.max_tokens"),
            u64::from(p.max_tokens),
            16,
            200_000,
        )?;
        if p.model.trim().is_empty() && c.chain().iter().any(|x| x == name) {
            return bad(
                &format!("compact.{name}.model"),
                "names the model to use".into(),
            );
        }
    }
    let i = &s.inject;
    if !(0.0..=1.0).contains(&i.similarity_threshold) {
        return bad(
            "inject.similarity_threshold",
            format!("accepts 0.0 to 1.0, got {}", i.similarity_threshold),
        );
    }
    range("inject.max_results", i.max_results as u64, 1, 50)?;
    if !(0.0..=1.0).contains(&i.team_threshold) {
        return bad(
            "inject.team_threshold",
            format!("accepts 0.0 to 1.0, got {}", i.team_threshold),
        );
    }
    range("inject.team_max_results", i.team_max_results as u64, 1, 20)?;
    range("inject.max_tokens", i.max_tokens as u64, 100, 20_000)?;
    range(
        "inject.full_max_sessions",
        i.full_max_sessions as u64,
        1,
        50,
    )?;
    range(
        "inject.full_max_tokens",
        i.full_max_tokens as u64,
        50,
        20_000,
    )?;
    range(
        "inject.min_prompt_chars",
        i.min_prompt_chars as u64,
        0,
        10_000,
    )?;
    range("inject.timeout_ms", i.timeout_ms, 100, 10_000)?;
    if let Some(p) = i.exclude_projects.iter().find(|p| !p.starts_with('/')) {
        return bad(
            "inject.exclude_projects",
            format!("expects absolute folder paths, got `{p}`"),
        );
    }
    if !(64 << 10..=256 << 20).contains(&s.import.batch_bytes) {
        return bad(
            "import.batch_bytes",
            format!("accepts 65536 to 268435456, got {}", s.import.batch_bytes),
        );
    }
    Ok(())
}

/// `${VAR}` from the environment, and a leading `~` as the home directory.
pub fn expand(s: &str, home: &Path, env: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        match rest[i + 2..].find('}') {
            Some(j) => {
                let name = &rest[i + 2..i + 2 + j];
                out.push_str(env.get(name).map_or("", String::as_str));
                rest = &rest[i + 3 + j..];
            }
            None => {
                out.push_str(&rest[i..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    if out == "~" {
        return home.display().to_string();
    }
    match out.strip_prefix("~/") {
        Some(r) => home.join(r).display().to_string(),
        None => out,
    }
}

impl Settings {
    pub fn data_dir(&self) -> PathBuf {
        PathBuf::from(&self.data.dir)
    }

    /// One agent's settings (the defaults when its section is absent).
    pub fn agent(&self, name: &str) -> AgentSettings {
        self.agents.get(name).cloned().unwrap_or_default()
    }

    /// The roots to read, per enabled agent: configured ones, or the adapter's defaults.
    pub fn roots(
        &self,
        registry: &ai_cli_session_collector::AdapterRegistry,
        env: &ai_cli_session_collector::Env,
    ) -> Vec<(String, PathBuf)> {
        self.roots_with_projects(registry, env, &[])
    }

    /// [`Settings::roots`], and for the agents that keep their files in project folders, every
    /// folder of `projects` (the archive's known projects) where `known_projects` is on.
    pub fn roots_with_projects(
        &self,
        registry: &ai_cli_session_collector::AdapterRegistry,
        env: &ai_cli_session_collector::Env,
        projects: &[PathBuf],
    ) -> Vec<(String, PathBuf)> {
        let mut out: Vec<(String, PathBuf)> = Vec::new();
        for a in registry.all() {
            let settings = self.agent(a.name());
            if !settings.enabled {
                continue;
            }
            let configured = Some(&settings.roots)
                .filter(|r| !r.is_empty())
                .or_else(|| self.sources.get(a.name()).filter(|r| !r.is_empty()));
            let mut roots: Vec<PathBuf> = match configured {
                Some(r) => r.iter().map(PathBuf::from).collect(),
                None => a.default_roots(env),
            };
            if !a.project_files().is_empty() && settings.known_projects {
                roots.extend(projects.iter().cloned());
            }
            roots.sort();
            roots.dedup();
            out.extend(roots.into_iter().map(|r| (a.name().to_owned(), r)));
        }
        out
    }

    /// The settings as `memex config` shows them: secrets replaced by `(set)`.
    pub fn for_display(&self) -> Settings {
        let mut s = self.clone();
        if !s.api.token.is_empty() {
            s.api.token = "(set)".into();
        }
        s.sync.url = without_password(&s.sync.url);
        for provider in Provider::ALL {
            let p = s.compact.provider_settings_mut(provider);
            if !p.api_key.is_empty() {
                p.api_key = "(set)".into();
            }
        }
        s
    }

    pub fn import_threads(&self) -> usize {
        match self.import.threads {
            // One core is left to the writer thread, except on two cores, where the writer
            // idles a quarter of the time behind one parser and a second one fills it
            // (BENCHMARKS.md, "Import").
            0 => std::thread::available_parallelism()
                .map_or(1, |n| n.get().saturating_sub(1).max(2).min(n.get())),
            n => n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_config_is_the_defaults() {
        let example: Settings = toml::from_str(include_str!("../../config.example.toml"))
            .expect("config.example.toml parses");
        assert_eq!(example, Settings::default());
    }

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn layers_apply_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(
            &f,
            "[store]\nredact = false\nfts_max_bytes = 4096\n[data]\ndir = \"${BASE}/m\"\n",
        )
        .unwrap();
        let e = env(&[("MEMEX_STORE_FTS_MAX_BYTES", "8192"), ("BASE", "/srv")]);
        let r = resolve(Inputs {
            home: dir.path(),
            env: &e,
            config_file: Some(f),
            overrides: vec![("import.threads".into(), "3".into())],
        })
        .unwrap();
        assert!(!r.settings.store.redact, "file beats default");
        assert_eq!(r.settings.store.fts_max_bytes, 8192, "env beats file");
        assert_eq!(r.settings.import.threads, 3, "flag beats all");
        assert_eq!(r.settings.data.dir, "/srv/m");
    }

    fn resolve_with(
        home: &Path,
        e: &[(&str, &str)],
        file: Option<PathBuf>,
    ) -> Result<Resolved, ConfigError> {
        resolve(Inputs {
            home,
            env: &env(e),
            config_file: file,
            overrides: vec![],
        })
    }

    #[test]
    fn paid_providers_get_a_daily_budget_unless_it_is_set_to_zero() {
        let dir = tempfile::tempdir().unwrap();
        let budget = |e: &[(&str, &str)], file: Option<&str>| {
            let f = file.map(|body| {
                let f = dir.path().join("c.toml");
                std::fs::write(&f, body).unwrap();
                f
            });
            resolve_with(dir.path(), e, f)
                .unwrap()
                .settings
                .compact
                .daily_token_budget
        };
        assert_eq!(DEFAULT_DAILY_TOKEN_BUDGET, 200_000);
        assert_eq!(budget(&[], None), DEFAULT_DAILY_TOKEN_BUDGET);
        // A [compact] table that does not name it keeps the default.
        let other = "[compact]\nprovider = \"anthropic\"\n";
        assert_eq!(budget(&[], Some(other)), DEFAULT_DAILY_TOKEN_BUDGET);
        assert_eq!(budget(&[], Some("[compact]\ndaily_token_budget = 0\n")), 0);
        let file = Some("[compact]\ndaily_token_budget = 50000\n");
        assert_eq!(budget(&[], file), 50_000);
        let zero = [("MEMEX_COMPACT_DAILY_TOKEN_BUDGET", "0")];
        assert_eq!(budget(&zero, file), 0, "the environment beats the file");
        let err = resolve_with(
            dir.path(),
            &[("MEMEX_COMPACT_DAILY_TOKEN_BUDGET", "-1")],
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("daily_token_budget"), "{err}");
    }

    #[test]
    fn the_local_model_and_its_similarity_floor() {
        let dir = tempfile::tempdir().unwrap();
        let s = resolve_with(dir.path(), &[], None).unwrap().settings;
        assert_eq!(s.vector.model, "all-MiniLM-L6-v2");
        assert_eq!(s.vector.similarity_floor(), 0.3);
        let e5 = [("MEMEX_VECTOR_MODEL", "multilingual-e5-small")];
        let s = resolve_with(dir.path(), &e5, None).unwrap().settings;
        assert_eq!(s.vector.similarity_floor(), 0.84);
        let set = [
            ("MEMEX_VECTOR_MODEL", "multilingual-e5-small"),
            ("MEMEX_VECTOR_MIN_SIMILARITY", "0.75"),
        ];
        let s = resolve_with(dir.path(), &set, None).unwrap().settings;
        assert_eq!(s.vector.similarity_floor(), 0.75);
        // A remote provider's cosines are not the local model's.
        let remote = [
            ("MEMEX_VECTOR_MODEL", "multilingual-e5-small"),
            ("MEMEX_VECTOR_PROVIDER", "hashing"),
        ];
        let s = resolve_with(dir.path(), &remote, None).unwrap().settings;
        assert_eq!(s.vector.similarity_floor(), 0.3);
        let err = resolve_with(dir.path(), &[("MEMEX_VECTOR_MODEL", "bert-base")], None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("vector.model") && err.contains("multilingual-e5-small"),
            "{err}"
        );
        for bad in ["1.5", "NaN"] {
            let err = resolve_with(dir.path(), &[("MEMEX_VECTOR_MIN_SIMILARITY", bad)], None)
                .unwrap_err()
                .to_string();
            assert!(err.contains("min_similarity"), "{bad}: {err}");
        }
        std::fs::write(
            dir.path().join("c.toml"),
            "[vector]\nmin_similarity = 0.5\n",
        )
        .unwrap();
        let s = resolve_with(dir.path(), &[], Some(dir.path().join("c.toml")))
            .unwrap()
            .settings;
        assert_eq!(s.vector.min_similarity, Some(0.5));
    }

    #[test]
    fn a_sync_target_is_checked_and_its_password_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let err = resolve_with(
            dir.path(),
            &[("MEMEX_SYNC_URL", "s3://me:hunter2@bucket/x")],
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("sync.url") && err.contains("postgres://"),
            "{err}"
        );
        assert!(
            !err.contains("hunter2"),
            "the password is not repeated: {err}"
        );
        let err = resolve_with(dir.path(), &[("MEMEX_SYNC_INTERVAL_SECS", "1")], None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("sync.interval_secs"), "{err}");
        let ok = resolve_with(
            dir.path(),
            &[
                (
                    "MEMEX_SYNC_URL",
                    "postgres://me:hunter2@db.example:5432/memex",
                ),
                ("MEMEX_SYNC_KEY_FILE", "~/keys/sync.key"),
            ],
            None,
        )
        .unwrap();
        assert_eq!(
            ok.settings.for_display().sync.url,
            "postgres://me:(set)@db.example:5432/memex"
        );
        assert_eq!(
            ok.settings.sync.key_file,
            dir.path().join("keys/sync.key").display().to_string()
        );
        assert_eq!(without_password("file:///srv/sync"), "file:///srv/sync");
    }

    #[test]
    fn invalid_values_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let err = resolve_with(dir.path(), &[("MEMEX_STORE_REDACT", "maybe")], None).unwrap_err();
        assert!(err.to_string().contains("redact"), "{err}");
        let err = resolve_with(dir.path(), &[("MEMEX_IMPORT_THREADS", "1000")], None).unwrap_err();
        assert!(err.to_string().contains("import.threads"), "{err}");
        let err = resolve_with(dir.path(), &[("MEMEX_API_BIND", "localhost")], None).unwrap_err();
        assert!(err.to_string().contains("api.bind"), "{err}");
        let err = resolve_with(dir.path(), &[("MEMEX_WATCH_IDLE_MINUTES", "0")], None).unwrap_err();
        assert!(err.to_string().contains("watch.idle_minutes"), "{err}");
        let err = resolve_with(dir.path(), &[("MEMEX_WATCH_POLL", "sometimes")], None).unwrap_err();
        assert!(err.to_string().contains("poll"), "{err}");
        let long = "abc123-a-token-of-24-chars";
        let ok = resolve_with(
            dir.path(),
            &[("MEMEX_API_TOKEN", "${SECRET}"), ("SECRET", long)],
            None,
        )
        .unwrap();
        assert_eq!(ok.settings.api.token, long);
        let err = resolve_with(dir.path(), &[("MEMEX_API_TOKEN", "abc123")], None).unwrap_err();
        assert!(
            err.to_string().contains("api.token") && err.to_string().contains("at least 24"),
            "{err}"
        );
        assert_eq!(ok.settings.for_display().api.token, "(set)");
        let f = dir.path().join("c.toml");
        std::fs::write(&f, "[sources]\nwindsurf = [\"/x\"]\n").unwrap();
        let err = resolve_with(dir.path(), &[], Some(f.clone())).unwrap_err();
        assert!(err.to_string().contains("sources.windsurf"), "{err}");
        std::fs::write(&f, "[agents.windsurf]\nenabled = true\n").unwrap();
        let err = resolve_with(dir.path(), &[], Some(f)).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("agents.windsurf") && msg.contains("cursor-ide"),
            "{msg}"
        );
    }
}
