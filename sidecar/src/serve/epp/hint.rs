//! What the gateway tells the picker in `metadata_context`: the subset of endpoints it offers
//! (`envoy.lb.subset_hint`) and, on the response path, the endpoint that served
//! (`envoy.lb` / `x-gateway-destination-endpoint-served`).

use envoy_types::pb::envoy::config::core::v3::Metadata;
use envoy_types::pb::google::protobuf::{value, Value};

/// Namespace of the gateway's subset hint.
pub const SUBSET_NAMESPACE: &str = "envoy.lb.subset_hint";
/// Key of the subset in [`SUBSET_NAMESPACE`].
pub const SUBSET_KEY: &str = "x-gateway-destination-endpoint-subset";
/// Key, in `envoy.lb`, of the endpoint that served the final response.
pub const SERVED_KEY: &str = "x-gateway-destination-endpoint-served";

/// The subset the gateway offers, as one comma-separated list (`Some("")`: an empty subset,
/// nothing may be picked; `None`: no hint, the whole pool). The protocol names a list of
/// `ip:port` strings; a single comma-separated string is read the same way.
pub fn subset(metadata: Option<&Metadata>) -> Option<String> {
    strings(field(metadata, SUBSET_NAMESPACE, SUBSET_KEY)?)
}

/// The endpoint that served the final response, when the gateway says.
pub fn served(metadata: Option<&Metadata>) -> Option<String> {
    strings(field(metadata, super::convert::LB_NAMESPACE, SERVED_KEY)?).filter(|s| !s.is_empty())
}

fn field<'a>(metadata: Option<&'a Metadata>, namespace: &str, key: &str) -> Option<&'a Value> {
    metadata?.filter_metadata.get(namespace)?.fields.get(key)
}

/// A string, or a list of strings, as one comma-separated string; `None` for another kind.
fn strings(v: &Value) -> Option<String> {
    match v.kind.as_ref()? {
        value::Kind::StringValue(s) => Some(s.clone()),
        value::Kind::ListValue(list) => {
            let items = list.values.iter().filter_map(|v| match v.kind.as_ref()? {
                value::Kind::StringValue(s) => Some(s.as_str()),
                _ => None,
            });
            Some(items.collect::<Vec<_>>().join(","))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::google::protobuf::{ListValue, Struct};

    fn metadata(namespace: &str, key: &str, v: value::Kind) -> Metadata {
        let mut inner = Struct::default();
        inner.fields.insert(key.to_string(), Value { kind: Some(v) });
        let mut md = Metadata::default();
        md.filter_metadata.insert(namespace.to_string(), inner);
        md
    }

    fn list(items: &[&str]) -> value::Kind {
        let values = items.iter().map(|s| Value { kind: Some(value::Kind::StringValue(s.to_string())) }).collect();
        value::Kind::ListValue(ListValue { values })
    }

    #[test]
    fn the_subset_is_read_as_a_list_or_a_string() {
        let md = metadata(SUBSET_NAMESPACE, SUBSET_KEY, list(&["10.0.0.1:8000", "10.0.0.2:8000"]));
        assert_eq!(subset(Some(&md)).as_deref(), Some("10.0.0.1:8000,10.0.0.2:8000"));
        let md = metadata(SUBSET_NAMESPACE, SUBSET_KEY, value::Kind::StringValue("10.0.0.3:1".into()));
        assert_eq!(subset(Some(&md)).as_deref(), Some("10.0.0.3:1"));
        let md = metadata(SUBSET_NAMESPACE, SUBSET_KEY, list(&[]));
        assert_eq!(subset(Some(&md)).as_deref(), Some(""), "an empty subset is not the absence of one");
        assert_eq!(subset(None), None);
        let other = metadata("envoy.lb", SUBSET_KEY, list(&["10.0.0.1:8000"]));
        assert_eq!(subset(Some(&other)), None, "only the subset-hint namespace counts");
    }

    #[test]
    fn the_served_endpoint_is_read_from_envoy_lb() {
        let md = metadata("envoy.lb", SERVED_KEY, value::Kind::StringValue("10.0.0.2:8000".into()));
        assert_eq!(served(Some(&md)).as_deref(), Some("10.0.0.2:8000"));
        assert_eq!(served(None), None);
    }
}
