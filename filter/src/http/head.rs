//! The request head, read with one hostcall and parsed in place.
//!
//! Each header lookup is a hostcall (and a guest allocation for the answer); reading the whole
//! map once and picking the few headers routing needs is cheaper than asking for each.

use ferrogate_core::header_map;
use ferrogate_core::headers::DESTINATION_ENDPOINT;

/// What the filter needs from the request headers, borrowed from the serialized map: the
/// stream copies only what it keeps past the callback (path, content type, ids).
#[derive(Default)]
pub(super) struct Head<'a> {
    pub(super) method: &'a str,
    pub(super) path: &'a str,
    pub(super) request_id: Option<&'a str>,
    pub(super) authorization: Option<&'a [u8]>,
    pub(super) x_api_key: Option<&'a [u8]>,
    pub(super) x_goog_api_key: Option<&'a [u8]>,
    /// `api-key` (Azure OpenAI SDKs), read when no `x-api-key` was sent.
    pub(super) api_key: Option<&'a [u8]>,
    pub(super) content_type: Option<&'a [u8]>,
    /// `x-session-id`: the balancers' session key.
    pub(super) session: Option<&'a str>,
    /// `x-ferrogate-tried` (trusted only under `host_failover`).
    pub(super) tried: Option<&'a str>,
    /// `x-ferrogate-attempt` (trusted only under `host_failover`).
    pub(super) attempt: Option<u32>,
    /// `x-ferrogate-subset` and `x-ferrogate-fallbacks` (trusted only from an endpoint-picker
    /// host: `ferrogate_core::epp`).
    pub(super) epp: (Option<&'a str>, Option<&'a str>),
    /// `x-ferrogate-token-ids`: the prompt's token ids, for `precise_cache_aware`.
    pub(super) token_ids: Option<&'a [u8]>,
    /// W3C `traceparent`, passed on to the calls the request makes (sidecar, `/tokenize`).
    pub(super) traceparent: Option<&'a str>,
    /// `anthropic-beta`: betas that go into the body for Bedrock's InvokeModel.
    pub(super) anthropic_beta: Option<&'a [u8]>,
    /// `user-agent` (the first one), for the usage record.
    pub(super) user_agent: Option<&'a [u8]>,
    /// Headers present that must not reach the upstream as sent (credentials, framing,
    /// endpoint picks): removed or overwritten only when present, saving hostcalls.
    pub(super) present: Present,
}

/// Flags for headers the filter may have to remove.
#[derive(Default, Clone, Copy)]
pub(super) struct Present {
    pub(super) authorization: bool,
    pub(super) x_api_key: bool,
    pub(super) x_goog_api_key: bool,
    pub(super) api_key: bool,
    pub(super) transfer_encoding: bool,
    pub(super) destination_endpoint: bool,
    pub(super) token_ids: bool,
}

impl<'a> Head<'a> {
    /// The client's key, from its credential headers.
    pub(super) fn client_key(&self) -> Option<&'a [u8]> {
        ferrogate_core::auth::extract_key(self.authorization, self.x_api_key.or(self.api_key), self.x_goog_api_key)
    }

    /// Which of [`ferrogate_core::headers::CLIENT_CREDENTIALS`] were sent, in its order.
    pub(super) fn credentials_present(&self) -> [bool; 4] {
        let p = self.present;
        [p.authorization, p.x_api_key, p.x_goog_api_key, p.api_key]
    }

    /// Picks the headers of interest out of the serialized map (names are lower-case in
    /// proxy-wasm), copying nothing.
    pub(super) fn from_map(map: &'a [u8]) -> Head<'a> {
        let mut head = Head::default();
        let text = |v: &'a [u8]| std::str::from_utf8(v).ok();
        for (name, value) in header_map::pairs(map) {
            match name {
                b":method" => head.method = text(value).unwrap_or_default(),
                b":path" => head.path = text(value).unwrap_or_default(),
                b"x-request-id" => head.request_id = text(value),
                b"authorization" => {
                    head.present.authorization = true;
                    head.authorization.get_or_insert(value);
                }
                b"x-api-key" => {
                    head.present.x_api_key = true;
                    head.x_api_key.get_or_insert(value);
                }
                b"x-goog-api-key" => {
                    head.present.x_goog_api_key = true;
                    head.x_goog_api_key.get_or_insert(value);
                }
                b"api-key" => {
                    head.present.api_key = true;
                    head.api_key.get_or_insert(value);
                }
                b"content-type" => head.content_type = Some(value),
                b"x-ferrogate-tried" => head.tried = text(value),
                b"x-ferrogate-attempt" => head.attempt = text(value).and_then(|v| v.trim().parse().ok()),
                b"x-ferrogate-subset" => head.epp.0 = text(value),
                b"x-ferrogate-fallbacks" => head.epp.1 = text(value),
                b"x-session-id" => head.session = text(value).filter(|s| !s.is_empty()),
                b"traceparent" => head.traceparent = text(value).filter(|t| is_traceparent(t)),
                b"anthropic-beta" => {
                    head.anthropic_beta.get_or_insert(value);
                }
                b"user-agent" => {
                    head.user_agent.get_or_insert(value);
                }
                b"transfer-encoding" => head.present.transfer_encoding = true,
                b"x-ferrogate-token-ids" => {
                    head.present.token_ids = true;
                    head.token_ids.get_or_insert(value);
                }
                name if name == DESTINATION_ENDPOINT.as_bytes() => head.present.destination_endpoint = true,
                _ => {}
            }
        }
        head
    }
}

pub(super) use ferrogate_core::openai::requested_model;

/// Where `part` (a slice of `map`) sits in `map`, so a stream can keep the map and find the
/// part again in a later callback; empty when `part` is not inside `map`.
pub(super) fn span_in(map: &[u8], part: &[u8]) -> std::ops::Range<usize> {
    let offset = (part.as_ptr() as usize).wrapping_sub(map.as_ptr() as usize);
    match offset.checked_add(part.len()) {
        Some(end) if end <= map.len() => offset..end,
        _ => 0..0,
    }
}

/// A W3C `traceparent` of version 00's shape (`00-<32 hex>-<16 hex>-<2 hex>`), so only a
/// well-formed one is passed on.
pub(super) fn is_traceparent(v: &str) -> bool {
    let b = v.as_bytes();
    let hex = |r: std::ops::Range<usize>| b.get(r).is_some_and(|s| s.iter().all(u8::is_ascii_hexdigit));
    let dash = |i: usize| b.get(i) == Some(&b'-');
    b.len() == 55 && b.starts_with(b"00-") && dash(35) && dash(52) && hex(3..35) && hex(36..52) && hex(53..55)
}

pub(super) use ferrogate_core::headers::usable_request_id;

#[cfg(test)]
mod tests {
    use super::is_traceparent;

    #[test]
    fn only_well_formed_traceparents_are_passed_on() {
        assert!(is_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01x",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\n",
            "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
        ] {
            assert!(!is_traceparent(bad), "{bad}");
        }
    }
}
