//! MiniLM's tokenizer (BERT WordPiece), its vocabulary kept compiled in a file beside
//! `tokenizer.json` (`tokenizer.json.vocab`) and mapped by later loads.
//!
//! Reading `tokenizer.json` costs more than the rest of a `memex search` that embeds its query
//! without the service: 700 KB of JSON and two maps of 30,522 strings built in fresh memory.
//! The first load reads it once, checks that it is a BERT WordPiece tokenizer whose ids are
//! 0..n, and writes the vocabulary as a table that needs no building: the tokens' bytes, where
//! each starts, and an open-addressing hash table of ids. Later loads map that file. The
//! normalizer and pre-tokenizer are the `tokenizers` crate's own, with the file's settings;
//! only the greedy longest-match step over the vocabulary ([`Vocab`]) is done here. A file of
//! any other shape is read by `Tokenizer::from_bytes`. The tests hold both to the same ids and
//! offsets.
//!
//! The compiled file is a cache, like the packed layers (`super::layer_file`): stamped with
//! `tokenizer.json`'s name, size and modification time and Memex's version, checked in its
//! structure and by a CRC-32, never read when any of that does not match (then it is built
//! and written again), and written through a private temporary file renamed into place.
//!
//! Layout, little-endian: a header (magic, format, stamp length, settings length, token count,
//! slot count, CRC-32 of everything after the header); the stamp; the settings (JSON); the
//! byte offset of each token in the token bytes (count + 1 of u32); the slots (u32, id + 1 or
//! 0 for empty, a power of two above twice the count); the token bytes.
//!
//! Padding, truncation, the post-processor and the decoder are left out: Memex encodes without
//! special tokens and turns padding and truncation off.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use tokenizers::decoders::DecoderWrapper;
use tokenizers::normalizers::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{AddedToken, Encoding, Model, Token, Tokenizer, TokenizerImpl};

use super::EmbedError;
use super::cache_file::{self, Cursor, Unusable};

const MAGIC: &[u8; 8] = b"MEMEXWP\0";
const FORMAT: u32 = 1;
const HEADER: usize = 32;
/// More tokens than any vocabulary has (the bound keeps every size in range).
const MAX_TOKENS: usize = 1 << 24;

