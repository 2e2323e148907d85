use super::super::Match;

fn found(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    super::find(text, &mut out);
    out.iter().map(|m: &Match| &text[m.start..m.end]).collect()
}

#[test]
fn finds_addresses_in_text() {
    for a in [
        "john.doe@example.com",
        "a@b.co",
        "x+tag@mail.example.org",
        "first_last%x@sub-domain.example.io",
        "A-1@EXAMPLE.COM",
    ] {
        assert_eq!(found(&format!("mail {a} today")), vec![a], "{a}");
    }
    assert_eq!(found("Write to john@example.com."), vec!["john@example.com"]);
    assert_eq!(found("<john@example.com>, 'ann@example.co.uk'"), vec!["john@example.com", "ann@example.co.uk"]);
    assert_eq!(found("`john@example.com`"), vec!["john@example.com"]);
    assert_eq!(found("?q=john@example.com&x"), vec!["john@example.com"]);
    assert_eq!(found("a@b.cd,c@d.ef"), vec!["a@b.cd", "c@d.ef"]);
}

#[test]
fn the_domain_needs_a_dot_and_an_alphabetic_tld() {
    for a in [
        "john@localhost",
        "john@example.c",
        "john@example.123",
        "john@example.c0m",
        "john@.example.com",
        "john@example..com",
    ] {
        assert!(found(a).is_empty(), "{a}");
    }
}

#[test]
fn labels_and_local_parts_follow_the_dot_atom_rules() {
    for a in [
        ".john@example.com",
        "jo..hn@example.com",
        "john.@example.com",
        "john@-example.com",
        "john@example-.com",
        "@example.com",
        "a@b@c.com",
        "john@example.com_x",
    ] {
        assert!(found(a).is_empty(), "{a}: {:?}", found(a));
    }
}

#[test]
fn lengths_are_bounded() {
    let local = "a".repeat(64);
    assert_eq!(found(&format!("{local}@example.com")).len(), 1);
    assert!(found(&format!("{local}a@example.com")).is_empty());
    let label = "b".repeat(63);
    assert!(found(&format!("a@{label}.com")).len() == 1);
    assert!(found(&format!("a@{label}b.com")).is_empty());
    // 254 bytes in all is the most.
    let domain = format!("{}.{}.{}.com", "c".repeat(63), "d".repeat(63), "e".repeat(63));
    let ok = format!("{}@{domain}", "f".repeat(254 - 1 - domain.len()));
    assert_eq!(ok.len(), 254);
    assert_eq!(found(&ok), vec![ok.as_str()]);
    assert!(found(&format!("f{ok}")).is_empty());
    assert!(found(&format!("{ok}.")).len() == 1 && ok.len() + 2 <= super::MAX_LEN);
}
