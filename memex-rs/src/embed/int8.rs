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
//! Only x86-64 CPUs with AVX-512 VNNI take this path ([`available`]); elsewhere the layers stay
//! in f32 (`super::encoder`). [`Packed::matmul_portable`] does the same integer arithmetic in
//! plain Rust; the tests hold the fast path to it.

/// Outputs per panel: two registers of 16 lanes.
const NR: usize = 32;
/// Input rows per tile: 2 × 8 accumulators, of the 32 vector registers.
const MR: usize = 8;
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

/// A linear layer `y = x·wᵀ + b` with `n` outputs and `k` inputs, quantized and laid out for
/// the kernel.
pub(crate) struct Packed {
    n: usize,
    k: usize,
    /// `k` rounded up to whole groups of four inputs (a 32-bit lane).
    kp: usize,
    /// Panels of `NR` outputs; in a panel, for each group of four inputs, `NR` × 4 bytes.
    data: Vec<i8>,
    /// Per output, padded to whole panels: the weights' scale, their sum, the bias.
    scale: Vec<f32>,
    sums: Vec<i32>,
    bias: Vec<f32>,
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
        let kp = k.div_ceil(4) * 4;
        let np = n.div_ceil(NR) * NR;
        let panel = kp * NR;
        let mut data = vec![0i8; np * kp];
        let (mut scale, mut sums) = (vec![0f32; np], vec![0i32; np]);
        let mut padded_bias = bias.to_vec();
        padded_bias.resize(np, 0.0);
        for (row, ws) in w.chunks_exact(k).enumerate() {
            let (s, inv) = scale_of(ws);
            scale[row] = s;
            let base = row / NR * panel + row % NR * 4;
            let mut sum = 0i32;
            for (i, &v) in ws.iter().enumerate() {
                let q = (v * inv).round_ties_even().clamp(-127.0, 127.0) as i8;
                sum += i32::from(q);
                data[base + i / 4 * NR * 4 + i % 4] = q;
            }
            sums[row] = sum;
        }
        Packed {
            n,
            k,
            kp,
            data,
            scale,
            sums,
            bias: padded_bias,
        }
    }

    pub(crate) fn outputs(&self) -> usize {
        self.n
    }

    pub(crate) fn inputs(&self) -> usize {
        self.k
    }

    /// `x`: rows of `k` inputs; `out`: as many rows of `n` outputs. Needs [`available`].
    pub(crate) fn matmul(&self, x: &[f32], out: &mut [f32]) {
        assert!(available(), "the int8 layers need AVX-512 VNNI");
        let (q, rows) = self.quantize(x, out);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `available()` checked that the CPU has AVX-512 F, BW and VNNI; `quantize`
        // sized `q` to whole tiles of `kp` bytes per row and `out` was checked to hold the rows.
        unsafe {
            vnni::matmul(self, &q, &rows, out)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (q, rows);
    }

    /// The same arithmetic in plain Rust (the scalar quantizer too): what the fast path must
    /// produce.
    #[cfg(test)]
    pub(crate) fn matmul_portable(&self, x: &[f32], out: &mut [f32]) {
        let (q, rows) = self.quantize_with(x, out, quantize_row_any);
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

    /// The rows of `x` as bytes, padded to whole tiles (of zeros), with each row's step.
    fn quantize(&self, x: &[f32], out: &[f32]) -> (Vec<u8>, Vec<Step>) {
        self.quantize_with(x, out, quantize_row)
    }

    fn quantize_with(
        &self,
        x: &[f32],
        out: &[f32],
        quantize_row: fn(&[f32], &mut [u8]) -> Step,
    ) -> (Vec<u8>, Vec<Step>) {
        assert_eq!(x.len() % self.k, 0, "rows of {} inputs", self.k);
        let m = x.len() / self.k;
        assert_eq!(out.len(), m * self.n, "{m} rows of {} outputs", self.n);
        let rows = m.div_ceil(MR) * MR;
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
    unsafe fn store(p: &Packed, acc: __m512i, c: usize, x: Step, row: &mut [f32]) {
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

    #[test]
    fn the_fast_path_computes_what_the_portable_one_does() {
        if !available() {
            eprintln!("this CPU has no AVX-512 VNNI: the fast path is not used here");
            return;
        }
        for (n, k, m) in [
            (384, 384, 19),
            (1536, 384, 8),
            (384, 1536, 3),
            (40, 6, 1),
            (37, 22, 9),
            (33, 100, 17),
        ] {
            let p = Packed::new(&values(n * k, 4), &values(n, 5), n, k);
            let x = values(m * k, 6);
            let (mut fast, mut slow) = (vec![f32::NAN; m * n], vec![0f32; m * n]);
            p.matmul(&x, &mut fast);
            p.matmul_portable(&x, &mut slow);
            assert_eq!(fast, slow, "{n}×{k} by {m} rows");
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
