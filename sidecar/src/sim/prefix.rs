//! The simulated engine's prefix cache, so benchmarks can tell whether a request landed on a
//! replica that already held its prefix (vLLM's automatic prefix caching, much simplified).
//!
//! The prompt (the dialect-neutral `role: text` turns of [`super::reply::prompt`], or a
//! completion's text) is cut into blocks of [`BLOCK_TOKENS`] whitespace words, the sim's
//! tokens; only full blocks are cached, as in vLLM. A block is identified by the chained hash of
//! every block up to it, so equal blocks after different prefixes differ. A request hits the
//! longest run of leading blocks the cache holds; afterwards all its full blocks are held.
//!
//! At most `--kv-blocks` blocks are held, evicted least-recently-used. A request refreshes its
//! blocks last to first, so its first block is the most recent and eviction takes a
//! conversation's tail before its head (vLLM frees a request's blocks in reverse order for the
//! same reason): a held block always has its parent held, and the leading run is what remains.
//! The cache is apart from the running requests' KV usage (`vllm:kv_cache_usage_perc`): a real
//! engine evicts cached blocks to make room for running ones; the sim does not model that.
//! [`PrefixCache::serve_tracked`] also reports the blocks a request newly stored and those it
//! evicted, which `super::kv_events` publishes as vLLM's KV-cache events.

use std::collections::{BTreeMap, HashMap};

use axum::http::HeaderValue;
use axum::response::Response;

use super::metrics::BLOCK_TOKENS;
use super::text::fnv1a;

/// Response header with the request's prefix-cache result: `<blocks hit>/<full blocks>`.
pub const PREFIX_HIT_HEADER: &str = "x-sim-prefix-hit";

/// What the cache held of one request's prompt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixHit {
    /// Leading full blocks that were already cached (in either tier).
    pub hit: u32,
    /// Full blocks of the prompt.
    pub blocks: u32,
    /// Of the hit blocks, those found only in the CPU tier (LMCache).
    pub cpu: u32,
    /// The prefill time the engine model gives this request, in microseconds
    /// ([`super::lmcache::Prefill`]; 0 without one).
    pub prefill_us: u64,
}

impl PrefixHit {
    /// Cached prompt tokens (whole blocks), as vLLM's `prefix_cache_hits` counts them.
    pub fn hit_tokens(&self) -> u64 {
        u64::from(self.hit) * BLOCK_TOKENS
    }

    /// The [`PREFIX_HIT_HEADER`] value.
    pub fn header_value(&self) -> HeaderValue {
        HeaderValue::from_str(&format!("{}/{}", self.hit, self.blocks)).unwrap_or(HeaderValue::from_static("0/0"))
    }
}

/// Response header with the blocks of the hit found only in the CPU tier, with `--lmcache-blocks`.
pub const CPU_HIT_HEADER: &str = "x-sim-cpu-hit";
/// Response header with the prefill time the engine model gave the request, in ms, with
/// `--prefill-us-per-token`.
pub const PREFILL_HEADER: &str = "x-sim-prefill-ms";

/// `response` with the [`PREFIX_HIT_HEADER`] of `hit`, and the [`CPU_HIT_HEADER`] and
/// [`PREFILL_HEADER`] when those models are on.
pub fn with_header(mut response: Response, hit: PrefixHit) -> Response {
    let headers = response.headers_mut();
    headers.insert(PREFIX_HIT_HEADER, hit.header_value());
    if hit.cpu > 0 {
        headers.insert(CPU_HIT_HEADER, HeaderValue::from(hit.cpu));
    }
    if hit.prefill_us > 0 {
        let ms = format!("{:.3}", hit.prefill_us as f64 / 1000.0);
        if let Ok(value) = HeaderValue::from_str(&ms) {
            headers.insert(PREFILL_HEADER, value);
        }
    }
    response
}

/// Chained hashes of the prompt's full blocks, first to last.
pub fn block_hashes(prompt: &str) -> Vec<u64> {
    let words: Vec<&str> = prompt.split_whitespace().collect();
    let mut parent = 0u64;
    words
        .chunks_exact(BLOCK_TOKENS as usize)
        .map(|block| {
            let mut bytes = parent.to_le_bytes().to_vec();
            for word in block {
                bytes.extend_from_slice(word.as_bytes());
                bytes.push(b' ');
            }
            parent = fnv1a(&bytes);
            parent
        })
        .collect()
}

