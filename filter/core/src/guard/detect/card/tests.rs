use super::super::Match;

fn found(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    super::find(text, &mut out);
    out.iter().map(|m: &Match| &text[m.start..m.end]).collect()
}

#[test]
fn finds_the_test_numbers_of_each_network_bare_and_grouped() {
    for n in [
        "4111111111111111",
        "4222222222222",
        "5555555555554444",
        "2223003122003222",
        "378282246310005",
        "6011111111111117",
        "3530111333300000",
        "30569309025904",
        "36227206271667",
        "6200000000000005",
        "6250941006528599",
        "4111 1111 1111 1111",
        "4111-1111-1111-1111",
        "3782 822463 10005",
        "3056 930902 5904",
    ] {
        assert_eq!(found(&format!("card: {n}, thanks")), vec![n], "{n}");
    }
}

#[test]
fn a_luhn_failure_or_an_unknown_issuer_is_not_a_card() {
    assert!(found("4111111111111112").is_empty());
    assert!(found("4111 1111 1111 1112").is_empty());
    // Luhn-valid, but no network starts with 1, 7, 8, 9 or 0.
    assert!(found("1234567812345670").is_empty());
    assert!(found("7992739871300008").is_empty());
    // 12 and 20 digits.
    assert!(found("411111111113").is_empty());
    assert!(found("41111111111111111113").is_empty());
}

#[test]
fn a_card_inside_a_longer_run_or_a_word_is_not_one() {
    assert!(found("123456789411111111111111").is_empty());
    assert!(found("4111111111111111123456789").is_empty());
    assert!(found("id4111111111111111").is_empty());
    assert!(found("4111111111111111x").is_empty());
    assert!(found("0.4111111111111111").is_empty());
}

#[test]
fn groups_need_one_kind_of_single_separator_and_card_sized_groups() {
    assert!(found("4111 1111-1111 1111").is_empty());
    assert!(found("4111  1111 1111 1111").is_empty());
    assert!(found("41 11 11 11 11 11 11 11").is_empty());
    assert!(found("41111 111 1111 1111").is_empty());
}

#[test]
fn grouping_takes_whole_groups_and_the_longest_valid_one() {
    // An expiry year after the number is not part of it (20 digits would be too many).
    assert_eq!(found("4111 1111 1111 1111 2027"), vec!["4111 1111 1111 1111"]);
    // The number is judged by itself and one character either side.
    assert_eq!(found("ref 12 4111111111111111 ok"), vec!["4111111111111111"]);
    assert_eq!(found("1234 4111 1111 1111 1111"), vec!["4111 1111 1111 1111"]);
    assert_eq!(found("4111111111111111,5555555555554444"), vec!["4111111111111111", "5555555555554444"]);
}

#[test]
fn the_longest_card_fits_max_len() {
    let longest = "4000 000 000 000 000 006";
    assert_eq!(found(longest), vec![longest]);
    assert_eq!(longest.len(), super::MAX_LEN);
}
