//! Linear layers in 8-bit integers, for the local embedding models.
//!
//! A layer's weights are quantized once, row by row (one row per output, symmetric: its scale
//! is max|w| / 127). Its input is quantized row by row as it arrives, onto unsigned bytes from
//! the row's minimum to its maximum (0 included), so that all 256 steps are used: the GELU's
//! outputs, for one, are barely negative. AVX-512 VNNI (`vpdpbusd`) multiplies four u8 × i8
//! pairs per 32-bit lane and adds them to an i32 in one instruction: four times the products
//! of an f32 FMA on the same register. The byte that stands for 0 (the row's zero point z) is
//! taken back with each output's weight sum: Σ (q − z)·w = Σ q·w − z·Σ w. Sums stay exact: a
//! 32-bit lane holds 255 · 127 per input for up to [`MAX_INPUTS`] inputs.
//!
//! Where the CPU has AMX (Intel's tile unit, Sapphire Rapids on) and Linux lets the process
//! use it, the same sums come from `tdpbusd`: one instruction multiplies a 16 × 64 tile of input
//! bytes by a 64 × 16 tile of weights, 16,384 products, about eight times the rate of
//! `vpdpbusd` here. Both kernels compute the same exact i32 sums and share one epilogue, so
//! they give the same floats.
//!
//! Only x86-64 CPUs with AVX-512 VNNI take this path ([`available`]); elsewhere the layers stay
//! in f32 (`super::encoder`). `Packed::matmul_portable` (tests) does the same integer arithmetic in
//! plain Rust; the tests hold both fast kernels to it.

/// Outputs per panel: two registers of 16 lanes.
const NR: usize = 32;
/// Input rows per tile: 2 × 8 accumulators, of the 32 vector registers.
const MR: usize = 8;
/// Inputs per AMX tile row (16 groups of four); a layer's inputs are padded to whole chunks.
const K_CHUNK: usize = 64;
/// Inputs a layer may have: the i32 sums hold 255 × 127 per input for this many (and more).
pub(crate) const MAX_INPUTS: usize = 65_536;

/// Whether this CPU has the instructions of the fast path (checked once).
pub(crate) fn available() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vnni")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// The kernels that compute the integer sums.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Kernel {
    /// AMX tiles (with AVX-512 for quantizing and the epilogue).
    Amx,
    /// AVX-512 VNNI.
    Vnni,
}

impl Kernel {
    /// Input rows the kernel takes at a time (the quantized rows are padded to a multiple).
    fn rows(self) -> usize {
        match self {
            Kernel::Amx => amx::ROWS,
            Kernel::Vnni => MR,
        }
    }
}

/// Rows per block of the AMX kernel (tasks of whole blocks waste nothing).
pub(crate) const AMX_ROWS: usize = amx::ROWS;

/// Rows from which AMX is used (below, VNNI is faster: AMX's blocks are 32 rows).
const AMX_FROM_ROWS: usize = 16;

/// The fastest kernel this CPU and system allow, if any (decided once).
pub(crate) fn kernel() -> Option<Kernel> {
    if !available() {
        None
    } else if amx::available() {
        Some(Kernel::Amx)
    } else {
        Some(Kernel::Vnni)
    }
}

/// A linear layer `y = x·wᵀ + b` with `n` outputs and `k` inputs, quantized and laid out for
/// the kernel.
pub(crate) struct Packed {
    n: usize,
    k: usize,
    /// `k` rounded up to whole chunks of [`K_CHUNK`] inputs (the padding weighs 0).
    kp: usize,
    /// Panels of `NR` outputs; in a panel, for each group of four inputs, `NR` × 4 bytes.
    data: Bytes,
    /// Per output, padded to whole panels: the weights' scale, their sum, the bias.
    scale: Vec<f32>,
    sums: Vec<i32>,
    bias: Vec<f32>,
}

/// A layer's packed weight bytes: laid out in memory, or mapped from a file of packed layers
/// (`super::layer_file`), which is never written in place.
pub(crate) enum Bytes {
    Owned(Vec<i8>),
    Mapped {
        map: std::sync::Arc<memmap2::Mmap>,
        range: std::ops::Range<usize>,
    },
}

impl std::ops::Deref for Bytes {
    type Target = [i8];

    fn deref(&self) -> &[i8] {
        match self {
            Bytes::Owned(v) => v,
            Bytes::Mapped { map, range } => {
                let b = &map[range.clone()];
                // SAFETY: i8 and u8 have the same size and alignment, and every bit pattern is
                // an i8; the slice borrows the map, which `self` keeps alive.
                unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<i8>(), b.len()) }
            }
        }
    }
}

/// What a packed layer is made of (see [`Packed::from_parts`]).
pub(crate) struct Parts<'a> {
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) data: &'a [i8],
    pub(crate) scale: &'a [f32],
    pub(crate) sums: &'a [i32],
    pub(crate) bias: &'a [f32],
}

