//! API tokens in `fg_admin_tokens`: for scripts and CI, `Authorization: Bearer fgt_...`.
//!
//! A token is `fgt_` and 32 random bytes base64url without padding, shown once when made;
//! the table keeps the SHA-256 of the whole string (`digest`) and, to tell tokens apart in a
//! listing, its first 8 characters after `fgt_` (`prefix`, 48 of its 256 bits). A token acts
//! with the narrower of its own role and its user's current role, for its user's key groups;
//! it is refused once revoked, past `expires_at`, or while its user is disabled. Every use
//! reads the row (no cache), so a revoke holds at once on every replica.

use deadpool_postgres::Pool;
use serde::Serialize;
use tokio_postgres::Row;

use super::sessions::{self, unavailable};
use super::users::stored_role;
use super::{Actor, AuthError, IdentityError, Principal, Role};

/// What every API token starts with.
pub const PREFIX: &str = "fgt_";
/// Characters after [`PREFIX`] kept and shown as the token's `prefix`.
const SHOWN: usize = 8;

/// A fresh token's plaintext.
pub fn generate() -> String {
    format!("{PREFIX}{}", sessions::random_value())
}

/// SHA-256 of the whole plaintext (`fgt_` included): the `digest` column.
pub fn digest(plaintext: &str) -> Vec<u8> {
    sessions::digest(plaintext)
}

/// The part of a token listings show: `fgt_` and the next 8 characters.
pub fn shown_prefix(plaintext: &str) -> String {
    plaintext.chars().take(PREFIX.len() + SHOWN).collect()
}

/// A token as listed: never its digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct TokenView {
    /// Token id (for `DELETE /api/v1/tokens/{id}`).
    pub id: i64,
    /// Its label.
    pub name: String,
    /// Its user's name.
    pub user: String,
    /// Its role (it acts with the narrower of this and its user's).
    #[schemars(schema_with = "super::routes::role_schema")]
    pub role: Role,
    /// `fgt_` and the next 8 characters of the token, to recognise it.
    pub prefix: String,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms; null: never expires.
    pub expires_at: Option<i64>,
    /// Unix ms, within about 10 s; null: never used.
    pub last_used_at: Option<i64>,
    /// Unix ms; null: live.
    pub revoked_at: Option<i64>,
}

const VIEW: &str = "t.id, t.name, u.name, t.role, t.prefix, (extract(epoch FROM t.created_at) * 1000)::int8, \
     (extract(epoch FROM t.expires_at) * 1000)::int8, (extract(epoch FROM t.last_used_at) * 1000)::int8, \
     (extract(epoch FROM t.revoked_at) * 1000)::int8 \
     FROM fg_admin_tokens t JOIN fg_admin_users u ON u.id = t.user_id";

fn view(r: &Row) -> TokenView {
    TokenView {
        id: r.get(0),
        name: r.get(1),
        user: r.get(2),
        role: stored_role(r.get(3)),
        prefix: r.get(4),
        created_at: r.get(5),
        expires_at: r.get(6),
        last_used_at: r.get(7),
        revoked_at: r.get(8),
    }
}

/// A token just made: the only time its plaintext is seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct NewToken {
    /// Token id.
    pub id: i64,
    /// The token: `Authorization: Bearer <token>`. Not shown again.
    pub token: String,
    /// Its label.
    pub name: String,
    /// Its role.
    #[schemars(schema_with = "super::routes::role_schema")]
    pub role: Role,
    /// Unix ms; null: never expires.
    pub expires_at: Option<i64>,
}

/// Checks a token's label: 1 to 64 characters, none of them a control character.
///
/// # Errors
/// [`IdentityError::Invalid`].
pub fn check_name(name: &str) -> Result<(), IdentityError> {
    let n = name.chars().count();
    if (1..=64).contains(&n) && !name.chars().any(char::is_control) {
        return Ok(());
    }
    Err(IdentityError::Invalid("token name: 1 to 64 characters, no control characters".into()))
}

/// Unix seconds of an RFC 3339 `expires_at`, which must be in the future.
///
/// # Errors
/// [`IdentityError::Invalid`].
pub fn parse_expiry(s: &str, now_secs: i64) -> Result<i64, IdentityError> {
    let at = ferrogate_core::config::syntax::parse_rfc3339(s)
        .map_err(|e| IdentityError::Invalid(format!("expires_at: {e}")))?;
    if at <= now_secs {
        return Err(IdentityError::Invalid(format!("expires_at: {s} is not in the future")));
    }
    Ok(at)
}

/// Makes a token for `user_id` (`expires_at`: Unix seconds).
///
/// # Errors
/// [`IdentityError::Invalid`] for a bad name, database errors.
pub async fn create(
    pool: &Pool,
    user_id: i64,
    name: &str,
    role: Role,
    expires_at: Option<i64>,
) -> Result<NewToken, IdentityError> {
    check_name(name)?;
    let token = generate();
    let client = pool.get().await?;
    let expires = expires_at.map(|s| s as f64);
    let row = client
        .query_one(
            "INSERT INTO fg_admin_tokens (user_id, name, digest, role, expires_at, prefix) \
             VALUES ($1, $2, $3, $4, to_timestamp($5::float8), $6) \
             RETURNING id, (extract(epoch FROM expires_at) * 1000)::int8",
            &[&user_id, &name, &digest(&token), &role.as_str(), &expires, &shown_prefix(&token)],
        )
        .await?;
    Ok(NewToken { id: row.get(0), token, name: name.into(), role, expires_at: row.get(1) })
}

