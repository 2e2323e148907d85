//! End to end: `precise_cache_aware` over a pool that follows its DNS name, as a Kubernetes
//! headless Service does. A real DNS server (Debian's dnsmasq, on a loopback port) answers the
//! pool's name with the addresses of `ferrogate sim` engines on 127.0.0.2–4, each publishing
//! vLLM KV events on the same ports (`kv_events_port`, `kv_replay_port`); the gateway
//! (`serve`, the real filter wasm, two worker VMs) asks that server (`--dns-server`).
//!
//! The name's records change while the gateway runs: an engine that appears is subscribed to
//! and steers its prefixes, one that goes no longer pins anything, one that comes back is
//! resynced from its replay socket. Engines are warmed behind the gateway's back, so only their
//! events can tell it where a prefix is; routing is observed with probes the engines refuse
//! before touching their caches (`x-sim-status: 400`), each naming the engine that answered.
//! Every probe of a warmed prefix must reach its holder: with static endpoints the gateway
//! would not know the added engine, and `cache_aware` would guess.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferrogate_sidecar::sim::{ENDPOINT_HEADER, STATUS_HEADER};
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

const NAME: &str = "vllm-pool.llm.test";
const HOSTS: [&str; 3] = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
/// Probes per prefix once routing has settled: every one must reach the holder.
const PROBES: usize = 10;
/// Prefixes warmed per phase: with three, a guess (cache_aware) is right for all of them by
/// chance about once in eight runs at best.
const PREFIXES: usize = 3;

use kv_sim::words;