/// Changes whenever the packed layout or the weights' quantization changes, so that files of
/// packed layers written by another version are not read.
pub(crate) const PACKING: u32 = 1 << 24 | (NR as u32) << 12 | K_CHUNK as u32;

/// `qs` = the weights `ws` times `inv`, rounded (ties to even) onto -127..=127 (NaN to 0).
fn quantize_weights(ws: &[f32], inv: f32, qs: &mut [i8]) {
    #[cfg(target_arch = "x86_64")]
    if available() {
        // SAFETY: the CPU has AVX-512 F and BW (checked by `available`).
        return unsafe { quantize_weights_wide(ws, inv, qs) };
    }
    quantize_weights_any(ws, inv, qs)
}

/// The same loop compiled for AVX-512, where the rounding and the saturating conversion are
/// vector instructions (on baseline x86-64 each value is a library call and a scalar
/// conversion: most of the time a search without the service spent loading the model).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
fn quantize_weights_wide(ws: &[f32], inv: f32, qs: &mut [i8]) {
    quantize_weights_any(ws, inv, qs)
}

#[inline(always)]
fn quantize_weights_any(ws: &[f32], inv: f32, qs: &mut [i8]) {
    for (q, &v) in qs.iter_mut().zip(ws) {
        *q = (v * inv).round_ties_even().clamp(-127.0, 127.0) as i8;
    }
}

/// The scale that maps `xs` onto -127..=127, and its inverse (both 0 for a row of zeros).
fn scale_of(xs: &[f32]) -> (f32, f32) {
    let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
    if amax > 0.0 && amax.is_finite() {
        (amax / 127.0, 127.0 / amax)
    } else {
        (0.0, 0.0)
    }
}

impl Packed {
    /// `w`: `n` rows of `k` (an output's weights per row, as the checkpoints store them).
    pub(crate) fn new(w: &[f32], bias: &[f32], n: usize, k: usize) -> Packed {
        assert!(n > 0 && (1..=MAX_INPUTS).contains(&k), "a {n}×{k} layer");
        assert_eq!(w.len(), n * k, "weights of a {n}×{k} layer");
        assert_eq!(bias.len(), n, "bias of a layer with {n} outputs");
        let kp = k.div_ceil(K_CHUNK) * K_CHUNK;
        let np = n.div_ceil(NR) * NR;
        let panel = kp * NR;
        let mut data = vec![0i8; np * kp];
        let (mut scale, mut sums) = (vec![0f32; np], vec![0i32; np]);
        let mut padded_bias = bias.to_vec();
        padded_bias.resize(np, 0.0);
        // Quantizing was most of what loading a model cost (a search without the service
        // loads it): each row is rounded in one vectorised pass, then laid out.
        let mut qs = vec![0i8; k];
        for (row, ws) in w.chunks_exact(k).enumerate() {
            let (s, inv) = scale_of(ws);
            scale[row] = s;
            quantize_weights(ws, inv, &mut qs);
            sums[row] = qs.iter().map(|&q| i32::from(q)).sum();
            let base = row / NR * panel + row % NR * 4;
            for (g, quad) in qs.chunks(4).enumerate() {
                data[base + g * NR * 4..][..quad.len()].copy_from_slice(quad);
            }
        }
        Packed {
            n,
            k,
            kp,
            data: Bytes::Owned(data),
            scale,
            sums,
            bias: padded_bias,
        }
    }

    /// The bytes per layer of [`Parts::data`] and the values per layer of its other fields, for
    /// a layer of `n` outputs and `k` inputs.
    pub(crate) fn sizes(n: usize, k: usize) -> (usize, usize) {
        let np = n.div_ceil(NR) * NR;
        (np * k.div_ceil(K_CHUNK) * K_CHUNK, np)
    }

