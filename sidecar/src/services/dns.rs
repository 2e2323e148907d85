//! Pool endpoints from DNS: a provider's `endpoints_dns: host:port` becomes its `endpoints`.
//!
//! A Kubernetes headless Service answers its name with one address per ready replica, so a pool
//! that scales needs no configuration change. The sidecar resolves every such name when a
//! configuration is published and again every `--dns-refresh-ms`; when an answer changes it
//! publishes the configuration again with the new endpoints, which the filters (and `serve`'s
//! clusters) pick up like any snapshot. As Envoy's `STRICT_DNS` clusters do, a failed lookup
//! keeps the last answer, and a successful empty one empties the pool (the provider's
//! `base_url` then takes its requests).

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ferrogate_core::config::{RawConfig, RawEndpoint};
use tokio::sync::watch;

use super::snapshot::Snapshots;

/// Default `--dns-refresh-ms`.
pub const DEFAULT_REFRESH_MS: u64 = 5_000;

/// What each `endpoints_dns` name resolved to last: sorted `host:port` strings.
pub type Answers = BTreeMap<String, Vec<String>>;

/// Resolves `host:port` to socket addresses (the system resolver, or a fake in tests).
pub type Resolver =
    Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send>> + Send + Sync>;

/// The system resolver (`getaddrinfo`, so `/etc/hosts` and the cluster's search domains
/// apply as for any process in the pod).
pub fn system_resolver() -> Resolver {
    Arc::new(|name: String| Box::pin(async move { tokio::net::lookup_host(name).await.map(Iterator::collect) }))
}

/// The `endpoints_dns` names `raw` uses.
pub fn names(raw: &RawConfig) -> Vec<String> {
    let mut names: Vec<String> = raw.providers.iter().filter_map(|p| p.endpoints_dns.clone()).collect();
    names.sort();
    names.dedup();
    names
}

/// `raw` with every `endpoints_dns` replaced by the endpoints it resolved to (none yet: no
/// endpoints, so the provider's `base_url` serves until the first answer).
pub fn expand(mut raw: RawConfig, answers: &Answers) -> RawConfig {
    for provider in &mut raw.providers {
        if let Some(name) = provider.endpoints_dns.take() {
            let found = answers.get(&name).map(Vec::as_slice).unwrap_or_default();
            provider.endpoints = found.iter().map(|a| RawEndpoint::from(a.as_str())).collect();
        }
    }
    raw
}

/// Addresses as endpoint strings, sorted and without duplicates (a name can list an address
/// once per address family or per record).
fn endpoints_of(addrs: Vec<SocketAddr>) -> Vec<String> {
    let mut found: Vec<String> = addrs.into_iter().map(|a| a.to_string()).collect();
    found.sort();
    found.dedup();
    found
}

/// Resolves the names `snapshots` needs now and every `refresh`, republishing on a change,
/// until `shutdown`.
pub fn start(snapshots: Arc<Snapshots>, refresh: Duration, resolver: Resolver, mut shutdown: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut failing: BTreeMap<String, String> = BTreeMap::new();
        loop {
            let names = snapshots.dns_names();
            let mut changed = false;
            for name in names {
                match resolver(name.clone()).await {
                    Ok(addrs) => {
                        if failing.remove(&name).is_some() {
                            tracing::info!(name, "endpoints_dns: the name resolves again");
                        }
                        changed |= snapshots.set_dns_answer(&name, endpoints_of(addrs));
                    }
                    Err(e) => {
                        if failing.insert(name.clone(), e.to_string()).is_none() {
                            tracing::warn!(name, error = %e, "endpoints_dns: lookup failed; keeping the last answer");
                        }
                    }
                }
            }
            if changed {
                snapshots.republish();
            }
            tokio::select! {
                () = tokio::time::sleep(refresh) => {}
                () = snapshots.dns_wanted() => {}
                _ = shutdown.changed() => return,
            }
        }
    });
}

#[cfg(test)]
mod tests;
