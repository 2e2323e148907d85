//! The STS answer reader (`clouds::xml`): any text, any element path, never panics; a value it
//! reads has no markup left in it and no undecoded entity.
#![no_main]

use ferrogate_core::clouds::xml;
use libfuzzer_sys::fuzz_target;

const PATHS: [&[&str]; 3] = [
    &["AssumeRoleWithWebIdentityResponse", "AssumeRoleWithWebIdentityResult", "Credentials", "AccessKeyId"],
    &["ErrorResponse", "Error", "Code"],
    &["R"],
];

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    if let Ok(value) = xml::text(text, PATHS[usize::from(mode) % PATHS.len()]) {
        assert!(value.len() <= text.len(), "a value is never longer than the answer");
    }
    if let Ok(plain) = xml::unescape(text) {
        assert!(plain.len() <= text.len(), "decoding never grows the text");
    }
});
