//! The self-contained sections of the document: limits, pricing and store. Kept apart from
//! the cross-referencing checks in the parent module.

use std::collections::BTreeMap;

use super::Problems;
use crate::config::raw::{RawConfig, RawLimits, RawPrice};
use crate::config::syntax;
use crate::config::{AgentLimits, Limits, Price, Store};
use crate::limits::cut::Overrun;

fn money(path: String, v: Option<f64>, p: &mut Problems) -> Option<f64> {
    let v = v?;
    if v.is_finite() && v >= 0.0 {
        Some(v)
    } else {
        p.add(path, format!("{v} is not a non-negative amount"));
        None
    }
}

pub(super) fn limits(path: &str, raw: Option<&RawLimits>, p: &mut Problems) -> Limits {
    let Some(raw) = raw else {
        return Limits::default();
    };
    Limits {
        requests_per_minute: raw.requests_per_minute,
        requests_per_day: raw.requests_per_day,
        tokens_per_minute: raw.tokens_per_minute,
        tokens_per_day: raw.tokens_per_day,
        tokens_per_month: raw.tokens_per_month,
        cost_usd_per_day: money(format!("{path}.cost_usd_per_day"), raw.cost_usd_per_day, p),
        cost_usd_per_month: money(format!("{path}.cost_usd_per_month"), raw.cost_usd_per_month, p),
        tokens_per_conversation: raw.tokens_per_conversation,
        cost_usd_per_conversation: money(format!("{path}.cost_usd_per_conversation"), raw.cost_usd_per_conversation, p),
        mcp_requests_per_minute: raw.mcp_requests_per_minute,
        mcp_requests_per_day: raw.mcp_requests_per_day,
        tool_calls_per_minute: raw.tool_calls_per_minute,
        tool_calls_per_day: raw.tool_calls_per_day,
        overrun: overrun(path, raw.overrun.as_deref(), p),
        max_wait_ms: max_wait(path, raw.max_wait_ms, p),
    }
}

/// The default of `max_wait_ms`.
pub const DEFAULT_MAX_WAIT_MS: u64 = 250;

fn max_wait(path: &str, raw: Option<u64>, p: &mut Problems) -> u64 {
    match raw {
        None => DEFAULT_MAX_WAIT_MS,
        Some(ms) if ms <= 10_000 => ms,
        Some(ms) => {
            p.add(format!("{path}.max_wait_ms"), format!("{ms} is over the most a request may wait (10000)"));
            DEFAULT_MAX_WAIT_MS
        }
    }
}

fn overrun(path: &str, raw: Option<&str>, p: &mut Problems) -> Overrun {
    let Some(name) = raw else { return Overrun::Allow };
    Overrun::parse(name).unwrap_or_else(|| {
        p.add(format!("{path}.overrun"), format!("unknown policy {name:?} (expected allow or cut)"));
        Overrun::Allow
    })
}

/// The limits of a group or the org: `overrun` is a key's policy.
pub(super) fn shared_limits(path: &str, raw: Option<&RawLimits>, p: &mut Problems) -> Limits {
    if raw.is_some_and(|l| l.overrun.is_some()) {
        p.add(format!("{path}.overrun"), "only a key's limits take an overrun policy");
    }
    limits(path, raw, p)
}

/// What a model field in a server's `limits` is told.
const SERVER_FIELDS_ONLY: &str = "is a model limit: a server's limits take only mcp_requests_per_*, \
     tool_calls_per_* and max_wait_ms (model limits go on keys, groups or the org)";

/// The `limits` of an MCP server or an A2A agent (`path`): a cap on every caller of it
/// together, so only what counts MCP/A2A requests and tool calls (and `max_wait_ms`) is read.
/// A model field there is a problem: it would never count anything.
pub(in crate::config) fn server_limits(path: &str, raw: Option<&RawLimits>, p: &mut Problems) -> AgentLimits {
    let Some(r) = raw else { return AgentLimits::default() };
    let model_fields = [
        ("requests_per_minute", r.requests_per_minute.is_some()),
        ("requests_per_day", r.requests_per_day.is_some()),
        ("tokens_per_minute", r.tokens_per_minute.is_some()),
        ("tokens_per_day", r.tokens_per_day.is_some()),
        ("tokens_per_month", r.tokens_per_month.is_some()),
        ("cost_usd_per_day", r.cost_usd_per_day.is_some()),
        ("cost_usd_per_month", r.cost_usd_per_month.is_some()),
        ("tokens_per_conversation", r.tokens_per_conversation.is_some()),
        ("cost_usd_per_conversation", r.cost_usd_per_conversation.is_some()),
        ("overrun", r.overrun.is_some()),
    ];
    for (field, _) in model_fields.iter().filter(|(_, present)| *present) {
        p.add(format!("{path}.{field}"), SERVER_FIELDS_ONLY);
    }
    AgentLimits {
        mcp_requests_per_minute: r.mcp_requests_per_minute,
        mcp_requests_per_day: r.mcp_requests_per_day,
        tool_calls_per_minute: r.tool_calls_per_minute,
        tool_calls_per_day: r.tool_calls_per_day,
        max_wait_ms: max_wait(path, r.max_wait_ms, p),
    }
}

pub(super) fn pricing(raw: &BTreeMap<String, RawPrice>, p: &mut Problems) -> BTreeMap<String, Price> {
    let mut out = BTreeMap::new();
    for (model, price) in raw {
        let at = |f: &str| format!("pricing.{model}.{f}");
        if model.is_empty() {
            p.add("pricing", "empty model id");
        }
        let input = money(at("input_per_mtok"), Some(price.input_per_mtok), p);
        let output = money(at("output_per_mtok"), Some(price.output_per_mtok), p);
        let cached = money(at("cached_input_per_mtok"), price.cached_input_per_mtok, p);
        if let (Some(input_per_mtok), Some(output_per_mtok)) = (input, output) {
            let cached_input_per_mtok = cached.unwrap_or(input_per_mtok);
            out.insert(model.clone(), Price { input_per_mtok, output_per_mtok, cached_input_per_mtok });
        }
    }
    out
}

pub(super) fn store(raw: &RawConfig, p: &mut Problems) -> Store {
    let Some(s) = &raw.store else {
        return Store::File;
    };
    match (s.kind.as_str(), &s.url_env) {
        ("file", None) => Store::File,
        ("file", Some(_)) => {
            p.add("store.url_env", "only a postgres store takes url_env");
            Store::File
        }
        ("postgres", Some(var)) => {
            p.check("store.url_env", syntax::check_env_name(var));
            Store::Postgres { url_env: var.clone() }
        }
        ("postgres", None) => {
            p.add("store.url_env", "a postgres store needs url_env");
            Store::File
        }
        (other, _) => {
            p.add("store.kind", format!("unknown store kind {other:?} (expected file or postgres)"));
            Store::File
        }
    }
}
