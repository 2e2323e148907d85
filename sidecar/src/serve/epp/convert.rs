//! Conversions between Envoy's ext_proc messages and the filter host's types: headers in,
//! header mutations, `envoy.lb` dynamic metadata, body chunks and immediate responses out.

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue, HeaderValueOption};
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation, common_response, processing_response, BodyMutation, BodyResponse, CommonResponse, HeaderMutation,
    HeadersResponse, ImmediateResponse, ProcessingResponse, StreamedBodyResponse,
};
use envoy_types::pb::google::protobuf::{value, Struct, Value};
use ferrogate_core::headers::DESTINATION_ENDPOINT;
use ferrogate_host::Headers;

/// Largest body chunk sent back in one `streamed_response` (the reference EPP's bound, under
/// Envoy's advised 64 KiB).
pub const MAX_CHUNK: usize = 62_000;

/// The dynamic metadata namespace the pick goes to (read by Envoy's `override_host` LB).
pub const LB_NAMESPACE: &str = "envoy.lb";

/// Headers a reply never sets or removes: pseudo-headers other than `:path` (Envoy refuses
/// them), `host`, the gateway's own routing header and Envoy's internal ones.
fn immutable(name: &str) -> bool {
    (name.starts_with(':') && name != ":path")
        || name == "host"
        || name.starts_with("x-envoy")
        || name == super::super::config::CLUSTER_HEADER
}

/// The filter's view of an ext_proc header map (`raw_value` preferred, as Envoy sends it).
pub fn headers_in(map: Option<&HeaderMap>) -> Headers {
    let mut out = Headers::new();
    for h in map.map(|m| m.headers.as_slice()).unwrap_or_default() {
        let value = if h.raw_value.is_empty() { h.value.as_bytes().to_vec() } else { h.raw_value.clone() };
        out.add(&h.key.to_ascii_lowercase(), value);
    }
    out
}

/// One `set_headers` entry (overwrite, `raw_value`).
fn set_header(key: &str, value: &[u8]) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue { key: key.to_string(), raw_value: value.to_vec(), ..HeaderValue::default() }),
        // OVERWRITE_IF_EXISTS_OR_ADD
        append_action: 2,
        ..HeaderValueOption::default()
    }
}

/// What turns `before` into `after`: headers added or changed are set, headers gone removed.
pub fn mutation(before: &Headers, after: &Headers) -> HeaderMutation {
    let mut out = HeaderMutation::default();
    for (name, value) in after.iter() {
        if !immutable(name) && before.get(name) != Some(value) {
            out.set_headers.push(set_header(name, value));
        }
    }
    for (name, _) in before.iter() {
        if !immutable(name) && after.get(name).is_none() && !out.remove_headers.iter().any(|r| r == name) {
            out.remove_headers.push(name.to_string());
        }
    }
    out
}

/// `{"envoy.lb": {"x-gateway-destination-endpoint": pick}}`, when the filter picked.
pub fn lb_metadata(headers: &Headers) -> Option<Struct> {
    let pick = headers.get_str(DESTINATION_ENDPOINT)?;
    let string = |s: &str| Value { kind: Some(value::Kind::StringValue(s.to_string())) };
    let mut inner = Struct::default();
    inner.fields.insert(DESTINATION_ENDPOINT.to_string(), string(pick));
    let mut outer = Struct::default();
    outer.fields.insert(LB_NAMESPACE.to_string(), Value { kind: Some(value::Kind::StructValue(inner)) });
    Some(outer)
}

/// A `CONTINUE` common response with optional header and body mutations.
pub fn common(
    header_mutation: Option<HeaderMutation>,
    body: Option<body_mutation::Mutation>,
    reroute: bool,
) -> CommonResponse {
    CommonResponse {
        status: common_response::ResponseStatus::Continue as i32,
        header_mutation,
        body_mutation: body.map(|m| BodyMutation { mutation: Some(m) }),
        clear_route_cache: reroute,
        ..CommonResponse::default()
    }
}

/// A processing response carrying `response` and optional dynamic metadata.
pub fn reply(response: processing_response::Response, metadata: Option<Struct>) -> ProcessingResponse {
    ProcessingResponse { response: Some(response), dynamic_metadata: metadata, ..ProcessingResponse::default() }
}

/// A headers reply (request or response side is chosen by `wrap`).
pub fn headers_reply(
    wrap: fn(HeadersResponse) -> processing_response::Response,
    common: CommonResponse,
    metadata: Option<Struct>,
) -> ProcessingResponse {
    reply(wrap(HeadersResponse { response: Some(common) }), metadata)
}

/// A body reply (request or response side is chosen by `wrap`).
pub fn body_reply(
    wrap: fn(BodyResponse) -> processing_response::Response,
    common: CommonResponse,
    metadata: Option<Struct>,
) -> ProcessingResponse {
    reply(wrap(BodyResponse { response: Some(common) }), metadata)
}

