//! End to end: `precise_cache_aware` over a pool that scales, its members found two ways:
//!
//! - DNS (`endpoints_dns`), as a Kubernetes headless Service answers: a real DNS server
//!   (Debian's dnsmasq, on a loopback port) answers the pool's name, and the gateway asks it
//!   (`--dns-server`);
//! - an `InferencePool` (`endpoints_inference_pool`): a stand-in Kubernetes API server
//!   ([`kube_api`]: the API's list and watch, its JSON, its 410) serves the pool and its pods,
//!   and the gateway lists and watches them (`--kube-api`, `--kube-token-file`). Besides the
//!   members, it serves a pod not ready yet and pods being deleted (still `Ready`), which must
//!   not be endpoints; once, it forgets its history so that the gateway's watch gets 410 Gone
//!   and lists again; and at the end the pool's selector changes to match no pod.
//!
//! The engines are `ferrogate sim`s on 127.0.0.2–4, each publishing vLLM KV events on the same
//! ports (`kv_events_port`, `kv_replay_port`); the gateway is `serve` with the real filter wasm
//! and two worker VMs. The members change while the gateway runs: an engine that appears is
//! subscribed to and steers its prefixes, one that goes no longer pins anything, one that
//! comes back is resynced from its replay socket. Engines are warmed behind the gateway's back, so only their
//! events can tell it where a prefix is; routing is observed with probes the engines refuse
//! before touching their caches (`x-sim-status: 400`), each naming the engine that answered.
//! Every probe of a warmed prefix must reach its holder.
//!
//! Negative controls ([`controls`]), in the same gateway at the same moment: the same pool
//! routed by `cache_aware` (model [`GUESS`]), and `precise_cache_aware` over static endpoints
//! naming engines 0 and 1 only (model [`STATIC`]); both must miss where [`PRECISE`] hits.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferrogate_sidecar::sim::PREFIX_HIT_HEADER;
use serde_json::Value;

#[path = "common/gateway.rs"]
mod gateway_helper;
use gateway_helper::{gateway_flags, Setup};
#[path = "common/kv_sim.rs"]
mod kv_sim;
use kv_sim::KvSim;
#[path = "common/dnsmasq.rs"]
mod dnsmasq;
use dnsmasq::Dnsmasq;
#[path = "common/kube_api.rs"]
mod kube_api;
use kube_api::KubeApi;

const NAME: &str = "vllm-pool.llm.test";
const HOSTS: [&str; 3] = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
/// Probes per prefix once routing has settled: every one must reach the holder.
const PROBES: usize = 10;
/// Prefixes warmed per phase (four blocks each).
const PREFIXES: usize = 3;
/// The model under test: `precise_cache_aware` over the scaling pool.
const PRECISE: &str = "kv";
/// Negative control: the scaling pool routed by `cache_aware`, which reads no KV events.
const GUESS: &str = "kv-guess";
/// Negative control: `precise_cache_aware` over static `endpoints` naming engines 0 and 1,
/// as the pool was configured before it scaled: engine 2 is never subscribed to nor picked.
const STATIC: &str = "kv-static";
/// One-block control prefixes warmed on each of the three engines (see [`controls`]).
const CONTROL_PER_ENGINE: usize = 8;
/// Probes per control prefix: each probe takes a new connection, which the gateway hands to
/// its two worker VMs in turn, so two probes ask both.
const CONTROL_PROBES: usize = 2;

use kv_sim::words;

fn chat(model: &str, prompt: &str) -> Value {
    kv_sim::chat_for(model, prompt)
}

fn free(host: &str) -> u16 {
    std::net::TcpListener::bind((host, 0)).unwrap().local_addr().unwrap().port()
}

/// Three engines at [`HOSTS`] on one HTTP port and one pair of event ports; new ports when one
/// was taken on some address.
async fn engines() -> (Vec<KvSim>, u16, u16, u16) {
    'attempt: for _ in 0..10 {
        let (http, events, replay) = (free(HOSTS[0]), free(HOSTS[0]), free(HOSTS[0]));
        let mut sims = Vec::new();
        for host in HOSTS {
            let addr: SocketAddr = format!("{host}:{http}").parse().unwrap();
            match KvSim::start_on(addr, format!("tcp://{host}:{events}"), format!("tcp://{host}:{replay}")).await {
                Ok(sim) => sims.push(sim),
                Err(e) => {
                    eprintln!("engine at {addr}: {e}; other ports");
                    continue 'attempt;
                }
            }
        }
        return (sims, http, events, replay);
    }
    panic!("no free ports common to {HOSTS:?}");
}

