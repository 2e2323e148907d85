//! `ferrogate serve`: a complete gateway in one process.
//!
//! The filter wasm runs in the embedded proxy-wasm host exactly as it would in Envoy: worker
//! threads each own a VM, requests pass through the filter's callbacks, and the cluster the
//! filter names (its routing header) is where the request goes. Clusters come from the
//! config's providers. The admin listener serves health and the filter's metrics.

mod admin;
pub mod body;
pub mod cluster;
pub mod config;
pub mod headers;
mod stream;
pub mod upstream;
mod worker;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ferrogate_host::{PluginSpec, Runtime};
use tokio::sync::watch;

pub use worker::WorkerConfig;

/// Options of `ferrogate serve`.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeArgs {
    /// Configuration file (YAML or JSON).
    #[arg(long)]
    pub config: PathBuf,
    /// Gateway listener (HTTP/1.1 and h2c).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Filter module; default: `ferrogate_filter.wasm` found next to the binary or in the
    /// build tree (`$FERROGATE_FILTER_WASM` overrides).
    #[arg(long)]
    pub filter: Option<PathBuf>,
    /// Filter-facing sidecar listener.
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub sidecar_listen: SocketAddr,
    /// Admin listener (health, metrics).
    #[arg(long, default_value = "127.0.0.1:9001")]
    pub admin_listen: SocketAddr,
    /// Worker threads, each with its own filter VM (default: one per core).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Route timeout in milliseconds (0: none, fit for long generations).
    #[arg(long, default_value_t = 0)]
    pub upstream_timeout_ms: u64,
    /// How long shutdown waits for in-flight requests, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub drain_timeout_ms: u64,
    /// Largest request body the filter may buffer (Envoy's buffer limit).
    #[arg(long, default_value_t = 16 << 20)]
    pub max_body_bytes: usize,
}

/// Errors starting the gateway.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The configuration cannot be used.
    #[error(transparent)]
    Config(#[from] config::LoadError),
    /// The filter module cannot be found or loaded.
    #[error("filter module: {0}")]
    Filter(String),
    /// The host refused the module or its configuration.
    #[error(transparent)]
    Host(#[from] ferrogate_host::HostError),
    /// Socket or thread trouble.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A worker could not start.
    #[error("worker failed to start: {0}")]
    Worker(String),
}

/// A running gateway.
pub struct Gateway {
    addr: SocketAddr,
    admin_addr: SocketAddr,
    runtime: Runtime,
    shutdown: watch::Sender<bool>,
    workers: Vec<JoinHandle<()>>,
}

impl Gateway {
    /// Loads config and filter, binds the listeners and starts the workers.
    pub async fn start(args: &ServeArgs) -> Result<Gateway, ServeError> {
        let loaded = config::load(&args.config, args.max_body_bytes)?;
        let wasm_path = find_filter(args.filter.as_deref())?;
        let wasm = std::fs::read(&wasm_path).map_err(|e| ServeError::Filter(format!("{}: {e}", wasm_path.display())))?;
        let spec = PluginSpec {
            name: "ferrogate".into(),
            root_id: "ferrogate".into(),
            vm_id: "ferrogate".into(),
            configuration: loaded.plugin_configuration.clone().into_bytes(),
            allow_on_headers_stop_iteration: true,
            body_buffer_limit: args.max_body_bytes,
            clusters: Some(loaded.clusters.names().map(String::from).collect()),
            ..PluginSpec::default()
        };
        let runtime = Runtime::new(&wasm, spec)?;
        let listener = std::net::TcpListener::bind(args.listen)?;
        let addr = listener.local_addr()?;
        let (shutdown, rx) = watch::channel(false);
        let admin_listener = tokio::net::TcpListener::bind(args.admin_listen).await?;
        let admin_addr = admin_listener.local_addr()?;
        tokio::spawn(admin::serve(admin_listener, runtime.clone(), rx.clone()));
        let config = Arc::new(WorkerConfig {
            runtime: runtime.clone(),
            clusters: Arc::new(loaded.clusters),
            cluster_header: loaded.cluster_header,
            upstream_timeout: (args.upstream_timeout_ms > 0).then(|| Duration::from_millis(args.upstream_timeout_ms)),
            drain_timeout: Duration::from_millis(args.drain_timeout_ms),
        });
        let count = args.workers.unwrap_or_else(default_workers).max(1);
        let workers = spawn_workers(count, &config, &listener, &rx)?;
        tracing::info!(%addr, %admin_addr, workers = count, filter = %wasm_path.display(), "ferrogate serve listening");
        Ok(Gateway { addr, admin_addr, runtime, shutdown, workers })
    }

    /// The gateway listener's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The admin listener's address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// The filter host (metrics, shared data).
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Stops accepting, waits for in-flight requests (up to the drain timeout), then returns.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let workers = self.workers;
        let _ = tokio::task::spawn_blocking(move || {
            for w in workers {
                let _ = w.join();
            }
        })
        .await;
    }
}

fn spawn_workers(
    count: usize,
    config: &Arc<WorkerConfig>,
    listener: &std::net::TcpListener,
    shutdown: &watch::Receiver<bool>,
) -> Result<Vec<JoinHandle<()>>, ServeError> {
    let mut handles = Vec::with_capacity(count);
    for index in 0..count {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (config, listener, shutdown) = (config.clone(), listener.try_clone()?, shutdown.clone());
        let handle = std::thread::Builder::new()
            .name(format!("ferrogate-worker-{index}"))
            .spawn(move || worker::run_worker(index, config, listener, shutdown, ready_tx))?;
        match ready_rx.recv() {
            Ok(Ok(())) => handles.push(handle),
            Ok(Err(e)) => return Err(ServeError::Worker(e)),
            Err(_) => return Err(ServeError::Worker("worker exited during start".into())),
        }
    }
    Ok(handles)
}

fn default_workers() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// Finds the filter module: the flag, `$FERROGATE_FILTER_WASM`, next to the binary, or the
/// cargo build tree the binary lives in.
pub fn find_filter(flag: Option<&std::path::Path>) -> Result<PathBuf, ServeError> {
    if let Some(p) = flag {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("FERROGATE_FILTER_WASM") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    let candidates = [
        dir.join("ferrogate_filter.wasm"),
        dir.join("../wasm32-unknown-unknown/release/ferrogate_filter.wasm"),
        dir.join("../../wasm32-unknown-unknown/release/ferrogate_filter.wasm"),
    ];
    candidates.into_iter().find(|c| c.is_file()).ok_or_else(|| {
        ServeError::Filter("ferrogate_filter.wasm not found; build it with `make wasm` or pass --filter".into())
    })
}
