//! The Postgres store against the machine's real PostgreSQL (`FERROGATE_TEST_DATABASE_URL`,
//! default `postgres://postgres@127.0.0.1:5432/test`). Each test works in a schema of its own,
//! so they run in parallel and leave nothing behind.

use super::*;
use rows::Resource;
use std::sync::Arc;

use crate::services::snapshot::Snapshots;

use ferrogate_core::config::{RawModel, RawProvider, RawTarget};

/// The database the tests use, and a fresh schema on it that is dropped afterwards.
pub(crate) struct Schema {
    pub(crate) url: String,
    name: String,
}

impl Schema {
    pub(crate) async fn new() -> Schema {
        let base = std::env::var("FERROGATE_TEST_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string());
        let name = format!("fg_t_{:016x}", rand::random::<u64>());
        let (client, conn) = tokio_postgres::connect(&base, NoTls)
            .await
            .unwrap_or_else(|e| panic!("cannot reach PostgreSQL at {base} (FERROGATE_TEST_DATABASE_URL): {e}"));
        tokio::spawn(conn);
        client.batch_execute(&format!("CREATE SCHEMA {name}")).await.unwrap();
        let sep = if base.contains('?') { '&' } else { '?' };
        Schema { url: format!("{base}{sep}options=-csearch_path%3D{name}"), name }
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // Drop on a thread of its own: Drop may run inside the test's runtime.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                if let Ok((client, conn)) = tokio_postgres::connect(&url, NoTls).await {
                    tokio::spawn(conn);
                    // A test that panicked mid-transaction leaves its connection holding locks
                    // (its runtime no longer runs the rollback): give up on the drop rather than
                    // hang the test run.
                    let drop = format!("SET lock_timeout = '5s'; DROP SCHEMA {name} CASCADE");
                    let _ = client.batch_execute(&drop).await;
                }
            });
        })
        .join();
    }
}

pub(crate) fn master() -> MasterKey {
    MasterKey::from_base64("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").unwrap()
}

fn provider(name: &str, key: Option<&str>) -> Change {
    Change::Create(Resource::Provider(RawProvider {
        name: name.into(),
        kind: "openai_compatible".into(),
        base_url: "http://127.0.0.1:8000".into(),
        api_key: key.map(String::from),
        ..RawProvider::default()
    }))
}

fn model(name: &str, provider: &str) -> Change {
    Change::Create(Resource::Model(RawModel {
        name: name.into(),
        targets: vec![RawTarget { provider: provider.into(), model: "m".into(), weight: Some(2) }],
        ..RawModel::default()
    }))
}

#[tokio::test]
async fn writes_bump_the_version_and_load_back_with_keys_opened() {
    let schema = Schema::new().await;
    let store = PgStore::connect(&schema.url, Some(master())).await.unwrap();
    // Migrations are applied once: a second connect finds nothing to do.
    PgStore::connect(&schema.url, None).await.unwrap();
    assert_eq!(store.version().await.unwrap(), 0);
    assert_eq!(store.write(provider("local", Some("sk-upstream"))).await.unwrap(), 1);
    assert_eq!(store.write(model("chat", "local")).await.unwrap(), 2);
    let (version, raw) = store.load().await.unwrap();
    assert_eq!(version, 2);
    assert_eq!(raw.providers[0].api_key.as_deref(), Some("sk-upstream"));
    assert_eq!(raw.models[0].targets[0].weight, Some(2));
    // At rest the key is sealed, and listing never shows it.
    let client = store.pool.get().await.unwrap();
    let sealed: String = client.query_one("SELECT api_key_sealed FROM fg_providers", &[]).await.unwrap().get(0);
    assert!(sealed.starts_with("fgs1:") && !sealed.contains("sk-upstream"));
    let listed = store.list(Section::Providers).await.unwrap();
    assert_eq!(listed[0]["api_key_set"], true);
    assert!(!listed.to_string().contains("sk-upstream") && !listed.to_string().contains("fgs1:"));
    // Without the master key the sealed key cannot be read (and a new one cannot be stored).
    let blind = PgStore::connect(&schema.url, None).await.unwrap();
    assert!(matches!(blind.load().await, Err(StoreError::NoMasterKey)));
    assert!(matches!(blind.write(provider("other", Some("k"))).await, Err(StoreError::NoMasterKey)));
}

