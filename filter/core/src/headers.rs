//! Header names the gateway reads and writes, shared by the filter, the host and the tests so
//! the contract lives in one place, plus request-id generation (time and sequence passed in,
//! because core has no clock or randomness of its own).

/// Default header carrying the chosen provider, matched by Envoy's route `cluster_header`.
pub const DEFAULT_CLUSTER_HEADER: &str = "x-ferrogate-cluster";
/// Endpoint pick for self-hosted pools (Gateway API Inference Extension contract).
pub const DESTINATION_ENDPOINT: &str = "x-gateway-destination-endpoint";
/// Request id, read from the client or generated.
pub const REQUEST_ID: &str = "x-request-id";
/// The client's `User-Agent`, kept (bounded) in its usage record.
pub const USER_AGENT: &str = "user-agent";
/// Response header: provider that served the request.
pub const PROVIDER: &str = "x-ferrogate-provider";
/// Response header: upstream model id that served the request.
pub const MODEL: &str = "x-ferrogate-model";
/// Response header: filter CPU time spent on this request, in microseconds.
pub const OVERHEAD_US: &str = "x-ferrogate-overhead-us";
/// Response header: milliseconds the request waited in a flow-control queue (sent only by
/// requests that waited).
pub const QUEUED_MS: &str = "x-ferrogate-queued-ms";
/// Response header: the provider's own `x-request-id`, kept when ours replaces it.
pub const UPSTREAM_REQUEST_ID: &str = "x-ferrogate-upstream-request-id";
/// Envoy's route timeout override, in milliseconds: set by the filter on an MCP or A2A POST
/// whose server has a `timeout_ms`, honoured (and removed before the upstream) by Envoy's
/// router and by `ferrogate serve`; a client's copy is never believed.
pub const UPSTREAM_TIMEOUT: &str = "x-envoy-upstream-rq-timeout-ms";
/// Headers only a host may give the filter: failover's ([`crate::failover::INTERNAL_HEADERS`])
/// and an endpoint picker's ([`crate::epp::HOST_HEADERS`], the served endpoint a response
/// header). A host that sets them drops clients' and upstreams' copies first, and none of them
/// goes upstream.
pub const HOST_ONLY: [&str; 7] = [
    crate::failover::ATTEMPT_HEADER,
    crate::failover::TRIED_HEADER,
    crate::failover::FAILOVER_HEADER,
    crate::failover::ABANDONED_HEADER,
    crate::epp::SUBSET_HEADER,
    crate::epp::FALLBACKS_HEADER,
    crate::epp::SERVED_HEADER,
];
/// Client credential headers: read for authentication, never forwarded upstream (`api-key` is
/// the Azure OpenAI SDKs' spelling of `x-api-key`).
pub const CLIENT_CREDENTIALS: [&str; 4] = ["authorization", "x-api-key", "x-goog-api-key", "api-key"];

/// A UUID-shaped request id from a nanosecond timestamp and a per-process sequence number.
///
/// Not random: unique as long as `(now_nanos, seq)` pairs are, which holds within one VM
/// (the sequence increases) and across VMs in practice (distinct timestamps).
pub fn generate_request_id(now_nanos: u64, seq: u64) -> String {
    let hi = now_nanos;
    // Mix the sequence so consecutive ids differ in more than the last digit.
    let lo = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ now_nanos.rotate_left(32);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}

/// A client-supplied request id is kept only when it is short printable ASCII.
pub fn usable_request_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_uuid_shaped_and_distinct() {
        let a = generate_request_id(1_700_000_000_123_456_789, 1);
        let b = generate_request_id(1_700_000_000_123_456_789, 2);
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        let groups: Vec<usize> = a.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12]);
        assert!(a.bytes().all(|c| c == b'-' || c.is_ascii_hexdigit()));
    }

    #[test]
    fn host_only_covers_every_host_header_of_both_contracts() {
        for name in crate::failover::INTERNAL_HEADERS.iter().chain(crate::epp::HOST_HEADERS.iter()) {
            assert!(HOST_ONLY.contains(name), "{name}");
        }
    }
}
