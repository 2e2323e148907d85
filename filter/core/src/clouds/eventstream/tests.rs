//! The decoder against frames checked by botocore's decoder (`testdata/clouds/eventstream/`,
//! written by `scripts/gen-eventstream-fixtures`) however the bytes are chunked, and each error.

use serde_json::Value;

use super::*;
use crate::hex;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/../../testdata/clouds/eventstream/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn expected_value(kind: &str, v: &Value) -> HeaderValue {
    let int = || v.as_i64().expect("integer header");
    let hex_bytes = || hex::decode(v.as_str().expect("hex").as_bytes()).expect("hex");
    match kind {
        "true" | "false" => HeaderValue::Bool(kind == "true"),
        "byte" => HeaderValue::Byte(i8::try_from(int()).expect("i8")),
        "short" => HeaderValue::Short(i16::try_from(int()).expect("i16")),
        "int" => HeaderValue::Int(i32::try_from(int()).expect("i32")),
        "long" => HeaderValue::Long(int()),
        "timestamp" => HeaderValue::Timestamp(int()),
        "bytes" => HeaderValue::Bytes(hex_bytes()),
        "uuid" => HeaderValue::Uuid(hex_bytes().try_into().expect("16 bytes")),
        "string" => HeaderValue::String(v.as_str().expect("string").to_owned()),
        other => panic!("unknown type {other}"),
    }
}

fn expected_messages(list: &Value) -> Vec<Message> {
    let messages = list.as_array().expect("messages");
    let header = |h: &Value| Header {
        name: h["name"].as_str().expect("name").to_owned(),
        value: expected_value(h["type"].as_str().expect("type"), &h["value"]),
    };
    messages
        .iter()
        .map(|m| Message {
            headers: m["headers"].as_array().expect("headers").iter().map(header).collect(),
            payload: hex::decode(m["payload_hex"].as_str().expect("payload").as_bytes()).expect("hex"),
        })
        .collect()
}

/// Decodes `bytes` pushed in pieces of the sizes `steps` yields (cycled), draining after each.
fn decode_chunked(bytes: &[u8], steps: &[usize]) -> (Vec<Message>, Decoder) {
    let (mut decoder, mut out, mut at) = (Decoder::default(), Vec::new(), 0);
    for &step in steps.iter().cycle() {
        if at >= bytes.len() {
            break;
        }
        let end = (at + step).min(bytes.len());
        decoder.push(&bytes[at..end]);
        at = end;
        while let Some(message) = decoder.next_message() {
            out.push(message.expect("valid fixture"));
        }
    }
    (out, decoder)
}

#[test]
fn fixtures_decode_as_botocore_reads_them_however_chunked() {
    let doc: Value = serde_json::from_slice(&fixture("expected.json")).expect("expected.json");
    let files = doc["files"].as_object().expect("files");
    assert!(files.len() >= 8);
    for (name, list) in files {
        let bytes = fixture(name);
        let want = expected_messages(list);
        for steps in [&[usize::MAX][..], &[1], &[2, 3, 5, 7, 11, 13], &[12], &[13, 1, 100]] {
            let (got, decoder) = decode_chunked(&bytes, steps);
            assert_eq!(got, want, "{name} in pieces {steps:?}");
            assert_eq!((decoder.finish(), decoder.buffered()), (Ok(()), 0), "{name}");
        }
    }
}

fn kinds(name: &str) -> Vec<String> {
    let (messages, _) = decode_chunked(&fixture(name), &[usize::MAX]);
    messages.iter().map(|m| format!("{:?}", m.kind())).collect()
}

