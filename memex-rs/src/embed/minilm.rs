//! all-MiniLM-L6-v2 (sentence-transformers) on candle: BERT, mean pooling over the attention
//! mask, L2 normalisation, 384 dimensions, 256 tokens at most per input.
//!
//! Throughput comes from batching texts of similar length ([`super::by_length`]) and from a
//! small dedicated thread pool: on two busy cores one thread does as well as two.

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::Tokenizer;

use super::model::{MODEL_NAME, ModelFiles};
use super::{EmbedError, Embedder, Resting};

pub const DIMENSION: usize = 384;
/// The model's input limit, special tokens included.
pub const MAX_TOKENS: usize = 256;

pub struct MiniLm {
    /// The network (90 MB of weights), loaded on first use.
    model: Resting<BertModel>,
    weights: std::path::PathBuf,
    config: Config,
    tokenizer: Tokenizer,
    pool: rayon::ThreadPool,
    cls: u32,
    sep: u32,
}

fn model_err(e: impl std::fmt::Display) -> EmbedError {
    EmbedError::Model(e.to_string())
}

impl MiniLm {
    /// Prepares the checked files (the tokenizer now, the network on first use: `memex status`
    /// and full-text searches never pay for it); `threads` = 0 means one per core.
    pub fn load(files: &ModelFiles, threads: usize) -> Result<MiniLm, EmbedError> {
        let (config_file, tokenizer_file) =
            (files.path("config.json"), files.path("tokenizer.json"));
        let config: Config = serde_json::from_slice(
            &std::fs::read(&config_file).map_err(|e| EmbedError::Setup(e.to_string()))?,
        )
        .map_err(|e| EmbedError::Setup(format!("{}: {e}", config_file.display())))?;
        let mut tokenizer = Tokenizer::from_file(&tokenizer_file)
            .map_err(|e| EmbedError::Setup(format!("{}: {e}", tokenizer_file.display())))?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| EmbedError::Setup(e.to_string()))?;
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
            tokenizer,
            pool,
            cls,
            sep,
        })
    }

    /// `text` as tokens, without special tokens (ids and byte offsets).
    fn tokens(&self, text: &str) -> Result<tokenizers::Encoding, EmbedError> {
        self.tokenizer.encode(text, false).map_err(model_err)
    }

    fn forward(&self, batch: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let width = batch.iter().map(Vec::len).max().unwrap_or(0);
        let n = batch.len();
        let mut ids = Vec::with_capacity(n * width);
        let mut mask = Vec::with_capacity(n * width);
        for row in batch {
            ids.extend_from_slice(row);
            ids.extend(std::iter::repeat_n(0u32, width - row.len()));
            mask.extend(std::iter::repeat_n(1u32, row.len()));
            mask.extend(std::iter::repeat_n(0u32, width - row.len()));
        }
        let dev = Device::Cpu;
        let run = || -> candle_core::Result<Vec<Vec<f32>>> {
            let ids = Tensor::from_vec(ids, (n, width), &dev)?;
            let mask = Tensor::from_vec(mask, (n, width), &dev)?;
            let types = ids.zeros_like()?;
            let model = self
                .model
                .get(|| load_model(&self.weights, &self.config))
                .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
            let hidden = model.forward(&ids, &types, Some(&mask))?;
            // Mean over the real tokens, then unit length.
            let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let summed = hidden.broadcast_mul(&m)?.sum(1)?;
            let counts = m.sum(1)?;
            let mean = summed.broadcast_div(&counts)?;
            let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?;
            mean.broadcast_div(&norm)?.to_vec2::<f32>()
        };
        self.pool.install(run).map_err(model_err)
    }
}

fn load_model(weights: &std::path::Path, config: &Config) -> Result<BertModel, EmbedError> {
    // SAFETY: the weights are memory-mapped read-only; Memex never writes that file, and
    // `memex models install` replaces it by rename, never in place.
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[weights], DType::F32, &Device::Cpu) }
        .map_err(model_err)?;
    BertModel::load(vb, config).map_err(model_err)
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