/// Where the pool's members come from.
enum Members {
    /// A DNS name's records.
    Dns(Dnsmasq),
    /// An `InferencePool`'s pods, and each engine's current pod: its generation (a pod that
    /// comes back after leaving is a new pod) and whether it is a member.
    Api(KubeApi, [(u32, bool); 3]),
}

impl Members {
    /// Starts the source with engines 0 and 1 as members.
    async fn start(api: bool, http: u16) -> Members {
        if api {
            let mut members = Members::Api(KubeApi::start(http).await, [(0, false); 3]);
            members.set(&[0, 1], false);
            members
        } else {
            Members::Dns(Dnsmasq::start(NAME, &HOSTS[..2]).await)
        }
    }

    /// The provider's source of endpoints.
    fn provider_field(&self, http: u16) -> String {
        match self {
            Members::Dns(_) => format!("endpoints_dns: '{NAME}:{http}'"),
            Members::Api(..) => format!("endpoints_inference_pool: '{}/{}'", kube_api::NAMESPACE, kube_api::POOL),
        }
    }

    /// The engines in `members` are the pool from now on. Through the API: engines outside it
    /// keep a pod that is not ready, and one that leaves is deleted in two steps (terminating,
    /// then gone); with `forget`, the API also forgets its history (watches get 410).
    fn set(&mut self, members: &[usize], forget: bool) {
        match self {
            Members::Dns(dns) => dns.set(NAME, &members.iter().map(|&i| HOSTS[i]).collect::<Vec<_>>()),
            Members::Api(api, pods) => {
                for (i, (generation, member)) in pods.iter_mut().enumerate() {
                    // A member that leaves: its pod is deleted, and a new one starts.
                    *generation += u32::from(*member && !members.contains(&i));
                    *member = members.contains(&i);
                }
                let pods: Vec<(String, &str, bool)> =
                    pods.iter().enumerate().map(|(i, (g, m))| (format!("vllm-{i}-{g}"), HOSTS[i], *m)).collect();
                let ready: Vec<(&str, &str)> = pods.iter().filter(|p| p.2).map(|p| (p.0.as_str(), p.1)).collect();
                let starting: Vec<(&str, &str)> = pods.iter().filter(|p| !p.2).map(|p| (p.0.as_str(), p.1)).collect();
                if forget {
                    api.set_pods_forgetting(&ready, &starting);
                } else {
                    api.set_pods(&ready, &starting);
                }
            }
        }
    }

    /// The gateway's flags for this source.
    fn flags(&self, token_file: &std::path::Path) -> Vec<String> {
        match self {
            Members::Dns(dns) => {
                vec!["--dns-server".into(), dns.addr.to_string(), "--dns-refresh-ms".into(), "200".into()]
            }
            Members::Api(api, _) => {
                std::fs::write(token_file, format!("{}\n", kube_api::TOKEN)).unwrap();
                let file = token_file.to_str().unwrap().to_string();
                vec!["--kube-api".into(), api.url(), "--kube-token-file".into(), file]
            }
        }
    }
}

/// The providers (the scaling pool `pool` first, its endpoints from `members`, then `fixed`:
/// static endpoints 0 and 1 with their event sockets) and the three models over them.
fn config(sims: &[KvSim], members: &Members, http: u16, events: u16, replay: u16) -> ([String; 2], String) {
    let pool = format!(
        "{{ name: pool, kind: openai_compatible, base_url: 'http://{NAME}:{http}', {}, \
         kv_events_port: {events}, kv_replay_port: {replay}, kv_block_size: 16, kv_tokenize: true }}",
        members.provider_field(http)
    );
    let fixed = format!(
        "{{ name: fixed, kind: openai_compatible, base_url: 'http://fixed.internal', kv_block_size: 16, \
         endpoints: [{}, {}] }}",
        sims[0].endpoint_entry(),
        sims[1].endpoint_entry()
    );
    let model = |name: &str, strategy: &str, provider: &str| {
        format!("  - {{ name: {name}, strategy: {strategy}, targets: [{{ provider: {provider}, model: kv }}] }}\n")
    };
    let models = model(PRECISE, "precise_cache_aware", "pool")
        + &model(GUESS, "cache_aware", "pool")
        + &model(STATIC, "precise_cache_aware", "fixed");
    ([pool, fixed], models)
}

