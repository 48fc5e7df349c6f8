//! A BERT encoder over plain f32 buffers, with its linear layers in 8-bit integers where the
//! CPU multiplies those fast ([`super::int8`]) and in f32 elsewhere (the `gemm` crate).
//!
//! A batch is a run of sequences padded to one width. Padding is never computed on: each
//! sequence attends over its own tokens only, and pooling reads only those, so a padded row's
//! values (left at whatever the layers make of zeros) reach no result.
//!
//! Work is split over the rayon pool the caller installs: linear layers by blocks of rows,
//! attention by sequence and head.

use rayon::prelude::*;

use super::int8;

/// How a linear layer's weights are held.
enum Weights {
    Int8(int8::Packed),
    /// `n` rows of `k`, as the checkpoint stores them, and the bias.
    F32 {
        w: Vec<f32>,
        bias: Vec<f32>,
    },
}

/// A linear layer `y = x·wᵀ + b`.
pub(crate) struct Dense {
    n: usize,
    k: usize,
    weights: Weights,
}

/// What follows a linear layer.
#[derive(Clone, Copy, PartialEq)]
enum Then {
    Nothing,
    Gelu,
}

impl Dense {
    /// `w`: `n` rows of `k` inputs; `bias`: `n`. In 8-bit integers when `int8` (and the CPU
    /// has the instructions), else in f32.
    pub(crate) fn new(w: Vec<f32>, bias: Vec<f32>, n: usize, k: usize, int8: bool) -> Dense {
        assert_eq!((w.len(), bias.len()), (n * k, n), "a {n}×{k} layer");
        let weights = if int8 && int8::available() {
            Weights::Int8(int8::Packed::new(&w, &bias, n, k))
        } else {
            Weights::F32 { w, bias }
        };
        Dense { n, k, weights }
    }

    /// A layer already quantized and laid out (read back from a file of packed layers).
    pub(crate) fn from_packed(p: int8::Packed) -> Dense {
        Dense {
            n: p.outputs(),
            k: p.inputs(),
            weights: Weights::Int8(p),
        }
    }

    /// The layer in 8-bit integers, when it is held that way.
    pub(crate) fn packed(&self) -> Option<&int8::Packed> {
        match &self.weights {
            Weights::Int8(p) => Some(p),
            Weights::F32 { .. } => None,
        }
    }

    /// Several layers reading the same input as one (query, key and value).
    pub(crate) fn stacked(parts: Vec<(Vec<f32>, Vec<f32>)>, k: usize, int8: bool) -> Dense {
        let n = parts.iter().map(|(_, b)| b.len()).sum();
        let (mut w, mut bias) = (Vec::with_capacity(n * k), Vec::with_capacity(n));
        for (pw, pb) in parts {
            w.extend(pw);
            bias.extend(pb);
        }
        Dense::new(w, bias, n, k, int8)
    }

    /// `out` = the layer applied to the rows of `x` (then `then`), in parallel over blocks of
    /// rows on the current rayon pool.
    fn forward(&self, x: &[f32], out: &mut [f32], then: Then) {
        let m = x.len() / self.k;
        assert_eq!(out.len(), m * self.n, "{m} rows of {} outputs", self.n);
        let rows = match &self.weights {
            // Whole blocks of the AMX kernel (on many threads, smaller tasks would be padding).
            Weights::Int8(_) if int8::kernel() == Some(int8::Kernel::Amx) => {
                rows_per_task(m).next_multiple_of(int8::AMX_ROWS)
            }
            _ => rows_per_task(m),
        };
        out.par_chunks_mut(rows * self.n)
            .zip(x.par_chunks(rows * self.k))
            .for_each(|(out, x)| {
                self.rows(x, out);
                if then == Then::Gelu {
                    simd::gelu(out);
                }
            });
    }

