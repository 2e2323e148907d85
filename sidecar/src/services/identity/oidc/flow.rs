//! The two browser steps: `login` (keep a login in flight, send the browser to the provider)
//! and `callback` (take it back, trade the code, verify the ID token, open a session).

use std::collections::HashMap;

use axum::extract::{RawQuery, State};
use axum::http::header::{CACHE_CONTROL, LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde_json::Value;

use super::discovery::Discovery;
use super::http::{cause, read_limited, TOKEN_LIMIT};
use super::store::{self, Flow};
use super::{claims, pkce, OidcClient, OidcError};
use crate::services::admin::Admin;
use crate::services::identity::sessions::{digest, random_value};
use crate::services::identity::{
    audit, sessions, users, Actor, AuditEvent, Identity, IdentityError, Principal, RequestMeta, Role,
};

/// `GET /api/v1/session/oidc/login[?return_to=/path]`.
pub async fn login(State(admin): State<Admin>, headers: HeaderMap, RawQuery(query): RawQuery) -> Response {
    start(&admin.identity, &headers, query.as_deref()).await.unwrap_or_else(IntoResponse::into_response)
}

/// `GET /api/v1/session/oidc/callback?code=..&state=..` (or `?error=..`).
pub async fn callback(
    State(admin): State<Admin>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    meta: Option<Extension<RequestMeta>>,
) -> Response {
    let identity = &admin.identity;
    let meta = meta.map(|Extension(m)| m).unwrap_or_default();
    let mut taken = false;
    let mut answer = match finish(identity, &headers, query.as_deref(), &meta, &mut taken).await {
        Ok(answer) => answer,
        Err(e) => {
            tracing::warn!(status = e.status().as_u16(), error = %e, "OIDC login refused");
            // A login in flight that failed is audited (a refusal by role or a disabled user
            // already was, with the user's name).
            if taken && !matches!(e, OidcError::Forbidden(_)) {
                fail(identity, &meta, None, e.status().as_u16(), &e.to_string()).await;
            }
            e.into_response()
        }
    };
    if taken {
        let secure = sessions::secure(identity, &headers);
        answer.headers_mut().append(SET_COOKIE, pkce::clear_cookie(secure));
    }
    answer
}

/// The query parameters (the last of a repeated name wins).
fn params(query: Option<&str>) -> HashMap<String, String> {
    form_urlencoded::parse(query.unwrap_or("").as_bytes()).into_owned().collect()
}

/// The configured client, when SSO can work here.
fn client(identity: &Identity) -> Result<&OidcClient, OidcError> {
    let client = identity.oidc.as_deref().ok_or(OidcError::NotConfigured)?;
    if !identity.postgres {
        return Err(OidcError::FileStore);
    }
    Ok(client)
}

/// The identity database's pool.
fn pool(identity: &Identity) -> Result<&deadpool_postgres::Pool, OidcError> {
    identity.pool().map_err(|e| match e {
        IdentityError::NoDatabase => OidcError::FileStore,
        e => OidcError::Unavailable(e.to_string()),
    })
}

fn db_error(e: IdentityError) -> OidcError {
    OidcError::Unavailable(e.to_string())
}

/// A 302 to `location`, not to be cached.
fn redirect(location: &str) -> Result<Response, OidcError> {
    let location = HeaderValue::from_str(location)
        .map_err(|_| OidcError::Unavailable("the redirect target is not a valid header value".into()))?;
    let mut answer = StatusCode::FOUND.into_response();
    answer.headers_mut().insert(LOCATION, location);
    answer.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(answer)
}

pub(super) async fn start(
    identity: &Identity,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<Response, OidcError> {
    let client = client(identity)?;
    let params = params(query);
    let return_to = pkce::return_to(params.get("return_to").map(String::as_str)).map_err(OidcError::BadRequest)?;
    let doc = client.discovery().await?;
    let pool = pool(identity)?;
    let (state, nonce, verifier, cookie) = (random_value(), random_value(), random_value(), random_value());
    let flow = Flow { binding: digest(&cookie), nonce, verifier, return_to };
    store::put(pool, &digest(&state), &flow).await.map_err(db_error)?;
    let settings = &client.settings;
    let mut url = reqwest::Url::parse(&doc.authorization_endpoint)
        .map_err(|e| OidcError::Unavailable(format!("authorization_endpoint: {e}")))?;
    url.query_pairs_mut()
        .append_pair("response_type", "code")
        .append_pair("client_id", &settings.client_id)
        .append_pair("redirect_uri", &settings.redirect_uri)
        .append_pair("scope", &settings.scopes.join(" "))
        .append_pair("state", &state)
        .append_pair("nonce", &flow.nonce)
        .append_pair("code_challenge", &pkce::challenge(&flow.verifier))
        .append_pair("code_challenge_method", "S256");
    let mut answer = redirect(url.as_str())?;
    let secure = sessions::secure(identity, headers);
    answer.headers_mut().append(SET_COOKIE, pkce::set_cookie(&cookie, secure));
    Ok(answer)
}

pub(super) async fn finish(
    identity: &Identity,
    headers: &HeaderMap,
    query: Option<&str>,
    meta: &RequestMeta,
    taken: &mut bool,
) -> Result<Response, OidcError> {
    let client = client(identity)?;
    let params = params(query);
    let get = |name: &str| params.get(name).map(String::as_str).filter(|v| !v.is_empty());
    let state = get("state");
    if let Some(error) = get("error") {
        if let Some(state) = state {
            if let Ok(pool) = pool(identity) {
                *taken = store::take(pool, &digest(state)).await.ok().flatten().is_some();
            }
        }
        return Err(OidcError::Refused(format!("the provider refused the login: {}", printable(error, 64))));
    }
    let state = state.ok_or_else(|| OidcError::BadRequest("the callback has no state".into()))?;
    let code = get("code").ok_or_else(|| OidcError::BadRequest("the callback has no code".into()))?;
    let pool = pool(identity)?;
    let flow = store::take(pool, &digest(state)).await.map_err(db_error)?.ok_or_else(|| {
        OidcError::BadRequest("unknown, used or expired login state: start again at /api/v1/session/oidc/login".into())
    })?;
    *taken = true;
    let bound =
        pkce::cookie_value(headers).is_some_and(|v| crate::services::auth::constant_time_eq(&digest(v), &flow.binding));
    if !bound {
        return Err(OidcError::BadRequest("this login was not started in this browser (pre-session cookie)".into()));
    }
    let doc = client.discovery().await?;
    let issuer = client.settings.issuer.as_str();
    match get("iss") {
        Some(iss) if iss != issuer => {
            return Err(OidcError::BadRequest(format!("the callback's iss is not {issuer:?} (RFC 9207)")));
        }
        None if doc.authorization_response_iss_parameter_supported => {
            return Err(OidcError::BadRequest(
                "the callback has no iss, which the provider promises (RFC 9207)".into(),
            ));
        }
        _ => {}
    }
    let id_token = exchange(client, &doc, code, &flow.verifier).await?;
    let header = claims::header(&id_token).map_err(OidcError::Refused)?;
    let key = client.keys.key(&client.http, &doc.jwks_uri, header.kid.as_deref(), header.alg).await?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let expected = claims::Expected { issuer, client_id: &client.settings.client_id, nonce: &flow.nonce, now };
    let found = claims::verify(&id_token, header.alg, &key, &expected).map_err(OidcError::Refused)?;
    let subject = found.get("sub").and_then(Value::as_str).unwrap_or_default();
    let name = claims::display_name(&found);
    let values = claims::claim_values(&found, &client.settings.role_claim);
    let Some(role) = claims::role_of(&client.settings, &values) else {
        let claim = &client.settings.role_claim;
        let shown: Vec<&str> = values.iter().take(20).map(|v| printable(v, 64)).collect();
        let mut why = format!(
            "no role for this user: none of its groups {shown:?} (claim {claim:?}) is mapped in admin.oidc.role_map"
        );
        if values.is_empty() && found.get("_claim_names").and_then(|n| n.get(claim.as_str())).is_some() {
            why.push_str(" (the provider sent the claim as a distributed claim, e.g. Entra ID's groups overage, which is not read: map app roles instead)");
        }
        fail(identity, meta, Some(&users::name_from(&name)), 403, &why).await;
        return Err(OidcError::Forbidden(why));
    };
    let key_groups =
        if role == Role::KeyManager { claims::key_groups_of(&client.settings, &values) } else { Vec::new() };
    let user = match users::upsert_oidc(pool, issuer, subject, &name, role, &key_groups).await {
        Ok(user) => user,
        Err(IdentityError::Disabled(user)) => {
            let why = format!("user {user} is disabled");
            fail(identity, meta, Some(&user), 403, &why).await;
            return Err(OidcError::Forbidden(why));
        }
        Err(e) => return Err(db_error(e)),
    };
    let session = sessions::create(pool, user.id, "oidc", Some(&id_token)).await.map_err(db_error)?;
    let mut answer = redirect(&flow.return_to)?;
    answer.headers_mut().append(SET_COOKIE, sessions::set_cookie(identity, headers, &session.cookie));
    let who = Principal {
        actor: Actor::User { id: user.id, name: user.name.clone() },
        role: user.role,
        key_groups: user.key_groups.clone(),
        csrf: None,
    };
    let event = AuditEvent {
        action: "authn_login_success".into(),
        object: Some(format!("users/{}", user.name)),
        status: 302,
        detail: Some("oidc".into()),
        ..AuditEvent::default()
    };
    identity.audit(&who, meta, event).await;
    Ok(answer)
}

/// Audits a refused login (of the provider's user `name`, when known) as the password login
/// does: the actor is `anonymous`, the object the user.
async fn fail(identity: &Identity, meta: &RequestMeta, name: Option<&str>, status: u16, why: &str) {
    let event = AuditEvent {
        action: "authn_login_fail".into(),
        object: name.map(|n| format!("users/{n}")),
        status,
        detail: Some(format!("oidc: {why}")),
        ..AuditEvent::default()
    };
    audit::record(identity, &audit::Who::anonymous(), meta, event).await;
}

/// Trades `code` for the ID token at the token endpoint (client authentication:
/// `client_secret_basic` with a secret, unless the provider only takes `client_secret_post`;
/// without a secret, `client_id` in the form and PKCE alone).
async fn exchange(client: &OidcClient, doc: &Discovery, code: &str, verifier: &str) -> Result<String, OidcError> {
    let settings = &client.settings;
    let secret = match &settings.client_secret_env {
        Some(var) => Some(std::env::var(var).map_err(|_| {
            OidcError::Unavailable(format!(
                "the client secret variable {var} (admin.oidc.client_secret_env) is not set"
            ))
        })?),
        None => None,
    };
    let basic = secret.as_deref().filter(|_| !doc.secret_in_form());
    let body = {
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.append_pair("grant_type", "authorization_code")
            .append_pair("code", code)
            .append_pair("redirect_uri", &settings.redirect_uri)
            .append_pair("code_verifier", verifier);
        match (&secret, basic) {
            (Some(_), Some(_)) => {}
            (Some(secret), None) => {
                form.append_pair("client_id", &settings.client_id).append_pair("client_secret", secret);
            }
            (None, _) => {
                form.append_pair("client_id", &settings.client_id);
            }
        }
        form.finish()
    };
    let mut request = client
        .http
        .post(&doc.token_endpoint)
        .header(reqwest::header::ACCEPT, "application/json")
        .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(secret) = basic {
        let enc = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        request = request.basic_auth(enc(&settings.client_id), Some(enc(secret)));
    }
    let resp = request
        .body(body)
        .send()
        .await
        .map_err(|e| OidcError::Unavailable(format!("token endpoint: {}", cause(&e))))?;
    let status = resp.status();
    let body =
        read_limited(resp, TOKEN_LIMIT).await.map_err(|e| OidcError::Unavailable(format!("token endpoint: {e}")))?;
    let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if !status.is_success() {
        let error = answer.get("error").and_then(Value::as_str).map_or("no error code", |e| printable(e, 64));
        return Err(if status.is_client_error() {
            OidcError::Refused(format!("the provider refused the code: {error} (status {status})"))
        } else {
            OidcError::Unavailable(format!("token endpoint: status {status}"))
        });
    }
    answer.get("id_token").and_then(Value::as_str).map(String::from).ok_or_else(|| {
        OidcError::Refused("the provider's token answer has no id_token (is the openid scope granted?)".into())
    })
}

/// `s` when it is short printable ASCII (what a provider's error code is); else a placeholder,
/// so nothing odd reaches an answer or a log.
fn printable(s: &str, max: usize) -> &str {
    if s.len() <= max && s.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
        s
    } else {
        "(unprintable)"
    }
}
