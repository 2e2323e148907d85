//! Admin users in `fg_admin_users`: create, read, change, delete, passwords, and (in `sso`)
//! the users an OpenID provider's logins make ([`upsert_oidc`]).
//!
//! A user name is 1 to 64 characters of `a-z 0-9 . _ @ -`, starting with a letter or digit
//! (`^[a-z0-9][a-z0-9._@-]{0,63}$`): lower case so `Alice` and `alice` cannot be two people,
//! and `@ .` so an e-mail address can be a name. The last enabled owner cannot be demoted,
//! disabled or deleted (the check and the change are serialized across replicas by an
//! advisory lock). Changing a user's role, disabling it or setting its password ends its
//! sessions; its API tokens stay, but their role is capped by the user's at each use and a
//! disabled user's tokens are refused.

use deadpool_postgres::{GenericClient, Pool};
use serde::Serialize;
use tokio_postgres::Row;

use super::{sessions, IdentityError, Role};

mod sso;

pub use sso::{name_from, upsert_oidc};

/// Serializes changes that could remove the last owner (any replica).
const OWNERS_LOCK: i64 = 4_242_424_243;

/// A user as the OIDC login needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRow {
    /// Row id.
    pub id: i64,
    /// Name.
    pub name: String,
    /// Role.
    pub role: Role,
    /// Key groups (a key-manager's; empty: all).
    pub key_groups: Vec<String>,
    /// Whether logins and tokens are refused.
    pub disabled: bool,
}

/// A user as the admin API shows it: never the password hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct UserView {
    /// Row id.
    pub id: i64,
    /// Name.
    pub name: String,
    /// Role.
    #[schemars(schema_with = "super::routes::role_schema")]
    pub role: Role,
    /// Key groups a key-manager may manage (empty: all).
    pub key_groups: Vec<String>,
    /// Whether logins and tokens are refused.
    pub disabled: bool,
    /// Whether the user has a password (else: OIDC logins only).
    pub password_set: bool,
    /// Whether the user was made by (and logs in with) the OpenID provider.
    pub oidc: bool,
    /// Unix ms.
    pub created_at: i64,
    /// Unix ms.
    pub updated_at: i64,
}

/// The columns [`view`] reads, in order.
const VIEW: &str = "id, name, role, key_groups, disabled, password_hash IS NOT NULL, oidc_subject IS NOT NULL, \
     (extract(epoch FROM created_at) * 1000)::int8, (extract(epoch FROM updated_at) * 1000)::int8";

/// A role as stored; an unreadable one (written by hand?) reads as the narrowest.
pub(crate) fn stored_role(s: &str) -> Role {
    Role::parse(s).unwrap_or(Role::Viewer)
}

fn view(r: &Row) -> UserView {
    UserView {
        id: r.get(0),
        name: r.get(1),
        role: stored_role(r.get(2)),
        key_groups: r.get(3),
        disabled: r.get(4),
        password_set: r.get(5),
        oidc: r.get(6),
        created_at: r.get(7),
        updated_at: r.get(8),
    }
}

/// Checks a user name against `^[a-z0-9][a-z0-9._@-]{0,63}$`.
///
/// # Errors
/// [`IdentityError::Invalid`] with the rule.
pub fn check_name(name: &str) -> Result<(), IdentityError> {
    let mut bytes = name.bytes();
    let first = bytes.next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let rest = bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._@-".contains(&b));
    if first && rest && name.len() <= 64 {
        return Ok(());
    }
    Err(IdentityError::Invalid(format!(
        "user name {name:?}: 1 to 64 of a-z, 0-9, '.', '_', '@', '-', starting with a letter or digit"
    )))
}

/// Checks key group names (slugs, as groups are named in the configuration).
///
/// # Errors
/// [`IdentityError::Invalid`] naming the first bad one.
pub fn check_groups(groups: &[String]) -> Result<(), IdentityError> {
    for g in groups {
        ferrogate_core::config::syntax::check_slug(g)
            .map_err(|e| IdentityError::Invalid(format!("key_groups: {e}")))?;
    }
    Ok(())
}

