//! Two or more `ferrogate serve` processes (the real binary, the real filter wasm) sharing a
//! private `redis-server` that the test starts, stops and restarts: what the cross-replica
//! limits tests (`limits_e2e.rs`, `leases_e2e.rs`) drive.
//!
//! Needs `redis-server` on the PATH (Debian's `redis-server` package; `.ci/run` installs it).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "wasm.rs"]
mod wasm;

/// A free loopback port (bound, then released for the child to take).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A `redis-server` of the test's own, without persistence (a restart loses everything).
pub struct Redis {
    port: u16,
    child: Option<Child>,
}

impl Redis {
    pub fn start() -> Redis {
        let mut r = Redis { port: free_port(), child: None };
        r.restart();
        r
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn restart(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server on the PATH");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One `ferrogate serve` child process.
pub struct Serve {
    pub child: Child,
    pub base: String,
    pub admin: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub const KEY: &str = "fg-limits-e2e-key";

pub fn config(
    dir: &std::path::Path,
    sim: SocketAddr,
    key_name: &str,
    limits: &str,
    redis_extra: &str,
) -> std::path::PathBuf {
    config_with(dir, sim, key_name, limits, redis_extra, "")
}

/// [`config`] with `extra` top-level YAML appended (pricing, say).
pub fn config_with(
    dir: &std::path::Path,
    sim: SocketAddr,
    key_name: &str,
    limits: &str,
    redis_extra: &str,
    extra: &str,
) -> std::path::PathBuf {
    use sha2::Digest;
    let digest = hex::encode(sha2::Sha256::digest(KEY.as_bytes()));
    let yaml = format!(
        "providers:\n  - {{ name: local, kind: openai_compatible, base_url: 'http://{sim}' }}\n\
         models:\n  - name: chat\n    targets: [{{ provider: local, model: sim-small }}]\n\
         keys:\n  - {{ name: {key_name}, digest: 'sha256:{digest}', models: ['*'], limits: {limits} }}\n\
         redis: {{ url_env: FERROGATE_REDIS_URL{redis_extra} }}\n{extra}"
    );
    let path = dir.join("config.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

pub fn serve(config: &std::path::Path, redis: &Redis) -> Serve {
    serve_env(config, &[("FERROGATE_REDIS_URL", &redis.url())])
}

/// `ferrogate serve` (two worker VMs) on free ports with `config` and `env` set.
///
/// The ports are picked free and released before `serve` binds them, so another process can
/// take one meanwhile: a `serve` that exits (its bind failed) is started again on new ports.
pub fn serve_env(config: &std::path::Path, env: &[(&str, &str)]) -> Serve {
    for _ in 0..5 {
        if let Some(s) = try_serve(config, env) {
            return s;
        }
    }
    panic!("serve did not start: it exited on each of 5 sets of free ports");
}

/// One start of `serve`; `None` when it exited before listening.
fn try_serve(config: &std::path::Path, env: &[(&str, &str)]) -> Option<Serve> {
    let (listen, sidecar, admin) = (free_port(), free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_ferrogate"))
        .arg("serve")
        .args(["--config", config.to_str().unwrap()])
        .args(["--listen", &format!("127.0.0.1:{listen}")])
        .args(["--sidecar-listen", &format!("127.0.0.1:{sidecar}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
        .args(["--workers", "2", "--poll-interval-ms", "200"])
        .args(["--filter", wasm::filter_wasm().to_str().unwrap()])
        .envs(env.iter().copied())
        .env_remove("FERROGATE_ADMIN_TOKEN")
        .env_remove("FERROGATE_INTERNAL_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut s = Serve { child, base: format!("http://127.0.0.1:{listen}"), admin: format!("http://127.0.0.1:{admin}") };
    // Compiling the filter for two VMs takes seconds, longer while other tests run.
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", listen)).is_err() {
        if s.child.try_wait().unwrap().is_some() {
            return None;
        }
        assert!(Instant::now() < deadline, "serve did not start within 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(s)
}

pub async fn chat(client: &reqwest::Client, s: &Serve) -> u16 {
    let body = json!({"model": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
    let resp = client.post(format!("{}/v1/chat/completions", s.base)).bearer_auth(KEY).json(&body).send().await;
    resp.map_or(0, |r| r.status().as_u16())
}

pub async fn limits(s: &Serve) -> Value {
    reqwest::get(format!("{}/api/v1/limits", s.admin)).await.unwrap().json().await.unwrap()
}

/// Waits until `s`'s sidecar reports `synced == want`.
pub async fn wait_synced(s: &Serve, want: bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while limits(s).await["synced"] != want {
        assert!(Instant::now() < deadline, "synced never became {want}: {}", limits(s).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends `n` requests to `s`, one every `gap`; returns the statuses.
pub async fn drive(s: &Serve, n: usize, gap: Duration) -> Vec<u16> {
    let client = reqwest::Client::new();
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(chat(&client, s).await);
        tokio::time::sleep(gap).await;
    }
    out
}

pub fn tmpdir() -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("ferrogate-limits-e2e-{}-{:x}", std::process::id(), rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
