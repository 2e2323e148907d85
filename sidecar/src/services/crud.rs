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

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ferrogate_core::config::a2a::RawA2aAgent;
use ferrogate_core::config::guardrails::RawGuardrail;
use ferrogate_core::config::mcp::RawMcpServer;
use ferrogate_core::config::{RawGroup, RawKey, RawModel, RawPrice, RawProvider};
use serde::Deserialize;
use serde_json::{json, Value};

use super::admin::Admin;
use super::auth::bearer_ok;
use super::pg::{Change, Resource, Section, StoreError};

/// An alias as the API takes it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AliasBody {
    name: String,
    model: String,
}

/// A price as the API takes it: the upstream model id plus the config's price fields.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceBody {
    model: String,
    input_per_mtok: f64,
    output_per_mtok: f64,
    #[serde(default)]
    cached_input_per_mtok: Option<f64>,
}

fn section(name: &str) -> Option<Section> {
    Section::ALL.into_iter().find(|s| s.as_str() == name)
}

fn error(status: StatusCode, body: Value) -> Response {
    (status, Json(body)).into_response()
}

/// A refusal before the store is asked: status and JSON body.
struct Reject(StatusCode, Value);

impl IntoResponse for Reject {
    fn into_response(self) -> Response {
        error(self.0, self.1)
    }
}

/// The collection `name` names and the database, or the response to send instead (404 for an
/// unknown collection, then the token and store checks of [`gate`]).
fn open(admin: &Admin, headers: &HeaderMap, name: &str) -> Result<(Section, super::source::Database), Reject> {
    let section = section(name).ok_or_else(|| unknown_collection(name))?;
    Ok((section, gate(admin, headers)?))
}

fn unknown_collection(name: &str) -> Reject {
    Reject(StatusCode::NOT_FOUND, json!({"error": format!("no resource collection {name:?}")}))
}

/// Checks the token and the store; yields the database or the response to send instead.
fn gate(admin: &Admin, headers: &HeaderMap) -> Result<super::source::Database, Reject> {
    if !bearer_ok(headers, admin.token.as_deref()) {
        return Err(Reject(StatusCode::UNAUTHORIZED, json!({"error": "missing or wrong bearer token"})));
    }
    if let Some(db) = admin.db.get() {
        return Ok(db.clone());
    }
    Err(if admin.postgres {
        Reject(StatusCode::SERVICE_UNAVAILABLE, json!({"error": "the configuration database is not reachable yet"}))
    } else {
        Reject(
            StatusCode::CONFLICT,
            json!({"error": "the configuration lives in the file store: edit the file (writes need store: { kind: postgres })"}),
        )
    })
}

/// `GET /api/v1/{section}`: from the database, or with the file store from the snapshot
/// being served (its rows as the file gives them, provider keys never shown).
pub async fn list(State(admin): State<Admin>, headers: HeaderMap, Path(name): Path<String>) -> Response {
    let Some(section) = section(&name) else { return unknown_collection(&name).into_response() };
    match rows(&admin, &headers, section).await {
        Ok(rows) => Json(rows).into_response(),
        Err(r) => r.into_response(),
    }
}

/// `GET /api/v1/{section}/{name}`: one row of [`list`]'s, in the shape a write takes.
pub async fn get(
    State(admin): State<Admin>,
    headers: HeaderMap,
    Path((name, row)): Path<(String, String)>,
) -> Response {
    let Some(section) = section(&name) else { return unknown_collection(&name).into_response() };
    match rows(&admin, &headers, section).await.map(|rows| one(section, rows, &row)) {
        Ok(Some(found)) => Json(found).into_response(),
        Ok(None) => error(StatusCode::NOT_FOUND, json!({"error": format!("{name}/{row} not found")})),
        Err(r) => r.into_response(),
    }
}

/// A section's rows: from the database, or with the file store from the served snapshot.
async fn rows(admin: &Admin, headers: &HeaderMap, section: Section) -> Result<Value, Reject> {
    match gate(admin, headers) {
        Ok(db) => db.store.list(section).await.map_err(|e| store_reject(&e)),
        // The file store (`gate`'s 409): the rows of the snapshot being served.
        Err(Reject(StatusCode::CONFLICT, _)) => served_rows(admin, section),
        Err(r) => Err(r),
    }
}

