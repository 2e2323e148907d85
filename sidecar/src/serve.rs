//! `ferrogate serve`: a complete gateway in one process.
//!
//! The filter wasm runs in the embedded proxy-wasm host exactly as it would in Envoy: worker
//! threads each own a VM, requests pass through the filter's callbacks, and the cluster the
//! filter names (its routing header) is where the request goes. Clusters come from the
//! config's providers. The admin listener serves health and the filter's metrics.

pub mod balance;
pub mod body;
pub mod cluster;
pub mod config;
pub mod egress;
pub mod epp;
mod head;
pub mod headers;
mod listener;
mod stream;
mod trace;
pub mod upstream;
mod worker;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use ferrogate_host::{PluginSpec, Runtime};
use tokio::sync::watch;

use crate::services;
use crate::services::snapshot::{Served, Snapshots};
use crate::services::source::Database;
use crate::services::usage::UsageBackend;
use cluster::{Cluster, Clusters, LiveClusters};
use ferrogate_core::config::{Config, RawConfig};
use ferrogate_core::snapshot::Snapshot;

pub(crate) use listener::spawn_router;
pub use listener::Listener;
use listener::{listen, serve_router};
use upstream::UpstreamTimeouts;
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
    /// Filter-facing sidecar listener (snapshots, usage), reached by the filter in process;
    /// port 0 picks a free one, printed at start.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub sidecar_listen: SocketAddr,
    /// Admin listener (health, metrics, admin API); port 0 picks a free one, printed at start.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub admin_listen: SocketAddr,
    /// Endpoint Picker listener (Gateway API Inference Extension): Envoy's ext_proc gRPC
    /// service over h2c, answering each request with the filter's endpoint pick
    /// (`x-gateway-destination-endpoint` header and `envoy.lb` metadata); default: off.
    #[arg(long, value_name = "ADDR")]
    pub epp_listen: Option<SocketAddr>,
    /// Fallback endpoints the Endpoint Picker lists after its pick, best first, for gateways
    /// that walk the list on retries (Istio); 0 (the default) sends the pick alone, which
    /// every gateway reads (agentgateway takes a single address).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=8))]
    pub epp_fallbacks: u8,
    /// Leader election among Endpoint Picker replicas on this Lease (`coordination.k8s.io`, in
    /// the `--kube-namespace`): only the replica holding it reports ready; default: off, every
    /// replica is ready.
    #[arg(long, value_name = "NAME")]
    pub epp_lease: Option<String>,
    /// The Lease's `leaseDurationSeconds`: how long a silent leader keeps it.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub epp_lease_seconds: u64,
    /// Worker threads, each with its own filter VM (default: one per core).
    #[arg(long)]
    pub workers: Option<usize>,
    /// How long an upstream connection may take to open, in milliseconds (Envoy: the
    /// cluster's `connect_timeout`, 5 s by default); past it the attempt fails (502); 0: none.
    #[arg(long, default_value_t = 5_000)]
    pub upstream_connect_timeout_ms: u64,
    /// How long each upstream attempt may take to send its response head, in milliseconds;
    /// past it the client gets a 504. A non-streamed generation answers only when done, so the
    /// default is long (10 minutes); 0: none.
    #[arg(long, default_value_t = 600_000)]
    pub upstream_timeout_ms: u64,
    /// Longest silence between two chunks of an upstream response body, in milliseconds
    /// (Envoy: `stream_idle_timeout`, 5 minutes); past it the answer ends as timed out (504).
    /// A stream that keeps sending is never cut; 0: none.
    #[arg(long, default_value_t = 300_000)]
    pub upstream_idle_timeout_ms: u64,
    /// How long shutdown waits for in-flight requests, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub drain_timeout_ms: u64,
    /// How long a client may take to send a request head, in milliseconds; on HTTP/1.1 it also
    /// closes a keep-alive connection idle that long (Envoy: `request_headers_timeout`); 0: none.
    #[arg(long, default_value_t = 60_000)]
    pub header_timeout_ms: u64,
    /// Longest pause between two chunks of a request body, in milliseconds; the stream is
    /// reset after it (Envoy: `stream_idle_timeout`, 5 minutes); 0: none.
    #[arg(long, default_value_t = 300_000)]
    pub body_timeout_ms: u64,
    /// Most client connections open at once; beyond it new ones are closed at once and a
    /// warning is logged (default: the process's open-file limit less 256, at least 64).
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Largest request body the filter may buffer (Envoy's buffer limit).
    #[arg(long, default_value_t = 16 << 20)]
    pub max_body_bytes: usize,
    /// Send each request once: an attempt that fails is not replayed on another target or
    /// fallback model (the filter's plugin configuration then has no `host_failover`, as in
    /// Envoy).
    #[arg(long)]
    pub no_failover: bool,
    /// Label the request, token and cost metrics with the virtual key's name (one series per
    /// key; the filter's `metrics_key_label`).
    #[arg(long)]
    pub metrics_key_label: bool,
    /// With the file store, also append usage records to this file as JSON lines (its newest
    /// records are read back at start); default: none, records are kept in memory only. With
    /// the postgres store they go to `fg_usage` instead.
    #[arg(long)]
    pub usage_file: Option<PathBuf>,
    /// Also write every usage record, once, as it is ingested, to this file as one JSON object
    /// per line for log shippers (`-`: stdout); default: none.
    #[arg(long, value_name = "PATH|-")]
    pub request_log: Option<PathBuf>,
    /// How often the config file is checked for edits and the filter polls for a new
    /// snapshot, in milliseconds: an edit is served within about twice this.
    #[arg(long, default_value_t = 1_000)]
    pub poll_interval_ms: u64,
    /// How often a provider's `endpoints_dns` name is resolved again, in milliseconds (a
    /// pool that scales is followed within about this).
    #[arg(long, default_value_t = crate::services::dns::DEFAULT_REFRESH_MS)]
    pub dns_refresh_ms: u64,
    /// Ask this DNS server (`ip:port`) for `endpoints_dns` names: A and AAAA records, no
    /// cache, no hosts file, no search domains; default: the system resolver.
    #[arg(long, env = "FERROGATE_DNS_SERVER", value_name = "IP:PORT")]
    pub dns_server: Option<std::net::SocketAddr>,
    /// Where `endpoints_inference_pool` pools are read from.
    #[command(flatten)]
    pub kube: crate::services::kube::KubeFlags,
    /// Keep the last good snapshot in this file (restored when the store is unreachable at
    /// start); default: none, nothing is written.
    #[arg(long)]
    pub snapshot_cache: Option<PathBuf>,
    /// This replica's id in the shared limit counters (default: host name, process id and
    /// start time, new on every start).
    #[arg(long, env = "FERROGATE_REPLICA_ID")]
    pub replica_id: Option<String>,
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
    /// Upstream clusters cannot be built.
    #[error(transparent)]
    Cluster(#[from] cluster::ClusterError),
    /// The admin listener would be unprotected.
    #[error(transparent)]
    Admin(#[from] services::admin::AdminError),
    /// The filter-facing API would be unprotected.
    #[error("refusing to bind the filter-facing API to non-loopback {0} without FERROGATE_INTERNAL_TOKEN")]
    OpenSidecar(SocketAddr),
    /// The configuration store cannot be opened.
    #[error(transparent)]
    Source(#[from] services::source::SourceError),
    /// The store holds no servable configuration.
    #[error("no servable configuration: {0:?}")]
    NoSnapshot(Vec<ferrogate_core::snapshot::WireProblem>),
    /// A listener cannot be bound (address in use, no permission, ...).
    #[error("cannot listen on {addr} for the {} ({source}); choose another address with {}", .listener.name(), .listener.flag())]
    Bind {
        /// Which listener.
        listener: Listener,
        /// The address asked for.
        addr: SocketAddr,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Socket or thread trouble.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A worker could not start.
    #[error("worker failed to start: {0}")]
    Worker(String),
    /// The `--dns-server` resolver cannot be built.
    #[error("--dns-server: {0}")]
    Dns(String),
    /// `--epp-lease` without a Kubernetes API to hold it on.
    #[error("--epp-lease: {0}")]
    Lease(String),
}

/// A running gateway.
pub struct Gateway {
    addr: SocketAddr,
    epp_addr: Option<SocketAddr>,
    admin_addr: SocketAddr,
    sidecar_addr: SocketAddr,
    runtime: Runtime,
    usage: Arc<UsageBackend>,
    shutdown: watch::Sender<bool>,
    workers: Vec<JoinHandle<()>>,
    /// The picker's leader election, which gives its Lease up on shutdown.
    election: Option<tokio::task::JoinHandle<()>>,
}

/// How far the host's body buffer limit sits above the filter's `max_body_bytes`: more than
/// one read of request body, so the chunk that crosses the filter's limit still reaches it.
const BODY_BUFFER_HEADROOM: usize = 1 << 20;

/// Name of the cluster through which the filter reaches the in-process sidecar services.
pub const SIDECAR_CLUSTER: &str = "ferrogate_sidecar";

impl ServeArgs {
    /// These arguments as `ferrogate epp` means them: `--listen` is the endpoint picker's
    /// address, and the HTTP gateway listener takes a free loopback port, reached by nobody.
    pub fn picker(mut self) -> ServeArgs {
        self.epp_listen = Some(self.epp_listen.unwrap_or(self.listen));
        self.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        self
    }
}

impl Gateway {
    /// Loads config and filter, binds the listeners and starts the workers.
    pub async fn start(args: &ServeArgs) -> Result<Gateway, ServeError> {
        let admin_token = std::env::var("FERROGATE_ADMIN_TOKEN").ok().filter(|t| !t.is_empty());
        services::admin::check_bind(args.admin_listen, admin_token.as_deref())?;
        // Every address is bound first, so a busy port fails the start at once (not after the
        // module compiles); each listens only when what it serves is ready, the admin API
        // (health, readiness) last.
        let reserved = Listener::Gateway.reserve(args.listen)?;
        let admin_socket = Listener::Admin.reserve(args.admin_listen)?;
        let sidecar_socket = Listener::Sidecar.reserve(args.sidecar_listen)?;
        let epp_socket = args.epp_listen.map(|a| Listener::Epp.reserve(a)).transpose()?;
        let wasm_path = find_filter(args.filter.as_deref())?;
        let wasm =
            std::fs::read(&wasm_path).map_err(|e| ServeError::Filter(format!("{}: {e}", wasm_path.display())))?;
        let (shutdown, rx) = watch::channel(false);
        let opened = open_config(args, rx.clone()).await?;
        let (snapshots, postgres, db) = (opened.snapshots.clone(), opened.postgres, opened.db.clone());
        let usage =
            Arc::new(UsageBackend::choose(postgres, &db, args.usage_file.clone(), args.request_log.as_deref())?);
        let ledger = services::limits::start(opened.redis_url_env.as_deref(), args.replica_id.clone(), rx.clone());
        services::incidents::start(db.clone(), ledger.replica.clone(), rx.clone());
        let replica = ledger.replica.clone();
        let targets = services::targets::start(snapshots.clone(), Default::default(), rx.clone());
        let kv = services::kv::start(snapshots.clone(), rx.clone());
        let retention = services::responses::retention_of(&args.config);
        let responses = Arc::new(services::responses::ResponseStore::choose(postgres, &db, retention));
        services::responses::start_sweeper(responses.clone(), rx.clone());
        let gateway_url = loopback_url(reserved.local_addr()?);
        let cache = services::cache::start(snapshots.clone(), db.clone(), rx.clone());
        let (sidecar_addr, mut link) = start_sidecar_listener(
            (sidecar_socket, gateway_url),
            (usage.clone(), responses, cache.clone()),
            snapshots.clone(),
            ledger.clone(),
            (targets.clone(), kv.clone()),
            rx.clone(),
        )
        .await?;
        link.poll_interval_ms = args.poll_interval_ms;
        let clusters = Arc::new(LiveClusters::new(cluster_set(&opened.config, sidecar_addr)?));
        tokio::spawn(follow_providers(snapshots.subscribe(), clusters.clone(), sidecar_addr, rx.clone()));
        let clusters_now = clusters.load();
        let spec = PluginSpec {
            name: "ferrogate".into(),
            root_id: "ferrogate".into(),
            vm_id: "ferrogate".into(),
            configuration: config::plugin_configuration(
                &opened.raw,
                args.max_body_bytes,
                Some(&link),
                config::FilterOptions {
                    failover: !args.no_failover,
                    metrics_key_label: args.metrics_key_label,
                    gen_ai_attributes: crate::telemetry::exporting(),
                    endpoint_picker: args.epp_listen.is_some(),
                },
            )
            .into_bytes(),
            allow_on_headers_stop_iteration: true,
            // Above the filter's own limit, so the filter sees an oversized body and answers
            // 413 in the caller's dialect before the host's plain-text 413 would (Envoy: keep
            // the listener's buffer limit above max_body_bytes for the same reason).
            body_buffer_limit: args.max_body_bytes.saturating_add(BODY_BUFFER_HEADROOM),
            clusters: Some(clusters_now.names().map(String::from).collect()),
            ..PluginSpec::default()
        };
        let runtime = Runtime::new(&wasm, spec)?;
        // The labels an Envoy with the shipped bootstrap fragment would give these metrics.
        runtime.set_stats_tags(
            services::metrics::stats_tags().map_err(|e| ServeError::Filter(format!("envoy/stats-tags.yaml: {e}")))?,
        );
        let addr = reserved.local_addr()?;
        let identity = services::identity::Identity::new(
            services::admin::settings_of(&args.config)?,
            admin_token.clone(),
            db.clone(),
            postgres,
        );
        let admin = services::admin::Admin {
            identity,
            runtime: Some(runtime.clone()),
            usage: usage.clone(),
            cache,
            snapshots: snapshots.clone(),
            postgres,
            db,
            ledger,
            targets,
            kv,
        };
        let config = Arc::new(WorkerConfig {
            runtime: runtime.clone(),
            clusters,
            cluster_header: config::CLUSTER_HEADER.to_string(),
            upstream_timeouts: UpstreamTimeouts::from_ms(
                args.upstream_connect_timeout_ms,
                args.upstream_timeout_ms,
                args.upstream_idle_timeout_ms,
            ),
            drain_timeout: Duration::from_millis(args.drain_timeout_ms),
            failover: !args.no_failover,
            header_timeout: (args.header_timeout_ms > 0).then(|| Duration::from_millis(args.header_timeout_ms)),
            body_timeout: (args.body_timeout_ms > 0).then(|| Duration::from_millis(args.body_timeout_ms)),
        });
        let count = args.workers.unwrap_or_else(default_workers).max(1);
        let cap = args.max_connections.unwrap_or_else(balance::default_max_connections).max(1);
        let (balancer, inboxes) = balance::balancer(count, cap);
        let (epp_workers, epp_inboxes) = epp::inboxes(count);
        let workers = spawn_workers(&config, inboxes.into_iter().zip(epp_inboxes).collect(), &rx)?;
        tokio::spawn(balancer.run(listen(reserved)?, rx.clone()));
        let (leading, election) = elect(args, replica, rx.clone())?.map(|l| (l.leading, l.task)).unzip();
        let ready = epp_socket.as_ref().map(|_| epp::ready::watch(snapshots.clone(), leading));
        let epp_addr = start_epp(epp_socket, epp_workers, usize::from(args.epp_fallbacks), ready, rx.clone())?;
        let admin_addr = serve_router(listen(admin_socket)?, services::admin::router(admin), rx.clone())?;
        tracing::info!(%addr, %admin_addr, %sidecar_addr, workers = count, filter = %wasm_path.display(), "ferrogate serve listening");
        Ok(Gateway { addr, epp_addr, admin_addr, sidecar_addr, runtime, usage, shutdown, workers, election })
    }

    /// The gateway listener's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The Endpoint Picker's address (`--epp-listen`), when it serves.
    pub fn epp_addr(&self) -> Option<SocketAddr> {
        self.epp_addr
    }

    /// The admin listener's address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// The filter-facing sidecar listener's address.
    pub fn sidecar_addr(&self) -> SocketAddr {
        self.sidecar_addr
    }

    /// The filter host (metrics, shared data).
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Where usage records received from the filter go.
    pub fn usage(&self) -> &UsageBackend {
        &self.usage
    }

    /// Stops accepting, waits for in-flight requests (up to the drain timeout), then returns.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        if let Some(election) = self.election {
            // The Lease is given up before the process goes, so another replica leads at once.
            let _ = tokio::time::timeout(Duration::from_secs(5), election).await;
        }
        let workers = self.workers;
        let _ = tokio::task::spawn_blocking(move || {
            for w in workers {
                let _ = w.join();
            }
        })
        .await;
    }
}

/// The configuration at start: the first snapshot, its documents, the admin API's database.
struct Opened {
    snapshots: Arc<Snapshots>,
    /// What the filter gets inline (it serves until the first poll).
    raw: RawConfig,
    config: Config,
    /// Whether the store is Postgres.
    postgres: bool,
    /// The database, once connected (at start, or later when it was down then).
    db: Arc<OnceLock<Database>>,
    /// The file's `redis.url_env` (read at start, whatever the store: the limits ledger's link).
    redis_url_env: Option<String>,
}

/// Opens the store the file names and publishes the first snapshot. A broken file fails the
/// start with every problem listed (a running gateway keeps its last good one instead).
async fn open_config(args: &ServeArgs, shutdown: watch::Receiver<bool>) -> Result<Opened, ServeError> {
    let shown = args.config.display().to_string();
    let raw = config::read_raw(&args.config)?;
    let snapshots = Arc::new(Snapshots::new(args.snapshot_cache.clone()));
    let refresh = Duration::from_millis(args.dns_refresh_ms.max(100));
    let resolver = services::dns::resolver(args.dns_server).map_err(ServeError::Dns)?;
    services::dns::start(snapshots.clone(), refresh, resolver, shutdown.clone());
    services::kube::start(snapshots.clone(), &args.kube, shutdown.clone());
    services::clouds::start(snapshots.clone(), services::clouds::client(), shutdown.clone());
    services::mcp_oauth::start(snapshots.clone(), shutdown.clone());
    if raw.store.as_ref().is_none_or(|s| s.kind != "postgres") {
        let loaded = config::load(&args.config)?;
        snapshots.publish(loaded.raw).map_err(|source| config::LoadError::Invalid { path: shown.clone(), source })?;
    }
    let poll = Duration::from_millis(args.poll_interval_ms.max(100));
    let db = Arc::new(OnceLock::new());
    let postgres = services::source::is_postgres(&raw);
    if postgres {
        open_database(args, &raw, &snapshots, &db, shutdown).await?;
    } else if let Some(found) = services::source::start(&args.config, &raw, &snapshots, poll, shutdown).await? {
        let _ = db.set(found);
    }
    let served = snapshots.current().ok_or_else(|| ServeError::NoSnapshot(snapshots.report().rejected))?;
    let (doc, config) = Snapshot::parse(&served.body).map_err(|e| ServeError::Filter(e.to_string()))?;
    let redis_url_env = raw.redis.as_ref().map(|r| r.url_env.clone());
    Ok(Opened { snapshots, raw: doc.config, config, postgres, db, redis_url_env })
}

/// Connects the Postgres store. When the database is down at start the last good snapshot
/// (`--snapshot-cache`) serves and the connection is retried in the background, as the
/// standalone sidecar does; with no cache either the start fails, naming the database error.
async fn open_database(
    args: &ServeArgs,
    raw: &RawConfig,
    snapshots: &Arc<Snapshots>,
    db: &Arc<OnceLock<Database>>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), ServeError> {
    let poll = Duration::from_millis(args.poll_interval_ms.max(100));
    match services::source::start(&args.config, raw, snapshots, poll, shutdown.clone()).await {
        Ok(found) => {
            if let Some(found) = found {
                let _ = db.set(found);
            }
            Ok(())
        }
        Err(e)
            if matches!(e, services::source::SourceError::Store(_)) && snapshots.restore_cached().unwrap_or(false) =>
        {
            tracing::warn!("{e}; serving the cached last good snapshot and retrying the store");
            services::source::start_retrying(&args.config, raw, snapshots, poll, shutdown, db.clone()).await;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Binds the filter-facing listener; the internal token comes from
/// `FERROGATE_INTERNAL_TOKEN` or is generated and shared with the filter in process.
async fn start_sidecar_listener(
    (socket, gateway_url): (tokio::net::TcpSocket, String),
    (usage, responses, cache): (
        Arc<UsageBackend>,
        Arc<services::responses::ResponseStore>,
        Arc<services::cache::Cache>,
    ),
    snapshots: Arc<Snapshots>,
    ledger: Arc<services::limits::Ledger>,
    (targets, kv): (Arc<services::targets::Targets>, Arc<services::kv::Kv>),
    shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, config::SidecarLink), ServeError> {
    let token = std::env::var("FERROGATE_INTERNAL_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| hex::encode(rand::random::<[u8; 32]>()));
    let api = services::filter_api::FilterApi {
        usage,
        snapshots,
        internal_token: Some(token.clone()),
        ledger,
        targets,
        kv,
        usage_failing: Default::default(),
    };
    let stored = services::responses::api::ResponsesApi { store: responses, internal_token: Some(token.clone()) };
    let cached = services::cache::CacheApi { cache, internal_token: Some(token.clone()) };
    let semantic = services::semantic::SemanticApi::new(api.snapshots.clone(), Some(token.clone()));
    cached.cache.set_semantic_purge(semantic.purge_hook());
    let federation = services::mcp_federation::Federation::new(Some(gateway_url), Some(token.clone()));
    let router = services::mcp_federation::mount(
        services::filter_api::router(api)
            .merge(services::responses::router(stored))
            .merge(services::cache::router(cached))
            .merge(services::semantic::router(semantic)),
        federation,
    );
    let bound = serve_router(listen(socket)?, router, shutdown)?;
    let link = config::SidecarLink {
        cluster: SIDECAR_CLUSTER.into(),
        authority: "ferrogate-sidecar".into(),
        token,
        poll_interval_ms: ferrogate_core::plugin::DEFAULT_POLL_INTERVAL_MS,
    };
    Ok((bound, link))
}

/// `http://` and the gateway's port on loopback (the federation calls its own listener).
fn loopback_url(addr: SocketAddr) -> String {
    let ip: std::net::IpAddr = match addr.ip() {
        ip if !ip.is_unspecified() => ip,
        std::net::IpAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
    };
    format!("http://{}", SocketAddr::new(ip, addr.port()))
}

/// One cluster per provider of `config`, plus the in-process sidecar's.
fn cluster_set(config: &Config, sidecar: SocketAddr) -> Result<Clusters, cluster::ClusterError> {
    let mut all = config::clusters_of(config)?;
    all.push(Cluster::new(SIDECAR_CLUSTER, "http", vec![sidecar.to_string()])?.exempt_from_egress());
    Ok(Clusters::new(all)?.with_egress(config.egress.clone()))
}

/// Rebuilds the upstream clusters whenever a snapshot changes the providers, so a provider
/// added at runtime is reachable as soon as the filter routes to it.
async fn follow_providers(
    mut snapshots: watch::Receiver<Option<Arc<Served>>>,
    clusters: Arc<LiveClusters>,
    sidecar: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        // The current snapshot first: one published between the clusters' first build and
        // this subscription (a DNS answer, say) counts as seen for a new receiver.
        if let Some(served) = snapshots.borrow_and_update().clone() {
            match cluster_set(&served.config, sidecar) {
                Ok(set) => clusters.store(set),
                Err(e) => {
                    tracing::error!(error = %e, "snapshot {} not applied to the upstream clusters", served.version)
                }
            }
        }
        tokio::select! {
            changed = snapshots.changed() => if changed.is_err() { return },
            _ = shutdown.changed() => return,
        }
    }
}

/// Starts the picker's leader election when `--epp-lease` asks for it: whether this replica
/// leads, and the election's task.
fn elect(
    args: &ServeArgs,
    identity: String,
    shutdown: watch::Receiver<bool>,
) -> Result<Option<services::kube::lease::Leadership>, ServeError> {
    let Some(name) = args.epp_lease.clone() else { return Ok(None) };
    if args.epp_listen.is_none() {
        return Err(ServeError::Lease("elects among endpoint pickers: needs --epp-listen (or `ferrogate epp`)".into()));
    }
    let client = args.kube.client().map_err(|e| ServeError::Lease(e.to_string()))?;
    let client = client.ok_or_else(|| ServeError::Lease("no Kubernetes API (outside a pod, set --kube-api)".into()))?;
    let election = services::kube::lease::Election {
        namespace: args.kube.namespace(),
        name,
        identity,
        duration: Duration::from_secs(args.epp_lease_seconds),
    };
    Ok(Some(services::kube::lease::start(client, election, shutdown)))
}

/// Starts the Endpoint Picker on its reserved socket, if `--epp-listen` asked for one.
fn start_epp(
    socket: Option<tokio::net::TcpSocket>,
    workers: Vec<tokio::sync::mpsc::UnboundedSender<Box<epp::Job>>>,
    fallbacks: usize,
    ready: Option<watch::Receiver<bool>>,
    shutdown: watch::Receiver<bool>,
) -> Result<Option<SocketAddr>, ServeError> {
    let (Some(socket), Some(ready)) = (socket, ready) else { return Ok(None) };
    let listener = listen(socket)?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = epp::serve(listener, workers, fallbacks, ready, shutdown).await {
            tracing::error!(error = %e, "the endpoint picker stopped");
        }
    });
    tracing::info!(%addr, "endpoint picker (ext_proc) listening");
    Ok(Some(addr))
}

fn spawn_workers(
    config: &Arc<WorkerConfig>,
    inboxes: Vec<(balance::Inbox, epp::Inbox)>,
    shutdown: &watch::Receiver<bool>,
) -> Result<Vec<JoinHandle<()>>, ServeError> {
    let mut handles = Vec::with_capacity(inboxes.len());
    for (index, inbox) in inboxes.into_iter().enumerate() {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (config, shutdown) = (config.clone(), shutdown.clone());
        let handle = std::thread::Builder::new()
            .name(format!("ferrogate-worker-{index}"))
            .spawn(move || worker::run_worker(index, config, inbox, shutdown, ready_tx))?;
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