#[tokio::test]
async fn unservable_writes_are_refused_and_change_nothing() {
    let schema = Schema::new().await;
    let store = PgStore::connect(&schema.url, None).await.unwrap();
    store.write(provider("local", None)).await.unwrap();
    store.write(model("chat", "local")).await.unwrap();
    let version = store.version().await.unwrap();
    match store.write(model("ghost", "nowhere")).await {
        Err(StoreError::Invalid(problems)) => {
            assert_eq!(problems[0].path, "models[1].targets[0].provider", "{problems:?}");
        }
        other => panic!("{other:?}"),
    }
    match store.write(Change::Delete(Section::Providers, "local".into())).await {
        Err(StoreError::Conflict(msg)) => assert!(msg.contains("models/chat"), "{msg}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(store.write(provider("local", None)).await, Err(StoreError::Conflict(_))));
    assert!(matches!(store.write(Change::Delete(Section::Models, "nope".into())).await, Err(StoreError::NotFound(_))));
    assert_eq!(store.version().await.unwrap(), version, "refused writes leave no trace");
    // Removing the model first makes the provider free to go.
    store.write(Change::Delete(Section::Models, "chat".into())).await.unwrap();
    store.write(Change::Delete(Section::Providers, "local".into())).await.unwrap();
    assert!(store.load().await.unwrap().1.providers.is_empty());
}

#[tokio::test]
async fn a_new_database_is_seeded_once_from_the_file() {
    let schema = Schema::new().await;
    let store = PgStore::connect(&schema.url, None).await.unwrap();
    let raw: RawConfig = serde_saphyr::from_str(
        r#"
providers: [{ name: local, kind: openai_compatible, base_url: "http://127.0.0.1:8000", api_key_env: LOCAL_KEY }]
models: [{ name: chat, targets: [{ provider: local, model: m }], fallbacks: [] }]
aliases: { default: chat }
groups: [{ name: dev, models: ["chat"], limits: { requests_per_minute: 5 } }]
pricing: { m: { input_per_mtok: 1.5, output_per_mtok: 2 } }
"#,
    )
    .unwrap();
    assert!(store.seed(&raw).await.unwrap());
    assert!(!store.seed(&raw).await.unwrap(), "only a never-written store is seeded");
    let (version, loaded) = store.load().await.unwrap();
    assert_eq!(version, 1);
    assert_eq!(loaded, raw, "rows round-trip to the same document");
}

#[tokio::test]
async fn a_seeded_api_key_env_is_read_from_the_environment_not_copied() {
    let schema = Schema::new().await;
    let var = format!("FG_TEST_SEED_KEY_{}", rand::random::<u32>());
    let mut raw: RawConfig = serde_saphyr::from_str(&format!(
        "providers: [{{ name: local, kind: openai_compatible, base_url: 'http://127.0.0.1:8000', api_key_env: {var} }}]\n\
         models: [{{ name: chat, targets: [{{ provider: local, model: m }}] }}]\n"
    ))
    .unwrap();
    // As the sidecar reads the file: the variable already resolved.
    std::env::set_var(&var, "sk-first");
    raw.resolve_api_keys(|name| std::env::var(name).ok());
    // No master key: nothing needs sealing.
    let store = PgStore::connect(&schema.url, None).await.unwrap();
    assert!(store.seed(&raw).await.unwrap());
    let client = store.pool.get().await.unwrap();
    let row = client.query_one("SELECT api_key_env, api_key_sealed FROM fg_providers", &[]).await.unwrap();
    assert_eq!((row.get::<_, Option<String>>(0), row.get::<_, Option<String>>(1)), (Some(var.clone()), None));
    assert_eq!(store.load().await.unwrap().1.providers[0].api_key.as_deref(), Some("sk-first"));
    // Rotated: the next load (a restart) uses the new value; unset: no key.
    std::env::set_var(&var, "sk-rotated");
    assert_eq!(store.load().await.unwrap().1.providers[0].api_key.as_deref(), Some("sk-rotated"));
    std::env::remove_var(&var);
    assert_eq!(store.load().await.unwrap().1.providers[0].api_key, None);
}

/// A pool's KV settings and endpoint objects are stored and read back as written.
#[tokio::test]
async fn a_pool_s_kv_settings_round_trip() {
    use ferrogate_core::config::RawEndpoint;
    let schema = Schema::new().await;
    let store = PgStore::connect(&schema.url, None).await.unwrap();
    let endpoints = vec![
        RawEndpoint::from("10.0.0.1:8000"),
        RawEndpoint {
            address: "10.0.0.2:8000".into(),
            kv_events: Some("tcp://10.0.0.2:5557".into()),
            kv_replay: Some("tcp://10.0.0.2:5558".into()),
        },
    ];
    let pool = RawProvider {
        name: "pool".into(),
        kind: "openai_compatible".into(),
        base_url: "http://vllm:8000".into(),
        endpoints,
        kv_block_size: Some(32),
        kv_topic: Some("kv@".into()),
        kv_max_blocks: Some(5000),
        kv_tokenize: Some(true),
        kv_tier_weights: Some(ferrogate_core::config::RawTierWeights {
            gpu: None,
            cpu: Some(0.9),
            storage: Some(0.25),
        }),
        lmcache_ttl_secs: Some(60),
        ..RawProvider::default()
    };
    store.write(Change::Create(Resource::Provider(pool.clone()))).await.unwrap();
    store.write(provider("plain", None)).await.unwrap();
    let (_, raw) = store.load().await.unwrap();
    assert_eq!(raw.providers.iter().find(|p| p.name == "pool"), Some(&pool));
    let plain = raw.providers.iter().find(|p| p.name == "plain").unwrap();
    assert_eq!((plain.kv_block_size, plain.kv_tokenize), (None, None));
}

/// Flow control's settings (a provider's bound, a model's queue, priorities) are stored and
/// read back as written.
#[tokio::test]
async fn flow_control_settings_round_trip() {
    use ferrogate_core::config::{RawBand, RawFlowControl, RawGroup, RawKey, RawModel, RawTarget};
    let schema = Schema::new().await;
    let store = PgStore::connect(&schema.url, None).await.unwrap();
    let pool = RawProvider {
        name: "pool".into(),
        kind: "openai_compatible".into(),
        base_url: "http://vllm:8000".into(),
        max_concurrency: Some(6),
        ..RawProvider::default()
    };
    let flow = RawFlowControl {
        max_queue: Some(10),
        queue_ttl_ms: Some(900),
        max_waiting: Some(3),
        max_running: Some(9),
        max_kv_usage: Some(0.5),
        bands: vec![RawBand { priority: -2, max_queue: Some(1), queue_ttl_ms: None }],
    };
    let model = RawModel {
        name: "chat".into(),
        targets: vec![RawTarget { provider: "pool".into(), model: "m".into(), weight: None }],
        flow_control: Some(flow),
        ..RawModel::default()
    };
    let group = RawGroup { name: "g".into(), priority: Some(4), ..RawGroup::default() };
    let key = RawKey {
        name: "k".into(),
        digest: format!("sha256:{}", "e".repeat(64)),
        groups: vec!["g".into()],
        priority: Some(-3),
        ..RawKey::default()
    };
    store.write(Change::Create(Resource::Provider(pool.clone()))).await.unwrap();
    store.write(Change::Create(Resource::Model(model.clone()))).await.unwrap();
    store.write(Change::Create(Resource::Group(group.clone()))).await.unwrap();
    store.write(Change::Create(Resource::Key(key.clone()))).await.unwrap();
    let (_, raw) = store.load().await.unwrap();
    assert_eq!(raw.providers, [pool]);
    assert_eq!(raw.models, [model]);
    assert_eq!(raw.groups, [group]);
    assert_eq!(raw.keys, [key]);
}

/// A pool's `endpoints_dns` and its KV-event ports are stored and read back as written (the
/// sidecar resolves the name and subscribes to each address at those ports).
#[tokio::test]
async fn endpoints_dns_round_trips() {
    let schema = Schema::new().await;
    let store = PgStore::connect(&schema.url, None).await.unwrap();
    let pool = RawProvider {
        name: "pool".into(),
        kind: "openai_compatible".into(),
        base_url: "http://vllm-pool.llm.svc.cluster.local:8000".into(),
        endpoints_dns: Some("vllm-pool.llm.svc.cluster.local:8000".into()),
        kv_events_port: Some(5557),
        kv_replay_port: Some(5558),
        ..RawProvider::default()
    };
    store.write(Change::Create(Resource::Provider(pool.clone()))).await.unwrap();
    let (_, raw) = store.load().await.unwrap();
    assert_eq!(raw.providers, [pool]);
}

/// The egress policy governs rows as it does a file: a provider or MCP server whose URL it
/// refuses is refused (400 at the admin API, `crud::store_error`) with the problem at the
/// URL's path, under the default policy and under the file's `egress:` block alike, on
/// create and on replace, and nothing is written.
#[tokio::test]
async fn writes_that_break_the_egress_policy_are_refused() {
    use ferrogate_core::config::mcp::RawMcpServer;
    let schema = Schema::new().await;
    let store = PgStore::connect(&schema.url, None).await.unwrap();
    let at = |name: &str, base_url: &str| RawProvider {
        name: name.into(),
        kind: "openai".into(),
        base_url: base_url.into(),
        ..RawProvider::default()
    };
    store.write(Change::Create(Resource::Provider(at("remote", "https://api.example.com")))).await.unwrap();
    let version = store.version().await.unwrap();
    let refused = |result: Result<i64, StoreError>| match result {
        Err(StoreError::Invalid(problems)) => problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    let metadata = Change::Create(Resource::Provider(at("meta", "http://169.254.169.254/latest")));
    assert_eq!(
        refused(store.write(metadata).await),
        ["providers[0].base_url: host 169.254.169.254 is blocked by egress.block_link_local (row dropped)"]
    );
    // Loopback is allowed by default, refused under a file that blocks it.
    let strict = PgStore::connect(&schema.url, None)
        .await
        .unwrap()
        .with_egress(Some(RawEgress { block_loopback: Some(true), ..RawEgress::default() }));
    let server = RawMcpServer {
        name: "tools".into(),
        url: "http://127.0.0.1:9/mcp".into(),
        auth: Some("none".into()),
        ..RawMcpServer::default()
    };
    assert_eq!(
        refused(strict.write(Change::Create(Resource::McpServer(server.clone()))).await),
        ["mcp_servers[0].url: host 127.0.0.1 is blocked by egress.block_loopback (row dropped)"]
    );
    let replaced = Change::Replace(Resource::Provider(at("remote", "http://0x7f.1:8000")));
    assert_eq!(
        refused(strict.write(replaced).await),
        ["providers[0].base_url: host 0x7f.1 (127.0.0.1) is blocked by egress.block_loopback (row dropped)"]
    );
    assert_eq!(store.version().await.unwrap(), version, "refused writes leave no trace");
    // The default policy takes the same server; the file's block is served with the rows.
    store.write(Change::Create(Resource::McpServer(server))).await.unwrap();
    assert_eq!(store.load().await.unwrap().1.egress, None);
    assert_eq!(strict.load().await.unwrap().1.egress.and_then(|e| e.block_loopback), Some(true));
}

/// The file's `cache_store:` is served with the rows, with its `redis:` when it names Redis
/// (where entries live belongs to the deployment); without one, the rows carry neither.
#[tokio::test]
async fn the_files_cache_store_is_served_with_the_rows() {
    use ferrogate_core::config::cache::RawCacheStore;
    use ferrogate_core::config::RawRedis;
    let schema = Schema::new().await;
    let redis = RawRedis { url_env: "FERROGATE_REDIS_URL".into(), ..RawRedis::default() };
    let store_kind = |kind: &str| RawCacheStore { kind: Some(kind.into()), ..RawCacheStore::default() };
    let file = |kind: &str| RawConfig {
        cache_store: Some(store_kind(kind)),
        redis: Some(redis.clone()),
        ..RawConfig::default()
    };
    let shared = PgStore::connect(&schema.url, None).await.unwrap().with_cache_store(&file("redis"));
    let (_, raw) = shared.load().await.unwrap();
    assert_eq!((raw.cache_store, raw.redis), (Some(store_kind("redis")), Some(redis.clone())));
    let local = PgStore::connect(&schema.url, None).await.unwrap().with_cache_store(&file("memory"));
    let (_, raw) = local.load().await.unwrap();
    assert_eq!((raw.cache_store, raw.redis), (Some(store_kind("memory")), None));
    let plain = PgStore::connect(&schema.url, None).await.unwrap().with_cache_store(&RawConfig::default());
    let (_, raw) = plain.load().await.unwrap();
    assert_eq!((raw.cache_store, raw.redis), (None, None));
}

/// The admin API over `store` (no token) and the snapshots it serves.
pub(crate) fn admin_over(store: Arc<PgStore>) -> (axum::Router, Arc<Snapshots>) {
    use std::sync::OnceLock;

    use crate::services::admin::{router, Admin};
    use crate::services::limits::Ledger;
    use crate::services::source::Database;
    use crate::services::targets::{self, Targets};
    use crate::services::usage::{UsageBackend, UsageStore};
    let db = OnceLock::new();
    db.set(Database { store, changed: Arc::default(), redis: None }).unwrap();
    let snapshots = Arc::new(Snapshots::new(None));
    let db = Arc::new(db);
    let identity = crate::services::identity::Identity::new(Default::default(), None, db.clone(), true);
    let app = router(Admin {
        identity,
        runtime: None,
        usage: Arc::new(UsageBackend::memory(UsageStore::new(None))),
        cache: Arc::new(crate::services::cache::Cache::new(snapshots.clone())),
        snapshots: snapshots.clone(),
        db,
        postgres: true,
        ledger: Arc::new(Ledger::new("test".into(), false)),
        targets: Arc::new(Targets::new(targets::Settings::default())),
        kv: Arc::default(),
    });
    (app, snapshots)
}

/// `method uri [body]` through `app`: status and JSON answer.
pub(crate) async fn call(
    app: &axum::Router,
    method: &str,
    uri: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    use tower::ServiceExt;
    let req = axum::http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    let answer = app.clone().oneshot(req).await.unwrap();
    let status = answer.status().as_u16();
    let bytes = axum::body::to_bytes(answer.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null))
}
