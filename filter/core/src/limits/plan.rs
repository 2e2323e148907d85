//! Which counters a request is checked against, flattened once per configuration: per key,
//! its own limits, then each of its groups', then the org-wide default; for open mode (no
//! keys) the org-wide default alone.

use std::sync::Arc;

use super::Window;
use crate::config::{Config, Limits};

/// What a counter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metric {
    /// Requests admitted.
    Requests,
    /// Prompt plus completion tokens.
    Tokens,
    /// Cost in micro-USD.
    MicroUsd,
}

impl Metric {
    /// Short name used in counter keys and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Requests => "requests",
            Metric::Tokens => "tokens",
            Metric::MicroUsd => "usd",
        }
    }
}

/// Whose limit it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The key's own.
    Key,
    /// One of its groups'.
    Group,
    /// The org-wide default.
    Org,
}

impl Scope {
    /// Short name used in counter keys and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Key => "key",
            Scope::Group => "group",
            Scope::Org => "org",
        }
    }
}

/// One limit a request is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitSpec {
    /// Shared-data key of its counter, e.g. `ferrogate.limit.group.dev.tokens.day`.
    pub counter: String,
    /// Whose limit.
    pub scope: Scope,
    /// The key's or group's name (`""` for the org).
    pub name: String,
    /// What it counts.
    pub metric: Metric,
    /// Over what span.
    pub window: Window,
    /// The most the window may hold (micro-USD for budgets).
    pub limit: u64,
    /// With leases (limits shared through Redis), how long a request may wait for a grant
    /// when this limit's lease is short.
    pub max_wait_ms: u64,
}

impl LimitSpec {
    /// Says what the limit allows, e.g. `key bob allows 1500 tokens per day`.
    pub fn describe(&self) -> String {
        let whose = match self.name.as_str() {
            "" => self.scope.as_str().to_string(),
            name => format!("{} {name}", self.scope.as_str()),
        };
        let unit = if self.metric == Metric::MicroUsd { "micro-USD" } else { self.metric.as_str() };
        format!("{whose} allows {} {unit} per {}", self.limit, self.window.as_str())
    }
}

/// The flattened limits of a configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plans {
    /// Per key, in key order.
    pub keys: Vec<Arc<[LimitSpec]>>,
    /// For callers without a key (open mode): the org-wide default.
    pub open: Arc<[LimitSpec]>,
    /// Whether any caller has a limit (computed once).
    pub any: bool,
}

impl Plans {
    /// The limits of key `index`, or of an open caller.
    pub fn for_key(&self, index: Option<usize>) -> &[LimitSpec] {
        match index {
            Some(i) => self.keys.get(i).map_or(&[][..], |p| &p[..]),
            None => &self.open,
        }
    }
}

/// The window a counter's name ends with (`ferrogate.limit.<scope>.<name>.<metric>.<window>`,
/// as [`build_plans`] names them).
pub fn window_of(counter: &str) -> Option<Window> {
    Window::parse(counter.rsplit('.').next()?)
}

/// Flattens the limits of every key of a validated configuration.
pub fn build_plans(config: &Config) -> Plans {
    let org = specs(Scope::Org, "", &config.limits);
    let keys = config
        .keys
        .iter()
        .map(|k| {
            let mut all = specs(Scope::Key, &k.name, &k.limits);
            for g in k.groups.iter().filter_map(|&g| config.groups.get(g)) {
                all.extend(specs(Scope::Group, &g.name, &g.limits));
            }
            all.extend(org.iter().cloned());
            Arc::from(all)
        })
        .collect::<Vec<Arc<[LimitSpec]>>>();
    let any = !org.is_empty() || keys.iter().any(|p: &Arc<[LimitSpec]>| !p.is_empty());
    Plans { keys, open: Arc::from(org), any }
}

fn specs(scope: Scope, name: &str, l: &Limits) -> Vec<LimitSpec> {
    let usd = |v: Option<f64>| v.map(|d| (d * 1e6).round() as u64);
    let table = [
        (Metric::Requests, Window::Minute, l.requests_per_minute),
        (Metric::Requests, Window::Day, l.requests_per_day),
        (Metric::Tokens, Window::Minute, l.tokens_per_minute),
        (Metric::Tokens, Window::Day, l.tokens_per_day),
        (Metric::Tokens, Window::Month, l.tokens_per_month),
        (Metric::MicroUsd, Window::Day, usd(l.cost_usd_per_day)),
        (Metric::MicroUsd, Window::Month, usd(l.cost_usd_per_month)),
    ];
    table
        .into_iter()
        .filter_map(|(metric, window, limit)| {
            let limit = limit?;
            let counter = format!("ferrogate.limit.{}.{name}.{}.{}", scope.as_str(), metric.as_str(), window.as_str());
            Some(LimitSpec {
                counter,
                scope,
                name: name.to_string(),
                metric,
                window,
                limit,
                max_wait_ms: l.max_wait_ms,
            })
        })
        .collect()
}
