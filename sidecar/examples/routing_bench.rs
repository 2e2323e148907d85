//! Routing quality of the balance strategies: how often a request lands on an engine replica
//! that already holds its prefix, and how evenly the replicas are loaded.
//!
//! ```text
//! cargo run --profile native -p ferrogate-sidecar --example routing_bench -- \
//!     --ferrogate target/native/ferrogate --filter target/native/ferrogate_filter.wasm
//! ```
//!
//! Each row starts fresh: `--replicas` `ferrogate sim` engines in this process (empty prefix
//! caches of `--kv-blocks` 16-token blocks each), and a `ferrogate serve` (the real binary and
//! filter, `--workers` worker VMs) whose one model `chat` balances over a provider pool of those
//! engines with the row's `strategy`. The workload: `--conversations` conversations, each with
//! its own system prompt of about `--prefix-bytes`, each sending `--turns` turns in order (a turn
//! appends the previous answer and a new user message); `--clients` clients, each on its own
//! keep-alive connection, repeatedly take a random conversation that is not in flight (seeded,
//! `--seed`) and send its next turn. Conversations therefore move between clients, hence
//! between the gateway's worker VMs.
//!
//! Per request the sim answers `x-sim-prefix-hit: <blocks hit>/<full blocks>` and
//! `x-sim-endpoint`. A turn after the first is a hit when the replica it landed on still held
//! every full block of the conversation's previous prompt (so the ideal is every request but a
//! conversation's first); `any` counts turns that found at least their first block, `blocks` the
//! share of the previous prompts' blocks found. Load: every 50 ms the engines'
//! `vllm:num_requests_running` is sampled; `spread` is max/mean over replicas of the time-averaged
//! in-flight count, `inst` the mean over samples (with at least half the clients in flight) of
//! the instantaneous max/mean, `req` max/mean of the requests each replica served.
//!
//! Rows are strategy names; `+session` sends `x-session-id` per conversation, `+sticky` sends
//! every turn of a conversation from the same client (connection, so worker VM) instead of any
//! free one, `@N` overrides `--workers` for that row (e.g. `cache_aware@1`). A
//! `precise_cache_aware` or `lmcache_aware` row runs the sims with KV events (`--kv-events`,
//! `--kv-replay`) and the pool with `kv_tokenize: true` (the gateway asks a sim's `/tokenize`);
//! `+ids` has the client send `x-ferrogate-token-ids` instead (asked of a sim's `/tokenize`
//! first, as a client with the model's tokenizer would compute them).
//!
//! The LMCache workload: `--lmcache-blocks` gives every sim a CPU tier behind its GPU cache,
//! `--prefill-us-per-token` its prefill model, so each answer reports its simulated prefill
//! (`x-sim-prefill-ms`) and the blocks it found only in the CPU tier (`x-sim-cpu-hit`): the
//! table's `sim TTFT ms` is `--ttft-ms` plus the mean prefill, `from CPU tier` the share of
//! hit blocks the CPU tiers served. `--gateways N` puts N `serve` replicas in front of the
//! same sims, each request going to one at random (as behind a Kubernetes Service).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use ferrogate_sidecar::sim::{self, SimArgs, CPU_HIT_HEADER, ENDPOINT_HEADER, PREFILL_HEADER, PREFIX_HIT_HEADER};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::sync::{oneshot, Notify};

