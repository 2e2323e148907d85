//! End to end: `lora_aware` routing in `ferrogate serve` (the real filter wasm in the embedded
//! host) over pools of `ferrogate sim` engines that keep one LoRA adapter loaded each
//! (`--max-loras 1`), counting the adapter loads the engines report (`x-sim-lora-load`).
//!
//! Requests are sent one at a time by one worker VM, so a pick never depends on timing: the
//! engines' residency reports, whenever they arrive, agree with what the VM sent. The second
//! part moves an adapter behind the gateway's back and waits, with probes that load nothing
//! (`x-sim-status: 400` is answered before the engine looks at the adapter), until the engine
//! reports have steered the pick.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferrogate_sidecar::sim::{ENDPOINT_HEADER, LORA_LOAD_HEADER};
use serde_json::json;

#[path = "common/gateway.rs"]
mod gateway_helper;
use gateway_helper::{gateway_on, Setup};
#[path = "common/sim.rs"]
mod sim_helper;
use sim_helper::start_sim;

/// The adapters the traffic asks for.
const ADAPTERS: [&str; 3] = ["sql-lora", "chat-lora", "summarize-lora"];
/// Requests per strategy.
const REQUESTS: usize = 60;

/// `n` sims serving base model `base` with one adapter slot each.
async fn engines(n: usize) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(start_sim(&["--model", "base", "--max-loras", "1"]).await);
    }
    out
}

/// A pool provider over `sims` and, per adapter, a model `<prefix>-<adapter>` routed with
/// `strategy` to it.
fn section(pool: &str, sims: &[SocketAddr], strategy: &str) -> (String, String) {
    let endpoints: Vec<String> = sims.iter().map(|s| format!("'{s}'")).collect();
    let provider = format!(
        "{{ name: {pool}, kind: openai_compatible, base_url: 'http://{}', endpoints: [{}] }}",
        sims[0],
        endpoints.join(", ")
    );
    let models = ADAPTERS
        .iter()
        .map(|a| {
            format!("  - {{ name: {pool}-{a}, strategy: {strategy}, targets: [{{provider: {pool}, model: {a}}}] }}\n")
        })
        .collect();
    (provider, models)
}

/// A gateway with one worker VM over `sections`.
async fn gateway(sections: &[(String, String)]) -> Setup {
    let providers: Vec<String> = sections.iter().map(|(p, _)| p.clone()).collect();
    let models: String = sections.iter().map(|(_, m)| m.as_str()).collect();
    gateway_on(&providers, &models, "", 1).await
}

/// What one answer says: status, the engine that served it, whether it loaded an adapter.
#[derive(Debug)]
struct Answer {
    status: u16,
    endpoint: String,
    loaded: bool,
}

