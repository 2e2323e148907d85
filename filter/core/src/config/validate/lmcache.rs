//! A provider's `lmcache` block: where the sidecar reads each engine's LMCache occupancy
//! (`lmcache_aware` prefers engines with room to store a new prefix).

use super::Problems;
use crate::config::raw::{RawLmcache, RawProvider};

/// The validated `lmcache` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lmcache {
    /// Where each endpoint's occupancy is read, if anywhere.
    pub occupancy: Option<OccupancySource>,
    /// The controller sockets the sidecar binds for LMCache workers, if any.
    pub controller: Option<Controller>,
}

/// The sockets LMCache workers push to and register with, and who they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Controller {
    /// The PULL socket's bind address (`tcp://host:port`, `*` as the host made `0.0.0.0`).
    pub pull: String,
    /// The ROUTER socket's bind address, if any.
    pub reply: Option<String>,
    /// Instance id → endpoint (`host:port`), as configured.
    pub instances: Vec<(String, String)>,
}

/// Where an engine's occupancy is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OccupancySource {
    /// A path asked of the endpoint itself, with the provider's scheme.
    Path(String),
    /// A URL in which `{host}` (if present) stands for the endpoint's host.
    Url(String),
}

impl OccupancySource {
    /// The URL for the endpoint `endpoint` (`host:port`) of a provider whose scheme is
    /// `scheme`.
    pub fn url(&self, scheme: &str, endpoint: &str) -> String {
        match self {
            Self::Path(path) => format!("{scheme}://{endpoint}{path}"),
            Self::Url(template) => {
                let host = crate::config::syntax::endpoint_parts(endpoint).map_or(endpoint, |(host, _)| host);
                template.replace("{host}", host)
            }
        }
    }
}

/// Validates provider `i`'s `lmcache` block `raw`.
pub(super) fn settings(i: usize, provider: &RawProvider, raw: &RawLmcache, p: &mut Problems) -> Option<Lmcache> {
    let at = |field: &str| format!("providers[{i}].lmcache.{field}");
    if provider.endpoints.is_empty() && !provider.is_dynamic_pool() {
        p.add(format!("providers[{i}].lmcache"), "needs an endpoints pool (the engines it describes)");
        return None;
    }
    let occupancy = match raw.occupancy.as_deref() {
        None => None,
        Some(s) => match source(s) {
            Ok(source) => Some(source),
            Err(why) => {
                p.add(at("occupancy"), why);
                return None;
            }
        },
    };
    let controller = controller(i, provider, raw, p);
    Some(Lmcache { occupancy, controller })
}

/// The controller sockets: bind addresses, and instances naming the pool's endpoints.
fn controller(i: usize, provider: &RawProvider, raw: &RawLmcache, p: &mut Problems) -> Option<Controller> {
    let at = |field: &str| format!("providers[{i}].lmcache.{field}");
    let Some(pull) = raw.pull.as_deref() else {
        if raw.reply.is_some() || !raw.instances.is_empty() {
            p.add(at("pull"), "reply and instances need the pull socket LMCache workers push to");
        }
        return None;
    };
    let pull = p.check(at("pull"), bind_address(pull));
    let reply = raw.reply.as_deref().and_then(|r| p.check(at("reply"), bind_address(r)));
    if provider.endpoints.iter().all(|e| e.kv_events.is_none()) && provider.kv_events_port.is_none() {
        let why = "needs endpoints with kv_events (admits name chunks by hash; the events say which blocks those are)";
        p.add(at("pull"), why);
    }
    let mut instances = Vec::new();
    for (id, endpoint) in &raw.instances {
        let known = provider.is_dynamic_pool() || provider.endpoints.iter().any(|e| &e.address == endpoint);
        if known {
            instances.push((id.clone(), endpoint.clone()));
        } else {
            p.add(at(&format!("instances.{id}")), format!("{endpoint:?} is not one of the pool's endpoints"));
        }
    }
    Some(Controller { pull: pull?, reply, instances })
}

/// A socket to bind: `tcp://host:port` (`*` for every interface).
fn bind_address(s: &str) -> Result<String, String> {
    let rest = s.strip_prefix("tcp://").ok_or_else(|| format!("{s:?} must be tcp://host:port"))?;
    let rest = rest.replacen('*', "0.0.0.0", 1);
    crate::config::syntax::parse_endpoint(&rest)?;
    Ok(format!("tcp://{rest}"))
}

