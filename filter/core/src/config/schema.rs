//! JSON Schemas of the raw config types (feature `schema`), for the sidecar's OpenAPI document
//! of the admin API: what is written by hand where the derive cannot see what deserialisation
//! really accepts. A schema must never be stricter than the server: a client generated from
//! it would refuse what the server serves, and an API fuzzer sending schema-invalid data
//! expects a 4xx for it.

use std::borrow::Cow;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};

use super::raw::{EndpointObject, RawEndpoint};

impl JsonSchema for RawEndpoint {
    fn schema_name() -> Cow<'static, str> {
        "RawEndpoint".into()
    }

    /// Either form `Deserialize` takes: a `host:port` string or the object.
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let object = EndpointObject::json_schema(generator);
        json_schema!({
            "description": "One pool endpoint: `\"host:port\"`, or an object naming its KV-event sockets too.",
            "anyOf": [
                { "type": "string", "description": "`host:port` of the replica's HTTP API." },
                object
            ]
        })
    }
}

/// `RawKey`'s schema without `digest` among the required properties: the admin API's
/// `POST`/`PUT /api/v1/keys` generate the key when the body has no digest (a configuration
/// file still needs one, which `ferrogate check` reports).
pub(super) fn digest_optional(schema: &mut Schema) {
    if let Some(required) = schema.get_mut("required").and_then(|r| r.as_array_mut()) {
        required.retain(|field| field != "digest");
    }
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
