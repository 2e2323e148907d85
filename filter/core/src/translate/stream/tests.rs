//! Stream golden tests: every `*.in.sse` under `testdata/translate/streams/<client>-to-<provider>/`
//! translates to its `*.out.sse` byte for byte, fed whole, cut at every byte boundary, and one
//! byte at a time.

use std::path::Path;

use super::*;
use crate::config::ProviderKind;
use crate::translate::{pair, Inbound};

fn pair_named(name: &str) -> Pair {
    let (client, provider) = name.split_once("-to-").unwrap();
    let inbound = match client {
        "openai" => Inbound::OpenAiChat,
        "anthropic" => Inbound::Anthropic,
        "gemini" => Inbound::Gemini,
        "responses" => Inbound::Responses,
        other => panic!("{other}"),
    };
    let kind = match provider {
        "openai" => ProviderKind::OpenAi,
        "anthropic" => ProviderKind::Anthropic,
        "gemini" => ProviderKind::Gemini,
        other => panic!("{other}"),
    };
    pair(inbound, kind).unwrap()
}

fn translator(p: Pair) -> StreamTranslator {
    let ctx = Context {
        model: "client-model".into(),
        structured: false,
        stream: true,
        stream_usage: true,
        kept: Default::default(),
        answer_id: String::new(),
    };
    StreamTranslator::new(p, &ctx, 1_700_000_000)
}

fn run(p: Pair, pieces: &[&[u8]]) -> Vec<u8> {
    let mut t = translator(p);
    let mut out = Vec::new();
    for piece in pieces {
        out.extend(t.feed(piece));
    }
    out.extend(t.finish());
    out
}

/// (pair, case path, input, expected output) of every stream golden; `BLESS=1` rewrites the
/// expected files from the current output (then review the diff).
fn cases() -> Vec<(Pair, String, Vec<u8>, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/translate/streams");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root).unwrap() {
        let dir = entry.unwrap().path();
        let p = pair_named(dir.file_name().unwrap().to_str().unwrap());
        for file in std::fs::read_dir(&dir).unwrap() {
            let path = file.unwrap().path();
            let Some(case) = path.file_name().unwrap().to_str().unwrap().strip_suffix(".in.sse") else { continue };
            let input = std::fs::read(&path).unwrap();
            let expected_path = dir.join(format!("{case}.out.sse"));
            if std::env::var_os("BLESS").is_some() {
                std::fs::write(&expected_path, run(p, &[&input])).unwrap();
            }
            out.push((p, expected_path.display().to_string(), input, std::fs::read(&expected_path).unwrap()));
        }
    }
    assert!(out.len() >= 4);
    out
}

#[test]
fn golden_streams() {
    for (p, case, input, expected) in cases() {
        let got = run(p, &[&input]);
        assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&expected), "{case}");
    }
}

