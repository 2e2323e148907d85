//! Admin identity against the machine's real PostgreSQL, through the real admin router (its
//! authorization middleware included): password logins and their session cookie, CSRF,
//! session expiry, failed-login throttling, API tokens and their roles, the last owner, and
//! the audit log. Every test ends by scanning the whole audit table and everything logged
//! for the passwords, token plaintexts, cookie values and CSRF tokens it used.
//!
//! Database: `FERROGATE_TEST_DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`),
//! a schema of its own per test.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::HeaderMap;
use ferrogate_sidecar::services::admin::{router, Admin};
use ferrogate_sidecar::services::identity::{AdminSettings, Identity};
use ferrogate_sidecar::services::pg::PgStore;
use ferrogate_sidecar::services::snapshot::Snapshots;
use ferrogate_sidecar::services::source::Database;
use serde_json::{json, Value};
use tower::ServiceExt;

#[path = "common/pg_scratch.rs"]
mod pg_scratch;
use pg_scratch::Scratch;

const BOOT: &str = "boot-token-for-identity-tests";
const PEER: &str = "192.0.2.7:40000";

/// Everything the process logged (every test's): checked for secrets.
static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct Capture;

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_logs() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        // Everything at debug but tokio_postgres, whose debug lines print every statement's
        // parameters (a password hash, a session's CSRF token): ferrogate's log filter must keep
        // that target at info or above whatever FERROGATE_LOG says.
        let filter = tracing_subscriber::EnvFilter::new("debug,tokio_postgres=info");
        let _ = tracing_subscriber::fmt().with_writer(|| Capture).with_env_filter(filter).try_init();
    });
}

/// An admin API over a schema of its own, with the bootstrap token [`BOOT`].
struct Env {
    app: axum::Router,
    scratch: Scratch,
    /// Secrets used: none may show in the audit table or the logs.
    secrets: Vec<String>,
}

struct Answer {
    status: u16,
    headers: HeaderMap,
    body: Value,
}

/// A logged-in browser.
struct Session {
    cookie: String,
    csrf: String,
}

impl Env {
    async fn new(settings: AdminSettings) -> Env {
        capture_logs();
        let scratch = Scratch::new("fg_idt").await;
        let store = Arc::new(PgStore::connect(&scratch.url, None).await.unwrap());
        let db = OnceLock::new();
        db.set(Database { store, changed: Arc::default(), redis: None }).unwrap();
        let db = Arc::new(db);
        let snapshots = Arc::new(Snapshots::new(None));
        let app = router(Admin {
            identity: Identity::new(settings, Some(BOOT.into()), db.clone(), true),
            runtime: None,
            usage: Arc::new(ferrogate_sidecar::services::usage::UsageBackend::memory(
                ferrogate_sidecar::services::usage::UsageStore::new(None),
            )),
            cache: Arc::new(ferrogate_sidecar::services::cache::Cache::new(snapshots.clone())),
            snapshots,
            db,
            postgres: true,
            ledger: Arc::new(ferrogate_sidecar::services::limits::Ledger::new("test".into(), false)),
            targets: Arc::new(ferrogate_sidecar::services::targets::Targets::new(Default::default())),
            kv: Arc::default(),
        });
        Env { app, scratch, secrets: vec![BOOT.into()] }
    }

    async fn call(&self, method: &str, uri: &str, headers: &[(&str, &str)], body: Option<Value>) -> Answer {
        let mut req = axum::http::Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let body = body.map_or_else(axum::body::Body::empty, |b| axum::body::Body::from(b.to_string()));
        let mut req = req.header("content-type", "application/json").body(body).unwrap();
        req.extensions_mut().insert(ConnectInfo(PEER.parse::<SocketAddr>().unwrap()));
        let answer = self.app.clone().oneshot(req).await.unwrap();
        let (status, headers) = (answer.status().as_u16(), answer.headers().clone());
        let bytes = axum::body::to_bytes(answer.into_body(), 1 << 20).await.unwrap();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Answer { status, headers, body }
    }

