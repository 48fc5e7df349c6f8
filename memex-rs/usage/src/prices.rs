//! Per-model prices: the table shipped in the binary, a refreshed copy in the data folder, and
//! the user's own file, each in the format of LiteLLM's public price list
//! (`model_prices_and_context_window.json`): US dollars per token, per model name.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::fields::FIELDS;

/// The table shipped in the binary (`prices.json`: LiteLLM's price list, only the fields Memex
/// reads, with the release it came from and the day it was taken), compiled by `build.rs` into
/// a sorted array.
mod shipped {
    include!(concat!(env!("OUT_DIR"), "/shipped_prices.rs"));
}

/// Tokens past which a long-context price applies (per call and per kind of token, as the
/// providers bill it and as LiteLLM's `_above_200k_tokens` fields say).
pub const TIER_THRESHOLD: u64 = 200_000;

#[derive(Debug, thiserror::Error)]
pub enum PriceError {
    #[error("cannot read the price file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the price file {path} is not JSON: {source}")]
    Json {
        path: String,
        source: serde_json::Error,
    },
    #[error(
        "the price file {path} holds no model with a price (expected LiteLLM's format: \
         {{\"model\": {{\"input_cost_per_token\": 3e-6, \"output_cost_per_token\": 1.5e-5, ...}}}})"
    )]
    Empty { path: String },
    #[error("in the price file {path}, model `{model}`: {problem}")]
    Model {
        path: String,
        model: String,
        problem: String,
    },
}

/// One model's prices in US dollars per token. A missing cache price is the input price (the
/// provider bills those tokens as input); long-context prices apply to the tokens of one call
/// above [`TIER_THRESHOLD`], kind by kind.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    pub cache_write: f64,
    pub cache_read: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub long: Option<Tier>,
}

#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Tier {
    pub input: f64,
    pub output: f64,
    pub cache_write: f64,
    pub cache_read: f64,
}

/// Token counts of one kind split at [`TIER_THRESHOLD`] per call: `all` of them, and the part
/// `above` it (summed over calls).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Split {
    pub all: u64,
    pub above: u64,
}

impl Split {
    fn cost(self, base: f64, long: Option<f64>) -> f64 {
        match long {
            Some(hi) => (self.all - self.above) as f64 * base + self.above as f64 * hi,
            None => self.all as f64 * base,
        }
    }
}

/// The four kinds of billed tokens of some calls, each split at the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Billed {
    pub input: Split,
    pub output: Split,
    pub cache_write: Split,
    pub cache_read: Split,
}

impl Price {
    /// The cost of these tokens in US dollars.
    pub fn cost(&self, t: &Billed) -> f64 {
        let l = self.long;
        t.input.cost(self.input, l.map(|l| l.input))
            + t.output.cost(self.output, l.map(|l| l.output))
            + t.cache_write
                .cost(self.cache_write, l.map(|l| l.cache_write))
            + t.cache_read.cost(self.cache_read, l.map(|l| l.cache_read))
    }
}

/// Where a table came from, as reports name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Origin {
    /// `shipped`, `refreshed` (the data folder's copy) or the user's file.
    pub name: String,
    pub source: String,
    /// The day its prices were taken (YYYY-MM-DD).
    pub date: String,
}

#[derive(Debug, Clone)]
pub struct PriceTable {
    /// Models of a refreshed table or the user's file; they win over the shipped ones.
    models: BTreeMap<String, Price>,
    /// Whether the shipped table is read beneath `models` (not when a refreshed one replaced it).
    with_shipped: bool,
    /// The tables merged into this one, the first the base.
    pub origins: Vec<Origin>,
}

/// The stored form: LiteLLM's entries with the fields Memex reads, and where they came from.
#[derive(Serialize, Deserialize)]
struct Stored {
    source: String,
    date: String,
    models: BTreeMap<String, Value>,
}

