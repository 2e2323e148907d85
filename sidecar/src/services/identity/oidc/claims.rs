//! The ID token (OpenID Connect Core §3.1.3.7) and what it says about the user: the header's
//! algorithm on an allow-list, the signature with the provider's key of its `kid`, `iss`, `aud`
//! (and `azp`), `exp`, `iat` and `nonce`; then the role and key groups its group claim maps to.

use std::collections::BTreeSet;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ferrogate_core::config::admin::{Oidc, Role};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

/// ID token signature algorithms accepted (never `none`, never a shared-secret HS*).
pub const ALLOWED_ALGS: [&str; 3] = ["RS256", "PS256", "ES256"];
/// Clock skew allowed on `exp` and `iat`, seconds.
pub const SKEW_SECS: u64 = 60;
/// Oldest `iat` accepted, seconds before now (beyond the skew): the token is minted at the
/// code exchange, which follows the login within minutes.
pub const MAX_AGE_SECS: u64 = 10 * 60;

/// What the header says: the algorithm (already on the allow-list) and the key id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The signature algorithm.
    pub alg: Algorithm,
    /// The signing key's id, when given.
    pub kid: Option<String>,
}

/// What the checks need besides the token.
#[derive(Debug, Clone)]
pub struct Expected<'a> {
    /// The issuer, exactly.
    pub issuer: &'a str,
    /// Our client id, which `aud` must hold.
    pub client_id: &'a str,
    /// The nonce sent with the login.
    pub nonce: &'a str,
    /// Now, Unix seconds.
    pub now: u64,
}

/// Reads the header of `token` and checks its algorithm against [`ALLOWED_ALGS`].
///
/// # Errors
/// A malformed token, or an algorithm not allowed.
pub fn header(token: &str) -> Result<Header, String> {
    let mut parts = token.split('.');
    let (Some(head), Some(_), Some(_), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err("the ID token is not a signed JWT (three dot-separated parts)".into());
    };
    let bytes = URL_SAFE_NO_PAD.decode(head).map_err(|_| "the ID token's header is not base64url".to_string())?;
    let head: Map<String, Value> =
        serde_json::from_slice(&bytes).map_err(|_| "the ID token's header is not a JSON object".to_string())?;
    let alg = head.get("alg").and_then(Value::as_str).unwrap_or("");
    let alg = match alg {
        "RS256" => Algorithm::RS256,
        "PS256" => Algorithm::PS256,
        "ES256" => Algorithm::ES256,
        other => {
            return Err(format!("the ID token's alg {other:?} is not allowed (expected one of {ALLOWED_ALGS:?})"));
        }
    };
    if head.contains_key("crit") {
        return Err("the ID token's header has crit extensions, which are not supported".into());
    }
    let kid = head.get("kid").and_then(Value::as_str).map(String::from);
    Ok(Header { alg, kid })
}

