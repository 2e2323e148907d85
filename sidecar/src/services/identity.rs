//! Admin identity: who calls the admin API, and what they may do.
//!
//! A request is authenticated by one of: the bootstrap owner token (`FERROGATE_ADMIN_TOKEN`,
//! `Authorization: Bearer`), a user's API token (`Authorization: Bearer fgt_...`), or a session
//! cookie from a password or OIDC login. The result is a [`Principal`]: an [`Actor`] (who, for
//! the audit log), a [`Role`] (what, checked per route by the admin router) and, for a
//! `key-manager`, the key groups it may manage. Users, sessions, tokens and the audit log live
//! in PostgreSQL; with the file store only the bootstrap token exists.
//!
//! The parts: [`passwords`] (argon2id, policy), [`users`], [`sessions`] (cookie, expiry),
//! [`tokens`] (API tokens), [`throttle`] (failed logins), [`audit`] (the audit log), the
//! request checks in `authn` and the HTTP routes in `routes`. docs/identity.md is the manual.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
pub use ferrogate_core::config::admin::{AdminSettings, Role};
use serde::Serialize;
use serde_json::{json, Value};

use super::admin::Admin;
use super::openapi::Operation;
use super::source::Database;

pub mod audit;
mod authn;
pub mod oidc;
pub mod passwords;
mod routes;
pub mod sessions;
pub mod throttle;
pub mod tokens;
pub mod users;

/// Who made an admin request (the audit log's "who").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Actor {
    /// The bootstrap owner token, `FERROGATE_ADMIN_TOKEN`.
    Bootstrap,
    /// Anyone on this host: no token is configured and the admin API listens on loopback only.
    Local,
    /// A user, by a session cookie.
    User {
        /// The user's id.
        id: i64,
        /// The user's name.
        name: String,
    },
    /// One of a user's API tokens.
    Token {
        /// The token's id.
        id: i64,
        /// Its user's id.
        user_id: i64,
        /// Its user's name.
        user: String,
    },
}

impl Actor {
    /// How the audit log and the logs name this actor: `bootstrap`, `local`, `user:alice`,
    /// `token:12:alice`.
    pub fn label(&self) -> String {
        match self {
            Actor::Bootstrap => "bootstrap".into(),
            Actor::Local => "local".into(),
            Actor::User { name, .. } => format!("user:{name}"),
            Actor::Token { id, user, .. } => format!("token:{id}:{user}"),
        }
    }

    /// The user behind this actor, when there is one: `(id, name)`.
    pub fn user(&self) -> Option<(i64, &str)> {
        match self {
            Actor::User { id, name } => Some((*id, name)),
            Actor::Token { user_id, user, .. } => Some((*user_id, user)),
            Actor::Bootstrap | Actor::Local => None,
        }
    }
}

/// An authenticated caller of the admin API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Who.
    pub actor: Actor,
    /// What they may do (for a token: the narrower of the token's and its user's role).
    pub role: Role,
    /// The key groups a `key-manager` may manage; empty = every group.
    pub key_groups: Vec<String>,
    /// The session's CSRF token, when a session cookie authenticated the request.
    pub csrf: Option<String>,
}

impl Principal {
    /// The bootstrap owner.
    pub fn bootstrap() -> Principal {
        Principal { actor: Actor::Bootstrap, role: Role::Owner, key_groups: Vec::new(), csrf: None }
    }

    /// Whether this principal may manage the key group `group` (owners and admins: all).
    pub fn manages_group(&self, group: &str) -> bool {
        self.role != Role::KeyManager || self.key_groups.is_empty() || self.key_groups.iter().any(|g| g == group)
    }
}

/// Where an admin request came from (the audit log's "where").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RequestMeta {
    /// The peer address (the admin listener sees the client or its proxy).
    pub source_ip: Option<String>,
    /// `User-Agent`.
    pub user_agent: Option<String>,
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
}

impl RequestMeta {
    /// The request's metadata.
    pub fn of(method: &Method, path: &str, headers: &HeaderMap, peer: Option<SocketAddr>) -> RequestMeta {
        let user_agent = headers.get(axum::http::header::USER_AGENT).and_then(|v| v.to_str().ok()).map(String::from);
        RequestMeta {
            source_ip: peer.map(|p| p.ip().to_string()),
            user_agent,
            method: method.to_string(),
            path: path.into(),
        }
    }
}

