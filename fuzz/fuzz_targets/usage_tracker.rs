//! The usage tracker over arbitrary response bytes cut at arbitrary points: never panics,
//! and without hiding every chunk is forwarded untouched.
#![no_main]

use ferrogate_core::usage::{Chunk, Tracker, UsageDialect};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let dialects = [UsageDialect::OpenAi, UsageDialect::Anthropic, UsageDialect::Gemini, UsageDialect::Converse];
    let dialect = dialects[usize::from(mode % 4)];
    let streaming = mode & 4 != 0;
    let hide = mode & 8 != 0;
    let mut tracker = Tracker::new(dialect, streaming, hide);
    let step = usize::from(mode >> 4) + 1;
    let mut sent = Vec::new();
    let chunks: Vec<&[u8]> = rest.chunks(step).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let verdict = if i + 1 == chunks.len() { tracker.on_end(chunk) } else { tracker.on_chunk(chunk) };
        match verdict {
            Chunk::Forward => sent.extend_from_slice(chunk),
            Chunk::Replace(bytes) => {
                assert!(hide && streaming, "only hiding rewrites");
                sent.extend_from_slice(&bytes);
            }
        }
    }
    let _ = tracker.finish();
    if !(hide && streaming) {
        assert_eq!(sent, rest, "data must not be lost or changed");
    }
});
