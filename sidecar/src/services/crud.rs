//! Admin CRUD over the configuration (`/api/v1/{providers,models,aliases,groups,keys,pricing,
//! mcp_servers,a2a_agents,guardrails}`),
//! for the `postgres` store. Bodies have the shape of the config file's entries; unknown fields
//! are refused with their name. Writes answer `{"version": n}` once committed; the new
//! snapshot is published here at once and on other sidecars through Redis (or their poll).
//!
//! - `GET /api/v1/{section}`: the rows (credentials of providers, MCP servers and A2A agents
//!   never shown; `api_key_set` instead).
//! - `GET /api/v1/{section}/{name}`: one row as listed (aliases as `{name, model}`, prices with
//!   their `model`), 404 when absent.
//! - `POST /api/v1/{section}`: create; an existing name is 409. `POST /api/v1/keys` without a
//!   `digest` generates the key and returns its plaintext once (only the digest is stored).
//! - `PUT /api/v1/{section}/{name}`: create or replace (the path names the row).
//! - `DELETE /api/v1/{section}/{name}`: 404 when absent, 409 when other rows depend on it.
//!
//! A write that would leave its own row unservable is 400 with the problems and their paths;
//! with the file store every write is 409 (edit the file instead), and reads list the rows of
//! the snapshot being served.
//!
//! Who may do what: the admin router lets viewers read and key managers write keys and groups,
//! admins everything (`services::openapi`). Here a viewer's answers lose every key digest
//! (`identity::redact`), and a key manager narrowed to some key groups sees and writes only
//! those groups and the keys all of whose groups are among them (403 naming the group for a
//! write of anything else). Every write, done or refused, is audited with the row before and
//! after (a generated key's plaintext is never recorded).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{json, Value};

use super::admin::Admin;
use super::identity::{redact, AuditEvent, Principal, RequestMeta, Role};

use super::pg::{Change, Resource, Section, StoreError};

mod body;

use body::parse;
pub(crate) use body::{AliasBody, PriceBody};

fn section(name: &str) -> Option<Section> {
    Section::ALL.into_iter().find(|s| s.as_str() == name)
}

/// A refusal: status and JSON body.
struct Reject(StatusCode, Value);

impl Reject {
    fn new(status: StatusCode, message: impl Into<String>) -> Reject {
        Reject(status, json!({"error": message.into()}))
    }

    fn message(&self) -> String {
        self.1.get("error").and_then(Value::as_str).unwrap_or_default().to_string()
    }
}

impl IntoResponse for Reject {
    fn into_response(self) -> Response {
        (self.0, Json(self.1)).into_response()
    }
}

fn unknown_collection(name: &str) -> Reject {
    Reject::new(StatusCode::NOT_FOUND, format!("no resource collection {name:?}"))
}

/// The database, or the refusal to send instead (409 with the file store, 503 before
/// Postgres is reached).
fn database(admin: &Admin) -> Result<super::source::Database, Reject> {
    if let Some(db) = admin.db.get() {
        return Ok(db.clone());
    }
    Err(if admin.postgres {
        Reject::new(StatusCode::SERVICE_UNAVAILABLE, "the configuration database is not reachable yet")
    } else {
        Reject::new(
            StatusCode::CONFLICT,
            "the configuration lives in the file store: edit the file (writes need store: { kind: postgres })",
        )
    })
}

/// `GET /api/v1/{section}`: from the database, or with the file store from the snapshot
/// being served (its rows as the file gives them, provider keys never shown); only the rows
/// the caller may see, without digests for a viewer.
pub async fn list(
    State(admin): State<Admin>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
) -> Response {
    let Some(section) = section(&name) else { return unknown_collection(&name).into_response() };
    match rows(&admin, section).await {
        Ok(rows) => Json(shown(&who, section, rows)).into_response(),
        Err(r) => r.into_response(),
    }
}

/// `GET /api/v1/{section}/{name}`: one row of [`list`]'s, in the shape a write takes.
pub async fn get(
    State(admin): State<Admin>,
    Extension(who): Extension<Principal>,
    Path((name, row)): Path<(String, String)>,
) -> Response {
    let Some(section) = section(&name) else { return unknown_collection(&name).into_response() };
    let found = rows(&admin, section).await.map(|rows| one(section, rows, &row).filter(|r| visible(&who, section, r)));
    match found {
        Ok(Some(found)) => Json(for_viewer(&who, found)).into_response(),
        Ok(None) => Reject::new(StatusCode::NOT_FOUND, format!("{name}/{row} not found")).into_response(),
        Err(r) => r.into_response(),
    }
}

