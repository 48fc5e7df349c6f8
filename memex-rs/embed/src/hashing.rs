//! The stand-in embedder: feature hashing of words and character trigrams into 384 buckets.
//! Deterministic and instant, it matches texts that share words or word pieces, and nothing
//! else. It exists so that a machine without the model still indexes and searches; it is never
//! silent about it.

use super::{EmbedError, Embedder, chunk_chars, normalized};

pub const DIMENSION: usize = 384;
pub const ID: &str = "hashing-v1";

pub struct Hashing {
    reason: Option<String>,
}

impl Hashing {
    /// `reason`: why it stands in for the model (`None` when chosen in the config).
    pub fn new(reason: Option<String>) -> Hashing {
        Hashing { reason }
    }
}

/// FNV-1a, 64 bits: stable across builds and platforms.
fn fnv(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn add(v: &mut [f32], feature: u64, weight: f32) {
    let bucket = (feature % DIMENSION as u64) as usize;
    // The sign bit spreads collisions around zero instead of piling them up.
    let sign = if feature >> 63 == 0 { 1.0 } else { -1.0 };
    v[bucket] += sign * weight;
}

pub fn embed_one(text: &str) -> Vec<f32> {
    let mut v = vec![0.0f32; DIMENSION];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let word = word.to_lowercase();
        add(&mut v, fnv(word.bytes()), 1.0);
        let chars: Vec<char> = format!("<{word}>").chars().collect();
        for tri in chars.windows(3) {
            let s: String = tri.iter().collect();
            add(&mut v, fnv(s.bytes().chain([0xff])), 0.5);
        }
    }
    normalized(v)
}

impl Embedder for Hashing {
    fn id(&self) -> &str {
        ID
    }

    fn dimension(&self) -> usize {
        DIMENSION
    }

    fn fallback_reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    fn chunk(&self, text: &str, max: usize) -> Vec<String> {
        chunk_chars(text, 1000, max)
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| embed_one(t)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dot(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn shared_words_score_above_unrelated_text() {
        let a = embed_one("fix the timezone test in the scheduler");
        let b = embed_one("the scheduler timezone test was fixed");
        let c = embed_one("bake bread with sourdough starter");
        assert_eq!(a.len(), DIMENSION);
        assert!((dot(&a, &a) - 1.0).abs() < 1e-5);
        assert!(
            dot(&a, &b) > dot(&a, &c) + 0.3,
            "{} vs {}",
            dot(&a, &b),
            dot(&a, &c)
        );
        // Deterministic.
        assert_eq!(a, embed_one("fix the timezone test in the scheduler"));
        // Empty text is the zero vector, not NaN.
        assert!(embed_one("").iter().all(|x| *x == 0.0));
    }
}