    /// As the bootstrap owner.
    async fn boot(&self, method: &str, uri: &str, body: Option<Value>) -> Answer {
        self.call(method, uri, &[("authorization", &format!("Bearer {BOOT}"))], body).await
    }

    /// With an API token.
    async fn bearer(&self, token: &str, method: &str, uri: &str, body: Option<Value>) -> Answer {
        self.call(method, uri, &[("authorization", &format!("Bearer {token}"))], body).await
    }

    /// As a browser session (with its CSRF token).
    async fn browser(&self, s: &Session, method: &str, uri: &str, body: Option<Value>) -> Answer {
        self.call(method, uri, &[("cookie", &s.cookie), ("x-csrf-token", &s.csrf)], body).await
    }

    /// Creates a user with a password, as the bootstrap owner.
    async fn user(&mut self, name: &str, role: &str, password: &str) {
        self.secrets.push(password.into());
        let made = self.boot("POST", "/api/v1/users", Some(json!({"name": name, "role": role, "password": password})));
        let made = made.await;
        assert_eq!(made.status, 200, "{}", made.body);
    }

    async fn login(&mut self, name: &str, password: &str) -> Session {
        let r = self.call("POST", "/api/v1/session", &[], Some(json!({"name": name, "password": password}))).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let set = r.headers["set-cookie"].to_str().unwrap().to_string();
        let cookie = set.split(';').next().unwrap().to_string();
        let csrf = r.body["csrf_token"].as_str().unwrap().to_string();
        self.secrets.extend([cookie.split_once('=').unwrap().1.to_string(), csrf.clone()]);
        Session { cookie, csrf }
    }

    /// `GET /api/v1/session` with the session's cookie only.
    async fn me(&self, s: &Session) -> Answer {
        self.call("GET", "/api/v1/session", &[("cookie", s.cookie.as_str())], None).await
    }

    async fn audit_rows(&self, action: &str) -> Vec<Value> {
        let r = self.boot("GET", &format!("/api/v1/audit?action={action}&limit=1000"), None).await;
        assert_eq!(r.status, 200, "{}", r.body);
        r.body["events"].as_array().unwrap().clone()
    }

    /// No secret in the audit table or the logs; then the schema is dropped.
    async fn finish(self) {
        let sql = format!("SELECT coalesce(json_agg(a)::text, '') FROM {}.fg_audit a", self.scratch.name);
        let table: String = self.scratch.db.query_one(&sql, &[]).await.unwrap().get(0);
        assert!(!table.is_empty(), "audit rows were written");
        let logs = String::from_utf8_lossy(&LOG.lock().unwrap_or_else(|e| e.into_inner())).into_owned();
        for secret in &self.secrets {
            assert!(!table.contains(secret.as_str()), "a secret in fg_audit: {table}");
            if let Some(i) = logs.find(secret.as_str()) {
                panic!("a secret in the logs: {}", &logs[i.saturating_sub(600)..(i + 200).min(logs.len())]);
            }
        }
        self.scratch.drop_all().await;
    }
}

fn settings() -> AdminSettings {
    AdminSettings { password_min_length: 12, ..AdminSettings::default() }
}

