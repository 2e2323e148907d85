//! The top-level `model` scanner and its byte splice: never panics, and a rewrite keeps
//! every byte outside the span.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    if let Ok(field) = ferrogate_core::openai::find_model(body) {
        let out = ferrogate_core::openai::rewrite_model(body, field.span.clone(), "m");
        assert_eq!(&out[..field.span.start], &body[..field.span.start]);
        assert_eq!(&out[out.len() - (body.len() - field.span.end)..], &body[field.span.end..]);
    }
});
