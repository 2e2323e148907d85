//! The stream meter over arbitrary bytes: never panics, and cutting the same bytes into pieces
//! changes neither the tokens it counts nor whether it saw the stream's end (every answer that
//! stops early is charged and told by these two). Events longer than the meter holds are
//! counted whole when they arrive whole, by bytes when in pieces: the comparison stops there.
#![no_main]

use ferrogate_core::limits::cut::{Meter, EVENT_CAP};
use ferrogate_core::translate::Inbound;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    if rest.len() >= EVENT_CAP {
        return;
    }
    let shapes = [Inbound::OpenAiChat, Inbound::Anthropic, Inbound::Gemini, Inbound::Responses];
    let shape = shapes[usize::from(mode % 4)];
    let step = usize::from(mode >> 2) + 1;
    let mut whole = Meter::new(shape, u64::MAX);
    assert_eq!(whole.feed(rest), None, "no allowance: never a cut");
    let mut pieces = Meter::new(shape, u64::MAX);
    for chunk in rest.chunks(step) {
        assert_eq!(pieces.feed(chunk), None);
    }
    assert_eq!(whole.delivered(), pieces.delivered(), "tokens");
    assert_eq!(whole.finished(), pieces.finished(), "end");
});