/// A user to create.
#[derive(Debug, Clone)]
pub struct NewUser {
    /// Name ([`check_name`]).
    pub name: String,
    /// Role.
    pub role: Role,
    /// Key groups.
    pub key_groups: Vec<String>,
    /// PHC string, when the user logs in with a password.
    pub password_hash: Option<String>,
}

/// Creates a user.
///
/// # Errors
/// [`IdentityError::Invalid`] for a bad name or group, [`IdentityError::Conflict`] when the
/// name is taken, database errors.
pub async fn create(pool: &Pool, new: &NewUser) -> Result<UserView, IdentityError> {
    check_name(&new.name)?;
    check_groups(&new.key_groups)?;
    let client = pool.get().await?;
    let sql = format!(
        "INSERT INTO fg_admin_users (name, role, key_groups, password_hash) VALUES ($1, $2, $3, $4) RETURNING {VIEW}"
    );
    let inserted = client.query_one(&sql, &[&new.name, &new.role.as_str(), &new.key_groups, &new.password_hash]).await;
    match inserted {
        Ok(row) => Ok(view(&row)),
        Err(e) if is_unique_violation(&e) => Err(IdentityError::Conflict(format!("user {} exists", new.name))),
        Err(e) => Err(e.into()),
    }
}

/// Whether `e` is a unique-constraint violation.
pub(crate) fn is_unique_violation(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION)
}

/// One user by name.
///
/// # Errors
/// [`IdentityError::NotFound`], database errors.
pub async fn get(pool: &Pool, name: &str) -> Result<UserView, IdentityError> {
    let client = pool.get().await?;
    find(&client, name, false).await
}

async fn find(c: &impl GenericClient, name: &str, lock: bool) -> Result<UserView, IdentityError> {
    if check_name(name).is_err() {
        // No user can have this name (and a NUL in it would fail the query).
        return Err(IdentityError::NotFound(format!("users/{name}")));
    }
    let sql = format!("SELECT {VIEW} FROM fg_admin_users WHERE name = $1{}", if lock { " FOR UPDATE" } else { "" });
    let row = c.query_opt(&sql, &[&name]).await?;
    row.map(|r| view(&r)).ok_or_else(|| IdentityError::NotFound(format!("users/{name}")))
}

/// Every user, by name.
///
/// # Errors
/// Database errors.
pub async fn list(pool: &Pool) -> Result<Vec<UserView>, IdentityError> {
    let client = pool.get().await?;
    let rows = client.query(&format!("SELECT {VIEW} FROM fg_admin_users ORDER BY name"), &[]).await?;
    Ok(rows.iter().map(view).collect())
}

/// What [`update`] changes; `None` fields stay.
#[derive(Debug, Clone, Default)]
pub struct UserUpdate {
    /// New role.
    pub role: Option<Role>,
    /// New key groups.
    pub key_groups: Option<Vec<String>>,
    /// Disable or enable.
    pub disabled: Option<bool>,
}

/// Changes a user; returns it before and after. A new role or a disable ends its sessions.
///
/// # Errors
/// [`IdentityError::NotFound`], [`IdentityError::Conflict`] for the last owner,
/// [`IdentityError::Invalid`] for a bad group, database errors.
pub async fn update(pool: &Pool, name: &str, change: &UserUpdate) -> Result<(UserView, UserView), IdentityError> {
    if let Some(groups) = &change.key_groups {
        check_groups(groups)?;
    }
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&OWNERS_LOCK]).await?;
    let before = find(&tx, name, true).await?;
    let role = change.role.unwrap_or(before.role);
    let disabled = change.disabled.unwrap_or(before.disabled);
    guard_last_owner(&tx, &before, role == Role::Owner && !disabled).await?;
    let groups = change.key_groups.clone().unwrap_or_else(|| before.key_groups.clone());
    let sql = format!(
        "UPDATE fg_admin_users SET role = $2, key_groups = $3, disabled = $4, updated_at = now() \
         WHERE id = $1 RETURNING {VIEW}"
    );
    let after = view(&tx.query_one(&sql, &[&before.id, &role.as_str(), &groups, &disabled]).await?);
    if after.role != before.role || (after.disabled && !before.disabled) {
        sessions::end_all(&tx, before.id, None).await?;
    }
    tx.commit().await?;
    Ok((before, after))
}

