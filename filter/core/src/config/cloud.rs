//! The cloud providers' settings: Azure OpenAI (`azure_openai`), AWS Bedrock (`bedrock`) and
//! Google Vertex AI (`vertex`) — where their API lives (region, project, API version), where
//! the sidecar gets short-lived credentials (`credentials:`), and the AWS keys the sidecar hands
//! the filter for SigV4 signing (`aws_keys`, snapshot only).
//!
//! This module checks its own part of a provider and derives the default `base_url` from the
//! region; it knows nothing else of the configuration.

use serde::{Deserialize, Serialize};

use super::syntax::check_env_name;
use super::validate::Problems;
use super::ProviderKind;

/// Where the sidecar gets a provider's short-lived credentials (`providers[].credentials`).
/// One `source` with the fields it reads; the others must be absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawCredentials {
    /// `aws_env` (keys from the environment), `aws_web_identity` (IRSA: a web-identity token
    /// exchanged at STS), `gcp_service_account` (a key file, JWT bearer grant),
    /// `gcp_metadata` (the metadata server: GKE Workload Identity, GCE, Cloud Run) or
    /// `azure_client_credentials` (Entra ID: a client secret or a federated token file).
    pub source: String,
    /// `aws_env`: variable holding the access key id (default `AWS_ACCESS_KEY_ID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id_env: Option<String>,
    /// `aws_env`: variable holding the secret key (default `AWS_SECRET_ACCESS_KEY`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_access_key_env: Option<String>,
    /// `aws_env`: variable holding the session token, if any (default `AWS_SESSION_TOKEN`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_token_env: Option<String>,
    /// `aws_web_identity`: the role to assume (default: `$AWS_ROLE_ARN`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_arn: Option<String>,
    /// `aws_web_identity`: the token file, read again at each refresh (default:
    /// `$AWS_WEB_IDENTITY_TOKEN_FILE`). `azure_client_credentials`: the federated token file
    /// (default: `$AZURE_FEDERATED_TOKEN_FILE` when no client secret is named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<String>,
    /// `aws_web_identity`: the role session's name (default `ferrogate-<unix seconds>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_name: Option<String>,
    /// `gcp_service_account`: the service account's JSON key file (default:
    /// `$GOOGLE_APPLICATION_CREDENTIALS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
    /// `gcp_*`: OAuth scopes (default `https://www.googleapis.com/auth/cloud-platform`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// `azure_client_credentials`: the directory (tenant) id (default: `$AZURE_TENANT_ID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// `azure_client_credentials`: the application (client) id (default: `$AZURE_CLIENT_ID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// `azure_client_credentials`: variable holding the client secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_env: Option<String>,
    /// The token endpoint, when not the cloud's own: STS for `aws_web_identity`, the OAuth
    /// token URL for `azure_client_credentials` (default
    /// `https://login.microsoftonline.com/{tenant}/oauth2/v2.0/token`) and
    /// `gcp_service_account` (default: the key file's `token_uri`), the metadata server's
    /// base URL for `gcp_metadata` (default `http://metadata.google.internal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_url: Option<String>,
}

/// AWS keys for SigV4, as the sidecar hands them to the filter (`providers[].aws_keys`).
/// Never written in a configuration file: the sidecar fills it from `credentials`.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawAwsKeys {
    /// Access key id (`AKIA…`, `ASIA…`).
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: String,
    /// Session token of temporary credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_token: Option<String>,
    /// When temporary credentials end (Unix seconds): the filter stops signing with them five
    /// minutes before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
}

impl std::fmt::Debug for RawAwsKeys {
    // Keys never reach logs, even through `{:?}` of a whole configuration.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawAwsKeys").field("access_key_id", &self.access_key_id).finish_non_exhaustive()
    }
}

/// A cloud provider's validated settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cloud {
    /// Azure OpenAI: deployment paths with `api-version`, or the v1 API when it is `None`.
    Azure {
        /// `?api-version=` of deployment paths.
        api_version: Option<String>,
    },
    /// AWS Bedrock runtime (Converse).
    Bedrock {
        /// The signing region.
        region: String,
        /// SigV4 keys, when the sidecar has them (else a Bedrock API key, or nothing).
        keys: Option<RawAwsKeys>,
    },
    /// Google Vertex AI.
    Vertex {
        /// The Google Cloud project.
        project: String,
        /// The location (`us-central1`, `europe-west4`, `global`, `us`, `eu`).
        region: String,
    },
}

