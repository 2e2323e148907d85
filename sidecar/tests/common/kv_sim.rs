//! A `ferrogate sim` publishing KV-cache events on its own free ports, which can be stopped
//! and started again on the same addresses (an engine restart).

// Shared by several test binaries, each using a part of it.
#![allow(dead_code)]

use std::net::SocketAddr;

use clap::Parser;
use ferrogate_sidecar::sim::SimArgs;
use tokio::sync::oneshot;

#[derive(Parser)]
struct SimCli {
    #[command(flatten)]
    args: SimArgs,
}

/// A running sim with KV events.
pub struct KvSim {
    /// Its HTTP address.
    pub addr: SocketAddr,
    /// Its PUB and replay addresses (`tcp://127.0.0.1:port`).
    pub events: String,
    pub replay: String,
    /// More `sim` flags (a `--kv-blocks` among them replaces the default).
    extra: Vec<String>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl KvSim {
    /// Starts a sim serving model `kv` with a 24-block prefix cache, at `addr` when given.
    pub async fn start(addr: Option<SocketAddr>) -> KvSim {
        Self::start_with(addr, &[]).await
    }

    /// [`KvSim::start`] with more `sim` flags.
    pub async fn start_with(addr: Option<SocketAddr>, extra: &[&str]) -> KvSim {
        let addr = addr.unwrap_or(([127, 0, 0, 1], 0).into());
        let extra = extra.iter().map(ToString::to_string).collect();
        let mut sim = KvSim { addr, events: String::new(), replay: String::new(), extra, stop: None, task: None };
        // The event ports are picked free, released and then bound by the sim: another process
        // (or test) can take one in between, so a sim that cannot bind tries new ports.
        for attempt in 1.. {
            sim.events = format!("tcp://127.0.0.1:{}", free_port());
            sim.replay = format!("tcp://127.0.0.1:{}", free_port());
            match sim.run().await {
                Ok(()) => break,
                Err(e) if attempt < 5 => eprintln!("sim could not bind its event ports ({e}); new ports"),
                Err(e) => panic!("sim could not bind its event ports after {attempt} tries: {e}"),
            }
        }
        sim
    }

    /// Starts a sim serving model `kv` at `addr` publishing at `events` and replaying at
    /// `replay` (`tcp://host:port`), all given; the error when one cannot be bound.
    pub async fn start_on(addr: SocketAddr, events: String, replay: String) -> std::io::Result<KvSim> {
        let mut sim = KvSim { addr, events, replay, extra: Vec::new(), stop: None, task: None };
        sim.run().await?;
        Ok(sim)
    }

    /// Binds the sim's sockets and serves it in a task; a socket that cannot be bound is the
    /// error.
    async fn run(&mut self) -> std::io::Result<()> {
        let blocks = if self.extra.iter().any(|a| a == "--kv-blocks") { [].as_slice() } else { &["--kv-blocks", "24"] };
        let argv = [
            "sim",
            "--listen",
            "127.0.0.1:0",
            "--model",
            "kv",
            "--kv-events",
            &self.events,
            "--kv-replay",
            &self.replay,
        ];
        let argv = argv.iter().chain(blocks).copied().chain(self.extra.iter().map(String::as_str));
        let args = SimCli::parse_from(argv).args;
        // The HTTP listener first: nothing else is bound yet if its address is taken.
        let listener = tokio::net::TcpListener::bind(self.addr).await?;
        let bound = ferrogate_sidecar::sim::bind(args).await?;
        self.addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = bound
                .serve(listener, async move {
                    let _ = stopped.await;
                })
                .await;
        });
        (self.stop, self.task) = (Some(stop), Some(task));
        Ok(())
    }

    /// Stops the sim and starts a new one on the same three addresses.
    pub async fn restart(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        // The same addresses: a moment for the old sockets to be released, then a clear panic.
        for attempt in 1.. {
            match self.run().await {
                Ok(()) => break,
                Err(_) if attempt < 20 => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
                Err(e) => panic!("the restarted sim could not bind {} / {}: {e}", self.events, self.replay),
            }
        }
    }

    /// Its entry in a provider's `endpoints`.
    pub fn endpoint_entry(&self) -> String {
        format!("{{ address: '{}', kv_events: '{}', kv_replay: '{}' }}", self.addr, self.events, self.replay)
    }
}

/// The name the KV tests give the pool under test (a gateway may serve other pools beside it).
pub const POOL: &str = "pool";

/// The admin KV view of the [`POOL`]'s endpoints (`GET /api/v1/kv` on `admin`).
pub async fn kv_view(client: &reqwest::Client, admin: SocketAddr) -> Vec<serde_json::Value> {
    let body: serde_json::Value =
        client.get(format!("http://{admin}/api/v1/kv")).send().await.unwrap().json().await.unwrap();
    let pools = body["providers"].as_array().cloned().unwrap_or_default();
    let pool = pools.into_iter().find(|p| p["provider"] == POOL);
    pool.and_then(|p| p["endpoints"].as_array().cloned()).unwrap_or_default()
}

/// Polls [`kv_view`] until `f` holds, for at most `within`; the last view.
pub async fn kv_until(
    client: &reqwest::Client,
    admin: SocketAddr,
    what: &str,
    within: std::time::Duration,
    f: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let kv = kv_view(client, admin).await;
        if f(&kv) {
            return kv;
        }
        assert!(std::time::Instant::now() < deadline, "waited for {what}: {kv:?}");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

/// `n` words `<tag>0 <tag>1 …`: a prompt whose blocks no other tag shares.
pub fn words(tag: &str, n: usize) -> String {
    (0..n).map(|i| format!("{tag}{i}")).collect::<Vec<_>>().join(" ")
}

/// A chat completions request for `model` with `prompt` as its one user message, two tokens
/// of output.
pub fn chat_for(model: &str, prompt: &str) -> serde_json::Value {
    serde_json::json!({"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 2})
}

/// The engine at `sim`'s own token ids for `prompt` as `model` (`POST /tokenize`), as the
/// `x-ferrogate-token-ids` header takes them.
pub async fn token_ids(client: &reqwest::Client, sim: SocketAddr, model: &str, prompt: &str) -> String {
    let url = format!("http://{sim}/tokenize");
    let body: serde_json::Value =
        client.post(url).json(&chat_for(model, prompt)).send().await.unwrap().json().await.unwrap();
    body["tokens"].as_array().unwrap().iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
}

/// The endpoint (`x-sim-endpoint`) that answers `prompt` as `model` through the gateway at
/// `base`, sent with its `tokens` and refused by the engine before it touches its cache.
pub async fn probe(client: &reqwest::Client, base: &str, model: &str, prompt: &str, tokens: String) -> String {
    use ferrogate_sidecar::sim::{ENDPOINT_HEADER, STATUS_HEADER};
    let response = client
        .post(format!("{base}/v1/chat/completions"))
        .json(&chat_for(model, prompt))
        .header(STATUS_HEADER, "400")
        .header("x-ferrogate-token-ids", tokens)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400, "the engine's own refusal");
    response.headers()[ENDPOINT_HEADER].to_str().unwrap().to_string()
}
