//! Interactive traffic under a batch flood, with and without flow control, in one run.
//!
//! Two `ferrogate sim` engines that run at most `--max-running` requests each (the rest wait in
//! the engine, as in vLLM) behind `ferrogate serve`. A batch key keeps `--batch` requests in
//! flight all the time; an interactive key sends one streamed request every `--every-ms`. Row
//! `no flow control`: the gateway forwards everything and the engines queue it. Row `flow
//! control`: `max_concurrency` equal to the engines' `--max-running`, the interactive key in a
//! higher priority band. Printed per row: the interactive requests' time to first streamed byte
//! (p50, p99), the batch throughput, the requests that waited in the gateway's queue and the
//! filter's calls to the sidecar (its `ferrogate_sidecar_calls_total`, every feed); then the
//! p99 ratio, the throughput ratio and the sidecar calls per queued request (the difference
//! between the rows' calls over the queued requests).
//!
//! `cargo run --profile native -p ferrogate-sidecar --example flow_bench -- --ferrogate
//! target/native/ferrogate --filter target/wasm32-unknown-unknown/release/ferrogate_filter.wasm`

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use ferrogate_sidecar::sim::{self, SimArgs};
use futures_util::StreamExt;
use serde_json::json;

#[path = "common/bench.rs"]
mod bench;
use bench::{digest, free_port, pct};

#[derive(Parser)]
struct Args {
    /// The `ferrogate` binary.
    #[arg(long, default_value = "target/native/ferrogate")]
    ferrogate: PathBuf,
    /// The filter wasm (default: next to the binary).
    #[arg(long)]
    filter: Option<PathBuf>,
    /// Worker VMs of `serve`.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Seconds each row is measured (with 2 s of the same load before and after).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Batch requests kept in flight.
    #[arg(long, default_value_t = 48)]
    batch: usize,
    /// One interactive request every this many ms.
    #[arg(long, default_value_t = 100)]
    every_ms: u64,
    /// Requests each engine runs at once (`--max-running`, and flow control's `max_concurrency`).
    #[arg(long, default_value_t = 4)]
    max_running: u32,
}

/// Load before the measured window opens and after it closes (longer than an interactive
/// request waits in the engines without flow control).
const WARM_UP: Duration = Duration::from_secs(2);

const BATCH_KEY: &str = "fg-bench-batch";
const INTERACTIVE_KEY: &str = "fg-bench-interactive";

fn config(sims: &[SocketAddr], flow: bool, max_running: u32) -> String {
    let endpoints: Vec<String> = sims.iter().map(|s| format!("'{s}'")).collect();
    let (cap, fc) = if flow {
        (format!(", max_concurrency: {max_running}"), "\n    flow_control: { max_queue: 100000, queue_ttl_ms: 600000 }")
    } else {
        (String::new(), "")
    };
    format!(
        "providers:\n  - {{ name: pool, kind: openai_compatible, base_url: 'http://{}', endpoints: [{}]{cap} }}\n\
         models:\n  - name: chat\n    strategy: least_loaded\n    targets: [{{ provider: pool, model: sim-small }}]{fc}\n\
         keys:\n  - {{ name: batch, digest: 'sha256:{}', models: ['*'] }}\n  - {{ name: interactive, digest: 'sha256:{}', models: ['*'], priority: 10 }}\n",
        sims[0],
        endpoints.join(", "),
        digest(BATCH_KEY),
        digest(INTERACTIVE_KEY)
    )
}