/// The rows of the served snapshot (file store).
fn served_rows(admin: &Admin, section: Section) -> Result<Value, Reject> {
    let parsed = admin.snapshots.current().and_then(|s| ferrogate_core::snapshot::Snapshot::parse(&s.body).ok());
    match parsed {
        Some((doc, _)) => Ok(super::pg::rows::section_json(&doc.config, section)),
        None => {
            Err(Reject(StatusCode::SERVICE_UNAVAILABLE, json!({"error": "no configuration snapshot is served yet"})))
        }
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

/// `POST /api/v1/{section}`
pub async fn create(
    State(admin): State<Admin>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let (section, db) = match open(&admin, &headers, &name) {
        Ok(opened) => opened,
        Err(r) => return r.into_response(),
    };
    let (resource, plaintext) = match parse(section, &body, None) {
        Ok(parsed) => parsed,
        Err(r) => return r.into_response(),
    };
    write(&db, Change::Create(resource), plaintext).await
}

/// `PUT /api/v1/{section}/{name}`
pub async fn replace(
    State(admin): State<Admin>,
    headers: HeaderMap,
    Path((name, row)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let (section, db) = match open(&admin, &headers, &name) {
        Ok(opened) => opened,
        Err(r) => return r.into_response(),
    };
    let (resource, plaintext) = match parse(section, &body, Some(&row)) {
        Ok(parsed) => parsed,
        Err(r) => return r.into_response(),
    };
    write(&db, Change::Replace(resource), plaintext).await
}

/// `DELETE /api/v1/{section}/{name}`
pub async fn delete(
    State(admin): State<Admin>,
    headers: HeaderMap,
    Path((name, row)): Path<(String, String)>,
) -> Response {
    let (section, db) = match open(&admin, &headers, &name) {
        Ok(opened) => opened,
        Err(r) => return r.into_response(),
    };
    write(&db, Change::Delete(section, row), None).await
}

async fn write(db: &super::source::Database, change: Change, plaintext_key: Option<String>) -> Response {
    match db.store.write(change).await {
        Ok(version) => {
            db.announce(version).await;
            let mut body = json!({"version": version});
            if let Some(key) = plaintext_key {
                body["key"] = key.into();
            }
            Json(body).into_response()
        }
        Err(e) => store_error(&e),
    }
}

fn store_error(e: &StoreError) -> Response {
    store_reject(e).into_response()
}

fn store_reject(e: &StoreError) -> Reject {
    match e {
        StoreError::Invalid(problems) => {
            let list: Vec<Value> = problems.iter().map(|p| json!({"path": p.path, "message": p.message})).collect();
            Reject(StatusCode::BAD_REQUEST, json!({"error": "the change would not be servable", "problems": list}))
        }
        StoreError::NoMasterKey => Reject(StatusCode::BAD_REQUEST, json!({"error": e.to_string()})),
        StoreError::Conflict(_) => Reject(StatusCode::CONFLICT, json!({"error": e.to_string()})),
        StoreError::NotFound(_) => Reject(StatusCode::NOT_FOUND, json!({"error": e.to_string()})),
        _ => {
            tracing::error!("configuration store: {e}");
            Reject(StatusCode::SERVICE_UNAVAILABLE, json!({"error": "configuration store unavailable"}))
        }
    }
}

/// The body as a resource named `path_name` when given; a generated key's plaintext for
/// `POST /keys` without a digest.
fn parse(section: Section, body: &[u8], path_name: Option<&str>) -> Result<(Resource, Option<String>), Reject> {
    let named = |given: &mut String| {
        if let Some(n) = path_name {
            *given = n.to_string();
        }
    };
    let resource = match section {
        Section::Providers => entry(body, |p: &mut RawProvider| named(&mut p.name)).map(Resource::Provider)?,
        Section::Models => entry(body, |m: &mut RawModel| named(&mut m.name)).map(Resource::Model)?,
        Section::Groups => entry(body, |g: &mut RawGroup| named(&mut g.name)).map(Resource::Group)?,
        Section::McpServers => entry(body, |m: &mut RawMcpServer| named(&mut m.name)).map(Resource::McpServer)?,
        Section::A2aAgents => entry(body, |a: &mut RawA2aAgent| named(&mut a.name)).map(Resource::A2aAgent)?,
        Section::Guardrails => entry(body, |g: &mut RawGuardrail| named(&mut g.name)).map(Resource::Guardrail)?,
        Section::Aliases => {
            let mut a: AliasBody = entry(body, |a: &mut AliasBody| named(&mut a.name))?;
            Resource::Alias { name: std::mem::take(&mut a.name), model: a.model }
        }
        Section::Pricing => {
            let p: PriceBody = entry(body, |p: &mut PriceBody| named(&mut p.model))?;
            let price = RawPrice {
                input_per_mtok: p.input_per_mtok,
                output_per_mtok: p.output_per_mtok,
                cached_input_per_mtok: p.cached_input_per_mtok,
            };
            Resource::Price { model: p.model, price }
        }
        Section::Keys => return key(body, named),
    };
    Ok((resource, None))
}

/// The body as a `T`, then `name` applied to it (the path's name wins over the body's).
fn entry<T: serde::de::DeserializeOwned>(body: &[u8], name: impl FnOnce(&mut T)) -> Result<T, Reject> {
    let mut t: T = serde_json::from_slice(body).map_err(bad_body)?;
    name(&mut t);
    Ok(t)
}

fn bad_body(e: serde_json::Error) -> Reject {
    Reject(StatusCode::BAD_REQUEST, json!({"error": format!("body: {e}")}))
}

/// A key's body; without a `digest` the key is generated and its plaintext returned once.
fn key(body: &[u8], named: impl FnOnce(&mut String)) -> Result<(Resource, Option<String>), Reject> {
    let mut v: Value = serde_json::from_slice(body).map_err(bad_body)?;
    let mut plaintext = None;
    if v.get("digest").is_none() {
        let (key, digest) = crate::cli::new_key();
        if let Some(o) = v.as_object_mut() {
            o.insert("digest".into(), digest.into());
        }
        plaintext = Some(key);
    }
    let mut k: RawKey = serde_json::from_value(v).map_err(bad_body)?;
    named(&mut k.name);
    Ok((Resource::Key(k), plaintext))
}