/// Refuses a change that leaves no enabled owner: `target` is one now and would not be
/// (`stays` false) while no other enabled owner exists.
async fn guard_last_owner(c: &impl GenericClient, target: &UserView, stays: bool) -> Result<(), IdentityError> {
    if target.role != Role::Owner || target.disabled || stays {
        return Ok(());
    }
    let others: i64 = c
        .query_one(
            "SELECT count(*) FROM fg_admin_users WHERE role = 'owner' AND NOT disabled AND id <> $1",
            &[&target.id],
        )
        .await?
        .get(0);
    if others == 0 {
        return Err(IdentityError::Conflict(format!("{} is the last owner: make another owner first", target.name)));
    }
    Ok(())
}

/// Deletes a user (its sessions and tokens with it); returns what it was.
///
/// # Errors
/// [`IdentityError::NotFound`], [`IdentityError::Conflict`] for the last owner, database errors.
pub async fn delete(pool: &Pool, name: &str) -> Result<UserView, IdentityError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&OWNERS_LOCK]).await?;
    let before = find(&tx, name, true).await?;
    guard_last_owner(&tx, &before, false).await?;
    tx.execute("DELETE FROM fg_admin_users WHERE id = $1", &[&before.id]).await?;
    tx.commit().await?;
    Ok(before)
}

/// Stores a new password hash for `user_id` and ends its sessions except `keep` (the cookie
/// digest of the session that changed its own password). Returns the sessions ended.
///
/// # Errors
/// [`IdentityError::NotFound`], database errors.
pub async fn set_password(pool: &Pool, user_id: i64, phc: &str, keep: Option<&[u8]>) -> Result<u64, IdentityError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let n = tx
        .execute("UPDATE fg_admin_users SET password_hash = $2, updated_at = now() WHERE id = $1", &[&user_id, &phc])
        .await?;
    if n == 0 {
        return Err(IdentityError::NotFound(format!("user {user_id}")));
    }
    let ended = sessions::end_all(&tx, user_id, keep).await?;
    tx.commit().await?;
    Ok(ended)
}

/// What a password login needs of a user.
#[derive(Debug, Clone)]
pub struct LoginRow {
    /// The user.
    pub user: UserRow,
    /// Its PHC string, if it has a password.
    pub password_hash: Option<String>,
}

/// The user named `name`, for a login (`None`: no such user).
///
/// # Errors
/// Database errors.
pub async fn for_login(pool: &Pool, name: &str) -> Result<Option<LoginRow>, IdentityError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT id, name, role, key_groups, disabled, password_hash FROM fg_admin_users WHERE name = $1",
            &[&name],
        )
        .await?;
    Ok(row.map(|r| LoginRow {
        user: UserRow {
            id: r.get(0),
            name: r.get(1),
            role: stored_role(r.get(2)),
            key_groups: r.get(3),
            disabled: r.get(4),
        },
        password_hash: r.get(5),
    }))
}

/// Stores a rehashed password (new parameters) without ending sessions: the password is the
/// same.
///
/// # Errors
/// Database errors.
pub async fn store_rehash(pool: &Pool, user_id: i64, phc: &str) -> Result<(), IdentityError> {
    let client = pool.get().await?;
    client.execute("UPDATE fg_admin_users SET password_hash = $2 WHERE id = $1", &[&user_id, &phc]).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rule() {
        for ok in ["alice", "a", "bob.smith@example.org", "ops_1", "0day", &"a".repeat(64)] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Alice", "-x", ".x", "a b", "a/b", &"a".repeat(65), "é"] {
            let e = check_name(bad).unwrap_err().to_string();
            assert!(e.contains("a-z, 0-9"), "{bad}: {e}");
        }
        assert!(check_groups(&["team-a".into()]).is_ok());
        assert!(check_groups(&["Team A".into()]).unwrap_err().to_string().contains("key_groups"));
    }
}
