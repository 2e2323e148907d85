//! The endpoint picker's header values: the gateway's subset list and the fallback count, over
//! arbitrary text. Never panics; every entry of a parsed subset admits itself, an endpoint
//! admitted is admitted under any port, and a fallback count never exceeds the cap.
#![no_main]

use ferrogate_core::epp::{endpoint_list, parse_fallbacks, Subset, MAX_FALLBACKS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let subset = Subset::parse(&text);
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        assert!(subset.admits(entry), "{entry:?} not admitted by its own list");
    }
    if let Some(n) = parse_fallbacks(&text) {
        assert!(n <= MAX_FALLBACKS);
    }
    let list = endpoint_list("10.0.0.1:8000", text.split(','));
    assert!(list.starts_with("10.0.0.1:8000"));
});