/// Verifies `token`'s signature with `key` and its claims against `expected`; returns the
/// claims.
///
/// # Errors
/// Why the token is refused (never the token itself).
pub fn verify(token: &str, alg: Algorithm, key: &Jwk, expected: &Expected<'_>) -> Result<Map<String, Value>, String> {
    let key = DecodingKey::from_jwk(key).map_err(|e| format!("the provider's key cannot be used: {e}"))?;
    let mut v = Validation::new(alg);
    v.leeway = SKEW_SECS;
    v.set_issuer(&[expected.issuer]);
    v.set_audience(&[expected.client_id]);
    v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &v).map_err(|e| match e.kind() {
        ErrorKind::InvalidSignature => "the ID token's signature does not verify".to_string(),
        ErrorKind::ExpiredSignature => "the ID token has expired".to_string(),
        ErrorKind::InvalidIssuer => format!("the ID token's iss is not {:?}", expected.issuer),
        ErrorKind::InvalidAudience => {
            format!("the ID token's aud does not hold the client id {:?}", expected.client_id)
        }
        ErrorKind::MissingRequiredClaim(c) => format!("the ID token has no {c} claim"),
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidKeyFormat | ErrorKind::InvalidAlgorithmName => {
            "the ID token's alg does not fit the provider's key".to_string()
        }
        _ => format!("the ID token is refused: {e}"),
    })?;
    let claims = data.claims;
    if claims.get("iss").and_then(Value::as_str) != Some(expected.issuer) {
        return Err(format!("the ID token's iss is not {:?}", expected.issuer));
    }
    match claims.get("sub").and_then(Value::as_str) {
        Some(sub) if !sub.is_empty() => {}
        _ => return Err("the ID token's sub is not a non-empty string".into()),
    }
    let audiences: Vec<&str> = match claims.get("aud") {
        Some(Value::String(a)) => vec![a.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !audiences.contains(&expected.client_id) {
        return Err(format!("the ID token's aud does not hold the client id {:?}", expected.client_id));
    }
    let azp = claims.get("azp").and_then(Value::as_str);
    if (audiences.len() > 1 || azp.is_some()) && azp != Some(expected.client_id) {
        return Err(format!("the ID token's azp is not the client id {:?}", expected.client_id));
    }
    let Some(iat) = claims.get("iat").and_then(Value::as_u64) else {
        return Err("the ID token has no iat claim".into());
    };
    if iat > expected.now + SKEW_SECS {
        return Err("the ID token's iat is in the future".into());
    }
    if iat + MAX_AGE_SECS + SKEW_SECS < expected.now {
        return Err("the ID token was issued too long ago (iat)".into());
    }
    let nonce = claims.get("nonce").and_then(Value::as_str).unwrap_or("");
    if !crate::services::auth::constant_time_eq(nonce.as_bytes(), expected.nonce.as_bytes()) {
        return Err("the ID token's nonce is not the one sent with this login".into());
    }
    Ok(claims)
}

/// The values of the claim `name` in `claims`: an array of strings, or one string (other
/// items are ignored). A name with dots that is not itself a claim is a path into nested
/// objects (`realm_access.roles`, Keycloak's realm roles).
pub fn claim_values(claims: &Map<String, Value>, name: &str) -> Vec<String> {
    let value = claims.get(name).or_else(|| {
        let mut parts = name.split('.');
        let first = claims.get(parts.next()?)?;
        parts.try_fold(first, |v, part| v.get(part))
    });
    match value {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(String::from).collect(),
        _ => Vec::new(),
    }
}

/// The broadest role any of `values` maps to in `role_map`; `None` when none maps.
pub fn role_of(settings: &Oidc, values: &[String]) -> Option<Role> {
    values.iter().filter_map(|v| settings.role_map.get(v)).copied().max()
}

/// The key groups a key-manager with `values` may manage: the union of `key_groups[value]`,
/// sorted (empty, i.e. every group, when none of its values has an entry).
pub fn key_groups_of(settings: &Oidc, values: &[String]) -> Vec<String> {
    let groups: BTreeSet<&String> = values.iter().filter_map(|v| settings.key_groups.get(v)).flatten().collect();
    groups.into_iter().cloned().collect()
}

/// The user's display name: `preferred_username`, else `email`, else `sub`.
pub fn display_name(claims: &Map<String, Value>) -> String {
    ["preferred_username", "email", "sub"]
        .iter()
        .filter_map(|c| claims.get(*c).and_then(Value::as_str))
        .find(|s| !s.trim().is_empty())
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn oidc() -> Oidc {
        Oidc {
            issuer: "https://op.example".into(),
            client_id: "c".into(),
            client_secret_env: None,
            redirect_uri: "https://gw.example/api/v1/session/oidc/callback".into(),
            scopes: vec!["openid".into()],
            role_claim: "groups".into(),
            role_map: [
                ("gw-keys".to_string(), Role::KeyManager),
                ("gw-team".to_string(), Role::KeyManager),
                ("gw-owners".to_string(), Role::Owner),
                ("gw-read".to_string(), Role::Viewer),
            ]
            .into(),
            key_groups: [
                ("gw-keys".to_string(), vec!["dev".to_string()]),
                ("gw-team".to_string(), vec!["team-a".to_string(), "dev".to_string()]),
            ]
            .into(),
            post_logout_redirect_uri: None,
        }
    }

    fn values(v: Value, claim: &str) -> Vec<String> {
        claim_values(v.as_object().unwrap(), claim)
    }

    #[test]
    fn the_broadest_mapped_role_wins_and_unmapped_users_get_none() {
        let s = oidc();
        let of = |groups: &[&str]| role_of(&s, &groups.iter().map(|g| g.to_string()).collect::<Vec<_>>());
        assert_eq!(of(&["gw-read", "gw-owners", "gw-keys"]), Some(Role::Owner));
        assert_eq!(of(&["other", "gw-keys"]), Some(Role::KeyManager));
        assert_eq!(of(&["gw-read"]), Some(Role::Viewer));
        assert_eq!(of(&["other", "GW-KEYS"]), None, "values are matched exactly");
        assert_eq!(of(&[]), None);
    }

    #[test]
    fn key_groups_are_the_union_of_the_mapped_values() {
        let s = oidc();
        let of = |groups: &[&str]| key_groups_of(&s, &groups.iter().map(|g| g.to_string()).collect::<Vec<_>>());
        assert_eq!(of(&["gw-keys"]), ["dev"]);
        assert_eq!(of(&["gw-keys", "gw-team", "x"]), ["dev", "team-a"]);
        assert!(of(&["gw-read"]).is_empty());
    }

    #[test]
    fn group_claims_may_be_arrays_strings_or_nested() {
        assert_eq!(values(json!({"groups": ["a", 1, "b"]}), "groups"), ["a", "b"]);
        assert_eq!(values(json!({"groups": "a"}), "groups"), ["a"]);
        assert!(values(json!({"groups": {"a": 1}}), "groups").is_empty());
        assert!(values(json!({}), "groups").is_empty());
        let keycloak = json!({"realm_access": {"roles": ["gw-owners"]}, "a.b": ["flat"]});
        assert_eq!(values(keycloak.clone(), "realm_access.roles"), ["gw-owners"]);
        assert_eq!(values(keycloak, "a.b"), ["flat"], "a claim named with a dot wins");
    }

    #[test]
    fn the_display_name_prefers_preferred_username_then_email_then_sub() {
        let name = |v: Value| display_name(v.as_object().unwrap());
        assert_eq!(name(json!({"sub": "s", "email": "e@x", "preferred_username": "p"})), "p");
        assert_eq!(name(json!({"sub": "s", "email": "e@x", "preferred_username": " "})), "e@x");
        assert_eq!(name(json!({"sub": "s"})), "s");
    }
}
