//! all-MiniLM-L6-v2 (sentence-transformers): BERT, mean pooling over the tokens, L2
//! normalisation, 384 dimensions, 256 tokens at most per input. The network runs on
//! `super::encoder`, its linear layers in 8-bit integers where the CPU has VNNI.
//!
//! Throughput comes from batching texts of similar length (`super::by_length`) and from a
//! small dedicated thread pool: on two busy cores one thread does as well as two.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::cache_file;
use super::encoder::{Block, Dense, Encoder, Norm};
use super::layer_file::Layers;
use super::model::{MODEL_NAME, ModelFiles};
use super::{EmbedError, Embedder, Resting};

pub const DIMENSION: usize = 384;
/// The model's input limit, special tokens included.
pub const MAX_TOKENS: usize = 256;

/// What the encoder needs from the checkpoint's `config.json`.
#[derive(serde::Deserialize)]
struct Config {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
    layer_norm_eps: f64,
    hidden_act: String,
}

impl Config {
    fn check(&self) -> Result<(), Unfit> {
        if self.hidden_act != "gelu" {
            return Err(Unfit::Activation(self.hidden_act.clone()));
        }
        if self.hidden_size != DIMENSION
            || self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return Err(Unfit::Hidden {
                size: self.hidden_size,
                heads: self.num_attention_heads,
            });
        }
        if self.max_position_embeddings < MAX_TOKENS
            || self.num_hidden_layers > 64
            || !(1..=16_384).contains(&self.intermediate_size)
            || self.vocab_size == 0
            || !(self.layer_norm_eps.is_finite() && self.layer_norm_eps > 0.0)
        {
            return Err(Unfit::OutOfRange);
        }
        Ok(())
    }
}

/// What makes a model's configuration or checkpoint unusable (the file's name goes in front).
#[derive(Debug, thiserror::Error)]
enum Unfit {
    #[error("hidden_act {0} (only gelu is built)")]
    Activation(String),
    #[error("hidden_size {size} with {heads} heads (expected {DIMENSION}, split evenly)")]
    Hidden { size: usize, heads: usize },
    #[error(
        "max_position_embeddings, num_hidden_layers, intermediate_size, vocab_size or \
         layer_norm_eps out of range"
    )]
    OutOfRange,
    #[error("{0}")]
    Header(#[from] safetensors::SafeTensorError),
    #[error("no f32 tensor {0}")]
    Missing(String),
    #[error("{name} has shape {got:?}, expected {expected:?}")]
    Shape {
        name: String,
        got: Vec<usize>,
        expected: Vec<usize>,
    },
    #[error("{0} lies past the end of the file")]
    PastEnd(String),
}

/// The network in memory: the word table stays in the file's memory map.
struct Network {
    map: memmap2::Mmap,
    /// Byte offset of the word table in `map`.
    words: usize,
    positions: Vec<f32>,
    token_type: Vec<f32>,
    norm: Norm,
    encoder: Encoder,
}

pub struct MiniLm {
    /// The network (22 M weights), loaded on first use.
    model: Resting<Network>,
    weights: PathBuf,
    config: Config,
    int8: bool,
    tokenizer: super::wordpiece::BertTokenizer,
    pool: rayon::ThreadPool,
    cls: u32,
    sep: u32,
}

fn model_err(e: impl std::fmt::Display) -> EmbedError {
    EmbedError::Model(e.to_string())
}

impl MiniLm {
    /// Prepares the checked files (the tokenizer now, the network on first use: `memex status`
    /// and full-text searches never pay for it); `threads` = 0 means one per core; `int8`:
    /// linear layers in 8-bit integers where the CPU multiplies those fast.
    pub fn load(files: &ModelFiles, threads: usize, int8: bool) -> Result<MiniLm, EmbedError> {
        let (config_file, tokenizer_file) =
            (files.path("config.json"), files.path("tokenizer.json"));
        let config: Config = serde_json::from_slice(
            &std::fs::read(&config_file).map_err(|e| EmbedError::Setup(e.to_string()))?,
        )
        .map_err(|e| EmbedError::Setup(format!("{}: {e}", config_file.display())))?;
        config
            .check()
            .map_err(|e| EmbedError::Setup(format!("{}: {e}", config_file.display())))?;
        let tokenizer = super::wordpiece::load(&tokenizer_file)?;
        let id = |t: &str| {
            tokenizer
                .token_to_id(t)
                .ok_or_else(|| EmbedError::Setup(format!("the tokenizer has no {t} token")))
        };
        let (cls, sep) = (id("[CLS]")?, id("[SEP]")?);
        let pool = super::compute_pool(threads)?;
        Ok(MiniLm {
            model: Resting::new(),
            weights: files.path("model.safetensors"),
            config,
            int8,
            tokenizer,
            pool,
            cls,
            sep,
        })
    }

