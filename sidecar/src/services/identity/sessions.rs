//! Browser sessions in `fg_admin_sessions`, and their cookie.
//!
//! The cookie's value is 32 bytes from the operating system's CSPRNG (through `rand`'s
//! thread generator), base64url; only its SHA-256 is stored, so a copy of the table logs
//! nobody in. A session ends when it has not been used for `admin.sessions.idle_secs`, when
//! `absolute_secs` have passed since login, at logout, and when its user is disabled, changes
//! role or password. Each session has its own CSRF token, which cookie-authenticated changes
//! must send back in `X-CSRF-Token`.
//!
//! The cookie is `HttpOnly; SameSite=Strict; Path=/` with `Max-Age` the absolute lifetime;
//! over HTTPS (`secure_cookie: always`, or `auto` and `X-Forwarded-Proto: https`) it is
//! `__Host-ferrogate_session` with `Secure` (the prefix makes browsers refuse it from plain
//! HTTP or with a `Domain`), else `ferrogate_session`.

use axum::http::header::COOKIE;
use axum::http::{HeaderMap, HeaderValue};
use base64::Engine as _;
use deadpool_postgres::{GenericClient, Pool};
use ferrogate_core::config::admin::SecureCookie;
use sha2::{Digest, Sha256};

use super::users::{stored_role, UserRow};
use super::{AuthError, Identity, IdentityError};

/// The cookie's name over HTTPS.
pub const SECURE_NAME: &str = "__Host-ferrogate_session";
/// The cookie's name over plain HTTP.
pub const PLAIN_NAME: &str = "ferrogate_session";

/// A session just made: the cookie value to set (never stored) and its CSRF token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSession {
    /// The cookie's value.
    pub cookie: String,
    /// The session's CSRF token.
    pub csrf: String,
}

/// 32 random bytes, base64url without padding (43 characters).
pub fn random_value() -> String {
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// SHA-256 of `value`: how sessions (and API tokens) are looked up.
pub fn digest(value: &str) -> Vec<u8> {
    Sha256::digest(value.as_bytes()).to_vec()
}

/// Starts a session of `user_id`, logged in `via` `password` or `oidc` (`id_token`: the
/// provider's ID token, kept for logout's `id_token_hint`).
///
/// # Errors
/// Database errors.
pub async fn create(pool: &Pool, user_id: i64, via: &str, id_token: Option<&str>) -> Result<NewSession, IdentityError> {
    let new = NewSession { cookie: random_value(), csrf: random_value() };
    let client = pool.get().await?;
    client
        .execute(
            "INSERT INTO fg_admin_sessions (id_digest, user_id, csrf, via, id_token) VALUES ($1, $2, $3, $4, $5)",
            &[&digest(&new.cookie), &user_id, &new.csrf, &via, &id_token],
        )
        .await?;
    Ok(new)
}

/// Whether cookies set in answer to a request with `headers` carry `Secure`.
pub fn secure(identity: &Identity, headers: &HeaderMap) -> bool {
    match identity.settings.secure_cookie {
        SecureCookie::Always => true,
        SecureCookie::Never => false,
        SecureCookie::Auto => headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .is_some_and(|proto| proto.trim().eq_ignore_ascii_case("https")),
    }
}

/// The `Set-Cookie` value carrying session `value`.
pub fn set_cookie(identity: &Identity, request_headers: &HeaderMap, value: &str) -> HeaderValue {
    cookie(identity, request_headers, value, identity.settings.absolute_secs)
}

/// The `Set-Cookie` value that removes the session cookie.
pub fn clear_cookie(identity: &Identity, request_headers: &HeaderMap) -> HeaderValue {
    cookie(identity, request_headers, "", 0)
}

fn cookie(identity: &Identity, headers: &HeaderMap, value: &str, max_age: u64) -> HeaderValue {
    let (name, secure) = if secure(identity, headers) { (SECURE_NAME, "; Secure") } else { (PLAIN_NAME, "") };
    let text = format!("{name}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}");
    // The value is base64url and the rest fixed text: always a valid header value.
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("ferrogate_session=; Max-Age=0"))
}

/// The session cookie's value in a request, if any (either name; the `__Host-` one first).
pub fn cookie_value(headers: &HeaderMap) -> Option<&str> {
    request_cookie(headers, SECURE_NAME).or_else(|| request_cookie(headers, PLAIN_NAME))
}

/// The non-empty value of the cookie `name` in a request's `Cookie` headers, if any (the
/// session cookie and the OIDC pre-session cookie are read with it).
pub fn request_cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|p| p.trim().split_once('='))
        .find(|(n, v)| *n == name && !v.is_empty())
        .map(|(_, v)| v)
}

/// A live session.
#[derive(Debug, Clone)]
pub struct Session {
    /// Its user.
    pub user: UserRow,
    /// Its CSRF token.
    pub csrf: String,
    /// How it was made: `password` or `oidc`.
    pub via: String,
}

