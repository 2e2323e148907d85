//! `ferrogate sidecar`: the companion process of a filter running in Envoy or Istio.
//!
//! The same services `ferrogate serve` runs in process, without the proxy: the filter-facing
//! API (snapshot, usage ingestion) on `127.0.0.1:9000` and the admin API on `127.0.0.1:9001`.
//! The configuration file is watched and every edit becomes a new snapshot; when the file is
//! unusable at start, the last good snapshot cached on disk is served until it is fixed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::watch;

use crate::serve::config::read_raw;
use crate::serve::{spawn_router, Listener, ServeError};
use crate::services::auth::non_loopback_without_token;
use crate::services::limits::Ledger;
use crate::services::snapshot::Snapshots;
use crate::services::source::{is_postgres, start_retrying, Database};
use crate::services::store::FileStore;
use crate::services::usage::UsageBackend;
use crate::services::{admin, filter_api};

/// Options of `ferrogate sidecar`.
#[derive(clap::Args, Clone, Debug)]
pub struct SidecarArgs {
    /// Configuration file (YAML or JSON), watched for edits.
    #[arg(long)]
    pub config: PathBuf,
    /// Filter-facing listener (snapshot, usage); bearer `FERROGATE_INTERNAL_TOKEN`.
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub sidecar_listen: SocketAddr,
    /// Admin listener (health, metrics, admin API); bearer `FERROGATE_ADMIN_TOKEN`.
    #[arg(long, default_value = "127.0.0.1:9001")]
    pub admin_listen: SocketAddr,
    /// How often the config file is checked for edits, in milliseconds.
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
    /// Last-known-good snapshot file, written on every publication and served at start when
    /// the configuration cannot be loaded; default: none, nothing is written.
    #[arg(long)]
    pub snapshot_cache: Option<PathBuf>,
    /// Keeps the current snapshot in this file, the body `GET /v1/snapshot` answers (provider
    /// keys in clear, mode 0600), replaced atomically on every new version, for a filter that
    /// reads its configuration from a file; default: none.
    #[arg(long)]
    pub snapshot_file: Option<PathBuf>,
    /// With the file store, also append usage records to this file as JSON lines (its newest
    /// records are read back at start); default: none, records are kept in memory only. With
    /// the postgres store they go to `fg_usage` instead.
    #[arg(long)]
    pub usage_file: Option<PathBuf>,
    /// Ingests the usage records filters append to this file (JSON lines, as `POST /v1/usage`
    /// bodies), read every 500 ms from the offset kept in `PATH.offset`, rotated to `PATH.1`
    /// past 64 MiB; default: none.
    #[arg(long)]
    pub usage_inbox: Option<PathBuf>,
    /// Also write every usage record, once, as it is ingested, to this file as one JSON object
    /// per line for log shippers (`-`: stdout); default: none.
    #[arg(long, value_name = "PATH|-")]
    pub request_log: Option<PathBuf>,
    /// This replica's id in the shared limit counters (default: host name, process id and
    /// start time, new on every start).
    #[arg(long, env = "FERROGATE_REPLICA_ID")]
    pub replica_id: Option<String>,
    /// The proxy's listener, through which the federated `/mcp` reaches each MCP server
    /// (`/mcp/{server}`, as the caller); default: none, and the federated `/mcp` answers 501.
    #[arg(long, env = "FERROGATE_GATEWAY_URL", value_name = "URL")]
    pub gateway_url: Option<String>,
    /// Bearer token of the filter-facing API, from `FERROGATE_INTERNAL_TOKEN` (never a flag,
    /// so it does not show in `ps`).
    #[arg(skip = env_token("FERROGATE_INTERNAL_TOKEN"))]
    pub internal_token: Option<String>,
    /// Bearer token of the admin API, from `FERROGATE_ADMIN_TOKEN`.
    #[arg(skip = env_token("FERROGATE_ADMIN_TOKEN"))]
    pub admin_token: Option<String>,
}

