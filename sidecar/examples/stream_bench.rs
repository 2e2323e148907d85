//! What the gateway adds to streamed answers: time to the first event and the gaps between
//! events, gateway minus direct, measured by a client that timestamps every SSE event.
//!
//! One `ferrogate sim` (no delays) and one `ferrogate serve` in front of it, both child
//! processes. Each client connection sends its requests one after another on a kept-alive
//! connection; `--concurrency` connections run at once, each alternating a direct request and
//! a gateway request, so both sides see the same machine. Cases:
//! - `plain`: a non-streamed chat completion, time to its whole body (the reference the
//!   first-event cost is held against);
//! - `stream`: an OpenAI chat stream through the gateway to the OpenAI-dialect sim;
//! - `translated`: an Anthropic Messages stream through the gateway to the same sim (the
//!   direct side is the OpenAI stream the gateway itself sends upstream).
//!
//! Printed per case and concurrency: p50 and p99 of the first event (or the whole plain
//! answer), direct, gateway and added; the median gap between consecutive events and the
//! whole stream's p50.
//!
//! `cargo run --profile native -p ferrogate-sidecar --example stream_bench -- --ferrogate
//! target/native/ferrogate --filter target/wasm32-unknown-unknown/release/ferrogate_filter.wasm`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use futures_util::StreamExt;
use serde_json::json;

#[path = "common/bench.rs"]
mod bench;
use bench::{digest, free_port, pct, spawn};

#[derive(Parser)]
struct Args {
    /// The `ferrogate` binary (runs both the sim and `serve`).
    #[arg(long, default_value = "target/native/ferrogate")]
    ferrogate: PathBuf,
    /// The filter wasm (default: next to the binary).
    #[arg(long)]
    filter: Option<PathBuf>,
    /// Worker VMs of `serve`.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Requests per connection and side.
    #[arg(long, default_value_t = 500)]
    requests: usize,
    /// Concurrent connections, comma-separated.
    #[arg(long, default_value = "1,8", value_delimiter = ',')]
    concurrency: Vec<usize>,
    /// Tokens per streamed answer.
    #[arg(long, default_value_t = 16)]
    tokens: u32,
}

const KEY: &str = "fg-bench-stream";

#[derive(Clone, Copy, PartialEq)]
enum Case {
    Plain,
    Stream,
    Translated,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Plain => "plain (whole answer)",
            Case::Stream => "stream (first event)",
            Case::Translated => "translated (first event)",
        }
    }
}

/// One answer as the client saw it.
struct Sample {
    /// First complete SSE event (the whole body for a plain answer).
    first: Duration,
    /// Between consecutive events.
    gaps: Vec<Duration>,
    whole: Duration,
}

/// A child process (sim or serve) with its temporary directory.
struct Child {
    _child: tokio::process::Child,
    base: String,
    dir: Option<PathBuf>,
}

