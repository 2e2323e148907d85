//! Where a request to `/mcp/{server}{rest}` goes on the server's origin.

/// The upstream `:path`: the server's endpoint path for `/mcp/{server}` itself, or `rest`
/// on the server's origin for a longer path (the HTTP+SSE transport's message endpoint,
/// announced by the server as an origin-relative path), the client's query kept.
pub fn upstream_path(endpoint: &str, rest: &str, query: Option<&str>) -> String {
    let path = match (rest, endpoint) {
        ("", "") => "/",
        ("", endpoint) => endpoint,
        (rest, _) => rest,
    };
    match query {
        Some(q) => format!("{path}?{q}"),
        None => path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::upstream_path;

    #[test]
    fn endpoint_rest_and_query() {
        assert_eq!(upstream_path("/mcp", "", None), "/mcp");
        assert_eq!(upstream_path("", "", Some("a=1")), "/?a=1");
        assert_eq!(upstream_path("/v1/mcp", "/messages/", Some("session_id=ab")), "/messages/?session_id=ab");
    }
}
