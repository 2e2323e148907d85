//! ID token checks with locally generated keys (an RSA key for RS256 and PS256, a P-256 key
//! for ES256), and discovery, key rotation and the logout URL against a small local provider.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ferrogate_core::config::admin::{AdminSettings, Oidc, Role};
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Map, Value};

use super::claims::{self, Expected};
use super::{jwks, OidcClient, OidcError};
use crate::services::identity::Identity;

/// A 2048-bit RSA key (PKCS#1 DER), made with `openssl genrsa` for these tests only.
const RSA_DER: &str = concat!(
    "MIIEpAIBAAKCAQEAwKItOMe+ViingCr2trmOe6KsqjnyCFLHCaSMFJgEWiKqXP5J6tNQbJ1e7/WW6GHnQghEQUJxPLTGwnMF3AFg",
    "J9pGWojld25YTdDIFNaPbjRQvqZazI858oL1hL39WBAynxfEtxbvcTqoCVCVMcNX3pKwb/yUuBbal1yKAIbv1B5B3V3j4NbGjOJW",
    "WgODsbdIHZBFzES4KJaZ6No+6HJMmeuquNXzRAf88iZ2/SgNwTA6YOlxuIui4mfIj84XSvwe3qze/YbII7Jo+F12ex+0yy3o2uLu",
    "CXkQerTuvglLniy1YIAzHhyUPWTLwRg58v/+ud4Qf9i8aQJun51SrngffwIDAQABAoIBAAOftjitVUpuQFxvMnrHudz5Xff9ca0W",
    "m/goxTPb+kHIPJE8SjkYzMuf5RNsxaNNUc1SgrCbM3smlKvZMxqE8hsKoBLMixiSL41Jm+hi2VbqGzzC72fBKAaeaeHOtMkaOoGQ",
    "sAD+9VxmQJc2q1/aYp9+ysMiKszdxsxcws6ouzLjCGxEFMHzeVsb7dFMwok87d9o7ETp4oQ8lok5y8OCCMi3QZKkEs2Vt/yDyoLo",
    "6x/2hq9bnndwiGvCm8UDM3Fnp8YpnL+0/LO/L8faqBCk699aU7j8GBrMDE2QbBRXKOR4RlwQPC60staqTxfTis53WxGdIdlaJ4UX",
    "qvzAvPe3fwECgYEA+Oklj8CZWpG/eBW9Ux6HQoqFFzjffvd56bDa5D4VYjvAGS5x37AGfWvKdwBa6xFwu1snIouuGhL8yZ20OoLo",
    "d6rOaS0JEaLySwQF2LEaGj76mFDwuQ917R2BXsEf5F/v2/n0Mz4xNyP8Mjjx6Ev/kElB5EkbxjkFxfIFmKl43H8CgYEAxh6z1Avt",
    "FZCEFHnEXYzh7Qs/aGq1GLEPJ+ZeClls0oqDjFRVHgKnKOPn9wm7KtnDjlQ0bGYcqlMo5dEc8dsY0+dl1uczEHIdN6GRqy6LIkRQ",
    "vgvHvyR2u0rHSiU6Ncw6pGHLAkZaNrbKTaHD4/mRQN5+QmnxCzDh4KIFlcELPQECgYEA3J+CvJUhGGcBSEY0pnzztOYkq32sk9R1",
    "Cc7JZe8lcwm07lz9cCCM0BR/w9TbwWmW+2oDGRqnudLEn0waWJZ5yL/r7suNM0Wz7wvkxrnLgiH6apGrnMx4YTB63+rcAseKSfeW",
    "HOluJArQWg+hU54xKsnUDq1CYgNe+6HWlgb46q8CgYBCPlfQieBO+pA/LGvM/+M22DDuX+eHhwRTSgKdoULyrt/HVxdSvn5X/MQ9",
    "5KIRdNifSWZx7D6fcMjW9vGfqKuHhvKVRZ7cW9uLE1nai+h3n7IDqXqzXaTZgOpbz1DEVjIxboVrkExvyPShunn+Sx8XOo2q9TNk",
    "k4ajDmmhpfd1AQKBgQCplkH8TuNHWZiKc8DYY3OWxaplCFz5B1/1zNP+3/fx9SXzNql073FeJzX+yh2uvipMdXWQkfpsTiGfzZoN",
    "VdGcw6vc5onjwY5iZkX/819jMsJHJW7uphtvCe9iEVxaMatOmbrkXW50Kcuxss8hfqQQHa4enjamSS/gIteKtqnoZQ==",
);
/// A P-256 key (PKCS#8 DER), made with `openssl ecparam -genkey` for these tests only.
const EC_DER: &str = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgRDEy4AFacAxa1AULzBdAr/CIEE4+N3jrAmtIsP9sq/ahRANCAARDi1r2suc5r73ad+0WTcCaLZkkqhLqom5TGm6f2bo2iYd+5hSLFn2RyuROI0BfMf1bhcS59kMnXZRDvV+jDNH4";