    pub(crate) fn parts(&self) -> Parts<'_> {
        Parts {
            n: self.n,
            k: self.k,
            data: &self.data,
            scale: &self.scale,
            sums: &self.sums,
            bias: &self.bias,
        }
    }

    /// A layer of `n` outputs and `k` inputs from what [`Packed::parts`] gave of another;
    /// `None` when a size does not fit that shape.
    pub(crate) fn from_parts(
        (n, k): (usize, usize),
        data: Bytes,
        scale: Vec<f32>,
        sums: Vec<i32>,
        bias: Vec<f32>,
    ) -> Option<Packed> {
        let (bytes, padded) = Packed::sizes(n, k);
        let fits = n > 0
            && (1..=MAX_INPUTS).contains(&k)
            && data.len() == bytes
            && [scale.len(), sums.len(), bias.len()] == [padded; 3];
        fits.then(|| Packed {
            n,
            k,
            kp: k.div_ceil(K_CHUNK) * K_CHUNK,
            data,
            scale,
            sums,
            bias,
        })
    }

    pub(crate) fn outputs(&self) -> usize {
        self.n
    }

    pub(crate) fn inputs(&self) -> usize {
        self.k
    }

    /// `x`: rows of `k` inputs; `out`: as many rows of `n` outputs. Needs [`available`].
    pub(crate) fn matmul(&self, x: &[f32], out: &mut [f32]) {
        let mut kernel = kernel().expect("the int8 layers need AVX-512 VNNI");
        // Fewer rows than a tile (a query's tokens) would mostly multiply padding.
        if x.len() < AMX_FROM_ROWS * self.k {
            kernel = Kernel::Vnni;
        }
        self.matmul_with(kernel, x, out)
    }

    /// [`Packed::matmul`] with a given kernel, which must be available (see [`kernel`]).
    fn matmul_with(&self, kernel: Kernel, x: &[f32], out: &mut [f32]) {
        assert!(available(), "the int8 layers need AVX-512 VNNI");
        let (q, rows) = self.quantize_with(x, out, quantize_row, kernel.rows());
        #[cfg(target_arch = "x86_64")]
        match kernel {
            // SAFETY: `available()` checked that the CPU has AVX-512 F, BW and VNNI;
            // `quantize_with` sized `q` to whole tiles (`kernel.rows()`) of `kp` bytes per row
            // and checked that `out` holds the rows.
            Kernel::Vnni => unsafe { vnni::matmul(self, &q, &rows, out) },
            Kernel::Amx => {
                assert!(amx::available(), "AMX is not available");
                // SAFETY: AMX is usable (checked just above) and AVX-512 F and BW are there
                // (`available`); `q` holds whole blocks of `amx::ROWS` rows of `kp` bytes, a
                // multiple of 64, and `out` was checked to hold the rows.
                unsafe { amx::matmul(self, &q, &rows, out) }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (q, rows);
    }

    /// The same arithmetic in plain Rust (the scalar quantizer too): what the fast path must
    /// produce.
    #[cfg(test)]
    pub(crate) fn matmul_portable(&self, x: &[f32], out: &mut [f32]) {
        let (q, rows) = self.quantize_with(x, out, quantize_row_any, MR);
        let panel = self.kp * NR;
        for (r, out) in out.chunks_exact_mut(self.n).enumerate() {
            let row = &q[r * self.kp..][..self.kp];
            for (c, y) in out.iter_mut().enumerate() {
                let base = c / NR * panel + c % NR * 4;
                let mut acc = 0i32;
                for (i, &xq) in row.iter().enumerate() {
                    acc += i32::from(xq) * i32::from(self.data[base + i / 4 * NR * 4 + i % 4]);
                }
                let offset = rows[r].zero * self.sums[c];
                *y = epilogue(acc, offset, rows[r].scale, self.scale[c], self.bias[c]);
            }
        }
    }

    /// The rows of `x` as bytes, padded to whole tiles of `tile` rows (of zeros), with each
    /// row's step.
    fn quantize_with(
        &self,
        x: &[f32],
        out: &[f32],
        quantize_row: fn(&[f32], &mut [u8]) -> Step,
        tile: usize,
    ) -> (Vec<u8>, Vec<Step>) {
        assert_eq!(x.len() % self.k, 0, "rows of {} inputs", self.k);
        let m = x.len() / self.k;
        assert_eq!(out.len(), m * self.n, "{m} rows of {} outputs", self.n);
        let rows = m.div_ceil(tile) * tile;
        let mut q = vec![0u8; rows * self.kp];
        let mut steps = vec![Step::NONE; rows];
        for ((xs, qs), s) in x
            .chunks_exact(self.k)
            .zip(q.chunks_exact_mut(self.kp))
            .zip(&mut steps)
        {
            *s = quantize_row(xs, qs);
        }
        (q, steps)
    }
}

/// One output from its integer sum, as `vnni::store` computes it.
#[cfg(test)]
fn epilogue(acc: i32, offset: i32, sx: f32, sw: f32, bias: f32) -> f32 {
    (acc - offset) as f32 * (sx * sw) + bias
}

/// How a row of inputs was quantized: x ≈ scale × (q − zero).
#[derive(Clone, Copy)]
struct Step {
    scale: f32,
    zero: i32,
}

impl Step {
    const NONE: Step = Step {
        scale: 0.0,
        zero: 0,
    };
}

/// Quantizes one row into bytes (the padding after it stays at the zero point's value).
fn quantize_row(xs: &[f32], qs: &mut [u8]) -> Step {
    #[cfg(target_arch = "x86_64")]
    if available() {
        // SAFETY: the CPU has AVX-512 F and BW (checked by `available`).
        return unsafe { vnni::quantize_row(xs, qs) };
    }
    quantize_row_any(xs, qs)
}

fn quantize_row_any(xs: &[f32], qs: &mut [u8]) -> Step {
    let (mut lo, mut hi) = (0f32, 0f32);
    for &v in xs {
        lo = if v < lo { v } else { lo };
        hi = if v > hi { v } else { hi };
    }
    let Some((step, inv, zero)) = step_of(lo, hi) else {
        qs.fill(0);
        return Step::NONE;
    };
    for (q, &v) in qs.iter_mut().zip(xs) {
        *q = (v * inv + zero).round_ties_even().clamp(0.0, 255.0) as u8;
    }
    // Padding inputs (past the row) stand for 0.
    qs[xs.len()..].fill(step.zero as u8);
    step
}

/// The step of a row from its minimum and maximum (both include 0), the inverse scale and the
/// zero point as a float; `None` for a row of zeros (or of non-finite values).
fn step_of(lo: f32, hi: f32) -> Option<(Step, f32, f32)> {
    let range = hi - lo;
    if !(range > 0.0 && range.is_finite()) {
        return None;
    }
    let (scale, inv) = (range / 255.0, 255.0 / range);
    let zero = (-lo * inv).round_ties_even().clamp(0.0, 255.0);
    let step = Step {
        scale,
        zero: zero as i32,
    };
    Some((step, inv, zero))
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::*;

    use super::{MR, NR, Packed, Step};

    /// What `quantize_row_any` computes, 16 lanes at a time (the same operations in the same
    /// order, so the same bytes).
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn quantize_row(xs: &[f32], qs: &mut [u8]) -> Step {
        let (chunks, rest) = xs.as_chunks::<16>();
        let tail: __mmask16 = (1u32 << rest.len()).wrapping_sub(1) as __mmask16;
        // SAFETY: a chunk is 16 floats; the masked load reads only the `rest.len()` first.
        let load = |c: &[f32; 16]| unsafe { _mm512_loadu_ps(c.as_ptr()) };
        // SAFETY: reads only `rest.len()` floats (the mask); the others are 0.
        let last = unsafe { _mm512_maskz_loadu_ps(tail, rest.as_ptr()) };
        // min(v, acc) keeps acc when v is NaN, as the scalar comparisons do.
        let (mut lo, mut hi) = (
            _mm512_min_ps(last, _mm512_setzero_ps()),
            _mm512_max_ps(last, _mm512_setzero_ps()),
        );
        for c in chunks {
            let v = load(c);
            lo = _mm512_min_ps(v, lo);
            hi = _mm512_max_ps(v, hi);
        }
        let Some((step, inv, zero)) =
            super::step_of(_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi))
        else {
            qs.fill(0);
            return Step::NONE;
        };
        let (vinv, vzero) = (_mm512_set1_ps(inv), _mm512_set1_ps(zero));
        let (top, bottom) = (_mm512_set1_epi32(255), _mm512_setzero_si512());
        // Nearest, ties to even: the conversion's default rounding; NaN converts to a
        // negative number and lands on 0, as in the scalar code.
        let bytes = |v: __m512| {
            let q = _mm512_cvtps_epi32(_mm512_add_ps(_mm512_mul_ps(v, vinv), vzero));
            _mm512_cvtepi32_epi8(_mm512_min_epi32(_mm512_max_epi32(q, bottom), top))
        };
        let (out, out_rest) = qs.split_at_mut(chunks.len() * 16);
        for (o, c) in out.chunks_exact_mut(16).zip(chunks) {
            // SAFETY: `o` is 16 bytes.
            unsafe { _mm_storeu_si128(o.as_mut_ptr().cast(), bytes(load(c))) };
        }
        let mut last_bytes = [0u8; 16];
        // SAFETY: a 16-byte array.
        unsafe { _mm_storeu_si128(last_bytes.as_mut_ptr().cast(), bytes(last)) };
        out_rest[..rest.len()].copy_from_slice(&last_bytes[..rest.len()]);
        // Padding inputs (past the row) stand for 0.
        out_rest[rest.len()..].fill(step.zero as u8);
        step
    }

    /// `out` = the layer applied to the quantized rows `q` (whole tiles of `kp` bytes each;
    /// rows past `out`'s are padding and are not written).
    ///
    /// # Safety
    /// The CPU must have AVX-512 F, BW and VNNI; `q` must hold a multiple of `MR` rows of
    /// `p.kp` bytes, at least as many as `out` has rows of `p.n`, and `steps` one per row of `q`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn matmul(p: &Packed, q: &[u8], steps: &[Step], out: &mut [f32]) {
        let m = out.len() / p.n;
        let rows = q.len() / p.kp;
        assert!(rows.is_multiple_of(MR) && rows >= m && steps.len() == rows);
        let groups = p.kp / 4;
        let panel = p.kp * NR;
        for (pi, cols) in (0..p.n).step_by(NR).enumerate() {
            let b = &p.data[pi * panel..][..panel];
            for r0 in (0..m).step_by(MR) {
                let a = &q[r0 * p.kp..][..MR * p.kp];
                // SAFETY: `a` holds MR rows of `kp` = 4 × groups bytes and `b` a panel of
                // groups × NR × 4 bytes: every read below is inside them.
                let acc = unsafe { tile(a.as_ptr(), p.kp, b.as_ptr(), groups) };
                for (r, acc) in acc.iter().enumerate().take(m - r0) {
                    let row = &mut out[(r0 + r) * p.n..][..p.n];
                    for (half, &acc) in acc.iter().enumerate() {
                        let c = cols + half * 16;
                        if c >= p.n {
                            break;
                        }
                        // SAFETY: the padded scale, offset and bias hold whole panels, so
                        // c + 16 is inside them; the store writes only the lanes below p.n.
                        unsafe { store(p, acc, c, steps[r0 + r], row) };
                    }
                }
            }
        }
    }

    /// The integer sums of MR rows by one panel of NR outputs.
    ///
    /// # Safety
    /// `a` points at MR rows of `lda` ≥ 4 × `groups` bytes; `b` at `groups` × NR × 4 bytes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tile(a: *const u8, lda: usize, b: *const i8, groups: usize) -> [[__m512i; 2]; MR] {
        let mut c = [[_mm512_setzero_si512(); 2]; MR];
        for g in 0..groups {
            // SAFETY: inside the panel (g < groups): 128 bytes at g × 128.
            let (b0, b1) = unsafe {
                (
                    _mm512_loadu_si512(b.add(g * NR * 4).cast()),
                    _mm512_loadu_si512(b.add(g * NR * 4 + 64).cast()),
                )
            };
            for (r, c) in c.iter_mut().enumerate() {
                // SAFETY: row r < MR, bytes 4g..4g+4 < lda.
                let x = unsafe { a.add(r * lda + g * 4).cast::<i32>().read_unaligned() };
                let x = _mm512_set1_epi32(x);
                c[0] = _mm512_dpbusd_epi32(c[0], x, b0);
                c[1] = _mm512_dpbusd_epi32(c[1], x, b1);
            }
        }
        c
    }

    /// Writes 16 outputs from `c` on: (sum − z × weight sum) × scale_x × scale_w + bias.
    ///
    /// # Safety
    /// `c + 16` must be within the padded scale, sums and bias of `p`; `c < row.len()`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn store(p: &Packed, acc: __m512i, c: usize, x: Step, row: &mut [f32]) {
        debug_assert!(c + 16 <= p.scale.len() && c < row.len());
        // SAFETY: c + 16 ≤ the padded lengths (the caller's promise).
        let (sums, scale, bias) = unsafe {
            (
                _mm512_loadu_si512(p.sums.as_ptr().add(c).cast()),
                _mm512_loadu_ps(p.scale.as_ptr().add(c)),
                _mm512_loadu_ps(p.bias.as_ptr().add(c)),
            )
        };
        let offset = _mm512_mullo_epi32(_mm512_set1_epi32(x.zero), sums);
        let exact = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc, offset));
        let step = _mm512_mul_ps(_mm512_set1_ps(x.scale), scale);
        let y = _mm512_add_ps(_mm512_mul_ps(exact, step), bias);
        let lanes = (row.len() - c).min(16);
        let mask: __mmask16 = if lanes == 16 { !0 } else { (1 << lanes) - 1 };
        // SAFETY: only the first `lanes` floats from `c` are written, all inside `row`.
        unsafe { _mm512_mask_storeu_ps(row.as_mut_ptr().add(c), mask, y) };
    }
}

