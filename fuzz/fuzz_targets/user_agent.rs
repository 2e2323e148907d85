//! The usage record's `User-Agent`: any bytes give at most `USER_AGENT_MAX` bytes of text
//! without control characters, the longest prefix of the value's lossy text (control
//! characters replaced) that fits, so a value that fits comes back whole.
#![no_main]

use ferrogate_core::usage::{bounded_user_agent, USER_AGENT_MAX};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let kept = bounded_user_agent(data);
    assert!(kept.len() <= USER_AGENT_MAX, "{} bytes", kept.len());
    assert!(!kept.chars().any(char::is_control), "{kept:?}");
    let clean: String =
        String::from_utf8_lossy(data).chars().map(|c| if c.is_control() { '\u{fffd}' } else { c }).collect();
    let rest = clean.strip_prefix(kept.as_str()).unwrap_or_else(|| panic!("{kept:?} is not a prefix of {clean:?}"));
    if let Some(next) = rest.chars().next() {
        assert!(kept.len() + next.len_utf8() > USER_AGENT_MAX, "{next:?} would have fit");
    }
});
