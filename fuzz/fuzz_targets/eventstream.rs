//! The AWS event-stream decoder over arbitrary bytes in arbitrary pieces: never panics nor
//! loops, and the messages and the error (with where the stream stopped) are the same however
//! the bytes are cut. The first byte picks the message limit, the piece sizes and (top bit)
//! whether the rest is wrapped in one frame with valid CRCs, so that header parsing is reached
//! without the fuzzer having to forge CRC-32s.
#![no_main]

use ferrogate_core::clouds::eventstream::{Decoder, EventStreamError, Message, DEFAULT_MAX_MESSAGE};
use libfuzzer_sys::fuzz_target;

type Outcome = (Vec<Message>, Result<(), EventStreamError>);

fn decode<'a>(max: usize, pieces: impl Iterator<Item = &'a [u8]>) -> Outcome {
    let mut decoder = Decoder::new(max);
    let mut messages = Vec::new();
    for piece in pieces {
        decoder.push(piece);
        while let Some(next) = decoder.next_message() {
            match next {
                Ok(message) => messages.push(message),
                Err(e) => assert_eq!(decoder.failure(), Some(&e)),
            }
        }
    }
    (messages, decoder.finish())
}

/// `rest` as one frame: its first byte (capped) is the headers length, the rest the headers and
/// payload, with correct lengths and CRCs.
fn framed(rest: &[u8]) -> Vec<u8> {
    let Some((&h, body)) = rest.split_first() else { return Vec::new() };
    let h = u32::from(h).min(u32::try_from(body.len()).unwrap_or(0));
    let total = u32::try_from(body.len() + 16).unwrap_or(u32::MAX);
    let mut out = [total.to_be_bytes(), h.to_be_bytes()].concat();
    out.extend(crc32fast::hash(&out).to_be_bytes());
    out.extend(body);
    out.extend(crc32fast::hash(&out).to_be_bytes());
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let wrapped;
    let rest = if mode & 0x80 != 0 {
        wrapped = framed(rest);
        &wrapped[..]
    } else {
        rest
    };
    let max = if mode & 1 == 0 { DEFAULT_MAX_MESSAGE } else { 16 + usize::from(mode) * 4 };
    let whole = decode(max, std::iter::once(rest));
    let step = usize::from(mode >> 1 & 0x3f) % 17 + 1;
    let even = decode(max, rest.chunks(step));
    assert_eq!(whole, even, "pieces of {step}");
    // Uneven pieces: sizes taken from the data itself.
    let mut at = 0;
    let uneven = std::iter::from_fn(|| {
        let size = usize::from(*rest.get(at)? % 29) + 1;
        let piece = rest.get(at..(at + size).min(rest.len()));
        at += size;
        piece
    });
    assert_eq!(whole, decode(max, uneven), "uneven pieces");
});
