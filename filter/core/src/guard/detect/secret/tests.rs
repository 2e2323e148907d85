use super::super::Match;

fn found(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    super::find(text, &mut out);
    out.iter().map(|m: &Match| &text[m.start..m.end]).collect()
}

const PEM_BODY: &str = "MIIEowIBAAKCAQEAvx0n\nq8rQm1n2b3c4d5e6f7g8h9+/=\n";

#[test]
fn finds_prefixed_keys() {
    let keys = [
        "AKIAIOSFODNN7EXAMPLE".to_string(),
        "ASIAY34FZKBOKMUTVV7A".to_string(),
        format!("AIza{}", "SyD-9tSrke72PouQMnMX_7e9bBJX1aB2cDe"),
        format!("ghp_{}", "a".repeat(36)),
        format!("gho_{}", "B1".repeat(18)),
        format!("github_pat_{}_{}", "11ABCDEFG0123456789abc", "x".repeat(59)),
        "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx".to_string(),
        "sk-proj-abcdefghijklmnopqrstuvwxyz012345".to_string(),
        "sk-ant-api03-abcdefghijklmnopqrstuvwxyz_-0123".to_string(),
        format!("sk_live_{}", "4eC39HqLyjWDarjtT1zdp7dc"),
        format!("rk_live_{}", "0123456789abcdefXYZ"),
    ];
    for k in &keys {
        assert_eq!(found(&format!("key={k} end")), vec![k.as_str()], "{k}");
    }
}

#[test]
fn short_or_embedded_prefixes_are_not_secrets() {
    for t in [
        "AKIAIOSFODNN7EXAMPL",
        "XAKIAIOSFODNN7EXAMPLE",
        "ghp_short",
        "task-abcdefghijklmnopqrstuvwxyz",
        "sk-short",
        "sk_live_short",
        "eyJhbGciOi",
        "Bearer short-token",
        "notBearer abcdefghijklmnopqrstuvwxyz",
        "xoxb-123",
        "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----",
        "-----BEGIN CERTIFICATE-----",
    ] {
        assert!(found(t).is_empty(), "{t}: {:?}", found(t));
    }
}

#[test]
fn a_token_extends_as_far_as_its_characters_go() {
    let long = format!("AKIA{}", "Z".repeat(100));
    assert_eq!(found(&format!("{long}-x")), vec![long.as_str()]);
    assert_eq!(found("AKIAIOSFODNN7EXAMPLEabc"), vec!["AKIAIOSFODNN7EXAMPLE"]);
}

#[test]
fn a_jwt_takes_all_its_dotted_parts_but_not_a_final_dot() {
    let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
    assert_eq!(found(&format!("token: {jwt}.")), vec![jwt]);
    assert_eq!(found("eyJhbGciOiJIU"), vec!["eyJhbGciOiJIU"]);
    assert!(found("eyJhbGciOiJI").is_empty());
}

#[test]
fn a_bearer_match_is_the_token_alone() {
    let token = "abcDEF0123456789._~+/-xyz==";
    assert_eq!(found(&format!("Authorization: Bearer {token}\n")), vec![token]);
    assert_eq!(found(&format!("authorization: bearer {token}")), vec![token]);
    let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig";
    assert_eq!(found(&format!("Bearer {jwt}")), vec![jwt]);
}

#[test]
fn a_pem_block_runs_through_its_end_line() {
    for label in ["", "RSA ", "EC ", "OPENSSH ", "ENCRYPTED "] {
        let block = format!("-----BEGIN {label}PRIVATE KEY-----\n{PEM_BODY}-----END {label}PRIVATE KEY-----");
        assert_eq!(found(&format!("key:\n{block}\nthanks")), vec![block.as_str()], "{label}");
    }
    let legacy = format!(
        "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,0123ABCD\n\n{PEM_BODY}-----END RSA PRIVATE KEY-----"
    );
    assert_eq!(found(&legacy), vec![legacy.as_str()]);
}

#[test]
fn a_pem_block_without_its_end_line_runs_to_the_end_of_the_key_text() {
    let head = format!("-----BEGIN PRIVATE KEY-----\n{PEM_BODY}");
    assert_eq!(found(&format!("{head}\n\n!")), vec![head.trim_end()]);
    // A mismatched end line is not this block's end.
    let other = format!("{head}-----END RSA PRIVATE KEY-----");
    assert_eq!(found(&other), vec![head.trim_end()]);
    assert_eq!(found("-----BEGIN EC PRIVATE KEY-----"), vec!["-----BEGIN EC PRIVATE KEY-----"]);
}

#[test]
fn max_len_is_the_longest_recognising_prefix() {
    let pat = format!("github_pat_{}", "a".repeat(82));
    assert_eq!(pat.len(), super::MAX_LEN);
    assert_eq!(found(&pat), vec![pat.as_str()]);
    assert!(found(&pat[..pat.len() - 1]).is_empty());
    let header = format!("-----BEGIN {}PRIVATE KEY-----", "A".repeat(super::PEM_LABEL_MAX));
    assert_eq!(header.len(), super::PEM_HEADER_MAX);
    assert_eq!(found(&header).len(), 1);
    assert!(found(&format!("-----BEGIN {}PRIVATE KEY-----", "A".repeat(super::PEM_LABEL_MAX + 1))).is_empty());
    assert!(super::TOKENS.iter().all(|t| t.prefix.len() + t.min <= super::MAX_LEN));
}