const ISSUER: &str = "https://op.example";
const CLIENT: &str = "ferrogate-admin";
const NONCE: &str = "nonce-of-this-login";

fn rsa() -> EncodingKey {
    EncodingKey::from_rsa_der(&STANDARD.decode(RSA_DER).unwrap())
}

fn ec() -> EncodingKey {
    EncodingKey::from_ec_der(&STANDARD.decode(EC_DER).unwrap())
}

/// The public JWK of `key` for `alg`, with `kid`.
fn jwk(key: &EncodingKey, alg: Algorithm, kid: &str) -> Jwk {
    let mut jwk = Jwk::from_encoding_key(key, alg).unwrap();
    jwk.common.key_id = Some(kid.into());
    jwk
}

fn now() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

/// Claims of a good ID token, with `changes` applied (a null removes the claim).
fn claims_with(changes: Value) -> Value {
    let mut c = json!({"iss": ISSUER, "aud": CLIENT, "sub": "kate-1", "nonce": NONCE, "iat": now(),
        "exp": now() + 300, "preferred_username": "kate", "groups": ["gw-keys"]});
    for (k, v) in changes.as_object().unwrap() {
        if v.is_null() {
            c.as_object_mut().unwrap().remove(k);
        } else {
            c[k] = v.clone();
        }
    }
    c
}

fn sign(claims: &Value, key: &EncodingKey, alg: Algorithm, kid: &str) -> String {
    let header = Header { kid: Some(kid.into()), ..Header::new(alg) };
    jsonwebtoken::encode(&header, claims, key).unwrap()
}

fn expected() -> Expected<'static> {
    Expected { issuer: ISSUER, client_id: CLIENT, nonce: NONCE, now: now() }
}

/// Header and signature checks of `token` against `keys`, as the callback runs them.
fn check(token: &str, keys: &[Jwk]) -> Result<Map<String, Value>, String> {
    let header = claims::header(token)?;
    let key = jwks::pick(keys, header.kid.as_deref(), header.alg).ok_or("no key")?;
    claims::verify(token, header.alg, key, &expected())
}

fn refused(token: &str, keys: &[Jwk], why: &str) {
    let err = check(token, keys).unwrap_err();
    assert!(err.contains(why), "expected {why:?} in {err:?}");
}

#[test]
fn good_tokens_of_each_allowed_algorithm_verify() {
    let keys = [jwk(&rsa(), Algorithm::RS256, "r1"), jwk(&ec(), Algorithm::ES256, "e1")];
    let c = claims_with(json!({}));
    let ok = check(&sign(&c, &rsa(), Algorithm::RS256, "r1"), &keys).unwrap();
    assert_eq!(ok["sub"], "kate-1");
    check(&sign(&c, &ec(), Algorithm::ES256, "e1"), &keys).unwrap();
    let ps = [jwk(&rsa(), Algorithm::PS256, "p1")];
    check(&sign(&c, &rsa(), Algorithm::PS256, "p1"), &ps).unwrap();
    let several = claims_with(json!({"aud": [CLIENT, "other"], "azp": CLIENT}));
    check(&sign(&several, &rsa(), Algorithm::RS256, "r1"), &keys).unwrap();
}

