//! Conversions between hyper's header types and the filter's header maps.
//!
//! The filter sees headers the way Envoy's codec presents them: pseudo-headers first
//! (`:method`, `:scheme`, `:authority`, `:path` on requests; `:status` on responses), names
//! lower-cased, hop-by-hop headers already removed, and `x-request-id` present (Envoy's
//! connection manager generates one when the client sent none).

use ferrogate_host::Headers;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Method, StatusCode};

/// Connection-scoped headers a proxy must not forward (RFC 9110 §7.6.1).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
    "proxy-authenticate",
];

fn is_hop_by_hop(name: &str) -> bool {
    HOP_BY_HOP.contains(&name)
}

/// Builds the filter's view of a downstream request head.
pub fn request_to_filter(parts: &http::request::Parts, request_id: impl FnOnce() -> String) -> Headers {
    let mut out = Headers::new();
    out.add(":method", parts.method.as_str());
    out.add(":scheme", parts.uri.scheme_str().unwrap_or("http"));
    let authority = parts
        .uri
        .authority()
        .map(|a| a.as_str().as_bytes().to_vec())
        .or_else(|| parts.headers.get(http::header::HOST).map(|h| h.as_bytes().to_vec()))
        .unwrap_or_default();
    out.add(":authority", authority);
    let path = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    out.add(":path", path);
    append_regular(&mut out, &parts.headers, &["host"]);
    if out.get("x-request-id").is_none() {
        out.add("x-request-id", request_id());
    }
    if out.get("x-forwarded-proto").is_none() {
        out.add("x-forwarded-proto", parts.uri.scheme_str().unwrap_or("http"));
    }
    out
}

/// Builds the filter's view of an upstream response head. Headers only a host may give the
/// filter ([`ferrogate_core::headers::HOST_ONLY`]: an abandoned answer's mark, the endpoint
/// that served) are never an upstream's to set: dropped.
pub fn response_to_filter(status: StatusCode, headers: &HeaderMap) -> Headers {
    let mut out = Headers::new();
    out.add(":status", status.as_str());
    append_regular(&mut out, headers, &ferrogate_core::headers::HOST_ONLY);
    out
}

/// Builds the filter's view of trailers (either direction).
pub fn trailers_to_filter(trailers: &HeaderMap) -> Headers {
    let mut out = Headers::new();
    append_regular(&mut out, trailers, &[]);
    out
}

fn append_regular(out: &mut Headers, headers: &HeaderMap, skip: &[&str]) {
    for (name, value) in headers {
        let name = name.as_str();
        if is_hop_by_hop(name) || skip.contains(&name) {
            continue;
        }
        out.add(name, value.as_bytes());
    }
}

/// Splits filter headers into the regular header map, dropping pseudo-headers and any
/// header hyper would reject (the filter may write arbitrary bytes).
pub fn to_header_map(headers: &Headers) -> HeaderMap {
    let mut map = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers.iter() {
        if name.starts_with(':') || is_hop_by_hop(name) {
            continue;
        }
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_bytes(value)) else {
            tracing::warn!(header = name, "dropping a header that is not valid HTTP");
            continue;
        };
        map.append(name, value);
    }
    map
}

/// Reads `:status` from filter response headers; a missing or bad value is a 502, as a
/// response without a status cannot be sent.
pub fn status_of(headers: &Headers) -> StatusCode {
    headers
        .get_str(":status")
        .and_then(|s| s.parse::<u16>().ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::BAD_GATEWAY)
}

/// Reads `:method` from filter request headers.
pub fn method_of(headers: &Headers) -> Method {
    headers.get(":method").and_then(|m| Method::from_bytes(m).ok()).unwrap_or(Method::GET)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_view_has_pseudo_headers_first_and_no_hop_by_hop() {
        let req = http::Request::builder()
            .method("POST")
            .uri("/v1/chat/completions?x=1")
            .header("host", "gw.local:8080")
            .header("connection", "keep-alive")
            .header("Content-Type", "application/json")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let h = request_to_filter(&parts, || "rid".into());
        let names: Vec<&str> = h.iter().map(|(k, _)| k).collect();
        assert_eq!(&names[..4], [":method", ":scheme", ":authority", ":path"]);
        assert_eq!(h.get_str(":authority"), Some("gw.local:8080"));
        assert_eq!(h.get_str(":path"), Some("/v1/chat/completions?x=1"));
        assert_eq!(h.get_str("content-type"), Some("application/json"));
        assert_eq!(h.get_str("x-request-id"), Some("rid"));
        assert!(h.get("connection").is_none());
        assert!(h.get("host").is_none());
    }

    #[test]
    fn client_request_id_is_kept() {
        let req = http::Request::builder().uri("/").header("x-request-id", "mine").body(()).unwrap();
        let (parts, ()) = req.into_parts();
        let h = request_to_filter(&parts, || "generated".into());
        assert_eq!(h.get_str("x-request-id"), Some("mine"));
    }

    #[test]
    fn header_map_drops_pseudo_and_invalid() {
        let h = Headers::from_pairs([(":status", "200"), ("x-ok", "1"), ("bad name", "v")]);
        let map = to_header_map(&h);
        assert_eq!(map.len(), 1);
        assert_eq!(status_of(&h), StatusCode::OK);
        assert_eq!(status_of(&Headers::new()), StatusCode::BAD_GATEWAY);
    }

    #[test]
    fn an_upstream_cannot_set_host_only_headers() {
        let mut upstream = HeaderMap::new();
        upstream.insert("x-ferrogate-served", HeaderValue::from_static("10.0.0.9:8000"));
        upstream.insert("x-ferrogate-abandoned", HeaderValue::from_static("1"));
        upstream.insert("content-type", HeaderValue::from_static("application/json"));
        let view = response_to_filter(StatusCode::OK, &upstream);
        assert_eq!(view.get_str("content-type"), Some("application/json"));
        for name in ferrogate_core::headers::HOST_ONLY {
            assert!(view.get(name).is_none(), "{name}");
        }
    }
}
