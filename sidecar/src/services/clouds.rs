//! Short-lived credentials of cloud providers (`providers[].credentials`), minted by the
//! sidecar and handed to the filter in the snapshot: AWS keys for SigV4 (`aws_keys`, from the
//! environment or from STS `AssumeRoleWithWebIdentity`), and bearer tokens as the provider's
//! `api_key` (Google's JWT bearer grant or metadata server, Entra ID's client-credentials
//! grant). The filter cannot read files, the environment or call token endpoints itself, so
//! this follows the `endpoints_dns` pattern ([`super::dns`]): [`sources`] lists what a
//! configuration asks for, [`State`] (held by [`Snapshots`](super::snapshot::Snapshots)) keeps the current credential of
//! each provider, [`expand`] puts them in every publication, and [`start`] mints them at once
//! and again before they expire, republishing on a change. A failed refresh keeps the last
//! good credential while it is valid and is retried with backoff.
//!
//! Secrets (keys, tokens, client secrets, assertions) never reach logs, errors or `Debug`
//! output; the snapshot cache drops them ([`super::snapshot`]) and they are minted again at
//! start.

mod aws;
mod azure;
mod der;
mod gcp;
mod http;
mod refresh;
mod state;

use std::collections::BTreeMap;
use std::sync::Arc;

use ferrogate_core::config::cloud::{RawAwsKeys, RawCredentials};
use ferrogate_core::config::{RawConfig, RawProvider};

pub use refresh::{client, start};
pub use state::State;

/// A credential source, as spelt in `credentials.source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// AWS keys from environment variables.
    AwsEnv,
    /// IRSA: a web-identity token file exchanged at STS.
    AwsWebIdentity,
    /// A Google service account's JSON key file (JWT bearer grant).
    GcpServiceAccount,
    /// The Google metadata server (GKE Workload Identity, GCE, Cloud Run).
    GcpMetadata,
    /// Entra ID client credentials: a client secret or a federated token file.
    AzureClientCredentials,
}

impl SourceKind {
    /// The kind `source` names, if any.
    pub fn parse(source: &str) -> Option<SourceKind> {
        Some(match source {
            "aws_env" => SourceKind::AwsEnv,
            "aws_web_identity" => SourceKind::AwsWebIdentity,
            "gcp_service_account" => SourceKind::GcpServiceAccount,
            "gcp_metadata" => SourceKind::GcpMetadata,
            "azure_client_credentials" => SourceKind::AzureClientCredentials,
            _ => return None,
        })
    }

    /// As spelt in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::AwsEnv => "aws_env",
            SourceKind::AwsWebIdentity => "aws_web_identity",
            SourceKind::GcpServiceAccount => "gcp_service_account",
            SourceKind::GcpMetadata => "gcp_metadata",
            SourceKind::AzureClientCredentials => "azure_client_credentials",
        }
    }

    /// Whether it mints AWS keys (else a bearer token).
    pub fn is_aws(self) -> bool {
        matches!(self, SourceKind::AwsEnv | SourceKind::AwsWebIdentity)
    }

    /// Seconds before expiry a credential is minted again: botocore's advisory refresh
    /// margin for AWS (15 min); for Google 5 min, a little more than google-auth's 3 min 45 s
    /// so that a slow token endpoint still answers before the filter's token ends; Entra's
    /// 5 min as azure-identity.
    pub fn margin_secs(self) -> u64 {
        if self.is_aws() {
            15 * 60
        } else {
            5 * 60
        }
    }
}

/// One provider's credential source: the `credentials` block as written and the provider's
/// region (STS is regional). Compared whole: any change mints again.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    /// Which source.
    pub kind: SourceKind,
    /// The block's fields (names of variables and files, ids, URLs: no secret).
    pub settings: RawCredentials,
    /// The provider's `region`.
    pub region: Option<String>,
}

impl Source {
    /// The source of `provider`: its `credentials` block with a known source (an unknown one is
    /// the configuration's problem, reported by its validation), else the cloud's default chain
    /// ([`ferrogate_core::config::cloud::signs_in`]), read from the environment.
    pub fn of(provider: &RawProvider) -> Option<Source> {
        Source::of_with(provider, |name| std::env::var(name).ok())
    }