/// `body` as `streamed_response` body replies of at most [`MAX_CHUNK`] bytes; the last one
/// carries `end_of_stream` (one empty reply when `body` is empty and the stream ends).
pub fn streamed(
    wrap: fn(BodyResponse) -> processing_response::Response,
    body: &[u8],
    end_of_stream: bool,
) -> Vec<ProcessingResponse> {
    let chunks: Vec<&[u8]> = if body.is_empty() { vec![&[][..]] } else { body.chunks(MAX_CHUNK).collect() };
    let last = chunks.len() - 1;
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, chunk)| {
            let part = StreamedBodyResponse {
                body: chunk.to_vec(),
                end_of_stream: end_of_stream && i == last,
                ..StreamedBodyResponse::default()
            };
            body_reply(wrap, common(None, Some(body_mutation::Mutation::StreamedResponse(part)), false), None)
        })
        .collect()
}

/// STREAMED body replies, one per chunk received (`chunks`, at least one): unchanged, each a
/// plain CONTINUE; changed (`body`), the first chunk replaced by the whole new body and the
/// others by nothing.
pub fn per_chunk(
    wrap: fn(BodyResponse) -> processing_response::Response,
    body: Option<Vec<u8>>,
    chunks: usize,
) -> Vec<ProcessingResponse> {
    let mut body = body;
    (0..chunks.max(1))
        .map(|i| {
            let mutation = match (&mut body, i) {
                (Some(b), 0) => Some(body_mutation::Mutation::Body(std::mem::take(b))),
                (Some(_), _) => Some(body_mutation::Mutation::Body(Vec::new())),
                (None, _) => None,
            };
            body_reply(wrap, common(None, mutation, false), None)
        })
        .collect()
}

/// The filter's local reply (`:status`, headers, body) as an `ImmediateResponse`.
pub fn immediate(headers: &Headers, body: Vec<u8>, details: &str) -> ProcessingResponse {
    let code = headers.get_str(":status").and_then(|s| s.parse::<i32>().ok()).unwrap_or(500);
    let mut set = HeaderMutation::default();
    for (name, value) in headers.iter() {
        if !name.starts_with(':') && name != "content-length" {
            set.set_headers.push(set_header(name, value));
        }
    }
    let response = ImmediateResponse {
        status: Some(HttpStatus { code }),
        headers: Some(set),
        body,
        details: details.to_string(),
        ..ImmediateResponse::default()
    };
    reply(processing_response::Response::ImmediateResponse(response), None)
}

/// A plain-text immediate response the EPP itself makes (a malformed message sequence).
pub fn refusal(code: i32, text: &str) -> ProcessingResponse {
    let headers = Headers::from_pairs([(":status", code.to_string().as_str()), ("content-type", "text/plain")]);
    immediate(&headers, text.as_bytes().to_vec(), "ferrogate_epp_refused")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutation_sets_changes_and_removes_what_went_but_not_pseudo_headers() {
        let before = Headers::from_pairs([(":method", "POST"), (":path", "/a"), ("authorization", "k"), ("x", "1")]);
        let after = Headers::from_pairs([
            (":method", "GET"),
            (":path", "/b"),
            ("x", "1"),
            (DESTINATION_ENDPOINT, "1.2.3.4:80"),
        ]);
        let m = mutation(&before, &after);
        let set: Vec<&str> = m.set_headers.iter().filter_map(|h| h.header.as_ref()).map(|h| h.key.as_str()).collect();
        assert_eq!(set, [":path", DESTINATION_ENDPOINT]);
        assert_eq!(m.remove_headers, ["authorization"]);
    }

    #[test]
    fn bodies_are_chunked_under_the_bound_and_the_last_chunk_ends_the_stream() {
        let body = vec![b'a'; MAX_CHUNK * 2 + 5];
        let parts = streamed(processing_response::Response::RequestBody, &body, true);
        assert_eq!(parts.len(), 3);
        let ends: Vec<bool> = parts
            .iter()
            .map(|p| match &p.response {
                Some(processing_response::Response::RequestBody(b)) => {
                    match b.response.as_ref().and_then(|c| c.body_mutation.as_ref()).and_then(|m| m.mutation.as_ref()) {
                        Some(body_mutation::Mutation::StreamedResponse(s)) => s.end_of_stream,
                        _ => panic!("not streamed"),
                    }
                }
                _ => panic!("not a body reply"),
            })
            .collect();
        assert_eq!(ends, [false, false, true]);
    }

    #[test]
    fn the_pick_goes_to_the_lb_namespace() {
        let h = Headers::from_pairs([(DESTINATION_ENDPOINT, "10.0.0.1:8000")]);
        let md = lb_metadata(&h).unwrap();
        let Some(value::Kind::StructValue(inner)) = &md.fields[LB_NAMESPACE].kind else { panic!() };
        assert_eq!(inner.fields[DESTINATION_ENDPOINT].kind, Some(value::Kind::StringValue("10.0.0.1:8000".into())));
    }
}
