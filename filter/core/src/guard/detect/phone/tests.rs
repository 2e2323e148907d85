use super::super::Match;

fn found(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    super::find(text, &mut out);
    out.iter().map(|m: &Match| &text[m.start..m.end]).collect()
}

#[test]
fn finds_international_numbers() {
    for n in [
        "+1 (555) 123-4567",
        "+1 555 123 4567",
        "+1-555-123-4567",
        "+44 20 7946 0958",
        "+44 (0)20 7946 0958",
        "+4915112345678",
        "+33 1 23 45 67 89",
        "+49.30.1234567",
        "+1(555)1234567",
        "+861012345678",
    ] {
        assert_eq!(found(&format!("call {n} now")), vec![n], "{n}");
    }
}

#[test]
fn finds_north_american_forms() {
    for n in [
        "(555) 123-4567",
        "(555)123-4567",
        "555-123-4567",
        "555.123.4567",
        "555 123 4567",
        "1-555-123-4567",
        "1 (555) 123-4567",
        "1.555.123.4567",
    ] {
        assert_eq!(found(&format!("Call {n}.")), vec![n], "{n}");
    }
}

#[test]
fn bare_digits_dates_ids_and_addresses_are_not_phones() {
    for n in [
        "5551234567",
        "15551234567",
        "2024-01-15",
        "2024-01-15T10:00:00+01:00",
        "192.168.100.200",
        "123-45-6789",
        "4111 1111 1111 1111",
        "4111-1111-1111-1111",
        "3782 822463 10005",
        "+1234567",
        "+1234567890123456",
        "555-123-45678",
        "555-123.4567",
        "1555-123-4567",
        "x555-123-4567",
        "555-123-4567-89",
        "10.555.123.4567",
        "a+4915112345678",
        "(55) 123-4567",
    ] {
        assert!(found(n).is_empty(), "{n}: {:?}", found(n));
    }
}

#[test]
fn an_international_number_takes_its_longest_grouping_up_to_15_digits() {
    assert_eq!(found("+44 20 7946 0958 12"), vec!["+44 20 7946 0958 12"]);
    assert_eq!(found("+1 234 567 890 123 456 789"), vec!["+1 234 567 890 123"]);
}

#[test]
fn the_longest_phone_fits_max_len() {
    let longest = "+1 (2) 3 4 5 6 7 8 9 0 1 2 3 4 5";
    assert_eq!(found(longest), vec![longest]);
    assert_eq!(longest.len(), super::MAX_LEN);
}
