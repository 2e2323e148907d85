//! Entra ID tokens for Azure OpenAI: the client-credentials grant with a client secret
//! (azure-identity's `ClientSecretCredential`) or with a federated token file as client
//! assertion (`WorkloadIdentityCredential`: AKS workload identity), for the Cognitive
//! Services scope.

use ferrogate_core::config::cloud::RawCredentials;

use super::{http, read_small_file, CloudError, Credential, Fetcher};

/// The scope of Azure OpenAI (Cognitive Services) tokens.
pub(super) const SCOPE: &str = "https://cognitiveservices.azure.com/.default";
/// Entra's public-cloud authority when `$AZURE_AUTHORITY_HOST` names no other.
const AUTHORITY: &str = "https://login.microsoftonline.com";
/// `client_assertion_type` of a JWT assertion (RFC 7523).
const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// How the client proves itself.
enum Proof {
    /// `client_secret`.
    Secret(String),
    /// A federated token (`client_assertion`).
    Assertion(String),
}

/// A token from the client-credentials grant.
pub(super) async fn client_credentials(
    f: &Fetcher,
    c: &RawCredentials,
    now: u64,
) -> Result<(Credential, Option<u64>), CloudError> {
    let client = c.client_id.clone().or_else(|| f.var("AZURE_CLIENT_ID"));
    let client = client.ok_or_else(|| CloudError::Missing("credentials.client_id (or AZURE_CLIENT_ID)".into()))?;
    let url = token_url(f, c)?;
    let mut pairs = vec![("grant_type", "client_credentials"), ("client_id", client.as_str()), ("scope", SCOPE)];
    let proof = proof(f, c).await?;
    match &proof {
        Proof::Secret(secret) => pairs.push(("client_secret", secret)),
        Proof::Assertion(token) => pairs.extend([("client_assertion_type", JWT_BEARER), ("client_assertion", token)]),
    }
    let (status, answer) = http::post_form(&f.http, &url, http::form(&pairs)).await?;
    http::bearer(&url, status, &answer, now)
}

/// `token_url`, else the tenant's v2.0 token endpoint at `$AZURE_AUTHORITY_HOST` (default
/// Entra's public cloud).
pub(super) fn token_url(f: &Fetcher, c: &RawCredentials) -> Result<String, CloudError> {
    if let Some(url) = &c.token_url {
        return Ok(url.clone());
    }
    let tenant = c.tenant_id.clone().or_else(|| f.var("AZURE_TENANT_ID"));
    let tenant = tenant.ok_or_else(|| CloudError::Missing("credentials.tenant_id (or AZURE_TENANT_ID)".into()))?;
    // It goes into the URL's path.
    if !tenant.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.') {
        return Err(CloudError::Invalid(format!("tenant id {tenant:?} holds other than letters, digits, '-' and '.'")));
    }
    let authority = f.var("AZURE_AUTHORITY_HOST").unwrap_or_else(|| AUTHORITY.to_string());
    // azure-identity takes a bare host name as https.
    let authority = if authority.contains("://") { authority } else { format!("https://{authority}") };
    Ok(format!("{}/{tenant}/oauth2/v2.0/token", authority.trim_end_matches('/')))
}

/// The client secret when `client_secret_env` names one, else the federated token file
/// (`token_file` or `$AZURE_FEDERATED_TOKEN_FILE`), read again at each refresh.
async fn proof(f: &Fetcher, c: &RawCredentials) -> Result<Proof, CloudError> {
    if let Some(var) = &c.client_secret_env {
        return f.var(var).map(Proof::Secret).ok_or_else(|| CloudError::Missing(var.clone()));
    }
    let file = c.token_file.clone().or_else(|| f.var("AZURE_FEDERATED_TOKEN_FILE"));
    let file = file.ok_or_else(|| {
        CloudError::Missing(
            "credentials.client_secret_env, credentials.token_file or AZURE_FEDERATED_TOKEN_FILE".into(),
        )
    })?;
    Ok(Proof::Assertion(read_small_file(&file).await?))
}