/// The parts of `tokenizer.json` this loader builds from; any other field is ignored.
#[derive(serde::Deserialize)]
struct File {
    version: String,
    #[serde(default)]
    post_processor: Option<Kind>,
    #[serde(default)]
    added_tokens: Vec<Added>,
    normalizer: Normalizer,
    pre_tokenizer: Kind,
    model: ModelPart,
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
struct ModelPart {
    #[serde(rename = "type")]
    kind: String,
    unk_token: String,
    continuing_subword_prefix: String,
    max_input_chars_per_word: usize,
    #[serde(deserialize_with = "vocab")]
    vocab: Vec<(String, u32)>,
}

/// The vocabulary's entries in file order, without a map in between.
fn vocab<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<(String, u32)>, D::Error> {
    struct Entries;
    impl<'de> serde::de::Visitor<'de> for Entries {
        type Value = Vec<(String, u32)>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of tokens to ids")
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut m: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(m.size_hint().unwrap_or(0).max(1 << 15));
            while let Some(entry) = m.next_entry()? {
                out.push(entry);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Entries)
}

#[derive(serde::Deserialize, serde::Serialize)]
struct Added {
    id: u32,
    content: String,
    single_word: bool,
    lstrip: bool,
    rstrip: bool,
    normalized: bool,
    special: bool,
}

/// What the compiled file keeps of `tokenizer.json` besides the vocabulary.
#[derive(serde::Deserialize, serde::Serialize)]
struct Settings {
    clean_text: bool,
    handle_chinese_chars: bool,
    strip_accents: Option<bool>,
    lowercase: bool,
    unk_token: String,
    prefix: String,
    max_chars: usize,
    added: Vec<Added>,
}

/// The compiled file of the tokenizer file at `file`.
pub fn vocab_path(file: &Path) -> PathBuf {
    cache_file::beside(file, ".vocab")
}

/// A BERT WordPiece tokenizer over the compiled vocabulary, or, for a file of another shape,
/// the generic one.
pub enum BertTokenizer {
    Compiled(
        Box<
            TokenizerImpl<
                Vocab,
                BertNormalizer,
                BertPreTokenizer,
                PostProcessorWrapper,
                DecoderWrapper,
            >,
        >,
    ),
    Generic(Box<Tokenizer>),
}

impl BertTokenizer {
    /// `text` as tokens, without special tokens (ids and byte offsets).
    pub fn encode(&self, text: &str) -> tokenizers::Result<Encoding> {
        match self {
            BertTokenizer::Compiled(t) => t.encode(text, false),
            BertTokenizer::Generic(t) => t.encode(text, false),
        }
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        match self {
            BertTokenizer::Compiled(t) => t.token_to_id(token),
            BertTokenizer::Generic(t) => t.token_to_id(token),
        }
    }
}

/// The tokenizer in `file`: from its compiled vocabulary when one made from this very file is
/// there, else read (and, for a BERT WordPiece file, compiled for the next load).
pub fn load(file: &Path) -> Result<BertTokenizer, EmbedError> {
    let setup = |e: &dyn std::fmt::Display| EmbedError::Setup(format!("{}: {e}", file.display()));
    let mut f = std::fs::File::open(file).map_err(|e| setup(&e))?;
    let stamp = cache_file::stamp(file, &f);
    let compiled = vocab_path(file);
    if let Some(stamp) = &stamp {
        match cache_file::map(&compiled).and_then(|m| Vocab::read(Bytes::Mapped(m), stamp)) {
            Ok((vocab, settings)) => return Ok(assemble(vocab, settings)),
            Err(why) if compiled.exists() => {
                tracing::debug!("not reading {}: {why}", compiled.display());
            }
            Err(_) => {}
        }
    }
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).map_err(|e| setup(&e))?;
    let Some(built) = compile(&bytes, stamp.as_deref().unwrap_or_default()) else {
        let mut t = Tokenizer::from_bytes(&bytes).map_err(|e| setup(&e))?;
        t.with_padding(None);
        t.with_truncation(None).map_err(|e| setup(&e))?;
        return Ok(BertTokenizer::Generic(Box::new(t)));
    };
    if stamp.is_some()
        && let Err(e) = cache_file::write(&compiled, &[&built])
    {
        tracing::debug!("cannot keep the vocabulary in {}: {e}", compiled.display());
    }
    let (vocab, settings) = Vocab::read(Bytes::Owned(built), stamp.as_deref().unwrap_or_default())
        .map_err(|e| setup(&e))?;
    Ok(assemble(vocab, settings))
}

/// The tokenizer of the BERT WordPiece file `bytes` over its compiled vocabulary; `None` for a
/// file of another shape (or whose ids are not 0..n, or whose added tokens are not the
/// vocabulary's own).
pub fn from_parts(bytes: &[u8]) -> Option<BertTokenizer> {
    let built = compile(bytes, b"")?;
    let (vocab, settings) = Vocab::read(Bytes::Owned(built), b"").ok()?;
    Some(assemble(vocab, settings))
}

fn assemble(vocab: Vocab, s: Settings) -> BertTokenizer {
    let mut t = TokenizerImpl::new(vocab);
    t.with_normalizer(Some(BertNormalizer::new(
        s.clean_text,
        s.handle_chinese_chars,
        s.strip_accents,
        s.lowercase,
    )));
    t.with_pre_tokenizer(Some(BertPreTokenizer));
    let added: Vec<AddedToken> = s
        .added
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
    BertTokenizer::Compiled(Box::new(t))
}

/// The compiled file of the tokenizer file `bytes`, stamped with `stamp`.
fn compile(bytes: &[u8], stamp: &[u8]) -> Option<Vec<u8>> {
    let f: File = serde_json::from_slice(bytes).ok()?;
    let (n, m) = (&f.normalizer, &f.model);
    if (
        n.kind.as_str(),
        f.pre_tokenizer.kind.as_str(),
        m.kind.as_str(),
    ) != ("BertNormalizer", "BertPreTokenizer", "WordPiece")
    {
        return None;
    }
    // The post-processor is not run (Memex adds no special tokens), but some change offsets
    // even so: only these two leave them alone.
    let post = f.post_processor.as_ref().map(|p| p.kind.as_str());
    if f.version != "1.0" || !matches!(post, None | Some("TemplateProcessing" | "BertProcessing")) {
        return None;
    }
    // Each id of 0..n once.
    let count = m.vocab.len();
    if count == 0 || count > MAX_TOKENS {
        return None;
    }
    let mut by_id: Vec<Option<&str>> = vec![None; count];
    for (token, id) in &m.vocab {
        let slot = by_id.get_mut(*id as usize)?;
        if slot.replace(token).is_some() {
            return None;
        }
    }
    let by_id: Vec<&str> = by_id.into_iter().collect::<Option<_>>()?;
    let index: HashMap<&str, u32> = m.vocab.iter().map(|(t, id)| (t.as_str(), *id)).collect();
    // The unknown token and every added token are entries of the vocabulary, with their ids.
    if !index.contains_key(m.unk_token.as_str())
        || index.len() != count
        || f.added_tokens
            .iter()
            .any(|a| index.get(a.content.as_str()) != Some(&a.id))
    {
        return None;
    }
    let settings = serde_json::to_vec(&Settings {
        clean_text: n.clean_text,
        handle_chinese_chars: n.handle_chinese_chars,
        strip_accents: n.strip_accents,
        lowercase: n.lowercase,
        unk_token: m.unk_token.clone(),
        prefix: m.continuing_subword_prefix.clone(),
        max_chars: m.max_input_chars_per_word,
        added: f.added_tokens,
    })
    .ok()?;
    let mut offsets = Vec::with_capacity((count + 1) * 4);
    let mut text = Vec::new();
    for t in &by_id {
        offsets.extend_from_slice(&u32::try_from(text.len()).ok()?.to_le_bytes());
        text.extend_from_slice(t.as_bytes());
    }
    offsets.extend_from_slice(&u32::try_from(text.len()).ok()?.to_le_bytes());
    let slots = (2 * count).next_power_of_two();
    let mut table = vec![0u32; slots];
    for (id, t) in by_id.iter().enumerate() {
        let mut i = hash(t.as_bytes()) as usize & (slots - 1);
        while table[i] != 0 {
            i = (i + 1) & (slots - 1);
        }
        table[i] = id as u32 + 1;
    }
    let mut body =
        Vec::with_capacity(stamp.len() + settings.len() + offsets.len() + 4 * slots + text.len());
    body.extend_from_slice(stamp);
    body.extend_from_slice(&settings);
    body.extend_from_slice(&offsets);
    body.extend(table.iter().flat_map(|v| v.to_le_bytes()));
    body.extend_from_slice(&text);
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(MAGIC);
    for v in [
        FORMAT,
        u32::try_from(stamp.len()).ok()?,
        u32::try_from(settings.len()).ok()?,
        count as u32,
        slots as u32,
        crc32fast::hash(&body),
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    debug_assert_eq!(out.len(), HEADER);
    out.extend_from_slice(&body);
    Some(out)
}

/// FNV-1a: the slots' hash, fixed so that a file means the same to every build (e5's table of
/// pieces uses it too).
pub(super) fn hash(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The compiled file's bytes: read into memory (just built) or mapped.
enum Bytes {
    Owned(Vec<u8>),
    Mapped(memmap2::Mmap),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Owned(v) => v,
            Bytes::Mapped(m) => m,
        }
    }
}

/// WordPiece over a compiled vocabulary: each word split greedily into the longest entries
/// that match from its start (continuations with the prefix), or the unknown token when a
/// piece matches nothing or the word is too long.
pub struct Vocab {
    bytes: Bytes,
    count: usize,
    /// Where the offsets, the slots and the token bytes start.
    offsets: usize,
    slots: usize,
    text: usize,
    /// A power of two, above twice `count`.
    slot_count: usize,
    /// The longest entry's length in bytes: no longer piece can match.
    longest: usize,
    unk: u32,
    unk_token: String,
    prefix: String,
    max_chars: usize,
}

impl Vocab {
    /// The vocabulary and settings of a compiled file, when it is whole and made from the file
    /// `stamp` names; else why not.
    fn read(bytes: Bytes, stamp: &[u8]) -> Result<(Vocab, Settings), Unusable> {
        let bad = |what: String| Unusable::Inconsistent(what);
        let mut c = Cursor(&bytes);
        if c.take(MAGIC.len())? != MAGIC {
            return Err(Unusable::OtherKind("compiled vocabulary"));
        }
        let format = c.u32()?;
        let (stamp_len, settings_len) = (c.u32()? as usize, c.u32()? as usize);
        let (count, slots, crc) = (c.u32()? as usize, c.u32()? as usize, c.u32()?);
        if format != FORMAT {
            return Err(Unusable::OtherLayout(format.to_string()));
        }
        if c.take(stamp_len)? != stamp {
            return Err(Unusable::OtherSource("tokenizer file"));
        }
        if !(1..=MAX_TOKENS).contains(&count) || slots != (2 * count).next_power_of_two() {
            return Err(bad(format!("{count} tokens in {slots} slots")));
        }
        let settings: Settings = serde_json::from_slice(c.take(settings_len)?)?;
        let offsets = bytes.len() - c.0.len();
        c.take(4 * (count + 1))?;
        let slots_at = bytes.len() - c.0.len();
        c.take(4 * slots)?;
        let text = bytes.len() - c.0.len();
        if crc32fast::hash(&bytes[HEADER..]) != crc {
            return Err(Unusable::Checksum);
        }
        let mut v = Vocab {
            count,
            offsets,
            slots: slots_at,
            text,
            slot_count: slots,
            longest: 0,
            unk: 0,
            unk_token: settings.unk_token.clone(),
            prefix: settings.prefix.clone(),
            max_chars: settings.max_chars,
            bytes,
        };
        // Every token within the token bytes, every slot empty or an id: no lookup can read
        // out of range or probe forever (more than half the slots are empty, as `compile`
        // makes them).
        let mut at = 0;
        for i in 0..=count {
            let o = v.u32_at(v.offsets, i) as usize;
            if o < at || o > v.bytes.len() - v.text {
                return Err(bad(format!("token {i} lies outside the token bytes")));
            }
            v.longest = v.longest.max(o - at);
            at = o;
        }
        if at != v.bytes.len() - v.text {
            return Err(bad("the token bytes are longer than the tokens".into()));
        }
        let mut used = 0;
        for i in 0..slots {
            match v.u32_at(v.slots, i) as usize {
                0 => {}
                id if id <= count => used += 1,
                id => return Err(bad(format!("slot {i} holds id {}", id - 1))),
            }
        }
        if used != count {
            return Err(bad(format!("{used} slots are used for {count} tokens")));
        }
        v.unk = v
            .id(settings.unk_token.as_bytes())
            .ok_or_else(|| bad("the unknown token is not in the vocabulary".into()))?;
        if let Some(a) = settings
            .added
            .iter()
            .find(|a| v.id(a.content.as_bytes()) != Some(a.id))
        {
            return Err(bad(format!(
                "the added token {} is not the vocabulary's",
                a.content
            )));
        }
        Ok((v, settings))
    }

