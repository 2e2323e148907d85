//! The string grammars against examples, and the schema patterns against the checks.

use super::*;

#[test]
fn endpoints_come_apart_at_their_port() {
    assert_eq!(endpoint_parts("10.0.0.7:8000"), Some(("10.0.0.7", "8000")));
    assert_eq!(endpoint_parts("[fd00::1]:5557"), Some(("[fd00::1]", "5557")));
    assert_eq!(endpoint_parts("vllm.llm.svc:80"), Some(("vllm.llm.svc", "80")));
    for bad in ["10.0.0.7", "[fd00::1]", "fd00::1", "h:", ":80", "h:8x", "[fd00::1:80"] {
        assert_eq!(endpoint_parts(bad), None, "{bad}");
    }
    // Every endpoint parse_endpoint accepts comes apart.
    for ok in ["A.example:1", "[::1]:65535"] {
        let normalised = parse_endpoint(ok).unwrap();
        assert!(endpoint_parts(&normalised).is_some(), "{normalised}");
    }
}

#[test]
fn slugs() {
    assert!(check_slug("local").is_ok());
    assert!(check_slug("a").is_ok());
    assert!(check_slug("0-vllm-pool").is_ok());
    assert!(check_slug(&"a".repeat(63)).is_ok());
    for bad in ["", "-a", "A", "a_b", "a.b", "é", &"a".repeat(64)] {
        assert!(check_slug(bad).is_err(), "{bad}");
    }
}

