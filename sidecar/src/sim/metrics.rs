//! vLLM-compatible engine metrics for the simulated engine: per-model running/waiting gauges,
//! KV-cache usage, token/success counters and the prefix cache's queries and hits, rendered as
//! Prometheus text on `GET /metrics` (with the LoRA adapters' series of `super::lora` when on).
//!
//! The gateway's load-aware routing scrapes exactly these series from real vLLM pods, so names
//! and the `model_name` label follow vLLM. A request is "running" from admission until its
//! response (streamed or not) is finished or abandoned; the [`RunningGuard`] RAII value keeps
//! the gauges right even when a client disconnects mid-stream.
//!
//! The prefix cache lives here too: each lookup publishes what it stored and evicted as vLLM
//! KV-cache events (with `--kv-events`), and `POST /reset_prefix_cache` empties it.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::kv_events::{self, KvEvent, KvSender};
use super::prefix::{PrefixCache, PrefixHit};
use super::text::FinishReason;
use super::SimState;
use super::{lmcache, lmcache_worker};

/// vLLM's KV-cache block size in tokens; `--kv-blocks` counts blocks of this size.
pub const BLOCK_TOKENS: u64 = 16;

/// Live counters of one served model (one simulated engine).
#[derive(Debug, Default)]
pub struct ModelMetrics {
    running: AtomicU64,
    waiting: AtomicU64,
    /// The most requests held at once (running plus waiting) since the start.
    peak: AtomicU64,
    kv_tokens: AtomicU64,
    prompt_tokens: AtomicU64,
    generation_tokens: AtomicU64,
    success_stop: AtomicU64,
    success_length: AtomicU64,
    /// Prompt tokens looked up in the prefix cache, and those found (vLLM counts tokens).
    prefix_queries: AtomicU64,
    prefix_hits: AtomicU64,
    /// The engine's prefix cache (`--kv-blocks` blocks).
    prefix: Mutex<PrefixCache>,
    /// `--max-running` admission limit; `None` admits everything at once.
    limiter: Option<Arc<Semaphore>>,
    /// Where the prefix cache's changes are published (`--kv-events`/`--kv-replay`).
    events: Option<KvSender>,
    /// Where the CPU tier's admits and evicts go (`--lmcache-controller`).
    worker: Option<lmcache_worker::WorkerSender>,
    /// Whether the CPU tier's changes are KV events too (`--lmcache-events`).
    cpu_events: bool,
    /// Tokens asked of, and found in, the LMCache tier.
    lmcache: lmcache::Counters,
    /// The prefill-time model (`--prefill-us-per-token`).
    prefill: lmcache::Prefill,
}

/// Marks one admitted request as running until dropped; holds its KV-cache tokens and its
/// admission permit.
#[derive(Debug)]
pub struct RunningGuard {
    model: Arc<ModelMetrics>,
    kv_tokens: u64,
    _permit: Option<OwnedSemaphorePermit>,
}

