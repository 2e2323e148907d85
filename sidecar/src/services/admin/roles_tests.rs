//! Roles × routes through the admin router, against the machine's real PostgreSQL (a schema
//! per test, `pg::tests::Schema`): users and API tokens of each role are rows of
//! `fg_admin_users` and `fg_admin_tokens`, inserted directly; the router authenticates them as
//! it does in production. Every operation of the table is called without credentials and with
//! each role; a viewer's answers are searched for every secret the configuration holds; a key
//! manager narrowed to one group sees and writes that group only; every write is audited.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::Request;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio_postgres::NoTls;
use tower::ServiceExt;

use super::{router, Admin};
use crate::services::identity::{Identity, Role};
use crate::services::limits::Ledger;
use crate::services::openapi::{self, Access};
use crate::services::pg::tests::{master, Schema};
use crate::services::pg::PgStore;
use crate::services::snapshot::Snapshots;
use crate::services::source::Database;
use crate::services::targets::{self, Targets};
use crate::services::usage::{UsageBackend, UsageStore};

const BOOTSTRAP: &str = "bootstrap-owner-token";
const PROVIDER_SECRET: &str = "sk-provider-secret-0123456789";
const MCP_SECRET: &str = "mcp-server-secret-0123456789";
const A2A_SECRET: &str = "a2a-agent-secret-0123456789";

/// A router over a fresh schema, with a token per role (and one of a key manager narrowed to
/// `team-a`), and the configuration of [`seed`].
struct Env {
    app: axum::Router,
    tokens: BTreeMap<&'static str, String>,
    digests: Vec<String>,
    schema: Schema,
}

fn digest_of(plaintext: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(plaintext.as_bytes())))
}