/// Tokens of `user_id`, or of everyone (`None`), newest first.
///
/// # Errors
/// Database errors.
pub async fn list(pool: &Pool, user_id: Option<i64>) -> Result<Vec<TokenView>, IdentityError> {
    let client = pool.get().await?;
    let rows = client
        .query(&format!("SELECT {VIEW} WHERE $1::int8 IS NULL OR t.user_id = $1 ORDER BY t.id DESC"), &[&user_id])
        .await?;
    Ok(rows.iter().map(view).collect())
}

/// Revokes token `id` (of `user_id` only, unless `None`: an owner); returns it before and
/// after. Revoking twice keeps the first time.
///
/// # Errors
/// [`IdentityError::NotFound`] for no such token of that user, database errors.
pub async fn revoke(pool: &Pool, id: i64, user_id: Option<i64>) -> Result<(TokenView, TokenView), IdentityError> {
    let client = pool.get().await?;
    let mine = "t.id = $1 AND ($2::int8 IS NULL OR t.user_id = $2)";
    let before = client.query_opt(&format!("SELECT {VIEW} WHERE {mine}"), &[&id, &user_id]).await?;
    let Some(before) = before.map(|r| view(&r)) else { return Err(IdentityError::NotFound(format!("tokens/{id}"))) };
    client.execute("UPDATE fg_admin_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1", &[&id]).await?;
    let after = view(&client.query_one(&format!("SELECT {VIEW} WHERE t.id = $1"), &[&id]).await?);
    Ok((before, after))
}

/// The principal of an API token's plaintext.
///
/// # Errors
/// [`AuthError::Unauthenticated`] for an unknown, revoked or expired token or a disabled
/// user, [`AuthError::Unavailable`] when the database does not answer.
pub async fn authenticate(pool: &Pool, plaintext: &str) -> Result<Principal, AuthError> {
    let client = pool.get().await.map_err(unavailable)?;
    let row = client
        .query_opt(
            "SELECT t.id, t.role, u.id, u.name, u.role, u.key_groups, u.disabled, t.revoked_at IS NOT NULL, \
                    t.expires_at IS NOT NULL AND t.expires_at <= now(), \
                    t.last_used_at IS NULL OR t.last_used_at <= now() - interval '10 seconds' \
             FROM fg_admin_tokens t JOIN fg_admin_users u ON u.id = t.user_id WHERE t.digest = $1",
            &[&digest(plaintext)],
        )
        .await
        .map_err(unavailable)?;
    let Some(r) = row else { return Err(AuthError::Unauthenticated("missing or wrong bearer token".into())) };
    let (id, user_id, user): (i64, i64, String) = (r.get(0), r.get(2), r.get(3));
    let (disabled, revoked, expired, stale): (bool, bool, bool, bool) = (r.get(6), r.get(7), r.get(8), r.get(9));
    if revoked {
        return Err(AuthError::Unauthenticated(format!("API token {id} is revoked")));
    }
    if expired {
        return Err(AuthError::Unauthenticated(format!("API token {id} has expired")));
    }
    if disabled {
        return Err(AuthError::Unauthenticated(format!("user {user} is disabled")));
    }
    if stale {
        // Throttled to once per 10 s: a busy script should not write a row per request.
        let used = client.execute("UPDATE fg_admin_tokens SET last_used_at = now() WHERE id = $1", &[&id]).await;
        if let Err(e) = used {
            tracing::warn!("API token {id}: last_used_at not recorded: {e}");
        }
    }
    let role = stored_role(r.get(1)).min(stored_role(r.get(4)));
    Ok(Principal { actor: Actor::Token { id, user_id, user }, role, key_groups: r.get(5), csrf: None })
}

#[cfg(test)]
mod tests {
    use sha2::{Digest as _, Sha256};

    use super::*;

    #[test]
    fn tokens_are_fgt_and_43_base64url_characters() {
        let t = generate();
        assert!(t.starts_with("fgt_") && t.len() == 47, "{t}");
        assert!(t[4..].bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{t}");
        assert_ne!(generate(), t);
        assert_eq!(digest(&t), Sha256::digest(t.as_bytes()).to_vec(), "the digest covers the whole string");
        assert_eq!(shown_prefix(&t), t[..12]);
    }

    #[test]
    fn names_and_expiry_are_checked() {
        assert!(check_name("ci deploy (prod)").is_ok());
        assert!(check_name("").is_err() && check_name(&"x".repeat(65)).is_err() && check_name("a\nb").is_err());
        assert_eq!(parse_expiry("2030-01-01T00:00:00Z", 0).unwrap(), 1_893_456_000);
        let past = parse_expiry("2020-01-01T00:00:00Z", 1_700_000_000).unwrap_err().to_string();
        assert!(past.contains("not in the future"), "{past}");
        assert!(parse_expiry("tomorrow", 0).unwrap_err().to_string().contains("RFC 3339"));
    }
}