/// Decrements `waiting` even if the admission future is dropped while queued.
struct WaitingGuard<'a>(&'a AtomicU64);

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ModelMetrics {
    /// Counters for a model whose engine runs at most `max_running` requests (0 = unlimited)
    /// and caches at most `kv_blocks` prefix blocks.
    pub fn new(max_running: u32, kv_blocks: u32) -> Self {
        Self {
            limiter: (max_running > 0).then(|| Arc::new(Semaphore::new(max_running as usize))),
            prefix: Mutex::new(PrefixCache::new(kv_blocks as usize)),
            cpu_events: true,
            ..Self::default()
        }
    }

    /// These counters with an LMCache tier of `cpu_blocks` behind the GPU cache of `kv_blocks`
    /// (0: none) and the prefill model `prefill`.
    pub fn with_lmcache(self, kv_blocks: u32, cpu_blocks: u32, prefill: lmcache::Prefill) -> Self {
        let prefix = Mutex::new(PrefixCache::with_cpu_tier(kv_blocks as usize, cpu_blocks as usize));
        Self { prefix, prefill, ..self }
    }

    /// Blocks in the LMCache tier, and its capacity.
    pub fn cpu_usage(&self) -> (usize, usize) {
        self.prefix.lock().unwrap_or_else(PoisonError::into_inner).cpu_usage()
    }

    /// The LMCache counters.
    pub fn lmcache(&self) -> &lmcache::Counters {
        &self.lmcache
    }

    /// These counters, reporting the CPU tier's changes to `worker` and, with `cpu_events`, as
    /// KV events.
    pub fn with_worker(self, worker: Option<lmcache_worker::WorkerSender>, cpu_events: bool) -> Self {
        Self { worker, cpu_events, ..self }
    }

    /// These counters, publishing the prefix cache's changes to `events`.
    pub fn with_events(self, events: Option<KvSender>) -> Self {
        Self { events, ..self }
    }

    /// Looks an admitted request's `prompt` up in the prefix cache (which then holds it) and
    /// counts its `prompt_tokens` as queried, the cached ones as hits. With `drop_events`
    /// (`x-sim-kv-drop`) the batch of its cache changes is kept for replay but not sent live.
    /// The hit carries the request's prefill time by the prefill model.
    pub fn prefix_lookup(&self, prompt: &str, prompt_tokens: u32, drop_events: bool) -> PrefixHit {
        let (mut hit, tiered) = {
            let mut cache = self.prefix.lock().unwrap_or_else(PoisonError::into_inner);
            let (hit, mut changes) = cache.serve_tracked(prompt);
            let tiered = cache.cpu_usage().1 > 0;
            // Under the lock, so batches go out in the order the cache changed.
            if let Some(worker) = &self.worker {
                let admits = changes.offloaded.iter().map(|&key| (true, key));
                worker.report(admits.chain(changes.dropped.iter().map(|&key| (false, key))).collect());
            }
            if !self.cpu_events {
                (changes.offloaded, changes.dropped) = (Vec::new(), Vec::new());
            }
            if let Some(events) = &self.events {
                let batch = kv_events::cache_events(prompt, &changes);
                if drop_events {
                    events.publish_dropped(batch);
                } else {
                    events.publish(batch);
                }
            }
            (hit, tiered)
        };
        let queried = u64::from(prompt_tokens);
        self.prefix_queries.fetch_add(queried, Ordering::Relaxed);
        self.prefix_hits.fetch_add(hit.hit_tokens().min(queried), Ordering::Relaxed);
        if tiered {
            self.lmcache.count(&hit, prompt_tokens);
        }
        hit.prefill_us = self.prefill.micros(&hit, prompt_tokens);
        hit
    }

    /// Admits a request with `prompt_tokens`, waiting (and counting as waiting) while the
    /// engine is at `--max-running`.
    pub async fn admit(self: &Arc<Self>, prompt_tokens: u32) -> RunningGuard {
        let permit = match &self.limiter {
            Some(limiter) => {
                self.waiting.fetch_add(1, Ordering::Relaxed);
                self.note_peak();
                let _waiting = WaitingGuard(&self.waiting);
                // The semaphore is never closed, so an error cannot happen; running unlimited
                // would be the harmless fallback anyway.
                limiter.clone().acquire_owned().await.ok()
            }
            None => None,
        };
        let kv_tokens = u64::from(prompt_tokens);
        self.running.fetch_add(1, Ordering::Relaxed);
        self.note_peak();
        self.kv_tokens.fetch_add(kv_tokens, Ordering::Relaxed);
        self.prompt_tokens.fetch_add(kv_tokens, Ordering::Relaxed);
        RunningGuard { model: Arc::clone(self), kv_tokens, _permit: permit }
    }
}

impl ModelMetrics {
    /// Raises the peak to what is held now (a waiting request counted once: it moves from
    /// waiting to running before the running count is read again).
    fn note_peak(&self) {
        let held = self.running.load(Ordering::Relaxed) + self.waiting.load(Ordering::Relaxed);
        self.peak.fetch_max(held, Ordering::Relaxed);
    }
}

