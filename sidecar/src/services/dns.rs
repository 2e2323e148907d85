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

use ferrogate_core::config::syntax::endpoint_parts;
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

/// The resolver `--dns-server` names: `server` when given, else the system's.
///
/// # Errors
/// When a resolver for `server` cannot be built.
pub fn resolver(server: Option<SocketAddr>) -> Result<Resolver, String> {
    server.map_or_else(|| Ok(system_resolver()), server_resolver)
}

/// Asks `server` (UDP, then TCP for a truncated answer) for each name's A and AAAA records,
/// with no cache (each refresh asks again), no hosts file and no search domains: the name is
/// looked up as written. A name that exists with no address (NODATA: a headless Service with no
/// ready replica) is an empty answer; one that does not exist (NXDOMAIN) is a failed lookup,
/// as with the system resolver.
///
/// # Errors
/// When hickory cannot build the resolver.
pub fn server_resolver(server: SocketAddr) -> Result<Resolver, String> {
    use hickory_resolver::config::{
        ConnectionConfig, LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig,
    };
    use hickory_resolver::net::runtime::TokioRuntimeProvider;
    let connections = [ConnectionConfig::udp(), ConnectionConfig::tcp()]
        .into_iter()
        .map(|mut c| {
            c.port = server.port();
            c
        })
        .collect();
    let config =
        ResolverConfig::from_parts(None, Vec::new(), vec![NameServerConfig::new(server.ip(), true, connections)]);
    let mut builder = hickory_resolver::Resolver::builder_with_config(config, TokioRuntimeProvider::default());
    let options = builder.options_mut();
    (options.cache_size, options.ip_strategy, options.use_hosts_file) =
        (0, LookupIpStrategy::Ipv4AndIpv6, ResolveHosts::Never);
    options.ndots = 0;
    let resolver = Arc::new(builder.build().map_err(|e| format!("DNS resolver for {server}: {e}"))?);
    Ok(Arc::new(move |name: String| {
        let resolver = resolver.clone();
        Box::pin(async move {
            let (host, port) = split_name(&name)?;
            match resolver.lookup_ip(host).await {
                Ok(found) => Ok(found.iter().map(|ip| SocketAddr::new(ip, port)).collect()),
                Err(e) if e.is_no_records_found() && !e.is_nx_domain() => Ok(Vec::new()),
                Err(e) => Err(std::io::Error::other(e.to_string())),
            }
        })
    }))
}

/// `host` and `port` of an `endpoints_dns` name (`host:port`, validated with the config).
fn split_name(name: &str) -> std::io::Result<(&str, u16)> {
    let invalid = || std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{name:?} is not host:port"));
    let (host, port) = endpoint_parts(name).ok_or_else(invalid)?;
    Ok((host.trim_start_matches('[').trim_end_matches(']'), port.parse().map_err(|_| invalid())?))
}

/// The `endpoints_dns` names `raw` uses.
pub fn names(raw: &RawConfig) -> Vec<String> {
    let mut names: Vec<String> = raw.providers.iter().filter_map(|p| p.endpoints_dns.clone()).collect();
    names.sort();
    names.dedup();
    names
}

/// The `endpoints_inference_pool` references `raw` uses.
pub fn pool_refs(raw: &RawConfig) -> Vec<String> {
    let mut refs: Vec<String> = raw.providers.iter().filter_map(|p| p.endpoints_inference_pool.clone()).collect();
    refs.sort();
    refs.dedup();
    refs
}

/// The keys of [`Answers`] `raw` needs: its `endpoints_dns` names and its pools'
/// ([`super::kube::answer_key`]).
pub fn keys(raw: &RawConfig) -> Vec<String> {
    let mut keys = names(raw);
    keys.extend(pool_refs(raw).iter().map(|r| super::kube::answer_key(r)));
    keys
}

/// `raw` with every `endpoints_dns` and `endpoints_inference_pool` replaced by the endpoints
/// found for it. A pool with none (none yet, or an empty answer) stays, with no endpoints: the
/// provider's `base_url` serves, and the pool's KV settings (`kv_events_port`…) stay valid for
/// the addresses to come.
pub fn expand(mut raw: RawConfig, answers: &Answers) -> RawConfig {
    for provider in &mut raw.providers {
        let key = match (&provider.endpoints_dns, &provider.endpoints_inference_pool) {
            (Some(name), _) => name.clone(),
            (None, Some(pool)) => super::kube::answer_key(pool),
            (None, None) => continue,
        };
        let found = answers.get(&key).map(Vec::as_slice).unwrap_or_default();
        if !found.is_empty() {
            (provider.endpoints_dns, provider.endpoints_inference_pool) = (None, None);
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
