//! Interactive traffic under a batch flood, with and without flow control, in one run.
//!
//! Two `ferrogate sim` engines that run at most `--max-running` requests each (the rest wait in
//! the engine, as in vLLM) behind `ferrogate serve`. A batch key keeps `--batch` requests in
//! flight all the time; an interactive key sends one streamed request every `--every-ms`. Row
//! `no flow control`: the gateway forwards everything and the engines queue it. Row `flow
//! control`: `max_concurrency` equal to the engines' `--max-running`, the interactive key in a
//! higher priority band. Printed per row: the interactive requests' time to first streamed byte
//! (p50, p99) and the batch throughput; then the p99 ratio.
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
    /// Seconds each row runs (after a 1 s warm-up).
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

const BATCH_KEY: &str = "fg-bench-batch";
const INTERACTIVE_KEY: &str = "fg-bench-interactive";

fn digest(secret: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(secret.as_bytes()))
}

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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A `serve` child process and its temporary directory.
struct Serve {
    _child: tokio::process::Child,
    base: String,
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
    let port = free_port();
    let filter = args.filter.clone().unwrap_or_else(|| args.ferrogate.with_file_name("ferrogate_filter.wasm"));
    let child = tokio::process::Command::new(&args.ferrogate)
        .arg("serve")
        .arg("--config")
        .arg(dir.join("config.yaml"))
        .arg("--filter")
        .arg(&filter)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--admin-listen", "127.0.0.1:0", "--sidecar-listen", "127.0.0.1:0"])
        .args(["--workers", &args.workers.to_string()])
        .env("FERROGATE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", args.ferrogate.display()));
    let s = Serve { _child: child, base: format!("http://127.0.0.1:{port}"), dir };
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

/// Runs the flood and the interactive client for `seconds`; interactive TTFTs and batch count.
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
    tokio::time::sleep(Duration::from_secs(1)).await;
    done.store(0, Ordering::Relaxed);
    let end = Instant::now() + Duration::from_secs(args.seconds);
    let mut interactive = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(args.every_ms));
    while Instant::now() < end {
        tick.tick().await;
        let (client, base) = (client.clone(), base.to_string());
        interactive.push(tokio::spawn(async move { send(&client, &base, INTERACTIVE_KEY, true).await }));
    }
    let batch_done = done.load(Ordering::Relaxed);
    let mut ttfts = Vec::new();
    for h in interactive {
        if let Ok(Some(t)) = h.await {
            ttfts.push(t);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for h in flood {
        let _ = h.await;
    }
    ttfts.sort();
    (ttfts, batch_done)
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
    sorted.get(i).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
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
    println!("{:<18} {:>8} {:>12} {:>12} {:>12}", "row", "n", "ttft p50 ms", "ttft p99 ms", "batch/s");
    let mut p99s = Vec::new();
    for (name, flow) in [("no flow control", false), ("flow control", true)] {
        let s = serve(&args, &config(&sims, flow, args.max_running)).await;
        let (ttfts, batch) = measure(&args, &s.base).await;
        let (p50, p99) = (pct(&ttfts, 0.5), pct(&ttfts, 0.99));
        p99s.push(p99);
        let rate = batch as f64 / args.seconds as f64;
        println!("{name:<18} {:>8} {p50:>12.1} {p99:>12.1} {rate:>12.1}", ttfts.len());
    }
    if let [without, with] = p99s[..] {
        println!("interactive ttft p99: {:.1}x better with flow control", without / with);
    }
}
