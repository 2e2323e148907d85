//! Cloud providers reached with their own wire protocols rather than a bearer key. For AWS
//! Bedrock the filter signs each upstream request itself and reads streamed answers framed in
//! AWS's binary event-stream encoding:
//!
//! - [`sigv4`]: AWS Signature Version 4 over a fully buffered request (credentials and the
//!   request time are passed in: no clock here).
//! - [`eventstream`]: an incremental, bounded decoder of `application/vnd.amazon.eventstream`.
//! - [`invoke`]: Anthropic models through InvokeModel (the Messages body as Bedrock takes it,
//!   and its streamed answer re-framed as Anthropic's server-sent events).
//! - [`xml`]: values out of STS's XML answers (read by the sidecar, which trades web-identity
//!   tokens for keys; here so that it is fuzzed with the other wire formats).

pub mod eventstream;
pub mod invoke;
pub mod sigv4;
pub mod xml;

use crate::config::cloud::{RawAwsKeys, AWS_KEYS_MARGIN_SECS};

/// The signing name of the Bedrock runtime.
pub const BEDROCK_SERVICE: &str = "bedrock";

/// Why a Bedrock request was not signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    /// The temporary keys end within [`AWS_KEYS_MARGIN_SECS`] (the sidecar has not renewed them).
    #[error("the AWS credentials expire within {AWS_KEYS_MARGIN_SECS} s and were not renewed")]
    Expired,
    /// The signer refused its input.
    #[error(transparent)]
    SigV4(#[from] sigv4::SigV4Error),
}

/// [`SignError::Expired`] for temporary keys that end within [`AWS_KEYS_MARGIN_SECS`] of
/// `now_unix_secs` (AWS refuses a request whose credentials end while it is checked).
pub fn check_fresh(keys: &RawAwsKeys, now_unix_secs: u64) -> Result<(), SignError> {
    match keys.expires_at {
        Some(end) if now_unix_secs.saturating_add(AWS_KEYS_MARGIN_SECS) >= end => Err(SignError::Expired),
        _ => Ok(()),
    }
}

/// The upstream request a Bedrock signature covers.
#[derive(Debug, Clone, Copy)]
pub struct BedrockRequest<'a> {
    /// `:authority` as sent.
    pub host: &'a str,
    /// `:path` as sent (escaped; no query).
    pub path: &'a str,
    /// `content-type` as sent.
    pub content_type: &'a str,
    /// The whole body as sent.
    pub body: &'a [u8],
}

/// Signs a `POST` to the Bedrock runtime in `region` with `keys` at `now_unix_secs`, signing
/// what botocore signs (`content-type`, `host`, `x-amz-date`, `x-amz-security-token`): headers a
/// later hop may add or rewrite (`content-length`, tracing) stay out of the signature.
pub fn sign_bedrock(
    keys: &RawAwsKeys,
    region: &str,
    request: &BedrockRequest<'_>,
    now_unix_secs: u64,
) -> Result<sigv4::SignedHeaders, SignError> {
    check_fresh(keys, now_unix_secs)?;
    let headers = [("host", request.host), ("content-type", request.content_type)];
    let signing = sigv4::Signing {
        credentials: sigv4::Credentials {
            access_key_id: &keys.access_key_id,
            secret_access_key: &keys.secret_access_key,
            session_token: keys.session_token.as_deref(),
        },
        region,
        service: BEDROCK_SERVICE,
        date: sigv4::AmzDate::from_unix_seconds(now_unix_secs)?,
        content_sha256_header: false,
    };
    let req = sigv4::Request { method: "POST", path: request.path, query: &[], headers: &headers, body: request.body };
    Ok(sigv4::sign(&req, &signing)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(expires_at: Option<u64>) -> RawAwsKeys {
        RawAwsKeys {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: Some("SESSIONTOKEN".into()),
            expires_at,
        }
    }

    #[test]
    fn signs_the_contract_vector() {
        // 2026-12-04T12:00:00Z; the vector botocore signs (testdata/clouds/sigv4_vectors.json).
        let now = 1_796_385_600;
        let req = BedrockRequest {
            host: "bedrock-runtime.us-east-1.amazonaws.com",
            path: "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse",
            content_type: "application/json",
            body: br#"{"messages":[{"role":"user","content":[{"text":"hi"}]}]}"#,
        };
        let signed = sign_bedrock(&keys(None), "us-east-1", &req, now).unwrap();
        assert_eq!(signed.x_amz_date, "20261204T120000Z");
        assert!(
            signed
                .authorization
                .ends_with("Signature=7c0b02dc3e920f9902547b1a36551090cce904742df9182f886a630014357646"),
            "{}",
            signed.authorization
        );
        assert_eq!(signed.x_amz_security_token.as_deref(), Some("SESSIONTOKEN"));
        assert_eq!(sign_bedrock(&keys(Some(now + 299)), "us-east-1", &req, now), Err(SignError::Expired));
        assert!(sign_bedrock(&keys(Some(now + 301)), "us-east-1", &req, now).is_ok());
    }
}