#[test]
fn a_bad_signature_is_refused() {
    let keys = [jwk(&rsa(), Algorithm::RS256, "r1")];
    let token = sign(&claims_with(json!({})), &rsa(), Algorithm::RS256, "r1");
    // The payload changed after signing (a claim forged), the signature kept.
    let (head, rest) = token.split_once('.').unwrap();
    let (_, sig) = rest.split_once('.').unwrap();
    let forged = claims_with(json!({"groups": ["gw-owners"]}));
    let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(forged.to_string());
    refused(&format!("{head}.{payload}.{sig}"), &keys, "signature does not verify");
    // The signature itself altered.
    let mut bad = token.clone().into_bytes();
    let at = bad.len() - 5;
    bad[at] = if bad[at] == b'A' { b'B' } else { b'A' };
    refused(&String::from_utf8(bad).unwrap(), &keys, "signature does not verify");
    // Signed by another key under the provider's kid (ES256 key, RSA kid): no fitting key.
    let other = sign(&claims_with(json!({})), &ec(), Algorithm::ES256, "r1");
    refused(&other, &keys, "no key");
    // An RSA key of the set cannot check an ES256 signature even when handed over directly.
    let err = claims::verify(&other, Algorithm::ES256, &keys[0], &expected()).unwrap_err();
    assert!(err.contains("alg") || err.contains("key") || err.contains("signature"), "{err}");
}

#[test]
fn wrong_claims_are_refused() {
    let keys = [jwk(&rsa(), Algorithm::RS256, "r1")];
    let with = |c: Value| sign(&claims_with(c), &rsa(), Algorithm::RS256, "r1");
    refused(&with(json!({"aud": "someone-else"})), &keys, "aud does not hold");
    refused(&with(json!({"aud": ["someone-else", "other"]})), &keys, "aud does not hold");
    refused(&with(json!({"aud": [CLIENT, "other"]})), &keys, "azp");
    refused(&with(json!({"aud": [CLIENT, "other"], "azp": "other"})), &keys, "azp");
    refused(&with(json!({"iss": "https://evil.example"})), &keys, "iss is not");
    refused(&with(json!({"iss": "https://op.example/"})), &keys, "iss is not");
    refused(&with(json!({"exp": now() - 120})), &keys, "expired");
    refused(&with(json!({"exp": null})), &keys, "no exp claim");
    refused(&with(json!({"nonce": "another-login"})), &keys, "nonce");
    refused(&with(json!({"nonce": null})), &keys, "nonce");
    refused(&with(json!({"iat": now() + 600})), &keys, "iat is in the future");
    refused(&with(json!({"iat": now() - 3600})), &keys, "too long ago");
    refused(&with(json!({"iat": null})), &keys, "no iat");
    refused(&with(json!({"sub": ""})), &keys, "sub");
    // Within the skew: an exp 30 s ago and an iat 30 s ahead pass.
    check(&with(json!({"exp": now() - 30, "iat": now() + 30})), &keys).unwrap();
}

#[test]
fn alg_none_and_shared_secret_algs_are_refused() {
    let keys = [jwk(&rsa(), Algorithm::RS256, "r1")];
    let b64 = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let body = b64(claims_with(json!({})));
    let none = format!("{}.{body}.", b64(json!({"alg": "none", "kid": "r1"})));
    refused(&none, &keys, "alg \"none\" is not allowed");
    let none_upper = format!("{}.{body}.", b64(json!({"alg": "None"})));
    refused(&none_upper, &keys, "is not allowed");
    // HS256 keyed with the provider's public modulus: the classic key-confusion forgery.
    let secret = EncodingKey::from_secret(b"the provider's public key bytes").unwrap();
    refused(&sign(&claims_with(json!({})), &secret, Algorithm::HS256, "r1"), &keys, "alg \"HS256\" is not allowed");
    refused(&sign(&claims_with(json!({})), &rsa(), Algorithm::RS512, "r1"), &keys, "alg \"RS512\" is not allowed");
    refused("not-a-jwt", &keys, "three dot-separated parts");
    let crit = format!("{}.{body}.sig", b64(json!({"alg": "RS256", "kid": "r1", "crit": ["exp"]})));
    refused(&crit, &keys, "crit");
}

