use serde_json::{json, Value};

use super::*;
use crate::guard::detect::Detector;
use crate::guard::scan::{Action, Rule, RuleSet};

mod fixtures;

use fixtures::*;

/// Every cut of `dialect`'s stream (and byte by byte) gives the same bytes, in which the texts
/// the client assembles are the whole-text redaction and no planted value is sent. The text
/// has no filler: the keywords' window is small, so text still leaves before the end.
fn every_byte_boundary(dialect: Inbound) {
    let rules = keyword_rules();
    let stages = [Stage::Rules(&rules)];
    let input = translated(dialect, TEXT);
    let want = expected(dialect, &rules, &input);
    assert!(want.values().any(|t| t.contains("[REDACTED]")), "{dialect:?}: {want:?}");
    let (whole, g) = guard(dialect, &stages, &mut Vault::default(), &[&input]);
    check(dialect, &whole, &want, "whole");
    assert!(g.tallies().first().is_some_and(|t| t.counts == vec![3, 4]), "{dialect:?} {:?}", g.tallies());
    for at in 0..=input.len() {
        let (a, b) = input.split_at(at);
        let (out, g) = guard(dialect, &stages, &mut Vault::default(), &[a, b]);
        assert!(out == whole, "{dialect:?} cut at {at}:\n{}", String::from_utf8_lossy(&out));
        assert_eq!(g.blocked(), None);
    }
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    let (out, _) = guard(dialect, &stages, &mut Vault::default(), &bytes);
    assert!(out == whole, "{dialect:?} byte by byte");
}

#[test]
fn chat_redacts_alike_at_every_byte_boundary() {
    every_byte_boundary(Inbound::OpenAiChat);
}

#[test]
fn anthropic_redacts_alike_at_every_byte_boundary() {
    every_byte_boundary(Inbound::Anthropic);
}

#[test]
fn gemini_redacts_alike_at_every_byte_boundary() {
    every_byte_boundary(Inbound::Gemini);
}

#[test]
fn responses_redacts_alike_at_every_byte_boundary() {
    every_byte_boundary(Inbound::Responses);
}

#[test]
fn every_dialect_redacts_a_long_answer_with_patterns() {
    let rules = rules();
    let stages = [Stage::Rules(&rules)];
    for dialect in DIALECTS {
        let input = stream_for(dialect);
        let want = expected(dialect, &rules, &input);
        for size in [1, 7, 64, 1000] {
            let pieces: Vec<&[u8]> = input.chunks(size).collect();
            let (out, _) = guard(dialect, &stages, &mut Vault::default(), &pieces);
            check(dialect, &out, &want, &format!("pieces of {size}"));
        }
    }
}

#[test]
fn events_without_text_pass_byte_for_byte() {
    let rules = rules();
    for dialect in DIALECTS {
        let input = stream_for(dialect);
        let (out, _) = guard(dialect, &[Stage::Rules(&rules)], &mut Vault::default(), &[&input]);
        let out = String::from_utf8(out).unwrap();
        for event in String::from_utf8(input).unwrap().split_inclusive("\n\n") {
            let text_free = ![
                "\"args\"",
                "\"content\":\"",
                "\"text\":\"",
                "\"delta\":\"",
                "arguments",
                "partial_json",
                "sequence_number",
            ]
            .iter()
            .any(|f| event.contains(f));
            if text_free {
                assert!(out.contains(event), "{dialect:?}: {event}");
            }
        }
    }
}

