//! The response cache's replay (`ferrogate_core::cache::replay`) of an arbitrary stored body
//! in every stream shape: never panics, and what it replays assembles back into a complete
//! answer (`ferrogate_core::cache::Assembler`), cut in chunks or not.
//!
//! Input: the first byte picks the shape (low 3 bits), usage on or off (bit 3) and the chunk
//! size (high 4 bits, plus one); the rest is the stored body.
#![no_main]

use ferrogate_core::cache::replay::{self, ReplayOptions};
use ferrogate_core::cache::{Assembler, Shape};
use libfuzzer_sys::fuzz_target;

const SHAPES: [Shape; 5] =
    [Shape::ChatSse, Shape::AnthropicSse, Shape::GeminiSse, Shape::GeminiJsonArray, Shape::ResponsesSse];

fn assemble(shape: Shape, stream: &[u8], step: usize) -> Option<Vec<u8>> {
    let mut a = Assembler::new(shape, usize::MAX);
    for piece in stream.chunks(step) {
        a.feed(piece);
    }
    a.finish()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else { return };
    let shape = SHAPES[usize::from(mode & 7) % SHAPES.len()];
    let opts = ReplayOptions { model: "m", created: 1, include_usage: mode & 8 != 0 };
    let Ok(stream) = replay::stream(shape, body, &opts) else { return };
    let whole = assemble(shape, &stream, stream.len().max(1));
    assert_eq!(whole, assemble(shape, &stream, usize::from(mode >> 4) + 1), "chunking changed the answer");
    // Every replay is a finished stream; only arguments that are not an object (which the
    // stored body cannot hold) would keep it from assembling.
    assert!(whole.is_some(), "a replayed stream must assemble: {}", String::from_utf8_lossy(&stream));
});