#[cfg(target_arch = "x86_64")]
mod amx {
    use std::arch::asm;
    use std::arch::x86_64::*;

    use super::{K_CHUNK, NR, Packed, Step};

    /// Input rows per block: two tiles of 16.
    pub(super) const ROWS: usize = 32;

    /// What the kernel reads: the tile configuration (palette 1, tiles 0–7 all 16 rows of 64
    /// bytes: C 16 × 16 i32, A 16 rows × 64 input bytes, B 16 groups of four inputs × 16
    /// outputs), then the first input row, the blocks of 32 rows, the panels of 32 outputs
    /// (counted down by the kernel) and the chunks of 64 inputs.
    #[repr(C, align(64))]
    struct Args {
        config: [u8; 64],
        a: *const u8,
        blocks: usize,
        panels: usize,
        chunks: usize,
    }

    // The kernel's strides (128-byte panel rows and sums rows, 2048 bytes per chunk of a
    // panel, 4096 per block of sums) assume panels of 32 outputs.
    const _: () = assert!(NR == 32 && ROWS == 32 && K_CHUNK == 64);

    // The kernel reads the fields at these offsets.
    const _: () = assert!(
        std::mem::offset_of!(Args, a) == 64
            && std::mem::offset_of!(Args, blocks) == 72
            && std::mem::offset_of!(Args, panels) == 80
            && std::mem::offset_of!(Args, chunks) == 88
    );

