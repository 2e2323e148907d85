//! The filter's side of the endpoint picker (`ferrogate_core::epp`): the gateway's subset and
//! the number of fallbacks, taken from the host's headers when the host is an endpoint picker,
//! the fallback endpoints the pick found, written after it, and on the response path the
//! endpoint that served, which the answer's passive health and usage record are then
//! attributed to.

use ferrogate_core::config::Config;
use ferrogate_core::epp::{self, Subset};

use super::Stream;

/// What an endpoint-picker host asked for one request, and the fallbacks found.
#[derive(Debug, Default)]
pub(crate) struct EppAsk {
    /// The gateway's subset (`None`: any endpoint of the pool).
    pub(super) subset: Option<Subset>,
    /// How many fallback endpoints to list after the pick.
    pub(super) fallbacks: usize,
    /// The fallback endpoints the pick found, best first.
    pub(super) found: Vec<String>,
}

impl Stream {
    /// Takes the host's subset and fallback headers (ignored unless the plugin configuration
    /// says the host is an endpoint picker: anywhere else they would come from the client).
    pub(super) fn take_epp(&mut self, (subset, fallbacks): (Option<&str>, Option<&str>)) {
        if !self.endpoint_picker() {
            return;
        }
        if subset.is_none() && fallbacks.is_none() {
            return;
        }
        let fallbacks = fallbacks.and_then(epp::parse_fallbacks).unwrap_or(0);
        self.epp = Some(Box::new(EppAsk { subset: subset.map(Subset::parse), fallbacks, found: Vec::new() }));
    }

    /// The `x-gateway-destination-endpoint` value for `endpoint`: the endpoint, then the
    /// fallbacks found (`None` when there are none: the endpoint is written as it is).
    pub(super) fn endpoint_list(&self, endpoint: &str) -> Option<String> {
        let found = &self.epp.as_ref()?.found;
        (!found.is_empty()).then(|| epp::endpoint_list(endpoint, found.iter().map(String::as_str)))
    }

    fn endpoint_picker(&self) -> bool {
        self.shared.plugin.as_ref().is_some_and(|p| p.endpoint_picker)
    }

    /// The host's word (`x-ferrogate-served`) on which endpoint served the answer: when it is
    /// another endpoint of the picked provider's pool (a retry of the gateway walked past the
    /// pick), the answer's passive health and usage record are that endpoint's. Ignored unless
    /// the host is an endpoint picker. The in-flight count stays the pick's: it is released
    /// as it was counted.
    pub(super) fn take_served(&mut self, served: &[u8]) {
        if !self.endpoint_picker() {
            return;
        }
        let Some((provider, picked)) = self.attempt.upstream else { return };
        let Some(p) = self.config.as_deref().and_then(|c| c.providers.get(provider)) else { return };
        let Some(at) = std::str::from_utf8(served).ok().and_then(|s| epp::served_endpoint(&p.endpoints, picked, s))
        else {
            return;
        };
        log::debug!("#{} served by pool endpoint {at} of {}, picked {picked:?}", self.id, p.name);
        self.attempt.upstream = Some((provider, Some(at)));
    }

    /// The pool endpoint (`ip:port`) the answer came from, for the usage record: the pick, or
    /// the endpoint the host said served. `None` for a target without a pool.
    pub(super) fn served_endpoint<'a>(&self, config: Option<&'a Config>) -> Option<&'a str> {
        let (provider, endpoint) = self.attempt.upstream.filter(|_| self.routed.is_some())?;
        config?.providers.get(provider)?.endpoints.get(endpoint?).map(String::as_str)
    }
}
