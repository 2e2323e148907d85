//! The stream translator (SSE framing, every provider decoder, every client encoder) over
//! arbitrary bytes cut at arbitrary points: never panics, and the output does not depend on
//! where the chunks were cut.
#![no_main]

use ferrogate_core::translate::stream::StreamTranslator;
use ferrogate_core::translate::{pair_to, Context, Inbound, Kept, Outbound};
use libfuzzer_sys::fuzz_target;

const INBOUND: [Inbound; 4] = [Inbound::OpenAiChat, Inbound::Anthropic, Inbound::Gemini, Inbound::Responses];
const OUTBOUND: [Outbound; 4] = [Outbound::OpenAiChat, Outbound::Anthropic, Outbound::Gemini, Outbound::Converse];

fn run(t: &mut StreamTranslator, pieces: impl Iterator<Item = impl AsRef<[u8]>>) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pieces {
        out.extend(t.feed(p.as_ref()));
    }
    out.extend(t.finish());
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else { return };
    let Some(p) = pair_to(INBOUND[usize::from(mode & 3)], OUTBOUND[usize::from(mode >> 2) % 4]) else { return };
    let ctx = Context {
        model: "m".into(),
        structured: mode & 0x40 != 0,
        stream: true,
        stream_usage: mode & 0x80 != 0,
        kept: Kept {
            store: mode & 0x20 != 0,
            previous_response_id: (mode & 1 != 0).then(|| "resp_p".into()),
            conversation: (mode & 2 != 0).then(|| "conv_c".into()),
        },
        answer_id: "a".into(),
    };
    let whole = run(&mut StreamTranslator::new(p, &ctx, 1), std::iter::once(body));
    let step = usize::from(mode >> 4) + 1;
    let cut = run(&mut StreamTranslator::new(p, &ctx, 1), body.chunks(step));
    assert_eq!(whole, cut, "the translation must not depend on chunk boundaries");
});