    /// `text` as tokens, without special tokens (ids and byte offsets).
    fn tokens(&self, text: &str) -> Result<tokenizers::Encoding, EmbedError> {
        self.tokenizer.encode(text).map_err(model_err)
    }

    fn forward(&self, batch: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let net = self
            .model
            .get(|| load_network(&self.weights, &self.config, self.int8))?;
        let h = DIMENSION;
        let width = batch.iter().map(Vec::len).max().unwrap_or(0);
        let vocab = self.config.vocab_size;
        // Word + position + token type, then the embedding norm; padding rows stay zero.
        let mut x = vec![0f32; batch.len() * width * h];
        for (ids, rows) in batch.iter().zip(x.chunks_exact_mut(width * h)) {
            for (t, (&id, row)) in ids.iter().zip(rows.chunks_exact_mut(h)).enumerate() {
                if id as usize >= vocab {
                    return Err(model_err(format!(
                        "token id {id} is outside the vocabulary"
                    )));
                }
                let word = &net.map[net.words + id as usize * h * 4..][..h * 4];
                let pos = &net.positions[t * h..][..h];
                for (((v, w), p), ty) in row
                    .iter_mut()
                    .zip(word.chunks_exact(4))
                    .zip(pos)
                    .zip(&net.token_type)
                {
                    *v = f32::from_le_bytes([w[0], w[1], w[2], w[3]]) + p + ty;
                }
            }
        }
        let lens: Vec<usize> = batch.iter().map(Vec::len).collect();
        Ok(self.pool.install(|| {
            net.norm.apply(&mut x);
            net.encoder.run(x, &lens, width)
        }))
    }
}

/// The checkpoint's tensors by name: their shape and byte range in the file.
struct Tensors<'a> {
    map: &'a [u8],
    index: HashMap<String, (Vec<usize>, std::ops::Range<usize>)>,
}

