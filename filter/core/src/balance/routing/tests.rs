use super::*;
use crate::config::{Config, RawConfig};
use crate::passive::{PassiveTable, FAILURE_THRESHOLD};
use crate::targets::EndpointState;

fn config(models: &str) -> Config {
    let yaml = format!(
        "providers:\n  - {{name: a, kind: openai_compatible, base_url: 'http://a:1'}}\n  - {{name: pool, kind: openai_compatible, base_url: 'http://p:1', endpoints: ['h1:1', 'h2:1']}}\nmodels:\n{models}"
    );
    let raw: RawConfig = serde_saphyr::from_str(&yaml).unwrap();
    Config::try_from(raw).unwrap()
}

fn parked(provider: &str, endpoint: &str) -> EndpointState {
    let (provider, endpoint) = (provider.to_string(), endpoint.to_string());
    EndpointState { provider, endpoint, healthy: false, cooldown_until_ms: Some(1_000), ..Default::default() }
}

#[test]
fn a_single_pooled_target_balances_over_its_endpoints() {
    let c = config("  - {name: big, targets: [{provider: pool, model: m}]}\n  - {name: two, targets: [{provider: pool, model: m}, {provider: a, model: m}]}");
    let r = Routing::new(&c);
    let slots = |i| r.model(i).unwrap().slots().to_vec();
    let pool = [Slot { target: 0, endpoint: Some(0) }, Slot { target: 0, endpoint: Some(1) }];
    assert_eq!(slots(0), pool);
    assert_eq!(slots(1), [Slot { target: 0, endpoint: None }, Slot { target: 1, endpoint: None }]);
    assert_ne!(r.model(0).unwrap().fingerprint(), r.model(1).unwrap().fingerprint());
}

#[test]
fn parked_slots_are_skipped_until_all_are_parked() {
    let c = config("  - {name: big, targets: [{provider: pool, model: m}]}");
    let mut r = Routing::new(&c);
    r.apply_feed(&c, &TargetFeed { version: 1, endpoints: vec![parked("pool", "h1:1")] });
    for random in 0..8 {
        let req = Request { random, ..Request::default() };
        assert_eq!(r.pick(&c, 0, &req, &[], 999).map(|p| p.slot), Some(1));
        assert_eq!(r.endpoint(&c, 1, 999, random), Some(1));
    }
    let both = vec![parked("pool", "h1:1"), parked("pool", "h2:1")];
    r.apply_feed(&c, &TargetFeed { version: 2, endpoints: both });
    let picks: Vec<_> =
        (0..8).filter_map(|random| r.pick(&c, 0, &Request { random, ..Request::default() }, &[], 999)).collect();
    assert!(picks.iter().any(|p| p.slot == 0) && picks.iter().any(|p| p.slot == 1), "fail open");
}

#[test]
fn the_conversation_starts_at_its_key() {
    assert_eq!(conversation(br#"{"model":"x","messages":[1]}"#), br#""messages":[1]}"#);
    assert_eq!(conversation(b"{}"), b"{}");
    // The first key wins, whichever it is; a quoted value equal to a key counts too (as before).
    assert_eq!(conversation(br#"{"prompt":"a","messages":[]}"#), br#""prompt":"a","messages":[]}"#);
    assert_eq!(conversation(br#"{"model":"m","contents":[{"text":"input"}]}"#), br#""contents":[{"text":"input"}]}"#);
    assert_eq!(conversation(br#"{"model":"m","input":"hi"}"#), br#""input":"hi"}"#);
    assert_eq!(conversation(br#"{"model":"messages","x":1}"#), br#""messages","x":1}"#);
    assert_eq!(conversation(br#"{"a":"""#), br#"{"a":"""#);
}

#[test]
fn the_conversation_search_agrees_with_a_plain_one() {
    // The first quote followed by one of the keys, found one byte at a time.
    fn plain(body: &[u8]) -> &[u8] {
        let keys: [&[u8]; 4] = [b"messages\"", b"contents\"", b"input\"", b"prompt\""];
        (0..body.len())
            .find(|&i| body[i] == b'"' && keys.iter().any(|k| body[i + 1..].starts_with(k)))
            .map_or(body, |i| &body[i..])
    }
    let parts = ["\"", "messages", "contents", "input", "prompt", "\"model\"", "messa", "{", ":", "p", "\"i", " "];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..20_000 {
        let body: String = (0..1 + x % 10)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                parts[(x % parts.len() as u64) as usize]
            })
            .collect();
        assert_eq!(conversation(body.as_bytes()), plain(body.as_bytes()), "{body}");
    }
}

fn passive_parked(provider: &str, endpoint: &str) -> PassiveTable {
    let mut t = PassiveTable::default();
    for _ in 0..FAILURE_THRESHOLD {
        t.record(provider, endpoint, true, 0);
    }
    t
}

#[test]
fn tried_and_passively_parked_slots_are_never_picked() {
    let c = config("  - {name: big, targets: [{provider: pool, model: m}]}");
    let mut r = Routing::new(&c);
    for random in 0..8 {
        let req = Request { random, ..Request::default() };
        assert_eq!(r.pick_excluding(&c, 0, &req, &[], 1, &[0]).map(|p| p.slot), Some(1));
        assert_eq!(r.pick_excluding(&c, 0, &req, &[], 1, &[0, 1]), None, "all tried: no fail open");
    }
    assert!(r.has_untried(&c, 0, &[1], 1));
    r.apply_passive(&c, &passive_parked("pool", "h1:1"));
    assert!(!r.has_untried(&c, 0, &[1], 1));
    for random in 0..8 {
        let req = Request { random, ..Request::default() };
        assert_eq!(r.pick(&c, 0, &req, &[], 1).map(|p| p.slot), Some(1));
        assert_eq!(r.endpoint(&c, 1, 1, random), Some(1));
    }
    // Feed-parked but passively fine: the feed's view fails open, passive parking does not.
    r.apply_feed(&c, &TargetFeed { version: 1, endpoints: vec![parked("pool", "h2:1")] });
    assert_eq!(r.pick(&c, 0, &Request::default(), &[], 1).map(|p| p.slot), Some(1));
    r.apply_passive(&c, &PassiveTable::default());
    assert_eq!(r.pick(&c, 0, &Request::default(), &[], 1).map(|p| p.slot), Some(0));
}
