//! `/api/v1/session...`: password login, the login methods there are, the caller, logout, and
//! changing one's own password.
//!
//! Every failed login answers the same 401 "wrong name or password", whether the name is
//! unknown, the password wrong, the user disabled or without a password (the audit log keeps
//! which); an unknown name costs the same argon2 work as a known one.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, RETRY_AFTER, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use deadpool_postgres::Pool;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{body, event, op, refuse, role_schema, user_of, Answered, Refusal};
use crate::services::admin::Admin;
use crate::services::identity::audit::{self, Who};
use crate::services::identity::users::{self, LoginRow, UserRow};
use crate::services::identity::{
    authn, oidc, passwords, sessions, throttle, Actor, AuditEvent, Identity, Principal, RequestMeta, Role,
};
use crate::services::openapi::{self, schema, Access, Operation};

/// The one answer to every failed login.
const WRONG: &str = "wrong name or password";

/// `POST /api/v1/session`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct LoginBody {
    /// User name.
    name: String,
    /// Password.
    password: String,
}

/// The logged-in user, as the login answers it.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub(super) struct LoginUser {
    name: String,
    #[schemars(schema_with = "role_schema")]
    role: Role,
    key_groups: Vec<String>,
}

/// The login's answer (the session itself is the cookie).
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub(super) struct LoginAnswer {
    user: LoginUser,
    /// Send it back in `X-CSRF-Token` with every change.
    csrf_token: String,
    /// When the session ends at the latest, Unix ms.
    expires_at: i64,
}

/// `GET /api/v1/session/methods`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub(super) struct Methods {
    /// Password login (users live in PostgreSQL).
    password: bool,
    /// Single sign-on (`admin.oidc`).
    oidc: bool,
}

/// An operation the caller may call.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub(super) struct OperationRef {
    method: String,
    path: String,
}

/// `GET /api/v1/session`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub(super) struct Me {
    /// `{"kind": "user" | "token" | "bootstrap" | "local", ...}`.
    #[schemars(with = "Value")]
    actor: Actor,
    name: String,
    #[schemars(schema_with = "role_schema")]
    role: Role,
    key_groups: Vec<String>,
    /// The session's CSRF token (cookie sessions only).
    #[serde(skip_serializing_if = "Option::is_none")]
    csrf_token: Option<String>,
    /// What this role may call (a UI hides the rest).
    operations: Vec<OperationRef>,
}

/// `POST /api/v1/session/password`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PasswordChange {
    current_password: String,
    new_password: String,
}

/// 429 with `Retry-After`.
fn throttled(secs: u64) -> Refusal {
    let mut r = refuse(StatusCode::TOO_MANY_REQUESTS, format!("too many failed logins: try again in {secs} s"));
    r.0.headers_mut().insert(RETRY_AFTER, HeaderValue::from(secs));
    r
}

fn source(meta: &RequestMeta) -> String {
    meta.source_ip.clone().unwrap_or_else(|| "unknown".into())
}

/// The principal a logged-in user is.
fn principal_of(user: &UserRow) -> Principal {
    Principal {
        actor: Actor::User { id: user.id, name: user.name.clone() },
        role: user.role,
        key_groups: user.key_groups.clone(),
        csrf: None,
    }
}

