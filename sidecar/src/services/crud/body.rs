//! The body of a configuration write: a JSON object of the section's documented schema,
//! without NUL characters, then the section's type (the path's name wins over the body's).

use axum::http::StatusCode;
use ferrogate_core::config::RawPrice;
use serde::Deserialize;
use serde_json::Value;

use super::Reject;
use crate::services::openapi;
use crate::services::pg::{Resource, Section};

/// An alias as the API takes it.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AliasBody {
    /// The alias clients may send as `"model"`.
    name: String,
    /// The public model it stands for.
    model: String,
}

/// A price as the API takes it: the upstream model id plus the config's price fields.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PriceBody {
    /// The upstream model: `provider/model`, or a model id every provider shares.
    model: String,
    /// USD per million prompt tokens.
    input_per_mtok: f64,
    /// USD per million completion tokens.
    output_per_mtok: f64,
    /// USD per million prompt tokens served from the provider's prompt cache.
    #[serde(default)]
    cached_input_per_mtok: Option<f64>,
}

/// The body as a resource named `path_name` when given (the path's name wins over the
/// body's); a generated key's plaintext for a key without a digest. The body must be a JSON
/// object of the section's documented schema (`openapi::section_body`), then of its type.
pub(super) fn parse(
    section: Section,
    body: &[u8],
    path_name: Option<&str>,
) -> Result<(Resource, Option<String>), Reject> {
    let mut v = object(body)?;
    let mut plaintext = None;
    if let Some(o) = v.as_object_mut() {
        if let Some(name) = path_name {
            o.insert(openapi::name_member(section).into(), name.into());
        }
        // Without a digest the key is generated, and its plaintext answered once.
        if section == Section::Keys && !o.contains_key("digest") {
            let (key, digest) = crate::cli::new_key();
            o.insert("digest".into(), digest.into());
            plaintext = Some(key);
        }
    }
    no_nul(&v)?;
    openapi::check(openapi::section_body(section), &v)
        .map_err(|why| Reject::new(StatusCode::BAD_REQUEST, format!("body: {why}")))?;
    let resource = match section {
        Section::Providers => entry(v).map(Resource::Provider)?,
        Section::Models => entry(v).map(Resource::Model)?,
        Section::Groups => entry(v).map(Resource::Group)?,
        Section::Keys => entry(v).map(Resource::Key)?,
        Section::McpServers => entry(v).map(Resource::McpServer)?,
        Section::A2aAgents => entry(v).map(Resource::A2aAgent)?,
        Section::Guardrails => entry(v).map(Resource::Guardrail)?,
        Section::Aliases => {
            let a: AliasBody = entry(v)?;
            Resource::Alias { name: a.name, model: a.model }
        }
        Section::Pricing => {
            let p: PriceBody = entry(v)?;
            let price = RawPrice {
                input_per_mtok: p.input_per_mtok,
                output_per_mtok: p.output_per_mtok,
                cached_input_per_mtok: p.cached_input_per_mtok,
            };
            Resource::Price { model: p.model, price }
        }
    };
    Ok((resource, plaintext))
}

/// The body as a JSON object without NUL characters (serde would take an array for a struct,
/// the database refuses NUL).
fn object(body: &[u8]) -> Result<Value, Reject> {
    let v: Value = serde_json::from_slice(body).map_err(bad_body)?;
    if !v.is_object() {
        return Err(Reject::new(StatusCode::BAD_REQUEST, "body must be a JSON object"));
    }
    Ok(v)
}

/// Refuses a value holding U+0000 in any string or member name.
fn no_nul(v: &Value) -> Result<(), Reject> {
    let nul = |s: &str| s.contains('\0');
    let found = match v {
        Value::String(s) => nul(s),
        Value::Array(items) => return items.iter().try_for_each(no_nul),
        Value::Object(map) => {
            if map.keys().any(|k| nul(k)) {
                true
            } else {
                return map.values().try_for_each(no_nul);
            }
        }
        _ => false,
    };
    if found {
        return Err(Reject::new(
            StatusCode::BAD_REQUEST,
            "body: a string holds U+0000 (NUL), which names and values may not",
        ));
    }
    Ok(())
}

/// The object as a `T`.
fn entry<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, Reject> {
    serde_json::from_value(v).map_err(bad_body)
}

fn bad_body(e: serde_json::Error) -> Reject {
    Reject::new(StatusCode::BAD_REQUEST, format!("body: {e}"))
}
