//! The admin listener's operations table and `GET /openapi.json`.
//!
//! The table ([`operations`]) is the single source of truth about the admin API: the router is
//! checked against it (every documented operation is routed, every routed path documented),
//! the authorization middleware (`services::admin::authorize`) reads each route's [`Access`]
//! from it, `docs/admin-api.md`'s route table is checked against it, and the OpenAPI document
//! ([`document`]) is made from it.

use std::sync::OnceLock;

use serde_json::Value;

use super::identity::Role;
use super::pg::Section;

mod document;
mod schemas;
mod table;
#[cfg(test)]
mod tests;
mod validate;

pub use document::document;
pub use validate::check;

/// Who may call an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone, no credentials (probes, the login routes, this document).
    Public,
    /// Callers whose role covers this one.
    Role(Role),
}

impl Access {
    /// How the route table of `docs/admin-api.md` and the document name it: `public` or the
    /// role's name.
    pub fn label(self) -> &'static str {
        match self {
            Access::Public => "public",
            Access::Role(r) => r.as_str(),
        }
    }
}

/// What a successful call answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// 200 with a JSON body of this schema.
    Json(Value),
    /// 200 with `text/plain`.
    Text,
    /// 302 to another page (browser flows).
    Redirect,
}

/// One documented operation: the router is checked against this table, the admin router's
/// authorization reads each route's [`Access`] from it, and `/openapi.json` is made from it.
#[derive(Debug, Clone)]
pub struct Operation {
    /// HTTP method, lower case.
    pub method: &'static str,
    /// Path as routed, with `{name}` parameters.
    pub path: String,
    /// What it does.
    pub summary: String,
    /// Who may call it.
    pub access: Access,
    /// JSON Schema of the request body ([`schema`]); `None`: no body.
    pub request: Option<Value>,
    /// JSON Schema of an object whose properties are the query parameters (`required` lists
    /// the required ones).
    pub query: Option<Value>,
    /// The successful answer.
    pub answer: Answer,
    /// Error statuses the handler may answer. The document adds those the admin router itself
    /// may answer: 401, 403 and 503 (authentication needing the database) for non-public
    /// operations, 400 for operations with a query, path parameters or a body (the request
    /// cannot be read), 413 for operations with a body (larger than the admin API's limit).
    pub errors: Vec<u16>,
}

/// The JSON Schema of `T` (its `$defs` inline; the document hoists them into
/// `components/schemas`).
pub fn schema<T: schemars::JsonSchema>() -> Value {
    schemars::schema_for!(T).to_value()
}

/// Every operation of the admin listener: its own, the identity routes' and the login routes'.
pub fn operations() -> Vec<Operation> {
    let mut ops = table::operations();
    ops.extend(super::identity::operations());
    ops.extend(super::identity::oidc::operations());
    ops
}

/// The largest request body the admin API reads: 1 MiB.
pub const BODY_LIMIT: usize = 1 << 20;

/// The JSON Schema of a section's body as `POST` takes it (the config file's entry), its
/// `$defs` inline; built once.
pub fn section_body(section: Section) -> &'static Value {
    static BODIES: OnceLock<Vec<Value>> = OnceLock::new();
    let bodies = BODIES.get_or_init(|| Section::ALL.into_iter().map(schemas::section_body).collect());
    let i = Section::ALL.iter().position(|s| *s == section).unwrap_or_default();
    &bodies[i]
}

/// The member of a section's body that names its row, which the path of a `PUT` overrides:
/// `model` for pricing, `name` for the others.
pub fn name_member(section: Section) -> &'static str {
    match section {
        Section::Pricing => "model",
        _ => "name",
    }
}