#[test]
fn any_cut_gives_the_same_translation() {
    for (p, case, input, expected) in cases() {
        for at in 0..=input.len() {
            let (a, b) = input.split_at(at);
            assert_eq!(run(p, &[a, b]), expected, "{case} cut at {at}");
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(run(p, &bytes), expected, "{case} byte by byte");
    }
}

#[test]
fn the_first_token_leaves_with_the_event_that_carries_it() {
    let p = pair_named("openai-to-anthropic");
    let mut t = translator(p);
    let start = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":3}}}\n\n";
    let first = t.feed(start);
    assert!(String::from_utf8_lossy(&first).contains("\"role\":\"assistant\""), "the role chunk goes at once");
    let delta = b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n";
    let out = String::from_utf8(t.feed(delta)).unwrap();
    assert!(out.contains("\"content\":\"Hi\""), "{out}");
}

#[test]
fn a_cut_stream_ends_with_an_error_not_a_done() {
    for name in ["openai-to-anthropic", "anthropic-to-openai", "responses-to-openai", "responses-to-anthropic"] {
        let (p, _, input, _) = cases().into_iter().find(|(p, ..)| *p == pair_named(name)).unwrap();
        // After the second event: content has started, nothing has finished.
        let first = input.windows(2).position(|w| w == b"\n\n").unwrap() + 2;
        let second = first + input[first..].windows(2).position(|w| w == b"\n\n").unwrap() + 2;
        let cut = &input[..second];
        let out = String::from_utf8(run(p, &[cut])).unwrap();
        assert!(out.contains("ended before the answer was complete"), "{name}: {out}");
        assert!(!out.contains("[DONE]") && !out.contains("message_stop"), "{name}: {out}");
        if name.starts_with("responses") {
            assert!(!out.contains("response.completed") && out.contains("event: error"), "{name}: {out}");
        }
    }
}

#[test]
fn an_oversized_event_is_an_error_and_memory_stays_bounded() {
    let mut t = translator(pair_named("anthropic-to-openai"));
    let huge = vec![b'x'; MAX_EVENT + 10];
    let out = String::from_utf8(t.feed(&huge)).unwrap();
    assert!(out.contains("exceeded"), "{out}");
    assert!(t.pending.capacity() == 0 && t.feed(b"more").is_empty());
}

/// Bedrock ConverseStream: binary event-stream frames instead of SSE. Transcripts are the
/// frames in `testdata/clouds/eventstream/` (checked against botocore's decoder) and frames
/// built here; expected outputs are under `testdata/clouds/converse/streams/` (`BLESS=1`
/// writes missing ones: review them).
mod converse {
    use std::path::{Path, PathBuf};

    use serde_json::{json, Value};

    use super::{run, Pair, MAX_EVENT};
    use crate::translate::{Inbound, Outbound};

    const CLIENTS: [(&str, Inbound); 4] = [
        ("openai", Inbound::OpenAiChat),
        ("anthropic", Inbound::Anthropic),
        ("gemini", Inbound::Gemini),
        ("responses", Inbound::Responses),
    ];

    fn from_bedrock(inbound: Inbound) -> Pair {
        Pair { inbound, outbound: Outbound::Converse }
    }

    fn testdata(path: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata").join(path)
    }

    fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
        crate::clouds::eventstream::test_frame(headers, payload)
    }

    fn event(kind: &str, payload: Value) -> Vec<u8> {
        let headers = [(":event-type", kind), (":content-type", "application/json"), (":message-type", "event")];
        frame(&headers, payload.to_string().as_bytes())
    }

    fn exception(kind: &str, message: &str) -> Vec<u8> {
        let headers =
            [(":exception-type", kind), (":content-type", "application/json"), (":message-type", "exception")];
        frame(&headers, json!({"message": message}).to_string().as_bytes())
    }

    /// Reasoning (signed, then redacted), text, a call in two fragments, the stop and the
    /// usage, with Bedrock's padding key here and there.
    fn reasoning_transcript() -> Vec<u8> {
        let delta =
            |i: u64, d: Value| event("contentBlockDelta", json!({"contentBlockIndex": i, "delta": d, "p": "abc"}));
        let call = json!({"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather"}});
        [
            event("messageStart", json!({"role": "assistant"})),
            delta(0, json!({"reasoningContent": {"text": "Weather: "}})),
            delta(0, json!({"reasoningContent": {"text": "call the tool."}})),
            delta(0, json!({"reasoningContent": {"signature": "EqQBCkYI"}})),
            event("contentBlockStop", json!({"contentBlockIndex": 0})),
            delta(1, json!({"reasoningContent": {"redactedContent": "ZW5j"}})),
            delta(2, json!({"text": "Checking."})),
            event("contentBlockStart", json!({"contentBlockIndex": 3, "start": call})),
            delta(3, json!({"toolUse": {"input": "{\"city\":"}})),
            delta(3, json!({"toolUse": {"input": "\"Paris\"}"}})),
            event("contentBlockStop", json!({"contentBlockIndex": 3})),
            event("messageStop", json!({"stopReason": "tool_use"})),
            event(
                "metadata",
                json!({"usage": {"inputTokens": 40, "outputTokens": 12, "totalTokens": 152,
                    "cacheReadInputTokens": 100}, "metrics": {"latencyMs": 10}, "p": "abcdefgh"}),
            ),
        ]
        .concat()
    }

    /// Checks `input` for every client against `<name>.<client>.out.sse`, whole and cut
    /// anywhere.
    fn check(name: &str, input: &[u8]) {
        for (client, inbound) in CLIENTS {
            let p = from_bedrock(inbound);
            let got = run(p, &[input]);
            let path = testdata("clouds/converse/streams").join(format!("{name}.{client}.out.sse"));
            if std::env::var_os("BLESS").is_some() && !path.exists() {
                std::fs::write(&path, &got).unwrap();
            }
            let want = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&want), "{name} for {client}");
            for at in 0..=input.len() {
                let (a, b) = input.split_at(at);
                assert!(run(p, &[a, b]) == want, "{name} for {client} cut at {at}");
            }
            let bytes: Vec<&[u8]> = input.chunks(1).collect();
            assert!(run(p, &bytes) == want, "{name} for {client} byte by byte");
        }
    }

    #[test]
    fn botocore_checked_frames_translate_for_every_client_however_cut() {
        for name in ["converse-stream", "converse-stream-tool-use", "exception"] {
            let input = std::fs::read(testdata(&format!("clouds/eventstream/{name}.bin"))).unwrap();
            check(name, &input);
        }
    }

    #[test]
    fn reasoning_calls_and_usage_translate_however_cut() {
        check("reasoning", &reasoning_transcript());
    }

    #[test]
    fn an_exception_after_the_200_is_the_clients_stream_error() {
        let input = [
            event("messageStart", json!({"role": "assistant"})),
            event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": "Hel"}})),
            exception("modelStreamErrorException", "The model stream failed."),
        ]
        .concat();
        let openai = String::from_utf8(run(from_bedrock(Inbound::OpenAiChat), &[&input])).unwrap();
        assert!(openai.contains(r#""content":"Hel""#), "{openai}");
        assert!(openai.contains("modelStreamErrorException: The model stream failed."), "{openai}");
        assert!(!openai.contains("[DONE]") && !openai.contains("ended before"), "one error, no end: {openai}");
        let anthropic = String::from_utf8(run(from_bedrock(Inbound::Anthropic), &[&input])).unwrap();
        assert!(anthropic.contains("event: error\n") && !anthropic.contains("message_stop"), "{anthropic}");
    }

    #[test]
    fn a_corrupt_or_oversized_frame_ends_the_stream_with_an_error() {
        let start = event("messageStart", json!({"role": "assistant"}));
        let mut text = event("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": "Hi"}}));
        let last = text.len() - 1;
        text[last] ^= 1;
        let stop = event("messageStop", json!({"stopReason": "end_turn"}));
        let out = String::from_utf8(run(from_bedrock(Inbound::OpenAiChat), &[&start, &text, &stop])).unwrap();
        assert!(out.contains("message CRC mismatch"), "{out}");
        assert!(!out.contains("[DONE]") && !out.contains("\"Hi\""), "nothing after the corrupt frame: {out}");
        // Refused on its 12-byte prelude: nothing of it is waited for.
        let total = u32::try_from(MAX_EVENT + 1).unwrap();
        let mut huge = [total.to_be_bytes(), 0u32.to_be_bytes()].concat();
        huge.extend_from_slice(&crc32fast::hash(&huge).to_be_bytes());
        let out = String::from_utf8(run(from_bedrock(Inbound::Anthropic), &[&start, &huge])).unwrap();
        assert!(out.contains(&format!("exceeds the limit of {MAX_EVENT}")), "{out}");
        assert_eq!(out.matches("event: error").count(), 1, "{out}");
    }

    #[test]
    fn a_body_cut_inside_a_frame_is_an_error() {
        let whole = reasoning_transcript();
        let out = String::from_utf8(run(from_bedrock(Inbound::OpenAiChat), &[&whole[..whole.len() - 5]])).unwrap();
        assert!(out.contains("event stream ended inside a message"), "{out}");
    }
}
