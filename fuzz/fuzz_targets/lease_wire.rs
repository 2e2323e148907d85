//! The lease answer the filter reads from the sidecar (`LeaseAnswer::parse`) and what it does
//! with it: parsing never panics, a parsed answer round-trips, and holding its grants on a
//! counter never lets admission take more than the most the answers said the store holds.
#![no_main]

use ferrogate_core::limits::lease::LeaseAnswer;
use ferrogate_core::limits::{Counter, Window};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(answer) = LeaseAnswer::parse(data) else { return };
    let text = serde_json::to_vec(&answer).unwrap();
    assert_eq!(LeaseAnswer::parse(&text).unwrap(), answer);
    let now = 1_000 * 60_000 + 1;
    let bucket = Window::Minute.bucket(now);
    let mut counter = Counter::default();
    let mut most = 0;
    for g in &answer.grants {
        counter.roll_lease(Window::Minute, now);
        counter.hold(Window::Minute, now, g.bucket, g.held);
        if g.bucket == bucket {
            most = most.max(g.held);
        }
    }
    if most > 0 {
        assert!(counter.take_leased(Window::Minute, now, most).is_ok(), "{most} held but not takeable");
    }
    assert_eq!(counter.take_leased(Window::Minute, now, 1), Err(1), "more than the {most} held");
});
