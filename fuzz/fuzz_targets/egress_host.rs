//! The egress policy's host reader: any string, under every combination of blocks and an allow
//! list, is judged without panicking; a host it reads as an address is judged like that
//! address, and an address it blocks is blocked in its plain spelling too.
#![no_main]

use ferrogate_core::egress::{parse_ip, EgressError, Policy};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the policy, the rest is the host.
    let Some((&bits, rest)) = data.split_first() else { return };
    let Ok(host) = std::str::from_utf8(rest) else { return };
    let policy = Policy {
        block_link_local: bits & 1 != 0,
        block_loopback: bits & 2 != 0,
        block_private: bits & 4 != 0,
        allow_hosts: if bits & 8 != 0 { vec!["*.example.com".into(), "10.0.0.1".into(), host.into()] } else { vec![] },
    };
    let verdict = policy.check_host(host);
    if let Ok(Some(addr)) = parse_ip(host) {
        let plain = policy.check_ip(addr);
        if let Err(EgressError::Blocked { rule, .. }) = &verdict {
            assert!(matches!(plain, Err(EgressError::Blocked { rule: r, .. }) if r == *rule));
        }
        if plain.is_err() {
            assert!(verdict.is_err(), "{host:?} passed though {addr} is blocked");
        }
    }
});