#[derive(Parser, Debug, Clone)]
struct Args {
    /// The `ferrogate` binary (runs `serve`).
    #[arg(long, default_value = "target/native/ferrogate")]
    ferrogate: PathBuf,
    /// The filter wasm `serve` runs (default: `ferrogate_filter.wasm` beside the binary).
    #[arg(long)]
    filter: Option<PathBuf>,
    /// Rows: strategy names, `+session` for x-session-id, `+sticky` for conversations fixed to
    /// a client, `@N` for N worker VMs.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "round_robin,consistent_hash,consistent_hash+session,cache_aware,cache_aware@1,cache_aware+sticky,precise_cache_aware,precise_cache_aware+ids"
    )]
    rows: Vec<String>,
    /// serve's worker VMs, unless a row says `@N`.
    #[arg(long, default_value_t = 2)]
    workers: u32,
    /// Engine replicas in the pool.
    #[arg(long, default_value_t = 4)]
    replicas: usize,
    /// Conversations, each with its own system prompt.
    #[arg(long, default_value_t = 32)]
    conversations: usize,
    /// Requests per conversation.
    #[arg(long, default_value_t = 8)]
    turns: usize,
    /// Concurrent clients, each on its own connection.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Approximate size of each conversation's system prompt, in bytes.
    #[arg(long, default_value_t = 3072)]
    prefix_bytes: usize,
    /// Words per user message.
    #[arg(long, default_value_t = 24)]
    user_words: usize,
    /// The sims' time to first token (ms).
    #[arg(long, default_value_t = 150)]
    ttft_ms: u64,
    /// The sims' inter-token latency (ms).
    #[arg(long, default_value_t = 10)]
    itl_ms: u64,
    /// Tokens per answer.
    #[arg(long, default_value_t = 16)]
    output_tokens: u32,
    /// Prefix-cache size of each sim, in 16-token blocks.
    #[arg(long, default_value_t = 600)]
    kv_blocks: u32,
    /// Seed of the prompts and of the interleaving.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Runs per row (each with seed, seed+1, ...); the table shows each run.
    #[arg(long, default_value_t = 1)]
    repeats: u64,
    /// Each sim's LMCache CPU tier, in blocks (`sim --lmcache-blocks`); 0 = none.
    #[arg(long, default_value_t = 0)]
    lmcache_blocks: u32,
    /// The sims' prefill model (`sim --prefill-us-per-token`): µs per prompt token not served
    /// from a cache; 0 = none. The table's simulated TTFT is `--ttft-ms` plus this prefill.
    #[arg(long, default_value_t = 0.0)]
    prefill_us_per_token: f64,
    /// `serve` replicas in front of the same sims (each client request goes to one at random,
    /// as behind a Kubernetes Service); each has its own sidecar following the engines' events.
    #[arg(long, default_value_t = 1)]
    gateways: usize,
}

/// One row: a strategy, whether sessions are sent, whether conversations stick to a client,
/// and the worker VMs.
#[derive(Debug, Clone)]
struct Row {
    label: String,
    strategy: String,
    session: bool,
    sticky: bool,
    /// The client sends `x-ferrogate-token-ids`.
    ids: bool,
    workers: u32,
}

impl Row {
    fn parse(spec: &str, workers: u32) -> Self {
        let (rest, workers) = match spec.split_once('@') {
            Some((rest, n)) => (rest, n.parse().unwrap_or_else(|_| panic!("bad worker count in {spec:?}"))),
            None => (spec, workers),
        };
        let mut parts = rest.split('+');
        let strategy = parts.next().unwrap_or_default().to_owned();
        let (mut session, mut sticky, mut ids) = (false, false, false);
        for flag in parts {
            match flag {
                "session" => session = true,
                "sticky" => sticky = true,
                "ids" => ids = true,
                _ => panic!("unknown row flag {flag:?} in {spec:?}"),
            }
        }
        let mut label = strategy.clone();
        if session {
            label.push_str(" + x-session-id");
        }
        if sticky {
            label.push_str(" (sticky clients)");
        }
        if ids {
            label.push_str(" + x-ferrogate-token-ids");
        }
        Self { label, strategy, session, sticky, ids, workers }
    }
}

/// One conversation's messages so far.
struct Conversation {
    messages: Vec<Value>,
    turn: usize,
    /// Failed attempts of the current turn in a row.
    failures: u32,
}

/// A turn failing this many times in a row ends the run: the row is broken, not slow.
const MAX_FAILURES: u32 = 20;

/// What one request found.
#[derive(Debug, Clone)]
struct Outcome {
    conversation: usize,
    turn: usize,
    hit: u32,
    blocks: u32,
    /// Of the hit blocks, those found only in the engine's LMCache CPU tier.
    cpu: u32,
    /// The engine's simulated prefill time (`x-sim-prefill-ms`).
    prefill_ms: f64,
    endpoint: String,
}

/// Which conversations may send their next turn.
struct Schedule {
    ready: Vec<usize>,
    /// Conversations with every turn answered.
    done: Vec<bool>,
    rng: StdRng,
}

const WORDS: &[&str] = &[
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima",
    "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor", "whiskey", "xray",
    "yankee", "zulu", "policy", "account", "invoice", "shipment", "warranty", "customer", "refund", "product",
    "support", "ticket", "answer", "context", "document", "section",
];

