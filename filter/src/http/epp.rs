//! The filter's side of the endpoint picker (`ferrogate_core::epp`): the gateway's subset and
//! the number of fallbacks, taken from the host's headers when the host is an endpoint picker,
//! and the fallback endpoints the pick found, written after it.

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
        if !self.shared.plugin.as_ref().is_some_and(|p| p.endpoint_picker) {
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
}
