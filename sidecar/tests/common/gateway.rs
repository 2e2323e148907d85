//! A `ferrogate serve` in the test process (the real filter wasm, two workers) over a
//! configuration written to a scratch directory.

// Shared by several test binaries, each using a part of it.
#![allow(dead_code)]

use clap::Parser;
use ferrogate_sidecar::serve::{Gateway, ServeArgs};

#[path = "wasm.rs"]
mod wasm;

#[derive(Parser)]
struct ServeCli {
    #[command(flatten)]
    args: ServeArgs,
}

/// A running gateway and its scratch directory (removed when dropped).
pub struct Setup {
    pub gateway: Gateway,
    /// `http://host:port` of its data-plane listener.
    pub base: String,
    _dir: TempDir,
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Setup {
    /// The configuration file it serves (edits are picked up within `--poll-interval-ms`).
    pub fn config_path(&self) -> std::path::PathBuf {
        self._dir.0.join("config.yaml")
    }
}

/// A gateway over `providers` (YAML flow entries), `models` (YAML block entries) and `extra`
/// top-level YAML (e.g. `limits:`).
pub async fn gateway_with(providers: &[String], models: &str, extra: &str) -> Setup {
    gateway_on(providers, models, extra, 2).await
}

/// [`gateway_with`] with `workers` worker VMs.
pub async fn gateway_on(providers: &[String], models: &str, extra: &str, workers: usize) -> Setup {
    gateway_flags(providers, models, extra, workers, &[]).await
}

/// [`gateway_on`] with more `serve` flags.
pub async fn gateway_flags(providers: &[String], models: &str, extra: &str, workers: usize, flags: &[&str]) -> Setup {
    let dir = std::env::temp_dir().join(format!("ferrogate-e2e-{}-{}", std::process::id(), rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let providers: String = providers.iter().map(|p| format!("  - {p}\n")).collect();
    std::fs::write(dir.join("config.yaml"), format!("providers:\n{providers}models:\n{models}{extra}")).unwrap();
    let config = dir.join("config.yaml");
    let workers = workers.to_string();
    let mut argv = vec![
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--sidecar-listen",
        "127.0.0.1:0",
        "--workers",
        &workers,
    ];
    argv.extend_from_slice(flags);
    let mut args = ServeCli::parse_from(argv).args;
    args.filter = Some(wasm::filter_wasm());
    let gateway = Gateway::start(&args).await.expect("gateway starts");
    let base = format!("http://{}", gateway.addr());
    Setup { gateway, base, _dir: TempDir(dir) }
}

/// A gateway over `providers` and `models` only.
pub async fn gateway(providers: &[String], models: &str) -> Setup {
    gateway_with(providers, models, "").await
}

/// A provider entry: `name`, `kind`, `base_url: http://<addr>`.
pub fn provider(name: &str, kind: &str, addr: &str) -> String {
    format!("{{ name: {name}, kind: {kind}, base_url: 'http://{addr}' }}")
}

/// An `openai_compatible` provider `name` balancing over the pool `endpoints`.
pub fn pool(name: &str, endpoints: &[String]) -> String {
    format!(
        "{{ name: {name}, kind: openai_compatible, base_url: 'http://{name}.internal', endpoints: [{}] }}",
        endpoints.join(", ")
    )
}
