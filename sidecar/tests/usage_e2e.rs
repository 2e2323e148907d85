//! End to end: usage records are not lost when the sidecar or its database goes away, within
//! the filter's buffer, against the machine's real PostgreSQL.
//!
//! - `ferrogate sidecar` (the binary, a child process) with the Postgres store is killed
//!   (SIGKILL) and restarted on the same port while a client sends batches exactly as the
//!   filter does (keep a batch until a 2xx, send it again on the next tick). Every record ends
//!   up in `fg_usage` exactly once, and the restarted sidecar's admin API answers about all of
//!   them. The same with the file store: the restarted sidecar reads its usage file back.
//! - `ferrogate serve` (in this process, the real filter wasm) whose sidecar loses its database
//!   (a forwarder in front of PostgreSQL is cut) while requests go on: the filter keeps the
//!   refused batches and, once the database is back, `fg_usage` holds exactly every request.
//!
//! `serve` cannot point its filter at an external sidecar (its filter always reaches the
//! in-process one), and no Envoy runs here; so the real filter meets a sidecar that answers 503,
//! and the sidecar restart is driven by a client following the filter's protocol.
//!
//! Database: `FERROGATE_TEST_DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`),
//! a schema of its own per test.

// `std::env::set_var` is `unsafe` (edition 2024): the in-process gateway reads its database URL
// from the variable its config names; each test sets a variable of a unique name.
#![allow(unsafe_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use ferrogate_core::usage::Record;
use ferrogate_sidecar::serve::{Gateway, ServeArgs};
use serde_json::{json, Value};

#[path = "common/forwarder.rs"]
mod forwarder;

use forwarder::Forwarder;

#[path = "common/wasm.rs"]
mod wasm;
use wasm::filter_wasm;
#[path = "common/sim.rs"]
mod sim_helper;
use sim_helper::start_sim;

#[derive(Parser)]
struct Cli<T: clap::Args> {
    #[command(flatten)]
    args: T,
}

#[path = "common/pg_scratch.rs"]
mod pg_scratch;
use pg_scratch::Scratch;

impl Scratch {
    /// Rows per (key, model) in the schema's `fg_usage`, and how many distinct request ids.
    async fn stored(&self) -> (Vec<(Option<String>, String, i64)>, i64) {
        let rows = self
            .db
            .query(
                &format!(
                    "SELECT key, model_requested, count(*) FROM {}.fg_usage GROUP BY 1, 2 ORDER BY 1, 2",
                    self.name
                ),
                &[],
            )
            .await
            .unwrap();
        let distinct = format!("SELECT count(DISTINCT request_id) FROM {}.fg_usage", self.name);
        let ids: i64 = self.db.query_one(&distinct, &[]).await.unwrap().get(0);
        (rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect(), ids)
    }
}

fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// `ferrogate sidecar` as a child process on fixed ports, ready once its admin API answers.
struct SidecarProcess {
    child: Child,
}

impl SidecarProcess {
    async fn start(config: &Path, db: &str, listen: SocketAddr, admin: SocketAddr, usage_file: Option<&Path>) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferrogate"));
        cmd.args(["sidecar", "--config", config.to_str().unwrap(), "--poll-interval-ms", "200"])
            .args(["--sidecar-listen", &listen.to_string(), "--admin-listen", &admin.to_string()])
            .env("FG_USAGE_E2E_DB", db)
            .env("FERROGATE_INTERNAL_TOKEN", "internal")
            .env_remove("FERROGATE_ADMIN_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(file) = usage_file {
            cmd.args(["--usage-file", file.to_str().unwrap()]);
        }
        let child = cmd.spawn().expect("ferrogate sidecar starts");
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while client.get(format!("http://{admin}/healthz")).send().await.is_err() {
            assert!(Instant::now() < deadline, "sidecar never listened on {admin}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        SidecarProcess { child }
    }

    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for SidecarProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One batch of `n` records as the filter writes them (one JSON line each).
fn batch(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| {
            let key = ["alice", "bob"][i % 2];
            let model = ["chat", "embed"][i % 3 % 2];
            let record = Record {
                request_id: format!("req-{i}"),
                key: Some(key.into()),
                groups: vec!["dev".into()],
                model_requested: model.into(),
                provider: "local".into(),
                upstream_model: "sim-small".into(),
                status: 200,
                prompt_tokens: 10,
                completion_tokens: 3,
                cost_micro_usd: Some(2),
                latency_ms: 12,
                started_at_unix_ms: 1_700_000_000_000 + i as u64,
                ..Record::default()
            };
            record.to_json_line()
        })
        .collect()
}

/// The filter's side of `POST /v1/usage`: batches stay pending until a 2xx, and every tick
/// sends the oldest pending one (one in flight at a time).
struct FilterLike {
    client: reqwest::Client,
    url: String,
    pending: std::collections::VecDeque<String>,
}

impl FilterLike {
    /// One tick: sends the oldest pending batch; true when it was acknowledged.
    async fn tick(&mut self) -> bool {
        let Some(body) = self.pending.front() else { return false };
        let sent = self.client.post(&self.url).bearer_auth("internal").body(body.clone()).send().await;
        let acked = sent.is_ok_and(|r| r.status().is_success());
        if acked {
            self.pending.pop_front();
        }
        acked
    }

