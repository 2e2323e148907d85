use super::super::Match;

fn found(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    super::find(text, &mut out);
    out.iter().map(|m: &Match| &text[m.start..m.end]).collect()
}

#[test]
fn finds_dashed_ssns_in_text() {
    assert_eq!(found("SSN 123-45-6789."), vec!["123-45-6789"]);
    assert_eq!(found("123-45-6789,772-11-0001"), vec!["123-45-6789", "772-11-0001"]);
    // Only the SSA's structural rules: numbers some lists ban (078-05-1120) still match.
    assert_eq!(found("078-05-1120"), vec!["078-05-1120"]);
}

#[test]
fn the_ssa_rules_exclude_areas_groups_and_serials() {
    for n in ["000-12-3456", "666-12-3456", "900-12-3456", "999-12-3456", "123-00-4567", "123-45-0000"] {
        assert!(found(n).is_empty(), "{n}");
    }
}

#[test]
fn other_shapes_and_longer_identifiers_are_not_ssns() {
    for n in [
        "123456789",
        "123 45 6789",
        "1234-45-6789",
        "123-45-67890",
        "a123-45-6789",
        "123-45-6789x",
        "1-123-45-6789",
        "123-45-6789-1",
        "12-345-6789",
    ] {
        assert!(found(n).is_empty(), "{n}");
    }
}
