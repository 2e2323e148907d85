//! Small readers for decoding a JSON document by hand: every value is checked with the path of
//! the parameter it came from, so a refusal names exactly what the client sent.

use serde_json::{Map, Value};

use super::TranslateError;

/// The parameter at `path` has the wrong shape.
pub(super) fn invalid(path: &str, expected: &str) -> TranslateError {
    TranslateError::Invalid { param: path.to_string(), message: format!("expected {expected}") }
}

/// The parameter at `path` has no counterpart in the target dialect.
pub(super) fn unsupported(path: &str) -> TranslateError {
    TranslateError::Unsupported { param: path.to_string() }
}

/// Parses a request or response body that must be one JSON object.
pub(super) fn object(body: &[u8]) -> Result<Map<String, Value>, TranslateError> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(invalid("body", "a JSON object")),
        Err(e) => Err(TranslateError::Json(e.to_string())),
    }
}

/// A string.
pub(super) fn string(path: &str, v: Value) -> Result<String, TranslateError> {
    match v {
        Value::String(s) => Ok(s),
        _ => Err(invalid(path, "a string")),
    }
}

/// A string field of `map`, if present and not null.
pub(super) fn opt_string(
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<String>, TranslateError> {
    match map.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => string(&format!("{path}.{key}"), v).map(Some),
    }
}

/// A non-negative integer.
pub(super) fn uint(path: &str, v: &Value) -> Result<u64, TranslateError> {
    v.as_u64().ok_or_else(|| invalid(path, "a non-negative integer"))
}

/// A number.
pub(super) fn number(path: &str, v: &Value) -> Result<f64, TranslateError> {
    v.as_f64().ok_or_else(|| invalid(path, "a number"))
}

/// A boolean.
pub(super) fn boolean(path: &str, v: &Value) -> Result<bool, TranslateError> {
    v.as_bool().ok_or_else(|| invalid(path, "true or false"))
}

/// An array.
pub(super) fn array(path: &str, v: Value) -> Result<Vec<Value>, TranslateError> {
    match v {
        Value::Array(items) => Ok(items),
        _ => Err(invalid(path, "an array")),
    }
}

/// An object.
pub(super) fn map(path: &str, v: Value) -> Result<Map<String, Value>, TranslateError> {
    match v {
        Value::Object(m) => Ok(m),
        _ => Err(invalid(path, "an object")),
    }
}

/// Refuses whatever keys of `map` are left once the known ones were taken out, naming the
/// first (in document order is not guaranteed by the map; any one is named).
pub(super) fn no_more(map: &Map<String, Value>, path: &str) -> Result<(), TranslateError> {
    match map.iter().find(|(_, v)| !v.is_null()) {
        Some((k, _)) if path.is_empty() => Err(unsupported(k)),
        Some((k, _)) => Err(unsupported(&format!("{path}.{k}"))),
        None => Ok(()),
    }
}

/// A `data:<media type>;base64,<data>` URL split into its media type and data.
pub(super) fn data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let media = meta.strip_suffix(";base64")?;
    Some((media, data))
}