    async fn flush(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.pending.is_empty() {
            if !self.tick().await {
                assert!(Instant::now() < deadline, "{} batches never acknowledged", self.pending.len());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

fn sidecar_config(dir: &Path, postgres: bool) -> PathBuf {
    let store = if postgres { "store: { kind: postgres, url_env: FG_USAGE_E2E_DB }\n" } else { "" };
    let path = dir.join("sidecar.yaml");
    std::fs::write(
        &path,
        format!(
            "{store}providers: [{{ name: local, kind: openai_compatible, base_url: 'http://127.0.0.1:8000' }}]\n\
             models: [{{ name: chat, targets: [{{ provider: local, model: sim-small }}] }}]\n"
        ),
    )
    .unwrap();
    path
}

/// Totals of the admin usage API for `query`.
async fn totals(admin: SocketAddr, query: &str) -> Value {
    let url = format!("http://{admin}/api/v1/usage?{query}");
    let answer: Value = reqwest::get(url).await.unwrap().json().await.unwrap();
    answer["totals"].clone()
}

/// Kill, then restart on the same ports: `N` records acknowledged before, `M` sent while the
/// sidecar is away; the last batch before the kill is sent again, as if its acknowledgement
/// had been lost.
async fn kill_and_restart(postgres: bool, scratch: &Scratch) {
    let config = sidecar_config(&scratch.dir, postgres);
    let file = scratch.dir.join("usage.jsonl");
    let usage_file = (!postgres).then_some(file.as_path());
    let (listen, admin) = (free_port(), free_port());
    let url = format!("http://{listen}/v1/usage");
    let mut filter = FilterLike { client: reqwest::Client::new(), url, pending: Default::default() };
    let sidecar = SidecarProcess::start(&config, &scratch.url, listen, admin, usage_file).await;
    filter.pending.extend([batch(0, 40), batch(40, 40), batch(80, 40)]);
    filter.flush(Duration::from_secs(10)).await;
    sidecar.kill();

    filter.pending.extend([batch(120, 30), batch(150, 30)]);
    assert!(!filter.tick().await, "nobody listens: the batch stays pending");
    assert_eq!(filter.pending.len(), 2);
    if postgres {
        // The lost acknowledgement: the last batch before the kill comes again.
        filter.pending.push_front(batch(80, 40));
    }
    let _restarted = SidecarProcess::start(&config, &scratch.url, listen, admin, usage_file).await;
    filter.flush(Duration::from_secs(10)).await;
    let all = totals(admin, "limit=0").await;
    assert_eq!(all, json!({"requests": 180, "prompt_tokens": 1800, "completion_tokens": 540, "cost_micro_usd": 360}));
    assert_eq!(totals(admin, "key=alice").await["requests"], 90);
    assert_eq!(totals(admin, "key=bob&model=chat").await["requests"], 60);
    let window = "since=1700000000100&until=1700000000150";
    assert_eq!(totals(admin, window).await["requests"], 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_postgres_sidecar_loses_and_doubles_nothing() {
    let scratch = Scratch::new("fg_usage_e2e").await;
    kill_and_restart(true, &scratch).await;
    let (groups, distinct) = scratch.stored().await;
    assert_eq!(distinct, 180, "every record once");
    let count = |key: &str, model: &str| {
        groups.iter().find(|(k, m, _)| k.as_deref() == Some(key) && m == model).map_or(0, |g| g.2)
    };
    assert_eq!((count("alice", "chat"), count("alice", "embed")), (60, 30), "{groups:?}");
    assert_eq!((count("bob", "chat"), count("bob", "embed")), (60, 30), "{groups:?}");
    scratch.drop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_file_store_sidecar_reads_its_usage_file_back() {
    let scratch = Scratch::new("fg_usage_e2e").await;
    kill_and_restart(false, &scratch).await;
    let text = std::fs::read(scratch.dir.join("usage.jsonl")).unwrap();
    assert_eq!(Record::parse_lines(&text).unwrap().len(), 180);
    scratch.drop_all().await;
}

/// `serve` on the database behind `db_url`, seeded with models chat and embed (both on the
/// sim) and the keys alice and bob; returns the gateway and both keys.
async fn gateway(scratch: &Scratch, db_url: &str, sim: SocketAddr) -> (Gateway, [String; 2]) {
    let var = format!("FG_TEST_DB_{}", scratch.name);
    // SAFETY: a variable of this test's own name, set before the gateway reads it.
    unsafe { std::env::set_var(&var, db_url) };
    let (alice, alice_digest) = ferrogate_sidecar::cli::new_key();
    let (bob, bob_digest) = ferrogate_sidecar::cli::new_key();
    let config = scratch.dir.join("serve.yaml");
    std::fs::write(
        &config,
        format!(
            "store: {{ kind: postgres, url_env: {var} }}\n\
             providers: [{{ name: local, kind: openai_compatible, base_url: 'http://{sim}' }}]\n\
             models:\n  - {{ name: chat, targets: [{{ provider: local, model: sim-small }}] }}\n\
             \x20 - {{ name: embed, targets: [{{ provider: local, model: sim-small }}] }}\n\
             keys:\n  - {{ name: alice, digest: '{alice_digest}', models: ['*'] }}\n\
             \x20 - {{ name: bob, digest: '{bob_digest}', models: ['*'] }}\n"
        ),
    )
    .unwrap();
    let argv = ["serve", "--config", config.to_str().unwrap(), "--listen", "127.0.0.1:0"];
    let more = ["--admin-listen", "127.0.0.1:0", "--sidecar-listen", "127.0.0.1:0", "--workers", "2"];
    let mut args = Cli::<ServeArgs>::parse_from(argv.into_iter().chain(more)).args;
    args.filter = Some(filter_wasm());
    (Gateway::start(&args).await.expect("gateway starts"), [alice, bob])
}

/// `count` chat completions, alternating alice and bob, every third on `embed`.
async fn requests(gw: &Gateway, keys: &[String; 2], from: usize, count: usize) {
    let client = reqwest::Client::new();
    for i in from..from + count {
        let model = if i % 3 == 2 { "embed" } else { "chat" };
        let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
        let r = client
            .post(format!("http://{}/v1/chat/completions", gw.addr()))
            .bearer_auth(&keys[i % 2])
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{:?}", r.text().await);
    }
}

/// Waits until `fg_usage` holds `n` distinct requests.
async fn wait_stored(scratch: &Scratch, n: i64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let (_, distinct) = scratch.stored().await;
        if distinct == n {
            return;
        }
        assert!(Instant::now() < deadline, "fg_usage holds {distinct} requests, expected {n}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_filter_keeps_its_records_while_the_usage_database_is_away() {
    let scratch = Scratch::new("fg_usage_e2e").await;
    let (sim, fwd) = (start_sim(&[]).await, Forwarder::start(&scratch.url).await);
    let (gw, keys) = gateway(&scratch, &fwd.url(&scratch.url), sim).await;
    let (n, m) = (9, 12);
    requests(&gw, &keys, 0, n).await;
    wait_stored(&scratch, n as i64, Duration::from_secs(10)).await;

    fwd.set(false);
    requests(&gw, &keys, n, m).await;
    // A few ticks of refused posts (503): nothing new is stored, nothing is dropped.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(scratch.stored().await.1, n as i64, "stored while the database was away?");
    fwd.set(true);
    wait_stored(&scratch, (n + m) as i64, Duration::from_secs(15)).await;

    // And no more arrive later: every request is there exactly once, under its key and model.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (groups, distinct) = scratch.stored().await;
    assert_eq!(distinct, (n + m) as i64);
    let expect = |key: &str, model: &str| {
        (0..n + m).filter(|i| ["alice", "bob"][i % 2] == key && (i % 3 == 2) == (model == "embed")).count() as i64
    };
    for (key, model, count) in &groups {
        let key = key.as_deref().unwrap();
        assert_eq!(*count, expect(key, model), "{key} {model}: {groups:?}");
    }
    assert_eq!(groups.iter().map(|g| g.2).sum::<i64>(), (n + m) as i64, "{groups:?}");
    let admin = format!("http://{}/api/v1/usage?key=alice&limit=1", gw.admin_addr());
    let answer: Value = reqwest::get(admin).await.unwrap().json().await.unwrap();
    assert_eq!(answer["totals"]["requests"], expect("alice", "chat") + expect("alice", "embed"));
    assert_eq!(answer["records"][0]["upstream_model"], "sim-small");
    gw.shutdown().await;
    scratch.drop_all().await;
}