/// What one request changed in the cache.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheChanges {
    /// Index, among the prompt's blocks, of the first block newly stored in GPU memory.
    pub first_stored: usize,
    /// The hash of the block before the first newly stored one (`None` if that is the first).
    pub parent: Option<u64>,
    /// Hashes of the blocks newly stored in GPU memory, first to last (a run of the prompt's
    /// blocks).
    pub stored: Vec<u64>,
    /// Hashes of the blocks evicted from GPU memory, in eviction order.
    pub evicted: Vec<u64>,
    /// Of those, the ones the CPU tier stored (all of them when it is on), in the same order.
    pub offloaded: Vec<u64>,
    /// Hashes of the blocks the CPU tier evicted, in eviction order.
    pub dropped: Vec<u64>,
}

/// A bounded LRU set of block hashes.
#[derive(Debug, Default)]
struct LruSet {
    capacity: usize,
    /// Block hash -> its recency stamp.
    blocks: HashMap<u64, u64>,
    /// Recency stamp -> block hash, oldest first.
    order: BTreeMap<u64, u64>,
    clock: u64,
}

impl LruSet {
    fn new(capacity: usize) -> Self {
        Self { capacity, ..Self::default() }
    }

    fn contains(&self, hash: &u64) -> bool {
        self.blocks.contains_key(hash)
    }

    /// Makes `hash` the most recent block.
    fn touch(&mut self, hash: u64) {
        self.clock += 1;
        if let Some(stamp) = self.blocks.insert(hash, self.clock) {
            self.order.remove(&stamp);
        }
        self.order.insert(self.clock, hash);
    }

    /// Evicts the oldest blocks beyond the capacity; returns them, oldest first.
    fn evict_over(&mut self) -> Vec<u64> {
        let mut evicted = Vec::new();
        while self.blocks.len() > self.capacity {
            let Some((_, oldest)) = self.order.pop_first() else { break };
            self.blocks.remove(&oldest);
            evicted.push(oldest);
        }
        evicted
    }

    fn clear(&mut self) {
        self.blocks.clear();
        self.order.clear();
    }
}

/// The engine's GPU prefix cache (`--kv-blocks`) and, with `--lmcache-blocks`, LMCache's CPU
/// tier behind it (the default caches nothing).
///
/// The CPU tier takes every block the GPU cache evicts (LMCache keeps what the engine drops),
/// bounded and least-recently-used like the GPU cache. A lookup walks the prompt's blocks
/// through both tiers: a block found only in the CPU tier is a CPU hit, loaded back into GPU
/// memory (and kept in the CPU tier, refreshed).
#[derive(Debug, Default)]
pub struct PrefixCache {
    gpu: LruSet,
    cpu: LruSet,
}

impl PrefixCache {
    /// An empty cache of at most `capacity` GPU blocks (0 caches nothing), without a CPU tier.
    pub fn new(capacity: usize) -> Self {
        Self::with_cpu_tier(capacity, 0)
    }

    /// An empty cache of `gpu` GPU blocks and a CPU tier of `cpu` blocks (0: none).
    pub fn with_cpu_tier(gpu: usize, cpu: usize) -> Self {
        Self { gpu: LruSet::new(gpu), cpu: LruSet::new(cpu) }
    }