    fn u32_at(&self, table: usize, i: usize) -> u32 {
        let b = &self.bytes[table + 4 * i..][..4];
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The bytes of the entry `id` (< count).
    fn token(&self, id: usize) -> &[u8] {
        let (a, b) = (
            self.u32_at(self.offsets, id),
            self.u32_at(self.offsets, id + 1),
        );
        &self.bytes[self.text + a as usize..self.text + b as usize]
    }

    fn id(&self, token: &[u8]) -> Option<u32> {
        let mask = self.slot_count - 1;
        let mut i = hash(token) as usize & mask;
        loop {
            match self.u32_at(self.slots, i) {
                0 => return None,
                v if self.token(v as usize - 1) == token => return Some(v - 1),
                _ => i = (i + 1) & mask,
            }
        }
    }

    fn unknown(&self, word: &str) -> Vec<Token> {
        vec![Token::new(
            self.unk,
            self.unk_token.clone(),
            (0, word.len()),
        )]
    }
}

impl Model for Vocab {
    type Trainer = tokenizers::models::wordpiece::WordPieceTrainer;

    fn tokenize(&self, word: &str) -> tokenizers::Result<Vec<Token>> {
        if word.chars().count() > self.max_chars {
            return Ok(self.unknown(word));
        }
        let mut out = Vec::new();
        let mut piece = String::with_capacity(self.longest + self.prefix.len());
        let mut start = 0;
        while start < word.len() {
            // From the longest piece that could be an entry down to one character.
            let mut end = (start + self.longest).min(word.len());
            while !word.is_char_boundary(end) {
                end -= 1;
            }
            let id = loop {
                if end <= start {
                    return Ok(self.unknown(word));
                }
                piece.clear();
                if start > 0 {
                    piece.push_str(&self.prefix);
                }
                piece.push_str(&word[start..end]);
                if let Some(id) = self.id(piece.as_bytes()) {
                    break id;
                }
                end -= word[start..end]
                    .chars()
                    .next_back()
                    .map_or(1, char::len_utf8);
            };
            out.push(Token::new(id, piece.clone(), (start, end)));
            start = end;
        }
        Ok(out)
    }