    /// `out` = the layer applied to the rows of `x`.
    #[cfg(test)]
    pub(crate) fn apply_rows(&self, x: &[f32], out: &mut [f32]) {
        self.forward(x, out, Then::Nothing)
    }

    /// One block of rows, on the current thread.
    fn rows(&self, x: &[f32], out: &mut [f32]) {
        match &self.weights {
            Weights::Int8(p) => {
                debug_assert_eq!((p.outputs(), p.inputs()), (self.n, self.k));
                p.matmul(x, out)
            }
            Weights::F32 { w, bias } => {
                let m = x.len() / self.k;
                for row in out.chunks_exact_mut(self.n) {
                    row.copy_from_slice(bias);
                }
                // SAFETY: dst is m×n (row stride n), lhs m×k (row stride k) and rhs the k×n
                // transpose of `w` (n rows of k: element (i, j) at j·k + i); all three slices
                // hold exactly those extents.
                unsafe {
                    gemm::gemm(
                        m,
                        self.n,
                        self.k,
                        out.as_mut_ptr(),
                        1,
                        self.n as isize,
                        true,
                        x.as_ptr(),
                        1,
                        self.k as isize,
                        w.as_ptr(),
                        self.k as isize,
                        1,
                        1.0,
                        1.0,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    )
                }
            }
        }
    }
}

/// Rows per parallel task: small enough that every thread gets several, large enough that a
/// task is worth handing over.
fn rows_per_task(m: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    m.div_ceil(threads * 4).next_multiple_of(8).clamp(8, 64)
}

/// Layer normalisation's weight, bias and epsilon.
pub(crate) struct Norm {
    pub(crate) w: Vec<f32>,
    pub(crate) b: Vec<f32>,
    pub(crate) eps: f32,
}

impl Norm {
    /// Normalises each row of `x` in place (in parallel over blocks of rows).
    pub(crate) fn apply(&self, x: &mut [f32]) {
        self.add_apply(x, None);
    }

    /// `x` = norm(x + y), row by row.
    fn add_apply(&self, x: &mut [f32], y: Option<&[f32]>) {
        let h = self.w.len();
        let rows = rows_per_task(x.len() / h);
        match y {
            Some(y) => x
                .par_chunks_mut(rows * h)
                .zip(y.par_chunks(rows * h))
                .for_each(|(x, y)| simd::add_norm(x, Some(y), self)),
            None => x
                .par_chunks_mut(rows * h)
                .for_each(|x| simd::add_norm(x, None, self)),
        }
    }
}

/// One transformer layer.
pub(crate) struct Block {
    /// Query, key and value, stacked.
    pub(crate) qkv: Dense,
    pub(crate) out: Dense,
    pub(crate) attn_norm: Norm,
    pub(crate) up: Dense,
    pub(crate) down: Dense,
    pub(crate) ffn_norm: Norm,
}

pub(crate) struct Encoder {
    pub(crate) hidden: usize,
    pub(crate) heads: usize,
    pub(crate) blocks: Vec<Block>,
}