/// `POST /api/v1/session` (public).
pub(super) async fn login(
    State(admin): State<Admin>,
    Extension(meta): Extension<RequestMeta>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Answered {
    let identity = &admin.identity;
    authn::same_site(&headers).map_err(Refusal::answer)?;
    let pool = identity.pool()?.clone();
    let mut b: LoginBody = body(&bytes)?;
    // PostgreSQL text cannot hold NUL; no user name has one, so the login fails as any other.
    b.name = b.name.replace('\0', "\u{fffd}");
    if let Some(secs) = throttle::locked(&pool, &identity.settings, &b.name, &source(&meta)).await? {
        login_failed_audit(identity, &meta, &b.name, 429, "throttled").await;
        return Err(throttled(secs));
    }
    let found = users::for_login(&pool, &b.name).await?;
    let verified = passwords::verify_blocking(&b.password, found.as_ref().and_then(|f| f.password_hash.clone())).await;
    let user = match check(found, verified.ok) {
        Ok(user) => user,
        Err(why) => return Err(failed(identity, &pool, &meta, &b.name, why).await),
    };
    throttle::clear(&pool, &user.name).await?;
    if verified.rehash {
        rehash(&pool, &user, &b.password).await;
    }
    if let Err(e) = sessions::prune(&pool, identity.settings.absolute_secs).await {
        tracing::warn!("expired admin sessions not pruned: {e}");
    }
    let session = sessions::create(&pool, user.id, "password", None).await?;
    let mut done = event("authn_login_success", format!("users/{}", user.name));
    done.detail = Some("password".into());
    identity.audit(&principal_of(&user), &meta, done).await;
    Ok(logged_in(identity, &headers, &user, session))
}

/// The login's answer with its cookie.
fn logged_in(identity: &Identity, headers: &HeaderMap, user: &UserRow, session: sessions::NewSession) -> Response {
    let absolute_ms = i64::try_from(identity.settings.absolute_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
    let now = i64::try_from(crate::services::now_ms()).unwrap_or(i64::MAX);
    let answer = LoginAnswer {
        user: LoginUser { name: user.name.clone(), role: user.role, key_groups: user.key_groups.clone() },
        csrf_token: session.csrf,
        expires_at: now.saturating_add(absolute_ms),
    };
    let mut r = Json(answer).into_response();
    r.headers_mut().insert(SET_COOKIE, sessions::set_cookie(identity, headers, &session.cookie));
    r.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The user a login may be, or why not (for the audit log only).
fn check(found: Option<LoginRow>, password_ok: bool) -> Result<UserRow, &'static str> {
    match found {
        None => Err("unknown user"),
        Some(f) if f.password_hash.is_none() => Err("no password (OIDC user)"),
        Some(_) if !password_ok => Err("wrong password"),
        Some(f) if f.user.disabled => Err("user disabled"),
        Some(f) => Ok(f.user),
    }
}

/// Records and audits a failed login; the one 401 to answer.
async fn failed(identity: &Identity, pool: &Pool, meta: &RequestMeta, name: &str, why: &str) -> Refusal {
    login_failed_audit(identity, meta, name, 401, why).await;
    match throttle::record_failure(pool, &identity.settings, name, &source(meta)).await {
        Ok(Some(lock)) => {
            let detail = match lock {
                throttle::Lock::User => format!("user:{} reached admin.login.max_failures_per_user", cut(name)),
                throttle::Lock::Address => {
                    format!("addr:{} reached admin.login.max_failures_per_address", source(meta))
                }
            };
            let object = format!("users/{}", cut(name));
            audit::record(identity, &Who::anonymous(), meta, refused("authn_login_lock", &object, 401, &detail)).await;
        }
        Ok(None) => {}
        Err(e) => tracing::error!("failed login not recorded for throttling: {e}"),
    }
    refuse(StatusCode::UNAUTHORIZED, WRONG)
}

/// At most 64 characters of a name someone typed.
fn cut(name: &str) -> String {
    name.chars().take(64).collect()
}

async fn login_failed_audit(identity: &Identity, meta: &RequestMeta, name: &str, status: u16, why: &str) {
    let object = format!("users/{}", cut(name));
    audit::record(identity, &Who::anonymous(), meta, refused("authn_login_fail", &object, status, why)).await;
}

/// Stores the password's hash with today's parameters (the stored one had others).
async fn rehash(pool: &Pool, user: &UserRow, password: &str) {
    let stored = match passwords::hash_blocking(password).await {
        Ok(phc) => users::store_rehash(pool, user.id, &phc).await,
        Err(e) => Err(e),
    };
    match stored {
        Ok(()) => tracing::info!(user = %user.name, "password hash upgraded to the current argon2id parameters"),
        Err(e) => tracing::warn!(user = %user.name, "password hash not upgraded: {e}"),
    }
}

/// `GET /api/v1/session/methods` (public).
pub(super) async fn methods(State(admin): State<Admin>) -> Json<Methods> {
    Json(Methods { password: admin.identity.postgres, oidc: admin.identity.oidc.is_some() })
}

/// `GET /api/v1/session`.
pub(super) async fn me(Extension(p): Extension<Principal>) -> Json<Me> {
    let operations = openapi::operations()
        .into_iter()
        .filter(|o| match o.access {
            Access::Public => true,
            Access::Role(needed) => p.role.covers(needed),
        })
        .map(|o| OperationRef { method: o.method.to_string(), path: o.path })
        .collect();
    let name = p.actor.user().map_or_else(|| p.actor.label(), |(_, n)| n.to_string());
    Json(Me { name, actor: p.actor, role: p.role, key_groups: p.key_groups, csrf_token: p.csrf, operations })
}

/// `DELETE /api/v1/session`: ends the caller's session (if a cookie authenticated it) and
/// clears the cookie; for an OIDC session, where to send the browser to end it at the provider.
pub(super) async fn logout(
    State(admin): State<Admin>,
    Extension(p): Extension<Principal>,
    Extension(meta): Extension<RequestMeta>,
    headers: HeaderMap,
) -> Answered {
    let identity = &admin.identity;
    let mut logout_url = None;
    if let (Some(_), Some(cookie)) = (&p.csrf, sessions::cookie_value(&headers)) {
        if let Some((via, id_token)) = sessions::end(identity.pool()?, cookie).await? {
            if via == "oidc" {
                logout_url = oidc::end_session_url(identity, id_token.as_deref()).await;
            }
            let object = p.actor.user().map_or_else(|| p.actor.label(), |(_, n)| format!("users/{n}"));
            let mut done = event("session_logout", object);
            done.detail = Some(via);
            identity.audit(&p, &meta, done).await;
        }
    }
    let mut r = Json(json!({"logout_url": logout_url})).into_response();
    r.headers_mut().insert(SET_COOKIE, sessions::clear_cookie(identity, &headers));
    Ok(r)
}

/// `POST /api/v1/session/password`: the caller's own password, given the current one. Ends the
/// user's other sessions (the one changing it stays).
pub(super) async fn password(
    State(admin): State<Admin>,
    Extension(p): Extension<Principal>,
    Extension(meta): Extension<RequestMeta>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Answered {
    let identity = &admin.identity;
    let pool = identity.pool()?.clone();
    let b: PasswordChange = body(&bytes)?;
    let (_, name) = user_of(&p)?;
    let object = format!("users/{name}");
    if let Some(secs) = throttle::locked(&pool, &identity.settings, name, &source(&meta)).await? {
        identity.audit(&p, &meta, refused("authn_password_change", &object, 429, "throttled")).await;
        return Err(throttled(secs));
    }
    let found = users::for_login(&pool, name).await?.ok_or_else(|| refuse(StatusCode::NOT_FOUND, "no such user"))?;
    let Some(phc) = found.password_hash else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            format!("{name} has no password (it logs in with OIDC); an owner may set one"),
        ));
    };
    if !passwords::verify_blocking(&b.current_password, Some(phc)).await.ok {
        if let Err(e) = throttle::record_failure(&pool, &identity.settings, name, &source(&meta)).await {
            tracing::error!("failed password check not recorded for throttling: {e}");
        }
        identity.audit(&p, &meta, refused("authn_password_change", &object, 403, "wrong current password")).await;
        return Err(refuse(StatusCode::FORBIDDEN, "current_password is wrong"));
    }
    passwords::check_policy(&b.new_password, name, identity.settings.password_min_length)?;
    let phc = passwords::hash_blocking(&b.new_password).await?;
    let keep = p.csrf.as_ref().and_then(|_| sessions::cookie_value(&headers)).map(sessions::digest);
    let ended = users::set_password(&pool, found.user.id, &phc, keep.as_deref()).await?;
    throttle::clear(&pool, name).await?;
    let mut done = event("authn_password_change", object);
    done.detail = Some(format!("{ended} other sessions ended"));
    identity.audit(&p, &meta, done).await;
    Ok(Json(json!({"sessions_ended": ended})).into_response())
}

