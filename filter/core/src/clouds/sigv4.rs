//! AWS Signature Version 4 (`AWS4-HMAC-SHA256`), header-signed, as botocore's `SigV4Auth` signs
//! Bedrock requests: the filter buffers the whole request body, then signs the request exactly
//! as it will go on the wire and adds the headers [`sign`] returns.
//!
//! Parity notes (checked against botocore by `testdata/clouds/sigv4_vectors.json`):
//! - the path is signed as sent, percent-encoded once more (`%3A` → `%253A`), so nothing after
//!   the filter may unescape or normalise it;
//! - the payload hash covers the whole body (no `UNSIGNED-PAYLOAD`);
//! - hop-by-hop and tracing headers are never signed, and `host` must be among the headers.

mod canonical;
mod date;
mod hmac;

use std::fmt;

pub use canonical::canonical_query;
pub use date::AmzDate;

use crate::hex;
use canonical::{canonical_headers, canonical_uri, header_to_sign};
use hmac::{hmac_sha256, sha256};

const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// Why a request could not be signed: all are caller errors (bad input), none depend on AWS.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigV4Error {
    /// The time is not `YYYYMMDDTHHMMSSZ` or is past year 9999.
    #[error("invalid SigV4 date")]
    InvalidDate,
    /// The path carries a query or a fragment; pass the query as pairs.
    #[error("the path to sign contains '?' or '#'")]
    PathWithQuery,
    /// The path does not start with `/`.
    #[error("the path to sign does not start with '/'")]
    PathNotAbsolute,
    /// A header name is empty, not visible ASCII, or a pseudo-header.
    #[error("invalid header name to sign: {0:?}")]
    InvalidHeaderName(String),
    /// No `host` among the headers to sign (every SigV4 signature covers it).
    #[error("no host header to sign")]
    MissingHost,
    /// A credential-scope part (access key id, region, service) is empty or has characters that
    /// would break the `Authorization` header's syntax.
    #[error("invalid {0} for the credential scope")]
    InvalidScope(&'static str),
    /// The session token is empty or has characters not allowed in a header value.
    #[error("invalid session token")]
    InvalidSessionToken,
}

/// AWS credentials; the secret never appears in `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials<'a> {
    /// Access key id (`AKIA…` long-term, `ASIA…` temporary).
    pub access_key_id: &'a str,
    /// Secret access key.
    pub secret_access_key: &'a str,
    /// Session token of temporary credentials, sent and signed as `x-amz-security-token`.
    pub session_token: Option<&'a str>,
}

impl fmt::Debug for Credentials<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field("session_token", &self.session_token.map(|_| "<redacted>"))
            .finish()
    }
}

/// The request as it will be sent upstream.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// HTTP method (upper-cased for the signature).
    pub method: &'a str,
    /// The path exactly as sent, already percent-encoded, without the query.
    pub path: &'a str,
    /// Query parameters, not encoded; send them as [`canonical_query`] writes them.
    pub query: &'a [(&'a str, &'a str)],
    /// The headers to sign, `host` included, names in any case. Hop-by-hop and tracing headers
    /// and the signer's own (`authorization`, `x-amz-*` it sets) are skipped.
    pub headers: &'a [(&'a str, &'a str)],
    /// The whole body.
    pub body: &'a [u8],
}

/// Who signs, for which service and region, when.
#[derive(Debug, Clone)]
pub struct Signing<'a> {
    /// The credentials.
    pub credentials: Credentials<'a>,
    /// AWS region, e.g. `us-east-1`.
    pub region: &'a str,
    /// Signing name, `bedrock` for the Bedrock runtime.
    pub service: &'a str,
    /// The request time (also sent as `x-amz-date`).
    pub date: AmzDate,
    /// Also send (and sign) `x-amz-content-sha256`; botocore does not for Bedrock.
    pub content_sha256_header: bool,
}

/// The headers to add to the request (replacing any of the same names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedHeaders {
    /// `authorization`.
    pub authorization: String,
    /// `x-amz-date`.
    pub x_amz_date: String,
    /// `x-amz-security-token`, with temporary credentials.
    pub x_amz_security_token: Option<String>,
    /// `x-amz-content-sha256`, if [`Signing::content_sha256_header`].
    pub x_amz_content_sha256: Option<String>,
}

impl SignedHeaders {
    /// `(name, value)` pairs, names lower-case.
    pub fn pairs(&self) -> Vec<(&'static str, &str)> {
        let mut out = vec![("authorization", self.authorization.as_str()), ("x-amz-date", self.x_amz_date.as_str())];
        if let Some(token) = &self.x_amz_security_token {
            out.push(("x-amz-security-token", token));
        }
        if let Some(hash) = &self.x_amz_content_sha256 {
            out.push(("x-amz-content-sha256", hash));
        }
        out
    }
}

