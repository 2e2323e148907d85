//! End to end: `precise_cache_aware` in `ferrogate serve` (the real filter wasm in the
//! embedded host, two worker VMs) over three `ferrogate sim` engines publishing vLLM KV-cache
//! events over ZMQ, with replay sockets.
//!
//! Engines are warmed behind the gateway's back (requests sent to them directly), so only
//! their events can tell the gateway where a prefix is. Routing is observed with probes the
//! engines refuse before touching their caches (`x-sim-status: 400`), so observing changes
//! nothing; each probe names the engine that answered (`x-sim-endpoint`).

use std::time::{Duration, Instant};

use ferrogate_sidecar::sim::{ENDPOINT_HEADER, KV_DROP_HEADER, STATUS_HEADER};
use serde_json::{json, Value};

#[path = "common/gateway.rs"]
mod gateway_helper;
use gateway_helper::{gateway_on, Setup};
#[path = "common/kv_sim.rs"]
mod kv_sim;
use kv_sim::KvSim;

/// How soon an engine's event must steer routing (the default tick is 250 ms; the bound
/// stated in docs/routing.md is one second).
const STEER_WITHIN: Duration = Duration::from_secs(1);

fn words(tag: &str, n: usize) -> String {
    (0..n).map(|i| format!("{tag}{i}")).collect::<Vec<_>>().join(" ")
}

fn chat(prompt: &str) -> Value {
    json!({"model": "kv", "messages": [{"role": "user", "content": prompt}], "max_tokens": 2})
}

struct Fleet {
    client: reqwest::Client,
    gateway: Setup,
    sims: Vec<KvSim>,
}

impl Fleet {
    async fn start() -> Fleet {
        if std::env::var_os("KV_E2E_LOG").is_some() {
            std::mem::forget(ferrogate_sidecar::telemetry::init(false));
        }
        let mut sims = Vec::new();
        for _ in 0..3 {
            sims.push(KvSim::start(None).await);
        }
        let endpoints: Vec<String> = sims.iter().map(KvSim::endpoint_entry).collect();
        let provider = format!(
            "{{ name: pool, kind: openai_compatible, base_url: 'http://pool.internal', kv_block_size: 16, \
             kv_tokenize: true, endpoints: [{}] }}",
            endpoints.join(", ")
        );
        let models = "  - { name: kv, strategy: precise_cache_aware, targets: [{ provider: pool, model: kv }] }\n";
        let gateway = gateway_on(&[provider], models, "", 2).await;
        let fleet = Fleet { client: reqwest::Client::new(), gateway, sims };
        fleet.until("every engine connected", |kv| (0..3).all(|i| kv[i]["connected"] == true)).await;
        fleet
    }

    /// The admin view of the pool's endpoints.
    async fn kv(&self) -> Vec<Value> {
        kv_sim::kv_view(&self.client, self.gateway.gateway.admin_addr()).await
    }

    async fn until(&self, what: &str, f: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        kv_sim::kv_until(&self.client, self.gateway.gateway.admin_addr(), what, Duration::from_secs(15), f).await
    }

    /// Sends `prompt` to engine `i` directly (it caches it and publishes events).
    async fn warm(&self, i: usize, prompt: &str, drop_batch: bool) {
        let mut request =
            self.client.post(format!("http://{}/v1/chat/completions", self.sims[i].addr)).json(&chat(prompt));
        if drop_batch {
            request = request.header(KV_DROP_HEADER, "1");
        }
        assert_eq!(request.send().await.unwrap().status(), 200);
    }

    /// The engine's own token ids for `prompt`.
    async fn tokens(&self, prompt: &str) -> String {
        let url = format!("http://{}/tokenize", self.sims[0].addr);
        let body: Value = self.client.post(url).json(&chat(prompt)).send().await.unwrap().json().await.unwrap();
        let ids: Vec<String> = body["tokens"].as_array().unwrap().iter().map(|t| t.to_string()).collect();
        ids.join(",")
    }

    /// Which engine the gateway picks for `prompt` (with its token ids, or none): a probe the
    /// engine refuses before looking at its cache.
    async fn probe(&self, prompt: &str, with_ids: bool) -> usize {
        let mut request = self
            .client
            .post(format!("{}/v1/chat/completions", self.gateway.base))
            .json(&chat(prompt))
            .header(STATUS_HEADER, "400");
        if with_ids {
            request = request.header("x-ferrogate-token-ids", self.tokens(prompt).await);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 400, "the engine's own refusal");
        let endpoint = response.headers()[ENDPOINT_HEADER].to_str().unwrap().to_string();
        self.sims.iter().position(|s| s.addr.to_string() == endpoint).unwrap()
    }