/// A section's rows: from the database, or with the file store from the served snapshot.
async fn rows(admin: &Admin, section: Section) -> Result<Value, Reject> {
    match database(admin) {
        Ok(db) => db.store.list(section).await.map_err(|e| store_reject(&e)),
        Err(Reject(StatusCode::CONFLICT, _)) => served_rows(admin, section),
        Err(r) => Err(r),
    }
}

/// The rows of the served snapshot (file store).
fn served_rows(admin: &Admin, section: Section) -> Result<Value, Reject> {
    let parsed = admin.snapshots.current().and_then(|s| ferrogate_core::snapshot::Snapshot::parse(&s.body).ok());
    match parsed {
        Some((doc, _)) => Ok(super::pg::rows::section_json(&doc.config, section)),
        None => Err(Reject::new(StatusCode::SERVICE_UNAVAILABLE, "no configuration snapshot is served yet")),
    }
}

/// The row `name` of a section's listing: aliases and prices (maps) in their body's shape.
fn one(section: Section, rows: Value, name: &str) -> Option<Value> {
    match (section, rows) {
        (Section::Aliases, Value::Object(aliases)) => {
            aliases.get(name).map(|model| json!({"name": name, "model": model}))
        }
        (Section::Pricing, Value::Object(mut prices)) => {
            let mut price = prices.remove(name)?;
            price.as_object_mut()?.insert("model".into(), name.into());
            Some(price)
        }
        (_, Value::Array(items)) => items.into_iter().find(|r| r.get("name").and_then(Value::as_str) == Some(name)),
        _ => None,
    }
}

/// A listing as `who` may see it: the rows it manages, without digests for a viewer.
fn shown(who: &Principal, section: Section, rows: Value) -> Value {
    let rows = match rows {
        Value::Array(items) => Value::Array(items.into_iter().filter(|r| visible(who, section, r)).collect()),
        other => other,
    };
    for_viewer(who, rows)
}

/// `answer` without secrets (key digests included) when `who` is a viewer.
fn for_viewer(who: &Principal, mut answer: Value) -> Value {
    if who.role == Role::Viewer {
        redact(&mut answer, true);
    }
    answer
}

/// Whether `who` is a key manager narrowed to some key groups.
fn narrowed(who: &Principal) -> bool {
    who.role == Role::KeyManager && !who.key_groups.is_empty()
}

/// Whether `who` may see and manage `row` of `section`: a narrowed key manager only its
/// groups and the keys all of whose groups (at least one) are among them.
fn visible(who: &Principal, section: Section, row: &Value) -> bool {
    outside(who, section, row).is_none()
}

/// Why `row` of `section` is outside what `who` manages, if it is.
fn outside(who: &Principal, section: Section, row: &Value) -> Option<String> {
    if !narrowed(who) {
        return None;
    }
    let name = row.get("name").and_then(Value::as_str).unwrap_or_default();
    let manages = who.key_groups.join(", ");
    let label = who.actor.label();
    match section {
        Section::Groups if !who.manages_group(name) => {
            Some(format!("forbidden: {label} manages the key groups {manages} only, not group {name:?}"))
        }
        Section::Keys => {
            let groups: Vec<&str> =
                row.get("groups").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
            if groups.is_empty() {
                return Some(format!(
                    "forbidden: {label} manages the keys of the key groups {manages} only: key {name:?} must be in at \
                     least one of them"
                ));
            }
            let other = groups.iter().find(|g| !who.manages_group(g))?;
            Some(format!(
                "forbidden: {label} manages the key groups {manages} only: key {name:?} is in group {other:?}"
            ))
        }
        _ => None,
    }
}

/// `POST /api/v1/{section}`
pub async fn create(
    State(admin): State<Admin>,
    Extension(who): Extension<Principal>,
    Extension(meta): Extension<RequestMeta>,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let Some(section) = section(&name) else { return unknown_collection(&name).into_response() };
    let mut w = Write { admin: &admin, who: &who, meta: &meta, section, verb: "create", object: None, before: None };
    // The file store refuses every write, whatever the body.
    let outcome = match database(&admin).and_then(|_| parse(section, &body, None)) {
        Ok((resource, plaintext)) => w.put(Change::Create(resource), plaintext).await,
        Err(r) => Err(r),
    };
    w.finish(outcome).await
}

