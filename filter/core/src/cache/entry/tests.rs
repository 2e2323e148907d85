use super::*;

fn sample() -> Entry {
    Entry {
        family: "chat".into(),
        model: "gpt-4o".into(),
        scope: "key:alice".into(),
        created_ms: 1_700_000_000_000,
        expires_ms: 1_700_000_600_000,
        prompt_tokens: 12,
        completion_tokens: 300,
        body: br#"{"id":"chatcmpl-1","object":"chat.completion"}"#.to_vec(),
    }
}

#[test]
fn round_trip() {
    for e in [sample(), Entry::default(), Entry { created_ms: u64::MAX, expires_ms: u64::MAX, ..sample() }] {
        assert_eq!(decode(&encode(&e)), Ok(e));
    }
}

#[test]
fn the_body_is_kept_verbatim_after_a_small_header() {
    let e = sample();
    let bytes = encode(&e);
    assert!(bytes.starts_with(b"FGC\x01"));
    assert!(bytes.ends_with(&e.body));
    assert!(bytes.len() < e.body.len() + 48);
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = encode(&sample());
    for n in 0..bytes.len() {
        assert!(decode(&bytes[..n]).is_err(), "{n}");
    }
    let mut longer = bytes.clone();
    longer.push(b'x');
    assert_eq!(decode(&longer), Err(EntryError::Trailing(1)));
}

#[test]
fn damaged_headers_are_errors() {
    let mut bytes = encode(&sample());
    bytes[3] = 2;
    assert_eq!(decode(&bytes), Err(EntryError::Version(2)));
    assert_eq!(decode(b"XYZ\x01"), Err(EntryError::Magic));
    let overflow = [b"FGC\x01".as_slice(), &[0xff; 10], &[0x01]].concat();
    assert_eq!(decode(&overflow), Err(EntryError::Overflow));
    let huge_len = [b"FGC\x01\x00\x00\x00\x00".as_slice(), &[0xff; 9], &[0x01]].concat();
    assert!(decode(&huge_len).is_err());
    let bad_utf8 = [b"FGC\x01\x00\x00\x00\x00\x01\xff\x00\x00\x00".as_slice()].concat();
    assert_eq!(decode(&bad_utf8), Err(EntryError::Utf8));
}

#[test]
fn garbage_never_panics() {
    // A small deterministic generator (xorshift): core has no randomness of its own.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let valid = encode(&sample());
    for _ in 0..5000 {
        let len = (next() % 80) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if next() % 2 == 0 {
            // Valid prefix, damaged tail: reaches the deeper fields.
            bytes = [&valid[..(next() as usize % valid.len())], &bytes].concat();
        }
        if let Ok(e) = decode(&bytes) {
            assert_eq!(encode(&e).len(), bytes.len());
        }
    }
}

#[test]
fn families() {
    assert_eq!(family(Api::GenerateContent), family(Api::StreamGenerateContent));
    assert_eq!(family(Api::ChatCompletions), Some("chat"));
    assert_eq!(family(Api::ImagesGenerations), None);
    assert!(sample().is_fresh(1_700_000_599_999));
    assert!(!sample().is_fresh(1_700_000_600_000));
}