#[test]
fn key_and_group_names_are_slugs() {
    for ok in ["team-a", "k1", "bench-0001"] {
        assert_eq!(check_slug(ok), Ok(()), "{ok}");
    }
    for bad in ["a b", "a/b", "..", "A", "x\u{19}", "", "team_a", &"a".repeat(64)] {
        assert!(check_slug(bad).is_err(), "{bad:?}");
    }
    let e = check_slug("a b").unwrap_err();
    assert_eq!(e, r#""a b" is not a slug (^[a-z0-9][a-z0-9-]{0,62}$)"#, "the message names the rule");
}

#[test]
fn public_names() {
    let longest = "m".repeat(128);
    for ok in ["llama3:8b", "gpt-4o", "claude-3.5-sonnet", "...", ".x", "x.", "modèle", "v1.5..2", &longest] {
        assert_eq!(check_public_name(ok), Ok(()), "{ok}");
    }
    for bad in ["", ".", "..", "a?b", "a#b", "a%2e", "a\\b", "a/b", "a b", "a\u{3000}b", "x\u{19}", "a\u{85}"] {
        assert!(check_public_name(bad).is_err(), "{bad:?}");
    }
    assert!(check_public_name(&"m".repeat(129)).is_err());
    // 64 two-byte characters are 128 bytes; one more is too long.
    assert!(check_public_name(&"é".repeat(64)).is_ok());
    assert!(check_public_name(&"é".repeat(65)).is_err());
    assert!(check_public_name("a/b").unwrap_err().contains("reserved for provider/model"));
}

/// The schema patterns say what the checks say: a client generating from the OpenAPI
/// document must never refuse a name the server accepts (nor, here, accept one it refuses).
#[test]
fn patterns_agree_with_the_checks() {
    let slug = regex_lite::Regex::new(SLUG_PATTERN).unwrap();
    let public = regex_lite::Regex::new(PUBLIC_NAME_PATTERN).unwrap();
    let mut names: Vec<String> =
        ["", ".", "..", "...", ".a", "a.", "k1", "-a", "a-", "llama3:8b"].into_iter().map(String::from).collect();
    names.extend(["a".repeat(63), "a".repeat(64), "m".repeat(128), "m".repeat(129)]);
    // Every character alone, after a letter and after a dot: the character classes.
    for c in (0..=0x3000u32).chain([0xfeff, 0x1_f600]).filter_map(char::from_u32) {
        names.extend([c.to_string(), format!("a{c}"), format!(".{c}")]);
    }
    for name in &names {
        assert_eq!(slug.is_match(name), check_slug(name).is_ok(), "slug {name:?}");
        assert_eq!(public.is_match(name), check_public_name(name).is_ok(), "public name {name:?}");
    }
    let digest = regex_lite::Regex::new(DIGEST_PATTERN).unwrap();
    let hex = "0123456789abcdef".repeat(4);
    for d in [format!("sha256:{hex}"), format!("sha256:{hex}0"), format!("sha256:{}", hex.to_uppercase()), hex] {
        assert_eq!(digest.is_match(&d), check_digest(&d).is_ok(), "{d}");
    }
}

#[test]
fn base_urls() {
    let u = parse_base_url("http://127.0.0.1:8000").unwrap();
    assert_eq!((u.scheme, u.host.as_str(), u.port, u.path_prefix.as_str()), (Scheme::Http, "127.0.0.1", 8000, ""));
    assert_eq!(u.authority(), "127.0.0.1:8000");
    let u = parse_base_url("https://API.OpenAI.com/").unwrap();
    assert_eq!((u.port, u.path_prefix.as_str(), u.authority()), (443, "", "api.openai.com".to_string()));
    let u = parse_base_url("https://gw.example:8443/openai/v1/").unwrap();
    assert_eq!((u.port, u.path_prefix.as_str()), (8443, "/openai/v1"));
    let u = parse_base_url("http://[::1]:9000/p").unwrap();
    assert_eq!((u.host.as_str(), u.authority()), ("[::1]", "[::1]:9000".to_string()));
    for bad in [
        "ftp://x",
        "127.0.0.1:80",
        "http://",
        "http://h:0",
        "http://h:99999",
        "http://u@h",
        "http://h/?q",
        "http://h:8a",
        "http://a b",
    ] {
        assert!(parse_base_url(bad).is_err(), "{bad}");
    }
}

#[test]
fn endpoints() {
    assert_eq!(parse_endpoint("10.0.0.1:8000").unwrap(), "10.0.0.1:8000");
    assert_eq!(parse_endpoint("Vllm-0.ns.svc:8000").unwrap(), "vllm-0.ns.svc:8000");
    assert_eq!(parse_endpoint("[fd00::1]:80").unwrap(), "[fd00::1]:80");
    for bad in ["10.0.0.1", ":80", "h:", "[::1]", "h:80:80x"] {
        assert!(parse_endpoint(bad).is_err(), "{bad}");
    }
}

#[test]
fn digests_and_env_names() {
    assert!(check_digest(&format!("sha256:{}", "ab".repeat(32))).is_ok());
    assert!(check_digest(&format!("sha256:{}", "AB".repeat(32))).is_err());
    assert!(check_digest("sha256:abc").is_err());
    assert!(check_env_name("OPENAI_API_KEY").is_ok());
    assert!(check_env_name("_X1").is_ok());
    assert!(check_env_name("1X").is_err());
    assert!(check_env_name("A-B").is_err());
}

#[test]
fn inference_pool_references() {
    assert_eq!(parse_pool_ref("vllm-pool").unwrap(), (None, "vllm-pool"));
    assert_eq!(parse_pool_ref("llm/vllm.pool-2").unwrap(), (Some("llm"), "vllm.pool-2"));
    let long_label = "a".repeat(64);
    for bad in ["", "/p", "llm/", "Pool", "llm/-p", "llm/p-", "a/b/c", "l_m/p", "llm/p..q", long_label.as_str()] {
        assert!(parse_pool_ref(bad).is_err(), "{bad:?}");
    }
    assert!(parse_pool_ref(&format!("{long_label}/p")).is_err(), "a namespace is one label");
}

#[test]
fn timestamps() {
    assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z").unwrap(), 0);
    assert_eq!(parse_rfc3339("2000-03-01T00:00:00Z").unwrap(), 951_868_800);
    assert_eq!(parse_rfc3339("2024-02-29T12:30:15.250Z").unwrap(), 1_709_209_815);
    assert_eq!(parse_rfc3339("2024-02-29T14:30:15+02:00").unwrap(), 1_709_209_815);
    for bad in [
        "2023-02-29T00:00:00Z",
        "2024-13-01T00:00:00Z",
        "2024-01-01",
        "2024-01-01T00:00:00",
        "2024-01-01T00:00:00+2:00",
    ] {
        assert!(parse_rfc3339(bad).is_err(), "{bad}");
    }
}
