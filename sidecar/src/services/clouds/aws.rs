//! AWS keys: from the environment (`aws_env`, as botocore's `EnvProvider` reads it) or from
//! STS `AssumeRoleWithWebIdentity` with a web-identity token file (`aws_web_identity`: IRSA,
//! EKS Pod Identity's web-identity mode), as botocore's `AssumeRoleWithWebIdentityProvider`.

use ferrogate_core::config::cloud::{RawAwsKeys, RawCredentials};
use ferrogate_core::config::syntax::parse_rfc3339;
use reqwest::StatusCode;

use super::{http, read_small_file, CloudError, Credential, Fetcher, Source};
use ferrogate_core::clouds::xml::{self, XmlError};

/// The STS answer's credentials, below its root.
const CREDENTIALS: [&str; 3] = ["AssumeRoleWithWebIdentityResponse", "AssumeRoleWithWebIdentityResult", "Credentials"];

/// Keys from the variables `c` names (botocore's defaults otherwise); with the default
/// variables, `AWS_SESSION_TOKEN` falls back to the legacy `AWS_SECURITY_TOKEN` and
/// `AWS_CREDENTIAL_EXPIRATION` (ISO 8601) says when they end.
pub(super) fn from_env(f: &Fetcher, c: &RawCredentials) -> Result<(Credential, Option<u64>), CloudError> {
    let id_var = c.access_key_id_env.as_deref().unwrap_or("AWS_ACCESS_KEY_ID");
    let secret_var = c.secret_access_key_env.as_deref().unwrap_or("AWS_SECRET_ACCESS_KEY");
    let access_key_id = f.var(id_var).ok_or_else(|| CloudError::Missing(id_var.to_string()))?;
    let secret_access_key = f.var(secret_var).ok_or_else(|| CloudError::Missing(secret_var.to_string()))?;
    let session_token = match &c.session_token_env {
        Some(var) => f.var(var),
        None => f.var("AWS_SESSION_TOKEN").or_else(|| f.var("AWS_SECURITY_TOKEN")),
    };
    let expires_at = match c.access_key_id_env {
        Some(_) => None,
        None => f.var("AWS_CREDENTIAL_EXPIRATION").map(|s| unix_secs("AWS_CREDENTIAL_EXPIRATION", &s)).transpose()?,
    };
    let keys = RawAwsKeys { access_key_id, secret_access_key, session_token, expires_at };
    check_keys(&keys)?;
    Ok((Credential::Aws(keys), expires_at))
}

/// Exchanges the web-identity token for temporary keys at STS (an unsigned call: the token is
/// the proof).
pub(super) async fn web_identity(
    f: &Fetcher,
    source: &Source,
    now: u64,
) -> Result<(Credential, Option<u64>), CloudError> {
    let c = &source.settings;
    let role = c.role_arn.clone().or_else(|| f.var("AWS_ROLE_ARN"));
    let role = role.ok_or_else(|| CloudError::Missing("credentials.role_arn (or AWS_ROLE_ARN)".into()))?;
    let token_file = c.token_file.clone().or_else(|| f.var("AWS_WEB_IDENTITY_TOKEN_FILE"));
    let token_file = token_file
        .ok_or_else(|| CloudError::Missing("credentials.token_file (or AWS_WEB_IDENTITY_TOKEN_FILE)".into()))?;
    let token = read_small_file(&token_file).await?;
    let session = c.session_name.clone().or_else(|| f.var("AWS_ROLE_SESSION_NAME"));
    let session = session.unwrap_or_else(|| format!("ferrogate-{now}"));
    let url = sts_url(c.token_url.as_deref(), source.region.as_deref());
    let body = http::form(&[
        ("Action", "AssumeRoleWithWebIdentity"),
        ("Version", "2011-06-15"),
        ("RoleArn", &role),
        ("RoleSessionName", &session),
        ("WebIdentityToken", &token),
    ]);
    let (status, answer) = http::post_form(&f.http, &url, body).await?;
    let keys = sts_answer(&url, status, &answer)?;
    let expires_at = keys.expires_at;
    Ok((Credential::Aws(keys), expires_at))
}

/// Where the call goes: `token_url`, else the provider's regional STS endpoint (the global one
/// without a region), always at path `/`.
pub(super) fn sts_url(token_url: Option<&str>, region: Option<&str>) -> String {
    let base = match (token_url, region) {
        (Some(url), _) => url.to_string(),
        (None, Some(region)) => format!("https://sts.{region}.amazonaws.com"),
        (None, None) => "https://sts.amazonaws.com".to_string(),
    };
    format!("{}/", base.trim_end_matches('/'))
}

/// The keys of an STS answer, or the error it gives (`Code: Message`).
pub(super) fn sts_answer(url: &str, status: StatusCode, body: &[u8]) -> Result<RawAwsKeys, CloudError> {
    let text = String::from_utf8_lossy(body);
    if !status.is_success() {
        let field = |name| xml::text(&text, &["ErrorResponse", "Error", name]).ok();
        let said = match (field("Code"), field("Message")) {
            (Some(code), Some(message)) => format!(": {code}: {}", http::clip(&message)),
            (Some(code), None) => format!(": {code}"),
            _ => format!(" ({}-byte answer)", body.len()),
        };
        return Err(CloudError::Endpoint(format!("STS {url}: {status}{said}")));
    }
    let bad = |e: XmlError| CloudError::Answer(format!("STS {url}: not an AssumeRoleWithWebIdentity answer: {e}"));
    let field = |name: &str| {
        let path = [CREDENTIALS[0], CREDENTIALS[1], CREDENTIALS[2], name];
        xml::text(&text, &path).map_err(bad)
    };
    let expiration = field("Expiration")?;
    let keys = RawAwsKeys {
        access_key_id: field("AccessKeyId")?,
        secret_access_key: field("SecretAccessKey")?,
        session_token: Some(field("SessionToken")?),
        expires_at: Some(unix_secs("Expiration", &expiration)?),
    };
    check_keys(&keys)?;
    Ok(keys)
}

/// An ISO 8601 / RFC 3339 time in Unix seconds.
fn unix_secs(what: &str, value: &str) -> Result<u64, CloudError> {
    let secs = parse_rfc3339(value.trim()).map_err(|e| CloudError::Answer(format!("{what}: {e}")))?;
    u64::try_from(secs).map_err(|_| CloudError::Answer(format!("{what}: {value:?} is before 1970")))
}

/// Keys the filter can put in headers.
fn check_keys(keys: &RawAwsKeys) -> Result<(), CloudError> {
    let header_safe = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic());
    let token_ok = keys.session_token.as_deref().is_none_or(header_safe);
    if header_safe(&keys.access_key_id) && header_safe(&keys.secret_access_key) && token_ok {
        Ok(())
    } else {
        Err(CloudError::Unusable("an AWS key is empty or holds spaces or control characters".into()))
    }
}