    const CONFIG: [u8; 64] = {
        let mut c = [0u8; 64];
        c[0] = 1;
        let mut t = 0;
        while t < 8 {
            c[16 + 2 * t] = 64;
            c[48 + t] = 16;
            t += 1;
        }
        c
    };

    /// Whether the CPU has AMX tiles with int8 products and the kernel lets this process use
    /// them (Linux asks each process to request the tiles' 8 KiB of state; checked once).
    /// `MEMEX_NO_AMX` (any value) turns AMX off, to compare the two kernels.
    pub(super) fn available() -> bool {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| {
            if !cfg!(target_os = "linux") || std::env::var_os("MEMEX_NO_AMX").is_some() {
                return false;
            }
            // Leaf 7, sub-leaf 0: EDX bit 24 is AMX-TILE, bit 25 AMX-INT8.
            let leaf = __cpuid_count(7, 0);
            if leaf.edx & (3 << 24) != 3 << 24 {
                return false;
            }
            request_tiles()
        })
    }

    #[cfg(target_os = "linux")]
    fn request_tiles() -> bool {
        /// `arch_prctl` codes from the kernel's `asm/prctl.h` and `asm/fpu/types.h`.
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: arch_prctl with these arguments only asks the kernel for permission; it
        // touches no memory of ours.
        unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            ) == 0
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn request_tiles() -> bool {
        false
    }

    /// `out` = the layer applied to the quantized rows `q`.
    ///
    /// # Safety
    /// [`available`] must be true and the CPU must have AVX-512 F and BW; `q` must hold a
    /// multiple of [`ROWS`] rows of `p.kp` bytes, at least as many as `out` has rows of `p.n`,
    /// and `steps` one per row of `q`.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn matmul(p: &Packed, q: &[u8], steps: &[Step], out: &mut [f32]) {
        let m = out.len() / p.n;
        let rows = q.len() / p.kp;
        assert!(rows.is_multiple_of(ROWS) && rows >= m && steps.len() == rows);
        assert!(p.kp.is_multiple_of(K_CHUNK) && p.kp > 0);
        if m == 0 {
            return;
        }
        let blocks = m.div_ceil(ROWS);
        let panels = p.n.div_ceil(NR);
        assert!(p.data.len() >= panels * p.kp * NR);
        // Per panel, per block of rows, 32 rows of 32 sums.
        let per_panel = blocks * ROWS * NR;
        let mut sums = vec![0i32; panels * per_panel];
        let mut args = Args {
            config: CONFIG,
            a: q.as_ptr(),
            blocks,
            panels,
            chunks: p.kp / K_CHUNK,
        };
        // SAFETY: AMX is usable (the caller's promise). `q` holds `blocks` × ROWS rows of `kp`
        // bytes, `p.data` the `panels` panels of kp / 4 groups of NR × 4 bytes (asserted), and
        // `sums` `panels` × `blocks` × ROWS rows of NR i32: every tile load and store is
        // inside them.
        unsafe { all_sums(&mut args, p.kp, p.data.as_ptr(), sums.as_mut_ptr()) };
        for (pi, sums) in sums.chunks_exact(per_panel).enumerate() {
            let cols = pi * NR;
            for (r, acc) in sums.chunks_exact(NR).take(m).enumerate() {
                let row = &mut out[r * p.n..][..p.n];
                for (half, acc) in acc.chunks_exact(16).enumerate() {
                    let c = cols + half * 16;
                    if c >= p.n {
                        break;
                    }
                    // SAFETY: `acc` is 16 i32.
                    let acc = unsafe { _mm512_loadu_si512(acc.as_ptr().cast()) };
                    // SAFETY: AVX-512 F and BW are there; the padded scale, sums and bias hold
                    // whole panels, so c + 16 is inside them, and c < p.n = row.len().
                    unsafe { super::vnni::store(p, acc, c, steps[r], row) };
                }
            }
        }
    }

    /// The integer sums of every block of 32 input rows by every panel of 32 outputs, in one
    /// run of the tile unit (configured on entry, released on exit). For each panel, for each
    /// block, over the chunks of 64 inputs: tiles 4–5 take the block's two halves of 16 rows
    /// (rows `lda` bytes apart), tiles 6–7 the panel's two halves of 16 outputs (groups of
    /// four inputs 128 bytes apart), and tiles 0–3 add up the four 16 × 16 products, which are
    /// then written to `c` as 32 rows of 32 i32. Blocks follow each other in `c`, then panels.
    ///
    /// # Safety
    /// AMX must be usable; `args.a` must hold `args.blocks` × 32 rows of `lda` = 64 ×
    /// `args.chunks` bytes, `b` `args.panels` × `lda` × 32 bytes, `c` `args.panels` ×
    /// `args.blocks` × 32 × 32 i32; the counts at least 1.
    #[inline]
    unsafe fn all_sums(args: &mut Args, lda: usize, b: *const i8, c: *mut i32) {
        assert!(args.blocks > 0 && args.panels > 0 && lda == args.chunks * K_CHUNK);
        // SAFETY: the caller's promises bound every address formed below: A tiles at
        // a + 32·lda·block + 64·chunk (16 rows each, the second 16 rows down), B tiles at
        // b + 32·lda·panel + 2048·chunk (+ 64 for the second half; 16 rows 128 bytes apart),
        // C tiles at c + 4096·(panel·blocks + block) (16 rows of 128 bytes; + 64 and + 2048
        // for the other quarters). `args` is read and its panel count written.
        unsafe {
            asm!(
                "ldtilecfg [{args}]",
                "4:",
                "mov {a}, [{args} + 64]",
                "mov {blk}, [{args} + 72]",
                "2:",
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                "mov {ap}, {a}",
                "mov {bp}, {b}",
                "mov {k}, [{args} + 88]",
                "3:",
                "tileloadd tmm4, [{ap} + {lda}*1]",
                "mov {t}, {lda}",
                "shl {t}, 4",
                "add {t}, {ap}",
                "tileloadd tmm5, [{t} + {lda}*1]",
                "tileloadd tmm6, [{bp} + {ldb}*1]",
                "lea {t}, [{bp} + 64]",
                "tileloadd tmm7, [{t} + {ldb}*1]",
                "tdpbusd tmm0, tmm4, tmm6",
                "tdpbusd tmm1, tmm4, tmm7",
                "tdpbusd tmm2, tmm5, tmm6",
                "tdpbusd tmm3, tmm5, tmm7",
                "add {ap}, 64",
                "add {bp}, 2048",
                "dec {k}",
                "jnz 3b",
                "tilestored [{c} + {ldb}*1], tmm0",
                "lea {t}, [{c} + 64]",
                "tilestored [{t} + {ldb}*1], tmm1",
                "lea {t}, [{c} + 2048]",
                "tilestored [{t} + {ldb}*1], tmm2",
                "lea {t}, [{c} + 2112]",
                "tilestored [{t} + {ldb}*1], tmm3",
                "mov {t}, {lda}",
                "shl {t}, 5",
                "add {a}, {t}",
                "add {c}, 4096",
                "dec {blk}",
                "jnz 2b",
                "mov {t}, {lda}",
                "shl {t}, 5",
                "add {b}, {t}",
                "dec qword ptr [{args} + 80]",
                "jnz 4b",
                "tilerelease",
                args = in(reg) std::ptr::from_mut(args),
                b = inout(reg) b => _,
                c = inout(reg) c => _,
                lda = in(reg) lda,
                ldb = in(reg) 4 * NR,
                a = out(reg) _,
                blk = out(reg) _,
                ap = out(reg) _,
                bp = out(reg) _,
                k = out(reg) _,
                t = out(reg) _,
                out("tmm0") _,
                out("tmm1") _,
                out("tmm2") _,
                out("tmm3") _,
                out("tmm4") _,
                out("tmm5") _,
                out("tmm6") _,
                out("tmm7") _,
                options(nostack),
            )
        }
    }
}

