//! Pool endpoints from the Kubernetes API: a provider's `endpoints_inference_pool` becomes its
//! `endpoints`, as `endpoints_dns` does for a DNS name ([`super::dns`]).
//!
//! For each pool the configuration names, the sidecar lists the `InferencePool`
//! (`inference.networking.k8s.io/v1`) and the pods its `spec.selector` matches, then watches
//! both from the lists' `resourceVersion`s ([`pool`]). Every ready pod (condition `Ready`, no
//! `deletionTimestamp`, an IP) gives one endpoint per `spec.targetPorts` entry, as the Inference
//! Extension's endpoint picker counts them. A change republishes the configuration with the
//! new endpoints, which the filters, `serve`'s clusters and the KV-event subscriptions follow
//! like any snapshot. The API's own rules apply: an expired `resourceVersion` (410) lists again,
//! a watch the server ends resumes where it was, an unreachable API keeps the last answer.
//!
//! Access is the pod's own: `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`, the
//! service account's token (read again for every request, since projected tokens rotate) and
//! CA. `--kube-api` and its siblings override them (a cluster reached from outside, or tests).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::snapshot::Snapshots;

mod client;
pub mod lease;
pub mod pool;

pub use client::{Client, KubeError};

/// Where the service account's files are mounted in a pod.
const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// How often the set of pools to follow is compared with the configuration's, besides on
/// every publication that names a pool not followed yet.
const RECHECK: Duration = Duration::from_secs(5);

/// The Kubernetes API flags of `serve` and `sidecar`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct KubeFlags {
    /// The Kubernetes API server `endpoints_inference_pool` pools are read from; default, in a
    /// pod: `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`.
    #[arg(long, value_name = "URL")]
    pub kube_api: Option<String>,
    /// The bearer token's file, read again for every request; default: the service account's
    /// (nothing is sent when the file does not exist).
    #[arg(long, value_name = "PATH")]
    pub kube_token_file: Option<PathBuf>,
    /// PEM certificates the API server's is checked against; default: the service account's
    /// `ca.crt` when it exists, else the system's roots.
    #[arg(long, value_name = "PATH")]
    pub kube_ca_file: Option<PathBuf>,
    /// The namespace of a pool named without one; default: the pod's own namespace, else
    /// `default`.
    #[arg(long, value_name = "NAMESPACE")]
    pub kube_namespace: Option<String>,
}

impl KubeFlags {
    /// The API server's address: the flag, else the in-cluster one; `None` outside a pod.
    fn api(&self) -> Option<String> {
        if let Some(api) = &self.kube_api {
            return Some(api.trim_end_matches('/').to_string());
        }
        let host = std::env::var("KUBERNETES_SERVICE_HOST").ok()?;
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".to_string());
        let host = if host.contains(':') { format!("[{host}]") } else { host };
        Some(format!("https://{host}:{port}"))
    }

    /// The namespace of pools named without one (and of the picker's Lease).
    pub fn namespace(&self) -> String {
        let file = PathBuf::from(SERVICE_ACCOUNT).join("namespace");
        self.kube_namespace
            .clone()
            .or_else(|| std::fs::read_to_string(file).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()))
            .unwrap_or_else(|| "default".to_string())
    }

    /// The API client these flags describe, `None` when there is no API to ask.
    ///
    /// # Errors
    /// An unreadable or invalid CA file.
    pub fn client(&self) -> Result<Option<Client>, KubeError> {
        let Some(api) = self.api() else { return Ok(None) };
        let account = PathBuf::from(SERVICE_ACCOUNT);
        let token = self.kube_token_file.clone().unwrap_or_else(|| account.join("token"));
        let ca = self.kube_ca_file.clone().or_else(|| Some(account.join("ca.crt")).filter(|p| p.exists()));
        Client::new(api, Some(token), ca.as_deref()).map(Some)
    }
}

/// Now as a Kubernetes `MicroTime`: RFC 3339 in UTC with six fractional digits.
fn micro_time() -> String {
    let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let millis = crate::services::usage::request_log::rfc3339(u64::try_from(ms).unwrap_or(u64::MAX));
    format!("{}000Z", millis.trim_end_matches('Z'))
}

/// The answers' key ([`super::dns::Answers`]) of the pool `reference` names.
pub fn answer_key(reference: &str) -> String {
    format!("inferencepool/{reference}")
}

/// Follows the pools `snapshots`' configuration names, republishing on every change, until
/// `shutdown`. Without an API to ask, a pool is reported once and keeps no endpoints.
pub fn start(snapshots: Arc<Snapshots>, flags: &KubeFlags, mut shutdown: watch::Receiver<bool>) {
    let mut followers =
        Followers { client: flags.client(), namespace: flags.namespace(), running: BTreeMap::new(), reported: false };
    tokio::spawn(async move {
        loop {
            followers.sync(&snapshots);
            tokio::select! {
                () = tokio::time::sleep(RECHECK) => {}
                () = snapshots.pools_wanted() => {}
                _ = shutdown.changed() => break,
            }
        }
        followers.running.values().for_each(JoinHandle::abort);
    });
}

/// The pools being followed.
struct Followers {
    client: Result<Option<Client>, KubeError>,
    namespace: String,
    /// A follower per pool reference.
    running: BTreeMap<String, JoinHandle<()>>,
    /// Whether the missing API was reported.
    reported: bool,
}

impl Followers {
    /// Stops following the pools the configuration no longer names, starts the new ones.
    fn sync(&mut self, snapshots: &Arc<Snapshots>) {
        let wanted = snapshots.pool_refs();
        self.running.retain(|reference, task| {
            let keep = wanted.contains(reference);
            if !keep {
                task.abort();
            }
            keep
        });
        match &self.client {
            _ if wanted.is_empty() => {}
            Ok(Some(client)) => {
                for reference in wanted {
                    if !self.running.contains_key(&reference) {
                        let task = follow(client.clone(), &self.namespace, &reference, snapshots.clone());
                        self.running.insert(reference, task);
                    }
                }
            }
            found if !self.reported => {
                self.reported = true;
                let why = found.as_ref().err().map_or_else(|| "no Kubernetes API".to_string(), ToString::to_string);
                tracing::error!(pools = ?wanted, "endpoints_inference_pool: {why} (outside a pod, set --kube-api); the pools stay empty");
            }
            _ => {}
        }
    }
}

/// Spawns the follower of pool `reference`, its answers recorded in `snapshots`.
fn follow(client: Client, namespace: &str, reference: &str, snapshots: Arc<Snapshots>) -> JoinHandle<()> {
    let (ns, name) = match ferrogate_core::config::syntax::parse_pool_ref(reference) {
        Ok((ns, name)) => (ns.unwrap_or(namespace).to_string(), name.to_string()),
        Err(_) => (namespace.to_string(), reference.to_string()), // validated with the config
    };
    let key = answer_key(reference);
    let sink = move |endpoints: Vec<String>| {
        if snapshots.set_dns_answer(&key, endpoints) {
            snapshots.republish();
        }
    };
    tokio::spawn(pool::follow(client, ns, name, sink))
}
