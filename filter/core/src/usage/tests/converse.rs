//! Bedrock Converse usage: JSON answers, and ConverseStream bodies of binary event-stream
//! frames (the botocore-checked fixtures of `testdata/clouds/eventstream/`), cut anywhere.

use super::*;
use crate::route::Api;
use crate::translate::Outbound;

fn eventstream(name: &str) -> Vec<u8> {
    let path = format!("{}/../../testdata/clouds/eventstream/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn tracker(streaming: bool) -> Tracker {
    Tracker::new(UsageDialect::Converse, streaming, false).with_finish_reasons()
}

#[test]
fn a_translated_request_to_bedrock_is_read_as_converse() {
    assert_eq!(upstream_dialect(Api::ChatCompletions, Some(Outbound::Converse)), UsageDialect::Converse);
    assert_eq!(upstream_dialect(Api::Messages, Some(Outbound::Converse)), UsageDialect::Converse);
}

#[test]
fn json_answers_count_cache_reads_and_writes_in_the_prompt() {
    let last = br#"{"metrics":{"latencyMs":812},"output":{"message":{"role":"assistant","content":[{"text":"hi"}]}},"stopReason":"end_turn","usage":{"inputTokens":12,"outputTokens":9,"totalTokens":2071,"cacheReadInputTokens":2000,"cacheWriteInputTokens":50}}"#;
    let first = br#"{"usage":{"outputTokens":9,"inputTokens":12},"output":{"message":{"role":"assistant","content":[{"text":"a \"usage\": {\"inputTokens\": 1}"}]}},"stopReason":"max_tokens","metrics":{"latencyMs":1}}"#;
    for (body, want, reason) in [(&last[..], u(2062, 9, 2000), "end_turn"), (&first[..], u(12, 9, 0), "max_tokens")] {
        for cut in 0..=body.len() {
            let mut t = tracker(false);
            let (sent, usage) = run(&mut t, body, &[cut]);
            assert_eq!((usage, sent.as_slice()), (want, body), "cut at {cut}");
            assert_eq!(t.finish_reasons(), Some(&[reason.to_string()][..]));
        }
    }
    let mut t = tracker(false);
    assert_eq!(run(&mut t, &big_answer(), &[]).1, u(30, 4, 0), "past the whole-body limit: the tail");
}

/// A Converse answer longer than [`WHOLE_BODY_MAX`], its usage last.
fn big_answer() -> Vec<u8> {
    let text = "x".repeat(WHOLE_BODY_MAX + 100);
    format!(r#"{{"output":{{"message":{{"content":[{{"text":"{text}"}}]}}}},"usage":{{"inputTokens":30,"outputTokens":4}}}}"#)
        .into_bytes()
}

#[test]
fn streams_are_read_from_their_frames_however_cut() {
    let cases = [
        ("converse-stream.bin", u(12, 7, 0), Some("end_turn"), true),
        ("converse-stream-tool-use.bin", u(50, 9, 20), Some("tool_use"), true),
        ("exception.bin", None, None, false),
    ];
    for (name, want, reason, token) in cases {
        let body = eventstream(name);
        let mut cuts: Vec<Vec<usize>> = (0..=body.len()).map(|at| vec![at]).collect();
        cuts.push((1..body.len()).collect());
        for cut in cuts {
            let mut t = tracker(true);
            let (sent, usage) = run(&mut t, &body, &cut);
            assert_eq!(usage, want, "{name} cut at {cut:?}");
            assert!(sent == body, "{name}: the body is forwarded untouched");
            assert_eq!(t.first_token_seen(), token, "{name}");
            let reasons: Vec<String> = reason.iter().map(|r| r.to_string()).collect();
            assert_eq!(t.finish_reasons(), Some(reasons.as_slice()), "{name}");
        }
    }
}

#[test]
fn a_frame_that_cannot_be_decoded_leaves_the_tail_to_scan() {
    let mut body = eventstream("converse-stream.bin");
    // The second frame's payload: its CRC no longer matches.
    let first = usize::try_from(u32::from_be_bytes([body[0], body[1], body[2], body[3]])).unwrap();
    body[first + 100] ^= 0x01;
    for cut in 0..=body.len() {
        let mut t = tracker(true);
        assert_eq!(run(&mut t, &body, &[cut]).1, u(12, 7, 0), "cut at {cut}");
    }
}

#[test]
fn memory_stays_bounded() {
    // A frame announcing more than EVENT_MAX bytes is refused from its prelude.
    let total = u32::try_from(EVENT_MAX + 1).unwrap();
    let mut prelude = [total.to_be_bytes(), 0u32.to_be_bytes()].concat();
    prelude.extend_from_slice(&crc32fast::hash(&prelude).to_be_bytes());
    let mut t = tracker(true);
    assert_eq!(t.on_chunk(&prelude), Chunk::Forward);
    for _ in 0..64 {
        t.on_chunk(&[b'x'; 64 * 1024]);
    }
    // A tail: up to twice TAIL_MAX kept, and the allocation's doubling.
    assert!(t.buffered_bytes() <= 8 * TAIL_MAX, "{}", t.buffered_bytes());
    // Many small frames: nothing accumulates.
    let frames = eventstream("converse-stream.bin").repeat(200);
    let mut t = tracker(true);
    for piece in frames.chunks(999) {
        t.on_chunk(piece);
        assert!(t.buffered_bytes() <= 4 * TAIL_MAX, "{}", t.buffered_bytes());
    }
    assert_eq!(t.finish(), u(12, 7, 0));
}