/// A running sidecar.
pub struct Sidecar {
    /// Bound filter-facing address.
    pub sidecar_addr: SocketAddr,
    /// Bound admin address.
    pub admin_addr: SocketAddr,
    /// The snapshot being served.
    pub snapshots: Arc<Snapshots>,
    shutdown: watch::Sender<bool>,
}

impl Sidecar {
    /// Loads the configuration (or the cached snapshot) and starts both listeners.
    pub async fn start(args: &SidecarArgs) -> Result<Sidecar, ServeError> {
        let (internal_token, admin_token) = (args.internal_token.clone(), args.admin_token.clone());
        admin::check_bind(args.admin_listen, admin_token.as_deref())?;
        if non_loopback_without_token(args.sidecar_listen, internal_token.as_deref()) {
            return Err(ServeError::OpenSidecar(args.sidecar_listen));
        }
        let snapshots = Arc::new(Snapshots::new(args.snapshot_cache.clone()));
        let (shutdown, rx) = watch::channel(false);
        let refresh = Duration::from_millis(args.dns_refresh_ms.max(100));
        let resolver = crate::services::dns::resolver(args.dns_server).map_err(ServeError::Dns)?;
        crate::services::dns::start(snapshots.clone(), refresh, resolver, rx.clone());
        crate::services::kube::start(snapshots.clone(), &args.kube, rx.clone());
        crate::services::clouds::start(snapshots.clone(), crate::services::clouds::client(), rx.clone());
        crate::services::mcp_oauth::start(snapshots.clone(), rx.clone());
        let db = Arc::new(OnceLock::new());
        let postgres = open_source(args, &snapshots, &db, rx.clone()).await;
        let usage =
            Arc::new(UsageBackend::choose(postgres, &db, args.usage_file.clone(), args.request_log.as_deref())?);
        let ledger = ledger_for(args, &snapshots, rx.clone());
        crate::services::incidents::start(db.clone(), ledger.replica.clone(), rx.clone());
        let targets = crate::services::targets::start(snapshots.clone(), Default::default(), rx.clone());
        let kv = crate::services::kv::start(snapshots.clone(), rx.clone());
        start_file_exchange(args, &snapshots, &usage, &ledger, &rx);
        let retention = crate::services::responses::retention_of(&args.config);
        let responses = Arc::new(crate::services::responses::ResponseStore::choose(postgres, &db, retention));
        crate::services::responses::start_sweeper(responses.clone(), rx.clone());
        let stored =
            crate::services::responses::api::ResponsesApi { store: responses, internal_token: internal_token.clone() };
        let federation =
            crate::services::mcp_federation::Federation::new(args.gateway_url.clone(), internal_token.clone());
        let api = filter_api::FilterApi {
            usage: usage.clone(),
            snapshots: snapshots.clone(),
            internal_token,
            ledger: ledger.clone(),
            targets: targets.clone(),
            kv: kv.clone(),
            usage_failing: Default::default(),
        };
        let semantic = crate::services::semantic::SemanticApi::new(snapshots.clone(), api.internal_token.clone());
        let cache = crate::services::cache::start(snapshots.clone(), db.clone(), rx.clone());
        let cached =
            crate::services::cache::CacheApi { cache: cache.clone(), internal_token: api.internal_token.clone() };
        cache.set_semantic_purge(semantic.purge_hook());
        let sidecar_addr = spawn_router(
            Listener::Sidecar,
            args.sidecar_listen,
            crate::services::mcp_federation::mount(
                filter_api::router(api)
                    .merge(crate::services::responses::router(stored))
                    .merge(crate::services::cache::router(cached))
                    .merge(crate::services::semantic::router(semantic)),
                federation,
            ),
            rx.clone(),
        )
        .await?;
        let identity = crate::services::identity::Identity::new(
            admin::settings_of(&args.config)?,
            admin_token.clone(),
            db.clone(),
            postgres,
        );
        let state = admin::Admin {
            identity,
            runtime: None,
            usage,
            cache,
            snapshots: snapshots.clone(),
            db,
            postgres,
            ledger,
            targets,
            kv,
        };
        let admin_addr = spawn_router(Listener::Admin, args.admin_listen, admin::router(state), rx).await?;
        tracing::info!(%sidecar_addr, %admin_addr, config = %args.config.display(), "ferrogate sidecar listening");
        Ok(Sidecar { sidecar_addr, admin_addr, snapshots, shutdown })
    }