fn source(s: &str) -> Result<OccupancySource, String> {
    if s.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err(format!("{s:?} holds a space or control character"));
    }
    if s.starts_with('/') {
        return Ok(OccupancySource::Path(s.to_string()));
    }
    let rest = s.strip_prefix("http://").or_else(|| s.strip_prefix("https://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => Ok(OccupancySource::Url(s.to_string())),
        _ => Err(format!("{s:?} is neither a path (/...) nor an http(s) URL")),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, OccupancySource, RawConfig};

    fn load(lmcache: &str) -> Result<Config, Vec<String>> {
        let yaml = format!(
            "providers:\n  - name: pool\n    kind: openai_compatible\n    base_url: \"http://vllm:8000\"\n    \
             endpoints: [\"10.0.0.1:8000\"]\n    lmcache: {lmcache}\n"
        );
        let raw: RawConfig = serde_saphyr::from_str(&yaml).map_err(|e| vec![e.to_string()])?;
        Config::try_from(raw).map_err(|e| e.problems.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn occupancy_is_a_path_or_a_url_template() {
        let source = |l: &str| load(l).unwrap().providers[0].lmcache.clone().unwrap().occupancy.unwrap();
        let path = source("{ occupancy: /v1/occupancy }");
        assert_eq!(path.url("http", "10.0.0.1:8000"), "http://10.0.0.1:8000/v1/occupancy");
        let url = source(r#"{ occupancy: "http://{host}:9000/v1/occupancy" }"#);
        assert_eq!(url, OccupancySource::Url("http://{host}:9000/v1/occupancy".into()));
        assert_eq!(url.url("http", "10.0.0.1:8000"), "http://10.0.0.1:9000/v1/occupancy");
        assert_eq!(url.url("http", "[::1]:8000"), "http://[::1]:9000/v1/occupancy");
        assert_eq!(load("{}").unwrap().providers[0].lmcache.clone().unwrap().occupancy, None);
    }

    #[test]
    fn bad_blocks_are_named_by_path() {
        assert_eq!(
            load("{ occupancy: occupancy.json }").unwrap_err(),
            ["providers[0].lmcache.occupancy: \"occupancy.json\" is neither a path (/...) nor an http(s) URL"]
        );
        let unknown = load("{ occupancy: /o, pul: x }").unwrap_err();
        assert!(unknown[0].contains("pul"), "{unknown:?}");
        let no_pool = "providers: [{ name: p, kind: openai, base_url: \"http://h\", lmcache: {} }]";
        let problems = Config::try_from(serde_saphyr::from_str::<RawConfig>(no_pool).unwrap()).unwrap_err();
        assert_eq!(
            problems.problems[0].to_string(),
            "providers[0].lmcache: needs an endpoints pool (the engines it describes)"
        );
    }

    fn with_events(lmcache: &str) -> Result<Config, Vec<String>> {
        let yaml = format!(
            "providers:\n  - name: pool\n    kind: openai_compatible\n    base_url: \"http://vllm:8000\"\n    \
             endpoints: [{{ address: \"10.0.0.1:8000\", kv_events: \"tcp://10.0.0.1:5557\" }}]\n    lmcache: {lmcache}\n"
        );
        let raw: RawConfig = serde_saphyr::from_str(&yaml).map_err(|e| vec![e.to_string()])?;
        Config::try_from(raw).map_err(|e| e.problems.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn the_controller_binds_and_names_instances_by_endpoint() {
        let c = with_events(
            r#"{ pull: "tcp://*:8300", reply: "tcp://0.0.0.0:8400", instances: { vllm-a: "10.0.0.1:8000" } }"#,
        )
        .unwrap();
        let controller = c.providers[0].lmcache.clone().unwrap().controller.unwrap();
        assert_eq!(controller.pull, "tcp://0.0.0.0:8300");
        assert_eq!(controller.reply.as_deref(), Some("tcp://0.0.0.0:8400"));
        assert_eq!(controller.instances, [("vllm-a".to_string(), "10.0.0.1:8000".to_string())]);
        assert_eq!(with_events("{ occupancy: /o }").unwrap().providers[0].lmcache.clone().unwrap().controller, None);
    }

    #[test]
    fn controller_problems_are_named_by_path() {
        assert_eq!(
            with_events(r#"{ pull: "0.0.0.0:8300", instances: { a: "10.0.0.9:8000" } }"#).unwrap_err(),
            [
                "providers[0].lmcache.pull: \"0.0.0.0:8300\" must be tcp://host:port",
                "providers[0].lmcache.instances.a: \"10.0.0.9:8000\" is not one of the pool's endpoints",
            ]
        );
        assert_eq!(
            with_events(r#"{ reply: "tcp://*:8400" }"#).unwrap_err(),
            ["providers[0].lmcache.pull: reply and instances need the pull socket LMCache workers push to"]
        );
        assert_eq!(
            load(r#"{ pull: "tcp://*:8300" }"#).unwrap_err(),
            ["providers[0].lmcache.pull: needs endpoints with kv_events (admits name chunks by hash; the events say which blocks those are)"]
        );
    }
}
