//! Who an admin request comes from: the bootstrap token, an API token, or a session cookie
//! (with its CSRF checks), in that order.
//!
//! - `Authorization: Bearer <FERROGATE_ADMIN_TOKEN>`: the bootstrap owner (constant-time
//!   compare). Without a bootstrap token the listener only binds loopback, and a request with
//!   no credential is the `local` owner, as before users existed.
//! - `Authorization: Bearer fgt_...`: an API token, looked up on every request (a revoked
//!   token is refused at once by every replica; nothing is cached).
//! - The session cookie: a browser. Such requests must come from the admin's own origin
//!   (`Sec-Fetch-Site` not `cross-site`, `Origin`, when sent, naming the request's `Host`), and
//!   a change (any method but GET, HEAD, OPTIONS) must carry the session's CSRF token in
//!   `X-CSRF-Token`: a cookie alone is what a forged cross-site request would have.

use axum::http::{HeaderMap, Method};

use super::{bearer, sessions, tokens, Actor, AuthError, Identity, IdentityError, Principal};
use crate::services::auth::constant_time_eq;

/// The header carrying the session's CSRF token.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// See the module documentation.
pub(super) async fn authenticate(id: &Identity, headers: &HeaderMap, method: &Method) -> Result<Principal, AuthError> {
    if let Some(token) = bearer(headers) {
        return by_bearer(id, token).await;
    }
    if id.postgres {
        if let Some(cookie) = sessions::cookie_value(headers) {
            return by_cookie(id, headers, method, cookie).await;
        }
    }
    match id.bootstrap {
        None => Ok(local()),
        Some(_) => Err(wrong_bearer()),
    }
}

/// The owner every local process is when no bootstrap token is configured.
fn local() -> Principal {
    Principal { actor: Actor::Local, ..Principal::bootstrap() }
}

fn wrong_bearer() -> AuthError {
    AuthError::Unauthenticated("missing or wrong bearer token".into())
}

async fn by_bearer(id: &Identity, token: &str) -> Result<Principal, AuthError> {
    if let Some(bootstrap) = id.bootstrap.as_deref() {
        if constant_time_eq(token.as_bytes(), bootstrap.as_bytes()) {
            return Ok(Principal::bootstrap());
        }
    }
    if id.postgres && token.starts_with(tokens::PREFIX) {
        return tokens::authenticate(pool(id)?, token).await;
    }
    match id.bootstrap {
        // No token configured: any other bearer is ignored, as before users existed.
        None => Ok(local()),
        Some(_) => Err(wrong_bearer()),
    }
}

fn pool(id: &Identity) -> Result<&deadpool_postgres::Pool, AuthError> {
    id.pool().map_err(|e| match e {
        IdentityError::Unavailable => AuthError::Unavailable(e.to_string()),
        other => sessions::unavailable(other),
    })
}

async fn by_cookie(id: &Identity, headers: &HeaderMap, method: &Method, cookie: &str) -> Result<Principal, AuthError> {
    same_site(headers)?;
    let session = sessions::lookup(id, pool(id)?, cookie).await?;
    if !is_safe(method) {
        let sent = headers.get(CSRF_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
        if !constant_time_eq(sent, session.csrf.as_bytes()) {
            return Err(AuthError::Csrf(
                "missing or wrong X-CSRF-Token: a change made with the session cookie must send the \
                 session's csrf_token (from the login answer or GET /api/v1/session) in X-CSRF-Token"
                    .into(),
            ));
        }
    }
    let user = session.user;
    Ok(Principal {
        actor: Actor::User { id: user.id, name: user.name },
        role: user.role,
        key_groups: user.key_groups,
        csrf: Some(session.csrf),
    })
}

/// Methods that change nothing (and so need no CSRF token).
pub fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Refuses a browser request from another site: `Sec-Fetch-Site: cross-site`, or an `Origin`
/// whose host and port are not the request's `Host` (nor `X-Forwarded-Host`, which a browser
/// cannot set on a cross-site request without a preflight this API never approves).
///
/// # Errors
/// [`AuthError::Csrf`] saying which.
pub fn same_site(headers: &HeaderMap) -> Result<(), AuthError> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if text("sec-fetch-site").is_some_and(|s| s.trim().eq_ignore_ascii_case("cross-site")) {
        return Err(AuthError::Csrf("cross-site request refused (Sec-Fetch-Site: cross-site)".into()));
    }
    let Some(origin) = headers.get(axum::http::header::ORIGIN) else { return Ok(()) };
    let authority = origin.to_str().ok().and_then(|o| o.split_once("://")).map(|(_, rest)| rest);
    let hosts = [text("host"), text("x-forwarded-host").and_then(|h| h.split(',').next())];
    let matches = authority.is_some_and(|a| hosts.iter().flatten().any(|h| h.trim().eq_ignore_ascii_case(a)));
    if matches {
        Ok(())
    } else {
        Err(AuthError::Csrf("cross-origin request refused: Origin is not this admin API's host".into()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, OnceLock};

    use super::*;
    use crate::services::identity::Role;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn other_sites_are_refused() {
        assert!(same_site(&headers(&[])).is_ok());
        assert!(same_site(&headers(&[("sec-fetch-site", "same-origin")])).is_ok());
        let cross = same_site(&headers(&[("sec-fetch-site", "cross-site")])).unwrap_err();
        assert!(matches!(cross, AuthError::Csrf(_)) && cross.to_string().contains("cross-site"), "{cross}");
        assert!(same_site(&headers(&[("host", "gw:9001"), ("origin", "https://gw:9001")])).is_ok());
        assert!(same_site(&headers(&[("host", "gw:9001"), ("origin", "https://evil:9001")])).is_err());
        assert!(same_site(&headers(&[("host", "gw:9001"), ("origin", "null")])).is_err());
        let proxied = [
            ("host", "10.0.0.5:9001"),
            ("x-forwarded-host", "admin.example.org"),
            ("origin", "https://admin.example.org"),
        ];
        assert!(same_site(&headers(&proxied)).is_ok());
    }

    #[test]
    fn only_changes_need_the_csrf_token() {
        assert!(is_safe(&Method::GET) && is_safe(&Method::HEAD) && is_safe(&Method::OPTIONS));
        assert!(!is_safe(&Method::POST) && !is_safe(&Method::PUT) && !is_safe(&Method::DELETE));
        assert!(!is_safe(&Method::PATCH));
    }

    #[tokio::test]
    async fn the_bootstrap_token_and_the_local_owner() {
        let identity = |bootstrap: Option<&str>| {
            Identity::new(Default::default(), bootstrap.map(String::from), Arc::new(OnceLock::new()), false)
        };
        let with = identity(Some("boot-secret"));
        let ok = with.authenticate(&headers(&[("authorization", "Bearer boot-secret")]), &Method::POST).await;
        assert_eq!(ok.unwrap(), Principal::bootstrap());
        for h in [
            headers(&[]),
            headers(&[("authorization", "Bearer boot-secre")]),
            headers(&[("authorization", "Bearer fgt_x")]),
            headers(&[("cookie", "ferrogate_session=x")]),
        ] {
            let e = with.authenticate(&h, &Method::GET).await.unwrap_err();
            assert_eq!(e.to_string(), "missing or wrong bearer token");
        }
        let without = identity(None);
        let p = without.authenticate(&headers(&[]), &Method::DELETE).await.unwrap();
        assert_eq!((p.actor, p.role), (Actor::Local, Role::Owner));
    }
}
