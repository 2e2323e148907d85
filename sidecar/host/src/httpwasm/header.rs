//! Go's `http.Header` as host-go sees it: keys in canonical MIME form (`Content-Type`), kept
//! sorted the way host-go sorts names before lower-casing them, values as raw bytes (Go
//! strings are bytes), and keys Go would not canonicalise (`Trailer:x`, names with spaces)
//! stored as given. Conversion to and from [`http::HeaderMap`] happens at the edges only.

use std::collections::BTreeMap;

use http::{HeaderMap, HeaderName, HeaderValue};

/// A Go-style header multimap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct GoHeader {
    entries: BTreeMap<String, Vec<Vec<u8>>>,
}

/// Go's `textproto.CanonicalMIMEHeaderKey`: upper-case the first letter and every letter after
/// a dash, lower-case the rest; a key with a byte that is not a token character (or a space)
/// is returned unchanged, as Go does.
pub fn canonical_key(name: &str) -> String {
    if !name.bytes().all(is_token_byte) {
        return name.to_string();
    }
    let mut upper = true;
    name.chars()
        .map(|c| {
            let out = if upper { c.to_ascii_uppercase() } else { c.to_ascii_lowercase() };
            upper = c == '-';
            out
        })
        .collect()
}

/// RFC 7230 `tchar`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl GoHeader {
    /// From a hyper header map (names arrive lower-cased; Go would canonicalise them).
    pub(crate) fn from_map(map: &HeaderMap) -> GoHeader {
        let mut header = GoHeader::default();
        for (name, value) in map {
            header.add(name.as_str(), value.as_bytes());
        }
        header
    }

    /// `Header.Values(name)`.
    pub(crate) fn values(&self, name: &str) -> Vec<Vec<u8>> {
        self.entries.get(&canonical_key(name)).cloned().unwrap_or_default()
    }

    /// `Header.Set(name, value)`: replaces every value.
    pub(crate) fn set(&mut self, name: &str, value: &[u8]) {
        self.entries.insert(canonical_key(name), vec![value.to_vec()]);
    }

    /// `Header.Add(name, value)`: appends one value.
    pub(crate) fn add(&mut self, name: &str, value: &[u8]) {
        self.entries.entry(canonical_key(name)).or_default().push(value.to_vec());
    }

    /// `Header.Del(name)`.
    pub(crate) fn remove(&mut self, name: &str) {
        self.entries.remove(&canonical_key(name));
    }

    /// Keys in Go's sorted order, as stored (canonical).
    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Every (key, values) pair, sorted by key.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &[Vec<u8>])> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_slice()))
    }

    /// Adds every value of `other` (Go's reverse proxy `copyHeader`, which uses `Add`).
    pub(crate) fn extend_from(&mut self, other: &GoHeader) {
        for (key, values) in &other.entries {
            self.entries.entry(key.clone()).or_default().extend(values.iter().cloned());
        }
    }

    /// The `http` form of the headers whose keys pass `keep`. A name or value Go would accept
    /// into its map but `http` refuses (a space in a name, a newline in a value) is dropped
    /// with a warning: Go's transport would refuse to send it as well.
    pub(crate) fn to_map(&self, keep: impl Fn(&str) -> bool) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (key, values) in self.iter().filter(|(k, _)| keep(k)) {
            let Ok(name) = HeaderName::from_bytes(key.as_bytes()) else {
                log::warn!("http-wasm: dropping header with invalid name {key:?}");
                continue;
            };
            for value in values {
                match HeaderValue::from_bytes(value) {
                    Ok(v) => {
                        map.append(name.clone(), v);
                    }
                    Err(_) => log::warn!("http-wasm: dropping invalid value of header {key:?}"),
                }
            }
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_keys_follow_go() {
        assert_eq!(canonical_key("content-type"), "Content-Type");
        assert_eq!(canonical_key("X-FOO-bar"), "X-Foo-Bar");
        assert_eq!(canonical_key("Trailer:grpc-status"), "Trailer:grpc-status");
        assert_eq!(canonical_key("bad key"), "bad key");
    }
}
