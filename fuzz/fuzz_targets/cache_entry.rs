//! The response cache's entry decoder (`ferrogate_core::cache::entry`) over arbitrary bytes:
//! never panics, and whatever it accepts encodes back to exactly the same length (the
//! encoding is read to its last byte, so nothing is silently dropped).
#![no_main]

use ferrogate_core::cache::entry;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(e) = entry::decode(data) {
        let again = entry::encode(&e);
        assert_eq!(again.len(), data.len(), "an accepted entry re-encodes to its own length");
        assert_eq!(entry::decode(&again).as_ref(), Ok(&e));
    }
});
