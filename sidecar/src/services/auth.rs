//! Bearer-token checks for the sidecar's listeners.
//!
//! Tokens are compared in constant time so response timing does not reveal how much of a
//! guessed token was right.

use axum::http::{HeaderMap, StatusCode};

/// Whether `headers` carry `Authorization: Bearer <expected>`; `None` expected = no check.
pub fn bearer_ok(headers: &HeaderMap, expected: Option<&str>) -> bool {
    let Some(expected) = expected else { return true };
    let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else { return false };
    let value = value.as_bytes();
    let Some(token) = value.strip_prefix(b"Bearer ").or_else(|| value.strip_prefix(b"bearer ")) else {
        return false;
    };
    constant_time_eq(token, expected.as_bytes())
}

/// A listener other hosts could reach, with no token to guard it.
pub fn non_loopback_without_token(addr: std::net::SocketAddr, token: Option<&str>) -> bool {
    token.is_none() && !addr.ip().is_loopback()
}

/// Compares two byte strings without an early exit on the first difference.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (i, x) in a.iter().enumerate() {
        diff |= x ^ b.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

/// 401 with a JSON body, for handlers that reject a request.
pub fn unauthorized() -> (StatusCode, axum::Json<serde_json::Value>) {
    (StatusCode::UNAUTHORIZED, axum::Json(serde_json::json!({"error": "missing or wrong bearer token"})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_checks() {
        let mut h = HeaderMap::new();
        assert!(bearer_ok(&h, None));
        assert!(!bearer_ok(&h, Some("t")));
        h.insert("authorization", "Bearer secret".parse().unwrap());
        assert!(bearer_ok(&h, Some("secret")));
        assert!(!bearer_ok(&h, Some("secre")));
        assert!(!bearer_ok(&h, Some("secret2")));
    }

    #[test]
    fn constant_time_eq_is_eq() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"", b"a"));
    }
}
