use super::*;
use crate::balance::Routing;
use crate::config::{Config, RawConfig};

fn config() -> Config {
    let yaml = "providers:\n  - {name: saas, kind: openai_compatible, base_url: 'http://a:1'}\n  - {name: pool, kind: openai_compatible, base_url: 'http://p:1', endpoints: ['10.0.0.1:8000', '10.0.0.2:8000', '[fd00::3]:8000']}\nmodels:\n  - {name: big, targets: [{provider: pool, model: m}]}\n  - {name: mixed, targets: [{provider: pool, model: m}, {provider: saas, model: m}]}\n";
    let raw: RawConfig = serde_saphyr::from_str(yaml).expect("yaml");
    Config::try_from(raw).expect("config")
}

fn excluded(subset: &str, model: usize) -> Vec<usize> {
    let c = config();
    let routing = Routing::new(&c);
    let slots = routing.model(model).expect("model").slots().to_vec();
    let mut out = Vec::new();
    Subset::parse(subset).exclude_slots(&c, model, &slots, &mut out);
    out.sort_unstable();
    out
}

#[test]
fn entries_match_pool_endpoints_by_host() {
    let s = Subset::parse(" 10.0.0.2:9000 , [FD00::3]:8000,,");
    assert!(s.admits("10.0.0.2:8000"), "another target port of the same pod");
    assert!(s.admits("[fd00::3]:8000"));
    assert!(!s.admits("10.0.0.1:8000"));
    assert!(!s.admits("10.0.0.20:8000"), "no prefix match");
    assert!(Subset::parse("10.0.0.1").admits("10.0.0.1:8000"), "a bare IP");
    assert!(Subset::parse("fd00::3").admits("[fd00::3]:1"), "a bare IPv6 address");
    assert!(Subset::parse(" , ").is_empty());
}

#[test]
fn slots_outside_the_subset_are_excluded() {
    assert_eq!(excluded("10.0.0.2:8000", 0), vec![0, 2]);
    assert_eq!(excluded("10.0.0.1:8000,[fd00::3]:8000", 0), vec![1]);
    assert_eq!(excluded("", 0), vec![0, 1, 2], "an empty subset leaves nothing");
    assert_eq!(excluded("10.9.9.9:1", 0), vec![0, 1, 2]);
}

#[test]
fn a_target_without_a_pool_is_never_in_a_subset() {
    // `mixed` has two slots: the pool as a whole (its endpoint chosen later) and the SaaS one.
    assert_eq!(excluded("10.0.0.1:8000", 1), vec![1]);
    assert_eq!(excluded("10.9.9.9:1", 1), vec![0, 1]);
}

#[test]
fn the_endpoint_of_a_pooled_target_stays_in_the_subset() {
    let c = config();
    let routing = Routing::new(&c);
    let subset = Subset::parse("10.0.0.2:8000");
    let admits = |i: usize| c.providers[1].endpoints.get(i).is_some_and(|a| subset.admits(a));
    for random in 0..16 {
        assert_eq!(routing.endpoint_where(&c, 1, 0, random, admits), Some(1));
    }
    assert_eq!(routing.endpoint_where(&c, 1, 0, 0, |_| false), None);
}

#[test]
fn the_list_puts_the_pick_first_once() {
    assert_eq!(endpoint_list("a:1", ["b:1", "a:1", "c:1", "b:1"]), "a:1,b:1,c:1");
    assert_eq!(endpoint_list("a:1", []), "a:1");
    assert_eq!(parse_fallbacks(" 2 "), Some(2));
    assert_eq!(parse_fallbacks("99"), Some(MAX_FALLBACKS));
    assert_eq!(parse_fallbacks("-1"), None);
}

#[test]
fn the_served_endpoint_is_another_endpoint_of_the_pool_named_exactly() {
    let pool: Vec<String> = ["10.0.0.1:8000", "10.0.0.2:8000", "[fd00::3]:8000"].map(String::from).to_vec();
    assert_eq!(served_endpoint(&pool, Some(0), "10.0.0.2:8000"), Some(1));
    assert_eq!(served_endpoint(&pool, Some(0), " [fd00::3]:8000 "), Some(2));
    assert_eq!(served_endpoint(&pool, None, "10.0.0.1:8000"), Some(0), "no endpoint was picked");
    assert_eq!(served_endpoint(&pool, Some(1), "10.0.0.2:8000"), None, "the pick itself served");
    assert_eq!(served_endpoint(&pool, Some(0), "10.0.0.2:9000"), None, "another port is not the endpoint");
    assert_eq!(served_endpoint(&pool, Some(0), "10.0.0.2"), None, "a bare IP is not matched");
    assert_eq!(served_endpoint(&pool, Some(0), "10.0.0.9:8000"), None, "not in the pool");
    assert_eq!(served_endpoint(&pool, Some(0), ""), None);
    assert_eq!(served_endpoint(&[], None, "10.0.0.2:8000"), None, "no pool");
}