/// A `serve` child process and its temporary directory.
struct Serve {
    _child: tokio::process::Child,
    base: String,
    admin: String,
    dir: PathBuf,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn serve(args: &Args, yaml: &str) -> Serve {
    let dir = std::env::temp_dir().join(format!("ferrogate-flow-bench-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.yaml"), yaml).unwrap();
    let (port, admin) = (free_port(), free_port());
    let filter = args.filter.clone().unwrap_or_else(|| args.ferrogate.with_file_name("ferrogate_filter.wasm"));
    let child = tokio::process::Command::new(&args.ferrogate)
        .arg("serve")
        .arg("--config")
        .arg(dir.join("config.yaml"))
        .arg("--filter")
        .arg(&filter)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin}"), "--sidecar-listen", "127.0.0.1:0"])
        .args(["--workers", &args.workers.to_string()])
        .env("FERROGATE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", args.ferrogate.display()));
    let (base, admin) = (format!("http://127.0.0.1:{port}"), format!("http://127.0.0.1:{admin}"));
    let s = Serve { _child: child, base, admin, dir };
    let client = reqwest::Client::new();
    for _ in 0..300 {
        if send(&client, &s.base, BATCH_KEY, false).await.is_some() {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("serve did not answer");
}

/// One request; for a streamed one, the time to its first body byte. `None` when it failed.
async fn send(client: &reqwest::Client, base: &str, key: &str, stream: bool) -> Option<Duration> {
    let body = json!({"model": "chat", "max_tokens": 16, "stream": stream,
                      "messages": [{"role": "user", "content": "hello there"}]});
    let start = Instant::now();
    let resp = client
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(key)
        .header("x-sim-ttft-ms", "40")
        .header("x-sim-itl-ms", "10")
        .json(&body)
        .send()
        .await
        .ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let mut chunks = resp.bytes_stream();
    let first = chunks.next().await?.ok().map(|_| start.elapsed());
    while chunks.next().await.is_some() {}
    first
}

/// Runs the flood and the interactive client; interactive TTFTs and batch answers counted in
/// a window of `seconds`. Both classes run before the window opens and after it closes, so each
/// row's window holds the same steady load: without flow control an interactive request waits
/// in the engine about as long as the warm-up, and one sent late in the window would otherwise
/// run after it, leaving that row's batch requests slots the other row's do not get.
async fn measure(args: &Args, base: &str) -> (Vec<Duration>, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let client = reqwest::Client::builder().pool_max_idle_per_host(256).build().unwrap();
    let mut flood = Vec::new();
    for _ in 0..args.batch {
        let (stop, done, client, base) = (stop.clone(), done.clone(), client.clone(), base.to_string());
        flood.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if send(&client, &base, BATCH_KEY, false).await.is_some() {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let sender = {
        let (stop, client, base, every) = (stop.clone(), client.clone(), base.to_string(), args.every_ms);
        tokio::spawn(async move {
            let mut sent = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_millis(every));
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let (client, base) = (client.clone(), base.clone());
                let at = Instant::now();
                sent.push((at, tokio::spawn(async move { send(&client, &base, INTERACTIVE_KEY, true).await })));
            }
            sent
        })
    };
    tokio::time::sleep(WARM_UP).await;
    let (start, before) = (Instant::now(), done.load(Ordering::Relaxed));
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    let (end, batch_done) = (Instant::now(), done.load(Ordering::Relaxed) - before);
    tokio::time::sleep(WARM_UP).await;
    stop.store(true, Ordering::Relaxed);
    let mut ttfts = Vec::new();
    for (at, h) in sender.await.unwrap_or_default() {
        if let (true, Ok(Some(t))) = (at >= start && at < end, h.await) {
            ttfts.push(t);
        }
    }
    for h in flood {
        let _ = h.await;
    }
    ttfts.sort();
    (ttfts, batch_done)
}

/// The sum of every series of metric family `name` on `s`'s admin listener whose labels
/// contain `labels` (after the filter's counters reached it on the next tick).
async fn counter(s: &Serve, name: &str, labels: &str) -> f64 {
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let text = reqwest::get(format!("{}/metrics", s.admin)).await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let mut sims = Vec::new();
    for _ in 0..2 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        sims.push(listener.local_addr().unwrap());
        let sim_args = SimArgs { max_running: args.max_running, ..SimArgs::default() };
        tokio::spawn(sim::run(sim_args, listener, std::future::pending()));
    }
    println!(
        "flow control: {} batch requests in flight, 1 interactive every {} ms, 2 engines x {} running, {} s per row",
        args.batch, args.every_ms, args.max_running, args.seconds
    );
    let head = ["row", "n", "ttft p50 ms", "ttft p99 ms", "batch/s", "queued", "sidecar calls"];
    println!(
        "{:<18} {:>8} {:>12} {:>12} {:>12} {:>8} {:>14}",
        head[0], head[1], head[2], head[3], head[4], head[5], head[6]
    );
    let mut rows = Vec::new();
    for (name, flow) in [("no flow control", false), ("flow control", true)] {
        let s = serve(&args, &config(&sims, flow, args.max_running)).await;
        let calls_before = counter(&s, "ferrogate_sidecar_calls_total", "").await;
        let (ttfts, batch) = measure(&args, &s.base).await;
        let calls = counter(&s, "ferrogate_sidecar_calls_total", "").await - calls_before;
        let queued = counter(&s, "ferrogate_flow_control_total", "outcome=\"queued\"").await;
        let (p50, p99) = (pct(&ttfts, 0.5), pct(&ttfts, 0.99));
        let rate = batch as f64 / args.seconds as f64;
        rows.push((p99, rate, queued, calls));
        println!("{name:<18} {:>8} {p50:>12.1} {p99:>12.1} {rate:>12.1} {queued:>8} {calls:>14}", ttfts.len());
    }
    if let [(p99_without, rate_without, _, calls_without), (p99_with, rate_with, queued, calls_with)] = rows[..] {
        println!("interactive ttft p99: {:.1}x better with flow control", p99_without / p99_with);
        println!("batch throughput with / without flow control: {:.3}", rate_with / rate_without);
        let per = if queued > 0.0 { (calls_with - calls_without) / queued } else { f64::NAN };
        println!("sidecar calls per queued request: {per:.3}");
    }
}