impl Drop for Child {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn start_sim(args: &Args) -> Child {
    let port = free_port();
    let child = spawn(&args.ferrogate, &["sim".into(), "--listen".into(), format!("127.0.0.1:{port}")]);
    Child { _child: child, base: format!("http://127.0.0.1:{port}"), dir: None }
}

fn start_serve(args: &Args, sim: &str) -> Child {
    let dir = std::env::temp_dir().join(format!("ferrogate-stream-bench-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    let yaml = format!(
        "providers:\n  - {{ name: sim, kind: openai_compatible, base_url: '{sim}' }}\n\
         models:\n  - {{ name: chat, targets: [{{ provider: sim, model: sim-small }}] }}\n\
         keys:\n  - {{ name: bench, digest: 'sha256:{}', models: ['*'] }}\n",
        digest(KEY)
    );
    std::fs::write(dir.join("config.yaml"), yaml).unwrap();
    let port = free_port();
    let filter = args.filter.clone().unwrap_or_else(|| args.ferrogate.with_file_name("ferrogate_filter.wasm"));
    let argv: Vec<String> = [
        "serve",
        "--config",
        &dir.join("config.yaml").display().to_string(),
        "--filter",
        &filter.display().to_string(),
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--admin-listen",
        "127.0.0.1:0",
        "--sidecar-listen",
        "127.0.0.1:0",
        "--workers",
        &args.workers.to_string(),
    ]
    .map(String::from)
    .to_vec();
    let child = spawn(&args.ferrogate, &argv);
    Child { _child: child, base: format!("http://127.0.0.1:{port}"), dir: Some(dir) }
}

/// The request a case sends, direct (to the sim) or through the gateway.
fn request(client: &reqwest::Client, base: &str, case: Case, gateway: bool, tokens: u32) -> reqwest::RequestBuilder {
    let messages = json!([{"role": "user", "content": "Tell me about the sea."}]);
    let model = if gateway { "chat" } else { "sim-small" };
    let stream = case != Case::Plain;
    let (path, body) = if gateway && case == Case::Translated {
        ("/v1/messages", json!({"model": model, "max_tokens": tokens, "stream": true, "messages": messages}))
    } else {
        ("/v1/chat/completions", json!({"model": model, "max_tokens": tokens, "stream": stream, "messages": messages}))
    };
    let req = client.post(format!("{base}{path}")).json(&body);
    match (gateway, case) {
        (false, _) => req,
        (true, Case::Translated) => req.header("x-api-key", KEY).header("anthropic-version", "2023-06-01"),
        (true, _) => req.bearer_auth(KEY),
    }
}

/// Sends one request and timestamps each SSE event as its terminating blank line arrives.
async fn one(client: &reqwest::Client, base: &str, case: Case, gateway: bool, tokens: u32) -> Option<Sample> {
    let start = Instant::now();
    let resp = request(client, base, case, gateway, tokens).send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let mut body = resp.bytes_stream();
    let mut events: Vec<Duration> = Vec::new();
    // The tail of the last chunk, enough to find a "\n\n" split across chunks.
    let mut last = 0u8;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.ok()?;
        let at = start.elapsed();
        let mut prev = last;
        for &b in chunk.iter() {
            if b == b'\n' && prev == b'\n' {
                events.push(at);
            }
            prev = b;
        }
        last = prev;
    }
    let whole = start.elapsed();
    let first = if case == Case::Plain { whole } else { *events.first()? };
    let gaps = events.windows(2).map(|w| w[1] - w[0]).collect();
    Some(Sample { first, gaps, whole })
}

/// `conns` workers, each sending `requests` pairs one after another: a request straight to
/// the sim, then the same through the gateway, each side on its own kept-alive connection.
/// Interleaving puts both sides under the same machine conditions.
async fn batch(
    sim: &str,
    gw: &str,
    case: Case,
    conns: usize,
    requests: usize,
    tokens: u32,
) -> (Vec<Sample>, Vec<Sample>) {
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (sim, gw) = (sim.to_string(), gw.to_string());
        tasks.push(tokio::task::spawn_local(async move {
            let client = || reqwest::Client::builder().pool_max_idle_per_host(1).build().unwrap();
            let (to_sim, to_gw) = (client(), client());
            let (mut direct, mut gateway) = (Vec::new(), Vec::new());
            for _ in 0..requests {
                direct.extend(one(&to_sim, &sim, case, false, tokens).await);
                gateway.extend(one(&to_gw, &gw, case, true, tokens).await);
            }
            (direct, gateway)
        }));
    }
    let (mut direct, mut gateway) = (Vec::new(), Vec::new());
    for t in tasks {
        let (d, g) = t.await.unwrap();
        direct.extend(d);
        gateway.extend(g);
    }
    (direct, gateway)
}

/// (first p50, first p99, gap p50, whole p50) in ms.
fn summary(samples: &[Sample]) -> (f64, f64, f64, f64) {
    let mut first: Vec<Duration> = samples.iter().map(|s| s.first).collect();
    let mut gaps: Vec<Duration> = samples.iter().flat_map(|s| s.gaps.iter().copied()).collect();
    let mut whole: Vec<Duration> = samples.iter().map(|s| s.whole).collect();
    first.sort();
    gaps.sort();
    whole.sort();
    (pct(&first, 0.5), pct(&first, 0.99), pct(&gaps, 0.5), pct(&whole, 0.5))
}

async fn wait_ready(base: &str, gateway: bool) {
    let client = reqwest::Client::new();
    for _ in 0..300 {
        if one(&client, base, Case::Plain, gateway, 4).await.is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{base} did not answer");
}

async fn run(args: Args) {
    let sim = start_sim(&args);
    wait_ready(&sim.base, false).await;
    let gw = start_serve(&args, &sim.base);
    wait_ready(&gw.base, true).await;
    println!(
        "STREAM: ferrogate serve ({} workers) in front of ferrogate sim (no delays), {} tokens per stream, \
         {} requests per connection and side, direct and gateway interleaved",
        args.workers, args.tokens, args.requests
    );
    println!(
        "{:<26} {:>4}  {:>15} {:>15} {:>15}  {:>17} {:>17}",
        "case", "conc", "direct p50/p99", "gateway p50/p99", "added p50/p99", "gap p50 dir/gw", "whole p50 dir/gw"
    );
    for &conns in &args.concurrency {
        for case in [Case::Plain, Case::Stream, Case::Translated] {
            // Warm-up, unrecorded.
            batch(&sim.base, &gw.base, case, conns, 20, args.tokens).await;
            let (direct, gateway) = batch(&sim.base, &gw.base, case, conns, args.requests, args.tokens).await;
            let (d, g) = (summary(&direct), summary(&gateway));
            println!(
                "{:<26} {:>4}  {:>7.3}/{:<7.3} {:>7.3}/{:<7.3} {:>7.3}/{:<7.3}  {:>8.3}/{:<8.3} {:>8.3}/{:<8.3}",
                case.name(),
                conns,
                d.0,
                d.1,
                g.0,
                g.1,
                g.0 - d.0,
                g.1 - d.1,
                d.2,
                g.2,
                d.3,
                g.3
            );
        }
    }
}

fn main() {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(tokio::task::LocalSet::new().run_until(run(args)));
}