/// A price from LiteLLM's eight fields in [`FIELDS`] order (NaN: absent), as [`entry`] reads
/// them.
fn from_fields(f: &[f64; 8]) -> Price {
    let at = |i: usize| (!f[i].is_nan()).then_some(f[i]);
    let (input, output) = (f[0], f[1]);
    let cache_write = at(2).unwrap_or(input);
    let cache_read = at(3).unwrap_or(input);
    let long = (4..8).any(|i| at(i).is_some()).then(|| Tier {
        input: at(4).unwrap_or(input),
        output: at(5).unwrap_or(output),
        cache_write: at(6).unwrap_or(cache_write),
        cache_read: at(7).unwrap_or(cache_read),
    });
    Price {
        input,
        output,
        cache_write,
        cache_read,
        long,
    }
}

/// Reads one LiteLLM entry; `None` for entries that are not priced per token (image models,
/// embeddings without output, the format's `sample_spec`).
fn entry(v: &Value) -> Result<Option<Price>, String> {
    let Some(o) = v.as_object() else {
        return Ok(None);
    };
    if let Some(mode) = o.get("mode").and_then(Value::as_str)
        && !matches!(mode, "chat" | "responses" | "completion")
    {
        return Ok(None);
    }
    let num = |k: &str| -> Result<Option<f64>, String> {
        match o.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => match n.as_f64() {
                Some(x) if x.is_finite() && (0.0..1.0).contains(&x) => Ok(Some(x)),
                _ => Err(format!(
                    "`{k}` is {n}: a price per token is at least 0 and below $1"
                )),
            },
            Some(_) => Err(format!("`{k}` is not a number")),
        }
    };
    let (Some(input), Some(output)) = (num(FIELDS[0])?, num(FIELDS[1])?) else {
        return Ok(None);
    };
    let mut f = [f64::NAN; 8];
    f[0] = input;
    f[1] = output;
    for (i, k) in FIELDS.iter().enumerate().skip(2) {
        if let Some(x) = num(k)? {
            f[i] = x;
        }
    }
    Ok(Some(from_fields(&f)))
}

/// A price file's entries: LiteLLM's file as published (a map of models), or Memex's stored
/// form (`source`, `date`, `models`). `strict` (a file the user wrote for `[usage] prices`):
/// every entry must be a model priced per token; LiteLLM's whole list also holds image,
/// embedding and audio models, which are skipped.
fn parse(
    path: &str,
    text: &str,
    strict: bool,
) -> Result<(Option<Stored>, BTreeMap<String, Price>), PriceError> {
    let v: Value = serde_json::from_str(text).map_err(|source| PriceError::Json {
        path: path.to_owned(),
        source,
    })?;
    let (stored, map) = match v {
        Value::Object(o) if o.get("models").is_some_and(Value::is_object) => {
            let s: Stored =
                serde_json::from_value(Value::Object(o)).map_err(|source| PriceError::Json {
                    path: path.to_owned(),
                    source,
                })?;
            let m = s.models.clone();
            (Some(s), m)
        }
        Value::Object(o) => (None, o.into_iter().collect()),
        _ => {
            return Err(PriceError::Empty {
                path: path.to_owned(),
            });
        }
    };
    let mut out = BTreeMap::new();
    for (model, v) in &map {
        if model == "sample_spec" {
            continue;
        }
        match entry(v) {
            Ok(Some(p)) => {
                out.insert(model.clone(), p);
            }
            Ok(None) if strict => {
                return Err(PriceError::Model {
                    path: path.to_owned(),
                    model: model.clone(),
                    problem:
                        "is not a chat model priced per token: it needs `input_cost_per_token` \
                              and `output_cost_per_token` (numbers), and no `mode` or `mode` \
                              \"chat\""
                            .into(),
                });
            }
            Ok(None) => {}
            Err(problem) => {
                return Err(PriceError::Model {
                    path: path.to_owned(),
                    model: model.clone(),
                    problem,
                });
            }
        }
    }
    if out.is_empty() {
        return Err(PriceError::Empty {
            path: path.to_owned(),
        });
    }
    Ok((stored, out))
}