    fn token_to_id(&self, token: &str) -> Option<u32> {
        self.id(token.as_bytes())
    }

    fn id_to_token(&self, id: u32) -> Option<String> {
        ((id as usize) < self.count)
            .then(|| String::from_utf8_lossy(self.token(id as usize)).into_owned())
    }

    fn get_vocab(&self) -> HashMap<String, u32> {
        (0..self.count as u32)
            .filter_map(|id| Some((self.id_to_token(id)?, id)))
            .collect()
    }

    fn get_vocab_size(&self) -> usize {
        self.count
    }

    fn save(&self, _folder: &Path, _prefix: Option<&str>) -> tokenizers::Result<Vec<PathBuf>> {
        Err("a compiled vocabulary is not saved as a tokenizer file".into())
    }

    fn get_trainer(&self) -> Self::Trainer {
        tokenizers::models::wordpiece::WordPieceTrainer::builder().build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small BERT WordPiece tokenizer file of MiniLM's shape; `extra` entries are added to its
    /// vocabulary with the next ids.
    fn tokenizer_json(extra: &[&str], max_chars: usize) -> Vec<u8> {
        let mut tokens: Vec<&str> = vec![
            "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "##a", "a", "b",
            "##b", "hello", "world", "##s", ",", ".", "'", "café", "cafe", "部", "署", "ab",
            "##ab", "abab",
        ];
        tokens.extend_from_slice(extra);
        let vocab: serde_json::Map<String, serde_json::Value> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| ((*t).to_owned(), serde_json::json!(i)))
            .collect();
        let special = |id: usize, content: &str| {
            serde_json::json!({"id": id, "special": true, "content": content,
                "single_word": false, "lstrip": false, "rstrip": false, "normalized": false})
        };
        serde_json::to_vec(&serde_json::json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": [special(0, "[PAD]"), special(1, "[UNK]"), special(2, "[CLS]"),
                special(3, "[SEP]"), special(4, "[MASK]")],
            "normalizer": {"type": "BertNormalizer", "clean_text": true,
                "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": null,
            "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
            "model": {"type": "WordPiece", "unk_token": "[UNK]",
                "continuing_subword_prefix": "##", "max_input_chars_per_word": max_chars,
                "vocab": vocab}
        }))
        .unwrap()
    }