    /// [`Source::of`] with the environment looked up by `env`.
    pub fn of_with(provider: &RawProvider, env: impl Fn(&str) -> Option<String>) -> Option<Source> {
        let region = provider.region.clone();
        if let Some(settings) = provider.credentials.as_deref() {
            let kind = SourceKind::parse(&settings.source)?;
            return Some(Source { kind, settings: settings.clone(), region });
        }
        if !ferrogate_core::config::cloud::signs_in(provider) {
            return None;
        }
        let (kind, key_file) = match provider.kind.as_str() {
            // botocore's chain: web identity when both its variables are set, else the keys.
            "bedrock" if env("AWS_WEB_IDENTITY_TOKEN_FILE").is_some() && env("AWS_ROLE_ARN").is_some() => {
                (SourceKind::AwsWebIdentity, None)
            }
            "bedrock" => (SourceKind::AwsEnv, None),
            // google-auth's: the named key file, then GOOGLE_APPLICATION_CREDENTIALS, then metadata.
            _ => match provider.credentials_file_env.as_deref() {
                Some(var) => {
                    (SourceKind::GcpServiceAccount, Some(env(var).unwrap_or_else(|| format!("${var} (unset)"))))
                }
                None if env("GOOGLE_APPLICATION_CREDENTIALS").is_some() => (SourceKind::GcpServiceAccount, None),
                None => (SourceKind::GcpMetadata, None),
            },
        };
        let settings = RawCredentials { source: kind.as_str().to_string(), key_file, ..RawCredentials::default() };
        Some(Source { kind, settings, region })
    }
}

/// What a source mints.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// SigV4 keys (`aws_keys`).
    Aws(RawAwsKeys),
    /// An OAuth access token, sent as `Authorization: Bearer` (`api_key`).
    Bearer(String),
}

impl std::fmt::Debug for Credential {
    // Tokens and keys never reach logs, even through `{:?}` of the state.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Aws(keys) => f.debug_tuple("Aws").field(keys).finish(),
            Credential::Bearer(_) => f.write_str("Bearer(<redacted>)"),
        }
    }
}

/// A provider's current credential and the source it was minted from.
#[derive(Debug, Clone, PartialEq)]
pub struct Minted {
    /// The source it came from: a credential of another source is never served.
    pub source: Source,
    /// The credential.
    pub credential: Credential,
    /// When it ends (Unix seconds), if it does.
    pub expires_at: Option<u64>,
}

/// The current credential of each provider, by provider name.
pub type MintedMap = BTreeMap<String, Minted>;

/// Why a credential could not be minted. Messages name variables, files and endpoints, never
/// a secret.
#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    /// A setting is neither configured nor in the environment.
    #[error("{0} is not set")]
    Missing(String),
    /// A setting's value cannot be used.
    #[error("{0}")]
    Invalid(String),
    /// A token, key or secret file cannot be read.
    #[error("cannot read {path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A Google service-account key file is not usable.
    #[error("key file {path}: {reason}")]
    KeyFile {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No answer from the endpoint, or an error answer.
    #[error("{0}")]
    Endpoint(String),
    /// A success answer that holds no usable credential.
    #[error("{0}")]
    Answer(String),
    /// A credential the filter could not send (empty, spaces, control characters).
    #[error("unusable credential: {0}")]
    Unusable(String),
}

/// Looks up an environment variable (the process's, or a fake in tests).
pub(crate) type Env = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Mints credentials: the HTTP client for token endpoints and the environment.
#[derive(Clone)]
pub(crate) struct Fetcher {
    http: reqwest::Client,
    env: Env,
}

impl Fetcher {
    /// A fetcher reading `env`.
    pub(crate) fn new(http: reqwest::Client, env: Env) -> Fetcher {
        Fetcher { http, env }
    }