#[tokio::test]
async fn password_login_cookie_csrf_and_logout() {
    let mut env = Env::new(settings()).await;
    env.user("alice", "owner", "alice-password-1").await;
    let hash: String = env
        .scratch
        .db
        .query_one(&format!("SELECT password_hash FROM {}.fg_admin_users WHERE name = 'alice'", env.scratch.name), &[])
        .await
        .unwrap()
        .get(0);
    assert!(hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{hash}");
    let r =
        env.call("POST", "/api/v1/session", &[], Some(json!({"name": "alice", "password": "alice-password-1"}))).await;
    let set = r.headers["set-cookie"].to_str().unwrap();
    assert!(
        set.starts_with("ferrogate_session=") && set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert_eq!(r.body["user"], json!({"name": "alice", "role": "owner", "key_groups": []}));
    assert!(r.body["expires_at"].as_i64().unwrap() > 0);
    let alice = env.login("alice", "alice-password-1").await;
    assert_ne!(alice.cookie, set.split(';').next().unwrap(), "a new session id at every login");

    let me = env.call("GET", "/api/v1/session", &[("cookie", &alice.cookie)], None).await;
    assert_eq!((me.status, &me.body["name"], &me.body["role"]), (200, &json!("alice"), &json!("owner")), "{}", me.body);
    assert_eq!(me.body["csrf_token"], alice.csrf.as_str());
    assert_eq!(me.body["actor"]["kind"], "user");
    let ops = me.body["operations"].as_array().unwrap();
    assert!(ops.contains(&json!({"method": "post", "path": "/api/v1/users"})), "{ops:?}");

    // Changes need the session's CSRF token, from this site.
    let bob = json!({"name": "bob", "role": "viewer", "password": "bob-password-12"});
    env.secrets.push("bob-password-12".into());
    let none = env.call("POST", "/api/v1/users", &[("cookie", &alice.cookie)], Some(bob.clone())).await;
    assert_eq!(none.status, 403, "{}", none.body);
    assert!(none.body["error"].as_str().unwrap().contains("X-CSRF-Token"), "{}", none.body);
    let wrong = [("cookie", alice.cookie.as_str()), ("x-csrf-token", "not-the-token")];
    assert_eq!(env.call("POST", "/api/v1/users", &wrong, Some(bob.clone())).await.status, 403);
    let cross = [("cookie", alice.cookie.as_str()), ("x-csrf-token", &alice.csrf), ("sec-fetch-site", "cross-site")];
    assert_eq!(env.call("POST", "/api/v1/users", &cross, Some(bob.clone())).await.status, 403);
    let origin = [
        ("cookie", alice.cookie.as_str()),
        ("x-csrf-token", &alice.csrf),
        ("host", "admin:9001"),
        ("origin", "https://evil.example"),
    ];
    assert_eq!(env.call("POST", "/api/v1/users", &origin, Some(bob.clone())).await.status, 403);
    let made = env.browser(&alice, "POST", "/api/v1/users", Some(bob)).await;
    assert_eq!((made.status, &made.body["role"]), (200, &json!("viewer")), "{}", made.body);
    assert!(made.body.get("password_hash").is_none() && made.body["password_set"] == true);
    let login_csrf = env
        .call(
            "POST",
            "/api/v1/session",
            &[("sec-fetch-site", "cross-site")],
            Some(json!({"name": "alice", "password": "alice-password-1"})),
        )
        .await;
    assert_eq!(login_csrf.status, 403, "login CSRF");

    // A viewer sees what it may call, and is refused the rest.
    let bob = env.login("bob", "bob-password-12").await;
    assert_eq!(env.browser(&bob, "GET", "/api/v1/users", None).await.status, 403);
    let me = env.browser(&bob, "GET", "/api/v1/session", None).await;
    assert!(!me.body["operations"].as_array().unwrap().contains(&json!({"method": "post", "path": "/api/v1/users"})));

    // Bodies: objects of known fields.
    for (body, says) in [
        (json!([1]), "JSON object"),
        (json!("x"), "JSON object"),
        (json!({"name": "c", "role": "viewer", "pasword": "x"}), "pasword"),
    ] {
        let r = env.browser(&alice, "POST", "/api/v1/users", Some(body)).await;
        assert_eq!(r.status, 400, "{}", r.body);
        assert!(r.body["error"].as_str().unwrap().contains(says), "{}", r.body);
    }
    let role = env.browser(&alice, "POST", "/api/v1/users", Some(json!({"name": "c", "role": "root"}))).await;
    assert!(role.body["error"].as_str().unwrap().contains("owner, admin, key-manager or viewer"), "{}", role.body);
    let short = env
        .browser(&alice, "POST", "/api/v1/users", Some(json!({"name": "c", "role": "viewer", "password": "short"})))
        .await;
    assert!(short.body["error"].as_str().unwrap().contains("at least 12 characters"), "{}", short.body);

    let out = env.browser(&alice, "DELETE", "/api/v1/session", None).await;
    assert_eq!((out.status, &out.body), (200, &json!({"logout_url": null})));
    assert!(out.headers["set-cookie"].to_str().unwrap().contains("Max-Age=0"));
    assert_eq!(env.call("GET", "/api/v1/session", &[("cookie", &alice.cookie)], None).await.status, 401);
    assert_eq!(env.audit_rows("session_logout").await.len(), 1);
    let success = env.audit_rows("authn_login_success").await;
    assert_eq!(success.len(), 3);
    assert_eq!((success[0]["actor"].as_str(), success[0]["source_ip"].as_str()), (Some("user:bob"), Some("192.0.2.7")));
    let created = env.audit_rows("user_created").await;
    assert_eq!(created[0]["actor"], "user:alice");
    assert_eq!(created[0]["after"]["name"], "bob");
    env.finish().await;
}

#[tokio::test]
async fn sessions_end_when_idle_and_when_too_old() {
    let settings = AdminSettings { idle_secs: 2, absolute_secs: 4, ..settings() };
    let mut env = Env::new(settings).await;
    env.user("ida", "admin", "ida-password-123").await;
    let idle = env.login("ida", "ida-password-123").await;
    let busy = env.login("ida", "ida-password-123").await;
    let start = tokio::time::Instant::now();
    // Uses a second apart keep a 2 s idle limit a second away, whatever the machine's load.
    for at in [1000, 2000] {
        tokio::time::sleep_until(start + Duration::from_millis(at)).await;
        assert_eq!(env.me(&busy).await.status, 200, "used every second: alive at {at} ms");
    }
    tokio::time::sleep_until(start + Duration::from_millis(2300)).await;
    let gone = env.me(&idle).await;
    assert_eq!(gone.status, 401, "{}", gone.body);
    assert!(gone.body["error"].as_str().unwrap().contains("expired"), "{}", gone.body);
    tokio::time::sleep_until(start + Duration::from_millis(3000)).await;
    assert_eq!(env.me(&busy).await.status, 200);
    tokio::time::sleep_until(start + Duration::from_millis(4200)).await;
    let old = env.me(&busy).await;
    assert_eq!(old.status, 401, "absolute expiry however busy: {}", old.body);
    let left: i64 = env
        .scratch
        .db
        .query_one(&format!("SELECT count(*) FROM {}.fg_admin_sessions", env.scratch.name), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "expired sessions are deleted");
    env.finish().await;
}

#[tokio::test]
async fn failed_logins_are_throttled_by_name_the_same_whether_it_exists_or_not() {
    let settings = AdminSettings { max_failures_per_user: 3, window_secs: 60, ..settings() };
    let mut env = Env::new(settings).await;
    env.user("carol", "viewer", "carol-password-1").await;
    env.secrets.push("carol-guess-0000".into());
    let login = |name: &'static str, password: &'static str| {
        env.call("POST", "/api/v1/session", &[], Some(json!({"name": name, "password": password})))
    };
    let mut answers = Vec::new();
    for _ in 0..3 {
        answers.push(login("carol", "carol-guess-0000").await);
        answers.push(login("nobody", "carol-guess-0000").await);
    }
    for a in &answers {
        assert_eq!((a.status, &a.body), (401, &json!({"error": "wrong name or password"})));
    }
    for name in ["carol", "nobody"] {
        let locked = login(name, "carol-password-1").await;
        assert_eq!(locked.status, 429, "{name}: {}", locked.body);
        let after: u64 = locked.headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=60).contains(&after), "{after}");
    }
    let fails = env.audit_rows("authn_login_fail").await;
    let details: Vec<&str> = fails.iter().filter_map(|e| e["detail"].as_str()).collect();
    for d in ["wrong password", "unknown user", "throttled"] {
        assert!(details.contains(&d), "{details:?}");
    }
    assert_eq!(env.audit_rows("authn_login_lock").await.len(), 2, "carol and nobody");
    assert_eq!(fails[0]["actor"], "anonymous");
    env.finish().await;
}

