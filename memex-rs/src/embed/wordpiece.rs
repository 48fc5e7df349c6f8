//! Loads a BERT WordPiece `tokenizer.json` (MiniLM's) from its parts.
//!
//! `Tokenizer::from_file` reads the file through the `tokenizers` crate's generic model
//! deserializer, which buffers the 30,522-entry vocabulary as JSON values before it builds the
//! model: about a third of a `memex search` that embeds its query without the service. Here
//! the vocabulary is read straight into its map and the same pieces are put together: the BERT
//! normalizer and pre-tokenizer with the file's settings, the WordPiece model and the added
//! tokens. A file of any other shape goes through `Tokenizer::from_file`; the tests hold both
//! to the same tokens and offsets.
//!
//! Padding, truncation, the post-processor and the decoder are left out: Memex encodes without
//! special tokens and turns padding and truncation off.

use std::path::Path;

use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::{AddedToken, Tokenizer};

use super::EmbedError;

/// The parts of the file this loader builds from; any other field is ignored.
#[derive(serde::Deserialize)]
struct File {
    #[serde(default)]
    added_tokens: Vec<Added>,
    normalizer: Normalizer,
    pre_tokenizer: Kind,
    model: Model,
}

#[derive(serde::Deserialize)]
struct Kind {
    #[serde(rename = "type")]
    kind: String,
}

#[derive(serde::Deserialize)]
struct Normalizer {
    #[serde(rename = "type")]
    kind: String,
    clean_text: bool,
    handle_chinese_chars: bool,
    strip_accents: Option<bool>,
    lowercase: bool,
}

#[derive(serde::Deserialize)]
struct Model {
    #[serde(rename = "type")]
    kind: String,
    unk_token: String,
    continuing_subword_prefix: String,
    max_input_chars_per_word: usize,
    #[serde(deserialize_with = "vocab")]
    vocab: ahash::AHashMap<String, u32>,
}

/// The vocabulary, its map sized once: serde_json gives no length for a map, so a plain map
/// would grow by rehashing a dozen times on the way to MiniLM's 30,522 entries.
fn vocab<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ahash::AHashMap<String, u32>, D::Error> {
    struct Entries;
    impl<'de> serde::de::Visitor<'de> for Entries {
        type Value = ahash::AHashMap<String, u32>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of tokens to ids")
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut m: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = ahash::AHashMap::with_capacity(m.size_hint().unwrap_or(0).max(1 << 15));
            while let Some((token, id)) = m.next_entry()? {
                out.insert(token, id);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Entries)
}

#[derive(serde::Deserialize)]
struct Added {
    id: u32,
    content: String,
    single_word: bool,
    lstrip: bool,
    rstrip: bool,
    normalized: bool,
    special: bool,
}

/// The tokenizer in `file` (padding and truncation off).
pub fn load(file: &Path) -> Result<Tokenizer, EmbedError> {
    let setup = |e: &dyn std::fmt::Display| EmbedError::Setup(format!("{}: {e}", file.display()));
    let bytes = std::fs::read(file).map_err(|e| setup(&e))?;
    let mut t = match from_parts(&bytes) {
        Some(t) => t,
        None => Tokenizer::from_bytes(&bytes).map_err(|e| setup(&e))?,
    };
    t.with_padding(None);
    t.with_truncation(None).map_err(|e| setup(&e))?;
    Ok(t)
}

/// The tokenizer built from its parts, when the file is a BERT WordPiece one whose added tokens
/// are the model's own entries.
pub fn from_parts(bytes: &[u8]) -> Option<Tokenizer> {
    let f: File = serde_json::from_slice(bytes).ok()?;
    let n = &f.normalizer;
    if (
        n.kind.as_str(),
        f.pre_tokenizer.kind.as_str(),
        f.model.kind.as_str(),
    ) != ("BertNormalizer", "BertPreTokenizer", "WordPiece")
    {
        return None;
    }
    if f.added_tokens
        .iter()
        .any(|a| f.model.vocab.get(&a.content) != Some(&a.id))
    {
        return None;
    }
    let model = WordPiece::builder()
        .vocab(f.model.vocab)
        .unk_token(f.model.unk_token)
        .continuing_subword_prefix(f.model.continuing_subword_prefix)
        .max_input_chars_per_word(f.model.max_input_chars_per_word)
        .build()
        .ok()?;
    let mut t = Tokenizer::new(model);
    t.with_normalizer(Some(BertNormalizer::new(
        n.clean_text,
        n.handle_chinese_chars,
        n.strip_accents,
        n.lowercase,
    )));
    t.with_pre_tokenizer(Some(BertPreTokenizer));
    let added: Vec<AddedToken> = f
        .added_tokens
        .into_iter()
        .map(|a| {
            AddedToken::from(a.content, a.special)
                .single_word(a.single_word)
                .lstrip(a.lstrip)
                .rstrip(a.rstrip)
                .normalized(a.normalized)
        })
        .collect();
    t.add_tokens(&added);
    Some(t)
}
