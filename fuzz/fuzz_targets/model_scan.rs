//! The top-level `model` scanner and its byte splice: never panics, a rewrite keeps every byte
//! outside the span, and the body is refused as not JSON exactly when serde_json refuses it
//! (the scanner validates without serde), or when the model value's escapes are no text; the
//! model found (or its absence) is the one serde_json reads.
#![no_main]

use ferrogate_core::openai::scan::ScanError;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let found = ferrogate_core::openai::find_model(body);
    let serde_json_ok =
        std::str::from_utf8(body).is_ok() && serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok();
    let not_json = matches!(found, Err(ScanError::NotJson(_)));
    // The one allowed difference: a model value whose escapes are no text (a lone surrogate).
    let undecodable_model = serde_json_ok && not_json && body.windows(2).any(|w| w == b"\\u");
    assert!(undecodable_model || not_json != serde_json_ok, "{:?}", String::from_utf8_lossy(body));
    // What serde reads (when its recursion limit allows): the one model member, or none.
    if let Ok(serde_json::Value::Object(top)) = serde_json::from_slice::<serde_json::Value>(body) {
        match &found {
            Ok(field) => assert_eq!(top.get("model").and_then(|m| m.as_str()), Some(field.value.as_ref())),
            Err(ScanError::ModelMissing) => assert!(!top.contains_key("model")),
            _ => {}
        }
    }
    if let Ok(field) = found {
        let out = ferrogate_core::openai::rewrite_model(body, field.span.clone(), "m");
        assert_eq!(&out[..field.span.start], &body[..field.span.start]);
        assert_eq!(&out[out.len() - (body.len() - field.span.end)..], &body[field.span.end..]);
    }
});