fn chat(prompt: &str) -> Value {
    kv_sim::chat_for("kv", prompt)
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

struct Pool {
    client: reqwest::Client,
    gateway: Setup,
    dns: Dnsmasq,
    sims: Vec<KvSim>,
    http: u16,
}

impl Pool {
    async fn start(strategy: &str) -> Pool {
        if std::env::var_os("KV_E2E_LOG").is_some() {
            std::mem::forget(ferrogate_sidecar::telemetry::init(false));
        }
        let (sims, http, events, replay) = engines().await;
        let dns = Dnsmasq::start(NAME, &HOSTS[..2]).await;
        let provider = format!(
            "{{ name: pool, kind: openai_compatible, base_url: 'http://{NAME}:{http}', endpoints_dns: '{NAME}:{http}', \
             kv_events_port: {events}, kv_replay_port: {replay}, kv_block_size: 16, kv_tokenize: true }}"
        );
        let models = format!("  - {{ name: kv, strategy: {strategy}, targets: [{{ provider: pool, model: kv }}] }}\n");
        let server = dns.addr.to_string();
        let flags = ["--dns-server", server.as_str(), "--dns-refresh-ms", "200"];
        let gateway = gateway_flags(&[provider], &models, "", 2, &flags).await;
        Pool { client: reqwest::Client::new(), gateway, dns, sims, http }
    }

    fn address(&self, i: usize) -> String {
        format!("{}:{}", HOSTS[i], self.http)
    }

    /// The name answers engines `members` from now on; returns once the KV service follows
    /// (exactly those endpoints, each connected).
    async fn scale(&mut self, members: &[usize]) {
        let hosts: Vec<&str> = members.iter().map(|&i| HOSTS[i]).collect();
        self.dns.set(NAME, &hosts);
        let mut want: Vec<String> = members.iter().map(|&i| self.address(i)).collect();
        want.sort();
        self.until(&format!("the pool to be {want:?}"), |kv| {
            let mut have: Vec<String> = kv.iter().map(|e| e["endpoint"].as_str().unwrap_or("").to_string()).collect();
            have.sort();
            have == want && kv.iter().all(|e| e["connected"] == true)
        })
        .await;
    }

    async fn until(&self, what: &str, f: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        kv_sim::kv_until(&self.client, self.gateway.gateway.admin_addr(), what, Duration::from_secs(60), f).await
    }

    /// The admin view's entry for engine `i`.
    fn entry<'a>(&self, kv: &'a [Value], i: usize) -> Option<&'a Value> {
        kv.iter().find(|e| e["endpoint"] == self.address(i).as_str())
    }

    /// Warms engine `i` with `prompts` directly and waits until the KV service holds blocks
    /// of them for it.
    async fn warm(&self, i: usize, prompts: &[String]) {
        let before = self.until("the view", |_| true).await;
        let had = self.entry(&before, i).map_or(0, |e| e["blocks"].as_u64().unwrap_or(0));
        for prompt in prompts {
            let url = format!("http://{}/v1/chat/completions", self.sims[i].addr);
            assert_eq!(self.client.post(url).json(&chat(prompt)).send().await.unwrap().status(), 200);
        }
        self.until(&format!("blocks of engine {i}"), |kv| {
            self.entry(kv, i).is_some_and(|e| e["blocks"].as_u64().unwrap_or(0) > had)
        })
        .await;
    }

    /// The engine's own token ids for `prompt`.
    async fn tokens(&self, prompt: &str) -> String {
        let url = format!("http://{}/tokenize", self.sims[0].addr);
        let body: Value = self.client.post(url).json(&chat(prompt)).send().await.unwrap().json().await.unwrap();
        body["tokens"].as_array().unwrap().iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
    }

    /// Which engine the gateway picks for `prompt` (sent with its token ids).
    async fn probe(&self, prompt: &str) -> String {
        let response = self
            .client
            .post(format!("{}/v1/chat/completions", self.gateway.base))
            .json(&chat(prompt))
            .header(STATUS_HEADER, "400")
            .header("x-ferrogate-token-ids", self.tokens(prompt).await)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "the engine's own refusal");
        response.headers()[ENDPOINT_HEADER].to_str().unwrap().to_string()
    }

    /// For each prompt: once the worker VMs have read a feed holding its blocks (it reaches
    /// engine `i` [`PROBES`] times in a row, within a minute), every one of [`PROBES`] more
    /// probes reaches it. Settled prompt by prompt: the engine's blocks arrive in one event per
    /// prompt, and a VM may have read a feed holding the first prompt's blocks but not yet the
    /// next one's (seen on a loaded machine).
    async fn every_probe_reaches(&self, i: usize, prompts: &[String]) {
        self.settled(i, prompts, true).await;
    }

    /// For each prompt: once the worker VMs have read the feed without engine `i` (a run of
    /// [`PROBES`] probes elsewhere, within a minute), no probe of [`PROBES`] more reaches it.
    async fn no_probe_reaches(&self, i: usize, prompts: &[String]) {
        self.settled(i, prompts, false).await;
    }

    /// Probes each prompt until [`PROBES`] in a row reach engine `i` (`to: true`) or avoid it,
    /// then asserts that [`PROBES`] more do the same.
    async fn settled(&self, i: usize, prompts: &[String], to: bool) {
        let engine = self.address(i);
        for prompt in prompts {
            let (deadline, mut streak) = (Instant::now() + Duration::from_secs(60), 0);
            while streak < PROBES {
                streak = if (self.probe(prompt).await == engine) == to { streak + 1 } else { 0 };
                assert!(
                    Instant::now() < deadline,
                    "{prompt:.20}… never settled (engine {i}, {to}): {:?}",
                    self.kv().await
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            for n in 0..PROBES {
                let got = self.probe(prompt).await;
                assert_eq!(
                    got == engine,
                    to,
                    "probe {n} of {prompt:.20}… (engine {i}, {to}): {got} {:?}",
                    self.kv().await
                );
            }
        }
    }

    async fn kv(&self) -> Vec<Value> {
        kv_sim::kv_view(&self.client, self.gateway.gateway.admin_addr()).await
    }
}

fn prompts(tag: &str) -> Vec<String> {
    (0..PREFIXES).map(|c| words(&format!("{tag}{c}w"), 63)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_routing_follows_a_pool_that_scales_through_dns() {
    let mut pool = Pool::start("precise_cache_aware").await;
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

    // Scaled down: engine 0 leaves; its blocks pin nothing (they leave the index) and the A
    // prefixes go to the engines that are left.
    let view = pool.kv().await;
    let held_by_others: u64 =
        [1, 2].iter().filter_map(|&i| pool.entry(&view, i)).map(|e| e["blocks"].as_u64().unwrap()).sum();
    pool.scale(&[1, 2]).await;
    let metrics =
        pool.client.get(format!("http://{}/metrics", pool.gateway.gateway.admin_addr())).send().await.unwrap();
    let metrics = metrics.text().await.unwrap();
    let indexed: u64 = metrics
        .lines()
        .find(|l| l.starts_with("ferrogate_kv_index_blocks{") && l.contains("provider=\"pool\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as u64)
        .expect("ferrogate_kv_index_blocks of the pool");
    assert_eq!(indexed, held_by_others, "only the remaining engines' blocks are indexed");
    pool.no_probe_reaches(0, &a).await;

    // Engine 0 comes back at the same address: resynced from its replay socket (it still holds
    // the A prefixes), it steers them again.
    pool.scale(&[0, 1, 2]).await;
    pool.until("engine 0 resynced", |kv| pool.entry(kv, 0).is_some_and(|e| e["blocks"].as_u64().unwrap_or(0) > 0))
        .await;
    pool.every_probe_reaches(0, &a).await;
    pool.gateway.gateway.shutdown().await;
}
