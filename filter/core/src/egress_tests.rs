//! Egress policy tests: every spelling of an IPv4 literal browsers and `getaddrinfo` accept,
//! IPv6 literals and the IPv4 addresses they carry, each blocked range, and the allow list.

use super::*;

fn v4(s: &str) -> Option<IpAddr> {
    Some(IpAddr::V4(s.parse().unwrap()))
}

#[test]
fn ipv4_literals_are_read_in_every_spelling() {
    for (host, addr) in [
        ("127.0.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0X7F.0.0.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("169.254.43518", "169.254.169.254"),
        ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        ("2852039166", "169.254.169.254"),
        ("127.0.0.1.", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("0x", "0.0.0.0"),
        ("00", "0.0.0.0"),
    ] {
        assert_eq!(parse_ip(host), Ok(v4(addr)), "{host}");
    }
}

#[test]
fn names_are_not_addresses() {
    for host in ["api.openai.com", "localhost", "0x7g", "1.2.3.example", "10.0.0.1x", "", ".", "tools-8"] {
        assert_eq!(parse_ip(host), Ok(None), "{host}");
    }
}

#[test]
fn a_host_ending_in_a_number_must_be_a_valid_address() {
    for host in ["1.2.3.4.5", "256.0.0.1", "1.256.0.0", "1.2.3.256", "1.2.65536", "4294967296", "08", "tools.8", "1..2"]
    {
        assert!(matches!(parse_ip(host), Err(EgressError::InvalidAddress { .. })), "{host}: {:?}", parse_ip(host));
    }
    let policy = Policy::default();
    let e = policy.check_host("1.2.3.4.5").unwrap_err();
    assert_eq!(e.to_string(), "host \"1.2.3.4.5\" is not a valid IP address (more than four parts)");
}

#[test]
fn ipv6_literals_with_and_without_brackets() {
    let v6 = |s: &str| Some(IpAddr::V6(s.parse().unwrap()));
    assert_eq!(parse_ip("[::1]"), Ok(v6("::1")));
    assert_eq!(parse_ip("[FE80::1%25eth0]"), Ok(v6("fe80::1")));
    assert_eq!(parse_ip("fd00::13"), Ok(v6("fd00::13")));
    assert_eq!(parse_ip("[::ffff:127.0.0.1]"), Ok(v6("::ffff:7f00:1")));
    for bad in ["[::1", "[zz::1]", "[]", "1:2:3"] {
        assert!(matches!(parse_ip(bad), Err(EgressError::InvalidAddress { .. })), "{bad}");
    }
}

#[test]
fn link_local_and_metadata_are_blocked_by_default() {
    let policy = Policy::default();
    for host in [
        "169.254.169.254",
        "169.254.0.1",
        "0xa9fea9fe",
        "[fe80::1]",
        "[febf::1]",
        "[::ffff:169.254.169.254]",
        "[::ffff:a9fe:a9fe]",
        "[64:ff9b::169.254.169.254]",
        "[::169.254.169.254]",
        "[fd00:ec2::254]",
    ] {
        let e = policy.check_host(host).unwrap_err();
        assert!(matches!(e, EgressError::Blocked { rule: Rule::LinkLocal, .. }), "{host}: {e}");
    }
    let e = policy.check_host("169.254.169.254").unwrap_err();
    assert_eq!(e.to_string(), "host 169.254.169.254 is blocked by egress.block_link_local");
    let e = policy.check_host("0251.0376.0251.0376").unwrap_err();
    assert_eq!(e.to_string(), "host 0251.0376.0251.0376 (169.254.169.254) is blocked by egress.block_link_local");
    // Loopback, private and public addresses pass by default; fec0:: is outside fe80::/10.
    for host in ["127.0.0.1", "[::1]", "10.0.0.1", "[fd00::1]", "8.8.8.8", "[fec0::1]", "[2001:db8::1]"] {
        assert!(policy.check_host(host).is_ok(), "{host}");
    }
    let off = Policy { block_link_local: false, ..Policy::default() };
    assert!(off.check_host("169.254.169.254").is_ok());
    assert!(!off.blocks_any());
}

#[test]
fn loopback_is_blocked_when_asked() {
    let policy = Policy { block_loopback: true, ..Policy::default() };
    for host in ["127.0.0.1", "127.255.0.9", "0x7f.1", "2130706433", "[::1]", "[::ffff:127.0.0.1]", "0.0.0.0", "[::]"] {
        let e = policy.check_host(host).unwrap_err();
        assert!(matches!(e, EgressError::Blocked { rule: Rule::Loopback, .. }), "{host}: {e}");
    }
    assert!(policy.check_host("10.0.0.1").is_ok());
    // A name is not resolved here: the proxy checks what it resolves to when it connects.
    assert!(policy.check_host("localhost").is_ok());
    let e = policy.check_ip("127.0.0.1".parse().unwrap()).unwrap_err();
    assert_eq!(e.to_string(), "host 127.0.0.1 is blocked by egress.block_loopback");
    assert!(Policy::default().check_ip("127.0.0.1".parse().unwrap()).is_ok());
}

#[test]
fn private_ranges_are_blocked_when_asked() {
    let policy = Policy { block_private: true, ..Policy::default() };
    for host in [
        "10.1.2.3",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.1",
        "100.64.0.1",
        "100.127.255.255",
        "[fc00::1]",
        "[fd12:3456::1]",
        "[::ffff:10.0.0.1]",
    ] {
        let e = policy.check_host(host).unwrap_err();
        assert!(matches!(e, EgressError::Blocked { rule: Rule::Private, .. }), "{host}: {e}");
    }
    for host in ["172.15.0.1", "172.32.0.1", "100.63.0.1", "100.128.0.1", "192.169.0.1", "11.0.0.1"] {
        assert!(policy.check_host(host).is_ok(), "{host}");
    }
}

#[test]
fn the_allow_list_takes_names_globs_and_addresses() {
    let allow = ["api.openai.com", "*.internal.example", "10.0.0.5", "[fd00::7]"];
    let policy = Policy { allow_hosts: allow.iter().map(|s| s.to_string()).collect(), ..Policy::default() };
    for host in ["api.openai.com", "API.OpenAI.com.", "tools.internal.example", "a.b.internal.example", "10.0.0.5"] {
        assert!(policy.check_host(host).is_ok(), "{host}");
    }
    // The same address in another spelling is the same host.
    assert!(policy.check_host("0xa.0.0.5").is_ok());
    assert!(policy.check_host("[fd00:0::7]").is_ok());
    for host in
        ["openai.com", "internal.example", "evil.com", "api.openai.com.evil.com", "10.0.0.6", "xinternal.example"]
    {
        let e = policy.check_host(host).unwrap_err();
        assert_eq!(e, EgressError::NotAllowed { host: host.to_string() }, "{host}");
    }
    assert_eq!(policy.check_host("evil.com").unwrap_err().to_string(), "host evil.com is not in egress.allow_hosts");
    // Listed or not, a blocked address stays blocked.
    let listed = Policy { allow_hosts: vec!["169.254.169.254".into()], ..Policy::default() };
    assert!(matches!(listed.check_host("169.254.169.254"), Err(EgressError::Blocked { .. })));
}

/// Every host of up to five characters over an alphabet of the grammar's pieces: judged
/// without panicking, and an address the reader finds is judged like its plain spelling (the
/// fuzz target `egress_host` does the same over arbitrary strings).
#[test]
fn every_short_host_is_judged_like_the_address_it_stands_for() {
    const ALPHABET: &[u8] = b"0719xa.:[]%";
    let policy = Policy { block_loopback: true, block_private: true, ..Policy::default() };
    let mut host = Vec::new();
    let mut stack = vec![0usize];
    while let Some(len) = stack.pop() {
        let text = std::str::from_utf8(&host).unwrap();
        if let Ok(Some(addr)) = parse_ip(text) {
            assert_eq!(policy.check_host(text).is_err(), policy.check_ip(addr).is_err(), "{text}");
        } else {
            let _ = policy.check_host(text);
        }
        // Depth-first over the strings: extend, or step to the next sibling.
        if len < 5 {
            host.push(ALPHABET[0]);
            stack.push(len + 1);
            continue;
        }
        while let Some(last) = host.pop() {
            let next = ALPHABET.iter().position(|&b| b == last).map_or(ALPHABET.len(), |i| i + 1);
            if let Some(&b) = ALPHABET.get(next) {
                host.push(b);
                stack.push(host.len());
                break;
            }
        }
    }
}