impl RunningGuard {
    /// Records `count` newly generated tokens (they also occupy KV cache until the end).
    pub fn generated(&mut self, count: u32) {
        let count = u64::from(count);
        self.kv_tokens += count;
        self.model.kv_tokens.fetch_add(count, Ordering::Relaxed);
        self.model.generation_tokens.fetch_add(count, Ordering::Relaxed);
    }

    /// Counts the request as successfully finished; the guard's drop then releases it.
    pub fn succeed(self, reason: FinishReason) {
        let counter = match reason {
            FinishReason::Stop => &self.model.success_stop,
            FinishReason::Length => &self.model.success_length,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.model.running.fetch_sub(1, Ordering::Relaxed);
        self.model.kv_tokens.fetch_sub(self.kv_tokens, Ordering::Relaxed);
    }
}

/// Fraction (0..=1) of a KV cache of `kv_blocks` blocks that `tokens` occupy.
pub fn kv_usage(tokens: u64, kv_blocks: u32) -> f64 {
    let capacity = u64::from(kv_blocks.max(1)) * BLOCK_TOKENS;
    (tokens as f64 / capacity as f64).min(1.0)
}

/// Renders the Prometheus text exposition for `models`.
pub fn render(models: &[(String, Arc<ModelMetrics>)], kv_blocks: u32) -> String {
    let gauge = |m: &ModelMetrics| {
        [
            m.running.load(Ordering::Relaxed) as f64,
            m.waiting.load(Ordering::Relaxed) as f64,
            kv_usage(m.kv_tokens.load(Ordering::Relaxed), kv_blocks),
        ]
    };
    let gauges: [(&str, &str, usize); 4] = [
        ("vllm:num_requests_running", "Number of requests in model execution batches.", 0),
        ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", 1),
        ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", 2),
        ("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", 2),
    ];
    let mut out = String::new();
    for (name, help, index) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (model, m) in models {
            let _ = writeln!(out, "{name}{{model_name=\"{model}\"}} {}", gauge(m)[index]);
        }
    }
    let name = "sim:peak_requests";
    let _ = writeln!(
        out,
        "# HELP {name} The most requests held at once (running plus waiting), a sim extra.\n# TYPE {name} gauge"
    );
    for (model, m) in models {
        let _ = writeln!(out, "{name}{{model_name=\"{model}\"}} {}", m.peak.load(Ordering::Relaxed));
    }
    render_counters(&mut out, models);
    out
}

fn render_counters(out: &mut String, models: &[(String, Arc<ModelMetrics>)]) {
    let values = |m: &ModelMetrics| {
        [&m.prompt_tokens, &m.generation_tokens, &m.prefix_queries, &m.prefix_hits].map(|c| c.load(Ordering::Relaxed))
    };
    let counters = [
        ("vllm:prompt_tokens_total", "Number of prefill tokens processed.", 0),
        ("vllm:generation_tokens_total", "Number of generation tokens processed.", 1),
        ("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", 2),
        ("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", 3),
    ];
    for (name, help, index) in counters {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (model, m) in models {
            let _ = writeln!(out, "{name}{{model_name=\"{model}\"}} {}", values(m)[index]);
        }
    }
    let name = "vllm:request_success_total";
    let _ = writeln!(out, "# HELP {name} Count of successfully processed requests.");
    let _ = writeln!(out, "# TYPE {name} counter");
    for (model, m) in models {
        for (reason, counter) in [("stop", &m.success_stop), ("length", &m.success_length)] {
            let value = counter.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}{{finished_reason=\"{reason}\",model_name=\"{model}\"}} {value}");
        }
    }
}

