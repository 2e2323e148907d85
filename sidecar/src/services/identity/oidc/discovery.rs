//! The provider's discovery document (OpenID Connect Discovery 1.0 §4): fetched from
//! `<issuer>/.well-known/openid-configuration`, checked, cached for an hour.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::sync::Mutex;

use super::http::{get_json, DOCUMENT_LIMIT};

/// How long a fetched document is used before it is fetched again.
pub const MAX_AGE: Duration = Duration::from_secs(60 * 60);
/// After a failed refresh the old document is kept; the next try comes this much later.
pub const RETRY_AFTER: Duration = Duration::from_secs(60);

/// The fields of the discovery document the login uses.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Discovery {
    /// Must equal the configured issuer exactly.
    pub issuer: String,
    /// Where the browser is sent to log in.
    pub authorization_endpoint: String,
    /// Where the code is traded for tokens.
    pub token_endpoint: String,
    /// The provider's public signing keys.
    pub jwks_uri: String,
    /// RP-initiated logout, when offered.
    #[serde(default)]
    pub end_session_endpoint: Option<String>,
    /// PKCE methods (RFC 8414); S256 must be among them when given.
    #[serde(default)]
    pub code_challenge_methods_supported: Option<Vec<String>>,
    /// Whether the callback carries `iss` (RFC 9207), which is then checked.
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: bool,
    /// How clients authenticate at the token endpoint (default `client_secret_basic`).
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    /// The ID token signing algorithms offered.
    #[serde(default)]
    pub id_token_signing_alg_values_supported: Option<Vec<String>>,
}

impl Discovery {
    /// Whether the token endpoint takes the client secret in the form rather than with HTTP
    /// Basic: only when the provider lists `client_secret_post` and not `client_secret_basic`.
    pub fn secret_in_form(&self) -> bool {
        self.token_endpoint_auth_methods_supported.as_ref().is_some_and(|m| {
            !m.iter().any(|x| x == "client_secret_basic") && m.iter().any(|x| x == "client_secret_post")
        })
    }
}

/// The discovery URL of `issuer` (a trailing `/` of the issuer is not doubled).
pub fn url_of(issuer: &str) -> String {
    format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/'))
}

/// Checks a fetched document against the configured `issuer`.
///
/// # Errors
/// What is wrong, naming the field.
pub fn check(doc: &Discovery, issuer: &str) -> Result<(), String> {
    if doc.issuer != issuer {
        return Err(format!(
            "the provider's discovery document names issuer {:?}, not the configured {issuer:?} \
             (they must match exactly, trailing slash included)",
            doc.issuer
        ));
    }
    let https = issuer.starts_with("https://");
    for (field, value) in [
        ("authorization_endpoint", Some(&doc.authorization_endpoint)),
        ("token_endpoint", Some(&doc.token_endpoint)),
        ("jwks_uri", Some(&doc.jwks_uri)),
        ("end_session_endpoint", doc.end_session_endpoint.as_ref()),
    ] {
        let Some(value) = value else { continue };
        let url = reqwest::Url::parse(value).map_err(|e| format!("discovery: {field} {value:?} is not a URL: {e}"))?;
        match url.scheme() {
            "https" => {}
            "http" if !https => {}
            other => return Err(format!("discovery: {field} {value:?} has scheme {other} (https expected)")),
        }
    }
    if let Some(methods) = &doc.code_challenge_methods_supported {
        if !methods.iter().any(|m| m == "S256") {
            return Err(format!("discovery: code_challenge_methods_supported {methods:?} lacks S256 (PKCE)"));
        }
    }
    if let Some(algs) = &doc.id_token_signing_alg_values_supported {
        if !algs.iter().any(|a| super::claims::ALLOWED_ALGS.contains(&a.as_str())) {
            return Err(format!(
                "discovery: id_token_signing_alg_values_supported {algs:?} has none of {:?}",
                super::claims::ALLOWED_ALGS
            ));
        }
    }
    Ok(())
}

/// Fetches and checks the document of `issuer`.
///
/// # Errors
/// Why it could not be had or is refused.
pub async fn fetch(http: &reqwest::Client, issuer: &str) -> Result<Discovery, String> {
    let doc: Discovery =
        get_json(http, &url_of(issuer), DOCUMENT_LIMIT).await.map_err(|e| format!("discovery: {e}"))?;
    check(&doc, issuer)?;
    Ok(doc)
}