async fn ask(client: &reqwest::Client, url: &str, model: &str, prompt: &str, status: Option<u16>) -> Answer {
    let body = json!({"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 4});
    let mut request = client.post(format!("{url}/v1/chat/completions")).json(&body);
    if let Some(status) = status {
        request = request.header("x-sim-status", status.to_string());
    }
    let response = request.send().await.unwrap();
    let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
    let (endpoint, loaded) = (header(ENDPOINT_HEADER).unwrap_or_default(), header(LORA_LOAD_HEADER));
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    assert!(status == 200 || status == 400, "{model}: {status} {text}");
    Answer { status, endpoint, loaded: loaded.as_deref() == Some("1") }
}

/// The adapter of request `i`: a fixed pseudo-random mix (the same for every strategy).
fn adapter_of(i: usize) -> usize {
    let x = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((x >> 33) % ADAPTERS.len() as u64) as usize
}

/// Sends the traffic to models `<pool>-<adapter>`; returns the adapter loads and, per
/// adapter, the engines that served it.
async fn traffic(s: &Setup, pool: &str) -> (usize, Vec<Vec<String>>) {
    let client = reqwest::Client::new();
    let mut loads = 0;
    let mut served = vec![Vec::<String>::new(); ADAPTERS.len()];
    for i in 0..REQUESTS {
        let a = adapter_of(i);
        let answer = ask(&client, &s.base, &format!("{pool}-{}", ADAPTERS[a]), &format!("request {i}"), None).await;
        assert_eq!(answer.status, 200);
        loads += usize::from(answer.loaded);
        if !served[a].contains(&answer.endpoint) {
            served[a].push(answer.endpoint);
        }
    }
    (loads, served)
}

/// Round robin and `lora_aware` over the same traffic, each on pool of its own.
async fn lora_aware_loads_each_adapter_once_where_round_robin_reloads(s: &Setup) {
    let (rr_loads, rr_served) = traffic(s, "rr").await;
    let (la_loads, la_served) = traffic(s, "la").await;
    let spread = |served: &[Vec<String>]| served.iter().map(Vec::len).collect::<Vec<_>>();
    eprintln!("{REQUESTS} requests over {} adapters, 3 engines with one adapter slot each:", ADAPTERS.len());
    eprintln!("  round_robin: {rr_loads} adapter loads; engines per adapter {:?}", spread(&rr_served));
    eprintln!("  lora_aware:  {la_loads} adapter loads; engines per adapter {:?}", spread(&la_served));
    // Each adapter is loaded once, on an engine of its own (a new adapter goes where there is
    // room), and stays there.
    assert_eq!(la_loads, ADAPTERS.len());
    assert!(la_served.iter().all(|e| e.len() == 1), "{la_served:?}");
    let mut homes: Vec<&String> = la_served.iter().flatten().collect();
    homes.sort();
    homes.dedup();
    assert_eq!(homes.len(), ADAPTERS.len(), "one engine per adapter: {la_served:?}");
    // Round robin rotates every adapter over every engine and reloads most of the time.
    assert!(rr_loads >= REQUESTS / 2, "round_robin: {rr_loads} loads");
    assert!(rr_served.iter().all(|e| e.len() == 3), "{rr_served:?}");
}

/// An adapter moved behind the gateway's back (pool `moved`) is followed once the engines'
/// reports reach the filter.
async fn engine_reports_steer_lora_aware_past_what_it_learned(s: &Setup, engines: &[SocketAddr]) {
    let client = reqwest::Client::new();
    let first = ask(&client, &s.base, "moved-sql-lora", "hello", None).await;
    assert!(first.loaded);
    // Behind the gateway's back: chat-lora takes sql-lora's place, then sql-lora is loaded on
    // the other engine (in this order, every report in between still leads to `new`).
    let old: SocketAddr = first.endpoint.parse().unwrap();
    let new = *engines.iter().find(|e| **e != old).unwrap();
    assert!(ask(&client, &format!("http://{old}"), "chat-lora", "direct", None).await.loaded);
    assert!(ask(&client, &format!("http://{new}"), "sql-lora", "direct", None).await.loaded);
    // What the VM learned still says `old`; once the engines' reports reach it, `new`. The
    // probes are refused by the engines before they look at the adapter, so nothing moves.
    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        let probe = ask(&client, &s.base, "moved-sql-lora", "probe", Some(400)).await;
        assert_eq!((probe.status, probe.loaded), (400, false));
        if probe.endpoint == new.to_string() {
            break;
        }
        assert_eq!(probe.endpoint, old.to_string());
        assert!(Instant::now() < deadline, "the engine reports never reached the filter");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answer = ask(&client, &s.base, "moved-sql-lora", "hello again", None).await;
    assert_eq!((answer.endpoint, answer.loaded), (new.to_string(), false), "served where the engine holds it");
}

/// One gateway (starting one costs most of the time) over three pools: round robin and
/// `lora_aware` for the comparison, and `lora_aware` on two engines for the reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lora_aware_end_to_end() {
    let (rr, la, moved) = (engines(3).await, engines(3).await, engines(2).await);
    let sections =
        [section("rr", &rr, "round_robin"), section("la", &la, "lora_aware"), section("moved", &moved, "lora_aware")];
    let s = gateway(&sections).await;
    lora_aware_loads_each_adapter_once_where_round_robin_reloads(&s).await;
    engine_reports_steer_lora_aware_past_what_it_learned(&s, &moved).await;
    s.gateway.shutdown().await;
}
