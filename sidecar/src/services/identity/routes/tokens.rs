//! `/api/v1/tokens...` (API tokens: one's own; owners: everyone's) and `GET /api/v1/audit`.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;

use super::{body, event, op, refuse, role, role_or_null_schema, to_value, user_of, Answered};
use crate::services::admin::Admin;
use crate::services::identity::audit::{self, AuditPage, AuditQuery};
use crate::services::identity::tokens::{NewToken, TokenView};
use crate::services::identity::{tokens, Principal, RequestMeta, Role};
use crate::services::openapi::{schema, Access, Operation};

/// `POST /api/v1/tokens`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateToken {
    /// A label: 1 to 64 characters, no control characters.
    #[schemars(length(min = 1, max = 64))]
    name: String,
    /// Default: the caller's role; never broader.
    #[serde(default)]
    #[schemars(schema_with = "role_or_null_schema")]
    role: Option<String>,
    /// RFC 3339, in the future; absent: never expires.
    #[serde(default)]
    expires_at: Option<String>,
}

/// `GET /api/v1/tokens[?all=true]`: the caller's tokens; with `all=true` (owners) everyone's.
pub(super) async fn list(
    State(admin): State<Admin>,
    Extension(p): Extension<Principal>,
    RawQuery(query): RawQuery,
) -> Answered {
    let mut all = false;
    for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        all = match (k.as_ref(), v.as_ref()) {
            ("all", "true") => true,
            ("all", "false") => false,
            _ => return Err(refuse(StatusCode::BAD_REQUEST, "the only query parameter is all=true|false")),
        };
    }
    if all && p.role != Role::Owner {
        return Err(refuse(StatusCode::FORBIDDEN, "listing every user's tokens (all=true) needs the owner role"));
    }
    let pool = admin.identity.pool()?;
    let listed = match (all, p.actor.user()) {
        (true, _) => tokens::list(pool, None).await?,
        (false, Some((user_id, _))) => tokens::list(pool, Some(user_id)).await?,
        // The bootstrap token and local access have no tokens of their own.
        (false, None) => Vec::new(),
    };
    Ok(Json(json!({"tokens": listed})).into_response())
}

/// `POST /api/v1/tokens`: a token for the caller's user, its plaintext shown once.
pub(super) async fn create(
    State(admin): State<Admin>,
    Extension(p): Extension<Principal>,
    Extension(meta): Extension<RequestMeta>,
    bytes: Bytes,
) -> Answered {
    let identity = &admin.identity;
    let pool = identity.pool()?;
    let b: CreateToken = body(&bytes)?;
    let (user_id, user) = user_of(&p)?;
    let wanted = b.role.as_deref().map(role).transpose()?.unwrap_or(p.role);
    if !p.role.covers(wanted) {
        let why = format!("role {wanted} is broader than yours ({}): a token cannot do more than its maker", p.role);
        return Err(refuse(StatusCode::BAD_REQUEST, why));
    }
    let now = i64::try_from(crate::services::now_ms() / 1000).unwrap_or(i64::MAX);
    let expires = b.expires_at.as_deref().map(|s| tokens::parse_expiry(s, now)).transpose()?;
    let made = tokens::create(pool, user_id, &b.name, wanted, expires).await?;
    let mut done = event("token_created", format!("tokens/{}", made.id));
    done.after = Some(json!({"id": made.id, "name": made.name, "user": user, "role": made.role,
        "expires_at": made.expires_at}));
    identity.audit(&p, &meta, done).await;
    Ok(Json(made).into_response())
}

/// `DELETE /api/v1/tokens/{id}`: revokes one of the caller's tokens (owners: anyone's).
pub(super) async fn revoke(
    State(admin): State<Admin>,
    Extension(p): Extension<Principal>,
    Extension(meta): Extension<RequestMeta>,
    Path(id): Path<String>,
) -> Answered {
    let identity = &admin.identity;
    let pool = identity.pool()?;
    let id: i64 =
        id.parse().map_err(|_| refuse(StatusCode::BAD_REQUEST, format!("token id {id:?} is not a number")))?;
    let scope = if p.role == Role::Owner { None } else { Some(user_of(&p)?.0) };
    let (before, after) = tokens::revoke(pool, id, scope).await?;
    let mut done = event("token_revoked", format!("tokens/{id}"));
    (done.before, done.after) = (to_value(&before), to_value(&after));
    identity.audit(&p, &meta, done).await;
    Ok(Json(after).into_response())
}

/// `GET /api/v1/audit?...`: a page of the audit log, newest first.
pub(super) async fn audit(State(admin): State<Admin>, RawQuery(query): RawQuery) -> Answered {
    let q = AuditQuery::parse(query.as_deref())?;
    let page = audit::query(admin.identity.pool()?, &q).await?;
    Ok(Json(page).into_response())
}

/// The operations of this module.
pub(super) fn operations() -> Vec<Operation> {
    let viewer = Access::Role(Role::Viewer);
    let listed = json!({"type": "object", "properties": {"tokens": {"type": "array", "items": schema::<TokenView>()}}});
    let mut audit = op(
        "get",
        "/api/v1/audit",
        Access::Role(Role::Admin),
        "The audit log, newest first, with filters and cursor paging (400 for a bad cursor or filter)",
        None,
        schema::<AuditPage>(),
        &[],
    );
    audit.query = Some(schema::<AuditQuery>());
    vec![
        op(
            "get",
            "/api/v1/tokens",
            viewer,
            "The caller's API tokens (all=true: everyone's, owners only)",
            None,
            listed,
            &[],
        ),
        op(
            "post",
            "/api/v1/tokens",
            viewer,
            "Make an API token for the caller; its plaintext is shown once",
            Some(schema::<CreateToken>()),
            schema::<NewToken>(),
            &[],
        ),
        op(
            "delete",
            "/api/v1/tokens/{id}",
            viewer,
            "Revoke an API token (one's own; owners: any)",
            None,
            schema::<TokenView>(),
            &[404],
        ),
        audit,
    ]
}