/// The session a cookie value opens: ends it (and refuses) when idle or too old, refuses a
/// disabled user's, and notes its use (`last_seen`, at most every second or quarter of the
/// idle time, whichever is shorter).
///
/// # Errors
/// [`AuthError::Unauthenticated`] for an unknown, expired or disabled session,
/// [`AuthError::Unavailable`] when the database does not answer.
pub async fn lookup(identity: &Identity, pool: &Pool, cookie: &str) -> Result<Session, AuthError> {
    let id = digest(cookie);
    let idle = identity.settings.idle_secs as f64;
    let absolute = identity.settings.absolute_secs as f64;
    let touch = (idle / 4.0).min(1.0);
    let client = pool.get().await.map_err(unavailable)?;
    let row = client
        .query_opt(
            "SELECT u.id, u.name, u.role, u.key_groups, u.disabled, s.csrf, s.via, \
                    s.created_at <= now() - make_interval(secs => $2), \
                    s.last_seen <= now() - make_interval(secs => $3), \
                    s.last_seen <= now() - make_interval(secs => $4) \
             FROM fg_admin_sessions s JOIN fg_admin_users u ON u.id = s.user_id WHERE s.id_digest = $1",
            &[&id, &absolute, &idle, &touch],
        )
        .await
        .map_err(unavailable)?;
    let Some(r) = row else { return Err(AuthError::Unauthenticated("session unknown or ended: log in again".into())) };
    let user =
        UserRow { id: r.get(0), name: r.get(1), role: stored_role(r.get(2)), key_groups: r.get(3), disabled: r.get(4) };
    let (too_old, idle_out, stale): (bool, bool, bool) = (r.get(7), r.get(8), r.get(9));
    if too_old || idle_out {
        client.execute("DELETE FROM fg_admin_sessions WHERE id_digest = $1", &[&id]).await.map_err(unavailable)?;
        return Err(AuthError::Unauthenticated("session expired: log in again".into()));
    }
    if user.disabled {
        return Err(AuthError::Unauthenticated(format!("user {} is disabled", user.name)));
    }
    if stale {
        client
            .execute("UPDATE fg_admin_sessions SET last_seen = now() WHERE id_digest = $1", &[&id])
            .await
            .map_err(unavailable)?;
    }
    Ok(Session { user, csrf: r.get(5), via: r.get(6) })
}

/// A database failure while authenticating: logged, answered 503 without details.
pub(crate) fn unavailable(e: impl std::fmt::Display) -> AuthError {
    tracing::error!("admin identity store: {e}");
    AuthError::Unavailable("the admin identity store cannot be reached".into())
}

/// Ends the session of a cookie value; returns how it was made and its ID token, if it existed.
///
/// # Errors
/// Database errors.
pub async fn end(pool: &Pool, cookie: &str) -> Result<Option<(String, Option<String>)>, IdentityError> {
    let client = pool.get().await?;
    let row = client
        .query_opt("DELETE FROM fg_admin_sessions WHERE id_digest = $1 RETURNING via, id_token", &[&digest(cookie)])
        .await?;
    Ok(row.map(|r| (r.get(0), r.get(1))))
}

/// Ends every session of `user_id` but the one whose digest is `keep`; returns how many.
///
/// # Errors
/// Database errors.
pub async fn end_all(c: &impl GenericClient, user_id: i64, keep: Option<&[u8]>) -> Result<u64, IdentityError> {
    let keep = keep.unwrap_or_default();
    Ok(c.execute("DELETE FROM fg_admin_sessions WHERE user_id = $1 AND id_digest <> $2", &[&user_id, &keep]).await?)
}

/// Deletes sessions past their absolute lifetime (those nobody came back to).
///
/// # Errors
/// Database errors.
pub async fn prune(pool: &Pool, absolute_secs: u64) -> Result<u64, IdentityError> {
    let client = pool.get().await?;
    let secs = absolute_secs as f64;
    let sql = "DELETE FROM fg_admin_sessions WHERE created_at <= now() - make_interval(secs => $1)";
    Ok(client.execute(sql, &[&secs]).await?)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, OnceLock};

    use super::*;
    use crate::services::identity::AdminSettings;

    fn identity(secure_cookie: SecureCookie) -> Identity {
        let settings = AdminSettings { secure_cookie, absolute_secs: 3600, ..AdminSettings::default() };
        Identity::new(settings, None, Arc::new(OnceLock::new()), true)
    }

    #[test]
    fn cookies_are_host_only_http_only_strict_and_secure_over_https() {
        let mut https = HeaderMap::new();
        https.insert("x-forwarded-proto", "https".parse().unwrap());
        let auto = identity(SecureCookie::Auto);
        let set = set_cookie(&auto, &https, "abc");
        assert_eq!(set, "__Host-ferrogate_session=abc; Path=/; Max-Age=3600; HttpOnly; SameSite=Strict; Secure");
        let plain = set_cookie(&auto, &HeaderMap::new(), "abc");
        assert_eq!(plain, "ferrogate_session=abc; Path=/; Max-Age=3600; HttpOnly; SameSite=Strict");
        let always = set_cookie(&identity(SecureCookie::Always), &HeaderMap::new(), "abc");
        assert!(always.to_str().unwrap().starts_with("__Host-") && always.to_str().unwrap().ends_with("; Secure"));
        assert!(!set_cookie(&identity(SecureCookie::Never), &https, "abc").to_str().unwrap().contains("Secure"));
        let cleared = clear_cookie(&auto, &https);
        assert!(cleared.to_str().unwrap().starts_with("__Host-ferrogate_session=; Path=/; Max-Age=0;"));
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        assert_eq!(cookie_value(&h), None);
        h.append(COOKIE, "theme=dark; ferrogate_session=plain".parse().unwrap());
        assert_eq!(cookie_value(&h), Some("plain"));
        h.append(COOKIE, "__Host-ferrogate_session=secure".parse().unwrap());
        assert_eq!(cookie_value(&h), Some("secure"));
        let mut empty = HeaderMap::new();
        empty.insert(COOKIE, "ferrogate_session=".parse().unwrap());
        assert_eq!(cookie_value(&empty), None);
    }

    #[test]
    fn values_are_random_base64url() {
        let v = random_value();
        assert_eq!(v.len(), 43);
        assert!(v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{v}");
        assert_ne!(random_value(), v);
        assert_eq!(digest("x").len(), 32);
    }
}
