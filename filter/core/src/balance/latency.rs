//! `predicted_latency`: send the request where it is expected to start answering soonest.
//!
//! Each target has a linear model `latency_ms ≈ w0 + w1·queue + w2·prompt_ktokens` (fixed
//! overhead, cost per queued request, prefill cost per thousand prompt tokens), learned online
//! by normalised least mean squares: one multiply-add per feature per sample, no matrix, no
//! allocation. The learned value is the time to first token when the response streamed, else
//! the whole latency. Only successful requests train; samples are capped at [`MAX_SAMPLE_MS`]
//! and coefficients kept within `0..=MAX_SAMPLE_MS`, so one pathological request (a stream
//! held open for hours) cannot wreck a model. An exponentially weighted average of the same
//! value is kept per target for telemetry.
//!
//! A target with fewer than [`MIN_SAMPLES`] trained requests has no prediction (unknown, not
//! slow); while any eligible target lacks one, picks are least-loaded, which also gives the
//! cold targets the traffic they learn from. Models live in the balancer, so a reload starts
//! them cold.

use super::simple::{least_loaded_among, lighter, scan_best};
use super::{Observed, PickContext, Strategy};

/// Trained requests before a target's model is trusted.
pub const MIN_SAMPLES: u32 = 8;

/// Largest latency a sample may contribute, and largest coefficient.
pub const MAX_SAMPLE_MS: f64 = 300_000.0;

/// NLMS step size (stable for 0 < step < 2; 0.5 learns in tens of samples without ringing).
const STEP: f64 = 0.5;

/// A sample may move the prediction by at most this many times the current prediction (or
/// [`ERROR_FLOOR_MS`]): a real slowdown is still learned within a few samples, since the limit
/// grows with the prediction, but a single absurd sample barely registers.
const ERROR_CLIP: f64 = 3.0;

/// Floor of the error limit, so a model predicting near zero can still learn upwards.
const ERROR_FLOOR_MS: f64 = 100.0;

/// Weight of the newest sample in the telemetry average.
const EWMA_ALPHA: f64 = 0.2;

#[derive(Debug, Clone, Copy, Default)]
struct Model {
    w: [f64; 3],
    samples: u32,
    ewma_ms: Option<f64>,
}

fn features(queue: u64, prompt_tokens: u64) -> [f64; 3] {
    [1.0, queue as f64, prompt_tokens as f64 / 1000.0]
}

impl Model {
    fn predict(&self, x: [f64; 3]) -> f64 {
        self.w.iter().zip(x).map(|(w, x)| w * x).sum()
    }

    fn train(&mut self, x: [f64; 3], observed_ms: f64) {
        let y = observed_ms.clamp(0.0, MAX_SAMPLE_MS);
        self.ewma_ms = Some(self.ewma_ms.map_or(y, |e| e + EWMA_ALPHA * (y - e)));
        self.samples = self.samples.saturating_add(1);
        if self.samples == 1 {
            // Start from the first observation as pure overhead rather than from zero.
            self.w = [y, 0.0, 0.0];
            return;
        }
        let predicted = self.predict(x);
        let limit = ERROR_CLIP * predicted.max(ERROR_FLOOR_MS);
        let error = (y - predicted).clamp(-limit, limit);
        // Normalising by |x|² makes the step independent of the features' scale.
        let norm = 1.0 + x.iter().map(|v| v * v).sum::<f64>();
        for (w, v) in self.w.iter_mut().zip(x) {
            *w = (*w + STEP * error * v / norm).clamp(0.0, MAX_SAMPLE_MS);
        }
    }
}

/// Latency models per target and the pick that minimises the prediction.
#[derive(Debug, Clone)]
pub struct PredictedLatency {
    models: Vec<Model>,
}

impl PredictedLatency {
    /// Cold models for `targets` targets.
    pub fn new(targets: usize) -> Self {
        Self { models: vec![Model::default(); targets] }
    }

    /// Predicted milliseconds on `target` at this queue and prompt size; `None` while cold.
    pub fn predict(&self, target: usize, queue: u64, prompt_tokens: u64) -> Option<f64> {
        let m = self.models.get(target).filter(|m| m.samples >= MIN_SAMPLES)?;
        Some(m.predict(features(queue, prompt_tokens)))
    }

    /// Learned `[overhead ms, ms per queued request, ms per 1k prompt tokens]` of `target`.
    pub fn coefficients(&self, target: usize) -> Option<[f64; 3]> {
        self.models.get(target).map(|m| m.w)
    }

    /// Requests `target` has been trained on.
    pub fn samples(&self, target: usize) -> u32 {
        self.models.get(target).map_or(0, |m| m.samples)
    }

    /// Smoothed observed latency of `target`, once it has a sample.
    pub fn latency_ewma_ms(&self, target: usize) -> Option<f64> {
        self.models.get(target).and_then(|m| m.ewma_ms)
    }
}

impl Strategy for PredictedLatency {
    fn pick(&mut self, ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize> {
        let tokens = ctx.prompt_tokens();
        let predicted = |i: usize| self.predict(i, ctx.queue(i), tokens);
        if eligible.iter().any(|&i| predicted(i).is_none()) {
            return least_loaded_among(ctx, eligible);
        }
        let faster = |a: usize, b: usize| {
            let (pa, pb) = (predicted(a).unwrap_or(f64::MAX), predicted(b).unwrap_or(f64::MAX));
            pa < pb || (pa == pb && lighter(ctx, a, b))
        };
        scan_best(eligible, ctx.random, |_| true, faster)
    }

    fn observe(&mut self, target: usize, event: Observed) {
        let Observed::Finished(outcome) = event else { return };
        if !outcome.success {
            return;
        }
        if let Some(model) = self.models.get_mut(target) {
            let observed = outcome.ttft_ms.unwrap_or(outcome.latency_ms);
            model.train(features(outcome.queue_depth, outcome.prompt_tokens), observed as f64);
        }
    }
}
