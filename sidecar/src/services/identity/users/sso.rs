//! The users an OpenID provider's logins make: found by issuer and subject, given the role and
//! key groups the provider's claims map to at every login, created with a free name made from
//! the provider's preferred name.

use deadpool_postgres::{GenericClient, Pool};
use tokio_postgres::Row;

use super::{sessions, stored_role, IdentityError, Role, UserRow};

/// The user of an OpenID identity, locked for the change.
const FIND: &str =
    "SELECT id, name, role, disabled FROM fg_admin_users WHERE oidc_issuer = $1 AND oidc_subject = $2 FOR UPDATE";

/// The user an OpenID provider's login is: found by `(issuer, subject)` and given the role
/// and key groups the provider's claims map to now (a changed role ends its other sessions),
/// or created with a free name made from `preferred_name` (see [`name_from`]).
///
/// # Errors
/// [`IdentityError::Disabled`] for a disabled user, database errors.
pub async fn upsert_oidc(
    pool: &Pool,
    issuer: &str,
    subject: &str,
    preferred_name: &str,
    role: Role,
    key_groups: &[String],
) -> Result<UserRow, IdentityError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let found = tx.query_opt(FIND, &[&issuer, &subject]).await?;
    let row = match found {
        Some(r) => remap(&tx, &r, role, key_groups).await?,
        None => insert(&tx, issuer, subject, preferred_name, role, key_groups).await?,
    };
    tx.commit().await?;
    Ok(row)
}

/// A known user: refused when disabled, else given the role and groups of this login.
async fn remap(tx: &impl GenericClient, r: &Row, role: Role, key_groups: &[String]) -> Result<UserRow, IdentityError> {
    let (id, name, disabled): (i64, String, bool) = (r.get(0), r.get(1), r.get(3));
    if disabled {
        return Err(IdentityError::Disabled(name));
    }
    tx.execute(
        "UPDATE fg_admin_users SET role = $2, key_groups = $3, updated_at = now() WHERE id = $1",
        &[&id, &role.as_str(), &key_groups],
    )
    .await?;
    if stored_role(r.get(2)) != role {
        sessions::end_all(tx, id, None).await?;
    }
    Ok(UserRow { id, name, role, key_groups: key_groups.to_vec(), disabled })
}

/// A new user, under the first free name of `base`, `base-2` ... `base-20`, then `base-<hex>`.
async fn insert(
    tx: &impl GenericClient,
    issuer: &str,
    subject: &str,
    preferred_name: &str,
    role: Role,
    key_groups: &[String],
) -> Result<UserRow, IdentityError> {
    let base = name_from(preferred_name);
    let random = format!("{base}-{}", hex::encode(rand::random::<[u8; 3]>()));
    let names = std::iter::once(base.clone()).chain((2..=20).map(|n| format!("{base}-{n}"))).chain([random]);
    for name in names {
        let inserted = tx
            .query_opt(
                "INSERT INTO fg_admin_users (name, role, key_groups, oidc_issuer, oidc_subject) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING id",
                &[&name, &role.as_str(), &key_groups, &issuer, &subject],
            )
            .await?;
        if let Some(r) = inserted {
            return Ok(UserRow { id: r.get(0), name, role, key_groups: key_groups.to_vec(), disabled: false });
        }
        // The clash may be this very identity, made by a login on another replica meanwhile.
        if let Some(r) = tx.query_opt(FIND, &[&issuer, &subject]).await? {
            return remap(tx, &r, role, key_groups).await;
        }
    }
    Err(IdentityError::Conflict(format!("no free user name for {base:?}")))
}

/// A user name made from an OpenID `preferred_username` (or e-mail): lower case, other
/// characters as `-`, starting with a letter or digit, at most 56 characters (room for a
/// suffix on a clash); `user` when nothing is left.
pub fn name_from(preferred: &str) -> String {
    let mapped: String = preferred
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() || "._@-".contains(c) { c } else { '-' })
        .collect();
    let mut name = mapped.trim_start_matches(|c: char| !c.is_ascii_alphanumeric()).to_string();
    name.truncate(56);
    if name.is_empty() {
        name = "user".into();
    }
    name
}

#[cfg(test)]
mod tests {
    use super::super::check_name;
    use super::*;

    #[test]
    fn oidc_names_are_made_valid() {
        assert_eq!(name_from("Alice.Smith@Example.org"), "alice.smith@example.org");
        assert_eq!(name_from("  Zoë  Ünal"), "zo----nal");
        assert_eq!(name_from("---"), "user");
        assert_eq!(name_from(&"x".repeat(100)).len(), 56);
        for n in ["Alice", "-_-bob", "日本", "a b c"] {
            assert!(check_name(&name_from(n)).is_ok(), "{n}");
            assert!(check_name(&format!("{}-20", name_from(n))).is_ok(), "{n}");
            assert!(check_name(&format!("{}-abcdef", name_from(n))).is_ok(), "{n}");
        }
    }
}
