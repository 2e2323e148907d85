//! End to end with the real PostgreSQL and Redis of the machine: two `ferrogate serve`
//! instances (in this test process) share one configuration database; a provider, a model and
//! a key created through one's admin API are served by the other within seconds. Every write
//! announces its version on Redis (checked here with a subscriber of our own); the version
//! poll would get there too. Admin writes that would break the configuration are refused with
//! the offending field. A Responses API response stored through one gateway (`fg_responses`)
//! is read, listed and deleted through the other.
//!
//! Database: `FERROGATE_TEST_DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`),
//! a schema of its own per test; Redis: `FERROGATE_TEST_REDIS_URL` (default
//! `redis://127.0.0.1:6379`).

// `std::env::set_var` is `unsafe` (edition 2024): the store reads its URL from the variable
// the config names, and this test sets variables of unique names that no other thread reads.
#![allow(unsafe_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use ferrogate_sidecar::serve::{Gateway, ServeArgs};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio_postgres::NoTls;

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

/// A schema of its own on the test database; its URL selects it through `search_path`.
async fn schema_url() -> (String, String) {
    let base = std::env::var("FERROGATE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string());
    let name = format!("fg_e2e_{:016x}", rand::random::<u64>());
    let (client, conn) = tokio_postgres::connect(&base, NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot reach PostgreSQL at {base} (FERROGATE_TEST_DATABASE_URL): {e}"));
    tokio::spawn(conn);
    client.batch_execute(&format!("CREATE SCHEMA {name}")).await.unwrap();
    (format!("{base}?options=-csearch_path%3D{name}"), name)
}

async fn drop_schema(name: &str) {
    let base = std::env::var("FERROGATE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string());
    let (client, conn) = tokio_postgres::connect(&base, NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot reach PostgreSQL at {base} (FERROGATE_TEST_DATABASE_URL): {e}"));
    tokio::spawn(conn);
    client.batch_execute(&format!("DROP SCHEMA {name} CASCADE")).await.unwrap();
}

/// `serve` arguments for `config`, every listener on an ephemeral port.
fn serve_args(config: &std::path::Path) -> ServeArgs {
    let argv = [
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
        "2",
        "--poll-interval-ms",
        "100",
    ];
    let mut args = Cli::<ServeArgs>::parse_from(argv).args;
    args.filter = Some(filter_wasm());
    args
}

/// A `serve` on the database the variables named in `config` point at.
async fn gateway(config: &std::path::Path) -> Gateway {
    Gateway::start(&serve_args(config)).await.expect("gateway starts")
}

/// The master key both gateways seal and open provider keys with; set once, before any
/// gateway reads it.
const MASTER_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
static MASTER: std::sync::Once = std::sync::Once::new();

/// Two gateways on a fresh schema (seeded with one open model), Redis at `redis`.
async fn pair(schema: &str, url: &str, redis: &str, sim: std::net::SocketAddr) -> (Gateway, Gateway, PathBuf) {
    // SAFETY: the same value for every test, set once before any gateway starts; the other
    // names are unique to their test.
    MASTER.call_once(|| unsafe { std::env::set_var("FERROGATE_MASTER_KEY", MASTER_KEY) });
    let db_var = format!("FG_TEST_DB_{schema}");
    let redis_var = format!("FG_TEST_REDIS_{schema}");
    unsafe {
        std::env::set_var(&db_var, url);
        std::env::set_var(&redis_var, redis);
    }
    let dir = std::env::temp_dir().join(schema);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.yaml");
    // The file only says where the configuration lives, plus a seed for the empty database.
    std::fs::write(
        &config,
        format!(
            "store: {{ kind: postgres, url_env: {db_var} }}\nredis: {{ url_env: {redis_var} }}\n\
             providers: [{{ name: seed, kind: openai_compatible, base_url: 'http://{sim}' }}]\n\
             models: [{{ name: seeded, targets: [{{ provider: seed, model: sim-small }}] }}]\n"
        ),
    )
    .unwrap();
    (gateway(&config).await, gateway(&config).await, dir)
}

async fn chat(client: &reqwest::Client, gw: &Gateway, key: Option<&str>, model: &str) -> u16 {
    let mut req = client
        .post(format!("http://{}/v1/chat/completions", gw.addr()))
        .json(&json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    req.send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_share_one_database() {
    let (url, schema) = schema_url().await;
    let sim = start_sim(&[]).await;
    let redis = std::env::var("FERROGATE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let (a, b, dir) = pair(&schema, &url, &redis, sim).await;
    let client = reqwest::Client::new();
    assert_eq!(chat(&client, &b, None, "seeded").await, 200, "the seed is served (open gateway)");
    let admin = format!("http://{}/api/v1", a.admin_addr());

    let url = &redis;
    let announced = redis::Client::open(redis.as_str())
        .unwrap_or_else(|e| panic!("cannot reach Redis at {url} (FERROGATE_TEST_REDIS_URL): {e}"))
        .get_async_pubsub()
        .await
        .unwrap_or_else(|e| panic!("cannot reach Redis at {url} (FERROGATE_TEST_REDIS_URL): {e}"));
    let mut announced = announced;
    announced.subscribe("ferrogate:config").await.unwrap();

    // A provider, a model on it and a key, through A's admin API.
    let post = |path: &str, body: Value| client.post(format!("{admin}/{path}")).json(&body).send();
    let r = post(
        "providers",
        json!({"name": "local", "kind": "openai_compatible", "base_url": format!("http://{sim}"),
            "api_key": "sk-upstream-secret-4242"}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    let version: i64 = r.json::<Value>().await.unwrap()["version"].as_i64().unwrap();
    let msg = tokio::time::timeout(Duration::from_secs(5), announced.on_message().next()).await.unwrap().unwrap();
    assert_eq!(msg.get_payload::<i64>().unwrap(), version, "the write's version is announced on Redis");
    let r = post("models", json!({"name": "chat", "targets": [{"provider": "local", "model": "sim-small"}]}))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = post("keys", json!({"name": "alice", "models": ["chat"]})).await.unwrap();
    assert_eq!(r.status(), 200);
    let created: Value = r.json().await.unwrap();
    let key = created["key"].as_str().unwrap().to_string();
    let listed: Value = client.get(format!("{admin}/keys")).send().await.unwrap().json().await.unwrap();
    assert!(listed[0]["digest"].as_str().unwrap().starts_with("sha256:"));
    assert!(!listed.to_string().contains(&key), "the plaintext is returned once, never stored");

    // B serves them within seconds, and the gateway is no longer open. Each of B's worker VMs
    // adopts a snapshot on its own tick, so wait until ten checks in a row hold.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut in_a_row = 0;
    while in_a_row < 10 {
        let now = (
            chat(&client, &b, Some(&key), "chat").await,
            chat(&client, &b, None, "chat").await,
            chat(&client, &b, Some(&key), "seeded").await,
        );
        in_a_row = if now == (200, 401, 403) { in_a_row + 1 } else { 0 };
        assert!(Instant::now() < deadline, "B never served the new model and key: {now:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Writes that would break the configuration are refused with the field.
    let r = post("models", json!({"name": "ghost", "targets": [{"provider": "nowhere", "model": "m"}]})).await.unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert!(body["problems"][0]["path"].as_str().unwrap().ends_with("targets[0].provider"), "{body}");
    let r = client.delete(format!("{admin}/providers/local")).send().await.unwrap();
    assert_eq!(r.status(), 409, "chat still uses it");
    let r = post("models", json!({"name": "chat", "targets": [{"provider": "local", "model": "x"}]})).await.unwrap();
    assert_eq!(r.status(), 409, "already exists");
    let r =
        post("providers", json!({"name": "x", "kind": "openai", "base_url": "https://a", "colour": 1})).await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("colour"));

    // At rest the provider key is sealed: a dump of the schema holds no plaintext.
    let base = std::env::var("FERROGATE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string());
    let dump = std::process::Command::new("pg_dump").arg(&base).arg(format!("--schema={schema}")).output().unwrap();
    assert!(dump.status.success(), "{}", String::from_utf8_lossy(&dump.stderr));
    let dump = String::from_utf8_lossy(&dump.stdout);
    assert!(dump.contains("fg_providers") && dump.contains("fgs1:"), "the dump covers the sealed key");
    assert!(!dump.contains("sk-upstream-secret-4242"), "plaintext provider key in pg_dump");
    assert!(!dump.contains(&key), "plaintext virtual key in pg_dump");

    a.shutdown().await;
    b.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_alone_converges_when_redis_is_down() {
    let (url, schema) = schema_url().await;
    let sim = start_sim(&[]).await;
    // Nothing listens on port 1: every announcement and subscription fails.
    let (a, b, dir) = pair(&schema, &url, "redis://127.0.0.1:1", sim).await;
    let client = reqwest::Client::new();
    let admin = format!("http://{}/api/v1", a.admin_addr());
    let model = json!({"name": "late", "targets": [{"provider": "seed", "model": "sim-small"}]});
    let r = client.post(format!("{admin}/models")).json(&model).send().await.unwrap();
    assert_eq!(r.status(), 200, "a write succeeds without Redis");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut in_a_row = 0;
    while in_a_row < 10 {
        in_a_row = if chat(&client, &b, None, "late").await == 200 { in_a_row + 1 } else { 0 };
        assert!(Instant::now() < deadline, "B never saw the write by polling");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.shutdown().await;
    b.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
    drop_schema(&schema).await;
}

/// The database is down when `serve` starts: the last good snapshot (`--snapshot-cache`)
/// serves, the store is retried in the background, and once the database is back admin writes
/// work and reach the data path. Without a cache the start fails, naming the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_starts_on_its_cached_snapshot_while_the_database_is_down() {
    let (url, schema) = schema_url().await;
    let sim = start_sim(&[]).await;
    let db = Forwarder::start(&url).await;
    MASTER.call_once(|| unsafe { std::env::set_var("FERROGATE_MASTER_KEY", MASTER_KEY) });
    let db_var = format!("FG_TEST_DB_{schema}");
    // SAFETY: a name unique to this test, set before any gateway reads it.
    unsafe { std::env::set_var(&db_var, db.url(&url)) };
    let dir = std::env::temp_dir().join(&schema);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "store: {{ kind: postgres, url_env: {db_var} }}\n\
             providers: [{{ name: seed, kind: openai_compatible, base_url: 'http://{sim}' }}]\n\
             models: [{{ name: seeded, targets: [{{ provider: seed, model: sim-small }}] }}]\n"
        ),
    )
    .unwrap();
    let cache = dir.join("snapshot.json");
    let with_cache = |cache: Option<&std::path::Path>| {
        let mut args = serve_args(&config);
        args.snapshot_cache = cache.map(std::path::Path::to_path_buf);
        args
    };
    let client = reqwest::Client::new();
    let first = Gateway::start(&with_cache(Some(&cache))).await.expect("starts with the database up");
    assert_eq!(chat(&client, &first, None, "seeded").await, 200);
    first.shutdown().await;
    assert!(cache.exists(), "the served snapshot was cached");

    db.set(false);
    let refused = Gateway::start(&with_cache(None)).await.err().expect("no database and no cache: no start");
    assert!(refused.to_string().contains("store") || refused.to_string().contains("database"), "{refused}");
    let gw = Gateway::start(&with_cache(Some(&cache))).await.expect("starts on the cache");
    assert_eq!(chat(&client, &gw, None, "seeded").await, 200, "the cached snapshot serves");
    let admin = format!("http://{}/api/v1/models", gw.admin_addr());
    let later = json!({"name": "later", "targets": [{"provider": "seed", "model": "sim-small"}]});
    let r = client.post(&admin).json(&later).send().await.unwrap();
    assert_eq!(r.status(), 503, "no writes while the store is away");
    let ready = |strict: bool| {
        let url = format!("http://{}/readyz{}", gw.admin_addr(), if strict { "?strict=true" } else { "" });
        let client = client.clone();
        async move {
            let r = client.get(url).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let (status, body) = ready(false).await;
    assert_eq!(status, 200, "serving the cache is ready: {body}");
    assert!(body.contains("store unreachable"), "{body}");
    assert_eq!(ready(true).await.0, 503, "strict readiness needs the store");

    db.set(true);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = client.post(&admin).json(&later).send().await.unwrap();
        if r.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the store never came back: {}", r.status());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, body) = ready(true).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("store reachable"), "{body}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while chat(&client, &gw, None, "later").await != 200 {
        assert!(Instant::now() < deadline, "the model written after recovery is not served");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gw.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
    drop_schema(&schema).await;
}

/// A stored response lives in the shared database: made through A, it is read, its input
/// items listed and a follow-up to it served through B; deleted through B, A no longer finds
/// it. A conversation made through A takes a turn through B, and A lists it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_stored_through_one_gateway_is_read_through_the_other() {
    let (url, schema) = schema_url().await;
    let sim = start_sim(&[]).await;
    let (a, b, dir) = pair(&schema, &url, "redis://127.0.0.1:1", sim).await;
    let client = reqwest::Client::new();
    let body = json!({"model": "seeded", "input": "Keep this.", "store": true});
    let r = client.post(format!("http://{}/v1/responses", a.addr())).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let created: Value = r.json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    assert_eq!(created["store"], json!(true), "{created}");
    let get = |gw: &Gateway, path: String| client.get(format!("http://{}{path}", gw.addr())).send();
    let got = get(&b, format!("/v1/responses/{id}")).await.unwrap();
    assert_eq!(got.status(), 200);
    let got: Value = got.json().await.unwrap();
    assert_eq!((&got["id"], &got["output"], &got["usage"]), (&created["id"], &created["output"], &created["usage"]));
    let items: Value = get(&b, format!("/v1/responses/{id}/input_items")).await.unwrap().json().await.unwrap();
    assert_eq!(items["data"][0]["content"][0]["text"], json!("Keep this."), "{items}");
    // A follow-up through B continues the response made through A: the sim is sent both turns
    // (more input tokens than the same turn alone).
    let post = |gw: &Gateway, body: Value| client.post(format!("http://{}/v1/responses", gw.addr())).json(&body).send();
    let follow = json!({"model": "seeded", "input": "And then?", "previous_response_id": id});
    let r = post(&b, follow).await.unwrap();
    assert_eq!(r.status(), 200);
    let follow: Value = r.json().await.unwrap();
    let alone: Value =
        post(&b, json!({"model": "seeded", "input": "And then?", "store": false})).await.unwrap().json().await.unwrap();
    let tokens = |v: &Value| v["usage"]["input_tokens"].as_u64().unwrap();
    assert!(tokens(&follow) > tokens(&alone), "the rebuilt conversation: {follow} / {alone}");
    // A conversation made through A takes a turn through B; A lists the turn's items.
    let conv: Value = client
        .post(format!("http://{}/v1/conversations", a.addr()))
        .json(&json!({"items": [{"role": "user", "content": "Noted."}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let conv_id = conv["id"].as_str().unwrap().to_string();
    let turn = json!({"model": "seeded", "input": "Go on.", "conversation": conv_id});
    assert_eq!(post(&b, turn).await.unwrap().status(), 200);
    let items: Value =
        get(&a, format!("/v1/conversations/{conv_id}/items?order=asc")).await.unwrap().json().await.unwrap();
    let roles: Vec<&str> = items["data"].as_array().unwrap().iter().map(|i| i["role"].as_str().unwrap_or("")).collect();
    assert_eq!(roles, ["user", "user", "assistant"], "{items}");
    let deleted = client.delete(format!("http://{}/v1/responses/{id}", b.addr())).send().await.unwrap();
    assert_eq!(deleted.status(), 200);
    assert_eq!(get(&a, format!("/v1/responses/{id}")).await.unwrap().status(), 404);
    a.shutdown().await;
    b.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
    drop_schema(&schema).await;
}
