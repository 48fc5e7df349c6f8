//! Confidence: the estimated probability that an item is relevant to a prompt.
//!
//! Two things speak for an item: how close its meaning is to the prompt's (the cosine
//! similarity of their embeddings) and how many of the prompt's significant words it holds
//! (`words`, the share of them, with their other forms; [`crate::search::query`]). A cosine
//! means different things at different levels: a one-line observation of a tool call and a
//! paragraph-long session summary sit at different distances from the same prompt even when
//! both are what the user needs (and a raw prompt or answer, which stands for its talk, differs
//! again). So each level gets its own logistic curve,
//! `confidence = 1 / (1 + exp(-(a * similarity + c * words + b)))`, fitted by `memex-bench
//! inject` (which prints them) on labelled prompt/item pairs: prompts replayed from the eval
//! topics and the fixture transcripts, where an item is relevant when it belongs to the session
//! the prompt is about. Once fitted, a confidence of 0.7 means that about 70 % of the items
//! scored near 0.7 were relevant, at every level, so one threshold serves all of them.
//!
//! The curves belong to a model (both local models have theirs): for an embedding model
//! without fitted curves (a remote provider's), the confidence is the cosine similarity
//! itself, clamped to 0..1, and the threshold has to be chosen by hand.

use crate::layer::Layer;

/// Fitted curves per model: `[a, c, b]` (similarity, words, constant) for observations,
/// talks, sessions, raw messages.
const FITTED: &[(&str, [[f64; 3]; 4])] = &[
    (
        crate::embed::model::MODEL_NAME,
        [
            [7.00, 1.78, -6.03],
            [8.90, 0.82, -6.16],
            [7.40, 3.78, -6.17],
            [3.22, 3.34, -4.32],
        ],
    ),
    // Its cosines crowd into 0.75..0.95: steep curves, an even chance near 0.90.
    (
        crate::embed::model::E5.name,
        [
            [67.65, 0.0, -60.98],
            [42.65, 0.0, -39.30],
            [60.67, 0.0, -54.57],
            [45.42, 0.0, -41.60],
        ],
    ),
];

/// Whether `model` has fitted curves.
pub fn is_calibrated(model: &str) -> bool {
    FITTED.iter().any(|(m, _)| *m == model)
}

/// The place of a layer's curve in `FITTED` (and in the tuning harness's tables).
pub fn slot(t: Layer) -> usize {
    match t {
        Layer::Observations => 0,
        Layer::Talks => 1,
        Layer::Sessions => 2,
        Layer::Raw => 3,
    }
}

/// The confidence of an item of level `t` at cosine `similarity` to the prompt, holding the
/// share `words` (0..1) of the prompt's significant words.
pub fn confidence(model: &str, t: Layer, similarity: f64, words: f64) -> f64 {
    match FITTED.iter().find(|(m, _)| *m == model) {
        Some((_, curves)) => {
            let [a, c, b] = curves[slot(t)];
            logistic(a * similarity + c * words + b)
        }
        None => similarity.clamp(0.0, 1.0),
    }
}

