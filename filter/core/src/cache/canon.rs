//! The canonical text of a JSON value, which cache keys digest: object keys sorted by their
//! bytes, no whitespace, strings escaped and numbers printed as `serde_json` prints them. It
//! does not depend on the order a client wrote its keys in, nor on whether `serde_json` was
//! built to keep that order (another crate of the build may turn that feature on).

use serde_json::Value;

/// Appends the canonical text of `v` to `out`. Recursion is bounded by the parser's own depth
/// limit (values come from `serde_json::from_slice`).
pub(super) fn write(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                // Writing a string into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut *out, key.as_str());
                out.push(b':');
                write(out, value);
            }
            out.push(b'}');
        }
        other => scalar(out, other),
    }
}

/// A string, number, boolean or null, as `serde_json` writes it (deterministic for these).
fn scalar(out: &mut Vec<u8>, v: &Value) {
    // Writing a scalar into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, v);
}
