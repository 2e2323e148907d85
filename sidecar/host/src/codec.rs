//! proxy-wasm pairs serialization (ABI 0.2.1 "Serialization"): header maps cross the
//! boundary as `u32 count, count × (u32 key_len, u32 value_len), then each key and value
//! followed by a NUL byte`, all little-endian. Mirrors the Rust SDK's (de)serializer.

use crate::Headers;

/// Envoy/cpp-host refuse pairs blobs over 1 MiB or with more than 1024 entries
/// (`limits.h`); such input deserializes to nothing.
const MAX_PAIRS_BYTES: usize = 1 << 20;
const MAX_PAIRS: usize = 1024;

/// Serializes pairs in the SDK's format (`[0,0,0,0]` for an empty map). This runs for every
/// header map a filter reads: one pass sizes the buffer, a second fills it in place (the
/// zero-filled buffer already holds every NUL terminator), with no growth checks per piece.
pub(crate) fn serialize_pairs<'a, I>(pairs: I) -> Vec<u8>
where
    I: IntoIterator<Item = (&'a str, &'a [u8])>,
    I::IntoIter: Clone,
{
    let pairs = pairs.into_iter();
    let (count, data) = pairs.clone().fold((0, 0), |(n, size), (k, v)| (n + 1, size + k.len() + v.len() + 2));
    let table = 4 + 8 * count;
    let mut out = vec![0u8; table + data];
    let (head, body) = out.split_at_mut(table);
    let (count_field, sizes) = head.split_at_mut(4);
    count_field.copy_from_slice(&len32(count).to_le_bytes());
    let mut at = 0;
    for ((k, v), slot) in pairs.zip(sizes.chunks_exact_mut(8)) {
        let (key_len, value_len) = slot.split_at_mut(4);
        key_len.copy_from_slice(&len32(k.len()).to_le_bytes());
        value_len.copy_from_slice(&len32(v.len()).to_le_bytes());
        for part in [k.as_bytes(), v] {
            if let Some(dest) = body.get_mut(at..at + part.len()) {
                dest.copy_from_slice(part);
            }
            at += part.len() + 1;
        }
    }
    out
}

/// Serializes a header list.
pub(crate) fn serialize_headers(headers: &Headers) -> Vec<u8> {
    serialize_pairs(headers.iter())
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn read_u32(bytes: &[u8], at: usize) -> Option<usize> {
    let raw: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    usize::try_from(u32::from_le_bytes(raw)).ok()
}

/// Deserializes pairs; `None` when the blob is malformed or over Envoy's limits. Empty
/// input is an empty map (the SDK sends either `[]` or `[0,0,0,0]`).
pub(crate) fn deserialize_pairs(bytes: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    if bytes.is_empty() {
        return Some(Vec::new());
    }
    if bytes.len() > MAX_PAIRS_BYTES {
        return None;
    }
    let count = read_u32(bytes, 0)?;
    if count > MAX_PAIRS {
        return None;
    }
    let mut data = 4usize.checked_add(count.checked_mul(8)?)?;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let key_len = read_u32(bytes, 4 + i * 8)?;
        let value_len = read_u32(bytes, 8 + i * 8)?;
        let key = bytes.get(data..data.checked_add(key_len)?)?.to_vec();
        data = data.checked_add(key_len + 1)?;
        let value = bytes.get(data..data.checked_add(value_len)?)?.to_vec();
        data = data.checked_add(value_len + 1)?;
        out.push((key, value));
    }
    Some(out)
}

/// Deserializes into a header list, lower-casing keys like Envoy's `LowerCaseString`.
pub(crate) fn deserialize_headers(bytes: &[u8]) -> Option<Headers> {
    let pairs = deserialize_pairs(bytes)?;
    let mut headers = Headers::new();
    for (k, v) in pairs {
        headers.add(&String::from_utf8_lossy(&k), v);
    }
    Some(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Rust SDK's own fixture (proxy-wasm 0.2.5 `hostcalls.rs` tests).
    #[rustfmt::skip]
    static SERIALIZED_MAP: &[u8] = &[
        // num entries
        4, 0, 0, 0,
        // len (":method", "GET")
        7, 0, 0, 0, 3, 0, 0, 0,
        // len (":path", "/bytes/1")
        5, 0, 0, 0, 8, 0, 0, 0,
        // len (":authority", "httpbin.org")
        10, 0, 0, 0, 11, 0, 0, 0,
        // len ("Powered-By", "proxy-wasm")
        10, 0, 0, 0, 10, 0, 0, 0,
        // ":method"
        58, 109, 101, 116, 104, 111, 100, 0,
        // "GET"
        71, 69, 84, 0,
        // ":path"
        58, 112, 97, 116, 104, 0,
        // "/bytes/1"
        47, 98, 121, 116, 101, 115, 47, 49, 0,
        // ":authority"
        58, 97, 117, 116, 104, 111, 114, 105, 116, 121, 0,
        // "httpbin.org"
        104, 116, 116, 112, 98, 105, 110, 46, 111, 114, 103, 0,
        // "Powered-By"
        80, 111, 119, 101, 114, 101, 100, 45, 66, 121, 0,
        // "proxy-wasm"
        112, 114, 111, 120, 121, 45, 119, 97, 115, 109, 0,
    ];

    static MAP: &[(&str, &str)] =
        &[(":method", "GET"), (":path", "/bytes/1"), (":authority", "httpbin.org"), ("Powered-By", "proxy-wasm")];

    #[test]
    fn serializes_sdk_vector() {
        let out = serialize_pairs(MAP.iter().map(|(k, v)| (*k, v.as_bytes())));
        assert_eq!(out, SERIALIZED_MAP);
    }

    #[test]
    fn deserializes_sdk_vector() {
        let pairs = deserialize_pairs(SERIALIZED_MAP).unwrap();
        let expect: Vec<(Vec<u8>, Vec<u8>)> =
            MAP.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())).collect();
        assert_eq!(pairs, expect);
        let headers = deserialize_headers(SERIALIZED_MAP).unwrap();
        assert_eq!(headers.get("powered-by"), Some(&b"proxy-wasm"[..]));
    }

    #[test]
    fn round_trips_empty_and_long_pieces() {
        let long = vec![b'v'; 70_000];
        let pairs: Vec<(&str, &[u8])> = vec![("", b""), ("k", &long), (":path", b"/"), ("x", b"")];
        let out = serialize_pairs(pairs.iter().copied());
        let back = deserialize_pairs(&out).unwrap();
        let expect: Vec<(Vec<u8>, Vec<u8>)> = pairs.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.to_vec())).collect();
        assert_eq!(back, expect);
        assert_eq!(out.len(), 4 + 8 * 4 + 70_000 + 1 + 6 + 1 + 8);
    }

    #[test]
    fn empty_forms() {
        assert_eq!(serialize_pairs(std::iter::empty()), [0, 0, 0, 0]);
        assert_eq!(deserialize_pairs(&[]).unwrap(), Vec::new());
        assert_eq!(deserialize_pairs(&[0, 0, 0, 0]).unwrap(), Vec::new());
    }

    #[test]
    fn malformed_is_rejected() {
        assert!(deserialize_pairs(&SERIALIZED_MAP[..SERIALIZED_MAP.len() - 3]).is_none());
        assert!(deserialize_pairs(&[1, 0]).is_none());
        assert!(deserialize_pairs(&[255, 255, 255, 255]).is_none());
    }
}