#[tokio::test]
async fn api_tokens_roles_revocation_and_disabled_users() {
    let mut env = Env::new(settings()).await;
    env.user("dave", "admin", "dave-password-12").await;
    let dave = env.login("dave", "dave-password-12").await;
    let broad = env.browser(&dave, "POST", "/api/v1/tokens", Some(json!({"name": "x", "role": "owner"}))).await;
    assert_eq!(broad.status, 400, "{}", broad.body);
    let past = env
        .browser(&dave, "POST", "/api/v1/tokens", Some(json!({"name": "x", "expires_at": "2020-01-01T00:00:00Z"})))
        .await;
    assert_eq!(past.status, 400, "{}", past.body);
    let made = env
        .browser(&dave, "POST", "/api/v1/tokens", Some(json!({"name": "ci", "expires_at": "2099-01-01T00:00:00Z"})))
        .await;
    assert_eq!((made.status, &made.body["role"]), (200, &json!("admin")), "{}", made.body);
    let admin_token = made.body["token"].as_str().unwrap().to_string();
    let admin_id = made.body["id"].as_i64().unwrap();
    assert!(admin_token.starts_with("fgt_") && admin_token.len() == 47, "{admin_token}");
    let viewer = env.browser(&dave, "POST", "/api/v1/tokens", Some(json!({"name": "read", "role": "viewer"}))).await;
    let viewer_token = viewer.body["token"].as_str().unwrap().to_string();
    env.secrets.extend([admin_token.clone(), viewer_token.clone()]);
    let digest: Vec<u8> = env
        .scratch
        .db
        .query_one(&format!("SELECT digest FROM {}.fg_admin_tokens WHERE id = $1", env.scratch.name), &[&admin_id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(hex::encode(digest), hex::encode(<sha2::Sha256 as sha2::Digest>::digest(admin_token.as_bytes())));

    // Each acts with its own role; the narrower one is refused what it may not do.
    assert_eq!(env.bearer(&admin_token, "GET", "/api/v1/users", None).await.status, 200);
    assert_eq!(env.bearer(&viewer_token, "GET", "/api/v1/users", None).await.status, 403);
    let me = env.bearer(&viewer_token, "GET", "/api/v1/session", None).await;
    assert_eq!(
        (&me.body["role"], &me.body["actor"]["kind"], &me.body["name"]),
        (&json!("viewer"), &json!("token"), &json!("dave"))
    );
    let listed = env.bearer(&admin_token, "GET", "/api/v1/tokens", None).await;
    let tokens = listed.body["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 2);
    assert_eq!(tokens[1]["prefix"], &admin_token[..12]);
    assert!(tokens[1]["last_used_at"].is_i64() && tokens[1].get("digest").is_none(), "{}", listed.body);
    assert!(!listed.body.to_string().contains(&admin_token[12..]));
    assert_eq!(env.bearer(&admin_token, "GET", "/api/v1/tokens?all=true", None).await.status, 403);
    assert_eq!(env.boot("GET", "/api/v1/tokens?all=true", None).await.body["tokens"].as_array().unwrap().len(), 2);
    let boot_token = env.boot("POST", "/api/v1/tokens", Some(json!({"name": "x"}))).await;
    assert_eq!(boot_token.status, 400);
    assert!(boot_token.body["error"].as_str().unwrap().contains("create one first"), "{}", boot_token.body);

    // A revoke holds at once.
    let revoked = env.bearer(&admin_token, "DELETE", &format!("/api/v1/tokens/{admin_id}"), None).await;
    assert!(revoked.status == 200 && revoked.body["revoked_at"].is_i64(), "{}", revoked.body);
    let refused = env.bearer(&admin_token, "GET", "/api/v1/session", None).await;
    assert_eq!(refused.status, 401, "{}", refused.body);
    assert_eq!(env.bearer(&viewer_token, "DELETE", &format!("/api/v1/tokens/{admin_id}"), None).await.status, 200);

    // The user's role caps its tokens; a new role ends its sessions; disabled: all refused.
    let again = env.browser(&dave, "POST", "/api/v1/tokens", Some(json!({"name": "ci2"}))).await;
    let token2 = again.body["token"].as_str().unwrap().to_string();
    env.secrets.push(token2.clone());
    let demoted = env.boot("PUT", "/api/v1/users/dave", Some(json!({"role": "viewer"}))).await;
    assert_eq!((demoted.status, &demoted.body["role"]), (200, &json!("viewer")), "{}", demoted.body);
    assert_eq!(env.bearer(&token2, "GET", "/api/v1/users", None).await.status, 403, "capped by the user's role");
    assert_eq!(env.bearer(&token2, "GET", "/api/v1/session", None).await.body["role"], "viewer");
    assert_eq!(env.browser(&dave, "GET", "/api/v1/session", None).await.status, 401, "role change ends sessions");
    let dave = env.login("dave", "dave-password-12").await;
    let disabled = env.boot("PUT", "/api/v1/users/dave", Some(json!({"disabled": true}))).await;
    assert_eq!(disabled.status, 200, "{}", disabled.body);
    assert_eq!(env.bearer(&token2, "GET", "/api/v1/session", None).await.status, 401);
    assert_eq!(env.browser(&dave, "GET", "/api/v1/session", None).await.status, 401);
    let login =
        env.call("POST", "/api/v1/session", &[], Some(json!({"name": "dave", "password": "dave-password-12"}))).await;
    assert_eq!((login.status, &login.body), (401, &json!({"error": "wrong name or password"})));
    let event = &env.audit_rows("user_disabled").await[0];
    assert_eq!((&event["before"]["disabled"], &event["after"]["disabled"]), (&json!(false), &json!(true)), "{event}");
    assert_eq!(env.audit_rows("token_created").await.len(), 3);
    assert_eq!(env.audit_rows("token_revoked").await.len(), 2);
    env.finish().await;
}

#[tokio::test]
async fn the_last_owner_stays_and_passwords_change() {
    let mut env = Env::new(settings()).await;
    env.user("erin", "owner", "erin-password-12").await;
    let erin = env.login("erin", "erin-password-12").await;
    for (method, body) in
        [("PUT", Some(json!({"role": "admin"}))), ("PUT", Some(json!({"disabled": true}))), ("DELETE", None)]
    {
        let r = env.browser(&erin, method, "/api/v1/users/erin", body).await;
        assert_eq!(r.status, 409, "{}", r.body);
        assert_eq!(r.body["error"], "erin is the last owner: make another owner first");
    }
    env.user("frank", "owner", "frank-password-1").await;
    let demoted = env.browser(&erin, "PUT", "/api/v1/users/erin", Some(json!({"role": "admin"}))).await;
    assert_eq!(demoted.status, 200, "{}", demoted.body);
    assert_eq!(env.boot("DELETE", "/api/v1/users/frank", None).await.status, 409);
    assert_eq!(env.boot("GET", "/api/v1/users/nobody", None).await.status, 404);

    // One's own password: needs the current one; the other sessions end, this one stays.
    let erin = env.login("erin", "erin-password-12").await;
    let other = env.login("erin", "erin-password-12").await;
    env.secrets.push("erin-new-password".into());
    let change = |current: &str| json!({"current_password": current, "new_password": "erin-new-password"});
    let wrong = env.browser(&erin, "POST", "/api/v1/session/password", Some(change("not-her-password"))).await;
    assert_eq!(wrong.status, 403, "{}", wrong.body);
    let short = json!({"current_password": "erin-password-12", "new_password": "short"});
    assert_eq!(env.browser(&erin, "POST", "/api/v1/session/password", Some(short)).await.status, 400);
    let done = env.browser(&erin, "POST", "/api/v1/session/password", Some(change("erin-password-12"))).await;
    assert_eq!((done.status, &done.body), (200, &json!({"sessions_ended": 1})));
    assert_eq!(env.browser(&erin, "GET", "/api/v1/session", None).await.status, 200);
    assert_eq!(env.browser(&other, "GET", "/api/v1/session", None).await.status, 401);
    env.login("erin", "erin-new-password").await;
    env.secrets.push("frank-reset-pass".into());
    let reset = env.boot("POST", "/api/v1/users/frank/password", Some(json!({"password": "frank-reset-pass"}))).await;
    assert_eq!(reset.status, 200, "{}", reset.body);
    env.login("frank", "frank-reset-pass").await;
    assert_eq!(env.audit_rows("password_reset").await.len(), 1);
    assert_eq!(env.audit_rows("authn_password_change").await.len(), 2, "the refusal and the change");
    env.finish().await;
}

#[tokio::test]
async fn the_audit_log_pages_and_filters() {
    let mut env = Env::new(settings()).await;
    for name in ["gina", "hank", "ivan"] {
        env.user(name, "viewer", &format!("{name}-password-123")).await;
    }
    let first = env.boot("GET", "/api/v1/audit?action=user_created&limit=2", None).await;
    let events = first.body["events"].as_array().unwrap();
    assert_eq!(events.iter().map(|e| e["object"].as_str().unwrap()).collect::<Vec<_>>(), ["users/ivan", "users/hank"]);
    let cursor = first.body["next_cursor"].as_str().unwrap();
    let next = env.boot("GET", &format!("/api/v1/audit?action=user_created&limit=2&cursor={cursor}"), None).await;
    assert_eq!(next.body["events"][0]["object"], "users/gina");
    assert_eq!(next.body["next_cursor"], Value::Null);
    let one = env.boot("GET", "/api/v1/audit?object=users/hank&actor=bootstrap", None).await;
    assert_eq!(one.body["events"].as_array().unwrap().len(), 1);
    let at = one.body["events"][0]["at"].as_i64().unwrap();
    let since = env.boot("GET", &format!("/api/v1/audit?since={}&until={}", at + 60_000, at + 120_000), None).await;
    assert_eq!(since.body["events"], json!([]));
    for bad in ["cursor=nope", "limit=0", "since=yesterday", "who=me"] {
        assert_eq!(env.boot("GET", &format!("/api/v1/audit?{bad}"), None).await.status, 400, "{bad}");
    }
    let gina = env.login("gina", "gina-password-123").await;
    assert_eq!(env.browser(&gina, "GET", "/api/v1/audit", None).await.status, 403, "admins only");
    env.finish().await;
}

#[tokio::test]
async fn with_the_file_store_only_the_bootstrap_token_exists() {
    let identity = Identity::new(settings(), Some(BOOT.into()), Arc::new(OnceLock::new()), false);
    let snapshots = Arc::new(Snapshots::new(None));
    let app = router(Admin {
        identity,
        runtime: None,
        usage: Arc::new(ferrogate_sidecar::services::usage::UsageBackend::memory(
            ferrogate_sidecar::services::usage::UsageStore::new(None),
        )),
        cache: Arc::new(ferrogate_sidecar::services::cache::Cache::new(snapshots.clone())),
        snapshots,
        db: Arc::new(OnceLock::new()),
        postgres: false,
        ledger: Arc::new(ferrogate_sidecar::services::limits::Ledger::new("test".into(), false)),
        targets: Arc::new(ferrogate_sidecar::services::targets::Targets::new(Default::default())),
        kv: Arc::default(),
    });
    let call = |method: &str, uri: &str, auth: bool, body: &str| {
        let mut req = axum::http::Request::builder().method(method).uri(uri);
        if auth {
            req = req.header("authorization", format!("Bearer {BOOT}"));
        }
        app.clone().oneshot(req.body(axum::body::Body::from(body.to_string())).unwrap())
    };
    let methods = call("GET", "/api/v1/session/methods", false, "").await.unwrap();
    let body = axum::body::to_bytes(methods.into_body(), 1 << 16).await.unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), json!({"password": false, "oidc": false}));
    let login = call("POST", "/api/v1/session", false, r#"{"name":"a","password":"p"}"#).await.unwrap();
    assert_eq!(login.status().as_u16(), 409);
    assert_eq!(call("GET", "/api/v1/session", true, "").await.unwrap().status().as_u16(), 200);
    assert_eq!(call("GET", "/api/v1/session", false, "").await.unwrap().status().as_u16(), 401);
    assert_eq!(call("GET", "/api/v1/users", true, "").await.unwrap().status().as_u16(), 409);
}