struct Pool {
    client: reqwest::Client,
    gateway: Setup,
    members: Members,
    sims: Vec<KvSim>,
    http: u16,
}

impl Pool {
    /// Engines 0 and 1 in the pool, from DNS or (`api`) from an InferencePool.
    async fn start(api: bool) -> Pool {
        if std::env::var_os("KV_E2E_LOG").is_some() {
            std::mem::forget(ferrogate_sidecar::telemetry::init(false));
        }
        let (sims, http, events, replay) = engines().await;
        let members = Members::start(api, http).await;
        let (providers, models) = config(&sims, &members, http, events, replay);
        let token = std::env::temp_dir().join(format!("ferrogate-kube-token-{}-{}", std::process::id(), http));
        let flags = members.flags(&token);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let gateway = gateway_flags(&providers, &models, "", 2, &flags).await;
        // No idle connections kept: every probe is a new connection, and the gateway's acceptor
        // spreads new connections over its worker VMs, so probes ask both VMs, not one.
        let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
        Pool { client, gateway, members, sims, http }
    }

    fn address(&self, i: usize) -> String {
        format!("{}:{}", HOSTS[i], self.http)
    }

    /// The pool is engines `members` from now on; returns once the KV service follows
    /// (exactly those endpoints, each connected). `forget`: see [`Members::set`].
    async fn scale(&mut self, members: &[usize]) {
        self.scale_forgetting(members, false).await;
    }

    async fn scale_forgetting(&mut self, members: &[usize], forget: bool) {
        self.members.set(members, forget);
        let mut want: Vec<String> = members.iter().map(|&i| self.address(i)).collect();
        want.sort();
        self.until(&format!("the pool to be {want:?}"), |kv| {
            let mut have: Vec<String> = kv.iter().map(|e| e["endpoint"].as_str().unwrap_or("").to_string()).collect();
            have.sort();
            have == want && kv.iter().all(|e| e["connected"] == true)
        })
        .await;
    }

    /// The admin view of the scaling pool's endpoints (`GET /api/v1/kv` lists `fixed` too).
    async fn kv(&self) -> Vec<Value> {
        kv_sim::kv_view(&self.client, self.gateway.gateway.admin_addr()).await
    }

    /// Polls [`Pool::kv`] until `f` holds, for at most a minute; the last view.
    async fn until(&self, what: &str, f: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        kv_sim::kv_until(&self.client, self.gateway.gateway.admin_addr(), what, Duration::from_secs(60), f).await
    }

    /// Blocks the KV service holds for engine `i` in `kv` (0 when it is not in the pool).
    fn blocks(&self, kv: &[Value], i: usize) -> u64 {
        kv.iter().find(|e| e["endpoint"] == self.address(i).as_str()).map_or(0, |e| e["blocks"].as_u64().unwrap_or(0))
    }

    /// Warms engine `i` with `prompts` directly (the gateway sees none of it) and waits until
    /// the KV service holds every block they stored (the engine's `x-sim-prefix-hit`).
    async fn warm(&self, i: usize, prompts: &[String]) {
        let had = self.blocks(&self.kv().await, i);
        let mut stored = 0;
        for prompt in prompts {
            let url = format!("http://{}/v1/chat/completions", self.sims[i].addr);
            let response = self.client.post(url).json(&chat(PRECISE, prompt)).send().await.unwrap();
            assert_eq!(response.status(), 200);
            let hit = response.headers()[PREFIX_HIT_HEADER].to_str().unwrap().to_string();
            let (hit, full) = hit.split_once('/').unwrap();
            stored += full.parse::<u64>().unwrap() - hit.parse::<u64>().unwrap();
        }
        let want = had + stored;
        self.until(&format!("{want} blocks of engine {i}"), |kv| self.blocks(kv, i) >= want).await;
    }

    /// The engine's own token ids for `prompt`.
    async fn tokens(&self, prompt: &str) -> String {
        kv_sim::token_ids(&self.client, self.sims[0].addr, PRECISE, prompt).await
    }

    /// The engine the gateway picks for `prompt` (sent with its token ids) as `model`.
    async fn probe(&self, model: &str, prompt: &str) -> String {
        kv_sim::probe(&self.client, &self.gateway.base, model, prompt, self.tokens(prompt).await).await
    }

    /// How many of `n` probes of `prompt` as `model` reach engine `i`.
    async fn landed(&self, model: &str, prompt: &str, i: usize, n: usize) -> usize {
        let mut hits = 0;
        for _ in 0..n {
            hits += usize::from(self.probe(model, prompt).await == self.address(i));
        }
        hits
    }

