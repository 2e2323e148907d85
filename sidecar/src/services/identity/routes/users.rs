//! `/api/v1/users...`: admin users (listing and reading: admins; changes: owners).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;

use super::{body, event, op, role, role_or_null_schema, role_schema, to_value, Answered};
use crate::services::admin::Admin;
use crate::services::identity::users::{self, NewUser, UserUpdate, UserView};
use crate::services::identity::{passwords, Principal, RequestMeta, Role};
use crate::services::openapi::{schema, Access, Operation};

/// `POST /api/v1/users`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateUser {
    /// `^[a-z0-9][a-z0-9._@-]{0,63}$`.
    #[schemars(pattern(r"^[a-z0-9][a-z0-9._@-]{0,63}$"))]
    name: String,
    /// `owner`, `admin`, `key-manager` or `viewer`.
    #[schemars(schema_with = "role_schema")]
    role: String,
    /// Absent: the user cannot log in with a password (OIDC only, or until an owner sets one).
    /// At least `admin.login.password_min_length` characters (default 15).
    #[serde(default)]
    #[schemars(length(max = 1024))]
    password: Option<String>,
    /// Key groups a key-manager may manage (absent or empty: all).
    #[serde(default)]
    key_groups: Option<Vec<String>>,
}

/// `PUT /api/v1/users/{name}`: absent fields stay.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct UpdateUser {
    #[serde(default)]
    #[schemars(schema_with = "role_or_null_schema")]
    role: Option<String>,
    #[serde(default)]
    key_groups: Option<Vec<String>>,
    #[serde(default)]
    disabled: Option<bool>,
}

/// `POST /api/v1/users/{name}/password`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ResetPassword {
    /// At least `admin.login.password_min_length` characters (default 15).
    #[schemars(length(max = 1024))]
    password: String,
}

/// `GET /api/v1/users`.
pub(super) async fn list(State(admin): State<Admin>) -> Answered {
    let all = users::list(admin.identity.pool()?).await?;
    Ok(Json(json!({"users": all})).into_response())
}

/// `GET /api/v1/users/{name}`.
pub(super) async fn get(State(admin): State<Admin>, Path(name): Path<String>) -> Answered {
    Ok(Json(users::get(admin.identity.pool()?, &name).await?).into_response())
}

/// `POST /api/v1/users`.
pub(super) async fn create(
    State(admin): State<Admin>,
    Extension(p): Extension<Principal>,
    Extension(meta): Extension<RequestMeta>,
    bytes: Bytes,
) -> Answered {
    let identity = &admin.identity;
    let pool = identity.pool()?;
    let b: CreateUser = body(&bytes)?;
    let role = role(&b.role)?;
    users::check_name(&b.name)?;
    let password_hash = match &b.password {
        Some(password) => {
            passwords::check_policy(password, &b.name, identity.settings.password_min_length)?;
            Some(passwords::hash_blocking(password).await?)
        }
        None => None,
    };
    let new = NewUser { name: b.name, role, key_groups: b.key_groups.unwrap_or_default(), password_hash };
    let made = users::create(pool, &new).await?;
    let mut done = event("user_created", format!("users/{}", made.name));
    done.after = to_value(&made);
    identity.audit(&p, &meta, done).await;
    Ok(Json(made).into_response())
}

/// `PUT /api/v1/users/{name}`.
pub(super) async fn update(
    State(admin): State<Admin>,
    Extension(p): Extension<Principal>,
    Extension(meta): Extension<RequestMeta>,
    Path(name): Path<String>,
    bytes: Bytes,
) -> Answered {
    let identity = &admin.identity;
    let pool = identity.pool()?;
    let b: UpdateUser = body(&bytes)?;
    let change =
        UserUpdate { role: b.role.as_deref().map(role).transpose()?, key_groups: b.key_groups, disabled: b.disabled };
    let (before, after) = users::update(pool, &name, &change).await?;
    let action = if after.disabled && !before.disabled { "user_disabled" } else { "user_updated" };
    let mut done = event(action, format!("users/{name}"));
    (done.before, done.after) = (to_value(&before), to_value(&after));
    identity.audit(&p, &meta, done).await;
    Ok(Json(after).into_response())
}

/// `DELETE /api/v1/users/{name}`.
pub(super) async fn delete(
    State(admin): State<Admin>,
    Extension(p): Extension<Principal>,
    Extension(meta): Extension<RequestMeta>,
    Path(name): Path<String>,
) -> Answered {
    let identity = &admin.identity;
    let before = users::delete(identity.pool()?, &name).await?;
    let mut done = event("user_deleted", format!("users/{name}"));
    done.before = to_value(&before);
    identity.audit(&p, &meta, done).await;
    Ok(Json(before).into_response())
}

/// `POST /api/v1/users/{name}/password`: an owner sets a user's password (its sessions end).
pub(super) async fn reset_password(
    State(admin): State<Admin>,
    Extension(p): Extension<Principal>,
    Extension(meta): Extension<RequestMeta>,
    Path(name): Path<String>,
    bytes: Bytes,
) -> Answered {
    let identity = &admin.identity;
    let pool = identity.pool()?;
    let b: ResetPassword = body(&bytes)?;
    let user = users::get(pool, &name).await?;
    passwords::check_policy(&b.password, &name, identity.settings.password_min_length)?;
    let phc = passwords::hash_blocking(&b.password).await?;
    let ended = users::set_password(pool, user.id, &phc, None).await?;
    let mut done = event("password_reset", format!("users/{name}"));
    done.detail = Some(format!("{ended} sessions ended"));
    identity.audit(&p, &meta, done).await;
    Ok(Json(json!({"sessions_ended": ended})).into_response())
}

/// The operations of this module.
pub(super) fn operations() -> Vec<Operation> {
    let (admin, owner) = (Access::Role(Role::Admin), Access::Role(Role::Owner));
    let user = schema::<UserView>;
    let all = json!({"type": "object", "properties": {"users": {"type": "array", "items": user()}}});
    let ended = json!({"type": "object", "properties": {"sessions_ended": {"type": "integer"}}});
    let (create, update, reset) = (schema::<CreateUser>(), schema::<UpdateUser>(), schema::<ResetPassword>());
    vec![
        op("get", "/api/v1/users", admin, "Every admin user ({\"users\": [...]}; no password hashes)", None, all, &[]),
        op("post", "/api/v1/users", owner, "Create a user (409 if the name exists)", Some(create), user(), &[]),
        op("get", "/api/v1/users/{name}", admin, "One user", None, user(), &[404]),
        op(
            "put",
            "/api/v1/users/{name}",
            owner,
            "Change a user's role, key groups or disabled flag (409 for the last owner); a new role or a \
             disable ends its sessions",
            Some(update),
            user(),
            &[404],
        ),
        op(
            "delete",
            "/api/v1/users/{name}",
            owner,
            "Delete a user, its sessions and tokens (409 for the last owner)",
            None,
            user(),
            &[404],
        ),
        op(
            "post",
            "/api/v1/users/{name}/password",
            owner,
            "Set a user's password (ends its sessions)",
            Some(reset),
            ended,
            &[404],
        ),
    ]
}
