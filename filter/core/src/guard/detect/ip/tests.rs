use super::super::Match;

fn found(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    super::find(text, &mut out);
    out.iter().map(|m: &Match| &text[m.start..m.end]).collect()
}

#[test]
fn finds_ipv4_addresses() {
    for a in ["1.2.3.4", "255.255.255.255", "0.0.0.0", "192.168.1.1", "10.0.0.1"] {
        assert_eq!(found(&format!("host {a} up")), vec![a], "{a}");
    }
    assert_eq!(found("10.0.0.1:8080"), vec!["10.0.0.1"]);
    assert_eq!(found("My IP is 192.168.1.1."), vec!["192.168.1.1"]);
    assert_eq!(found("10.0.0.1-10.0.0.9"), vec!["10.0.0.1", "10.0.0.9"]);
}

#[test]
fn bad_octets_and_longer_dotted_numbers_are_not_ipv4() {
    for a in [
        "256.1.1.1",
        "1.2.3.256",
        "01.2.3.4",
        "1.2.3.04",
        "1.2.3",
        "1.2.3.4.5",
        "0.1.2.3.4",
        "v1.2.3.4",
        "1.2.3.4a",
        "1.2.3.4.com",
        "1..2.3.4",
        "1234.1.1.1",
    ] {
        assert!(found(a).is_empty(), "{a}: {:?}", found(a));
    }
}

#[test]
fn finds_ipv6_in_every_textual_form() {
    for a in [
        "::1",
        "fe80::1",
        "2001:db8::8a2e:370:7334",
        "2001:0db8:0000:0000:0000:0000:1428:57ab",
        "::ffff:192.0.2.1",
        "64:ff9b::192.0.2.33",
        "1:2:3:4:5:6:7::",
        "FFFF:FFFF:FFFF:FFFF:FFFF:FFFF:255.255.255.255",
    ] {
        assert_eq!(found(&format!("addr {a} ok")), vec![a], "{a}");
    }
    assert_eq!(found("[2001:db8::1]:443"), vec!["2001:db8::1"]);
    assert_eq!(found("It is ::1."), vec!["::1"]);
}

#[test]
fn colon_runs_that_do_not_parse_are_not_ipv6() {
    for a in [
        "12:30:45",
        "::",
        "std::vec",
        "1:2:3:4:5:6:7:8:9",
        "2001:db8:::1",
        "1::2::3",
        "12345::1",
        "00:1A:2B:3C:4D:5E",
        "::ffff:01.2.3.4",
        "g::1",
    ] {
        assert!(found(a).is_empty(), "{a}: {:?}", found(a));
    }
}

#[test]
fn an_ipv4_inside_a_run_that_is_not_ipv6_is_still_found() {
    assert_eq!(found("12:30:1.2.3.4"), vec!["1.2.3.4"]);
}

#[test]
fn the_longest_ipv6_fits_max_len() {
    let a = "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255";
    assert_eq!(a.len() + 2, super::MAX_LEN);
    assert!(found(&format!("{a}0")).is_empty());
}
