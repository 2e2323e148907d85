//! Logins in flight, in `fg_admin_oidc_flows` (shared by every replica): keyed by the SHA-256 of
//! `state`, taken once, gone after [`FLOW_TTL_SECS`](super::pkce::FLOW_TTL_SECS).

use deadpool_postgres::Pool;

use super::pkce::FLOW_TTL_SECS;
use crate::services::identity::IdentityError;

/// A login in flight, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flow {
    /// SHA-256 of the pre-session cookie's value.
    pub binding: Vec<u8>,
    /// The nonce sent to the provider.
    pub nonce: String,
    /// The PKCE verifier.
    pub verifier: String,
    /// Where to go after the login.
    pub return_to: String,
}

/// Stores a new login (and removes the expired ones).
///
/// # Errors
/// The database's refusal.
pub async fn put(pool: &Pool, state_digest: &[u8], flow: &Flow) -> Result<(), IdentityError> {
    let client = pool.get().await?;
    let ttl = i64::try_from(FLOW_TTL_SECS).unwrap_or(600);
    client
        .execute("DELETE FROM fg_admin_oidc_flows WHERE created_at < now() - $1::bigint * interval '1 second'", &[&ttl])
        .await?;
    client
        .execute(
            "INSERT INTO fg_admin_oidc_flows (state_digest, binding, nonce, verifier, return_to) \
             VALUES ($1, $2, $3, $4, $5)",
            &[&state_digest, &flow.binding, &flow.nonce, &flow.verifier, &flow.return_to],
        )
        .await?;
    Ok(())
}

/// Takes (deletes and returns) the login of `state_digest`; `None` when there is none, or it
/// is older than the flow's life.
///
/// # Errors
/// The database's refusal.
pub async fn take(pool: &Pool, state_digest: &[u8]) -> Result<Option<Flow>, IdentityError> {
    let client = pool.get().await?;
    let ttl = i64::try_from(FLOW_TTL_SECS).unwrap_or(600);
    let row = client
        .query_opt(
            "DELETE FROM fg_admin_oidc_flows WHERE state_digest = $1 \
             RETURNING binding, nonce, verifier, return_to, \
                       created_at >= now() - $2::bigint * interval '1 second' AS fresh",
            &[&state_digest, &ttl],
        )
        .await?;
    Ok(row.filter(|r| r.get::<_, bool>("fresh")).map(|r| Flow {
        binding: r.get("binding"),
        nonce: r.get("nonce"),
        verifier: r.get("verifier"),
        return_to: r.get("return_to"),
    }))
}
