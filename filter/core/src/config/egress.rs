//! The `egress:` block: which upstream hosts the configuration may name
//! ([`crate::egress::Policy`]), and the check of every upstream URL it names against it.
//!
//! The URLs are read from the raw document, each problem reported at the URL's own path
//! (`mcp_servers[1].url: host 169.254.169.254 is blocked by egress.block_link_local`), so a
//! row that breaks the policy is dropped like any other unservable row. A URL that does not
//! parse is left to its section's own check. Names are checked against `allow_hosts` only:
//! what they resolve to is checked by the proxy when it connects.

use serde::{Deserialize, Serialize};

use super::raw::{RawConfig, RawProvider};
use super::syntax;
use super::validate::Problems;
use crate::egress::Policy;

/// `egress:` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawEgress {
    /// Refuse link-local and cloud metadata addresses (default `true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_link_local: Option<bool>,
    /// Refuse loopback addresses (default `false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_loopback: Option<bool>,
    /// Refuse private and shared address ranges (default `false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_private: Option<bool>,
    /// Host names (`*.suffix` for any name below it) and IP literals upstream URLs may name;
    /// empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<String>,
}

/// Checks `egress:` and every upstream URL of `raw` against it.
pub(super) fn validate(raw: &RawConfig, p: &mut Problems) -> Policy {
    let policy = policy(raw.egress.as_ref(), p);
    for (i, provider) in raw.providers.iter().enumerate() {
        check_provider(i, provider, &policy, p);
    }
    for (i, server) in raw.mcp_servers.iter().enumerate() {
        check_url(&format!("mcp_servers[{i}].url"), &server.url, &policy, p);
        if let Some(oauth) = &server.oauth {
            check_url(&format!("mcp_servers[{i}].oauth.token_url"), &oauth.token_url, &policy, p);
        }
    }
    for (i, agent) in raw.a2a_agents.iter().enumerate() {
        check_url(&format!("a2a_agents[{i}].url"), &agent.url, &policy, p);
    }
    for (i, g) in raw.guardrails.iter().enumerate() {
        let rules = g.input.iter().map(|r| ("input", r)).chain(g.output.iter().map(|r| ("output", r)));
        for (j, (side, rule)) in rules.enumerate() {
            let j = if side == "input" { j } else { j - g.input.len() };
            if let Some(url) = &rule.url {
                check_url(&format!("guardrails[{i}].{side}[{j}].url"), url, &policy, p);
            }
        }
    }
    policy
}

/// The policy as written, each `allow_hosts` entry checked.
fn policy(raw: Option<&RawEgress>, p: &mut Problems) -> Policy {
    let defaults = Policy::default();
    let Some(raw) = raw else { return defaults };
    let mut allow_hosts = Vec::with_capacity(raw.allow_hosts.len());
    for (j, entry) in raw.allow_hosts.iter().enumerate() {
        if let Some(entry) = p.check(format!("egress.allow_hosts[{j}]"), allow_entry(entry)) {
            allow_hosts.push(entry);
        }
    }
    Policy {
        block_link_local: raw.block_link_local.unwrap_or(defaults.block_link_local),
        block_loopback: raw.block_loopback.unwrap_or(defaults.block_loopback),
        block_private: raw.block_private.unwrap_or(defaults.block_private),
        allow_hosts,
    }
}

/// An `allow_hosts` entry, lower-cased: a host name, `*.` and a host name, or an IP literal
/// (IPv6 in brackets).
fn allow_entry(entry: &str) -> Result<String, String> {
    let lower = entry.to_ascii_lowercase();
    let (glob, name) = match lower.strip_prefix("*.") {
        Some(name) => (true, name),
        None => (false, lower.as_str()),
    };
    match crate::egress::parse_ip(name) {
        Ok(Some(_)) if !glob => Ok(lower),
        Ok(Some(_)) => Err(format!("{entry:?}: a *. glob takes a host name, not an address")),
        Ok(None) if is_host_name(name) => Ok(lower),
        _ => Err(format!("{entry:?} is not a host name, *.suffix or IP address")),
    }
}

/// Dot-separated labels of letters, digits, `-` and `_` (a trailing dot allowed).
fn is_host_name(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    let label = |l: &str| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    name.split('.').all(label)
}

/// A provider's `base_url`, pool endpoints and `endpoints_dns` name.
fn check_provider(i: usize, raw: &RawProvider, policy: &Policy, p: &mut Problems) {
    check_url(&format!("providers[{i}].base_url"), &raw.base_url, policy, p);
    for (j, e) in raw.endpoints.iter().enumerate() {
        // The path the endpoint's own problems use: the object form names its address.
        let path = if e.kv_events.is_some() || e.kv_replay.is_some() {
            format!("providers[{i}].endpoints[{j}].address")
        } else {
            format!("providers[{i}].endpoints[{j}]")
        };
        check_endpoint(&path, &e.address, policy, p);
    }
    if let Some(name) = &raw.endpoints_dns {
        check_endpoint(&format!("providers[{i}].endpoints_dns"), name, policy, p);
    }
}

fn check_url(path: &str, url: &str, policy: &Policy, p: &mut Problems) {
    if let Ok(url) = syntax::parse_base_url(url) {
        check(path, &url.host, policy, p);
    }
}

fn check_endpoint(path: &str, endpoint: &str, policy: &Policy, p: &mut Problems) {
    let Ok(normalised) = syntax::parse_endpoint(endpoint) else { return };
    if let Some((host, _)) = syntax::endpoint_parts(&normalised) {
        check(path, host, policy, p);
    }
}

fn check(path: &str, host: &str, policy: &Policy, p: &mut Problems) {
    if let Err(e) = policy.check_host(host) {
        p.add(path, e.to_string());
    }
}

#[cfg(test)]
#[path = "egress_tests.rs"]
mod tests;