/// `PUT /api/v1/{section}/{name}`
pub async fn replace(
    State(admin): State<Admin>,
    Extension(who): Extension<Principal>,
    Extension(meta): Extension<RequestMeta>,
    Path((name, row)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let Some(section) = section(&name) else { return unknown_collection(&name).into_response() };
    let object = Some(format!("{name}/{row}"));
    let mut w = Write { admin: &admin, who: &who, meta: &meta, section, verb: "replace", object, before: None };
    let outcome = match database(&admin).and_then(|_| parse(section, &body, Some(&row))) {
        Ok((resource, plaintext)) => w.put(Change::Replace(resource), plaintext).await,
        Err(r) => Err(r),
    };
    w.finish(outcome).await
}

/// `DELETE /api/v1/{section}/{name}`
pub async fn delete(
    State(admin): State<Admin>,
    Extension(who): Extension<Principal>,
    Extension(meta): Extension<RequestMeta>,
    Path((name, row)): Path<(String, String)>,
) -> Response {
    let Some(section) = section(&name) else { return unknown_collection(&name).into_response() };
    let object = Some(format!("{name}/{row}"));
    let mut w = Write { admin: &admin, who: &who, meta: &meta, section, verb: "delete", object, before: None };
    let outcome = w.delete(row).await;
    w.finish(outcome).await
}

/// A write in progress: who makes it, to what, and the row before (for the audit record).
struct Write<'a> {
    admin: &'a Admin,
    who: &'a Principal,
    meta: &'a RequestMeta,
    section: Section,
    /// `create`, `replace` or `delete`.
    verb: &'static str,
    /// `section/name`, once known.
    object: Option<String>,
    /// The row before the write, when there was one.
    before: Option<Value>,
}

/// What a write did: the answer and the row after it.
struct Done {
    answer: Value,
    after: Option<Value>,
}

impl Write<'_> {
    /// Creates or replaces the row `change` holds.
    async fn put(&mut self, change: Change, plaintext_key: Option<String>) -> Result<Done, Reject> {
        let (section, name) = change.row();
        self.object = Some(format!("{}/{name}", section.as_str()));
        let db = database(self.admin)?;
        let new_row = row_json(&change);
        self.before = self.read(&db, &name).await?;
        // A narrowed key manager may neither take over a row it does not manage nor write one.
        for row in self.before.iter().chain(new_row.iter()) {
            if let Some(why) = outside(self.who, section, row) {
                return Err(Reject::new(StatusCode::FORBIDDEN, why));
            }
        }
        let version = write(&db, change).await?;
        let mut answer = json!({"version": version});
        if let Some(key) = plaintext_key {
            answer["key"] = key.into();
        }
        let after = self.read(&db, &name).await.ok().flatten();
        Ok(Done { answer, after })
    }

    /// Deletes the row `name`.
    async fn delete(&mut self, name: String) -> Result<Done, Reject> {
        let db = database(self.admin)?;
        // No row can hold a NUL (the database refuses it): nothing to delete.
        if name.contains('\0') {
            return Err(Reject::new(StatusCode::NOT_FOUND, format!("{}/{name} not found", self.section.as_str())));
        }
        self.before = self.read(&db, &name).await?;
        if let Some(why) = self.before.as_ref().and_then(|row| outside(self.who, self.section, row)) {
            return Err(Reject::new(StatusCode::FORBIDDEN, why));
        }
        let version = write(&db, Change::Delete(self.section, name)).await?;
        Ok(Done { answer: json!({"version": version}), after: None })
    }

    /// The row `name` of this section as listed, if there is one.
    async fn read(&self, db: &super::source::Database, name: &str) -> Result<Option<Value>, Reject> {
        let rows = db.store.list(self.section).await.map_err(|e| store_reject(&e))?;
        Ok(one(self.section, rows, name))
    }

    /// Audits the write, done or refused, and answers it.
    async fn finish(self, outcome: Result<Done, Reject>) -> Response {
        let (status, after, detail, answer) = match outcome {
            Ok(done) => (StatusCode::OK, done.after, None, Json(done.answer).into_response()),
            Err(r) => (r.0, None, Some(r.message()), r.into_response()),
        };
        let object = self.object.or_else(|| Some(self.section.as_str().to_string()));
        let event = AuditEvent {
            action: format!("{}.{}", self.section.as_str(), self.verb),
            object,
            before: self.before,
            after,
            status: status.as_u16(),
            detail,
        };
        self.admin.identity.audit(self.who, self.meta, event).await;
        answer
    }
}

/// The row a create or replace writes, as listed (for the key manager's checks).
fn row_json(change: &Change) -> Option<Value> {
    match change {
        Change::Create(Resource::Key(k)) | Change::Replace(Resource::Key(k)) => serde_json::to_value(k).ok(),
        Change::Create(Resource::Group(g)) | Change::Replace(Resource::Group(g)) => serde_json::to_value(g).ok(),
        _ => None,
    }
}