impl Env {
    async fn new() -> Env {
        let schema = Schema::new().await;
        let store = Arc::new(PgStore::connect(&schema.url, Some(master())).await.unwrap());
        let db = OnceLock::new();
        db.set(Database { store, changed: Arc::default(), redis: None }).unwrap();
        let db = Arc::new(db);
        let snapshots = Arc::new(Snapshots::new(None));
        let app = router(Admin {
            identity: Identity::new(Default::default(), Some(BOOTSTRAP.into()), db.clone(), true),
            runtime: None,
            usage: Arc::new(UsageBackend::memory(UsageStore::new(None))),
            cache: Arc::new(crate::services::cache::Cache::new(snapshots.clone())),
            snapshots,
            db,
            postgres: true,
            ledger: Arc::new(Ledger::new("test".into(), false)),
            targets: Arc::new(Targets::new(targets::Settings::default())),
            kv: Arc::default(),
        });
        let (client, conn) = tokio_postgres::connect(&schema.url, NoTls).await.unwrap();
        tokio::spawn(conn);
        let mut tokens = BTreeMap::new();
        let people: [(&'static str, Role, &[&str]); 5] = [
            ("owner", Role::Owner, &[]),
            ("admin", Role::Admin, &[]),
            ("key-manager", Role::KeyManager, &[]),
            ("team-a-manager", Role::KeyManager, &["team-a"]),
            ("viewer", Role::Viewer, &[]),
        ];
        for (name, role, groups) in people {
            let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
            let row = client
                .query_one(
                    "INSERT INTO fg_admin_users (name, role, key_groups) VALUES ($1, $2, $3) RETURNING id",
                    &[&name, &role.as_str(), &groups],
                )
                .await
                .unwrap();
            let user: i64 = row.get(0);
            let plaintext = format!("fgt_{}", hex::encode(rand::random::<[u8; 16]>()));
            let digest = Sha256::digest(plaintext.as_bytes()).to_vec();
            client
                .execute(
                    "INSERT INTO fg_admin_tokens (user_id, name, digest, role) VALUES ($1, 'test', $2, $3)",
                    &[&user, &digest, &role.as_str()],
                )
                .await
                .unwrap();
            tokens.insert(name, plaintext);
        }
        let mut env = Env { app, tokens, digests: Vec::new(), schema };
        env.seed().await;
        env
    }

    /// Providers, models, groups, keys, an MCP server and an A2A agent holding known secrets.
    async fn seed(&mut self) {
        let rows = [
            (
                "providers",
                json!({"name": "local", "kind": "openai_compatible", "base_url": "http://127.0.0.1:1",
                "api_key": PROVIDER_SECRET}),
            ),
            ("models", json!({"name": "chat", "targets": [{"provider": "local", "model": "m"}]})),
            ("aliases", json!({"name": "fast", "model": "chat"})),
            ("pricing", json!({"model": "local/m", "input_per_mtok": 1.0, "output_per_mtok": 2.0})),
            ("groups", json!({"name": "team-a", "models": ["chat"]})),
            ("groups", json!({"name": "team-b", "models": ["chat"]})),
            ("groups", json!({"name": "ops", "models": ["chat"]})),
            ("mcp_servers", json!({"name": "tools", "url": "http://127.0.0.1:1/mcp", "api_key": MCP_SECRET})),
            ("a2a_agents", json!({"name": "helper", "url": "http://127.0.0.1:1/", "api_key": A2A_SECRET})),
            ("guardrails", json!({"name": "pii", "input": [{"detector": "email", "action": "redact"}]})),
        ];
        for (section, row) in rows {
            let (status, answer) = self.call("POST", &format!("/api/v1/{section}"), Some("bootstrap"), Some(row)).await;
            assert_eq!(status, 200, "seeding {section}: {answer}");
        }
        for (name, groups) in [
            ("a-key", json!(["team-a"])),
            ("b-key", json!(["team-b"])),
            ("ab-key", json!(["team-a", "team-b"])),
            ("lone", json!([])),
        ] {
            let digest = digest_of(&format!("fg-{name}-plaintext"));
            let row = json!({"name": name, "digest": digest, "groups": groups});
            let (status, answer) = self.call("POST", "/api/v1/keys", Some("bootstrap"), Some(row)).await;
            assert_eq!(status, 200, "seeding key {name}: {answer}");
            self.digests.push(digest);
        }
    }

    /// `method uri` as `who` (a name of [`Env::tokens`], `bootstrap`, or nobody), with `body`.
    async fn call(&self, method: &str, uri: &str, who: Option<&str>, body: Option<Value>) -> (u16, Value) {
        let (status, text) = self.call_text(method, uri, who, body).await;
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    async fn call_text(&self, method: &str, uri: &str, who: Option<&str>, body: Option<Value>) -> (u16, String) {
        let mut req = Request::builder().method(method).uri(uri).header("content-type", "application/json");
        let token = match who {
            Some("bootstrap") => Some(BOOTSTRAP.to_string()),
            Some(name) => Some(self.tokens[name].clone()),
            None => None,
        };
        if let Some(token) = token {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
        let answer = self.app.clone().oneshot(req.body(body).unwrap()).await.unwrap();
        let status = answer.status().as_u16();
        let bytes = axum::body::to_bytes(answer.into_body(), 16 << 20).await.unwrap();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// A concrete path for `template`: section rows by a seeded name, other parameters made up.
fn concrete(template: &str) -> String {
    let seeded = [
        ("providers", "local"),
        ("models", "chat"),
        ("aliases", "fast"),
        ("groups", "team-a"),
        ("keys", "a-key"),
        ("pricing", "local%2Fm"),
        ("mcp_servers", "tools"),
        ("a2a_agents", "helper"),
        ("guardrails", "pii"),
    ];
    let name = seeded.iter().find(|(s, _)| template == format!("/api/v1/{s}/{{name}}")).map_or("x", |(_, n)| n);
    template.replace("{name}", name).replace("{request_id}", "x").replace("{id}", "999999")
}

fn role_of(who: &str) -> Role {
    match who {
        "owner" => Role::Owner,
        "admin" => Role::Admin,
        "key-manager" => Role::KeyManager,
        _ => Role::Viewer,
    }
}

/// Every operation: 401 without credentials unless public; 403 naming the role needed below
/// it; neither 401 nor 403 at or above it.
#[tokio::test]
async fn every_role_reaches_what_it_covers_and_nothing_more() {
    let env = Env::new().await;
    let ops = openapi::operations();
    // Reads first, then writes (creates before deletes), so a write does not change what a
    // later call of another operation finds.
    let mut ordered: Vec<&openapi::Operation> = ops.iter().collect();
    ordered.sort_by_key(|o| ["get", "post", "put", "patch", "delete"].iter().position(|m| *m == o.method));
    for o in ordered {
        let uri = concrete(&o.path);
        let method = o.method.to_uppercase();
        // A body that reads as JSON but holds nothing: writes are refused after authorization.
        let body = o.request.as_ref().map(|_| json!({}));
        let (status, answer) = env.call(&method, &uri, None, body.clone()).await;
        match o.access {
            Access::Public => assert_ne!(status, 401, "{method} {uri} is public: {answer}"),
            Access::Role(_) => {
                assert_eq!(status, 401, "{method} {uri} without credentials: {answer}");
                assert!(answer["error"].is_string(), "{method} {uri}: {answer}");
            }
        }
        let Access::Role(needed) = o.access else { continue };
        for who in ["viewer", "key-manager", "admin", "owner"] {
            let role = role_of(who);
            let (status, answer) = env.call(&method, &uri, Some(who), body.clone()).await;
            if role.covers(needed) {
                assert!(status != 401 && status != 403, "{method} {uri} as {who} (needs {needed}): {status} {answer}");
            } else {
                assert_eq!(status, 403, "{method} {uri} as {who} (needs {needed}): {answer}");
                let why = answer["error"].as_str().unwrap_or_default();
                assert!(why.contains(&format!("needs the {needed} role")), "{method} {uri} as {who}: {why}");
            }
        }
    }
}

/// A viewer reads every route it may, and no answer holds a key digest or a credential; the
/// owner does see the digests (they are there to hide).
#[tokio::test]
async fn a_viewer_sees_no_secret_anywhere() {
    let env = Env::new().await;
    // Writes the audit log records (before and after hold the rows).
    let row =
        json!({"name": "a-key", "digest": env.digests[0], "groups": ["team-a"], "limits": {"requests_per_minute": 5}});
    assert_eq!(env.call("PUT", "/api/v1/keys/a-key", Some("bootstrap"), Some(row)).await.0, 200);
    let (_, owner) = env.call_text("GET", "/api/v1/keys", Some("owner"), None).await;
    assert!(env.digests.iter().all(|d| owner.contains(d.as_str())), "{owner}");
    let secrets: Vec<String> = [PROVIDER_SECRET, MCP_SECRET, A2A_SECRET, BOOTSTRAP]
        .iter()
        .map(|s| s.to_string())
        .chain(env.digests.iter().cloned())
        .chain(env.digests.iter().map(|d| d.trim_start_matches("sha256:").to_string()))
        .chain(env.tokens.values().cloned())
        .collect();
    let mut read = 0;
    for o in openapi::operations() {
        if o.method != "get" || !matches!(o.access, Access::Role(r) if Role::Viewer.covers(r)) {
            continue;
        }
        let uri = concrete(&o.path);
        let (status, text) = env.call_text("GET", &uri, Some("viewer"), None).await;
        read += usize::from(status == 200);
        for secret in &secrets {
            assert!(!text.contains(secret.as_str()), "GET {uri} shows a viewer the secret {secret}: {text}");
        }
        // What the viewer is shown (and the owner) keeps to the documented answer.
        if let (200, openapi::Answer::Json(schema)) = (status, &o.answer) {
            let (_, owner) = env.call("GET", &uri, Some("owner"), None).await;
            for (who, answer) in [("viewer", serde_json::from_str(&text).unwrap()), ("owner", owner)] {
                let conforms = openapi::check(schema, &answer);
                assert_eq!(conforms, Ok(()), "GET {uri} as {who}: {answer}");
            }
        }
    }
    assert!(read > 20, "{read} reads answered");
}

/// A key manager narrowed to `team-a` sees that group and the keys all of whose groups are
/// `team-a`, writes them only (403 naming the group otherwise), and its writes are audited.
#[tokio::test]
async fn a_narrowed_key_manager_manages_its_groups_only() {
    let env = Env::new().await;
    let km = Some("team-a-manager");
    let names = |v: &Value| -> Vec<String> {
        v.as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap().to_string()).collect()
    };
    let (status, keys) = env.call("GET", "/api/v1/keys", km, None).await;
    assert_eq!((status, names(&keys)), (200, vec!["a-key".to_string()]), "{keys}");
    let (_, groups) = env.call("GET", "/api/v1/groups", km, None).await;
    assert_eq!(names(&groups), ["team-a"]);
    assert_eq!(env.call("GET", "/api/v1/keys/b-key", km, None).await.0, 404);
    assert_eq!(env.call("GET", "/api/v1/keys/ab-key", km, None).await.0, 404, "in another group too");
    assert_eq!(env.call("GET", "/api/v1/groups/ops", km, None).await.0, 404);
    assert_eq!(env.call("GET", "/api/v1/keys/a-key", km, None).await.0, 200);

    let refused = [
        ("PUT", "/api/v1/keys/b-key", Some(json!({"name": "b-key", "groups": ["team-a"]})), "team-b"),
        ("DELETE", "/api/v1/keys/ab-key", None, "team-b"),
        ("POST", "/api/v1/keys", Some(json!({"name": "new", "groups": ["team-a", "ops"]})), "ops"),
        ("POST", "/api/v1/keys", Some(json!({"name": "new"})), "at least one"),
        ("PUT", "/api/v1/groups/ops", Some(json!({"name": "ops", "models": ["chat"]})), "ops"),
        ("DELETE", "/api/v1/groups/team-b", None, "team-b"),
    ];
    for (method, uri, body, named) in refused {
        let (status, answer) = env.call(method, uri, km, body).await;
        assert_eq!(status, 403, "{method} {uri}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains(named), "{method} {uri}: {answer}");
    }
    let (status, made) = env.call("POST", "/api/v1/keys", km, Some(json!({"name": "new", "groups": ["team-a"]}))).await;
    assert_eq!(status, 200, "{made}");
    let plaintext = made["key"].as_str().unwrap().to_string();
    let budget = json!({"name": "team-a", "models": ["chat"], "limits": {"cost_usd_per_day": 5.0}});
    assert_eq!(env.call("PUT", "/api/v1/groups/team-a", km, Some(budget)).await.0, 200);
    assert_eq!(env.call("POST", "/api/v1/models", km, Some(json!({"name": "m2"}))).await.0, 403, "not its role");

    // The audit log: the writes done and refused, with the rows before and after, never the
    // key's plaintext.
    let (client, conn) = tokio_postgres::connect(&env.schema.url, NoTls).await.unwrap();
    tokio::spawn(conn);
    let rows = client
        .query("SELECT action, object, status, before::text, after::text, detail, actor FROM fg_audit ORDER BY id", &[])
        .await
        .unwrap();
    let events: Vec<Audited> = rows
        .iter()
        .map(|r| Audited {
            action: r.get(0),
            object: r.get(1),
            status: r.get(2),
            before: r.get(3),
            after: r.get(4),
            detail: r.get(5),
            actor: r.get(6),
        })
        .collect();
    let find = |action: &str, object: &str, status: i32| {
        events
            .iter()
            .find(|e| e.action == action && e.object.as_deref() == Some(object) && e.status == status)
            .unwrap_or_else(|| panic!("no audit record {action} {object} {status} in {events:#?}"))
    };
    let has = |field: &Option<String>, what: &str| field.as_deref().is_some_and(|f| f.contains(what));
    let created = find("keys.create", "keys/new", 200);
    assert!(created.before.is_none() && has(&created.after, "team-a"), "{created:?}");
    assert!(created.actor.contains("team-a-manager"), "{created:?}");
    let budget = find("groups.replace", "groups/team-a", 200);
    assert!(budget.before.is_some() && !has(&budget.before, "cost_usd_per_day"), "{budget:?}");
    assert!(has(&budget.after, "cost_usd_per_day"), "{budget:?}");
    let refused = find("keys.replace", "keys/b-key", 403);
    assert!(has(&refused.detail, "team-b") && refused.after.is_none(), "{refused:?}");
    find("groups.delete", "groups/team-b", 403);
    let beyond_role = find("authz_fail", "/api/v1/models", 403);
    assert!(has(&beyond_role.detail, "needs the admin role"), "{beyond_role:?}");
    for e in &events {
        assert!(!format!("{e:?}").contains(&plaintext), "a generated key in the audit log: {e:?}");
    }
}

/// A row of `fg_audit`.
#[derive(Debug)]
struct Audited {
    action: String,
    object: Option<String>,
    status: i32,
    before: Option<String>,
    after: Option<String>,
    detail: Option<String>,
    actor: String,
}

/// Every error is JSON: the router's own (no route, another method, an unreadable query, a
/// body over the limit) as the handlers'; a readiness probe's 503 stays text.
#[tokio::test]
async fn every_error_is_json() {
    let env = Env::new().await;
    let owner = Some("owner");
    let cases = [
        ("GET", "/api/v1/nowhere/at/all".to_string(), None, 404, "no such route"),
        ("DELETE", "/api/v1/usage".to_string(), None, 405, "not allowed"),
        ("GET", "/api/v1/usage?limit=many".to_string(), None, 400, "limit"),
        ("GET", "/api/v1/requests?cursor=nope".to_string(), None, 400, "cursor"),
        ("GET", "/api/v1/keys/nobody".to_string(), None, 404, "keys/nobody"),
        ("GET", "/api/v1/whatever".to_string(), None, 404, "no resource collection"),
        ("POST", "/api/v1/groups".to_string(), Some(json!(["v\u{fb}\u{19}"])), 400, "body must be a JSON object"),
        ("POST", "/api/v1/groups".to_string(), Some(json!("g")), 400, "body must be a JSON object"),
        ("POST", "/api/v1/groups".to_string(), Some(json!({"name": "g", "wieght": 2})), 400, "wieght"),
        ("POST", "/api/v1/cache/purge".to_string(), Some(json!({"all": "yes"})), 400, "all"),
        // serde would read a struct from an array: the schema says an object.
        ("POST", "/api/v1/groups".to_string(), Some(json!({"name": "g", "limits": [null, null]})), 400, "limits"),
        ("PUT", "/api/v1/keys/k".to_string(), Some(json!({"groups": "team-a"})), 400, "groups"),
        ("PUT", "/api/v1/groups/g".to_string(), Some(json!({"models": ["a\u{0}b"]})), 400, "NUL"),
    ];
    for (method, uri, body, want, says) in cases {
        let (status, answer) = env.call(method, &uri, owner, body).await;
        assert_eq!(status, want, "{method} {uri}: {answer}");
        let why = answer["error"].as_str().unwrap_or_else(|| panic!("{method} {uri}: not a JSON error: {answer}"));
        assert!(why.contains(says), "{method} {uri}: {why}");
    }
    assert!(
        env.call("GET", "/api/v1/groups", owner, None).await.1.as_array().is_some_and(|g| g.len() == 3),
        "no group made"
    );
    // The path names the row: a body without a name is whole.
    let body = Some(json!({"models": ["chat"]}));
    let (status, answer) = env.call("PUT", "/api/v1/groups/named-by-path", owner, body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(env.call("GET", "/api/v1/groups/named-by-path", owner, None).await.1["models"], json!(["chat"]));
    let big = json!({"name": "big", "models": ["x".repeat(openapi::BODY_LIMIT)]});
    let (status, answer) = env.call("POST", "/api/v1/groups", owner, Some(big)).await;
    assert_eq!(status, 413, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("too large"), "{answer}");
    let (status, text) = env.call_text("GET", "/readyz", None, None).await;
    assert_eq!(status, 503);
    assert!(text.starts_with("not ready: "), "a probe's failure stays text: {text}");
    let (status, answer) = env.call("GET", "/readyz?strict=maybe", None, None).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"].is_string(), "{answer}");
}

/// Every route the router serves is in the operations table: each method on each documented
/// path and a few undocumented ones either finds no route (404 "no such route", 405) or finds
/// a documented operation; the catch-all section routes answer 404 for an unknown section.
#[tokio::test]
async fn every_route_served_is_documented() {
    let env = Env::new().await;
    let mut paths: Vec<String> = openapi::operations().iter().map(|o| concrete(&o.path)).collect();
    paths.extend(
        ["/", "/api", "/api/v1", "/api/v1/", "/api/v1/x", "/api/v1/x/y", "/api/v1/x/y/z", "/api/v2/keys", "/openapi"]
            .map(String::from),
    );
    paths.sort();
    paths.dedup();
    for path in &paths {
        for method in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
            let (status, answer) = env.call(method, path, Some("owner"), Some(json!({}))).await;
            let why = answer["error"].as_str().unwrap_or_default();
            let unrouted = (status == 404 && why.starts_with("no such route")) || status == 405;
            let unknown_section = status == 404 && why.starts_with("no resource collection");
            let m = axum::http::Method::from_bytes(method.as_bytes()).unwrap();
            let documented = super::authorize::operation(&m, path.split('?').next().unwrap_or_default()).is_some();
            assert!(
                unrouted || unknown_section || documented,
                "{method} {path} is served ({status} {answer}) but not in the operations table"
            );
        }
    }
}
