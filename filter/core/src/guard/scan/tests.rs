use super::*;

fn set(rules: &[(&str, Detector, Action)], restorable: bool) -> RuleSet {
    let rules = rules.iter().map(|(n, d, a)| Rule { name: (*n).into(), detector: d.clone(), action: *a }).collect();
    RuleSet::new(rules, restorable)
}

fn words(w: &[&str]) -> Detector {
    Detector::keywords(&w.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap_or(Detector::Email)
}

#[test]
fn redact_numbers_placeholders_per_kind_and_reuses_them_for_the_same_value() {
    let rules = set(&[("secret-words", words(&["alpha", "beta"]), Action::Redact)], false);
    let mut vault = Vault::default();
    let mut tally = Tally::default();
    let out = rules.rewrite(&mut vault, "alpha, beta and Alpha", &mut tally);
    assert_eq!(out, Ok(Some("[REDACTED_1], [REDACTED_2] and [REDACTED_3]".into())));
    let again = rules.rewrite(&mut vault, "beta", &mut tally);
    assert_eq!(again, Ok(Some("[REDACTED_2]".into())));
    assert_eq!(tally.counts, vec![4]);
}

#[test]
fn block_wins_over_redact_and_names_the_first_blocking_rule() {
    let rules = set(
        &[
            ("w", words(&["alpha"]), Action::Redact),
            ("x", words(&["omega"]), Action::Block),
            ("y", words(&["beta"]), Action::Block),
        ],
        false,
    );
    let mut vault = Vault::default();
    let out = rules.rewrite(&mut vault, "alpha beta omega", &mut Tally::default());
    assert_eq!(out, Err(Blocked { rule: 2 }));
    assert!(vault.is_empty());
}

#[test]
fn log_counts_without_rewriting_and_mask_keeps_the_last_four() {
    let rules = set(
        &[
            ("l", words(&["alpha"]), Action::Log),
            ("m", Detector::regex(r"\d{4}-\d{4}").unwrap_or(Detector::Email), Action::Mask),
        ],
        false,
    );
    let mut tally = Tally::default();
    let out = rules.rewrite(&mut Vault::default(), "alpha 1234-5678", &mut tally);
    assert_eq!(out, Ok(Some("alpha ****-5678".into())));
    assert_eq!(tally.counts, vec![1, 1]);
    assert_eq!(rules.rewrite(&mut Vault::default(), "alpha", &mut tally), Ok(None));
}

#[test]
fn restore_puts_back_only_restorable_placeholders() {
    let restoring = set(&[("w", words(&["alpha"]), Action::Redact)], true);
    let hiding = set(&[("w", words(&["beta"]), Action::Redact)], false);
    let mut vault = Vault::default();
    let mut tally = Tally::default();
    assert_eq!(restoring.rewrite(&mut vault, "alpha", &mut tally), Ok(Some("[REDACTED_1]".into())));
    assert_eq!(hiding.rewrite(&mut vault, "beta", &mut tally), Ok(Some("[REDACTED_2]".into())));
    let answer = "You said [REDACTED_1] and [REDACTED_2], not [REDACTED_9] or [REDACTED_1";
    assert_eq!(
        vault.restore_text(answer).as_deref(),
        Some("You said alpha and [REDACTED_2], not [REDACTED_9] or [REDACTED_1")
    );
    assert_eq!(vault.restore_text("nothing here"), None);
}

#[test]
fn overlapping_hits_keep_the_earliest_then_the_longest() {
    let rules = set(
        &[
            ("a", words(&["card"]), Action::Redact),
            ("b", words(&["card number"]), Action::Redact),
            ("c", words(&["number 5"]), Action::Redact),
        ],
        false,
    );
    let out = rules.rewrite(&mut Vault::default(), "my card number 5", &mut Tally::default());
    assert_eq!(out, Ok(Some("my [REDACTED_1] 5".into())));
}

#[test]
fn custom_patterns_are_bounded() {
    assert!(Detector::regex(&"a".repeat(2000)).is_err());
    assert!(Detector::regex("(unclosed").is_err());
    assert!(Detector::keywords(&[" ".into()]).is_err());
    // Nested quantifiers that make backtracking engines explode run in linear time here.
    let re = Detector::regex("(a+)+$").unwrap_or(Detector::Email);
    let mut found = Vec::new();
    re.find(&format!("{}b", "a".repeat(20_000)), &mut found);
    assert!(found.is_empty());
}
