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