/// A small provider: discovery, a key set that can be swapped, counted fetches.
struct LocalOp {
    issuer: String,
    keys: Arc<Mutex<Vec<Jwk>>>,
    jwks_fetches: Arc<AtomicU64>,
    discovery_fetches: Arc<AtomicU64>,
}

async fn local_op(keys: Vec<Jwk>) -> LocalOp {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issuer = format!("http://{}", listener.local_addr().unwrap());
    let op = LocalOp {
        issuer: issuer.clone(),
        keys: Arc::new(Mutex::new(keys)),
        jwks_fetches: Arc::default(),
        discovery_fetches: Arc::default(),
    };
    let doc = json!({"issuer": issuer, "authorization_endpoint": format!("{issuer}/auth"),
        "token_endpoint": format!("{issuer}/token"), "jwks_uri": format!("{issuer}/jwks"),
        "end_session_endpoint": format!("{issuer}/session/end?ui=1"),
        "code_challenge_methods_supported": ["S256"], "id_token_signing_alg_values_supported": ["RS256"]});
    let (keys, jwks_fetches, discovery_fetches) =
        (op.keys.clone(), op.jwks_fetches.clone(), op.discovery_fetches.clone());
    let app = axum::Router::new()
        .route(
            "/.well-known/openid-configuration",
            axum::routing::get(move || {
                discovery_fetches.fetch_add(1, Ordering::SeqCst);
                let doc = doc.clone();
                async move { axum::Json(doc) }
            }),
        )
        .route(
            "/jwks",
            axum::routing::get(move || {
                jwks_fetches.fetch_add(1, Ordering::SeqCst);
                let mut set: Vec<Value> =
                    keys.lock().unwrap().iter().map(|k| serde_json::to_value(k).unwrap()).collect();
                // Keys this build cannot use are skipped, not fatal.
                set.push(json!({"kty": "OKP", "crv": "X25519", "x": "abc", "use": "enc"}));
                set.push(json!({"kty": "XYZ"}));
                async move { axum::Json(json!({"keys": set})) }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    op
}

fn settings(issuer: &str) -> Oidc {
    Oidc {
        issuer: issuer.into(),
        client_id: CLIENT.into(),
        client_secret_env: None,
        redirect_uri: "http://127.0.0.1:1/api/v1/session/oidc/callback".into(),
        scopes: vec!["openid".into()],
        role_claim: "groups".into(),
        role_map: [("gw-keys".to_string(), Role::KeyManager)].into(),
        key_groups: Default::default(),
        post_logout_redirect_uri: Some("http://127.0.0.1:1/bye?x=1&y=2".into()),
    }
}

#[tokio::test]
async fn discovery_is_cached_and_a_rotated_key_is_fetched_at_most_once_per_interval() {
    let op = local_op(vec![jwk(&rsa(), Algorithm::RS256, "old")]).await;
    let mut client = OidcClient::new(settings(&op.issuer));
    // An interval far longer than the steps between the first fetch and the "too soon" lookup
    // take on a loaded machine.
    client.keys = jwks::Cache::with_min_refetch(Duration::from_secs(3));
    let doc = client.discovery().await.unwrap();
    assert_eq!(doc.jwks_uri, format!("{}/jwks", op.issuer));
    client.discovery().await.unwrap();
    assert_eq!(op.discovery_fetches.load(Ordering::SeqCst), 1, "cached");

    let key = |kid: &'static str| client.keys.key(&client.http, &doc.jwks_uri, Some(kid), Algorithm::RS256);
    assert_eq!(key("old").await.unwrap().common.key_id.as_deref(), Some("old"));
    key("old").await.unwrap();
    assert_eq!(op.jwks_fetches.load(Ordering::SeqCst), 1, "known kid: no fetch");

    // The provider rotates: a new key signs, the old one stays published.
    op.keys.lock().unwrap().insert(0, jwk(&ec(), Algorithm::ES256, "new"));
    let too_soon = client.keys.key(&client.http, &doc.jwks_uri, Some("new"), Algorithm::ES256).await;
    assert!(matches!(too_soon, Err(OidcError::Refused(ref m)) if m.contains("\"new\"")), "{too_soon:?}");
    assert_eq!(op.jwks_fetches.load(Ordering::SeqCst), 1, "unknown kid within the interval: no fetch");
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let new = client.keys.key(&client.http, &doc.jwks_uri, Some("new"), Algorithm::ES256).await.unwrap();
    assert_eq!(new.common.key_id.as_deref(), Some("new"));
    assert_eq!(op.jwks_fetches.load(Ordering::SeqCst), 2, "unknown kid after the interval: one fetch");
    assert!(key("gone").await.is_err());
    assert_eq!(client.keys.fetches().await, 2);
}

#[tokio::test]
async fn logout_url_carries_the_hint_client_and_post_logout_redirect() {
    let op = local_op(vec![]).await;
    let admin = AdminSettings { oidc: Some(settings(&op.issuer)), ..AdminSettings::default() };
    let identity = Identity::new(admin, None, Arc::new(OnceLock::new()), true);
    let url = super::end_session_url(&identity, Some("the.id.token")).await.unwrap();
    let url = reqwest::Url::parse(&url).unwrap();
    assert_eq!(url.path(), "/session/end");
    let q: Vec<(String, String)> = url.query_pairs().into_owned().collect();
    let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("ui"), Some("1"), "the endpoint's own query is kept");
    assert_eq!(get("id_token_hint"), Some("the.id.token"));
    assert_eq!(get("client_id"), Some(CLIENT));
    assert_eq!(get("post_logout_redirect_uri"), Some("http://127.0.0.1:1/bye?x=1&y=2"));
    let without = Identity::new(AdminSettings::default(), None, Arc::new(OnceLock::new()), true);
    assert_eq!(super::end_session_url(&without, Some("t")).await, None);
}

#[tokio::test]
async fn the_routes_refuse_early_without_sso_a_database_or_a_good_request() {
    use axum::http::HeaderMap;

    use super::flow::{finish, start};
    use crate::services::identity::RequestMeta;

    let h = HeaderMap::new();
    let none = Identity::new(AdminSettings::default(), None, Arc::new(OnceLock::new()), true);
    assert_eq!(start(&none, &h, None).await.unwrap_err(), OidcError::NotConfigured);
    let sso = || AdminSettings { oidc: Some(settings("http://127.0.0.1:9")), ..AdminSettings::default() };
    let file = Identity::new(sso(), None, Arc::new(OnceLock::new()), false);
    assert_eq!(start(&file, &h, None).await.unwrap_err(), OidcError::FileStore);
    assert_eq!(start(&file, &h, None).await.unwrap_err().status(), 409);
    let pg = Identity::new(sso(), None, Arc::new(OnceLock::new()), true);
    let open = start(&pg, &h, Some("return_to=%2F%2Fevil.example")).await.unwrap_err();
    assert!(matches!(open, OidcError::BadRequest(ref m) if m.contains("return_to")), "{open:?}");
    let down = start(&pg, &h, Some("return_to=%2Fui")).await.unwrap_err();
    assert_eq!(down.status(), 503, "nothing listens at the issuer: {down:?}");
    let (meta, mut taken) = (RequestMeta::default(), false);
    let no_state = finish(&pg, &h, Some("code=c"), &meta, &mut taken).await.unwrap_err();
    assert!(matches!(no_state, OidcError::BadRequest(ref m) if m.contains("state")), "{no_state:?}");
    let refused = finish(&pg, &h, Some("error=access_denied&state=s"), &meta, &mut taken).await.unwrap_err();
    assert!(matches!(refused, OidcError::Refused(ref m) if m.contains("access_denied")), "{refused:?}");
    assert!(!taken, "no flow was taken");
}
