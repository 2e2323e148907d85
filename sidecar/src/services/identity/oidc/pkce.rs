//! The values of a login in flight: random state, nonce and PKCE verifier (RFC 7636), the
//! `return_to` path, and the pre-session cookie that binds the login to the browser that
//! started it.

use axum::http::{HeaderMap, HeaderValue};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::ROUTES;

/// The pre-session cookie: a random value whose SHA-256 is the login's `binding`.
pub const COOKIE: &str = "ferrogate_oidc";
/// How long a login may stay in flight, seconds (the cookie's `Max-Age`, the row's life).
pub const FLOW_TTL_SECS: u64 = 600;
/// Longest `return_to` accepted.
pub const RETURN_TO_MAX: usize = 2048;

/// The S256 code challenge of `verifier`: BASE64URL(SHA256(ASCII(verifier))).
pub fn challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// `return_to` when it is a path of this host: starts with `/`, not `//` or `/\` (which
/// browsers read as another host), printable ASCII only (no spaces, control characters or
/// backslashes; other characters come percent-encoded), at most [`RETURN_TO_MAX`] bytes;
/// absent or empty means `/`.
///
/// # Errors
/// Why it is refused (an open redirect).
pub fn return_to(value: Option<&str>) -> Result<String, String> {
    let value = match value {
        None | Some("") => return Ok("/".into()),
        Some(v) => v,
    };
    let refused = || Err(format!("return_to must be a path on this host starting with / (got {:.80?})", value));
    if value.len() > RETURN_TO_MAX {
        return Err(format!("return_to is longer than {RETURN_TO_MAX} bytes"));
    }
    if !value.starts_with('/') || value.starts_with("//") || value.contains('\\') {
        return refused();
    }
    if !value.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return refused();
    }
    Ok(value.to_string())
}

/// `Set-Cookie` of the pre-session cookie: `SameSite=Lax` because the provider's redirect back
/// is a cross-site top-level GET, which `Strict` would send without it; `Secure` as the
/// session cookie is (`sessions::secure`).
pub fn set_cookie(value: &str, secure: bool) -> HeaderValue {
    cookie(value, FLOW_TTL_SECS, secure)
}

/// `Set-Cookie` that removes the pre-session cookie.
pub fn clear_cookie(secure: bool) -> HeaderValue {
    cookie("", 0, secure)
}

fn cookie(value: &str, max_age: u64, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    let text = format!("{COOKIE}={value}; HttpOnly; SameSite=Lax; Path={ROUTES}; Max-Age={max_age}{secure}");
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("ferrogate_oidc=; Max-Age=0"))
}

/// The pre-session cookie's value in `headers`, if any.
pub fn cookie_value(headers: &HeaderMap) -> Option<&str> {
    crate::services::identity::sessions::request_cookie(headers, COOKIE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s256_matches_rfc_7636_appendix_b() {
        assert_eq!(
            challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        // State, nonce, verifier and the pre-session cookie are `sessions::random_value`s.
        let v = crate::services::identity::sessions::random_value();
        assert_eq!(v.len(), 43);
        assert!(v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{v}");
        assert_ne!(v, crate::services::identity::sessions::random_value());
    }

    #[test]
    fn return_to_is_a_path_of_this_host() {
        assert_eq!(return_to(None).unwrap(), "/");
        assert_eq!(return_to(Some("")).unwrap(), "/");
        assert_eq!(return_to(Some("/ui/keys?tab=a&x=%20")).unwrap(), "/ui/keys?tab=a&x=%20");
        for bad in ["//evil.example", "/\\evil.example", "https://evil.example/", "evil", "/a b", "/\tx", "/é", "\\\\x"]
        {
            assert!(return_to(Some(bad)).is_err(), "{bad:?}");
        }
        assert!(return_to(Some(&format!("/{}", "a".repeat(RETURN_TO_MAX)))).is_err());
    }

    #[test]
    fn the_pre_session_cookie_is_lax_http_only_and_scoped() {
        let set = set_cookie("v1", true);
        assert_eq!(set, "ferrogate_oidc=v1; HttpOnly; SameSite=Lax; Path=/api/v1/session/oidc; Max-Age=600; Secure");
        assert!(!clear_cookie(false).to_str().unwrap().contains("Secure"));
        assert!(clear_cookie(false).to_str().unwrap().contains("Max-Age=0"));
        let mut h = HeaderMap::new();
        h.append("cookie", HeaderValue::from_static("a=1; ferrogate_oidc=abc"));
        assert_eq!(cookie_value(&h), Some("abc"));
    }
}
