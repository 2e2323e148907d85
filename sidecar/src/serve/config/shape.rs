//! Reading a configuration document into the core's raw types, reporting every shape problem.
//!
//! A typed `serde` pass stops at the first unknown key. So that `ferrogate check` (and a
//! failed start) can list every problem in one run, the document is first read into a generic
//! tree; each unknown key found by the typed pass is recorded with its path and taken out of
//! the tree, and the pass is repeated until the tree fits. Any other shape error (a string
//! where a number belongs, a missing required key) is recorded and ends the reading: without
//! a typed document the semantic checks cannot run.

use ferrogate_core::config::{Problem, RawConfig};
use serde_json::Value;

/// Upper bound on unknown keys taken out of one document (each costs a typed pass).
const MAX_UNKNOWN_KEYS: usize = 200;

/// What reading a document gave: the raw configuration when its shape is usable (unknown keys
/// removed), and every shape problem found.
pub struct Read {
    /// The document without its unknown keys; `None` when another shape error stopped it.
    pub raw: Option<RawConfig>,
    /// Unknown keys (in key order within each object) and the shape error that ended the
    /// reading, if any, each with its path.
    pub problems: Vec<Problem>,
}

/// Why a document is not YAML/JSON at all.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SyntaxError(String);

/// Parses `text` (YAML, or JSON) and reads it into a [`RawConfig`], collecting shape problems.
///
/// # Errors
/// The text is not a YAML document (the parser's message, with line and column).
pub fn read(text: &str) -> Result<Read, SyntaxError> {
    let mut tree: Value = if text.trim().is_empty() {
        Value::Object(Default::default())
    } else {
        serde_saphyr::from_str(text).map_err(|e| SyntaxError(e.to_string()))?
    };
    if tree.is_null() {
        tree = Value::Object(Default::default());
    }
    let mut problems = Vec::new();
    loop {
        match serde_path_to_error::deserialize::<_, RawConfig>(&tree) {
            Ok(raw) => return Ok(Read { raw: Some(raw), problems }),
            Err(e) => {
                let path = e.path().to_string();
                let message = e.inner().to_string();
                match unknown_key(&message) {
                    Some(key) if problems.len() < MAX_UNKNOWN_KEYS && remove(&mut tree, parent(&path, key), key) => {
                        problems.push(Problem { path: shown(&path), message: unknown_message(key, &message) });
                    }
                    _ => {
                        problems.push(Problem { path: shown(&path), message });
                        return Ok(Read { raw: None, problems });
                    }
                }
            }
        }
    }
}

/// The key named by serde's "unknown field `x`, expected ..." message.
fn unknown_key(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `")?;
    rest.split_once('`').map(|(key, _)| key)
}

/// `unknown key "x" (expected one of: a, b)` from serde's wording.
fn unknown_message(key: &str, serde_message: &str) -> String {
    let expected = serde_message
        .split_once(", expected ")
        .map(|(_, rest)| rest.replace('`', ""))
        .map(|rest| format!(" (expected {rest})"))
        .unwrap_or_default();
    format!("unknown key {key:?}{expected}")
}

/// The object holding an unknown `key`: serde_path_to_error's path ends with the key itself.
fn parent<'a>(path: &'a str, key: &str) -> &'a str {
    match path.strip_suffix(key) {
        Some(rest) => rest.strip_suffix('.').unwrap_or(rest),
        None => path,
    }
}

fn shown(path: &str) -> String {
    match path {
        "" | "." => "(document)".to_string(),
        _ => path.to_string(),
    }
}

/// Removes `key` from the object at `path` (`a.b[2].c`); false when there is no such key.
fn remove(tree: &mut Value, path: &str, key: &str) -> bool {
    let mut at = tree;
    if !matches!(path, "" | ".") {
        for step in steps(path) {
            let next = match step {
                Step::Key(k) => at.get_mut(k),
                Step::Index(i) => at.get_mut(i),
            };
            match next {
                Some(v) => at = v,
                None => return false,
            }
        }
    }
    at.as_object_mut().is_some_and(|o| o.remove(key).is_some())
}

enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// Splits serde_path_to_error's rendering (`models[1].targets[0]`) into steps. Map keys that
/// contain `.` or `[` cannot be told apart from steps; such a key is simply not removed and
/// is reported as the shape error it is.
fn steps(path: &str) -> Vec<Step<'_>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (name, mut rest) = part.split_once('[').map_or((part, ""), |(n, r)| (n, r));
        if !name.is_empty() {
            out.push(Step::Key(name));
        }
        while let Some((index, after)) = rest.split_once(']') {
            if let Ok(i) = index.parse() {
                out.push(Step::Index(i));
            }
            rest = after.strip_prefix('[').unwrap_or(after);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(text: &str) -> Vec<String> {
        read(text).unwrap().problems.iter().map(|p| p.path.clone()).collect()
    }

    #[test]
    fn every_unknown_key_is_reported_with_its_path() {
        let text = "provider: []\nproviders: [{name: a, kind: openai, base_url: 'http://h', apikey: x}]\n\
                    models: [{name: m, targets: [{provider: a, model: x, wieght: 1}], stratgy: x}]\n\
                    keys: [{name: k, digest: d, limits: {rpm: 1}}]\n";
        let read = read(text).unwrap();
        let mut got: Vec<String> = read.problems.iter().map(|p| p.path.clone()).collect();
        got.sort();
        assert_eq!(
            got,
            [
                "keys[0].limits.rpm",
                "models[0].stratgy",
                "models[0].targets[0].wieght",
                "provider",
                "providers[0].apikey"
            ]
        );
        let raw = read.raw.expect("the rest of the document is usable");
        assert_eq!(raw.models[0].targets[0].model, "x");
        assert!(read.problems[0].message.starts_with("unknown key"), "{}", read.problems[0].message);
    }

    #[test]
    fn a_type_error_is_reported_at_its_path_and_ends_the_reading() {
        let r = read("models: [{name: m, targets: [{provider: a, model: x, weight: heavy}]}]\nzz: 1\n").unwrap();
        assert!(r.raw.is_none());
        let last = r.problems.last().unwrap();
        assert_eq!(last.path, "models[0].targets[0].weight", "{last}");
    }

    #[test]
    fn empty_and_null_documents_are_empty_configs() {
        for text in ["", "  \n", "~\n", "{}"] {
            let r = read(text).unwrap();
            assert!(r.problems.is_empty() && r.raw.is_some(), "{text:?}");
        }
    }

    #[test]
    fn json_is_read_too_and_yaml_syntax_errors_are_errors() {
        assert!(paths(r#"{"providers": [], "modles": []}"#) == ["modles"]);
        assert!(read("models: [unclosed\n").is_err());
    }
}