    /// Every one of [`PROBES`] probes of each prompt reaches engine `i`, once settled.
    async fn every_probe_reaches(&self, i: usize, prompts: &[String]) {
        self.settled(i, prompts, true).await;
    }

    /// None of [`PROBES`] probes of each prompt reaches engine `i`, once settled.
    async fn no_probe_reaches(&self, i: usize, prompts: &[String]) {
        self.settled(i, prompts, false).await;
    }

    /// For each prompt: [`Pool::settle`], then every one of [`PROBES`] more probes reaches
    /// engine `i` (`to: true`) or none does (`to: false`); no miss is tolerated after settling.
    async fn settled(&self, i: usize, prompts: &[String], to: bool) {
        for prompt in prompts {
            self.settle(prompt, i, to).await;
            let hits = self.landed(PRECISE, prompt, i, PROBES).await;
            let want = if to { PROBES } else { 0 };
            assert_eq!(hits, want, "{prompt:.20}… reached engine {i} {hits} times of {PROBES}: {:?}", self.kv().await);
        }
    }

    /// Probes `prompt` until [`PROBES`] in a row reach engine `i` (`to: true`) or avoid it,
    /// within a minute. Why wait at all: the KV service holding the blocks (what [`Pool::warm`]
    /// and [`Pool::scale`] wait for) is not yet the worker VMs holding them. Each VM polls the
    /// sidecar's KV feed every 100 ms and the DNS answer reaches it with the targets feed, and
    /// neither feed shows how far a VM has read, so the test waits on what it tests: the
    /// routing. Blocks arrive in one event per prompt, so a VM may hold one prompt's and not
    /// yet the next one's (seen on a loaded machine): settled prompt by prompt. A miss here is
    /// a VM on an older feed; after the streak none is tolerated ([`Pool::settled`]).
    async fn settle(&self, prompt: &str, i: usize, to: bool) {
        let (deadline, mut streak) = (Instant::now() + Duration::from_secs(60), 0);
        while streak < PROBES {
            if (self.probe(PRECISE, prompt).await == self.address(i)) == to {
                streak += 1;
                continue;
            }
            streak = 0;
            assert!(Instant::now() < deadline, "{prompt:.20}… never settled (engine {i}, {to}): {:?}", self.kv().await);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// `ferrogate_kv_index_blocks` of the scaling pool, from the admin `/metrics`.
    async fn indexed_blocks(&self) -> u64 {
        let url = format!("http://{}/metrics", self.gateway.gateway.admin_addr());
        let metrics = self.client.get(url).send().await.unwrap().text().await.unwrap();
        metrics
            .lines()
            .find(|l| l.starts_with("ferrogate_kv_index_blocks{") && l.contains("provider=\"pool\""))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .map(|v| v as u64)
            .expect("ferrogate_kv_index_blocks of the pool")
    }
}

fn prompts(tag: &str) -> Vec<String> {
    (0..PREFIXES).map(|c| words(&format!("{tag}{c}w"), 63)).collect()
}

/// The negative controls, on the pool of three: [`CONTROL_PER_ENGINE`] one-block prefixes
/// warmed on each engine directly, first probed as [`PRECISE`], which must reach the holder
/// every time once settled (so every worker VM holds their blocks: a control's misses are its
/// strategy's, not a VM lagging), then as [`GUESS`] and [`STATIC`]. Neither control model has
/// routed them before, and no model learns from another's picks (each keeps its own prefix
/// record), so `cache_aware` cannot know where they are.
///
/// Odds of a chance pass. `cache_aware` reads no KV events: a prefix it never routed goes to
/// its home, a hash of its opening on a ring over the endpoints' names (new ports every run),
/// and every later probe follows that first pick. With ring shares s0 + s1 + s2 = 1, every one
/// of the 24 homes is the holder with probability (s0·s1·s2)^8 ≤ (1/27)^8 = 3^-24 ≈ 3.5e-12,
/// whatever the ring. `fixed` has no endpoint for engine 2: its probes never reach it.
async fn controls(pool: &Pool) {
    let held: Vec<(String, usize)> =
        (0..3 * CONTROL_PER_ENGINE).map(|k| (words(&format!("ctl{k}w"), 15), k % 3)).collect();
    for i in 0..3 {
        let mine: Vec<String> = held.iter().filter(|(_, h)| *h == i).map(|(p, _)| p.clone()).collect();
        pool.warm(i, &mine).await;
        pool.every_probe_reaches(i, &mine).await;
    }
    let (mut guessed, mut pinned) = (0, 0);
    for (prompt, i) in &held {
        guessed += pool.landed(GUESS, prompt, *i, CONTROL_PROBES).await;
        if *i == 2 {
            pinned += pool.landed(STATIC, prompt, 2, CONTROL_PROBES).await;
        }
    }
    let total = held.len() * CONTROL_PROBES;
    eprintln!("controls: cache_aware reached the holder {guessed} times of {total}; static endpoints {pinned}");
    assert!(guessed < total, "cache_aware reached the holder every time: the test cannot tell it from precise");
    assert_eq!(pinned, 0, "static endpoints reached an engine they do not name");
}

/// Engine 0 leaves the name: its blocks leave the index (only the other engines' remain) and
/// no probe of the A prefixes reaches it.
async fn scale_down(pool: &mut Pool, a: &[String]) {
    let view = pool.kv().await;
    let held_by_others = pool.blocks(&view, 1) + pool.blocks(&view, 2);
    pool.scale(&[1, 2]).await;
    assert_eq!(pool.indexed_blocks().await, held_by_others, "only the remaining engines' blocks are indexed");
    pool.no_probe_reaches(0, a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_routing_follows_a_pool_that_scales_through_dns() {
    let mut pool = Pool::start(false).await;
    pool.scale(&[0, 1]).await;

    // Engine 0 holds the A prefixes: every probe of them goes there.
    let a = prompts("alpha");
    pool.warm(0, &a).await;
    pool.every_probe_reaches(0, &a).await;

    // Scaled up: engine 2 appears, is subscribed to, and steers its own prefixes; engine 0
    // keeps its blocks (same index, no resync needed).
    pool.scale(&[0, 1, 2]).await;
    let b = prompts("bravo");
    pool.warm(2, &b).await;
    pool.every_probe_reaches(2, &b).await;
    pool.every_probe_reaches(0, &a).await;
    controls(&pool).await;

    // Scaled down: engine 0's blocks pin nothing; the A prefixes go to the engines left.
    let had = pool.blocks(&pool.kv().await, 0);
    scale_down(&mut pool, &a).await;

    // Engine 0 comes back at the same address: resynced from its replay socket (every block it
    // still holds, A prefixes among them), it steers them again.
    pool.scale(&[0, 1, 2]).await;
    pool.until(&format!("engine 0 resynced to {had} blocks"), |kv| pool.blocks(kv, 0) >= had).await;
    pool.every_probe_reaches(0, &a).await;
    pool.gateway.gateway.shutdown().await;
}

/// The same scaling, the members an InferencePool's pods read through the Kubernetes API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_routing_follows_an_inference_pool_that_scales() {
    let mut pool = Pool::start(true).await;
    pool.scale(&[0, 1]).await;
    let a = prompts("alpha");
    pool.warm(0, &a).await;
    pool.every_probe_reaches(0, &a).await;

    // Engine 2's pod, not ready until now, becomes ready: subscribed to, it steers its prefixes.
    pool.scale(&[0, 1, 2]).await;
    let b = prompts("bravo");
    pool.warm(2, &b).await;
    pool.every_probe_reaches(2, &b).await;
    pool.every_probe_reaches(0, &a).await;

    // Engine 0's pod is being deleted (still Ready): it leaves the pool.
    let had = pool.blocks(&pool.kv().await, 0);
    scale_down(&mut pool, &a).await;

    // A new pod at engine 0's address becomes ready while the API forgets the history the
    // gateway's watch stands on: the watch gets 410 Gone, the gateway lists the pods again.
    let Members::Api(api, _) = &pool.members else { unreachable!() };
    let lists = api.pod_lists();
    pool.scale_forgetting(&[0, 1, 2], true).await;
    let Members::Api(api, _) = &pool.members else { unreachable!() };
    assert!(api.pod_lists() > lists, "the pods were listed again after 410 Gone");
    pool.until(&format!("engine 0 resynced to {had} blocks"), |kv| pool.blocks(kv, 0) >= had).await;
    pool.every_probe_reaches(0, &a).await;

    // The pool now selects other pods (none): its endpoints go, and its prefixes pin nothing.
    api.set_pool_app("another-model");
    pool.until("an empty pool", <[Value]>::is_empty).await;
    pool.gateway.gateway.shutdown().await;
}