fn words(rng: &mut StdRng, bytes: usize) -> String {
    let mut out = String::new();
    while out.len() < bytes {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(WORDS[rng.random_range(0..WORDS.len())]);
    }
    out
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One sim's KV-event sockets (`tcp://127.0.0.1:port`): PUB and replay.
type KvSockets = Option<(String, String)>;

/// Starts `n` sims in this process, with KV events when `kv`; dropping the senders stops them.
async fn start_sims(args: &Args, kv: bool) -> (Vec<SocketAddr>, Vec<KvSockets>, Vec<oneshot::Sender<()>>) {
    let mut addrs = Vec::new();
    let mut sockets = Vec::new();
    let mut stops = Vec::new();
    for _ in 0..args.replicas {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(listener.local_addr().unwrap());
        let pair = kv.then(|| {
            let port = || format!("tcp://127.0.0.1:{}", free_port());
            (port(), port())
        });
        let kv_args = sim::KvEventsArgs {
            kv_events: pair.as_ref().map(|p| p.0.clone()),
            kv_replay: pair.as_ref().map(|p| p.1.clone()),
            ..sim::KvEventsArgs::default()
        };
        sockets.push(pair);
        let lmcache = sim::LmcacheArgs {
            lmcache_blocks: args.lmcache_blocks,
            prefill_us_per_token: args.prefill_us_per_token,
            ..sim::LmcacheArgs::default()
        };
        let sim_args = SimArgs {
            ttft_ms: args.ttft_ms,
            itl_ms: args.itl_ms,
            output_tokens: args.output_tokens,
            kv_blocks: args.kv_blocks,
            kv: kv_args,
            lmcache,
            ..SimArgs::default()
        };
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(sim::run(sim_args, listener, async {
            let _ = stopped.await;
        }));
        stops.push(stop);
    }
    (addrs, sockets, stops)
}

/// A `serve` over a pool of `sims` with `strategy`; killed when dropped.
struct Serve {
    child: tokio::process::Child,
    base: String,
    _dir: TempDir,
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn start_serve(args: &Args, row: &Row, sims: &[SocketAddr], kv: &[KvSockets]) -> Serve {
    let dir = std::env::temp_dir().join(format!("routing-bench-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    let endpoints: Vec<String> = sims
        .iter()
        .zip(kv)
        .map(|(a, kv)| match kv {
            Some((events, replay)) => {
                format!("{{ address: \"{a}\", kv_events: \"{events}\", kv_replay: \"{replay}\" }}")
            }
            None => format!("\"{a}\""),
        })
        .collect();
    let tokenize = if kv.iter().any(Option::is_some) { "    kv_tokenize: true\n" } else { "" };
    let config = format!(
        "providers:\n  - name: pool\n    kind: openai_compatible\n    base_url: \"http://{}\"\n{tokenize}    endpoints: [{}]\n\
         models:\n  - name: chat\n    targets: [{{ provider: pool, model: sim-small }}]\n    strategy: {}\n",
        sims[0],
        endpoints.join(", "),
        row.strategy
    );
    let config_path = dir.join("config.yaml");
    std::fs::write(&config_path, config).unwrap();
    let (port, admin) = (free_port(), free_port());
    let log = std::fs::File::create(dir.join("serve.log")).unwrap();
    let filter = args.filter.clone().unwrap_or_else(|| args.ferrogate.with_file_name("ferrogate_filter.wasm"));
    let child = tokio::process::Command::new(&args.ferrogate)
        .arg("serve")
        .arg("--config")
        .arg(&config_path)
        .arg("--filter")
        .arg(&filter)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
        .args(["--sidecar-listen", "127.0.0.1:0"])
        .args(["--workers", &row.workers.to_string()])
        .env("FERROGATE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", args.ferrogate.display()));
    let mut serve = Serve { child, base: format!("http://127.0.0.1:{port}"), _dir: TempDir(dir.clone()) };
    // Ready when a request goes through (a short prompt: no full block, caches untouched).
    let client = reqwest::Client::new();
    let ping = json!({"model": "chat", "max_tokens": 1, "messages": [{"role": "user", "content": "ping"}]});
    for _ in 0..200 {
        if serve.child.try_wait().is_ok_and(|status| status.is_some()) {
            break;
        }
        let sent = client.post(format!("{}/v1/chat/completions", serve.base)).json(&ping).send().await;
        if sent.is_ok_and(|r| r.status().is_success()) {
            return serve;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("serve did not answer; log: {}", std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default());
}

/// The sim's token ids for a chat `body`, comma-separated (what a client holding the model's
/// tokenizer would send).
async fn token_ids(http: &reqwest::Client, url: &str, body: &Value) -> String {
    // The engine knows its own model name, not the gateway's.
    let mut body = body.clone();
    body["model"] = json!("sim-small");
    let answer: Value = match http.post(url).json(&body).send().await {
        Ok(r) => r.json().await.unwrap_or(Value::Null),
        Err(_) => Value::Null,
    };
    let ids = answer["tokens"].as_array().cloned().unwrap_or_default();
    ids.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
}

/// `vllm:num_requests_running` (all models) and `vllm:request_success_total` of one sim.
async fn scrape(client: &reqwest::Client, sim: SocketAddr) -> (f64, f64) {
    let Ok(response) = client.get(format!("http://{sim}/metrics")).send().await else { return (0.0, 0.0) };
    let text = response.text().await.unwrap_or_default();
    let mut running = 0.0;
    let mut served = 0.0;
    for line in text.lines() {
        let value = || line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        if line.starts_with("vllm:num_requests_running{") {
            running += value();
        } else if line.starts_with("vllm:request_success_total{") {
            served += value();
        }
    }
    (running, served)
}

/// The figures of one run.
struct Report {
    requests: usize,
    errors: usize,
    ideal: usize,
    hits: usize,
    any: usize,
    blocks_hit: u64,
    blocks_ideal: u64,
    first_turn_hits: usize,
    spread: f64,
    inst: f64,
    req_spread: f64,
    replicas_per_conversation: f64,
    /// Share of all blocks hit that came from an LMCache CPU tier.
    cpu_share: f64,
    /// Mean simulated time to first token: `--ttft-ms` plus the engine's prefill time.
    sim_ttft_ms: f64,
    seconds: f64,
}

fn max_over_mean(values: &[f64]) -> f64 {
    let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
    let max = values.iter().copied().fold(0.0, f64::max);
    if mean > 0.0 {
        max / mean
    } else {
        f64::NAN
    }
}

async fn run_row(args: &Args, row: &Row, seed: u64) -> Report {
    let kv = matches!(row.strategy.as_str(), "precise_cache_aware" | "lmcache_aware");
    let (sims, sockets, stops) = start_sims(args, kv).await;
    let mut serves = Vec::new();
    for _ in 0..args.gateways.max(1) {
        serves.push(start_serve(args, row, &sims, &sockets).await);
    }
    let bases: Arc<Vec<String>> = Arc::new(serves.iter().map(|s| s.base.clone()).collect());

    // Prompts: a tag making each system prompt unique from its first word, then filler.
    let mut rng = StdRng::seed_from_u64(seed);
    let conversations: Vec<Mutex<Conversation>> = (0..args.conversations)
        .map(|c| {
            let system = format!("conversation-{c}-{seed} {}", words(&mut rng, args.prefix_bytes));
            Mutex::new(Conversation {
                messages: vec![json!({"role": "system", "content": system})],
                turn: 0,
                failures: 0,
            })
        })
        .collect();
    let user_texts: Vec<Vec<String>> = (0..args.conversations)
        .map(|_| (0..args.turns).map(|_| words(&mut rng, args.user_words * 6)).collect())
        .collect();
    let conversations = Arc::new(conversations);
    let user_texts = Arc::new(user_texts);
    let schedule = Arc::new(Mutex::new(Schedule {
        ready: (0..args.conversations).collect(),
        done: vec![false; args.conversations],
        rng: StdRng::seed_from_u64(seed ^ 0x5eed),
    }));
    let wake = Arc::new(Notify::new());
    let outcomes = Arc::new(Mutex::new(Vec::<Outcome>::new()));
    let errors = Arc::new(Mutex::new(0usize));

    // Load sampler.
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = tokio::spawn({
        let sims = sims.clone();
        let sampling = Arc::clone(&sampling);
        let threshold = (args.clients / 2).max(1) as f64;
        async move {
            let client = reqwest::Client::new();
            let mut sums = vec![0.0; sims.len()];
            let mut samples = 0usize;
            let mut inst = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                tick.tick().await;
                let running: Vec<f64> = futures_util::future::join_all(sims.iter().map(|&s| scrape(&client, s)))
                    .await
                    .into_iter()
                    .map(|r| r.0)
                    .collect();
                for (sum, r) in sums.iter_mut().zip(&running) {
                    *sum += r;
                }
                samples += 1;
                if running.iter().sum::<f64>() >= threshold {
                    inst.push(max_over_mean(&running));
                }
            }
            let averages: Vec<f64> = sums.iter().map(|s| s / samples.max(1) as f64).collect();
            (averages, inst)
        }
    });

    let started = Instant::now();
    let mut clients = Vec::new();
    for me in 0..args.clients {
        let (conversations, user_texts, schedule, wake, outcomes, errors) = (
            Arc::clone(&conversations),
            Arc::clone(&user_texts),
            Arc::clone(&schedule),
            Arc::clone(&wake),
            Arc::clone(&outcomes),
            Arc::clone(&errors),
        );
        let bases = Arc::clone(&bases);
        let mut pick_rng = StdRng::seed_from_u64(seed ^ (me as u64 + 1));
        let (session, sticky, turns, output_tokens) = (row.session, row.sticky, args.turns, args.output_tokens);
        let tokenize = row.ids.then(|| format!("http://{}/tokenize", sims[0]));
        let clients_n = args.clients;
        // Sticky: this client sends only the conversations c with c % clients == me.
        let mine = move |c: usize| !sticky || c % clients_n == me;
        clients.push(tokio::spawn(async move {
            // One connection per client: it stays on one worker VM of serve.
            let http = reqwest::Client::builder().pool_max_idle_per_host(1).build().unwrap();
            loop {
                let notified = wake.notified();
                let picked = {
                    let mut s = schedule.lock().unwrap();
                    let candidates: Vec<usize> = (0..s.ready.len()).filter(|&i| mine(s.ready[i])).collect();
                    if candidates.is_empty() {
                        if s.done.iter().enumerate().all(|(c, &done)| done || !mine(c)) {
                            break;
                        }
                        None
                    } else {
                        let n = candidates.len();
                        let i = candidates[s.rng.random_range(0..n)];
                        Some(s.ready.swap_remove(i))
                    }
                };
                let Some(c) = picked else {
                    notified.await;
                    continue;
                };
                let (body, turn) = {
                    let mut conv = conversations[c].lock().unwrap();
                    let turn = conv.turn;
                    conv.messages.push(json!({"role": "user", "content": user_texts[c][turn]}));
                    (json!({"model": "chat", "messages": conv.messages, "max_tokens": output_tokens}), turn)
                };
                // Each request to one gateway at random, as behind a Service.
                let base = &bases[pick_rng.random_range(0..bases.len())];
                let mut request = http.post(format!("{base}/v1/chat/completions")).json(&body);
                if session {
                    request = request.header("x-session-id", format!("conversation-{c}"));
                }
                if let Some(url) = &tokenize {
                    request = request.header("x-ferrogate-token-ids", token_ids(&http, url, &body).await);
                }
                let answer = match request.send().await {
                    Ok(response) if response.status().is_success() => {
                        let header = |name: &str| {
                            response.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
                        };
                        let (hit, blocks) = header(PREFIX_HIT_HEADER)
                            .split_once('/')
                            .and_then(|(h, b)| Some((h.parse().ok()?, b.parse().ok()?)))
                            .unwrap_or((0, 0));
                        let endpoint = header(ENDPOINT_HEADER);
                        let cpu = header(CPU_HIT_HEADER).parse().unwrap_or(0);
                        let prefill_ms = header(PREFILL_HEADER).parse().unwrap_or(0.0);
                        let json: Value = response.json().await.unwrap_or(Value::Null);
                        let text = json.pointer("/choices/0/message/content").and_then(Value::as_str).unwrap_or("");
                        let outcome = Outcome { conversation: c, turn, hit, blocks, cpu, prefill_ms, endpoint };
                        outcomes.lock().unwrap().push(outcome);
                        Some(text.to_owned())
                    }
                    _ => None,
                };
                {
                    let mut conv = conversations[c].lock().unwrap();
                    match answer {
                        Some(text) => {
                            conv.messages.push(json!({"role": "assistant", "content": text}));
                            conv.turn += 1;
                            conv.failures = 0;
                        }
                        None => {
                            // Retry the same turn later.
                            conv.messages.pop();
                            *errors.lock().unwrap() += 1;
                            conv.failures += 1;
                            assert!(
                                conv.failures < MAX_FAILURES,
                                "conversation {c}, turn {}: {MAX_FAILURES} failures in a row (the gateway \
                                 answered no 2xx); this row cannot run",
                                conv.turn
                            );
                        }
                    }
                    let mut s = schedule.lock().unwrap();
                    if conv.turn < turns {
                        s.ready.push(c);
                    } else {
                        s.done[c] = true;
                    }
                }
                wake.notify_waiters();
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    let seconds = started.elapsed().as_secs_f64();
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let (averages, inst) = sampler.await.unwrap();
    let scraper = reqwest::Client::new();
    let mut served = Vec::new();
    for &s in &sims {
        served.push(scrape(&scraper, s).await.1);
    }
    drop(serves);
    drop(stops);

    let mut outcomes = outcomes.lock().unwrap().clone();
    outcomes.sort_by_key(|o| (o.conversation, o.turn));
    let mut report = Report {
        requests: outcomes.len(),
        errors: *errors.lock().unwrap(),
        ideal: 0,
        hits: 0,
        any: 0,
        blocks_hit: 0,
        blocks_ideal: 0,
        first_turn_hits: 0,
        spread: max_over_mean(&averages),
        inst: inst.iter().sum::<f64>() / inst.len().max(1) as f64,
        req_spread: max_over_mean(&served),
        replicas_per_conversation: 0.0,
        cpu_share: 0.0,
        sim_ttft_ms: 0.0,
        seconds,
    };
    let all_hit: u64 = outcomes.iter().map(|o| u64::from(o.hit)).sum();
    let cpu_hit: u64 = outcomes.iter().map(|o| u64::from(o.cpu)).sum();
    report.cpu_share = if all_hit > 0 { cpu_hit as f64 / all_hit as f64 } else { 0.0 };
    let prefill: f64 = outcomes.iter().map(|o| o.prefill_ms).sum::<f64>() / outcomes.len().max(1) as f64;
    report.sim_ttft_ms = args.ttft_ms as f64 + prefill;
    let mut previous: HashMap<usize, u32> = HashMap::new();
    let mut replicas: BTreeMap<usize, HashSet<String>> = BTreeMap::new();
    for o in &outcomes {
        replicas.entry(o.conversation).or_default().insert(o.endpoint.clone());
        match previous.insert(o.conversation, o.blocks) {
            None => report.first_turn_hits += usize::from(o.hit > 0),
            Some(prev) => {
                report.ideal += 1;
                report.hits += usize::from(o.hit >= prev);
                report.any += usize::from(o.hit > 0);
                report.blocks_hit += u64::from(o.hit.min(prev));
                report.blocks_ideal += u64::from(prev);
            }
        }
    }
    report.replicas_per_conversation =
        replicas.values().map(|r| r.len() as f64).sum::<f64>() / replicas.len().max(1) as f64;
    report
}

fn pct(part: impl Into<f64>, whole: impl Into<f64>) -> String {
    let (part, whole) = (part.into(), whole.into());
    if whole > 0.0 {
        format!("{:.1}%", 100.0 * part / whole)
    } else {
        "-".into()
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let rows: Vec<Row> = args.rows.iter().map(|r| Row::parse(r, args.workers)).collect();
    println!(
        "routing bench: {} sims (kv {} blocks, ttft {} ms, itl {} ms, {} tokens), {} conversations x {} turns, \
         system prompts ~{} B, {} clients, {} gateway(s), LMCache {} blocks, prefill {} us/token, seed {}",
        args.replicas,
        args.kv_blocks,
        args.ttft_ms,
        args.itl_ms,
        args.output_tokens,
        args.conversations,
        args.turns,
        args.prefix_bytes,
        args.clients,
        args.gateways,
        args.lmcache_blocks,
        args.prefill_us_per_token,
        args.seed
    );
    println!(
        "| strategy | workers | requests | hit (of ideal) | any block | blocks | from CPU tier | sim TTFT ms | replicas/conv | spread max/mean | inst max/mean | req max/mean | s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for row in &rows {
        for repeat in 0..args.repeats {
            let r = run_row(&args, row, args.seed + repeat).await;
            println!(
                "| {} | {} | {}{} | {} | {} | {} | {} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} |",
                row.label,
                row.workers,
                r.requests,
                if r.errors > 0 { format!(" ({} errors)", r.errors) } else { String::new() },
                pct(r.hits as f64, r.ideal as f64),
                pct(r.any as f64, r.ideal as f64),
                pct(r.blocks_hit as f64, r.blocks_ideal as f64),
                pct(r.cpu_share, 1.0),
                r.sim_ttft_ms,
                r.replicas_per_conversation,
                r.spread,
                r.inst,
                r.req_spread,
                r.seconds,
            );
            if r.first_turn_hits > 0 {
                println!("  (warning: {} first turns hit: prompts are not unique)", r.first_turn_hits);
            }
        }
    }
}
