//! Shared by the request-translator fuzz targets: one client dialect, any provider dialect
//! (picked by the first byte), arbitrary body bytes.

use ferrogate_core::translate::{pair_to, Inbound, Outbound};

const OUTBOUND: [Outbound; 4] = [Outbound::OpenAiChat, Outbound::Anthropic, Outbound::Gemini, Outbound::Converse];

/// Never panics; a translated request is one JSON object; a refusal names something.
pub fn request(inbound: Inbound, data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else { return };
    let Some(p) = pair_to(inbound, OUTBOUND[usize::from(mode) % 4]) else { return };
    let stream = mode & 0x80 != 0;
    match p.request_for_model(body, "asked", stream, "upstream") {
        Ok((out, _)) => {
            let v: serde_json::Value = serde_json::from_slice(&out).expect("translated requests are JSON");
            assert!(v.is_object());
        }
        Err(e) => assert!(!p.refusal(&e).message.is_empty()),
    }
}
