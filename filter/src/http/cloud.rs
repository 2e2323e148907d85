//! Requests to cloud providers that sign each request rather than carry a key: AWS Bedrock's
//! SigV4 signature is computed here, per attempt, over the final path and body (a retry is
//! another attempt and is signed again, with its own time).

use ferrogate_core::clouds::sigv4::SignedHeaders;
use ferrogate_core::clouds::{check_fresh, sign_bedrock, BedrockRequest};
use ferrogate_core::config::Config;
use ferrogate_core::openai::ApiError;
use ferrogate_core::route::cloud::with_client_betas;
use ferrogate_core::route::RouteDecision;
use proxy_wasm::traits::HttpContext;

use super::Stream;

/// What Bedrock bodies are sent as (and signed with).
const JSON: &str = "application/json";

impl Stream {
    /// A 503 for a Bedrock request whose temporary keys are about to expire (checked before
    /// the request is admitted, so nothing is reserved for it).
    pub(super) fn check_signing(d: &RouteDecision<'_>) -> Result<(), ApiError> {
        let Some((_, keys)) = d.aws else { return Ok(()) };
        check_fresh(keys, crate::raw::now_nanos() / 1_000_000_000)
            .map_err(|e| ApiError::unavailable(format!("Provider '{}': {e} (see the sidecar's log).", d.provider)))
    }

    /// The SigV4 headers of a Bedrock request routed by `d` (`None` for other providers),
    /// over `sent`, the body that goes upstream when the decision does not replace it.
    pub(super) fn sign_upstream(&self, d: &RouteDecision<'_>, sent: &[u8]) -> Option<SignedHeaders> {
        let (region, keys) = d.aws?;
        let request = BedrockRequest {
            host: d.authority,
            path: &d.path,
            content_type: JSON,
            body: d.body.as_deref().unwrap_or(sent),
        };
        let now_secs = crate::raw::now_nanos() / 1_000_000_000;
        sign_bedrock(keys, region, &request, now_secs)
            .map_err(|e| log::warn!("#{} the request to {} goes unsigned: {e}", self.id, d.provider))
            .ok()
    }

    /// Puts the client's `anthropic-beta` betas into the body of a request to Claude on Bedrock
    /// ([`with_client_betas`]), before it is signed.
    pub(super) fn add_betas(
        &self,
        config: &Config,
        head_map: &[u8],
        d: &mut RouteDecision<'_>,
        sent: &[u8],
    ) -> Result<(), ApiError> {
        let Some(header) = self.anthropic_beta.clone().and_then(|span| head_map.get(span)) else { return Ok(()) };
        if let Some(body) = with_client_betas(config, d, d.body.as_deref().unwrap_or(sent), header)? {
            d.body = Some(body);
        }
        Ok(())
    }

    /// Puts the signature on the request head (which must still be paused).
    pub(super) fn set_signed(&mut self, signed: &SignedHeaders) {
        self.set_http_request_header("content-type", Some(JSON));
        for (name, value) in signed.pairs() {
            self.set_http_request_header(name, Some(value));
        }
        if signed.x_amz_security_token.is_none() {
            // A client's token must not ride along with keys that have none.
            self.set_http_request_header("x-amz-security-token", None);
        }
    }
}