    /// Variable `name`; an empty value counts as unset (as botocore and azure-identity read
    /// them).
    fn var(&self, name: &str) -> Option<String> {
        (self.env)(name).filter(|v| !v.is_empty())
    }

    /// Mints `source`'s credential now: the credential and when it ends (Unix seconds).
    ///
    /// # Errors
    /// What is missing, unreadable or refused, per [`CloudError`].
    pub(crate) async fn mint(&self, source: &Source) -> Result<(Credential, Option<u64>), CloudError> {
        let now = unix_now();
        let (credential, expires_at) = match source.kind {
            SourceKind::AwsEnv => aws::from_env(self, &source.settings),
            SourceKind::AwsWebIdentity => aws::web_identity(self, source, now).await,
            SourceKind::GcpServiceAccount => gcp::service_account(self, &source.settings, now).await,
            SourceKind::GcpMetadata => gcp::metadata(self, &source.settings, now).await,
            SourceKind::AzureClientCredentials => azure::client_credentials(self, &source.settings, now).await,
        }?;
        // Served, it would be dropped at once and minted again every second.
        if expires_at.is_some_and(|end| end <= now) {
            return Err(CloudError::Answer("the credential handed over has already ended".into()));
        }
        Ok((credential, expires_at))
    }
}

/// The providers of `raw` with a `credentials` block, with their sources.
pub fn sources(raw: &RawConfig) -> Vec<(String, Source)> {
    raw.providers.iter().filter_map(|p| Some((p.name.clone(), Source::of(p)?))).collect()
}

/// `raw` with each provider's current credential filled in: `aws_keys` for AWS sources,
/// `api_key` for the others. A provider with a `credentials` block and no credential yet (or
/// only an expired one, or one of a source it no longer has) is left with none, which the
/// filter answers with a clear error instead of an upstream 401.
pub fn expand(raw: RawConfig, minted: &MintedMap) -> RawConfig {
    expand_at(raw, minted, unix_now())
}

/// [`expand`] at Unix time `now`.
fn expand_at(mut raw: RawConfig, minted: &MintedMap, now: u64) -> RawConfig {
    for provider in &mut raw.providers {
        let Some(source) = Source::of(provider) else { continue };
        let current = minted
            .get(&provider.name)
            .filter(|m| m.source == source && m.expires_at.is_none_or(|end| end > now))
            .map(|m| &m.credential);
        if source.kind.is_aws() {
            provider.aws_keys = match current {
                Some(Credential::Aws(keys)) => Some(Box::new(keys.clone())),
                _ => None,
            };
        } else {
            provider.api_key = match current {
                Some(Credential::Bearer(token)) => Some(token.clone()),
                _ => None,
            };
        }
    }
    raw
}

/// Largest token or secret file read (a projected service-account token is about 1 KiB).
const FILE_LIMIT: u64 = 64 << 10;

/// The trimmed contents of a token, key or secret file, read again at each refresh (kubelet
/// rotates projected tokens in place).
async fn read_small_file(path: &str) -> Result<String, CloudError> {
    let fail = |reason: String| CloudError::File { path: path.to_string(), reason };
    let meta = tokio::fs::metadata(path).await.map_err(|e| fail(e.to_string()))?;
    if meta.len() > FILE_LIMIT {
        return Err(fail(format!("larger than {FILE_LIMIT} bytes")));
    }
    let text = tokio::fs::read_to_string(path).await.map_err(|e| fail(e.to_string()))?;
    let text = text.trim();
    if text.is_empty() {
        return Err(fail("the file is empty".into()));
    }
    Ok(text.to_string())
}

/// A bearer token the filter can send in a header.
fn check_token(token: &str) -> Result<(), CloudError> {
    if token.is_empty() || token.bytes().any(|b| !b.is_ascii_graphic()) {
        return Err(CloudError::Unusable("the access token is empty or holds spaces or control characters".into()));
    }
    Ok(())
}

/// Unix seconds now.
fn unix_now() -> u64 {
    crate::services::now_ms() / 1000
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_http;
#[cfg(test)]
mod tests_refresh;
