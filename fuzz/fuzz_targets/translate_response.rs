//! Every answer translator (each provider dialect back to each client dialect) and the error
//! envelope mapping over arbitrary bytes: never panics; successes and errors are JSON.
#![no_main]

use ferrogate_core::translate::{pair_to, Context, Inbound, Kept, Outbound};
use libfuzzer_sys::fuzz_target;

const INBOUND: [Inbound; 4] = [Inbound::OpenAiChat, Inbound::Anthropic, Inbound::Gemini, Inbound::Responses];
const OUTBOUND: [Outbound; 4] = [Outbound::OpenAiChat, Outbound::Anthropic, Outbound::Gemini, Outbound::Converse];

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else { return };
    let Some(p) = pair_to(INBOUND[usize::from(mode & 3)], OUTBOUND[usize::from(mode >> 2) % 4]) else { return };
    let ctx = Context {
        model: "m".into(),
        structured: mode & 0x40 != 0,
        stream: false,
        stream_usage: false,
        kept: Kept {
            store: mode & 0x80 != 0,
            previous_response_id: (mode & 1 != 0).then(|| "resp_p".into()),
            conversation: (mode & 2 != 0).then(|| "conv_c".into()),
        },
        answer_id: "a".into(),
    };
    if let Ok(out) = p.response(body, &ctx, 1) {
        serde_json::from_slice::<serde_json::Value>(&out).expect("translated answers are JSON");
    }
    let status = 400 + u16::from(mode >> 4) * 11;
    serde_json::from_slice::<serde_json::Value>(&p.error_body(status, body)).expect("error bodies are JSON");
});
