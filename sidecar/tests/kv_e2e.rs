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

/// How soon an engine's event steers routing: docs/kv-routing.md states one second (a 100 ms
/// tick plus the poll's round trip). A loaded 2-core test machine can starve a worker VM's
/// tick, so the bound checked is this one times [`LOADED_SLACK`]; the time the first right
/// pick took is printed with any failure.
const STEER_WITHIN: Duration = Duration::from_secs(1);
const LOADED_SLACK: u32 = 15;
/// Picks of the holder in a row that count as settled: both worker VMs have polled the change.
const SETTLED: usize = 5;
/// Probes once settled: every one must reach the holder (round-robin over three engines
/// would pass one in 3^10 times).
const PROBES: usize = 10;

use kv_sim::words;

fn chat(prompt: &str) -> Value {
    kv_sim::chat_for("kv", prompt)
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

    /// Checks that `prompt` is steered to engine `want`: routing settles on it ([`SETTLED`]
    /// picks of it in a row) within the steering bound of `since`, stretched for load, and
    /// then every one of [`PROBES`] probes goes there.
    async fn steers_to(&self, prompt: &str, want: usize, since: Instant) {
        self.steers(prompt, want, since, true).await;
    }

    /// [`Fleet::steers_to`], with the prompt's token ids in the header or left to `kv_tokenize`.
    async fn steers(&self, prompt: &str, want: usize, since: Instant, with_ids: bool) {
        let deadline = STEER_WITHIN * LOADED_SLACK;
        let mut streak = 0;
        let mut first = None;
        while streak < SETTLED {
            let got = self.probe(prompt, with_ids).await;
            if got == want {
                first.get_or_insert_with(|| since.elapsed());
                streak += 1;
            } else {
                streak = 0;
            }
            if since.elapsed() >= deadline {
                panic!(
                    "{prompt:.20}… not settled on engine {want} after {:?} (first pick of it after {first:?}), \
                     last went to {got}: {:?} {:?}",
                    since.elapsed(),
                    self.kv().await,
                    self.metrics("kv_decisions").await
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for n in 0..PROBES {
            let got = self.probe(prompt, with_ids).await;
            assert_eq!(got, want, "settled probe {n} of {prompt:.20}… went elsewhere: {:?}", self.kv().await);
        }
    }

    /// The admin /metrics lines whose text contains `name`.
    async fn metrics(&self, name: &str) -> Vec<String> {
        let url = format!("http://{}/metrics", self.gateway.gateway.admin_addr());
        let metrics = self.client.get(url).send().await.unwrap().text().await.unwrap();
        metrics.lines().filter(|l| l.contains(name)).map(str::to_string).collect()
    }

    /// The value of the one metric line that starts with `series` (name and labels).
    async fn metric(&self, series: &str) -> u64 {
        let lines = self.metrics(series).await;
        let line = lines.iter().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("no {series}: {lines:?}"));
        line.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64
    }

    /// The pool's `ferrogate_kv_events_total`, summed over its engines.
    async fn events_total(&self) -> u64 {
        let lines = self.metrics("ferrogate_kv_events_total{provider=\"pool\"").await;
        lines.iter().map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64).sum()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engines_events_steer_every_request_to_the_longest_held_prefix() {
    let fleet = Fleet::start().await;
    let events_before = fleet.events_total().await;
    // Every conversation warmed on one engine goes there, all of them.
    for c in 0..6 {
        let prompt = words(&format!("c{c}w"), 70);
        let since = Instant::now();
        fleet.warm(c % 3, &prompt, false).await;
        fleet.steers_to(&format!("{prompt} and a follow-up question"), c % 3, since).await;
    }
    // The metrics tell the same story as the admin view: the warm-ups' events were counted,
    // and the index holds exactly the blocks the endpoints hold.
    assert!(fleet.events_total().await > events_before, "warming counts in ferrogate_kv_events_total");
    let held: u64 = fleet.kv().await.iter().map(|e| e["blocks"].as_u64().unwrap()).sum();
    assert!(held >= 6 * 4, "six 70-word prompts, four full blocks each at least: {held}");
    assert_eq!(fleet.metric("ferrogate_kv_index_blocks{provider=\"pool\"}").await, held);
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
    fleet.steers(&t, 1, since, false).await;
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