#[test]
fn responses_done_events_carry_the_redacted_whole_text_and_numbers_stay_consecutive() {
    let rules = rules();
    let input = stream_for(Inbound::Responses);
    let (out, _) = guard(Inbound::Responses, &[Stage::Rules(&rules)], &mut Vault::default(), &[&input]);
    let got = texts(Inbound::Responses, &out);
    let message = got.get(&(0, 0, 0)).unwrap();
    let args = got.get(&(1, 1, 0)).unwrap();
    assert!(message.contains("[REDACTED_1]") && args.contains("[REDACTED_"), "{got:?}");
    let mut seen = 0;
    for (i, (name, d)) in events(&out).iter().enumerate() {
        assert_eq!(d["sequence_number"], json!(i), "{name}");
        assert_eq!(d["type"], json!(name));
        match name.as_str() {
            "response.output_text.done" => assert_eq!(d["text"], json!(message)),
            "response.content_part.done" => assert_eq!(d["part"]["text"], json!(message)),
            "response.function_call_arguments.done" => assert_eq!(d["arguments"], json!(args)),
            "response.output_item.done" if d["output_index"] == 0 => {
                assert_eq!(d["item"]["content"][0]["text"], json!(message))
            }
            "response.output_item.done" => assert_eq!(d["item"]["arguments"], json!(args)),
            "response.completed" => {
                assert_eq!(d["response"]["output"][0]["content"][0]["text"], json!(message));
                assert_eq!(d["response"]["output"][1]["arguments"], json!(args));
            }
            _ => continue,
        }
        seen += 1;
    }
    assert_eq!(seen, 6);
}

#[test]
fn a_block_ends_each_dialect_with_its_error_event() {
    let rules = rules();
    let block = blocking();
    let stages = [Stage::Rules(&rules), Stage::Rules(&block)];
    for dialect in DIALECTS {
        let input = stream_for(dialect);
        for at in (0..=input.len()).step_by(7) {
            let (a, b) = input.split_at(at);
            let (out, g) = guard(dialect, &stages, &mut Vault::default(), &[a, b]);
            assert_eq!(g.blocked(), Some((1, 0)), "{dialect:?}");
            let text = String::from_utf8(out.clone()).unwrap();
            assert!(!text.contains("code word") && !text.contains("code wo"), "{dialect:?}: {text}");
            assert!(!text.contains(EMAIL), "{dialect:?}: {text}");
            let all = events(&out);
            let message = "the answer was blocked by guardrail rule 'no-codes' of policy 'second'";
            let (name, last) = match dialect {
                Inbound::OpenAiChat => {
                    assert_eq!(all.last().map(|e| e.1.clone()), Some(json!("[DONE]")));
                    let error =
                        json!({"message": message, "type": "invalid_request_error", "code": "guardrail_blocked"});
                    assert_eq!(all[all.len() - 2].1, json!({ "error": error }));
                    continue;
                }
                _ => all.last().cloned().unwrap(),
            };
            match dialect {
                Inbound::Anthropic => {
                    assert_eq!(name, "error");
                    assert_eq!(
                        last,
                        json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
                    );
                }
                Inbound::Gemini => {
                    assert_eq!(last, json!({"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}));
                }
                _ => {
                    assert_eq!(name, "response.failed");
                    assert_eq!(last["response"]["error"], json!({"code": "guardrail_blocked", "message": message}));
                    assert_eq!(last["response"]["status"], json!("failed"));
                    assert_eq!(last["sequence_number"], json!(all.len() - 1));
                }
            }
        }
    }
}

#[test]
fn restore_follows_the_policies_across_deltas() {
    let rules = rules();
    let mut vault = Vault::default();
    let restoring = RuleSet::new(
        vec![Rule {
            name: "w".into(),
            detector: Detector::keywords(&["alice".into()]).unwrap(),
            action: Action::Redact,
        }],
        true,
    );
    assert_eq!(restoring.rewrite(&mut vault, "alice", &mut Tally::default()), Ok(Some("[REDACTED_1]".into())));
    let head = r#"{"choices":[{"index":0,"delta":{"content":"#;
    let mut input = String::new();
    for piece in ["Hello [REDAC", "TED_1], your falcon", " is ready", ""] {
        input += &format!("data: {head}{}}}}}]}}\n\n", json!(piece));
    }
    input += "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let stages = [Stage::Rules(&rules), Stage::Restore];
    for at in 0..=input.len() {
        let (a, b) = input.as_bytes().split_at(at);
        let (out, _) = guard(Inbound::OpenAiChat, &stages, &mut vault, &[a, b]);
        let got = texts(Inbound::OpenAiChat, &out);
        assert_eq!(got.get(&(0, 0, 0)).map(String::as_str), Some("Hello alice, your [REDACTED_2] is ready"));
        assert!(String::from_utf8(out).unwrap().ends_with("data: [DONE]\n\n"));
    }
}

#[test]
fn crlf_anthropic_stream_with_pings_and_several_choices_in_chat() {
    let rules = rules();
    let stages = [Stage::Rules(&rules)];
    let events = [
        r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[]}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"ping"}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"mail jane.doe@exam"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ple.com now"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"}}"#,
        r#"{"type":"message_stop"}"#,
    ];
    let mut input = String::new();
    for e in events {
        let name = serde_json::from_str::<Value>(e).unwrap()["type"].as_str().unwrap().to_string();
        input += &format!("event: {name}\r\ndata: {e}\r\n\r\n");
    }
    for at in 0..=input.len() {
        let (a, b) = input.as_bytes().split_at(at);
        let (out, _) = guard(Inbound::Anthropic, &stages, &mut Vault::default(), &[a, b]);
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(text.contains("event: ping\r\ndata: {\"type\":\"ping\"}\r\n\r\n") && !text.contains("\n\n"), "{text}");
        assert_eq!(texts(Inbound::Anthropic, &out).get(&(0, 0, 0)).unwrap(), "mail [REDACTED_1] now");
    }
    // Two choices interleaved: a chain each.
    let mut chat = String::new();
    for (i, t) in [(0, "a jane.doe@ex"), (1, "b fal"), (0, "ample.com"), (1, "con")] {
        chat += &format!("data: {}\n\n", json!({"choices": [{"index": i, "delta": {"content": t}}]}));
    }
    chat += &format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}));
    chat += &format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 1, "delta": {"content": "!"}, "finish_reason": "stop"}]})
    );
    let (out, _) = guard(Inbound::OpenAiChat, &stages, &mut Vault::default(), &[chat.as_bytes()]);
    let got = texts(Inbound::OpenAiChat, &out);
    assert_eq!(got.get(&(0, 0, 0)).map(String::as_str), Some("a [REDACTED_1]"));
    assert_eq!(got.get(&(0, 1, 0)).map(String::as_str), Some("b [REDACTED_2]!"));
}