impl Encoder {
    /// `x`: the embedded input, `lens.len()` sequences of `width` rows of `hidden` (each
    /// sequence's first `lens[i]` rows are its tokens). Returns each sequence's mean over its
    /// tokens, at unit length.
    pub(crate) fn run(&self, mut x: Vec<f32>, lens: &[usize], width: usize) -> Vec<Vec<f32>> {
        let h = self.hidden;
        let t = lens.len() * width;
        assert_eq!(x.len(), t * h, "input of the encoder");
        if t == 0 {
            return vec![vec![0.0; h]; lens.len()];
        }
        assert!(lens.iter().all(|&l| l <= width) && h.is_multiple_of(self.heads));
        // One set of buffers for all layers: every layer overwrites them whole.
        let ff = self.blocks.first().map_or(0, |b| b.up.n);
        let (mut qkv, mut ctx) = (vec![0f32; t * 3 * h], vec![0f32; t * h]);
        let (mut y, mut up) = (vec![0f32; t * h], vec![0f32; t * ff]);
        for b in &self.blocks {
            b.qkv.forward(&x, &mut qkv, Then::Nothing);
            self.attention(&qkv, lens, width, &mut ctx);
            b.out.forward(&ctx, &mut y, Then::Nothing);
            b.attn_norm.add_apply(&mut x, Some(&y));
            b.up.forward(&x, &mut up, Then::Gelu);
            b.down.forward(&up, &mut y, Then::Nothing);
            b.ffn_norm.add_apply(&mut x, Some(&y));
        }
        lens.iter()
            .enumerate()
            .map(|(i, &len)| {
                let mut mean = vec![0f32; h];
                for row in x[i * width * h..].chunks_exact(h).take(len) {
                    mean.iter_mut().zip(row).for_each(|(m, v)| *m += v);
                }
                let norm = mean.iter().map(|v| v * v).sum::<f32>().sqrt();
                if norm > 0.0 {
                    mean.iter_mut().for_each(|m| *m /= norm);
                }
                mean
            })
            .collect()
    }

    /// Scaled dot-product attention of each sequence's tokens among themselves, head by head:
    /// `qkv` holds rows of (query, key, value); `out` gets rows of `hidden` (padding rows are
    /// left as they are: nothing reads them). In parallel over sequences.
    fn attention(&self, qkv: &[f32], lens: &[usize], width: usize, out: &mut [f32]) {
        let (h, heads) = (self.hidden, self.heads);
        let hd = h / heads;
        let scale = 1.0 / (hd as f32).sqrt();
        let stride = 3 * h as isize;
        out.par_chunks_mut(width * h)
            .zip(qkv.par_chunks(width * 3 * h))
            .zip(lens)
            .for_each(|((out, qkv), &len)| {
                if len == 0 {
                    return;
                }
                let mut scores = vec![0f32; len * len];
                for head in 0..heads {
                    let at = |part: usize| part * h + head * hd;
                    let (q, k, v) = (&qkv[at(0)..], &qkv[at(1)..], &qkv[at(2)..]);
                    let ctx = &mut out[head * hd..];
                    // The last row used starts at (len - 1) rows and is hd long.
                    let need = (len - 1) * 3 * h + hd;
                    assert!(q.len() >= need && k.len() >= need && v.len() >= need);
                    assert!(ctx.len() >= (len - 1) * h + hd);
                    // SAFETY: scores is len×len (row stride len); q is len×hd with rows 3h
                    // apart; kᵀ is hd×len, element (d, j) at j·3h + d; all inside the slices
                    // (checked above).
                    unsafe {
                        gemm::gemm(
                            len,
                            len,
                            hd,
                            scores.as_mut_ptr(),
                            1,
                            len as isize,
                            false,
                            q.as_ptr(),
                            1,
                            stride,
                            k.as_ptr(),
                            stride,
                            1,
                            0.0,
                            scale,
                            false,
                            false,
                            false,
                            gemm::Parallelism::None,
                        )
                    };
                    for row in scores.chunks_exact_mut(len) {
                        simd::softmax(row);
                    }
                    // SAFETY: ctx is len×hd with rows h apart; scores len×len; v is len×hd with
                    // rows 3h apart; all inside the slices (checked above).
                    unsafe {
                        gemm::gemm(
                            len,
                            hd,
                            len,
                            ctx.as_mut_ptr(),
                            1,
                            h as isize,
                            false,
                            scores.as_ptr(),
                            1,
                            len as isize,
                            v.as_ptr(),
                            1,
                            stride,
                            0.0,
                            1.0,
                            false,
                            false,
                            false,
                            gemm::Parallelism::None,
                        )
                    };
                }
            });
    }
}

/// The element-wise steps, written once in plain Rust and compiled twice: for any CPU, and with
/// AVX-512 where the CPU has it (chosen at run time), where the compiler turns the loops into
/// 16-lane vector code. No `mul_add` (a library call without FMA) and no library `exp`.
mod simd {
    use super::Norm;

