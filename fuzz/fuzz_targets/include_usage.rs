//! `stream_options.include_usage` injection: never panics, even when the `_in_valid` variant
//! is handed invalid JSON; a rewritten body is still valid JSON whenever the input was.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let unchecked = ferrogate_core::usage::ensure_include_usage_in_valid(body);
    if let Ok(Some(out)) = ferrogate_core::usage::ensure_include_usage(body) {
        let valid = |b: &[u8]| serde_json::from_slice::<serde::de::IgnoredAny>(b).is_ok();
        if valid(body) {
            assert!(valid(&out), "invalid JSON from {:?}", String::from_utf8_lossy(body));
            assert_eq!(unchecked.ok().flatten(), Some(out), "both variants agree on valid JSON");
        }
    }
});