impl<'a> Tensors<'a> {
    fn read(map: &'a [u8]) -> Result<Tensors<'a>, Unfit> {
        let (header, meta) = safetensors::SafeTensors::read_metadata(map)?;
        let start = 8 + header;
        let mut index = HashMap::new();
        for (name, info) in meta.tensors() {
            if info.dtype == safetensors::Dtype::F32 {
                let (a, b) = info.data_offsets;
                index.insert(name, (info.shape.clone(), start + a..start + b));
            }
        }
        Ok(Tensors { map, index })
    }

    /// Where the f32 tensor `name` of `shape` starts in the file.
    fn offset(&self, name: &str, shape: &[usize]) -> Result<usize, Unfit> {
        let (got, range) = self
            .index
            .get(name)
            .ok_or_else(|| Unfit::Missing(name.to_owned()))?;
        if got != shape || range.len() != shape.iter().product::<usize>() * 4 {
            return Err(Unfit::Shape {
                name: name.to_owned(),
                got: got.clone(),
                expected: shape.to_vec(),
            });
        }
        if range.end > self.map.len() {
            return Err(Unfit::PastEnd(name.to_owned()));
        }
        Ok(range.start)
    }

    fn floats(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, Unfit> {
        let at = self.offset(name, shape)?;
        let len = shape.iter().product::<usize>() * 4;
        Ok(super::f32s(&self.map[at..at + len]))
    }
}

fn load_network(weights: &Path, c: &Config, int8: bool) -> Result<Network, EmbedError> {
    let file = std::fs::File::open(weights)
        .map_err(|e| model_err(format!("cannot open {}: {e}", weights.display())))?;
    // SAFETY: the weights are memory-mapped read-only; Memex never writes that file, and
    // `memex models install` replaces it by rename, never in place.
    let map = unsafe { memmap2::Mmap::map(&file) }
        .map_err(|e| model_err(format!("cannot map {}: {e}", weights.display())))?;
    let bad = |e: Unfit| model_err(format!("{}: {e}", weights.display()));
    let t = Tensors::read(&map).map_err(bad)?;
    let (h, ff) = (c.hidden_size, c.intermediate_size);
    let eps = c.layer_norm_eps as f32;
    let norm = |name: &str| -> Result<Norm, Unfit> {
        Ok(Norm {
            w: t.floats(&format!("{name}.weight"), &[h])?,
            b: t.floats(&format!("{name}.bias"), &[h])?,
            eps,
        })
    };
    let part = |name: &str, n: usize, k: usize| -> Result<(Vec<f32>, Vec<f32>), Unfit> {
        Ok((
            t.floats(&format!("{name}.weight"), &[n, k])?,
            t.floats(&format!("{name}.bias"), &[n])?,
        ))
    };
    // Linear layers from the file of packed layers when an earlier load left one.
    let layers = Layers::open(weights, cache_file::stamp(weights, &file), int8);
    let dense = |name: &str, n: usize, k: usize| -> Result<Dense, Unfit> {
        layers.dense(name, (n, k), || part(name, n, k))
    };
    // Everything but the map, which the tensors borrow until then.
    type Parts = (usize, Vec<f32>, Vec<f32>, Norm, Encoder);
    let build = || -> Result<Parts, Unfit> {
        let blocks = (0..c.num_hidden_layers)
            .map(|l| {
                let n = |s: &str| format!("encoder.layer.{l}.{s}");
                let qkv = layers.stacked(&n("attention.self"), (3 * h, h), || {
                    ["query", "key", "value"]
                        .iter()
                        .map(|p| part(&n(&format!("attention.self.{p}")), h, h))
                        .collect()
                })?;
                Ok(Block {
                    qkv,
                    out: dense(&n("attention.output.dense"), h, h)?,
                    attn_norm: norm(&n("attention.output.LayerNorm"))?,
                    up: dense(&n("intermediate.dense"), ff, h)?,
                    down: dense(&n("output.dense"), h, ff)?,
                    ffn_norm: norm(&n("output.LayerNorm"))?,
                })
            })
            .collect::<Result<Vec<_>, Unfit>>()?;
        Ok((
            t.offset("embeddings.word_embeddings.weight", &[c.vocab_size, h])?,
            t.floats(
                "embeddings.position_embeddings.weight",
                &[c.max_position_embeddings, h],
            )?,
            t.floats("embeddings.token_type_embeddings.weight", &[2, h])?[..h].to_vec(),
            norm("embeddings.LayerNorm")?,
            Encoder {
                hidden: h,
                heads: c.num_attention_heads,
                blocks,
            },
        ))
    };
    let (words, positions, token_type, norm, encoder) = build().map_err(bad)?;
    layers.finish();
    Ok(Network {
        map,
        words,
        positions,
        token_type,
        norm,
        encoder,
    })
}

impl Embedder for MiniLm {
    fn rest(&self, after: std::time::Duration) {
        self.model.rest(after);
    }

    fn id(&self) -> &str {
        MODEL_NAME
    }

    fn dimension(&self) -> usize {
        DIMENSION
    }

    fn chunk(&self, text: &str, max: usize) -> Vec<String> {
        let text = text.trim();
        if text.is_empty() {
            return Vec::new();
        }
        let window = MAX_TOKENS - 2;
        // A token is rarely longer than 16 bytes: no need to tokenize what will not be kept.
        let mut end = text.len().min(max.max(1) * window * 16);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let text = &text[..end];
        let Ok(enc) = self.tokens(text) else {
            return super::chunk_chars(text, 1000, max);
        };
        if enc.len() <= window {
            return vec![text.to_owned()];
        }
        enc.get_offsets()
            .chunks(window)
            .take(max.max(1))
            .filter_map(|w| {
                let (start, stop) = (w.first()?.0, w.last()?.1);
                text.get(start..stop).map(str::to_owned)
            })
            .collect()
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut inputs = Vec::with_capacity(texts.len());
        for t in texts {
            let mut ids = self.tokens(t)?.get_ids().to_vec();
            ids.truncate(MAX_TOKENS - 2);
            ids.insert(0, self.cls);
            ids.push(self.sep);
            inputs.push(ids);
        }
        super::by_length(inputs, |b| self.forward(b))
    }
}
