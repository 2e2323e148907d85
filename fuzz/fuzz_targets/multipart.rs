//! Multipart framing: any body and boundary, never a panic; a found span lies in the body.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // First byte: boundary length; then the boundary; the rest is the body.
    let Some((&n, rest)) = data.split_first() else { return };
    let n = usize::from(n % 71).min(rest.len());
    let (boundary, body) = rest.split_at(n);
    let mut ct = b"multipart/form-data; boundary=".to_vec();
    ct.extend_from_slice(boundary);
    if let Some(b) = ferrogate_core::multipart::boundary(&ct) {
        if let Ok(span) = ferrogate_core::multipart::find_model(body, b) {
            assert!(span.start <= span.end && span.end <= body.len());
            let _ = ferrogate_core::multipart::rewrite_model(body, span, b"x");
        }
    }
});