async fn write(db: &super::source::Database, change: Change) -> Result<i64, Reject> {
    let version = db.store.write(change).await.map_err(|e| store_reject(&e))?;
    db.announce(version).await;
    Ok(version)
}

fn store_reject(e: &StoreError) -> Reject {
    match e {
        StoreError::Invalid(problems) => {
            let list: Vec<Value> = problems.iter().map(|p| json!({"path": p.path, "message": p.message})).collect();
            let summary: Vec<String> = problems.iter().map(|p| format!("{}: {}", p.path, p.message)).collect();
            Reject(
                StatusCode::BAD_REQUEST,
                json!({"error": format!("the change would not be servable: {}", summary.join("; ")), "problems": list}),
            )
        }
        StoreError::NoMasterKey => Reject::new(StatusCode::BAD_REQUEST, e.to_string()),
        StoreError::Conflict(_) => Reject::new(StatusCode::CONFLICT, e.to_string()),
        StoreError::NotFound(_) => Reject::new(StatusCode::NOT_FOUND, e.to_string()),
        _ => {
            tracing::error!("configuration store: {e}");
            Reject::new(StatusCode::SERVICE_UNAVAILABLE, "configuration store unavailable")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::identity::Actor;

    #[test]
    fn bodies_must_be_objects_of_the_section() {
        for body in [&br#"["v\u00fb\u0019"]"#[..], b"\"x\"", b"3", b"null", b"true"] {
            let Err(r) = parse(Section::Groups, body, None) else { panic!("{}", String::from_utf8_lossy(body)) };
            assert_eq!((r.0, r.message().as_str()), (StatusCode::BAD_REQUEST, "body must be a JSON object"));
        }
        let Err(r) = parse(Section::Groups, br#"{"name": "g", "wieght": 1}"#, None) else { panic!() };
        assert!(r.message().contains("wieght"), "{}", r.message());
        let Err(r) = parse(Section::Keys, br#"{"name": "k\u0000"}"#, None) else { panic!() };
        assert!(r.message().contains("NUL"), "{}", r.message());
        let Err(r) = parse(Section::Groups, br#"{"name": "g"}"#, Some("a\0b")) else { panic!() };
        assert!(r.message().contains("NUL"), "{}", r.message());
        let Ok((Resource::Group(g), None)) = parse(Section::Groups, br#"{"name": "body"}"#, Some("path")) else {
            panic!()
        };
        assert_eq!(g.name, "path", "the path's name wins");
        let Ok((Resource::Key(k), Some(plain))) = parse(Section::Keys, br#"{"name": "k"}"#, None) else { panic!() };
        assert!(k.digest.starts_with("sha256:") && !plain.is_empty() && !k.digest.contains(&plain));
    }

    #[test]
    fn narrowed_key_managers_see_and_write_their_groups_only() {
        let km = Principal {
            actor: Actor::Local,
            role: Role::KeyManager,
            key_groups: vec!["team-a".into(), "team-b".into()],
            csrf: None,
        };
        let key = |groups: Value| json!({"name": "k", "digest": "sha256:00", "groups": groups});
        assert!(visible(&km, Section::Keys, &key(json!(["team-a"]))));
        assert!(visible(&km, Section::Keys, &key(json!(["team-a", "team-b"]))));
        assert!(!visible(&km, Section::Keys, &key(json!([]))));
        let why = outside(&km, Section::Keys, &key(json!(["team-a", "ops"]))).unwrap();
        assert!(why.contains("\"ops\""), "{why}");
        assert!(visible(&km, Section::Groups, &json!({"name": "team-b"})));
        assert!(outside(&km, Section::Groups, &json!({"name": "ops"})).unwrap().contains("\"ops\""));
        assert!(visible(&km, Section::Models, &json!({"name": "chat"})), "not its business: the router decides");
        let everyone = Principal { key_groups: Vec::new(), ..km.clone() };
        assert!(visible(&everyone, Section::Keys, &key(json!([]))));
        let listed = shown(&km, Section::Keys, json!([key(json!(["team-a"])), key(json!(["ops"])), key(json!([]))]));
        assert_eq!(listed.as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn viewers_see_no_digest() {
        let viewer = Principal { actor: Actor::Local, role: Role::Viewer, key_groups: Vec::new(), csrf: None };
        let rows = json!([{"name": "k", "digest": "sha256:ab", "groups": ["g"]}]);
        let shown = shown(&viewer, Section::Keys, rows.clone());
        assert_eq!(shown[0]["digest"], "[redacted]");
        assert_eq!(shown[0]["name"], "k");
        let admin = Principal { role: Role::Admin, ..viewer };
        assert_eq!(for_viewer(&admin, rows.clone()), rows);
    }
}