/// The cached document.
#[derive(Debug, Default)]
pub struct Cache {
    inner: Mutex<Option<Entry>>,
}

#[derive(Debug)]
struct Entry {
    doc: Arc<Discovery>,
    /// When to fetch again.
    refresh_at: Instant,
}

impl Cache {
    /// The document of `issuer`: the cached one while fresh; else fetched again (a failed
    /// refresh keeps serving the old one, and says so in the log).
    ///
    /// # Errors
    /// Why there is no usable document.
    pub async fn get(&self, http: &reqwest::Client, issuer: &str) -> Result<Arc<Discovery>, String> {
        let mut inner = self.inner.lock().await;
        if let Some(entry) = inner.as_ref() {
            if Instant::now() < entry.refresh_at {
                return Ok(entry.doc.clone());
            }
        }
        match fetch(http, issuer).await {
            Ok(doc) => {
                let doc = Arc::new(doc);
                *inner = Some(Entry { doc: doc.clone(), refresh_at: Instant::now() + MAX_AGE });
                Ok(doc)
            }
            Err(e) => match inner.as_mut() {
                Some(entry) => {
                    tracing::warn!(error = %e, "OIDC discovery refresh failed; keeping the previous document");
                    entry.refresh_at = Instant::now() + RETRY_AFTER;
                    Ok(entry.doc.clone())
                }
                None => {
                    tracing::warn!(error = %e, "OIDC discovery failed");
                    Err(e)
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(issuer: &str) -> Discovery {
        Discovery {
            issuer: issuer.into(),
            authorization_endpoint: format!("{issuer}/auth"),
            token_endpoint: format!("{issuer}/token"),
            jwks_uri: format!("{issuer}/jwks"),
            end_session_endpoint: None,
            code_challenge_methods_supported: Some(vec!["S256".into()]),
            authorization_response_iss_parameter_supported: true,
            token_endpoint_auth_methods_supported: None,
            id_token_signing_alg_values_supported: Some(vec!["RS256".into()]),
        }
    }

    #[test]
    fn the_document_must_name_the_issuer_exactly_and_offer_s256() {
        assert_eq!(url_of("https://op.example/"), "https://op.example/.well-known/openid-configuration");
        assert!(check(&doc("https://op.example"), "https://op.example").is_ok());
        let err = check(&doc("https://op.example"), "https://op.example/").unwrap_err();
        assert!(err.contains("must match exactly"), "{err}");
        let mut d = doc("https://op.example");
        d.code_challenge_methods_supported = Some(vec!["plain".into()]);
        assert!(check(&d, "https://op.example").unwrap_err().contains("S256"));
        d.code_challenge_methods_supported = None;
        assert!(check(&d, "https://op.example").is_ok(), "not advertised: assumed");
        d.id_token_signing_alg_values_supported = Some(vec!["HS256".into(), "none".into()]);
        assert!(check(&d, "https://op.example").unwrap_err().contains("id_token_signing_alg_values_supported"));
        let mut d = doc("https://op.example");
        d.token_endpoint = "http://op.example/token".into();
        assert!(check(&d, "https://op.example").unwrap_err().contains("token_endpoint"));
        assert!(check(&doc("http://127.0.0.1:9400"), "http://127.0.0.1:9400").is_ok());
        let missing =
            serde_json::from_str::<Discovery>(r#"{"issuer":"x","authorization_endpoint":"y","token_endpoint":"z"}"#);
        assert!(missing.unwrap_err().to_string().contains("jwks_uri"));
    }

    #[test]
    fn the_secret_goes_in_the_form_only_when_basic_is_not_offered() {
        let mut d = doc("https://op.example");
        assert!(!d.secret_in_form());
        d.token_endpoint_auth_methods_supported = Some(vec!["client_secret_post".into()]);
        assert!(d.secret_in_form());
        d.token_endpoint_auth_methods_supported = Some(vec!["client_secret_post".into(), "client_secret_basic".into()]);
        assert!(!d.secret_in_form());
    }
}
