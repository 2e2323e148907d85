//! What a Kubernetes `InferencePool` (Gateway API Inference Extension,
//! `inference.networking.k8s.io/v1`) and its pods say about the pool's endpoints, and the lines
//! of a Kubernetes watch: the pure part of the sidecar's pool discovery, apart from its HTTP.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// What of an `InferencePool` decides its endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSpec {
    /// `spec.selector.matchLabels`, ANDed.
    pub selector: BTreeMap<String, String>,
    /// `spec.targetPorts[].number`: each one an endpoint of every pod.
    pub ports: Vec<u16>,
}

impl PoolSpec {
    /// The spec of the pool object `pool`.
    ///
    /// # Errors
    /// A pool without `matchLabels` or target ports (the API's own validation forbids both).
    pub fn of(pool: &Value) -> Result<PoolSpec, String> {
        let labels = pool.pointer("/spec/selector/matchLabels").and_then(Value::as_object);
        let selector: BTreeMap<String, String> =
            labels.into_iter().flatten().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect();
        let ports = pool.pointer("/spec/targetPorts").and_then(Value::as_array).into_iter().flatten();
        let ports: Vec<u16> =
            ports.filter_map(|p| p.get("number")?.as_u64().and_then(|n| u16::try_from(n).ok())).collect();
        if selector.is_empty() || ports.is_empty() {
            return Err("the pool has no spec.selector.matchLabels or no spec.targetPorts".to_string());
        }
        Ok(PoolSpec { selector, ports })
    }

    /// The `labelSelector` query value that matches the pool's pods.
    pub fn label_selector(&self) -> String {
        self.selector.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
    }

    /// The endpoints of `pods` (by name): each ready pod's IP with each target port, sorted.
    pub fn endpoints<'a>(&self, pods: impl IntoIterator<Item = &'a Value>) -> Vec<String> {
        let mut found: Vec<String> = pods
            .into_iter()
            .filter_map(ready_ip)
            .flat_map(|ip| {
                let host = if ip.contains(':') { format!("[{ip}]") } else { ip.to_string() };
                self.ports.iter().map(move |port| format!("{host}:{port}"))
            })
            .collect();
        found.sort();
        found.dedup();
        found
    }
}

/// The pod's IP when it may take requests: condition `Ready` is `True`, it is not being
/// deleted, and it has an IP (the reference picker's rule).
pub fn ready_ip(pod: &Value) -> Option<&str> {
    if pod.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()) {
        return None;
    }
    let conditions = pod.pointer("/status/conditions").and_then(Value::as_array)?;
    let ready = conditions.iter().any(|c| {
        c.get("type").and_then(Value::as_str) == Some("Ready")
            && c.get("status").and_then(Value::as_str) == Some("True")
    });
    ready.then(|| pod.pointer("/status/podIP").and_then(Value::as_str)).flatten().filter(|ip| !ip.is_empty())
}

/// One line of a watch (`GET …?watch=true`), read.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchLine {
    /// `ADDED` or `MODIFIED`: the object as it now is.
    Applied(Value),
    /// `DELETED`: the object as it was last.
    Deleted(Value),
    /// `BOOKMARK`: only the `resourceVersion` advanced.
    Bookmark,
    /// An `ERROR` event: its Status `code` (410: the version asked for has expired) and message.
    Error(u16, String),
}

#[derive(Deserialize)]
struct WireEvent {
    #[serde(rename = "type")]
    kind: String,
    object: Value,
}

impl WatchLine {
    /// Reads `line` and the `resourceVersion` its object carries, if any.
    ///
    /// # Errors
    /// A line that is not a watch event (not JSON, no `type` or `object`, an unknown type).
    pub fn parse(line: &[u8]) -> Result<(WatchLine, Option<String>), String> {
        let event: WireEvent = serde_json::from_slice(line).map_err(|e| format!("not a watch event: {e}"))?;
        let rv = event.object.pointer("/metadata/resourceVersion").and_then(Value::as_str).map(str::to_string);
        let text = |key: &str| event.object.get(key).and_then(Value::as_str).unwrap_or("no message").to_string();
        let read = match event.kind.as_str() {
            "ADDED" | "MODIFIED" => WatchLine::Applied(event.object),
            "DELETED" => WatchLine::Deleted(event.object),
            "BOOKMARK" => WatchLine::Bookmark,
            "ERROR" => {
                let code = event.object.get("code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok());
                WatchLine::Error(code.unwrap_or(0), text("message"))
            }
            other => return Err(format!("unknown watch event type {other:?}")),
        };
        Ok((read, rv))
    }
}

#[cfg(test)]
mod tests;