/// One audit record to write.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditEvent {
    /// What happened: `<collection>.<create|replace|delete>`, `cache.purge`, `users.create`,
    /// `tokens.revoke`, `authn_login_success`, `authn_login_fail`, `session_logout`, ...
    pub action: String,
    /// What it happened to: `keys/alice`, `users/bob`, `tokens/12`.
    pub object: Option<String>,
    /// The object before (secrets are redacted when written).
    pub before: Option<Value>,
    /// The object after (secrets are redacted when written).
    pub after: Option<Value>,
    /// The HTTP status answered.
    pub status: u16,
    /// Why, for refusals and failures.
    pub detail: Option<String>,
}

/// Why a request is not let through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No credentials, or wrong, expired or revoked ones (401).
    #[error("{0}")]
    Unauthenticated(String),
    /// Authenticated, but the role does not reach the route's (403).
    #[error("{0}")]
    Forbidden(String),
    /// A cookie-authenticated change without the session's CSRF token, or from another site (403).
    #[error("{0}")]
    Csrf(String),
    /// The database that holds users, sessions and tokens cannot be reached (503).
    #[error("{0}")]
    Unavailable(String),
}

impl AuthError {
    /// The HTTP status of this refusal.
    pub fn status(&self) -> StatusCode {
        match self {
            AuthError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            AuthError::Forbidden(_) | AuthError::Csrf(_) => StatusCode::FORBIDDEN,
            AuthError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl IntoResponse for AuthError {
    fn into_response(self) -> Response {
        let mut answer = (self.status(), Json(json!({"error": self.to_string()}))).into_response();
        if self.status() == StatusCode::UNAUTHORIZED {
            answer
                .headers_mut()
                .insert(axum::http::header::WWW_AUTHENTICATE, axum::http::HeaderValue::from_static("Bearer"));
        }
        answer
    }
}

/// The identity service, part of the admin API's state.
#[derive(Clone)]
pub struct Identity {
    /// `admin:` of the configuration file, validated.
    pub settings: Arc<AdminSettings>,
    /// The bootstrap owner token, `FERROGATE_ADMIN_TOKEN`.
    pub bootstrap: Option<String>,
    /// The configuration database once connected: users, sessions, tokens and the audit log.
    pub db: Arc<OnceLock<Database>>,
    /// Whether the store is PostgreSQL (with the file store there are no users).
    pub postgres: bool,
    /// Single sign-on, when `admin.oidc` is configured.
    pub oidc: Option<Arc<oidc::OidcClient>>,
}

impl Identity {
    /// An identity service over `db`.
    pub fn new(
        settings: AdminSettings,
        bootstrap: Option<String>,
        db: Arc<OnceLock<Database>>,
        postgres: bool,
    ) -> Identity {
        if postgres {
            // The hash unknown names are checked against, made now rather than by the first
            // such login (which would then take twice as long as the others).
            std::thread::spawn(passwords::warm_up);
        }
        let oidc = settings.oidc.clone().map(|o| Arc::new(oidc::OidcClient::new(o)));
        Identity { settings: Arc::new(settings), bootstrap, db, postgres, oidc }
    }

    /// Authenticates an admin request. `method` matters for CSRF: a cookie-authenticated
    /// request with an unsafe method must carry the session's token in `X-CSRF-Token`.
    ///
    /// # Errors
    /// [`AuthError::Unauthenticated`] without valid credentials, [`AuthError::Csrf`] for a
    /// cookie-authenticated change without its token, [`AuthError::Unavailable`] when the
    /// database is needed and cannot answer.
    pub async fn authenticate(&self, headers: &HeaderMap, method: &Method) -> Result<Principal, AuthError> {
        authn::authenticate(self, headers, method).await
    }

    /// Writes an audit record (and a log line); never fails the request: a record that cannot
    /// be written is logged as an error. With the file store there is only the log line.
    pub async fn audit(&self, who: &Principal, meta: &RequestMeta, event: AuditEvent) {
        audit::record(self, &audit::Who::of(who), meta, event).await;
    }

    /// The pool of the identity tables.
    ///
    /// # Errors
    /// [`IdentityError::NoDatabase`] with the file store, [`IdentityError::Unavailable`] while
    /// the database is not connected yet.
    pub fn pool(&self) -> Result<&deadpool_postgres::Pool, IdentityError> {
        if !self.postgres {
            return Err(IdentityError::NoDatabase);
        }
        self.db.get().map(|d| d.store.pool()).ok_or(IdentityError::Unavailable)
    }
}

/// Failures of the identity store.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The database refused or is unreachable.
    #[error("database: {0}")]
    Db(#[from] tokio_postgres::Error),
    /// No connection could be had from the pool.
    #[error("database pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// There is no database (the file store).
    #[error("admin users need store: {{ kind: postgres }} (the file store has only FERROGATE_ADMIN_TOKEN)")]
    NoDatabase,
    /// The user is disabled.
    #[error("user {0} is disabled")]
    Disabled(String),
    /// No such user or token.
    #[error("{0} not found")]
    NotFound(String),
    /// The change conflicts with what is there (a name taken, the last owner).
    #[error("{0}")]
    Conflict(String),
    /// The request is wrong (a role, a name, a short password).
    #[error("{0}")]
    Invalid(String),
    /// The caller may not do this (another user's tokens).
    #[error("{0}")]
    Forbidden(String),
    /// The database is not connected yet.
    #[error("the configuration database is not reachable yet")]
    Unavailable,
    /// Hashing a password failed (argon2 refused its parameters; not expected).
    #[error("password hashing failed: {0}")]
    Hash(String),
}

impl IdentityError {
    /// The HTTP status of this failure.
    pub fn status(&self) -> StatusCode {
        match self {
            IdentityError::Db(_) | IdentityError::Pool(_) | IdentityError::Unavailable => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            IdentityError::Hash(_) => StatusCode::INTERNAL_SERVER_ERROR,
            IdentityError::NoDatabase | IdentityError::Conflict(_) => StatusCode::CONFLICT,
            IdentityError::Disabled(_) | IdentityError::Forbidden(_) => StatusCode::FORBIDDEN,
            IdentityError::NotFound(_) => StatusCode::NOT_FOUND,
            IdentityError::Invalid(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// The routes of users, sessions, tokens and the audit log (`/api/v1/session...`,
/// `/api/v1/users...`, `/api/v1/tokens...`, `/api/v1/audit`).
pub fn router() -> axum::Router<Admin> {
    routes::router()
}

/// The operations of [`router`].
pub fn operations() -> Vec<Operation> {
    routes::operations()
}

/// The bearer token of `Authorization`, if any.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer "))
}

/// Field names whose values are secrets wherever they appear.
const SECRET_FIELDS: &[&str] = &[
    "api_key",
    "api_keys",
    "client_secret",
    "password",
    "password_hash",
    "current_password",
    "new_password",
    "secret",
    "token",
    "id_token",
    "authorization",
    "cookie",
    "csrf",
    "csrf_token",
];

/// Replaces every secret field's value in `v` with `"[redacted]"` (recursively); with
/// `digests`, key digests too (what a viewer must not see). Provider credentials never leave
/// the store anyway; this also covers bodies echoed into the audit log.
pub fn redact(v: &mut Value, digests: bool) {
    match v {
        Value::Object(map) => {
            for (name, field) in map.iter_mut() {
                let lower = name.to_ascii_lowercase();
                if SECRET_FIELDS.contains(&lower.as_str()) || (digests && lower == "digest") {
                    if !field.is_null() {
                        *field = Value::String("[redacted]".into());
                    }
                } else {
                    redact(field, digests);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| redact(item, digests)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_reaches_nested_secrets() {
        let mut v = json!({"name": "p", "api_key": "sk-1", "headers": {"Authorization": "Bearer x"},
            "keys": [{"name": "k", "digest": "sha256:ab"}]});
        redact(&mut v, false);
        assert_eq!(v["api_key"], "[redacted]");
        assert_eq!(v["headers"]["Authorization"], "[redacted]");
        assert_eq!(v["keys"][0]["digest"], "sha256:ab");
        redact(&mut v, true);
        assert_eq!(v["keys"][0]["digest"], "[redacted]");
        assert_eq!(v["keys"][0]["name"], "k");
        let mut login = json!({"name": "a", "password": "p", "new_password": "n", "csrf_token": "c", "Cookie": "x"});
        redact(&mut login, false);
        assert_eq!(
            login,
            json!({"name": "a", "password": "[redacted]", "new_password": "[redacted]",
            "csrf_token": "[redacted]", "Cookie": "[redacted]"})
        );
    }

    #[test]
    fn key_managers_manage_their_groups_only() {
        let mut p = Principal { role: Role::KeyManager, key_groups: vec!["team-a".into()], ..Principal::bootstrap() };
        assert!(p.manages_group("team-a"));
        assert!(!p.manages_group("team-b"));
        p.key_groups.clear();
        assert!(p.manages_group("team-b"));
    }
}
