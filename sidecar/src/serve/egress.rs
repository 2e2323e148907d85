//! The egress policy at connect time ([`ferrogate_core::egress`]).
//!
//! The configuration's check sees names, not what they resolve to: `tools.example.com` may
//! resolve to 169.254.169.254 (or be made to, by whoever controls its DNS). So every upstream
//! connection is checked again here, on the addresses it would actually go to: a name's
//! resolved addresses that the policy blocks are dropped before any connection is tried (a
//! name left with none fails the attempt, which the client sees as the proxy's 502), and an
//! address written in the URL (which never reaches a resolver) is checked before it is
//! dialled. The policy is read at each new connection, so a configuration change applies to
//! the next one; pooled connections already open are kept until they close.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ferrogate_core::egress::{EgressError, Policy};
use http::Uri;
use hyper_util::client::legacy::connect::dns::{GaiResolver, Name};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower::Service;

/// The policy in force now (the served configuration's).
pub type PolicySource = Arc<dyn Fn() -> Arc<Policy> + Send + Sync>;

/// What the connector's futures fail with.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A connection the policy refuses.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// Every address the name resolved to is blocked.
    #[error("egress policy refuses {name}: it resolves only to blocked addresses ({source})")]
    Resolved {
        /// The name looked up.
        name: String,
        /// Why its first address is blocked.
        source: EgressError,
    },
    /// The address written in the URL is blocked.
    #[error("egress policy refuses {0}")]
    Literal(EgressError),
}

/// The system resolver (`getaddrinfo`), its answers filtered by the policy.
#[derive(Clone)]
pub struct GuardedResolver {
    inner: GaiResolver,
    policy: PolicySource,
}

impl Service<Name> for GuardedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let policy = (self.policy)();
        let lookup = self.inner.call(name.clone());
        Box::pin(async move {
            let found: Vec<SocketAddr> = lookup.await?.collect();
            let name = name.as_str();
            allowed(&policy, name, found).map(Vec::into_iter).map_err(|e| {
                tracing::warn!(host = name, error = %e, "egress: connection refused by the policy");
                e.into()
            })
        })
    }
}

/// The addresses of `name` the policy lets through; an error when none is left.
fn allowed(policy: &Policy, name: &str, found: Vec<SocketAddr>) -> Result<Vec<SocketAddr>, Refused> {
    let mut first_refusal = None;
    let mut kept = Vec::with_capacity(found.len());
    for addr in found {
        match policy.check_ip(addr.ip()) {
            Ok(()) => kept.push(addr),
            Err(e) => {
                tracing::debug!(host = name, %addr, error = %e, "egress: a resolved address is dropped");
                first_refusal.get_or_insert(e);
            }
        }
    }
    match (kept.is_empty(), first_refusal) {
        (true, Some(source)) => Err(Refused::Resolved { name: name.to_string(), source }),
        _ => Ok(kept),
    }
}

/// An [`HttpConnector`] that connects only where the policy allows.
#[derive(Clone)]
pub struct GuardedConnector {
    inner: HttpConnector<GuardedResolver>,
    policy: PolicySource,
}

impl GuardedConnector {
    /// A plain-TCP connector under `policy`, giving up on a connection after `connect_timeout`.
    pub fn new(policy: PolicySource, connect_timeout: Option<Duration>) -> GuardedConnector {
        let resolver = GuardedResolver { inner: GaiResolver::new(), policy: policy.clone() };
        GuardedConnector { inner: super::upstream::http_connector(resolver, connect_timeout), policy }
    }
}

impl Service<Uri> for GuardedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        // An address in the URL is dialled without a lookup: checked here instead.
        let literal = dst.host().and_then(|h| h.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().ok());
        if let Some(Err(e)) = literal.map(|ip| (self.policy)().check_ip(ip)) {
            tracing::warn!(host = %dst, error = %e, "egress: connection refused by the policy");
            return Box::pin(std::future::ready(Err(Refused::Literal(e).into())));
        }
        let connecting = self.inner.call(dst);
        Box::pin(async move { connecting.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(list: &[&str]) -> Vec<SocketAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn blocked_addresses_are_dropped_and_a_name_left_with_none_is_refused() {
        let policy = Policy { block_loopback: true, ..Policy::default() };
        let kept = allowed(&policy, "mixed", addrs(&["127.0.0.1:80", "10.0.0.1:80", "[::1]:80"])).unwrap();
        assert_eq!(kept, addrs(&["10.0.0.1:80"]));
        let e = allowed(&policy, "localhost", addrs(&["127.0.0.1:80", "[::1]:80"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "egress policy refuses localhost: it resolves only to blocked addresses \
             (host 127.0.0.1 is blocked by egress.block_loopback)"
        );
        let e = allowed(&Policy::default(), "metadata.google.internal", addrs(&["169.254.169.254:80"])).unwrap_err();
        assert!(e.to_string().contains("egress.block_link_local"), "{e}");
        // An empty answer stays the resolver's business (hyper reports it).
        assert!(allowed(&policy, "none", Vec::new()).unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_blocked_address_in_the_url_is_never_dialled() {
        let policy: PolicySource = Arc::new(|| Arc::new(Policy { block_loopback: true, ..Policy::default() }));
        let mut connector = GuardedConnector::new(policy, Some(Duration::from_secs(1)));
        for uri in ["http://127.0.0.1:9/", "http://[::1]:9/", "http://[::ffff:127.0.0.1]:9/"] {
            let e = connector.call(uri.parse().unwrap()).await.unwrap_err();
            assert!(e.to_string().starts_with("egress policy refuses host"), "{uri}: {e}");
        }
        let e = connector.call("http://localhost:9/".parse().unwrap()).await.unwrap_err();
        assert!(crate::serve::upstream::error_chain(&*e).contains("resolves only to blocked addresses"), "{e}");
    }
}