/// `GET /metrics`.
pub async fn handler(State(state): State<Arc<SimState>>) -> impl IntoResponse {
    let mut page = render(&state.models, state.kv_blocks);
    if state.lmcache_blocks > 0 {
        lmcache::render(&mut page, &state.models);
    }
    if let Some(adapters) = &state.adapters {
        adapters.render(&mut page);
    }
    state.moderation.render(&mut page);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], page)
}

/// `POST /reset_prefix_cache` (vLLM's): empties every model's prefix cache and publishes
/// `AllBlocksCleared`. The metrics' counters are kept.
pub async fn reset_prefix_cache(State(state): State<Arc<SimState>>) -> StatusCode {
    // All caches locked at once (always in model order, and a lookup holds one at a time), so
    // no request's blocks land between the clear and its event.
    let mut caches: Vec<_> =
        state.models.iter().map(|(_, m)| m.prefix.lock().unwrap_or_else(PoisonError::into_inner)).collect();
    caches.iter_mut().for_each(|cache| cache.clear());
    if let Some(events) = &state.kv_events {
        events.publish(vec![KvEvent::AllBlocksCleared]);
    }
    StatusCode::OK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_usage_is_a_clamped_fraction() {
        assert_eq!(kv_usage(0, 100), 0.0);
        assert_eq!(kv_usage(800, 100), 0.5);
        assert_eq!(kv_usage(10_000, 100), 1.0);
        assert_eq!(kv_usage(8, 0), 0.5); // zero blocks treated as one, never divides by zero
    }

    #[tokio::test]
    async fn guard_tracks_running_tokens_and_success() {
        let m = Arc::new(ModelMetrics::new(0, 100));
        let models = vec![("m".to_owned(), Arc::clone(&m))];
        let mut guard = m.admit(10).await;
        guard.generated(6);
        let text = render(&models, 1);
        assert!(text.contains("vllm:num_requests_running{model_name=\"m\"} 1\n"), "{text}");
        assert!(text.contains("vllm:kv_cache_usage_perc{model_name=\"m\"} 1\n"), "{text}");
        guard.succeed(FinishReason::Length);
        let text = render(&models, 1);
        assert!(text.contains("vllm:num_requests_running{model_name=\"m\"} 0\n"), "{text}");
        assert!(text.contains("vllm:gpu_cache_usage_perc{model_name=\"m\"} 0\n"), "{text}");
        assert!(text.contains("vllm:prompt_tokens_total{model_name=\"m\"} 10\n"), "{text}");
        assert!(text.contains("vllm:generation_tokens_total{model_name=\"m\"} 6\n"), "{text}");
        assert!(text.contains("finished_reason=\"length\",model_name=\"m\"} 1\n"), "{text}");
    }

    #[test]
    fn prefix_lookups_count_queried_and_cached_tokens() {
        let m = Arc::new(ModelMetrics::new(0, 100));
        let models = vec![("m".to_owned(), Arc::clone(&m))];
        let prompt = (0..40).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
        assert_eq!(m.prefix_lookup(&prompt, 45, false), PrefixHit { hit: 0, blocks: 2, ..PrefixHit::default() });
        assert_eq!(m.prefix_lookup(&prompt, 45, false), PrefixHit { hit: 2, blocks: 2, ..PrefixHit::default() });
        let text = render(&models, 100);
        assert!(text.contains("vllm:prefix_cache_queries_total{model_name=\"m\"} 90\n"), "{text}");
        assert!(text.contains("vllm:prefix_cache_hits_total{model_name=\"m\"} 32\n"), "{text}");
    }

    #[tokio::test]
    async fn max_running_queues_requests_as_waiting() {
        let m = Arc::new(ModelMetrics::new(1, 100));
        let first = m.admit(1).await;
        let queued = tokio::spawn({
            let m = Arc::clone(&m);
            async move { drop(m.admit(1).await) }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(m.waiting.load(Ordering::Relaxed), 1);
        drop(first);
        queued.await.unwrap();
        assert_eq!(m.waiting.load(Ordering::Relaxed), 0);
        assert_eq!(m.running.load(Ordering::Relaxed), 0);
    }
}
