//! The request head, read with one hostcall.
//!
//! Each header lookup is a hostcall (and a guest allocation for the answer); reading the whole
//! map once and picking the few headers routing needs is cheaper than asking for each.

use proxy_wasm::types::Bytes;

/// What the filter needs from the request headers.
#[derive(Default)]
pub(super) struct Head {
    pub(super) method: String,
    pub(super) path: String,
    pub(super) request_id: Option<String>,
    pub(super) authorization: Option<Bytes>,
    pub(super) x_api_key: Option<Bytes>,
    pub(super) x_goog_api_key: Option<Bytes>,
    pub(super) content_type: Option<Bytes>,
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
    pub(super) transfer_encoding: bool,
    pub(super) destination_endpoint: bool,
}

impl Head {
    /// Picks the headers of interest out of the full map (names are lower-case in proxy-wasm).
    pub(super) fn from_pairs(pairs: Vec<(String, Bytes)>) -> Head {
        let mut head = Head::default();
        for (name, value) in pairs {
            match name.as_str() {
                ":method" => head.method = String::from_utf8(value).unwrap_or_default(),
                ":path" => head.path = String::from_utf8(value).unwrap_or_default(),
                "x-request-id" => head.request_id = String::from_utf8(value).ok(),
                "authorization" => {
                    head.present.authorization = true;
                    head.authorization.get_or_insert(value);
                }
                "x-api-key" => {
                    head.present.x_api_key = true;
                    head.x_api_key.get_or_insert(value);
                }
                "x-goog-api-key" => {
                    head.present.x_goog_api_key = true;
                    head.x_goog_api_key.get_or_insert(value);
                }
                "content-type" => head.content_type = Some(value),
                "transfer-encoding" => head.present.transfer_encoding = true,
                ferrogate_core::headers::DESTINATION_ENDPOINT => head.present.destination_endpoint = true,
                _ => {}
            }
        }
        head
    }
}