fn read(path: &Path) -> Result<String, PriceError> {
    std::fs::read_to_string(path).map_err(|source| PriceError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// The name of the data folder's refreshed table.
pub const REFRESHED: &str = "prices.json";

impl PriceTable {
    /// The table shipped in this binary.
    pub fn shipped() -> PriceTable {
        PriceTable {
            models: BTreeMap::new(),
            with_shipped: true,
            origins: vec![Origin {
                name: "shipped".into(),
                source: shipped::SHIPPED_SOURCE.into(),
                date: shipped::SHIPPED_DATE.into(),
            }],
        }
    }

    /// The table reports use: the shipped one, replaced by the data folder's refreshed copy
    /// when there is one, then the user's `[usage] prices` file on top (its models replace or
    /// add to the others).
    pub fn load(data_dir: &Path, user: Option<&Path>) -> Result<PriceTable, PriceError> {
        let refreshed = data_dir.join(REFRESHED);
        let mut t = if refreshed.is_file() {
            let text = read(&refreshed)?;
            let (stored, models) = parse(&refreshed.display().to_string(), &text, false)?;
            let (source, date) = stored
                .map(|s| (s.source, s.date))
                .unwrap_or_else(|| ("(unknown)".into(), String::new()));
            PriceTable {
                models,
                with_shipped: false,
                origins: vec![Origin {
                    name: "refreshed".into(),
                    source,
                    date,
                }],
            }
        } else {
            PriceTable::shipped()
        };
        if let Some(p) = user {
            let text = read(p)?;
            let (stored, models) = parse(&p.display().to_string(), &text, true)?;
            let date = stored
                .as_ref()
                .map(|s| s.date.clone())
                .unwrap_or_else(|| modified_day(p).unwrap_or_default());
            t.models.extend(models);
            t.origins.push(Origin {
                name: p.display().to_string(),
                source: stored
                    .map(|s| s.source)
                    .unwrap_or_else(|| "your file".into()),
                date,
            });
        }
        Ok(t)
    }

    /// Models priced.
    pub fn len(&self) -> usize {
        let shipped = if self.with_shipped {
            shipped::SHIPPED
                .iter()
                .filter(|(n, _)| !self.models.contains_key(*n))
                .count()
        } else {
            0
        };
        self.models.len() + shipped
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One name's price: the user's or refreshed models first, then the shipped ones.
    fn get(&self, name: &str) -> Option<(&str, Price)> {
        if let Some((k, p)) = self.models.get_key_value(name) {
            return Some((k.as_str(), *p));
        }
        if !self.with_shipped {
            return None;
        }
        let t = &shipped::SHIPPED;
        let i = t.binary_search_by(|(n, _)| (*n).cmp(name)).ok()?;
        Some((t[i].0, from_fields(&t[i].1)))
    }

    /// The price of a model as an agent names it, and the table's name for it. Tries the name
    /// itself, then without a context-size mark (`[1m]`), a provider or router prefix
    /// (`anthropic/`, `litellm_proxy/`, `accounts/fireworks/models/`), dots in Claude versions
    /// (`claude-sonnet-4.5`), and a release date (`-20250929`); then the bare name under the
    /// first-party providers' prefixes. No guess by substring: a model not found is unpriced,
    /// never priced as another.
    pub fn lookup(&self, model: &str) -> Option<(&str, Price)> {
        fn push(tried: &mut Vec<String>, s: String) {
            if !s.is_empty() && !tried.contains(&s) {
                tried.push(s);
            }
        }
        let mut tried: Vec<String> = Vec::new();
        let m = model.trim();
        push(&mut tried, m.to_owned());
        let m = m.split('[').next().unwrap_or(m).trim();
        push(&mut tried, m.to_owned());
        let tail = m.rsplit('/').next().unwrap_or(m);
        push(&mut tried, tail.to_owned());
        let lower = tail.to_ascii_lowercase();
        let undotted = if lower.starts_with("claude") {
            lower.replace('.', "-")
        } else {
            lower.clone()
        };
        push(&mut tried, lower);
        if let Some(undated) = strip_date(&undotted) {
            let undated = undated.to_owned();
            push(&mut tried, undotted);
            push(&mut tried, undated);
        } else {
            push(&mut tried, undotted);
        }
        for base in tried.clone() {
            for p in [
                "anthropic/",
                "openai/",
                "gemini/",
                "xai/",
                "deepseek/",
                "moonshot/",
                "zai/",
            ] {
                push(&mut tried, format!("{p}{base}"));
            }
        }
        tried.iter().find_map(|k| self.get(k))
    }

    /// The stored form of a table made from LiteLLM files (the newest first; an older file
    /// adds the models a newer one dropped, as transcripts still name retired models).
    pub fn stored_from(files: &[&Path], source: &str, date: &str) -> Result<String, PriceError> {
        let mut models: BTreeMap<String, Value> = BTreeMap::new();
        for p in files {
            let text = read(p)?;
            let name = p.display().to_string();
            // Validates every entry the way a report will read it.
            parse(&name, &text, false)?;
            let v: Value = serde_json::from_str(&text).map_err(|source| PriceError::Json {
                path: name.clone(),
                source,
            })?;
            let entries = match v {
                Value::Object(mut o) => match o.remove("models") {
                    Some(Value::Object(m)) => m,
                    _ => o,
                },
                _ => Default::default(),
            };
            for (model, e) in entries {
                if models.contains_key(&model) || !matches!(entry(&e), Ok(Some(_))) {
                    continue;
                }
                let Value::Object(o) = e else { continue };
                let kept: serde_json::Map<String, Value> = o
                    .into_iter()
                    .filter(|(k, _)| FIELDS.contains(&k.as_str()))
                    .collect();
                models.insert(model, Value::Object(kept));
            }
        }
        let s = Stored {
            source: source.to_owned(),
            date: date.to_owned(),
            models,
        };
        let mut text = serde_json::to_string_pretty(&s).expect("a price table serializes");
        text.push('\n');
        Ok(text)
    }
}

/// `claude-sonnet-4-5-20250929` → `claude-sonnet-4-5`.
fn strip_date(m: &str) -> Option<&str> {
    let (head, date) = m.rsplit_once('-')?;
    (date.len() == 8 && date.bytes().all(|b| b.is_ascii_digit())).then_some(head)
}

fn modified_day(p: &Path) -> Option<String> {
    let t = std::fs::metadata(p).ok()?.modified().ok()?;
    let t: chrono::DateTime<chrono::Utc> = t.into();
    Some(t.format("%Y-%m-%d").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_table_prices_the_models_agents_use() {
        let t = PriceTable::shipped();
        assert!(t.len() > 500, "{}", t.len());
        let o = &t.origins[0];
        assert!(o.source.contains("LiteLLM"), "{}", o.source);
        assert_eq!(o.date.len(), 10);
        for m in [
            "claude-sonnet-4-20250514",
            "claude-opus-4-6",
            "claude-haiku-4-5-20251001",
            "gpt-5",
            "gpt-5-codex",
            "gemini-2.5-pro",
            "gemini-2.5-flash",
        ] {
            assert!(t.lookup(m).is_some(), "{m} is not priced");
        }
        let (_, s4) = t.lookup("claude-sonnet-4-20250514").unwrap();
        assert_eq!(s4.input, 3e-6);
        assert_eq!(s4.long.unwrap().input, 6e-6);
    }

    #[test]
    fn every_shipped_price_is_a_price() {
        let t = &shipped::SHIPPED;
        assert!(t.windows(2).all(|w| w[0].0 < w[1].0), "sorted, no repeats");
        for (name, f) in t.iter() {
            assert!(!f[0].is_nan() && !f[1].is_nan(), "{name}");
            assert!(
                f.iter().all(|x| x.is_nan() || (0.0..1.0).contains(x)),
                "{name}: {f:?}"
            );
        }
        // The compiled table reads as the JSON it came from.
        let (_, json) = parse("prices.json", include_str!("../prices.json"), true).unwrap();
        assert_eq!(json.len(), t.len());
        let shipped = PriceTable::shipped();
        for (name, p) in &json {
            assert_eq!(shipped.get(name).map(|(_, q)| q), Some(*p), "{name}");
        }
    }

    #[test]
    fn names_as_agents_write_them() {
        let t = PriceTable::shipped();
        let name = |m: &str| t.lookup(m).map(|(k, _)| k.to_owned());
        assert_eq!(
            name("claude-sonnet-4-5-20250929[1m]").as_deref(),
            Some("claude-sonnet-4-5-20250929")
        );
        assert_eq!(
            name("litellm_proxy/claude-sonnet-4-5-20250929").as_deref(),
            Some("claude-sonnet-4-5-20250929")
        );
        assert_eq!(
            name("claude-sonnet-4.5").as_deref(),
            Some("claude-sonnet-4-5")
        );
        assert_eq!(name("<synthetic>"), None);
        assert_eq!(name("claude"), None, "no guess by substring");
        assert_eq!(name("review-model"), None);
    }

    #[test]
    fn long_context_tokens_are_priced_per_call_and_kind() {
        let p = Price {
            input: 3e-6,
            output: 15e-6,
            cache_write: 3.75e-6,
            cache_read: 0.3e-6,
            long: Some(Tier {
                input: 6e-6,
                output: 22.5e-6,
                cache_write: 7.5e-6,
                cache_read: 0.6e-6,
            }),
        };
        // One call: 300k input, 1k output, 100k cache write, 250k cache read.
        let b = Billed {
            input: Split {
                all: 300_000,
                above: 100_000,
            },
            output: Split {
                all: 1_000,
                above: 0,
            },
            cache_write: Split {
                all: 100_000,
                above: 0,
            },
            cache_read: Split {
                all: 250_000,
                above: 50_000,
            },
        };
        let c = p.cost(&b);
        let want = 200_000.0 * 3e-6
            + 100_000.0 * 6e-6
            + 1_000.0 * 15e-6
            + 100_000.0 * 3.75e-6
            + 200_000.0 * 0.3e-6
            + 50_000.0 * 0.6e-6;
        assert!((c - want).abs() < 1e-9, "{c} {want}");
        assert!((c - 1.68).abs() < 1e-9);
    }

    #[test]
    fn bad_price_files_are_named() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("p.json");
        std::fs::write(&f, "{\"m\": {\"input_cost_per_token\": \"3\", \"output_cost_per_token\": 1e-6, \"litellm_provider\": \"x\"}}").unwrap();
        let e = PriceTable::load(d.path(), Some(&f))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("model `m`") && e.contains("input_cost_per_token"),
            "{e}"
        );
        std::fs::write(
            &f,
            "{\"m\": {\"input_cost_per_token\": 3, \"output_cost_per_token\": 1e-6}}",
        )
        .unwrap();
        let e = PriceTable::load(d.path(), Some(&f))
            .unwrap_err()
            .to_string();
        assert!(e.contains("below $1"), "{e}");
        std::fs::write(
            &f,
            r#"{"m": {"input_cost_per_token": 1e-6, "output_cost_pre_token": 2e-6}}"#,
        )
        .unwrap();
        let e = PriceTable::load(d.path(), Some(&f))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("model `m`") && e.contains("output_cost_per_token"),
            "{e}"
        );
        std::fs::write(&f, "[1]").unwrap();
        let e = PriceTable::load(d.path(), Some(&f))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no model with a price"), "{e}");
        std::fs::write(&f, "{").unwrap();
        let e = PriceTable::load(d.path(), Some(&f))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not JSON"), "{e}");
        let e = PriceTable::load(d.path(), Some(&d.path().join("none.json")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot read"), "{e}");
    }

    #[test]
    fn the_users_file_adds_and_replaces_models() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("p.json");
        std::fs::write(
            &f,
            r#"{"my-local-model": {"input_cost_per_token": 1e-7, "output_cost_per_token": 2e-7},
                "gpt-5": {"input_cost_per_token": 2e-6, "output_cost_per_token": 1e-5}}"#,
        )
        .unwrap();
        let t = PriceTable::load(d.path(), Some(&f)).unwrap();
        let (_, p) = t.lookup("my-local-model").unwrap();
        assert_eq!((p.input, p.output, p.cache_read), (1e-7, 2e-7, 1e-7));
        assert_eq!(t.lookup("gpt-5").unwrap().1.input, 2e-6);
        assert!(
            t.lookup("claude-opus-4-6").is_some(),
            "the shipped models stay"
        );
        assert_eq!(t.origins.len(), 2);
    }
}
