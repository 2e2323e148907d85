//! A provider's `lmcache` block: where the sidecar reads each engine's LMCache occupancy
//! (`lmcache_aware` prefers engines with room to store a new prefix).

use super::Problems;
use crate::config::raw::{RawLmcache, RawProvider};

/// The validated `lmcache` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lmcache {
    /// Where each endpoint's occupancy is read, if anywhere.
    pub occupancy: Option<OccupancySource>,
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
                let host = match endpoint.rsplit_once(':') {
                    Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
                    _ => endpoint,
                };
                template.replace("{host}", host)
            }
        }
    }
}

/// Validates provider `i`'s `lmcache` block `raw`.
pub(super) fn settings(i: usize, provider: &RawProvider, raw: &RawLmcache, p: &mut Problems) -> Option<Lmcache> {
    let at = |field: &str| format!("providers[{i}].lmcache.{field}");
    if provider.endpoints.is_empty() && provider.endpoints_dns.is_none() {
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
    Some(Lmcache { occupancy })
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
}