    /// Probes until `prompt` goes to engine `want`, within [`STEER_WITHIN`] of `since`.
    async fn steers_to(&self, prompt: &str, want: usize, since: Instant) {
        loop {
            let got = self.probe(prompt, true).await;
            if got == want {
                return;
            }
            if since.elapsed() >= STEER_WITHIN {
                let url = format!("http://{}/metrics", self.gateway.gateway.admin_addr());
                let metrics = self.client.get(url).send().await.unwrap().text().await.unwrap();
                let kv: Vec<&str> = metrics.lines().filter(|l| l.contains("kv_decisions")).collect();
                panic!("{prompt:.20}… still goes to engine {got}, not {want}: {:?} {kv:?}", self.kv().await);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engines_events_steer_every_request_to_the_longest_held_prefix() {
    let fleet = Fleet::start().await;
    // Every conversation warmed on one engine goes there, all of them.
    for c in 0..6 {
        let prompt = words(&format!("c{c}w"), 70);
        let since = Instant::now();
        fleet.warm(c % 3, &prompt, false).await;
        fleet.steers_to(&format!("{prompt} and a follow-up question"), c % 3, since).await;
    }
    // The longest held prefix wins: engine 0 holds two blocks of Q, engine 1 all of it, and
    // engine 2 its first block.
    let q = words("q", 80);
    let head = |n: usize| q.split(' ').take(n).collect::<Vec<_>>().join(" ");
    fleet.warm(0, &head(40), false).await;
    fleet.warm(2, &head(20), false).await;
    let since = Instant::now();
    fleet.warm(1, &q, false).await;
    fleet.steers_to(&q, 1, since).await;
    // AllBlocksCleared: engine 1 forgets everything; engine 0's two blocks now win.
    let since = Instant::now();
    let reset = fleet.client.post(format!("http://{}/reset_prefix_cache", fleet.sims[1].addr)).send().await.unwrap();
    assert!(reset.status().is_success());
    fleet.steers_to(&q, 0, since).await;
    // BlockRemoved: engine 0 evicts Q under new traffic; engine 2's one block wins.
    let since = Instant::now();
    for filler in 0..8 {
        fleet.warm(0, &words(&format!("f{filler}w"), 70), false).await;
    }
    fleet.steers_to(&q, 2, since).await;
    let kv = fleet.kv().await;
    assert!(kv[0]["blocks"].as_u64().unwrap() <= 24, "engine 0 holds at most its cache: {kv:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gaps_are_replayed_and_a_restarted_engine_starts_over() {
    let mut fleet = Fleet::start().await;
    // A batch lost on the live stream (dropped as at the publisher's high-water mark) is
    // fetched from the replay socket when the next batch shows the gap.
    fleet.warm(2, &words("first", 40), false).await;
    fleet.until("engine 2's first batch", |kv| kv[2]["last_sequence"] == 0).await;
    let lost = words("lost", 70);
    fleet.warm(2, &lost, true).await;
    let since = Instant::now();
    fleet.warm(2, &words("next", 40), false).await;
    fleet.steers_to(&lost, 2, since).await;
    let kv = fleet.kv().await;
    // Two replays: the one every new subscription makes, and the gap's.
    assert_eq!((kv[2]["gaps"].as_u64(), kv[2]["replays"].as_u64()), (Some(1), Some(2)), "{kv:?}");
    // Engine 0 restarts (same addresses, sequence from 0, empty cache): its index starts over.
    let before = words("before", 70);
    fleet.warm(0, &before, false).await;
    fleet.until("engine 0's blocks", |kv| kv[0]["blocks"].as_u64() >= Some(4)).await;
    fleet.sims[0].restart().await;
    fleet.until("engine 0 back", |kv| kv[0]["connected"] == true).await;
    fleet.warm(0, &words("after", 40), false).await;
    let kv = fleet.until("engine 0's restart seen", |kv| kv[0]["restarts"].as_u64() == Some(1)).await;
    assert_eq!(kv[0]["blocks"].as_u64(), Some(2), "only what the new engine cached: {kv:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_ids_come_from_the_header_or_tokenize_and_are_never_required() {
    let fleet = Fleet::start().await;
    // kv_tokenize: no header, the gateway asks a replica's /tokenize.
    let t = words("tok", 70);
    let since = Instant::now();
    fleet.warm(1, &t, false).await;
    loop {
        if fleet.probe(&t, false).await == 1 {
            break;
        }
        assert!(since.elapsed() < STEER_WITHIN, "kv_tokenize did not steer");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A request that cannot be tokenized (the Anthropic dialect) is served all the same.
    let messages = json!({"model": "kv", "max_tokens": 2, "messages": [{"role": "user", "content": "hello"}]});
    let response =
        fleet.client.post(format!("{}/v1/messages", fleet.gateway.base)).json(&messages).send().await.unwrap();
    assert_eq!(response.status(), 200);
    // A malformed header is the caller's error, in the caller's dialect, naming the header.
    let bad = fleet
        .client
        .post(format!("{}/v1/messages", fleet.gateway.base))
        .header("x-ferrogate-token-ids", "1,two,3")
        .json(&messages)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let body: Value = bad.json().await.unwrap();
    assert_eq!(body["type"], "error", "Anthropic's error shape: {body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("x-ferrogate-token-ids"), "{body}");
}
