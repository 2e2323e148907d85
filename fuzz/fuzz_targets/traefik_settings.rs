//! The Traefik middleware's settings parser and the request-body length fitting it drives:
//! any bytes give settings or an error, and a fitted body has exactly the length asked for
//! (a JSON one still parsing as the same document), never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ferrogate_core::traefik::Settings::from_json_slice(data);
    let Some((&want, body)) = data.split_first() else { return };
    let want = body.len().saturating_sub(8) + usize::from(want % 16);
    let parsed = serde_json::from_slice::<serde_json::Value>(body).ok();
    if let Ok(fitted) = ferrogate_core::traefik::fit_length(body.to_vec(), want, parsed.is_some()) {
        assert_eq!(fitted.len(), want);
        if let Some(before) = parsed {
            assert_eq!(serde_json::from_slice::<serde_json::Value>(&fitted).ok(), Some(before));
        }
    }
});