fn logistic(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Fits `P(relevant) = logistic(a · x + b)` (one weight per feature of `x`) to labelled
/// samples by Newton's method on the log-likelihood, with Platt's smoothed targets (so
/// perfectly separated data still gives finite coefficients). Returns `None` without both
/// kinds of samples.
pub fn fit<const K: usize>(samples: &[([f64; K], bool)]) -> Option<([f64; K], f64)> {
    let pos = samples.iter().filter(|s| s.1).count() as f64;
    let neg = samples.len() as f64 - pos;
    if pos == 0.0 || neg == 0.0 || samples.iter().any(|s| s.0.iter().any(|x| !x.is_finite())) {
        return None;
    }
    let (hi, lo) = ((pos + 1.0) / (pos + 2.0), 1.0 / (neg + 2.0));
    let target = |y: bool| if y { hi } else { lo };
    let z = |x: &[f64; K]| -> Vec<f64> { x.iter().copied().chain(std::iter::once(1.0)).collect() };
    let dot = |z: &[f64], w: &[f64]| -> f64 { z.iter().zip(w).map(|(z, w)| z * w).sum() };
    // The negative log-likelihood against the smoothed targets.
    let loss = |w: &[f64]| -> f64 {
        samples
            .iter()
            .map(|(x, y)| {
                let s = dot(&z(x), w);
                let t = target(*y);
                // log(1 + e^s) - t·s, computed without overflow.
                s.max(0.0) + (-s.abs()).exp().ln_1p() - t * s
            })
            .sum()
    };
    // The weights, then the constant.
    let mut w = vec![0.0f64; K + 1];
    w[K] = ((pos + 1.0) / (neg + 1.0)).ln();
    let mut current = loss(&w);
    for _ in 0..100 {
        // Gradient and Hessian of the negative log-likelihood.
        let mut g = vec![0.0f64; K + 1];
        let mut h = vec![vec![0.0f64; K + 1]; K + 1];
        for (x, y) in samples {
            let z = z(x);
            let p = logistic(dot(&z, &w));
            let d = p - target(*y);
            let v = (p * (1.0 - p)).max(1e-12);
            for i in 0..=K {
                g[i] += d * z[i];
                for j in 0..=K {
                    h[i][j] += v * z[i] * z[j];
                }
            }
        }
        // A little ridge keeps the step defined.
        for (i, row) in h.iter_mut().enumerate() {
            row[i] += 1e-9;
        }
        let Some(mut step) = solve(h, g) else {
            break;
        };
        if step.iter().all(|s| s.abs() < 1e-9) {
            break;
        }
        // Newton's step, halved until it lowers the loss (a full step can overshoot where
        // the data are nearly separable); none that does: the fit is as good as it gets.
        let mut improved = false;
        for _ in 0..40 {
            let next: Vec<f64> = w.iter().zip(&step).map(|(w, s)| w - s).collect();
            let l = loss(&next);
            if l < current {
                (w, current, improved) = (next, l, true);
                break;
            }
            step.iter_mut().for_each(|s| *s /= 2.0);
        }
        if !improved {
            break;
        }
    }
    let mut a = [0.0; K];
    a.copy_from_slice(&w[..K]);
    Some((a, w[K]))
}

/// Solves `m · x = v` by Gaussian elimination with partial pivoting; `None` when `m` is
/// singular.
fn solve(mut m: Vec<Vec<f64>>, mut v: Vec<f64>) -> Option<Vec<f64>> {
    let n = v.len();
    for col in 0..n {
        let pivot = (col..n).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        if m[pivot][col].abs() < 1e-15 {
            return None;
        }
        m.swap(col, pivot);
        v.swap(col, pivot);
        let (top, rest) = m.split_at_mut(col + 1);
        let pivot_row = &top[col];
        for (row, r) in rest.iter_mut().enumerate() {
            let f = r[col] / pivot_row[col];
            for (x, p) in r[col..].iter_mut().zip(&pivot_row[col..]) {
                *x -= f * p;
            }
            v[col + 1 + row] -= f * v[col];
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let rest: f64 = (row + 1..n).map(|k| m[row][k] * x[k]).sum();
        x[row] = (v[row] - rest) / m[row][row];
    }
    Some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_a_known_curve() {
        // Samples drawn exactly from logistic(8x - 4) in proportion.
        let mut samples = Vec::new();
        for i in 0..=100 {
            let x = i as f64 / 100.0;
            let p = logistic(8.0 * x - 4.0);
            let pos = (p * 200.0).round() as usize;
            samples.extend(std::iter::repeat_n(([x], true), pos));
            samples.extend(std::iter::repeat_n(([x], false), 200 - pos));
        }
        let ([a], b) = fit(&samples).unwrap();
        assert!((a - 8.0).abs() < 0.3 && (b + 4.0).abs() < 0.2, "{a} {b}");
        assert_eq!(fit(&[([0.5], true)]), None);
    }

    #[test]
    fn fit_recovers_a_curve_of_two_features() {
        // logistic(6 s + 3 w - 5) over a grid of (similarity, words).
        let mut samples = Vec::new();
        for i in 0..=20 {
            for j in 0..=10 {
                let (s, w) = (i as f64 / 20.0, j as f64 / 10.0);
                let pos = (logistic(6.0 * s + 3.0 * w - 5.0) * 100.0).round() as usize;
                samples.extend(std::iter::repeat_n(([s, w], true), pos));
                samples.extend(std::iter::repeat_n(([s, w], false), 100 - pos));
            }
        }
        let ([a, c], b) = fit(&samples).unwrap();
        assert!(
            (a - 6.0).abs() < 0.3 && (c - 3.0).abs() < 0.3 && (b + 5.0).abs() < 0.3,
            "{a} {c} {b}"
        );
        // Nearly separated by the two together: a full Newton step overshoots there, the
        // halved ones do not, and the curve stays finite.
        let close: Vec<([f64; 2], bool)> = (0..200)
            .map(|i| {
                let (s, w) = ((i % 20) as f64 / 20.0, (i / 20) as f64 / 10.0);
                ([s, w], s + w > 1.0)
            })
            .collect();
        let ([a, c], b) = fit(&close).unwrap();
        assert!(a.is_finite() && c.is_finite() && b.is_finite() && a > 0.0 && c > 0.0);
        assert!(a.abs() < 1e3, "{a} {c} {b}");
        assert_eq!(fit(&[([f64::NAN, 0.0], true), ([0.0, 0.0], false)]), None);
    }

    #[test]
    fn separable_data_gives_a_finite_steep_curve() {
        let samples: Vec<([f64; 1], bool)> = (0..50)
            .map(|i| ([0.2 + i as f64 * 0.002], false))
            .chain((0..10).map(|i| ([0.7 + i as f64 * 0.01], true)))
            .collect();
        let ([a], b) = fit(&samples).unwrap();
        assert!(a.is_finite() && b.is_finite() && a > 0.0);
        assert!(logistic(a * 0.75 + b) > 0.8);
        assert!(logistic(a * 0.25 + b) < 0.1);
    }

    #[test]
    fn uncalibrated_models_use_the_similarity() {
        assert_eq!(
            confidence("nomic-embed-text", Layer::Talks, 0.42, 1.0),
            0.42
        );
        assert_eq!(confidence("nomic-embed-text", Layer::Talks, -0.2, 0.0), 0.0);
        assert!(is_calibrated(crate::embed::model::MODEL_NAME));
        let c = |s| confidence(crate::embed::model::MODEL_NAME, Layer::Sessions, s, 0.0);
        assert!(c(0.9) > c(0.5) && c(0.5) > c(0.1));
    }

    #[test]
    fn every_local_model_has_its_curves() {
        for m in crate::embed::model::MODELS {
            assert!(is_calibrated(m.name), "{} has no fitted curves", m.name);
        }
        // multilingual-e5-small gives 0.8 to unrelated texts: its curves make that unlikely.
        let e5 = |s| confidence(crate::embed::model::E5.name, Layer::Talks, s, 0.0);
        assert!(e5(0.8) < 0.1 && e5(0.97) > 0.8, "{} {}", e5(0.8), e5(0.97));
    }
}
