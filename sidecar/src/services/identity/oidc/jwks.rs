//! The provider's signing keys (`jwks_uri`): fetched at the first login, looked up by `kid`.
//! A `kid` not in the cached set makes the set be fetched again, at most once per
//! [`MIN_REFETCH`] (OpenID Connect Core §10.1.1): this is how a key rotation at the provider is
//! followed. The set is also refreshed when older than [`MAX_AGE`], so a withdrawn key stops
//! being trusted.

use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::Algorithm;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::Mutex;

use super::http::{get_json, DOCUMENT_LIMIT};
use super::OidcError;

/// Shortest time between two fetches of the key set.
pub const MIN_REFETCH: Duration = Duration::from_secs(10);
/// Longest time a fetched key set is used without being fetched again.
pub const MAX_AGE: Duration = Duration::from_secs(60 * 60);

/// A key set as published: keys this build cannot read (other types, encryption keys with
/// algorithms it does not know) are skipped, not fatal.
#[derive(Deserialize)]
struct RawSet {
    keys: Vec<Value>,
}

/// The readable keys of a set.
pub fn parse(keys: Vec<Value>) -> Vec<Jwk> {
    keys.into_iter().filter_map(|k| serde_json::from_value(k).ok()).collect()
}

/// The key of `keys` that verifies a token signed with `alg` under `kid`: a signing key (no
/// `use`, or `sig`) of the algorithm's type whose `alg`, when given, is `alg`. Without a
/// `kid` the set must hold exactly one such key.
pub fn pick<'a>(keys: &'a [Jwk], kid: Option<&str>, alg: Algorithm) -> Option<&'a Jwk> {
    let mut usable = keys.iter().filter(|k| fits(k, alg));
    match kid {
        Some(kid) => usable.find(|k| k.common.key_id.as_deref() == Some(kid)),
        None => {
            let first = usable.next()?;
            usable.next().is_none().then_some(first)
        }
    }
}

/// Whether `key` may verify a signature made with `alg`.
fn fits(key: &Jwk, alg: Algorithm) -> bool {
    if matches!(&key.common.public_key_use, Some(u) if *u != PublicKeyUse::Signature) {
        return false;
    }
    if let Some(key_alg) = key.common.key_algorithm {
        if format!("{key_alg:?}") != format!("{alg:?}") {
            return false;
        }
    }
    match (&key.algorithm, alg) {
        (AlgorithmParameters::RSA(_), Algorithm::RS256 | Algorithm::PS256) => true,
        (AlgorithmParameters::EllipticCurve(p), Algorithm::ES256) => p.curve == EllipticCurve::P256,
        _ => false,
    }
}

/// The cached key set.
#[derive(Debug)]
pub struct Cache {
    inner: Mutex<State>,
    /// Shortest time between two fetches ([`MIN_REFETCH`]; shorter in tests).
    min_refetch: Duration,
}

impl Default for Cache {
    fn default() -> Self {
        Cache::with_min_refetch(MIN_REFETCH)
    }
}

#[derive(Debug, Default)]
struct State {
    /// The set last fetched, with the URL it came from and when.
    keys: Option<(String, Vec<Jwk>, Instant)>,
    /// When a fetch was last tried (successful or not).
    last_try: Option<Instant>,
    /// Fetches made (for the tests).
    fetches: u64,
}

impl Cache {
    /// An empty cache that fetches at most once per `min_refetch`.
    pub fn with_min_refetch(min_refetch: Duration) -> Cache {
        Cache { inner: Mutex::new(State::default()), min_refetch }
    }

