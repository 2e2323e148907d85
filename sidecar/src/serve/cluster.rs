//! Upstream clusters of `ferrogate serve`: the standalone equivalent of Envoy's cluster manager.
//!
//! One cluster per configured provider, named after it, so the filter's cluster header means
//! the same thing here as in an Envoy bootstrap that declares those clusters. A provider with
//! an `endpoints` pool becomes a multi-endpoint cluster; the filter's
//! `x-gateway-destination-endpoint` picks a member (Envoy's `override_host` policy: addresses
//! outside the pool are ignored), otherwise endpoints are used round-robin.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

/// Header the filter sets to pick a replica of a pool (Gateway API Inference Extension).
pub const ENDPOINT_HEADER: &str = "x-gateway-destination-endpoint";

/// Where one cluster sends traffic.
#[derive(Debug)]
pub struct Cluster {
    /// Cluster name (the provider name).
    pub name: String,
    /// `http` or `https`.
    pub scheme: String,
    /// `host:port` members; never empty.
    pub endpoints: Vec<String>,
    /// Connections are checked against the egress policy (all but the in-process sidecar's).
    pub guarded: bool,
    next: AtomicUsize,
}

/// Errors building the cluster set.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// Two clusters share a name.
    #[error("duplicate cluster name {0:?}")]
    Duplicate(String),
    /// A cluster without any address.
    #[error("cluster {0:?} has no endpoints")]
    NoEndpoints(String),
}

impl Cluster {
    /// A cluster over `endpoints` (`host:port`).
    pub fn new(name: &str, scheme: &str, endpoints: Vec<String>) -> Result<Cluster, ClusterError> {
        if endpoints.is_empty() {
            return Err(ClusterError::NoEndpoints(name.to_string()));
        }
        let (name, scheme) = (name.to_string(), scheme.to_string());
        Ok(Cluster { name, scheme, endpoints, guarded: true, next: AtomicUsize::new(0) })
    }

    /// The same cluster, its connections not checked against the egress policy: for the
    /// gateway's own in-process services, which a policy blocking loopback must not cut off.
    pub fn exempt_from_egress(mut self) -> Cluster {
        self.guarded = false;
        self
    }

    /// The endpoint for one request: the override when it is a member, else round-robin.
    pub fn pick(&self, requested: Option<&str>) -> &str {
        if let Some(wanted) = requested {
            // override_host semantics: the first listed address that is a member wins.
            for candidate in wanted.split(',').map(str::trim) {
                if let Some(hit) = self.endpoints.iter().find(|e| e.as_str() == candidate) {
                    return hit;
                }
            }
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.endpoints.len();
        &self.endpoints[i]
    }
}

/// All clusters by name.
#[derive(Debug, Default)]
pub struct Clusters {
    by_name: HashMap<String, Cluster>,
    /// The policy their connections are checked against ([`super::egress`]).
    egress: Arc<ferrogate_core::egress::Policy>,
}

impl Clusters {
    /// Indexes `clusters` by name, rejecting duplicates.
    pub fn new(clusters: Vec<Cluster>) -> Result<Clusters, ClusterError> {
        let mut by_name = HashMap::with_capacity(clusters.len());
        for c in clusters {
            if by_name.contains_key(&c.name) {
                return Err(ClusterError::Duplicate(c.name));
            }
            by_name.insert(c.name.clone(), c);
        }
        Ok(Clusters { by_name, egress: Arc::default() })
    }

    /// The same clusters under the configuration's egress `policy`.
    pub fn with_egress(mut self, policy: ferrogate_core::egress::Policy) -> Clusters {
        self.egress = Arc::new(policy);
        self
    }

    /// The egress policy their connections are checked against.
    pub fn egress(&self) -> Arc<ferrogate_core::egress::Policy> {
        self.egress.clone()
    }

    /// Looks a cluster up by exact name.
    pub fn get(&self, name: &str) -> Option<&Cluster> {
        self.by_name.get(name)
    }

    /// Every cluster name (given to the host so `dispatch_http_call` can reject unknown ones).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> Cluster {
        Cluster::new("pool", "http", vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()]).unwrap()
    }

    #[test]
    fn override_must_be_a_member() {
        let c = pool();
        assert_eq!(c.pick(Some("127.0.0.1:2")), "127.0.0.1:2");
        assert_eq!(c.pick(Some("10.0.0.9:1,127.0.0.1:2")), "127.0.0.1:2");
        let picked = c.pick(Some("10.0.0.9:1"));
        assert!(c.endpoints.iter().any(|e| e == picked));
    }

    #[test]
    fn round_robin_without_override() {
        let c = pool();
        let a = c.pick(None).to_string();
        let b = c.pick(None).to_string();
        assert_ne!(a, b);
    }

    #[test]
    fn duplicates_and_empty_rejected() {
        assert!(Cluster::new("x", "http", vec![]).is_err());
        let dup = Clusters::new(vec![pool(), pool()]);
        assert!(matches!(dup, Err(ClusterError::Duplicate(_))));
    }
}

/// The cluster set in use, replaced as a whole when a new snapshot changes the providers (as
/// Envoy's CDS swaps clusters): requests in flight keep the set they started with.
#[derive(Debug, Default)]
pub struct LiveClusters(RwLock<Arc<Clusters>>);

impl LiveClusters {
    /// Starts with `clusters`.
    pub fn new(clusters: Clusters) -> LiveClusters {
        LiveClusters(RwLock::new(Arc::new(clusters)))
    }

    /// The current set.
    pub fn load(&self) -> Arc<Clusters> {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Replaces the set.
    pub fn store(&self, clusters: Clusters) {
        *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(clusters);
    }
}