    const TEXTS: &[&str] = &[
        "unaffable hello worlds",
        "Unaffable, HELLO. world's",
        "abababab abab aba ba bab",
        "Café cafe CAFÉ e\u{301}",
        "部署 部署失败 x部y",
        "[CLS] hello [SEP] [MASK]x [UNK]",
        "unknownword hello zzz",
        "aaaaaaaaaaaa aaaaaaaaaaaaa",
        "",
        "  \t\n ",
        "\u{0}\u{7f} hello\u{200d}world",
    ];

    fn ids_and_offsets(t: &BertTokenizer, text: &str) -> (Vec<u32>, Vec<(usize, usize)>) {
        let e = t.encode(text).unwrap();
        (e.get_ids().to_vec(), e.get_offsets().to_vec())
    }

    fn generic(json: &[u8]) -> Tokenizer {
        let mut t = Tokenizer::from_bytes(json).unwrap();
        t.with_padding(None);
        t.with_truncation(None).unwrap();
        t
    }

    /// The compiled tokenizer splits as the `tokenizers` crate does, and `ab` plus `##ab`
    /// pieces are taken longest first.
    fn assert_same(t: &BertTokenizer, json: &[u8]) {
        let g = generic(json);
        for text in TEXTS {
            let e = g.encode(*text, false).unwrap();
            assert_eq!(
                ids_and_offsets(t, text),
                (e.get_ids().to_vec(), e.get_offsets().to_vec()),
                "{text:?}"
            );
        }
    }

