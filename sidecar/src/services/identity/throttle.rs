//! Failed-login throttling, shared by every replica through `fg_admin_login_failures`.
//!
//! Each failed login adds a row for `user:<name>` and one for `addr:<source ip>`. A login is
//! refused (429, `Retry-After`) while the name has `admin.login.max_failures_per_user`
//! failures within `window_secs`, or the address `max_failures_per_address`; the check comes
//! before the password is looked at, and is the same for names that exist and names that do
//! not. A refused login adds no row, so a lock ends `window_secs` after the failures that
//! caused it, however hard someone keeps trying. A successful login clears the name's rows.
//! Rows older than the window are deleted now and then.

use std::sync::atomic::{AtomicU64, Ordering};

use deadpool_postgres::Pool;

use super::{AdminSettings, IdentityError};

/// Names longer than this are cut in the subject (no user name is longer than 64).
const MAX_SUBJECT_NAME: usize = 128;

fn user_subject(name: &str) -> String {
    let cut: String = name.chars().take(MAX_SUBJECT_NAME).collect();
    format!("user:{cut}")
}

fn addr_subject(addr: &str) -> String {
    format!("addr:{addr}")
}

/// Seconds until a login as `name` from `addr` may be tried again, if it may not now.
///
/// # Errors
/// Database errors.
pub async fn locked(pool: &Pool, s: &AdminSettings, name: &str, addr: &str) -> Result<Option<u64>, IdentityError> {
    let user = retry_after(pool, &user_subject(name), s.max_failures_per_user, s.window_secs).await?;
    let address = retry_after(pool, &addr_subject(addr), s.max_failures_per_address, s.window_secs).await?;
    Ok(user.max(address))
}

/// When `subject` has `max` failures in the window: seconds until the oldest of the last
/// `max` leaves it (then fewer than `max` remain).
async fn retry_after(pool: &Pool, subject: &str, max: u32, window_secs: u64) -> Result<Option<u64>, IdentityError> {
    let client = pool.get().await?;
    let skip = i64::from(max.max(1) - 1);
    let window = window_secs as f64;
    let row = client
        .query_opt(
            "SELECT ceil(extract(epoch FROM at + make_interval(secs => $3) - now()))::int8 \
             FROM fg_admin_login_failures WHERE subject = $1 AND at > now() - make_interval(secs => $3) \
             ORDER BY at DESC OFFSET $2 LIMIT 1",
            &[&subject, &skip, &window],
        )
        .await?;
    Ok(row.map(|r| u64::try_from(r.get::<_, i64>(0)).unwrap_or(0).max(1)))
}

/// A lock that a failure just caused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lock {
    /// The user name reached its limit.
    User,
    /// The source address reached its limit.
    Address,
}

/// Records a failed login as `name` from `addr`; returns the lock it starts, if any.
///
/// # Errors
/// Database errors.
pub async fn record_failure(
    pool: &Pool,
    s: &AdminSettings,
    name: &str,
    addr: &str,
) -> Result<Option<Lock>, IdentityError> {
    let (user, address) = (user_subject(name), addr_subject(addr));
    let client = pool.get().await?;
    let window = s.window_secs as f64;
    let counts = client
        .query_one(
            "WITH added AS (INSERT INTO fg_admin_login_failures (subject) VALUES ($1), ($2)) \
             SELECT count(*) FILTER (WHERE subject = $1), count(*) FILTER (WHERE subject = $2) \
             FROM fg_admin_login_failures WHERE subject IN ($1, $2) AND at > now() - make_interval(secs => $3)",
            &[&user, &address, &window],
        )
        .await?;
    // The CTE's rows are not visible to the SELECT of the same statement: add them.
    let (by_user, by_addr): (i64, i64) = (counts.get::<_, i64>(0) + 1, counts.get::<_, i64>(1) + 1);
    prune(pool, s.window_secs).await;
    Ok(if by_user == i64::from(s.max_failures_per_user) {
        Some(Lock::User)
    } else if by_addr == i64::from(s.max_failures_per_address) {
        Some(Lock::Address)
    } else {
        None
    })
}

/// Forgets the failures of `name` (after a successful login).
///
/// # Errors
/// Database errors.
pub async fn clear(pool: &Pool, name: &str) -> Result<(), IdentityError> {
    let client = pool.get().await?;
    client.execute("DELETE FROM fg_admin_login_failures WHERE subject = $1", &[&user_subject(name)]).await?;
    Ok(())
}

/// Deletes failures older than the window, at most once a minute per process.
async fn prune(pool: &Pool, window_secs: u64) {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = crate::services::now_ms();
    let last = LAST.load(Ordering::Relaxed);
    if now.saturating_sub(last) < 60_000
        || LAST.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_err()
    {
        return;
    }
    let pruned = async {
        let client = pool.get().await?;
        let window = window_secs as f64;
        client
            .execute("DELETE FROM fg_admin_login_failures WHERE at <= now() - make_interval(secs => $1)", &[&window])
            .await?;
        Ok::<(), IdentityError>(())
    };
    if let Err(e) = pruned.await {
        tracing::warn!("old failed logins not pruned: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_name_what_they_count() {
        assert_eq!(user_subject("alice"), "user:alice");
        assert_eq!(addr_subject("10.0.0.1"), "addr:10.0.0.1");
        assert_eq!(user_subject(&"x".repeat(500)).len(), 5 + MAX_SUBJECT_NAME);
    }
}