#[test]
fn a_stream_cut_short_still_sends_its_held_text_redacted() {
    let rules = rules();
    let stages = [Stage::Rules(&rules)];
    for dialect in DIALECTS {
        let input = stream_for(dialect);
        let text = String::from_utf8(input).unwrap();
        // Up to the event that carries "om." (the text's last delta), nothing after it.
        let end = text.find("om.").unwrap();
        let cut = end + text[end..].find("\n\n").unwrap() + 2;
        let (out, _) = guard(dialect, &stages, &mut Vault::default(), &[&text.as_bytes()[..cut]]);
        let got = texts(dialect, &out);
        let message = got.get(&(0, 0, 0)).unwrap();
        assert!(message.ends_with("Last: [REDACTED_4] and [REDACTED_1]."), "{dialect:?}: {message}");
    }
}

#[test]
fn an_oversized_event_passes_unmodified_and_is_reported() {
    let rules = rules();
    let stages = [Stage::Rules(&rules)];
    let big = format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {"content": "x".repeat(MAX_EVENT + 100_000)}}]})
    );
    let after =
        format!("data: {}\n\ndata: [DONE]\n\n", json!({"choices": [{"index": 0, "delta": {"content": " falcon"}}]}));
    let input = format!("{big}{after}");
    let pieces: Vec<&[u8]> = input.as_bytes().chunks(64 * 1024).collect();
    let (out, g) = guard(Inbound::OpenAiChat, &stages, &mut Vault::default(), &pieces);
    assert!(g.oversized());
    let out = String::from_utf8(out).unwrap();
    assert!(out.starts_with(&big) && !out.contains("falcon"), "{}", &out[big.len()..]);
}

#[test]
fn too_many_texts_end_the_stream() {
    let rules = rules();
    let mut input = String::new();
    for i in 0..=MAX_TEXTS {
        input += &format!("data: {}\n\n", json!({"choices": [{"index": i, "delta": {"content": "hi"}}]}));
    }
    let (out, g) = guard(Inbound::OpenAiChat, &[Stage::Rules(&rules)], &mut Vault::default(), &[input.as_bytes()]);
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.ends_with(&format!(
            "more than {MAX_TEXTS} texts at once\",\"type\":\"invalid_request_error\"}}}}\n\ndata: [DONE]\n\n"
        )),
        "{}",
        &out[out.len() - 200..]
    );
    assert_eq!(g.blocked(), None);
}