/// An audit event of a refusal.
pub(super) fn refused(action: &str, object: &str, status: u16, why: &str) -> AuditEvent {
    AuditEvent {
        action: action.into(),
        object: Some(object.into()),
        status,
        detail: Some(why.into()),
        ..AuditEvent::default()
    }
}

/// The operations of this module.
pub(super) fn operations() -> Vec<Operation> {
    let viewer = Access::Role(Role::Viewer);
    let ended = json!({"type": "object", "properties": {"sessions_ended": {"type": "integer"}}});
    let logout = json!({"type": "object", "properties": {"logout_url": {"type": ["string", "null"]}}});
    vec![
        op(
            "post",
            "/api/v1/session",
            Access::Public,
            "Log in with a name and password: a session cookie and its CSRF token (401 for any wrong name or \
             password, 429 while throttled, 409 with the file store)",
            Some(schema::<LoginBody>()),
            schema::<LoginAnswer>(),
            &[401, 403, 429],
        ),
        op(
            "get",
            "/api/v1/session/methods",
            Access::Public,
            "The login methods there are",
            None,
            schema::<Methods>(),
            &[],
        ),
        op(
            "get",
            "/api/v1/session",
            viewer,
            "The caller: actor, role, key groups, what it may call",
            None,
            schema::<Me>(),
            &[],
        ),
        op(
            "delete",
            "/api/v1/session",
            viewer,
            "End the caller's session and clear its cookie (logout_url: the OpenID provider's, for OIDC sessions)",
            None,
            logout,
            &[],
        ),
        op(
            "post",
            "/api/v1/session/password",
            viewer,
            "Change one's own password (needs the current one; ends one's other sessions; 403 when it is wrong)",
            Some(schema::<PasswordChange>()),
            ended,
            &[429],
        ),
    ]
}
