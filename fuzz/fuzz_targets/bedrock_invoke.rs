//! Bedrock InvokeModel: the re-framing of its event stream into server-sent events, and the
//! body rewrites, over arbitrary bytes. The first byte picks the piece size and (top bit)
//! whether the rest is split at `0xff` bytes into `chunk` frames with valid CRCs, each part
//! base64-encoded when bit 6 is set, so that the chunk decoding is reached without the fuzzer
//! forging CRC-32s or base64. Never panics; the output does not depend on how the body is cut,
//! and every line of it is an SSE field (`event:` or `data:`) or the blank line ending an event.
#![no_main]

use base64::Engine as _;
use ferrogate_core::clouds::invoke::{body, with_betas, Reframer};
use libfuzzer_sys::fuzz_target;

fn reframe<'a>(pieces: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut r = Reframer::default();
    let mut out = Vec::new();
    for piece in pieces {
        out.extend(r.feed(piece));
    }
    out.extend(r.finish());
    out
}

/// A `chunk` frame around `payload`: string headers, correct lengths and CRCs.
fn chunk_frame(payload: &[u8]) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in [(":event-type", "chunk"), (":message-type", "event")] {
        block.push(name.len() as u8);
        block.extend_from_slice(name.as_bytes());
        block.push(7);
        block.extend_from_slice(&(value.len() as u16).to_be_bytes());
        block.extend_from_slice(value.as_bytes());
    }
    let total = u32::try_from(16 + block.len() + payload.len()).unwrap_or(u32::MAX);
    let mut out = [total.to_be_bytes(), u32::try_from(block.len()).unwrap_or(0).to_be_bytes()].concat();
    out.extend(crc32fast::hash(&out).to_be_bytes());
    out.extend(block);
    out.extend(payload);
    out.extend(crc32fast::hash(&out).to_be_bytes());
    out
}

fn framed(rest: &[u8], encode: bool) -> Vec<u8> {
    rest.split(|&b| b == 0xff)
        .flat_map(|part| {
            if encode {
                let bytes = base64::engine::general_purpose::STANDARD.encode(part);
                chunk_frame(format!(r#"{{"bytes":"{bytes}"}}"#).as_bytes())
            } else {
                chunk_frame(part)
            }
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let _ = body(rest);
    let _ = with_betas(rest, rest);
    let wrapped;
    let input = if mode & 0x80 != 0 {
        wrapped = framed(rest, mode & 0x40 != 0);
        &wrapped[..]
    } else {
        rest
    };
    let whole = reframe(std::iter::once(input));
    let step = usize::from(mode & 0x3f) % 23 + 1;
    assert_eq!(whole, reframe(input.chunks(step)), "pieces of {step}");
    let text = String::from_utf8_lossy(&whole);
    for line in text.split('\n') {
        assert!(line.is_empty() || line.starts_with("event: ") || line.starts_with("data: "), "{line:?}");
    }
    assert!(whole.is_empty() || whole.ends_with(b"\n\n"));
    assert!(!whole.contains(&b'\r'), "a bare CR would end an SSE line");
});
