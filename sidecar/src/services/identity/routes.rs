//! The identity routes of the admin API, and their documentation (the operations table the
//! router's authorization reads each route's role from).
//!
//! Every body is a JSON object of the documented fields (an unknown field is refused by
//! name); every error is `{"error": "..."}`. With the file store, routes that need users
//! answer 409 ([`IdentityError::NoDatabase`]).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Json;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::{AuditEvent, IdentityError, Principal, Role};
use crate::services::admin::Admin;
use crate::services::openapi::{Access, Answer, Operation};

mod auth;
mod tokens;
mod users;

impl IntoResponse for IdentityError {
    /// `{"error": ...}`; database failures are logged and answered without their details.
    fn into_response(self) -> Response {
        let message = match &self {
            IdentityError::Db(_) | IdentityError::Pool(_) | IdentityError::Hash(_) => {
                tracing::error!("admin identity: {self}");
                "the admin identity store failed; see the gateway's log".to_string()
            }
            other => other.to_string(),
        };
        (self.status(), Json(json!({"error": message}))).into_response()
    }
}

/// A refused request: its response (`{"error": ...}`), boxed to keep `Result`s small.
pub(super) struct Refusal(Box<Response>);

impl Refusal {
    /// A refusal answering `response`.
    pub(super) fn answer(response: impl IntoResponse) -> Refusal {
        Refusal(Box::new(response.into_response()))
    }
}

impl From<IdentityError> for Refusal {
    fn from(e: IdentityError) -> Refusal {
        Refusal::answer(e)
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        *self.0
    }
}

/// A refusal with `status` and `message`.
pub(super) fn refuse(status: StatusCode, message: impl Into<String>) -> Refusal {
    Refusal::answer((status, Json(json!({"error": message.into()}))))
}

/// What a handler returns.
pub(super) type Answered = Result<Response, Refusal>;

/// The body as a `T`: a JSON object of its fields, unknown ones refused by name.
pub(super) fn body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Refusal> {
    let bad = |m: String| refuse(StatusCode::BAD_REQUEST, m);
    let v: Value = match serde_json::from_slice(bytes) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return Err(bad("body must be a JSON object".into())),
        Err(_) if bytes.iter().all(u8::is_ascii_whitespace) => return Err(bad("body must be a JSON object".into())),
        Err(e) => return Err(bad(format!("body: {e}"))),
    };
    serde_json::from_value(v).map_err(|e| bad(format!("body: {e}")))
}

/// A role named in a body, or 400 naming the roles.
pub(super) fn role(name: &str) -> Result<Role, Refusal> {
    Role::parse(name).map_err(|e| refuse(StatusCode::BAD_REQUEST, format!("role: {e}")))
}

/// The user behind the caller, or 400 for the bootstrap token and local access.
pub(super) fn user_of(p: &Principal) -> Result<(i64, &str), Refusal> {
    p.actor.user().ok_or_else(|| {
        refuse(
            StatusCode::BAD_REQUEST,
            format!(
                "{} has no user: create one first (ferrogate admin create-user, or POST /api/v1/users) \
                 and log in as it",
                p.actor.label()
            ),
        )
    })
}

/// An audit event of `action` on `object`, answered 200.
pub(super) fn event(action: &str, object: String) -> AuditEvent {
    AuditEvent { action: action.into(), object: Some(object), status: 200, ..AuditEvent::default() }
}

/// JSON of a serializable value (for audit before/after).
pub(super) fn to_value(v: &impl serde::Serialize) -> Option<Value> {
    serde_json::to_value(v).ok()
}

/// The JSON Schema of a role.
pub(crate) fn role_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "enum": ["owner", "admin", "key-manager", "viewer"]})
}

/// The JSON Schema of an optional role (null: unchanged, or the default).
pub(crate) fn role_or_null_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": ["string", "null"], "enum": ["owner", "admin", "key-manager", "viewer", null]})
}

/// See [`super::router`].
pub(super) fn router() -> axum::Router<Admin> {
    axum::Router::new()
        .route("/api/v1/session", get(auth::me).post(auth::login).delete(auth::logout))
        .route("/api/v1/session/methods", get(auth::methods))
        .route("/api/v1/session/password", post(auth::password))
        .route("/api/v1/users", get(users::list).post(users::create))
        .route("/api/v1/users/{name}", get(users::get).put(users::update).delete(users::delete))
        .route("/api/v1/users/{name}/password", post(users::reset_password))
        .route("/api/v1/tokens", get(tokens::list).post(tokens::create))
        .route("/api/v1/tokens/{id}", delete(tokens::revoke))
        .route("/api/v1/audit", get(tokens::audit))
}

/// One documented operation: `request` is its body's schema, `errors` those beyond 400, 409
/// and 503 (and 401 and 403, added unless it is public).
fn op(
    method: &'static str,
    path: &str,
    access: Access,
    summary: &str,
    request: Option<Value>,
    answer: Value,
    errors: &[u16],
) -> Operation {
    let mut all = vec![400, 409, 503];
    if access != Access::Public {
        all.extend([401, 403]);
    }
    all.extend_from_slice(errors);
    Operation {
        method,
        path: path.into(),
        summary: summary.into(),
        access,
        request,
        query: None,
        answer: Answer::Json(answer),
        errors: all,
    }
}

/// See [`super::operations`].
pub(super) fn operations() -> Vec<Operation> {
    let mut ops = auth::operations();
    ops.extend(users::operations());
    ops.extend(tokens::operations());
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Login {
        name: String,
        password: String,
    }

    fn error_of(r: Refusal) -> (u16, String) {
        let response = r.into_response();
        (response.status().as_u16(), format!("{:?}", response.into_body()))
    }

    #[test]
    fn bodies_must_be_objects_of_known_fields() {
        assert!(body::<Login>(br#"{"name": "a", "password": "p"}"#).is_ok());
        for bad in [&b"[1]"[..], b"\"x\"", b"", b"  "] {
            let (status, _) = error_of(body::<Login>(bad).unwrap_err());
            assert_eq!(status, 400);
        }
        assert!(body::<Login>(br#"{"name": "a", "password": "p", "otp": 1}"#).is_err());
    }

    #[test]
    fn every_operation_has_a_schema_and_roles_are_enumerated() {
        use crate::services::openapi::schema;
        let ops = operations();
        assert!(ops.iter().any(|o| o.path == "/api/v1/session" && o.access == Access::Public));
        assert!(ops.iter().all(|o| matches!(o.answer, Answer::Json(Value::Object(_)))));
        let user = schema::<crate::services::identity::users::UserView>();
        assert_eq!(user["properties"]["role"]["enum"][2], "key-manager", "{user}");
        assert!(user["properties"].get("password_hash").is_none());
        let create = schema::<users::CreateUser>();
        assert_eq!(create["properties"]["password"]["maxLength"], 1024, "{create}");
        assert!(create["properties"]["name"]["pattern"].is_string(), "{create}");
        let update = schema::<users::UpdateUser>();
        assert_eq!(update["properties"]["role"]["enum"][4], Value::Null, "{update}");
        assert_eq!(schema::<tokens::CreateToken>()["properties"]["name"]["maxLength"], 64);
    }
}