/// Margin before `expires_at` after which the filter no longer signs with temporary keys (AWS
/// refuses a request whose credentials expire while it is checked).
pub const AWS_KEYS_MARGIN_SECS: u64 = 300;

/// The credential sources, as spelt in `credentials.source`.
const SOURCES: [&str; 5] =
    ["aws_env", "aws_web_identity", "gcp_service_account", "gcp_metadata", "azure_client_credentials"];

/// The raw fields of a provider this module reads.
pub(super) struct CloudFields<'a> {
    pub region: Option<&'a str>,
    pub project: Option<&'a str>,
    pub api_version: Option<&'a str>,
    pub credentials: Option<&'a RawCredentials>,
    pub aws_keys: Option<&'a RawAwsKeys>,
    pub credentials_file_env: Option<&'a str>,
}

/// Whether the sidecar signs in for `p`: it names a `credentials` source, or it is a Bedrock or
/// Vertex provider given no key variable, which signs in as the cloud's SDKs do by default
/// (AWS: web identity when `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN` are set, else the
/// `AWS_*` key variables; Google: `credentials_file_env`, else `GOOGLE_APPLICATION_CREDENTIALS`,
/// else the metadata server). A key the sidecar mints is never a static key: it is minted again
/// rather than cached.
pub fn signs_in(p: &super::RawProvider) -> bool {
    let default_chain = matches!(p.kind.as_str(), "bedrock" | "vertex") && p.api_key_env.is_none();
    p.credentials.is_some() || default_chain && p.api_keys_env.is_empty()
}

/// The `base_url` a cloud kind has when the configuration names none.
pub(super) fn default_base_url(kind: ProviderKind, region: Option<&str>) -> Option<String> {
    let region = region.filter(|r| valid_region(r))?;
    match kind {
        ProviderKind::Bedrock => Some(format!("https://bedrock-runtime.{region}.amazonaws.com")),
        ProviderKind::Vertex => Some(match region {
            "global" => "https://aiplatform.googleapis.com".to_string(),
            "us" | "eu" => format!("https://aiplatform.{region}.rep.googleapis.com"),
            r => format!("https://{r}-aiplatform.googleapis.com"),
        }),
        _ => None,
    }
}

/// Checks the cloud fields of provider `i` of `kind`; the settings of a cloud kind.
pub(super) fn settings(i: usize, kind: ProviderKind, f: &CloudFields<'_>, p: &mut Problems) -> Option<Cloud> {
    let at = |field: &str| format!("providers[{i}].{field}");
    let cloud_of = |allowed: &[ProviderKind]| allowed.contains(&kind);
    only_for(f.region.is_some(), cloud_of(&[ProviderKind::Bedrock, ProviderKind::Vertex]), &at("region"), p);
    only_for(f.project.is_some(), cloud_of(&[ProviderKind::Vertex]), &at("project"), p);
    only_for(f.api_version.is_some(), cloud_of(&[ProviderKind::AzureOpenAi]), &at("api_version"), p);
    only_for(f.aws_keys.is_some(), cloud_of(&[ProviderKind::Bedrock]), &at("aws_keys"), p);
    only_for(f.credentials_file_env.is_some(), cloud_of(&[ProviderKind::Vertex]), &at("credentials_file_env"), p);
    if let Some(var) = f.credentials_file_env {
        p.check(at("credentials_file_env"), check_env_name(var));
        if f.credentials.is_some() {
            p.add(at("credentials_file_env"), "excludes credentials: it is a gcp_service_account source's key_file");
        }
    }
    if let Some(c) = f.credentials {
        credentials(&at("credentials"), kind, c, p);
    }
    if let Some(v) = f.api_version.filter(|v| !valid_api_version(v)) {
        p.add(at("api_version"), format!("{v:?} is not an api-version (e.g. 2024-10-21, 2025-04-01-preview)"));
    }
    match kind {
        ProviderKind::AzureOpenAi => Some(Cloud::Azure { api_version: f.api_version.map(str::to_string) }),
        ProviderKind::Bedrock => {
            let region = required_region(&at("region"), f.region, p)?;
            Some(Cloud::Bedrock { region, keys: f.aws_keys.filter(|k| aws_keys_ok(&at("aws_keys"), k, p)).cloned() })
        }
        ProviderKind::Vertex => {
            let project = f.project.filter(|s| valid_project(s));
            if project.is_none() {
                p.add(at("project"), "vertex needs the Google Cloud project id (6–30 of a-z, 0-9, -)");
            }
            let region = required_region(&at("region"), f.region, p)?;
            Some(Cloud::Vertex { project: project?.to_string(), region })
        }
        _ => None,
    }
}