/// The canonical request and the signed-header list, before hashing (exposed for diagnostics
/// and for comparing with other signers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canonical {
    /// The canonical request text.
    pub request: String,
    /// `host;x-amz-date;…`.
    pub signed_headers: String,
    /// Hex SHA-256 of the body.
    pub payload_hash: String,
}

/// Signs `request`; see the module notes for what must not change afterwards.
pub fn sign(request: &Request<'_>, signing: &Signing<'_>) -> Result<SignedHeaders, SigV4Error> {
    check_scope(signing)?;
    let canonical = canonical_request(request, signing)?;
    let to_sign = string_to_sign(signing, &canonical.request);
    let key = signing_key(signing.credentials.secret_access_key, signing.date.day(), signing.region, signing.service);
    let signature = hex::encode(&hmac_sha256(&key, &[to_sign.as_bytes()]));
    let authorization = format!(
        "{ALGORITHM} Credential={}/{}, SignedHeaders={}, Signature={signature}",
        signing.credentials.access_key_id,
        scope(signing),
        canonical.signed_headers
    );
    Ok(SignedHeaders {
        authorization,
        x_amz_date: signing.date.as_str().to_owned(),
        x_amz_security_token: signing.credentials.session_token.map(str::to_owned),
        x_amz_content_sha256: signing.content_sha256_header.then_some(canonical.payload_hash),
    })
}

/// The canonical request of `request` as [`sign`] hashes it.
pub fn canonical_request(request: &Request<'_>, signing: &Signing<'_>) -> Result<Canonical, SigV4Error> {
    let uri = canonical_uri(request.path)?;
    let payload_hash = hex::encode(&sha256(&[request.body]));
    let headers = headers_to_sign(request, signing, &payload_hash)?;
    let (header_block, signed_headers) = canonical_headers(&headers);
    let method = request.method.to_ascii_uppercase();
    let query = canonical_query(request.query);
    let text = format!("{method}\n{uri}\n{query}\n{header_block}\n{signed_headers}\n{payload_hash}");
    Ok(Canonical { request: text, signed_headers, payload_hash })
}

/// The string to sign: algorithm, time, scope, hex SHA-256 of the canonical request.
pub fn string_to_sign(signing: &Signing<'_>, canonical_request: &str) -> String {
    let digest = hex::encode(&sha256(&[canonical_request.as_bytes()]));
    format!("{ALGORITHM}\n{}\n{}\n{digest}", signing.date.as_str(), scope(signing))
}

/// The signing key: HMAC chain from `"AWS4" + secret` through day, region, service and
/// `aws4_request`. Valid for a whole UTC day, so a caller may cache it per (secret, day).
pub fn signing_key(secret: &str, day: &str, region: &str, service: &str) -> [u8; 32] {
    let k_date = hmac_sha256(format!("AWS4{secret}").as_bytes(), &[day.as_bytes()]);
    let k_region = hmac_sha256(&k_date, &[region.as_bytes()]);
    let k_service = hmac_sha256(&k_region, &[service.as_bytes()]);
    hmac_sha256(&k_service, &[b"aws4_request"])
}

fn scope(signing: &Signing<'_>) -> String {
    format!("{}/{}/{}/aws4_request", signing.date.day(), signing.region, signing.service)
}

/// The caller's headers worth signing, then the signer's own.
fn headers_to_sign(
    request: &Request<'_>,
    signing: &Signing<'_>,
    payload_hash: &str,
) -> Result<Vec<(String, String)>, SigV4Error> {
    let mut out = Vec::with_capacity(request.headers.len() + 3);
    for (name, value) in request.headers {
        if let Some(lower) = header_to_sign(name)? {
            out.push((lower, (*value).to_owned()));
        }
    }
    if !out.iter().any(|(name, _)| name == "host") {
        return Err(SigV4Error::MissingHost);
    }
    out.push(("x-amz-date".to_owned(), signing.date.as_str().to_owned()));
    if let Some(token) = signing.credentials.session_token {
        out.push(("x-amz-security-token".to_owned(), token.to_owned()));
    }
    if signing.content_sha256_header {
        out.push(("x-amz-content-sha256".to_owned(), payload_hash.to_owned()));
    }
    Ok(out)
}

/// Scope parts end up inside `Credential=…/…`: `/`, `,`, spaces or controls would change its
/// meaning or make the header invalid.
fn check_scope(signing: &Signing<'_>) -> Result<(), SigV4Error> {
    let part_ok =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let parts = [
        ("access key id", signing.credentials.access_key_id),
        ("region", signing.region),
        ("service", signing.service),
    ];
    if let Some((what, _)) = parts.iter().find(|(_, value)| !part_ok(value)) {
        return Err(SigV4Error::InvalidScope(what));
    }
    match signing.credentials.session_token {
        Some(token) if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) => {
            Err(SigV4Error::InvalidSessionToken)
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