#[test]
fn kinds_of_converse_stream_exception_and_error() {
    let converse = kinds("converse-stream.bin");
    assert_eq!(converse.first().map(String::as_str), Some(r#"Event("messageStart")"#));
    assert_eq!(converse.iter().filter(|k| k.as_str() == r#"Event("contentBlockDelta")"#).count(), 3);
    assert_eq!(converse.last().map(String::as_str), Some(r#"Event("metadata")"#));
    assert_eq!(kinds("exception.bin").last().map(String::as_str), Some(r#"Exception("throttlingException")"#));
    let error = r#"Error { code: "InternalFailure", message: "An internal error occurred" }"#;
    assert_eq!(kinds("error.bin"), [error]);
    assert_eq!(kinds("aws-c-event-stream.bin"), ["Other"; 4]);
}

/// A frame with correct CRCs around `headers` (an encoded block) and `payload`.
fn frame(headers: &[u8], payload: &[u8]) -> Vec<u8> {
    let total = u32::try_from(16 + headers.len() + payload.len()).expect("small");
    let h = u32::try_from(headers.len()).expect("small");
    with_prelude(total, h, &[headers, payload].concat())
}

fn with_prelude(total: u32, headers_len: u32, rest: &[u8]) -> Vec<u8> {
    let mut out = [total.to_be_bytes(), headers_len.to_be_bytes()].concat();
    out.extend(crc32fast::hash(&out).to_be_bytes());
    out.extend(rest);
    out.extend(crc32fast::hash(&out).to_be_bytes());
    out
}

fn first_error(bytes: &[u8], max: usize) -> EventStreamError {
    let mut decoder = Decoder::new(max);
    decoder.push(bytes);
    let error = decoder.next_message().expect("an outcome").expect_err("an error");
    // Failed for good: more (valid) input is ignored, no message, no loop.
    decoder.push(&frame(&[], b"x"));
    assert_eq!(decoder.next_message(), None);
    assert_eq!((decoder.failure(), decoder.finish()), (Some(&error), Err(error.clone())));
    assert_eq!(decoder.buffered(), 0);
    error
}

#[test]
fn corrupted_crcs_are_refused() {
    let good = fixture("contract-148.bin");
    let mut prelude = good.clone();
    prelude[3] ^= 1;
    assert!(matches!(first_error(&prelude, DEFAULT_MAX_MESSAGE), EventStreamError::PreludeCrc { .. }));
    let mut payload = good.clone();
    payload[140] ^= 0x20;
    assert!(matches!(first_error(&payload, DEFAULT_MAX_MESSAGE), EventStreamError::MessageCrc { .. }));
    let mut crc = good;
    crc[147] ^= 0x80;
    assert!(matches!(first_error(&crc, DEFAULT_MAX_MESSAGE), EventStreamError::MessageCrc { .. }));
}

#[test]
fn lengths_are_checked_from_the_prelude_alone() {
    let prelude_only = |total: u32, headers: u32| with_prelude(total, headers, &[])[..12].to_vec();
    assert_eq!(first_error(&prelude_only(15, 0), 1024), EventStreamError::MessageTooShort { total: 15 });
    // Refused on its 12-byte prelude: nothing more is awaited or buffered.
    let huge = prelude_only(u32::MAX, 0);
    assert_eq!(
        first_error(&huge, DEFAULT_MAX_MESSAGE),
        EventStreamError::MessageTooLarge { total: u32::MAX, max: DEFAULT_MAX_MESSAGE }
    );
    assert_eq!(first_error(&prelude_only(149, 0), 148), EventStreamError::MessageTooLarge { total: 149, max: 148 });
    assert_eq!(first_error(&prelude_only(20, 5), 1024), EventStreamError::HeadersTooLong { headers: 5, total: 20 });
    let big_headers = MAX_HEADERS + 1;
    let err = first_error(&prelude_only(big_headers + 16, big_headers), DEFAULT_MAX_MESSAGE);
    assert_eq!(err, EventStreamError::HeadersTooLong { headers: big_headers, total: big_headers + 16 });
    let mut d = Decoder::new(148);
    d.push(&fixture("contract-148.bin"));
    assert!(matches!(d.next_message(), Some(Ok(_))), "a message of exactly the limit passes");
}

#[test]
fn malformed_headers_are_refused() {
    let cases: [(&[u8], EventStreamError); 6] = [
        (b"\x04name\x07\x00\x09abc", EventStreamError::TruncatedHeader { offset: 20 }),
        (b"\x04na", EventStreamError::TruncatedHeader { offset: 13 }),
        (b"\x01a\x04\x00\x00", EventStreamError::TruncatedHeader { offset: 15 }),
        (b"\x01a\x0a", EventStreamError::UnknownHeaderType { type_byte: 10, offset: 14 }),
        (b"\x02\xff\xfe\x00", EventStreamError::InvalidUtf8 { offset: 13 }),
        (b"\x01a\x00\x01b\x01\x01a\x02\x05", EventStreamError::DuplicateHeader { name: "a".to_owned() }),
    ];
    for (block, want) in cases {
        assert_eq!(first_error(&frame(block, b"{}"), DEFAULT_MAX_MESSAGE), want, "{block:?}");
    }
    let bad_string = frame(b"\x01s\x07\x00\x02\xc3\x28", b"");
    assert_eq!(first_error(&bad_string, 1024), EventStreamError::InvalidUtf8 { offset: 17 });
}

#[test]
fn an_unfinished_message_at_the_end_is_reported() {
    let whole = fixture("exception.bin");
    let first = usize::try_from(be_u32(&whole, 0)).expect("length");
    let mut d = Decoder::default();
    d.push(&whole[..whole.len() - 3]);
    assert!(matches!(d.next_message(), Some(Ok(_))));
    assert_eq!(d.next_message(), None);
    assert_eq!(d.finish(), Err(EventStreamError::TruncatedStream { buffered: whole.len() - 3 - first }));
    d.push(&whole[whole.len() - 3..]);
    assert_eq!(
        d.next_message().map(|m| m.map(|m| m.str_header(":exception-type").map(str::to_owned))),
        Some(Ok(Some("throttlingException".to_owned())))
    );
    assert_eq!(d.finish(), Ok(()));
}
