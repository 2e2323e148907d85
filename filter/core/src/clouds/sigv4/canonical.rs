//! The pieces of SigV4's canonical request, each built the way botocore's `SigV4Auth` builds it
//! (the reference every AWS service accepts): URI, query, headers.

use super::SigV4Error;

/// Headers never signed: hop-by-hop ones a later hop may drop or rewrite, and tracing or
/// client-identity headers that proxies add or change (botocore's list).
const UNSIGNED: [&str; 14] = [
    "baggage",
    "connection",
    "expect",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "traceparent",
    "tracestate",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "x-amzn-trace-id",
];

/// Headers the signer sets itself; a caller's copy is stale (a retry) or forged (a client's).
pub(super) const OWN: [&str; 4] = ["authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"];

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// Appends `text` percent-encoded (upper-case hex, byte by byte of its UTF-8), leaving the
/// unreserved characters `A-Za-z0-9-_.~` and, if `keep_slash`, `/`.
pub(super) fn uri_encode_into(out: &mut String, text: &str, keep_slash: bool) {
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') || (keep_slash && b == b'/') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX_UPPER[usize::from(b >> 4)]));
            out.push(char::from(HEX_UPPER[usize::from(b & 0x0f)]));
        }
    }
}

/// The canonical URI of the path as sent: dot segments and empty segments removed, then
/// percent-encoded once more, so an escaped `%3A` on the wire is signed as `%253A`. Every
/// service but S3 expects this second encoding.
pub(super) fn canonical_uri(path: &str) -> Result<String, SigV4Error> {
    if path.contains(['?', '#']) {
        return Err(SigV4Error::PathWithQuery);
    }
    if path.is_empty() {
        return Ok("/".to_owned());
    }
    if !path.starts_with('/') {
        return Err(SigV4Error::PathNotAbsolute);
    }
    let mut kept: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                kept.pop();
            }
            _ => kept.push(segment),
        }
    }
    let mut normal = String::with_capacity(path.len() + 1);
    normal.push('/');
    normal.push_str(&kept.join("/"));
    if path.ends_with('/') && !kept.is_empty() {
        normal.push('/');
    }
    let mut out = String::with_capacity(normal.len() + 16);
    uri_encode_into(&mut out, &normal, true);
    Ok(out)
}

/// The canonical query: each name and value percent-encoded, the pairs sorted by encoded name
/// then encoded value, joined `name=value&…`. Also the form to send, so the wire and the
/// signature agree.
pub fn canonical_query(pairs: &[(&str, &str)]) -> String {
    let mut encoded: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| {
            let (mut ek, mut ev) = (String::new(), String::new());
            uri_encode_into(&mut ek, k, false);
            uri_encode_into(&mut ev, v, false);
            (ek, ev)
        })
        .collect();
    encoded.sort();
    let joined: Vec<String> = encoded.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    joined.join("&")
}

/// Canonical headers (`name:value\n` each) and the signed-header list (`a;b;c`): names
/// lower-cased and sorted, the values of a repeated name joined by `,` in their order.
pub(super) fn canonical_headers(headers: &[(String, String)]) -> (String, String) {
    let mut sorted: Vec<&(String, String)> = headers.iter().collect();
    // Stable: repeated names keep their order.
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let (mut block, mut names) = (String::new(), Vec::<&str>::new());
    for (name, value) in sorted {
        if names.last() == Some(&name.as_str()) {
            block.pop(); // the '\n' of the previous value of this name
            block.push(',');
        } else {
            names.push(name);
            block.push_str(name);
            block.push(':');
        }
        block.push_str(&trim_all(value));
        block.push('\n');
    }
    (block, names.join(";"))
}

/// Lower-cases `name` and tells whether to sign it: never the unsigned list nor the signer's
/// own headers. A name that is empty, not visible ASCII, or has a `:` (an HTTP/2 pseudo-header)
/// is refused.
pub(super) fn header_to_sign(name: &str) -> Result<Option<String>, SigV4Error> {
    let valid = !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic() && b != b':');
    if !valid {
        return Err(SigV4Error::InvalidHeaderName(name.chars().take(64).collect()));
    }
    let lower = name.to_ascii_lowercase();
    let skip = UNSIGNED.contains(&lower.as_str()) || OWN.contains(&lower.as_str());
    Ok((!skip).then_some(lower))
}

/// `value` trimmed, inner runs of whitespace collapsed to one space: Python's `' '.join(v.split())`
/// as botocore does it, whose whitespace is Unicode's plus the separators U+001C..U+001F.
fn trim_all(value: &str) -> String {
    let ws = |c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c);
    value.split(ws).filter(|s| !s.is_empty()).collect::<Vec<_>>().join(" ")
}