    fn wide() -> bool {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(not(target_arch = "x86_64"))]
            {
                false
            }
        })
    }

    /// Defines `name` (dispatching) over the generic body `any`, with an AVX-512 copy.
    macro_rules! dispatch {
        ($name:ident, $wide:ident, $any:ident, ($($arg:ident: $ty:ty),*) $(-> $ret:ty)?) => {
            pub(super) fn $name($($arg: $ty),*) $(-> $ret)? {
                #[cfg(target_arch = "x86_64")]
                if wide() {
                    // SAFETY: `wide()` checked that the CPU has these features.
                    return unsafe { $wide($($arg),*) };
                }
                $any($($arg),*)
            }

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
            fn $wide($($arg: $ty),*) $(-> $ret)? {
                $any($($arg),*)
            }
        };
    }

    dispatch!(gelu, gelu_wide, gelu_any, (xs: &mut [f32]));
    dispatch!(softmax, softmax_wide, softmax_any, (xs: &mut [f32]));
    dispatch!(add_norm, add_norm_wide, add_norm_any, (x: &mut [f32], y: Option<&[f32]>, n: &Norm));

    const LANES: usize = 16;

    /// Sum and maximum kept per lane, so that the compiler may vectorise them.
    #[inline(always)]
    fn sum(xs: &[f32]) -> f32 {
        let mut acc = [0f32; LANES];
        let mut chunks = xs.chunks_exact(LANES);
        for c in &mut chunks {
            for (a, v) in acc.iter_mut().zip(c) {
                *a += v;
            }
        }
        acc.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
    }

    #[inline(always)]
    fn max(xs: &[f32]) -> f32 {
        let mut acc = [f32::NEG_INFINITY; LANES];
        let mut chunks = xs.chunks_exact(LANES);
        for c in &mut chunks {
            for (a, &v) in acc.iter_mut().zip(c) {
                *a = if v > *a { v } else { *a };
            }
        }
        let rest = chunks.remainder().iter().copied();
        acc.into_iter()
            .chain(rest)
            .fold(f32::NEG_INFINITY, f32::max)
    }

    /// e^x for x ≤ 0 (relative error about 2e-7; below -87, e^-87): 2^n · p(r). Callers
    /// pass differences from a maximum and negated squares; x > 0 is taken as 0.
    #[inline(always)]
    fn exp(x: f32) -> f32 {
        let x = x.clamp(-87.0, 0.0);
        // Round x / ln 2 to an integer n by the float adder: at 1.5 × 2^23 a step is 1, and n
        // sits in the low bits of the sum (no float-to-int conversion, which would not
        // vectorise).
        const ROUND: f32 = 12_582_912.0;
        let t = x * std::f32::consts::LOG2_E + ROUND;
        let n = t - ROUND;
        let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
        let p = 1.0
            + r * (1.0
                + r * (0.5
                    + r * (0.166_666_67
                        + r * (0.041_666_41 + r * (0.008_333_452 + r * 0.001_394_5)))));
        let two_n = t.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127) << 23;
        p * f32::from_bits(two_n)
    }

    /// erf(x), Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7).
    #[inline(always)]
    fn erf(x: f32) -> f32 {
        let a = x.abs();
        let t = 1.0 / (1.0 + 0.327_591_1 * a);
        let poly = t
            * (0.254_829_6
                + t * (-0.284_496_74 + t * (1.421_413_8 + t * (-1.453_152_1 + t * 1.061_405_4))));
        (1.0 - poly * exp(-a * a)).copysign(x)
    }

    /// x · Φ(x), the exact GELU (as BERT uses it), in place.
    #[inline(always)]
    fn gelu_any(xs: &mut [f32]) {
        for v in xs {
            *v = 0.5 * *v * (1.0 + erf(*v * std::f32::consts::FRAC_1_SQRT_2));
        }
    }

    #[inline(always)]
    fn softmax_any(xs: &mut [f32]) {
        let top = max(xs);
        for v in xs.iter_mut() {
            *v = exp(*v - top);
        }
        let total = sum(xs);
        let inv = 1.0 / total;
        for v in xs {
            *v *= inv;
        }
    }

    /// Rows of `x` = norm(x + y).
    #[inline(always)]
    fn add_norm_any(x: &mut [f32], y: Option<&[f32]>, n: &Norm) {
        let h = n.w.len();
        for (i, row) in x.chunks_exact_mut(h).enumerate() {
            if let Some(y) = y {
                for (a, b) in row.iter_mut().zip(&y[i * h..][..h]) {
                    *a += b;
                }
            }
            let mean = sum(row) / h as f32;
            for v in row.iter_mut() {
                *v -= mean;
            }
            let mut sq = [0f32; LANES];
            for c in row.chunks_exact(LANES) {
                for (s, v) in sq.iter_mut().zip(c) {
                    *s += v * v;
                }
            }
            let rest: f32 = row
                .chunks_exact(LANES)
                .remainder()
                .iter()
                .map(|v| v * v)
                .sum();
            let var = (sq.iter().sum::<f32>() + rest) / h as f32;
            let inv = 1.0 / (var + n.eps).sqrt();
            for ((v, w), b) in row.iter_mut().zip(&n.w).zip(&n.b) {
                *v = *v * inv * w + b;
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn exp_and_erf_match_the_library() {
            for i in -1740..=0 {
                let x = i as f32 * 0.05;
                let (got, want) = (exp(x), x.exp());
                assert!(
                    (got - want).abs() <= 3e-7 * want.max(1e-30),
                    "exp({x}) = {got}, not {want}"
                );
            }
            // Known values of erf.
            for (x, want) in [
                (0.0f32, 0.0f32),
                (0.5, 0.520_499_9),
                (1.0, 0.842_700_8),
                (-1.0, -0.842_700_8),
                (2.0, 0.995_322_3),
                (3.5, 0.999_999_3),
                (-6.0, -1.0),
            ] {
                assert!((erf(x) - want).abs() < 3e-7, "erf({x}) = {}", erf(x));
            }
        }

        #[test]
        fn softmax_and_norm_are_the_textbook_ones() {
            let mut xs: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin() * 9.0).collect();
            let want: Vec<f32> = {
                let m = xs.iter().cloned().fold(f32::MIN, f32::max);
                let e: Vec<f32> = xs.iter().map(|v| (v - m).exp()).collect();
                let t: f32 = e.iter().sum();
                e.iter().map(|v| v / t).collect()
            };
            softmax(&mut xs);
            for (g, w) in xs.iter().zip(&want) {
                assert!((g - w).abs() < 1e-6, "{g} vs {w}");
            }
            let n = Norm {
                w: vec![2.0; 20],
                b: vec![0.5; 20],
                eps: 1e-12,
            };
            let mut row: Vec<f32> = (0..20).map(|i| i as f32).collect();
            add_norm(&mut row, Some(&[1.0; 20]), &n);
            let mean = row.iter().map(|v| (v - 0.5) / 2.0).sum::<f32>() / 20.0;
            let var = row.iter().map(|v| ((v - 0.5) / 2.0).powi(2)).sum::<f32>() / 20.0;
            assert!(
                mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-4,
                "{mean} {var}"
            );
            let mut g: Vec<f32> = vec![-3.0, -0.5, 0.0, 0.5, 3.0];
            gelu(&mut g);
            for (got, want) in
                g.iter()
                    .zip([-0.004_049_7, -0.154_268_5, 0.0, 0.345_731_5, 2.995_950_3])
            {
                assert!((got - want).abs() < 1e-6, "{got} vs {want}");
            }
        }
    }
}