    /// GPU blocks held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.gpu.blocks.len()
    }

    /// Whether nothing is held in GPU memory.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.gpu.blocks.is_empty()
    }

    /// Blocks held in the CPU tier, and its capacity.
    pub fn cpu_usage(&self) -> (usize, usize) {
        (self.cpu.blocks.len(), self.cpu.capacity)
    }

    /// Looks `prompt` up (longest run of leading blocks held), then holds all its full blocks.
    #[cfg(test)]
    pub fn serve(&mut self, prompt: &str) -> PrefixHit {
        self.serve_tracked(prompt).0
    }

    /// [`PrefixCache::serve`], also reporting what it stored and evicted in each tier.
    pub fn serve_tracked(&mut self, prompt: &str) -> (PrefixHit, CacheChanges) {
        let hashes = block_hashes(prompt);
        let in_gpu = hashes.iter().take_while(|hash| self.gpu.contains(hash)).count();
        let hit = in_gpu + hashes[in_gpu..].iter().take_while(|h| self.gpu.contains(h) || self.cpu.contains(h)).count();
        let cpu_hits: Vec<u64> = hashes[..hit].iter().copied().filter(|h| !self.gpu.contains(h)).collect();
        for &hash in cpu_hits.iter().rev() {
            self.cpu.touch(hash);
        }
        // Last to first: the first block ends up the most recent, so tails are evicted first.
        // A prompt longer than the cache keeps its leading blocks.
        let held = hashes.len().min(self.gpu.capacity);
        for &hash in hashes[..held].iter().rev() {
            self.gpu.touch(hash);
        }
        // Evict after refreshing, so the request's own blocks (the most recent) all stay.
        let evicted = self.gpu.evict_over();
        let offloaded = if self.cpu.capacity > 0 { evicted.clone() } else { Vec::new() };
        // Tails are evicted first, so touching in eviction order leaves heads the most recent.
        offloaded.iter().for_each(|&hash| self.cpu.touch(hash));
        let dropped = self.cpu.evict_over();
        // A GPU block has its parent in GPU memory, so the blocks after the GPU run were new.
        let stored = hashes.get(in_gpu..held).unwrap_or_default().to_vec();
        let parent = in_gpu.checked_sub(1).and_then(|before| hashes.get(before).copied());
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let changes = CacheChanges { first_stored: in_gpu, parent, stored, evicted, offloaded, dropped };
        let hit = PrefixHit { hit: count(hit), blocks: count(hashes.len()), cpu: count(cpu_hits.len()), prefill_us: 0 };
        (hit, changes)
    }

    /// Drops every block of both tiers (vLLM's `/reset_prefix_cache`).
    pub fn clear(&mut self) {
        self.gpu.clear();
        self.cpu.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` distinct words starting at `from`.
    fn words(from: usize, n: usize) -> String {
        (from..from + n).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn only_full_blocks_count_and_hashes_chain() {
        assert!(block_hashes(&words(0, 15)).is_empty());
        assert_eq!(block_hashes(&words(0, 33)).len(), 2);
        // The same second block after a different first block is a different block.
        let a = block_hashes(&format!("{} {}", words(0, 16), words(100, 16)));
        let b = block_hashes(&format!("{} {}", words(50, 16), words(100, 16)));
        assert_ne!(a[1], b[1]);
        // Whitespace does not matter, words do.
        assert_eq!(block_hashes(&words(0, 16)), block_hashes(&words(0, 16).replace(' ', "\n  ")));
    }

    #[test]
    fn a_growing_conversation_hits_its_earlier_blocks() {
        let mut cache = PrefixCache::new(100);
        let turn1 = words(0, 40); // 2 full blocks
        assert_eq!(cache.serve(&turn1), PrefixHit { hit: 0, blocks: 2, ..PrefixHit::default() });
        let turn2 = format!("{turn1} {}", words(1000, 30)); // 70 words: 4 blocks
        assert_eq!(cache.serve(&turn2), PrefixHit { hit: 2, blocks: 4, ..PrefixHit::default() });
        assert_eq!(cache.serve(&turn2), PrefixHit { hit: 4, blocks: 4, ..PrefixHit::default() });
        // Another conversation shares nothing.
        assert_eq!(cache.serve(&words(5000, 64)), PrefixHit { hit: 0, blocks: 4, ..PrefixHit::default() });
        assert_eq!(cache.len(), 8);
        assert_eq!(PrefixHit { hit: 2, blocks: 4, ..PrefixHit::default() }.header_value(), "2/4");
        assert_eq!(PrefixHit { hit: 2, blocks: 4, ..PrefixHit::default() }.hit_tokens(), 32);
    }

    #[test]
    fn eviction_is_lru_and_takes_tails_first() {
        let mut cache = PrefixCache::new(4);
        let a = words(0, 48); // 3 blocks
        let b = words(100, 32); // 2 blocks
        cache.serve(&a);
        cache.serve(&b); // 5 > 4: a's tail (its third block) goes, its head stays
        assert_eq!(cache.len(), 4);
        assert_eq!(cache.serve(&a), PrefixHit { hit: 2, blocks: 3, ..PrefixHit::default() });
        // a was refreshed (3 blocks, evicting b's tail); b keeps its head only.
        assert_eq!(cache.serve(&b), PrefixHit { hit: 1, blocks: 2, ..PrefixHit::default() });
        let mut none = PrefixCache::new(0);
        assert_eq!(none.serve(&a), PrefixHit { hit: 0, blocks: 3, ..PrefixHit::default() });
        assert!(none.is_empty());
    }

    /// The header of `path` answering `body` (through the whole router).
    async fn hit_header(app: &axum::Router, path: &str, body: serde_json::Value) -> String {
        use tower::ServiceExt as _;
        let request = axum::http::Request::post(path)
            .header("content-type", "application/json")
            .header("anthropic-version", "2023-06-01")
            .body(axum::body::Body::from(body.to_string()))
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        response.headers()[PREFIX_HIT_HEADER].to_str().unwrap().to_owned()
    }

    #[tokio::test]
    async fn every_dialect_reports_hits_on_one_engine_cache() {
        use serde_json::json;
        let app = super::super::router(&super::super::SimArgs::default());
        let system = words(0, 40);
        let chat = |user: &str| {
            json!({"model": "sim-small", "max_tokens": 1,
                   "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]})
        };
        // "system:" + 40 words + "user:" + 1 word = 43 words: 2 full blocks.
        assert_eq!(hit_header(&app, "/v1/chat/completions", chat("hi")).await, "0/2");
        assert_eq!(hit_header(&app, "/v1/chat/completions", chat("hello")).await, "2/2");
        let mut streamed = chat("hey");
        streamed["stream"] = json!(true);
        assert_eq!(hit_header(&app, "/v1/chat/completions", streamed).await, "2/2");
        // The same conversation in Anthropic's and Gemini's shapes is the same prompt.
        let anthropic = json!({"model": "sim-small", "max_tokens": 1, "system": system,
                               "messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(hit_header(&app, "/v1/messages", anthropic).await, "2/2");
        let gemini = json!({"systemInstruction": {"parts": [{"text": system}]},
                            "contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
        assert_eq!(hit_header(&app, "/v1beta/models/sim-small:generateContent", gemini).await, "2/2");
        let completion = json!({"model": "sim-small", "max_tokens": 1, "prompt": words(500, 20)});
        assert_eq!(hit_header(&app, "/v1/completions", completion).await, "0/1");
    }

    #[test]
    fn serve_tracked_reports_new_blocks_and_evictions() {
        let mut cache = PrefixCache::new(4);
        let a = block_hashes(&words(0, 48));
        let (_, first) = cache.serve_tracked(&words(0, 48));
        assert_eq!(
            first,
            CacheChanges { first_stored: 0, parent: None, stored: a.clone(), evicted: vec![], ..Default::default() }
        );
        // 2 more blocks of a's conversation: only they are new, after a's last block.
        let longer = format!("{} {}", words(0, 48), words(900, 32));
        let (hit, grown) = cache.serve_tracked(&longer);
        assert_eq!(hit, PrefixHit { hit: 3, blocks: 5, ..PrefixHit::default() });
        // Only 4 fit: the fourth block is stored, the fifth is not; nothing else was held.
        assert_eq!((grown.first_stored, grown.parent, grown.stored.len()), (3, Some(a[2]), 1));
        assert!(grown.evicted.is_empty());
        let (_, other) = cache.serve_tracked(&words(100, 16));
        assert_eq!(other.evicted, [block_hashes(&longer)[3]]); // the tail goes first
        cache.clear();
        assert!(cache.is_empty());
        assert_eq!(cache.serve_tracked(&words(0, 16)).1.stored, a[..1]);
    }

    #[test]
    fn a_prompt_longer_than_the_cache_keeps_its_head() {
        let mut cache = PrefixCache::new(2);
        let long = words(0, 80); // 5 blocks
        cache.serve(&long);
        assert_eq!(cache.serve(&long), PrefixHit { hit: 2, blocks: 5, ..PrefixHit::default() });
    }

    #[test]
    fn the_cpu_tier_keeps_what_the_gpu_cache_evicts() {
        let mut cache = PrefixCache::with_cpu_tier(4, 4);
        let a = words(0, 48); // 3 blocks
        let b = words(100, 48); // 3 blocks
        cache.serve(&a);
        let (_, changes) = cache.serve_tracked(&b); // a's last two blocks leave the GPU cache
        let a_hashes = block_hashes(&a);
        assert_eq!(changes.evicted, [a_hashes[2], a_hashes[1]], "tail first");
        assert_eq!(changes.offloaded, changes.evicted, "the CPU tier takes them");
        assert!(changes.dropped.is_empty());
        assert_eq!(cache.cpu_usage(), (2, 4));
        // a again: its first block in GPU memory, the other two in the CPU tier.
        let (hit, changes) = cache.serve_tracked(&a);
        assert_eq!((hit.hit, hit.blocks, hit.cpu), (3, 3, 2));
        assert_eq!((changes.first_stored, changes.stored.len()), (1, 2), "loaded back into GPU memory");
        // b's tail went to the CPU tier and nothing was dropped yet (4 fit).
        assert_eq!(changes.offloaded.len(), 2);
        // Without the tier, the same sequence finds only a's head.
        let mut plain = PrefixCache::new(4);
        plain.serve(&a);
        plain.serve(&b);
        assert_eq!(plain.serve(&a), PrefixHit { hit: 1, blocks: 3, ..PrefixHit::default() });
    }

    #[test]
    fn the_cpu_tier_is_bounded_and_reports_what_it_drops() {
        let mut cache = PrefixCache::with_cpu_tier(2, 2);
        cache.serve(&words(0, 32));
        cache.serve(&words(100, 32)); // the first prompt's two blocks go to the CPU tier
        let (_, changes) = cache.serve_tracked(&words(200, 32)); // and the second's push them out
        assert_eq!(changes.dropped, block_hashes(&words(0, 32)).into_iter().rev().collect::<Vec<_>>());
        assert_eq!(cache.cpu_usage(), (2, 2));
        cache.clear();
        assert_eq!(cache.cpu_usage(), (0, 2));
    }
}