    fn a_tokenizer_file() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokenizer.json");
        std::fs::write(&file, tokenizer_json(&[], 12)).unwrap();
        (dir, file)
    }

    fn compiled(t: &BertTokenizer) -> bool {
        matches!(t, BertTokenizer::Compiled(_))
    }

    #[test]
    fn the_compiled_vocabulary_splits_words_as_the_generic_tokenizer() {
        let json = tokenizer_json(&[], 12);
        let t = from_parts(&json).unwrap();
        assert_same(&t, &json);
        // Longest match first, continuations with the prefix, the unknown token for a word
        // with a piece that matches nothing and for a word over 12 characters.
        assert_eq!(
            ids_and_offsets(&t, "ababab aaaaaaaaaaaaa zzz"),
            (vec![24, 23, 1, 1], vec![(0, 4), (4, 6), (7, 20), (21, 24)])
        );
        assert_eq!(t.token_to_id("[SEP]"), Some(3));
        // The vocabulary answers by id and as a whole as the file lists it.
        let BertTokenizer::Compiled(c) = &t else {
            unreachable!()
        };
        assert_eq!(c.get_model().id_to_token(6).as_deref(), Some("##aff"));
        assert_eq!(c.get_model().id_to_token(25), None);
        assert_eq!(c.get_model().get_vocab().len(), 25);
        assert_eq!(c.get_model().get_vocab()["café"], 18);
    }

    #[test]
    fn a_tokenizer_of_another_shape_is_read_by_the_generic_loader() {
        let mut json: serde_json::Value = serde_json::from_slice(&tokenizer_json(&[], 12)).unwrap();
        // Ids that are not 0..n (a gap): not compiled.
        json["model"]["vocab"]["abab"] = serde_json::json!(40);
        let gap = serde_json::to_vec(&json).unwrap();
        assert!(from_parts(&gap).is_none());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokenizer.json");
        std::fs::write(&file, &gap).unwrap();
        let t = load(&file).unwrap();
        assert!(!compiled(&t));
        assert_eq!(t.token_to_id("abab"), Some(40));
        assert!(!vocab_path(&file).exists());
        // An added token that is not the vocabulary's own entry, another normalizer.
        let mut json: serde_json::Value = serde_json::from_slice(&tokenizer_json(&[], 12)).unwrap();
        json["added_tokens"][1]["id"] = serde_json::json!(7);
        assert!(from_parts(&serde_json::to_vec(&json).unwrap()).is_none());
        let mut json: serde_json::Value = serde_json::from_slice(&tokenizer_json(&[], 12)).unwrap();
        json["normalizer"]["type"] = serde_json::json!("NFC");
        assert!(from_parts(&serde_json::to_vec(&json).unwrap()).is_none());
        // A post-processor that moves offsets even without special tokens, another version.
        let mut json: serde_json::Value = serde_json::from_slice(&tokenizer_json(&[], 12)).unwrap();
        json["post_processor"] = serde_json::json!({"type": "ByteLevel", "trim_offsets": true});
        assert!(from_parts(&serde_json::to_vec(&json).unwrap()).is_none());
        json["post_processor"] = serde_json::json!({"type": "BertProcessing",
            "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]});
        assert!(from_parts(&serde_json::to_vec(&json).unwrap()).is_some());
        json["version"] = serde_json::json!("2.0");
        assert!(from_parts(&serde_json::to_vec(&json).unwrap()).is_none());
        assert!(from_parts(b"{\"model\": {\"type\": \"BPE\"}}").is_none());
    }

    #[test]
    fn a_second_load_maps_the_compiled_file_and_splits_the_same() {
        let (dir, file) = a_tokenizer_file();
        let json = std::fs::read(&file).unwrap();
        let cache = vocab_path(&file);
        assert_eq!(cache, dir.path().join("tokenizer.json.vocab"));
        let first = load(&file).unwrap();
        assert!(compiled(&first));
        let meta = std::fs::metadata(&cache).unwrap();
        #[cfg(unix)]
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
            0o600
        );
        // Read, not written again.
        let written = meta.modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let second = load(&file).unwrap();
        assert_eq!(
            std::fs::metadata(&cache).unwrap().modified().unwrap(),
            written
        );
        assert_same(&first, &json);
        assert_same(&second, &json);
        // No temporary file left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[test]
    fn a_damaged_or_stale_compiled_file_is_not_read_and_is_made_again() {
        let (_dir, file) = a_tokenizer_file();
        let cache = vocab_path(&file);
        load(&file).unwrap();
        let good = std::fs::read(&cache).unwrap();
        // A byte flipped anywhere, the file cut short, or another file: built again from
        // tokenizer.json, and the file is whole again.
        let mut flipped = good.clone();
        let at = flipped.len() - 3;
        flipped[at] ^= 0x20;
        for bad in [
            flipped,
            good[..good.len() - 9].to_vec(),
            b"not a vocabulary".to_vec(),
        ] {
            std::fs::write(&cache, &bad).unwrap();
            let t = load(&file).unwrap();
            assert_same(&t, &std::fs::read(&file).unwrap());
            assert_eq!(std::fs::read(&cache).unwrap(), good);
        }
        // A new tokenizer.json (one more entry): the old file is stale, the new entry known.
        std::fs::write(&file, tokenizer_json(&["zzz"], 12)).unwrap();
        let t = load(&file).unwrap();
        assert_eq!(t.token_to_id("zzz"), Some(25));
        assert_same(&t, &std::fs::read(&file).unwrap());
        assert_ne!(std::fs::read(&cache).unwrap(), good);
    }

    #[test]
    fn a_wrong_structure_under_a_right_checksum_is_refused_not_read_out_of_range() {
        let json = tokenizer_json(&[], 12);
        let good = compile(&json, b"s").unwrap();
        let read = |b: Vec<u8>| match Vocab::read(Bytes::Owned(cache_file::with_checksum(b)), b"s")
        {
            Ok(_) => Ok(()),
            // What the structure checks found, apart from the file ending early.
            Err(Unusable::Inconsistent(why)) => Err(why),
            Err(other) => Err(format!("{other:?}")),
        };
        assert!(read(good.clone()).is_ok());
        let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let (stamp_len, settings_len) = (u32_at(&good, 12) as usize, u32_at(&good, 16) as usize);
        let (count, slots) = (u32_at(&good, 20) as usize, u32_at(&good, 24) as usize);
        let offsets = HEADER + stamp_len + settings_len;
        let slots_at = offsets + 4 * (count + 1);
        let set = |mut b: Vec<u8>, at: usize, v: u32| {
            b[at..at + 4].copy_from_slice(&v.to_le_bytes());
            b
        };
        // A token that ends before it starts, or past the token bytes.
        let err = read(set(good.clone(), offsets + 8, 0)).unwrap_err();
        assert!(err.contains("outside the token bytes"), "{err}");
        let err = read(set(good.clone(), offsets + 4 * count, 1 << 30)).unwrap_err();
        assert!(err.contains("outside the token bytes"), "{err}");
        // A slot that names no token; every slot used (a lookup could probe forever).
        let empty = (0..slots)
            .find(|i| u32_at(&good, slots_at + 4 * i) == 0)
            .unwrap();
        let err = read(set(good.clone(), slots_at + 4 * empty, count as u32 + 1)).unwrap_err();
        assert!(err.contains("holds id"), "{err}");
        let mut full = good.clone();
        for i in 0..slots {
            full = set(full, slots_at + 4 * i, 1);
        }
        let err = read(full).unwrap_err();
        assert!(err.contains("slots are used"), "{err}");
        // Another number of slots than `compile` makes (fewer than the tokens, or twice as
        // many), more tokens than the file holds.
        assert!(read(set(good.clone(), 24, 16)).is_err());
        assert!(read(set(good.clone(), 24, 2 * slots as u32)).is_err());
        // An added token whose id is not its entry's ("[MASK]" is 4, not 5).
        let at = good.windows(6).position(|w| w == b"\"id\":4").unwrap();
        let mut moved = good.clone();
        moved[at + 5] = b'5';
        let err = read(moved).unwrap_err();
        assert!(err.contains("added token [MASK]"), "{err}");
        assert!(read(set(good.clone(), 20, 1 << 23)).is_err());
        // Another stamp: not read.
        assert!(matches!(
            Vocab::read(Bytes::Owned(good), b"t"),
            Err(Unusable::OtherSource(_))
        ));
    }
}