    /// The key for a token signed with `alg` under `kid`, from the set at `uri`: from the
    /// cache, or after fetching the set again when `kid` is not in it (rate-limited), when the
    /// set is older than [`MAX_AGE`] or when it came from another URL.
    ///
    /// # Errors
    /// [`OidcError::Unavailable`] when the set could not be fetched, [`OidcError::Refused`]
    /// when it has no such key.
    pub async fn key(
        &self,
        http: &reqwest::Client,
        uri: &str,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Jwk, OidcError> {
        let mut state = self.inner.lock().await;
        let now = Instant::now();
        let (same_uri, fresh) = match &state.keys {
            Some((u, _, at)) => (u == uri, now.duration_since(*at) < MAX_AGE),
            None => (false, false),
        };
        if same_uri && fresh {
            if let Some((_, keys, _)) = &state.keys {
                if let Some(k) = pick(keys, kid, alg) {
                    return Ok(k.clone());
                }
            }
        }
        let may_fetch = !same_uri || state.last_try.is_none_or(|t| now.duration_since(t) >= self.min_refetch);
        let mut fetch_error = None;
        if may_fetch {
            state.last_try = Some(now);
            state.fetches += 1;
            match get_json::<RawSet>(http, uri, DOCUMENT_LIMIT).await {
                Ok(set) => {
                    let keys = parse(set.keys);
                    tracing::info!(keys = keys.len(), jwks_uri = uri, "OIDC signing keys fetched");
                    state.keys = Some((uri.to_string(), keys, now));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "OIDC signing keys could not be fetched");
                    fetch_error = Some(e);
                }
            }
        }
        let cached = state.keys.as_ref().filter(|(u, _, _)| u == uri).map(|(_, keys, _)| keys);
        match (cached.and_then(|keys| pick(keys, kid, alg)), cached, fetch_error) {
            (Some(k), _, _) => Ok(k.clone()),
            (None, None, Some(e)) => Err(OidcError::Unavailable(format!("the provider's signing keys: {e}"))),
            (None, _, _) => Err(OidcError::Refused(match kid {
                Some(kid) => format!("no {alg:?} signing key with kid {kid:?} in the provider's key set"),
                None => format!("the ID token names no kid and the provider's key set has no single {alg:?} key"),
            })),
        }
    }

    /// How many times the set was fetched.
    pub async fn fetches(&self) -> u64 {
        self.inner.lock().await.fetches
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rsa(kid: Option<&str>, extra: Value) -> Value {
        let mut k = json!({"kty": "RSA", "n": "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1Wl\
            UzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw", "e": "AQAB"});
        if let Some(kid) = kid {
            k["kid"] = kid.into();
        }
        for (name, v) in extra.as_object().unwrap() {
            k[name] = v.clone();
        }
        k
    }

    #[test]
    fn keys_are_picked_by_kid_type_use_and_alg() {
        let keys = parse(vec![
            rsa(Some("a"), json!({"use": "sig", "alg": "RS256"})),
            rsa(Some("b"), json!({"use": "enc", "alg": "RSA-OAEP"})),
            rsa(Some("c"), json!({"alg": "PS256"})),
            json!({"kty": "EC", "crv": "P-384", "kid": "d", "x": "AA", "y": "AA"}),
            json!({"kty": "unknown"}),
            json!("not a key"),
            json!({"kty": "RSA", "n": 5}),
        ]);
        assert_eq!(keys.len(), 6, "what is not a JWK object is skipped (odd keys stay, never picked)");
        let kid = |k: Option<&Jwk>| k.and_then(|k| k.common.key_id.clone());
        assert_eq!(kid(pick(&keys, Some("a"), Algorithm::RS256)), Some("a".into()));
        assert_eq!(kid(pick(&keys, Some("a"), Algorithm::PS256)), None, "alg of the key differs");
        assert_eq!(kid(pick(&keys, Some("b"), Algorithm::RS256)), None, "an encryption key");
        assert_eq!(kid(pick(&keys, Some("c"), Algorithm::PS256)), Some("c".into()));
        assert_eq!(kid(pick(&keys, Some("d"), Algorithm::ES256)), None, "P-384 is not ES256's curve");
        assert_eq!(kid(pick(&keys, Some("zz"), Algorithm::RS256)), None);
        assert_eq!(kid(pick(&keys, None, Algorithm::RS256)), Some("a".into()), "the single RS256 key");
        let two = parse(vec![rsa(Some("a"), json!({})), rsa(Some("b"), json!({}))]);
        assert_eq!(kid(pick(&two, None, Algorithm::RS256)), None, "no kid and two candidates");
    }
}
