//! The request URI as Go's `net/url` holds it, for `get_uri` / `set_uri`: host-go answers
//! `u.EscapedPath()` (`""` → `/`) plus `?` and `RawQuery` when the query is present (even
//! empty: Go's `ForceQuery`), and `set_uri` parses with `url.ParseRequestURI`.

/// Path (as received or set, still escaped) and raw query (`Some("")` for a bare `?`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RequestUri {
    /// The escaped path (Go's `RawPath`, or what the client sent).
    pub(crate) path: String,
    /// The raw query without `?`; `None` when there was no `?`.
    pub(crate) query: Option<String>,
}

impl RequestUri {
    /// From an `http` URI (origin or absolute form).
    pub(crate) fn from_http(uri: &http::Uri) -> RequestUri {
        let path = uri.path_and_query().map(|pq| pq.path()).unwrap_or("").to_string();
        RequestUri { path, query: uri.query().map(str::to_string) }
    }

    /// What `get_uri` returns.
    pub(crate) fn to_go_string(&self) -> String {
        let mut out = escaped_path(&self.path);
        if out.is_empty() {
            out.push('/');
        }
        if let Some(q) = &self.query {
            out.push('?');
            out.push_str(q);
        }
        out
    }

    /// `set_uri`: host-go's `SetURI` (empty ⇒ `/`, else `url.ParseRequestURI`, whose error
    /// text becomes the trap message).
    pub(crate) fn parse_go(uri: &str) -> Result<RequestUri, String> {
        if uri.is_empty() {
            return Ok(RequestUri { path: "/".into(), query: None });
        }
        let fail = |why: &str| format!("parse {uri:?}: {why}");
        if uri.bytes().any(|b| b < 0x20 || b == 0x7f) {
            return Err(fail("net/url: invalid control character in URL"));
        }
        let rest = if uri.starts_with('/') {
            uri
        } else {
            absolute_rest(uri).ok_or_else(|| fail("invalid URI for request"))?
        };
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q.to_string())),
            None => (rest, None),
        };
        if let Some(escape) = bad_escape(path) {
            return Err(fail(&format!("invalid URL escape {escape:?}")));
        }
        Ok(RequestUri { path: path.to_string(), query })
    }
}

/// The part after `scheme://authority` of an absolute URI (`""` when it has no path), or
/// `None` when `uri` has no valid scheme (Go: "invalid URI for request").
fn absolute_rest(uri: &str) -> Option<&str> {
    let (scheme, rest) = uri.split_once(':')?;
    let mut chars = scheme.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) {
        return None;
    }
    let Some(after) = rest.strip_prefix("//") else {
        // `mailto:x`: Go's Opaque form, no path.
        return Some("");
    };
    let end = after.find(['/', '?']).unwrap_or(after.len());
    Some(&after[end..])
}

/// The first malformed `%` escape of `s`, as Go quotes it.
fn bad_escape(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let ok = bytes.get(i + 1..i + 3).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit));
            if !ok {
                let end = (i + 3).min(bytes.len());
                return Some(String::from_utf8_lossy(&bytes[i..end]).into_owned());
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    None
}

/// Go's `URL.EscapedPath`: the raw path when it is a valid encoding, else the decoded path
/// escaped again (`/a{b` → `/a%7Bb`).
pub(crate) fn escaped_path(raw: &str) -> String {
    if raw == "*" || valid_encoded(raw) || bad_escape(raw).is_some() {
        return raw.to_string();
    }
    escape_path(&unescape(raw))
}

/// Go's `validEncoded(s, encodePath)`.
fn valid_encoded(s: &str) -> bool {
    s.bytes().all(|b| b"!$&'()*+,;=:@[]%".contains(&b) || !should_escape_in_path(b))
}

/// Go's `shouldEscape(c, encodePath)`.
fn should_escape_in_path(b: u8) -> bool {
    if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
        return false;
    }
    !b"$&+,/:;=@".contains(&b)
}

fn unescape(s: &str) -> Vec<u8> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

fn escape_path(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if should_escape_in_path(b) {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(char::from(b));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_uri_follows_go() {
        let u = RequestUri::from_http(&"/a%2Fb?x=1".parse().unwrap());
        assert_eq!(u.to_go_string(), "/a%2Fb?x=1");
        let u = RequestUri::from_http(&"/a?".parse().unwrap());
        assert_eq!(u.to_go_string(), "/a?");
        assert_eq!(escaped_path("/a{b"), "/a%7Bb");
        assert_eq!(escaped_path("/a b"), "/a%20b");
    }

    #[test]
    fn set_uri_follows_parse_request_uri() {
        assert_eq!(RequestUri::parse_go("").unwrap().to_go_string(), "/");
        assert_eq!(RequestUri::parse_go("/p?q=1").unwrap().query.as_deref(), Some("q=1"));
        assert_eq!(RequestUri::parse_go("http://h/x?y").unwrap().to_go_string(), "/x?y");
        assert!(RequestUri::parse_go("relative").unwrap_err().contains("invalid URI for request"));
        assert!(RequestUri::parse_go("/%zz").unwrap_err().contains("invalid URL escape \"%zz\""));
    }
}
