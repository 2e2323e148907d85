//! The Endpoint Picker's part of a pick (Gateway API Inference Extension): the subset of pool
//! endpoints the gateway offers, and the fallback endpoints appended after the pick.
//!
//! The EPP host (`ferrogate serve --epp-listen`) reads the gateway's
//! `envoy.lb.subset_hint` metadata and passes it to the filter in [`SUBSET_HEADER`], with the
//! number of fallbacks wanted in [`FALLBACKS_HEADER`]. Both are host-only: the filter honours
//! them only when its plugin configuration says the host is an endpoint picker, and the host
//! drops clients' copies. The filter then writes `x-gateway-destination-endpoint` as the pick
//! followed by up to that many other eligible endpoints, comma-separated, best first.
//!
//! On the response path the gateway may say which endpoint served (a retry of the gateway
//! may walk past the pick to a fallback): the host passes it in [`SERVED_HEADER`], host-only
//! too, and the filter attributes the usage record and passive health to that endpoint when
//! it is another endpoint of the picked provider's pool ([`served_endpoint`]).
//!
//! Subset entries match pool endpoints by host (IP) only, as the reference picker does: a
//! gateway may name a pod by another of its target ports.

use crate::balance::Slot;
use crate::config::Config;

/// Request header, host → filter: the gateway's subset, `ip:port` entries separated by commas
/// (present and empty: nothing may be picked).
pub const SUBSET_HEADER: &str = "x-ferrogate-subset";
/// Request header, host → filter: how many fallback endpoints to append to the pick.
pub const FALLBACKS_HEADER: &str = "x-ferrogate-fallbacks";
/// Response header, host → filter: the `ip:port` of the endpoint that served (the gateway's
/// `x-gateway-destination-endpoint-served`).
pub const SERVED_HEADER: &str = "x-ferrogate-served";
/// The host-only headers of the contract, for stripping from clients' requests and upstreams'
/// answers.
pub const HOST_HEADERS: [&str; 3] = [SUBSET_HEADER, FALLBACKS_HEADER, SERVED_HEADER];
/// Most fallbacks the filter appends, whatever the host asks (a list is walked on retries;
/// Envoy's default is at most a few).
pub const MAX_FALLBACKS: usize = 8;

/// The endpoints a gateway allows for one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subset {
    hosts: Vec<String>,
}

impl Subset {
    /// The subset of a comma-separated list of `ip:port`, `[v6]:port` or bare hosts (blank
    /// entries skipped). Hosts compare case-insensitively.
    pub fn parse(list: &str) -> Subset {
        let hosts = list.split(',').map(str::trim).filter(|e| !e.is_empty()).map(|e| host_of(e).to_ascii_lowercase());
        Subset { hosts: hosts.collect() }
    }

    /// True when nothing may be picked.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// True when the pool endpoint `endpoint` (`host:port`) is in the subset.
    pub fn admits(&self, endpoint: &str) -> bool {
        let host = host_of(endpoint);
        self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    }

    /// Adds to `excluded` each of model `model`'s `slots` the subset leaves out: a pool
    /// endpoint outside it, or a target without a pool endpoint in it (a provider without a
    /// pool is never in a gateway's subset).
    pub fn exclude_slots(&self, config: &Config, model: usize, slots: &[Slot], excluded: &mut Vec<usize>) {
        let Some(m) = config.models.get(model) else { return };
        for (i, slot) in slots.iter().enumerate() {
            let endpoints = m
                .targets
                .get(slot.target)
                .and_then(|t| config.providers.get(t.provider))
                .map_or(&[][..], |p| p.endpoints.as_slice());
            let inside = match slot.endpoint {
                Some(e) => endpoints.get(e).is_some_and(|a| self.admits(a)),
                None => endpoints.iter().any(|a| self.admits(a)),
            };
            if !inside && !excluded.contains(&i) {
                excluded.push(i);
            }
        }
    }
}

/// The host of `host:port`, `[v6]:port` or a bare host.
fn host_of(endpoint: &str) -> &str {
    if let Some(rest) = endpoint.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match endpoint.rsplit_once(':') {
        // One colon: `host:port`. More: a bare IPv6 address.
        Some((host, _)) if !host.contains(':') => host,
        _ => endpoint,
    }
}

/// The index, among a pool's `endpoints`, of the endpoint a [`SERVED_HEADER`] value names,
/// when it names one other than `picked` (matched by `ip:port` exactly, surrounding blanks
/// aside: the gateway names the endpoint it was given). `None`: the pick served, or the value
/// names no endpoint of the pool, and nothing changes.
pub fn served_endpoint(endpoints: &[String], picked: Option<usize>, served: &str) -> Option<usize> {
    let served = served.trim();
    let at = endpoints.iter().position(|e| !served.is_empty() && e.as_str() == served)?;
    (Some(at) != picked).then_some(at)
}

/// The number of fallbacks a [`FALLBACKS_HEADER`] value asks for, capped at [`MAX_FALLBACKS`]
/// (`None` for a value that is not a number).
pub fn parse_fallbacks(value: &str) -> Option<usize> {
    value.trim().parse::<usize>().ok().map(|n| n.min(MAX_FALLBACKS))
}

/// The `x-gateway-destination-endpoint` value: `pick`, then `fallbacks` not equal to it or to
/// each other, comma-separated.
pub fn endpoint_list<'a>(pick: &str, fallbacks: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = pick.to_string();
    let mut seen: Vec<&str> = vec![pick];
    for f in fallbacks {
        if !seen.contains(&f) {
            seen.push(f);
            out.push(',');
            out.push_str(f);
        }
    }
    out
}

#[cfg(test)]
mod tests;