    /// Stops both listeners and the file watch.
    pub fn shutdown(self) {
        let _ = self.shutdown.send(true);
    }
}

/// The files a filter without network calls uses instead of the filter-facing API: the
/// snapshot it reads (`--snapshot-file`) and the inbox it appends usage records to
/// (`--usage-inbox`, folded into the limits ledger like `POST /v1/usage` batches).
fn start_file_exchange(
    args: &SidecarArgs,
    snapshots: &Arc<Snapshots>,
    usage: &Arc<UsageBackend>,
    ledger: &Arc<Ledger>,
    rx: &watch::Receiver<bool>,
) {
    if let Some(path) = &args.snapshot_file {
        crate::services::snapshot::file::start(snapshots, path.clone(), rx.clone());
    }
    if let Some(path) = &args.usage_inbox {
        let (snapshots, ledger) = (snapshots.clone(), ledger.clone());
        let fold: crate::services::usage::inbox::OnStored = Box::new(move |batch: &[u8]| {
            if let Some(served) = snapshots.current() {
                ledger.fold(batch, &served.version, &served.config);
            }
        });
        crate::services::usage::inbox::start(path.clone(), usage.clone(), Some(fold), rx.clone());
    }
}

/// Starts the configuration source; when it yields no snapshot (a broken file, a database
/// down), the cached last good one serves. Returns whether the store is Postgres.
async fn open_source(
    args: &SidecarArgs,
    snapshots: &Arc<Snapshots>,
    db: &Arc<OnceLock<Database>>,
    rx: watch::Receiver<bool>,
) -> bool {
    let poll = Duration::from_millis(args.poll_interval_ms.max(100));
    let postgres = match read_raw(&args.config) {
        Ok(raw) if is_postgres(&raw) => {
            start_retrying(&args.config, &raw, snapshots, poll, rx, db.clone()).await;
            true
        }
        Ok(_) | Err(_) => {
            // The file store; even an unreadable file is watched, so a fix is picked up.
            let store = FileStore::new(&args.config, poll);
            if let Err(e) = store.load_into(snapshots) {
                tracing::error!("{e}");
            }
            tokio::spawn(store.watch(snapshots.clone(), rx));
            false
        }
    };
    if snapshots.current().is_none() {
        match snapshots.restore_cached() {
            Ok(true) => tracing::warn!("serving the cached last good snapshot until the configuration loads"),
            Ok(false) => tracing::warn!("no snapshot to serve until the configuration loads (filters answer 503)"),
            Err(e) => tracing::error!("{e}; no snapshot to serve until the configuration loads"),
        }
    }
    postgres
}

/// The limits ledger, shared through Redis when the configuration file's `redis:` (read at
/// start, whatever the store) or, for a file that cannot be read, the snapshot served at start
/// names it.
fn ledger_for(args: &SidecarArgs, snapshots: &Snapshots, rx: watch::Receiver<bool>) -> Arc<Ledger> {
    let from_file = read_raw(&args.config).ok().and_then(|raw| raw.redis).map(|r| r.url_env);
    let redis = from_file.or_else(|| snapshots.current().and_then(|s| s.config.redis_url_env.clone()));
    crate::services::limits::start(redis.as_deref(), args.replica_id.clone(), rx)
}

fn env_token(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|t| !t.is_empty())
}
