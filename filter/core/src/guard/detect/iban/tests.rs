use super::super::Match;

fn found(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    super::find(text, &mut out);
    out.iter().map(|m: &Match| &text[m.start..m.end]).collect()
}

#[test]
fn finds_ibans_compact_and_grouped() {
    for n in [
        "DE89370400440532013000",
        "DE89 3704 0044 0532 0130 00",
        "GB82WEST12345698765432",
        "GB82 WEST 1234 5698 7654 32",
        "NO9386011117947",
        "NO93 8601 1117 947",
        "FR1420041010050500013M02606",
        "MT84MALT011000012345MTLCAST001S",
        "LC55HEMM000100010012001200023015",
        "RU0204452560040702810412345678901",
    ] {
        assert_eq!(found(&format!("IBAN: {n}, thanks")), vec![n], "{n}");
    }
}

#[test]
fn a_wrong_check_digit_or_length_is_no_iban() {
    for n in [
        "DE88370400440532013000",
        "DE89370400440532013001",
        "DE8937040044053201300",
        "DE893704004405320130001",
        "DE89 3704 0044 0532 0130 0012",
        "DE89 3704 0044 0532 0130 0",
        "XX89370400440532013000",
    ] {
        assert!(found(n).is_empty(), "{n}");
    }
}

#[test]
fn lower_case_irregular_groups_and_longer_words_are_not_ibans() {
    for n in [
        "de89370400440532013000",
        "DE89370400440532013000x",
        "ADE89370400440532013000",
        "DE89 37040044 0532 0130 00",
        "DE89  3704 0044 0532 0130 00",
        "DE89 3704 0044 0532 0130 00X",
    ] {
        assert!(found(n).is_empty(), "{n}");
    }
}

#[test]
fn the_registry_table_is_sorted_and_bounds_max_len() {
    assert!(super::LENGTHS.windows(2).all(|w| w[0].0 < w[1].0));
    let longest = super::LENGTHS.iter().map(|(_, n)| usize::from(*n)).max().unwrap();
    assert_eq!(longest, super::MAX_CHARS);
    let ru = "RU02 0445 2560 0407 0281 0412 3456 7890 1";
    assert_eq!(found(ru), vec![ru]);
    assert_eq!(ru.len(), super::MAX_LEN);
}