fn only_for(present: bool, allowed: bool, at: &str, p: &mut Problems) {
    if present && !allowed {
        p.add(at, "not a setting of this provider's kind");
    }
}

fn required_region(at: &str, region: Option<&str>, p: &mut Problems) -> Option<String> {
    match region {
        Some(r) if valid_region(r) => Some(r.to_string()),
        Some(r) => {
            p.add(at, format!("{r:?} is not a region (lower-case letters, digits and '-')"));
            None
        }
        None => {
            p.add(at, "this kind needs its region");
            None
        }
    }
}

/// Regions go into host names and signatures: `us-east-1`, `europe-west4`, `global`.
fn valid_region(r: &str) -> bool {
    !r.is_empty() && r.len() <= 40 && r.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn valid_project(s: &str) -> bool {
    (6..=30).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn valid_api_version(v: &str) -> bool {
    let (date, rest) = v.split_at(v.len().min(10));
    let digits = date.bytes().enumerate().all(|(i, b)| if i == 4 || i == 7 { b == b'-' } else { b.is_ascii_digit() });
    date.len() == 10 && digits && (rest.is_empty() || rest == "-preview")
}

fn aws_keys_ok(at: &str, k: &RawAwsKeys, p: &mut Problems) -> bool {
    let header_safe = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic());
    let token_ok = k.session_token.as_deref().is_none_or(header_safe);
    let ok = header_safe(&k.access_key_id) && header_safe(&k.secret_access_key) && token_ok;
    if !ok {
        p.add(at, "an AWS key is empty or holds spaces or control characters");
    }
    ok
}

/// Checks `credentials`: a known source that fits the kind, and only the fields it reads.
fn credentials(at: &str, kind: ProviderKind, c: &RawCredentials, p: &mut Problems) {
    let Some(source) = SOURCES.iter().find(|s| **s == c.source) else {
        p.add(format!("{at}.source"), format!("unknown source {:?} (expected {})", c.source, SOURCES.join(", ")));
        return;
    };
    let fits = match kind {
        ProviderKind::Bedrock => source.starts_with("aws_"),
        ProviderKind::Vertex => source.starts_with("gcp_"),
        ProviderKind::AzureOpenAi => source.starts_with("azure_"),
        _ => false,
    };
    if !fits {
        p.add(format!("{at}.source"), format!("{source} cannot sign in to {} providers", kind.as_str()));
    }
    let fields = fields_used(c);
    let allowed: &[&str] = match *source {
        "aws_env" => &["access_key_id_env", "secret_access_key_env", "session_token_env"],
        "aws_web_identity" => &["role_arn", "token_file", "session_name", "token_url"],
        "gcp_service_account" => &["key_file", "scopes", "token_url"],
        "gcp_metadata" => &["scopes", "token_url"],
        _ => &["tenant_id", "client_id", "client_secret_env", "token_file", "token_url"],
    };
    for (name, _) in fields.iter().filter(|(name, set)| *set && !allowed.contains(name)) {
        p.add(format!("{at}.{name}"), format!("not read by source {source}"));
    }
    for (name, var) in [
        ("access_key_id_env", &c.access_key_id_env),
        ("secret_access_key_env", &c.secret_access_key_env),
        ("session_token_env", &c.session_token_env),
        ("client_secret_env", &c.client_secret_env),
    ] {
        if let Some(var) = var {
            p.check(format!("{at}.{name}"), check_env_name(var));
        }
    }
    if let Some(url) = &c.token_url {
        p.check(format!("{at}.token_url"), super::syntax::parse_base_url(url).map(drop));
    }
}

/// Each optional field of `c` with whether it is set.
fn fields_used(c: &RawCredentials) -> [(&'static str, bool); 12] {
    [
        ("access_key_id_env", c.access_key_id_env.is_some()),
        ("secret_access_key_env", c.secret_access_key_env.is_some()),
        ("session_token_env", c.session_token_env.is_some()),
        ("role_arn", c.role_arn.is_some()),
        ("token_file", c.token_file.is_some()),
        ("session_name", c.session_name.is_some()),
        ("key_file", c.key_file.is_some()),
        ("scopes", !c.scopes.is_empty()),
        ("tenant_id", c.tenant_id.is_some()),
        ("client_id", c.client_id.is_some()),
        ("client_secret_env", c.client_secret_env.is_some()),
        ("token_url", c.token_url.is_some()),
    ]
}
