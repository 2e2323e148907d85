//! The response cache's stream assembler (`ferrogate_core::cache::Assembler`) over arbitrary
//! bytes cut at arbitrary points, in every stream shape: never panics, the answer does not
//! depend on where the chunks were cut, and an answer is never larger than the limit.
//!
//! Input: the first byte picks the shape (low 3 bits) and the chunk size (high 5 bits, plus
//! one); the second byte is the limit in KiB (0 is 64 bytes); the rest is the stream.
#![no_main]

use ferrogate_core::cache::{Assembler, Shape};
use libfuzzer_sys::fuzz_target;

const SHAPES: [Shape; 6] =
    [Shape::Json, Shape::ChatSse, Shape::AnthropicSse, Shape::GeminiSse, Shape::GeminiJsonArray, Shape::ResponsesSse];

fn run(shape: Shape, limit: usize, pieces: impl Iterator<Item = impl AsRef<[u8]>>) -> Option<Vec<u8>> {
    let mut a = Assembler::new(shape, limit);
    for p in pieces {
        a.feed(p.as_ref());
    }
    a.finish()
}

fuzz_target!(|data: &[u8]| {
    let [mode, kib, body @ ..] = data else { return };
    let shape = SHAPES[usize::from(mode & 7) % SHAPES.len()];
    let limit = if *kib == 0 { 64 } else { usize::from(*kib) << 10 };
    let whole = run(shape, limit, std::iter::once(body));
    let step = usize::from(mode >> 3) + 1;
    let cut = run(shape, limit, body.chunks(step));
    assert_eq!(whole, cut, "the answer must not depend on chunk boundaries");
    if let Some(answer) = whole {
        assert!(answer.len() <= limit);
        assert!(serde_json::from_slice::<serde_json::Value>(&answer).is_ok_and(|v| v.is_object()));
    }
});
