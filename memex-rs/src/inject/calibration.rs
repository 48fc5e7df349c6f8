//! Confidence: the estimated probability that an item is relevant to a prompt.
//!
//! A cosine similarity means different things at different levels: a one-line observation of a
//! tool call and a paragraph-long session summary sit at different distances from the same
//! prompt even when both are what the user needs (and a raw prompt or answer, which stands for
//! its talk, differs again). So each level gets its own logistic curve
//! (Platt scaling), `confidence = 1 / (1 + exp(-(a * similarity + b)))`, fitted by
//! `memex-bench inject` (which prints them) on labelled prompt/item pairs: prompts replayed from
//! the eval topics and the fixture transcripts, where an item is relevant when it belongs to
//! the session the prompt is about. Once fitted, a confidence of 0.7 means that about 70 % of the items
//! scored near 0.7 were relevant, at every level, so one threshold serves all three.
//!
//! The curves belong to a model (both local models have theirs): for an embedding model
//! without fitted curves (a remote provider's), the confidence is the cosine similarity
//! itself, clamped to 0..1, and the threshold has to be chosen by hand.

use crate::layer::Layer;

/// Fitted curves per model: (a, b) for observations, talks, sessions, raw messages.
const FITTED: &[(&str, [(f64, f64); 4])] = &[
    (
        crate::embed::model::MODEL_NAME,
        [(9.86, -6.32), (9.30, -6.38), (12.87, -6.79), (6.86, -4.98)],
    ),
    // Its cosines crowd into 0.75..0.95: steep curves, an even chance near 0.90.
    (
        crate::embed::model::E5.name,
        [
            (67.65, -60.98),
            (42.65, -39.30),
            (60.67, -54.57),
            (45.42, -41.60),
        ],
    ),
];

/// Whether `model` has fitted curves.
pub fn is_calibrated(model: &str) -> bool {
    FITTED.iter().any(|(m, _)| *m == model)
}

/// The place of a layer's curve in [`FITTED`] (and in the tuning harness's tables).
pub fn slot(t: Layer) -> usize {
    match t {
        Layer::Observations => 0,
        Layer::Talks => 1,
        Layer::Sessions => 2,
        Layer::Raw => 3,
    }
}

/// The confidence of an item of level `t` at cosine `similarity` to the prompt.
pub fn confidence(model: &str, t: Layer, similarity: f64) -> f64 {
    match FITTED.iter().find(|(m, _)| *m == model) {
        Some((_, curves)) => {
            let (a, b) = curves[slot(t)];
            logistic(a * similarity + b)
        }
        None => similarity.clamp(0.0, 1.0),
    }
}

fn logistic(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Fits `P(relevant) = logistic(a * x + b)` to labelled samples by Newton's method on the
/// log-likelihood, with Platt's smoothed targets (so perfectly separated data still gives finite
/// coefficients). Returns `None` without both kinds of samples.
pub fn fit(samples: &[(f64, bool)]) -> Option<(f64, f64)> {
    let pos = samples.iter().filter(|s| s.1).count() as f64;
    let neg = samples.len() as f64 - pos;
    if pos == 0.0 || neg == 0.0 {
        return None;
    }
    let (hi, lo) = ((pos + 1.0) / (pos + 2.0), 1.0 / (neg + 2.0));
    let (mut a, mut b) = (0.0f64, ((pos + 1.0) / (neg + 1.0)).ln());
    for _ in 0..100 {
        // Gradient and Hessian of the negative log-likelihood.
        let (mut ga, mut gb, mut haa, mut hab, mut hbb) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for &(x, y) in samples {
            let t = if y { hi } else { lo };
            let p = logistic(a * x + b);
            let d = p - t;
            let w = (p * (1.0 - p)).max(1e-12);
            ga += d * x;
            gb += d;
            haa += w * x * x;
            hab += w * x;
            hbb += w;
        }
        // A little ridge keeps the step defined.
        let (haa, hbb) = (haa + 1e-9, hbb + 1e-9);
        let det = haa * hbb - hab * hab;
        if det.abs() < 1e-15 {
            break;
        }
        let da = (hbb * ga - hab * gb) / det;
        let db = (haa * gb - hab * ga) / det;
        a -= da;
        b -= db;
        if da.abs() < 1e-9 && db.abs() < 1e-9 {
            break;
        }
    }
    Some((a, b))
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
            samples.extend(std::iter::repeat_n((x, true), pos));
            samples.extend(std::iter::repeat_n((x, false), 200 - pos));
        }
        let (a, b) = fit(&samples).unwrap();
        assert!((a - 8.0).abs() < 0.3 && (b + 4.0).abs() < 0.2, "{a} {b}");
        assert_eq!(fit(&[(0.5, true)]), None);
    }

    #[test]
    fn separable_data_gives_a_finite_steep_curve() {
        let samples: Vec<(f64, bool)> = (0..50)
            .map(|i| (0.2 + i as f64 * 0.002, false))
            .chain((0..10).map(|i| (0.7 + i as f64 * 0.01, true)))
            .collect();
        let (a, b) = fit(&samples).unwrap();
        assert!(a.is_finite() && b.is_finite() && a > 0.0);
        assert!(logistic(a * 0.75 + b) > 0.8);
        assert!(logistic(a * 0.25 + b) < 0.1);
    }

    #[test]
    fn uncalibrated_models_use_the_similarity() {
        assert_eq!(confidence("nomic-embed-text", Layer::Talks, 0.42), 0.42);
        assert_eq!(confidence("nomic-embed-text", Layer::Talks, -0.2), 0.0);
        assert!(is_calibrated(crate::embed::model::MODEL_NAME));
        let c = |s| confidence(crate::embed::model::MODEL_NAME, Layer::Sessions, s);
        assert!(c(0.9) > c(0.5) && c(0.5) > c(0.1));
    }

    #[test]
    fn every_local_model_has_its_curves() {
        for m in crate::embed::model::MODELS {
            assert!(is_calibrated(m.name), "{} has no fitted curves", m.name);
        }
        // multilingual-e5-small gives 0.8 to unrelated texts: its curves make that unlikely.
        let e5 = |s| confidence(crate::embed::model::E5.name, Layer::Talks, s);
        assert!(e5(0.8) < 0.1 && e5(0.97) > 0.8, "{} {}", e5(0.8), e5(0.97));
    }
}