/// No AMX off x86-64.
#[cfg(not(target_arch = "x86_64"))]
mod amx {
    pub(super) const ROWS: usize = 32;

    pub(super) fn available() -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in -1..1 with a few large ones, as activations have.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|i| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let v = ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
                if i % 97 == 0 { v * 8.0 } else { v }
            })
            .collect()
    }

    fn f32_matmul(w: &[f32], b: &[f32], x: &[f32], n: usize, k: usize) -> Vec<f32> {
        x.chunks_exact(k)
            .flat_map(|row| {
                (0..n).map(move |c| {
                    row.iter()
                        .zip(&w[c * k..][..k])
                        .map(|(a, b)| a * b)
                        .sum::<f32>()
                        + b[c]
                })
            })
            .collect()
    }

    #[test]
    fn the_integer_product_is_close_to_the_float_one() {
        // Shapes off the tile and panel sizes, and a row of zeros.
        let (n, k, m) = (37, 22, 5);
        let w = values(n * k, 1);
        let b = values(n, 2);
        let mut x = values(m * k, 3);
        x[k..2 * k].fill(0.0);
        let p = Packed::new(&w, &b, n, k);
        let mut got = vec![0f32; m * n];
        p.matmul_portable(&x, &mut got);
        let want = f32_matmul(&w, &b, &x, n, k);
        for (r, (g, w)) in got.chunks(n).zip(want.chunks(n)).enumerate() {
            let err = g
                .iter()
                .zip(w)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            let size = w.iter().map(|v| v.abs()).fold(0f32, f32::max);
            assert!(
                err <= 0.03 * size.max(1.0),
                "row {r}: error {err} for values up to {size}"
            );
        }
        // The zero row gives the bias alone.
        assert_eq!(&got[n..2 * n], &b[..]);
    }

    /// The fast kernels this machine can run (AMX only where the CPU and system allow it).
    fn kernels() -> Vec<Kernel> {
        let mut all = vec![Kernel::Vnni];
        if amx::available() {
            all.push(Kernel::Amx);
        } else {
            eprintln!("no AMX here: only the VNNI kernel is tested");
        }
        all
    }

    #[test]
    fn the_fast_path_computes_what_the_portable_one_does() {
        if !available() {
            eprintln!("this CPU has no AVX-512 VNNI: the fast path is not used here");
            return;
        }
        for (n, k, m) in [
            (384, 384, 19),
            (384, 384, 64),
            (64, 128, 33),
            (1536, 384, 70),
            (1536, 384, 8),
            (384, 1536, 3),
            (40, 6, 1),
            (37, 22, 9),
            (33, 100, 17),
            // A last panel whose second half is partial, with padded inputs and rows.
            (50, 100, 70),
            (63, 130, 33),
            (17, 64, 32),
        ] {
            let p = Packed::new(&values(n * k, 4), &values(n, 5), n, k);
            let x = values(m * k, 6);
            let mut slow = vec![0f32; m * n];
            p.matmul_portable(&x, &mut slow);
            for kernel in kernels() {
                let mut fast = vec![f32::NAN; m * n];
                p.matmul_with(kernel, &x, &mut fast);
                assert_eq!(fast, slow, "{kernel:?}: {n}×{k} by {m} rows");
            }
        }
    }

    #[test]
    fn a_layer_gives_the_same_floats_whichever_kernel_its_row_count_picks() {
        if !available() {
            eprintln!("this CPU has no AVX-512 VNNI: the fast path is not used here");
            return;
        }
        let (n, k) = (70, 96);
        let p = Packed::new(&values(n * k, 12), &values(n, 13), n, k);
        for m in [1, AMX_FROM_ROWS - 1, AMX_FROM_ROWS, 40] {
            let x = values(m * k, 14);
            let (mut fast, mut slow) = (vec![f32::NAN; m * n], vec![0f32; m * n]);
            p.matmul(&x, &mut fast);
            p.matmul_portable(&x, &mut slow);
            assert_eq!(fast, slow, "{m} rows");
        }
    }

    #[test]
    fn the_fast_quantizer_writes_the_bytes_of_the_scalar_one() {
        if !available() {
            eprintln!("this CPU has no AVX-512 VNNI: the fast path is not used here");
            return;
        }
        let odd = [f32::NAN, 0.0, -0.0, -3.5, 7.25, 1e-30];
        for len in 0..=70 {
            let base = values(len, len as u64);
            let mut rows = vec![
                base.clone(),
                base.iter().map(|v| -v.abs() - 0.1).collect::<Vec<f32>>(),
                vec![0.0; len],
            ];
            if len > 0 {
                let mut with = base.clone();
                with[len / 2] = odd[len % odd.len()];
                rows.push(with);
                let mut inf = base.clone();
                inf[len - 1] = f32::INFINITY;
                rows.push(inf);
            }
            for row in rows {
                let padded = len.div_ceil(4) * 4 + 4;
                let (mut a, mut b) = (vec![7u8; padded], vec![9u8; padded]);
                // SAFETY: this CPU has AVX-512 F and BW (checked above).
                let fast = unsafe { vnni::quantize_row(&row, &mut a) };
                let slow = quantize_row_any(&row, &mut b);
                assert_eq!(a, b, "bytes of {row:?}");
                assert_eq!((fast.scale, fast.zero), (slow.scale, slow.zero));
            }
        }
    }

    #[test]
    fn each_input_is_within_half_a_step_of_its_byte() {
        let row = values(300, 11);
        let mut q = vec![0u8; 300];
        let s = quantize_row_any(&row, &mut q);
        assert!(s.scale > 0.0 && (0..=255).contains(&s.zero));
        for (v, &b) in row.iter().zip(&q) {
            let back = s.scale * (f32::from(b) - s.zero as f32);
            assert!(
                (back - v).abs() <= s.scale * 0.5001,
                "{v} came back as {back}"
            );
        }
        // 0 is exact, and the row's ends land on the ends of the byte range.
        let lo = row.iter().cloned().fold(0f32, f32::min);
        let hi = row.iter().cloned().fold(0f32, f32::max);
        let at = |x: f32| q[row.iter().position(|&v| v == x).unwrap()];
        assert_eq!((at(lo), at(hi)), (0, 255));
    }
}
