//! Google access tokens: a service account's JSON key file signs a JWT exchanged at the token
//! endpoint (RFC 7523 bearer grant, as google-auth's `service_account.Credentials`), or the
//! metadata server hands out the attached account's token (GKE Workload Identity, GCE, Cloud
//! Run, as google-auth's `compute_engine.Credentials`).

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Serialize};

use super::{der, http, read_small_file, CloudError, Credential, Fetcher};
use ferrogate_core::config::cloud::RawCredentials;

/// Google's token endpoint, and the `aud` of every assertion: google-auth sends this audience
/// even when the key file names another `token_uri`.
pub(super) const GOOGLE_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// The scope asked for when none is configured.
pub(super) const CLOUD_PLATFORM: &str = "https://www.googleapis.com/auth/cloud-platform";
/// How long a signed assertion is valid (Google's maximum, google-auth's lifetime).
pub(super) const ASSERTION_LIFETIME_SECS: u64 = 3600;
/// The metadata server when `$GCE_METADATA_HOST` does not name another.
const METADATA: &str = "http://metadata.google.internal";
/// The attached service account's token, below the metadata server.
const METADATA_TOKEN: &str = "/computeMetadata/v1/instance/service-accounts/default/token";

/// The fields of a service-account key file used here. No `Debug`: it holds the private key.
#[derive(Deserialize)]
pub(super) struct KeyFile {
    #[serde(rename = "type")]
    kind: String,
    client_email: String,
    private_key: String,
    #[serde(default)]
    private_key_id: Option<String>,
    #[serde(default)]
    token_uri: Option<String>,
}

/// The assertion's claims.
#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    scope: String,
    aud: &'static str,
    iat: u64,
    exp: u64,
}

/// A token for the service account of the key file `c` names (or
/// `$GOOGLE_APPLICATION_CREDENTIALS`), read again at each refresh.
pub(super) async fn service_account(
    f: &Fetcher,
    c: &RawCredentials,
    now: u64,
) -> Result<(Credential, Option<u64>), CloudError> {
    let path = c.key_file.clone().or_else(|| f.var("GOOGLE_APPLICATION_CREDENTIALS"));
    let path =
        path.ok_or_else(|| CloudError::Missing("credentials.key_file (or GOOGLE_APPLICATION_CREDENTIALS)".into()))?;
    let key = key_file(&path, &read_small_file(&path).await?)?;
    let jwt = assertion(&path, &key, &scopes(c), now)?;
    let url = token_endpoint(c, &key);
    let body = http::form(&[("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"), ("assertion", &jwt)]);
    let (status, answer) = http::post_form(&f.http, &url, body).await?;
    http::bearer(&url, status, &answer, now)
}

/// The key file at `path`, checked to be a service account's.
pub(super) fn key_file(path: &str, text: &str) -> Result<KeyFile, CloudError> {
    let bad = |reason: String| CloudError::KeyFile { path: path.to_string(), reason };
    let key: KeyFile = serde_json::from_str(text).map_err(|e| bad(format!("not a service-account key file: {e}")))?;
    if key.kind != "service_account" {
        return Err(bad(format!("its type is {:?}, not \"service_account\"", key.kind)));
    }
    Ok(key)
}

/// Where the assertion is exchanged: `token_url`, else the key file's `token_uri`, else
/// Google's.
pub(super) fn token_endpoint(c: &RawCredentials, key: &KeyFile) -> String {
    c.token_url.clone().or_else(|| key.token_uri.clone()).unwrap_or_else(|| GOOGLE_TOKEN_URI.to_string())
}

/// The configured scopes, or cloud-platform.
fn scopes(c: &RawCredentials) -> Vec<String> {
    if c.scopes.is_empty() {
        vec![CLOUD_PLATFORM.to_string()]
    } else {
        c.scopes.clone()
    }
}

/// The RS256 assertion of `key` for `scopes`, issued at `now`.
pub(super) fn assertion(path: &str, key: &KeyFile, scopes: &[String], now: u64) -> Result<String, CloudError> {
    let bad = |reason: String| CloudError::KeyFile { path: path.to_string(), reason };
    let der = der::rsa_private_key(&key.private_key).map_err(|e| bad(format!("private_key: {e}")))?;
    let header = Header { kid: key.private_key_id.clone(), ..Header::new(Algorithm::RS256) };
    let claims = Claims {
        iss: &key.client_email,
        scope: scopes.join(" "),
        aud: GOOGLE_TOKEN_URI,
        iat: now,
        exp: now + ASSERTION_LIFETIME_SECS,
    };
    jsonwebtoken::encode(&header, &claims, &EncodingKey::from_rsa_der(&der))
        .map_err(|_| bad("private_key is not a usable RSA key".into()))
}

/// The attached service account's token from the metadata server (`token_url`, else
/// `http://$GCE_METADATA_HOST`, else `metadata.google.internal`), for the configured scopes
/// when there are some (else the account's own).
pub(super) async fn metadata(
    f: &Fetcher,
    c: &RawCredentials,
    now: u64,
) -> Result<(Credential, Option<u64>), CloudError> {
    let url = metadata_url(f, c);
    let request = f.http.get(&url).header("Metadata-Flavor", "Google");
    let (status, answer) = http::send(request, &url).await?;
    http::bearer(&url, status, &answer, now)
}

/// The metadata server's token URL for `c`.
fn metadata_url(f: &Fetcher, c: &RawCredentials) -> String {
    let base = c.token_url.clone().or_else(|| f.var("GCE_METADATA_HOST").map(|host| format!("http://{host}")));
    let base = base.unwrap_or_else(|| METADATA.to_string());
    let mut url = format!("{}{METADATA_TOKEN}", base.trim_end_matches('/'));
    if !c.scopes.is_empty() {
        url.push('?');
        url.push_str(&http::form(&[("scopes", &c.scopes.join(","))]));
    }
    url
}
