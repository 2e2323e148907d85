//! Grant flattening and authorization tests against `testdata/config/keys.yaml`.

use super::*;
use crate::testing::{fixture, keys_config};

const ALICE: Caller = Caller::Key(0);
const BOB: Caller = Caller::Key(1);
const CAROL: Caller = Caller::Key(2);
const DAVE: Caller = Caller::Key(3);
const ERIN: Caller = Caller::Key(4);
const FRANK: Caller = Caller::Key(5);

/// Model indexes in the fixture.
const CHAT: usize = 0;
const GPT: usize = 1;
const BIG: usize = 2;
const EMBED: usize = 3;
const LOOP_A: usize = 4;
const LOOP_B: usize = 5;
const SOLO: usize = 6;

/// Outcome of `authorize`: Ok(resolved) or the error status.
fn outcome<'r>(c: &Config, caller: Caller, requested: &'r str) -> Result<Resolved<'r>, u16> {
    c.authorize(caller, requested).map_err(|e| e.status)
}

fn model(i: usize) -> Result<Resolved<'static>, u16> {
    Ok(Resolved::Model(i))
}

fn pinned(provider: usize, model: &'static str) -> Result<Resolved<'static>, u16> {
    Ok(Resolved::Pinned { provider, model })
}

#[test]
fn flattened_grants() {
    let c = keys_config();
    let set = |xs: &[usize]| xs.iter().copied().collect::<BTreeSet<_>>();
    let alice = c.grants(0).unwrap();
    assert!(!alice.all);
    // chat's fallback chain is chat -> gpt -> big.
    assert_eq!(alice.models, set(&[CHAT, GPT, BIG]));
    assert_eq!(alice.providers, set(&[0]));
    assert!(alice.pinned.is_empty());
    assert!(c.grants(1).unwrap().all);
    assert_eq!(c.grants(2).unwrap().models, set(&[EMBED]));
    assert!(c.grants(3).unwrap().is_empty());
    let erin = c.grants(4).unwrap();
    assert_eq!(erin.models, set(&[LOOP_A, LOOP_B]));
    assert_eq!(erin.pinned, ["openai/gpt-4o".to_string()].into());
    let frank = c.grants(5).unwrap();
    assert_eq!(frank.models, set(&[CHAT, GPT, BIG, EMBED, SOLO]));
    assert_eq!(c.grants(6), None);
}

#[test]
fn authorize_table() {
    let c = keys_config();
    let cases = [
        // Public names, through group grants and their fallback chains.
        (ALICE, "chat", model(CHAT)),
        (ALICE, "gpt", model(GPT)),
        (ALICE, "big", model(BIG)),
        (ALICE, "embed", Err(403)),
        // Aliases of a granted model are covered.
        (ALICE, "default", model(CHAT)),
        (ALICE, "fast", model(GPT)),
        (ALICE, "vectors", Err(403)),
        // provider/* covers pinned requests for that provider only.
        (ALICE, "local/anything", pinned(0, "anything")),
        (ALICE, "local/a/b", pinned(0, "a/b")),
        (ALICE, "pool/llama-70b", Err(403)),
        (ALICE, "solo", Err(403)),
        // Unknown names are 404 whatever the grants: empty, unknown model, unknown provider,
        // empty pinned id.
        (ALICE, "", Err(404)),
        (ALICE, "nope", Err(404)),
        (ALICE, "nope/x", Err(404)),
        (ALICE, "local/", Err(404)),
        (DAVE, "nope", Err(404)),
        (DAVE, "nope/x", Err(404)),
        // Wildcard.
        (BOB, "solo", model(SOLO)),
        (BOB, "vectors", model(EMBED)),
        (BOB, "openai/o3", pinned(2, "o3")),
        (BOB, "nope", Err(404)),
        // Alias grant covers the alias's model and its other names.
        (CAROL, "vectors", model(EMBED)),
        (CAROL, "embed", model(EMBED)),
        (CAROL, "chat", Err(403)),
        // No grants: nothing.
        (DAVE, "chat", Err(403)),
        (DAVE, "local/x", Err(403)),
        // Exact pinned grant only matches exactly; cyclic fallbacks terminate.
        (ERIN, "openai/gpt-4o", pinned(2, "gpt-4o")),
        (ERIN, "openai/gpt-4o-mini", Err(403)),
        (ERIN, "gpt", Err(403)),
        (ERIN, "loop-b", model(LOOP_B)),
        // Union of own and several groups' grants.
        (FRANK, "solo", model(SOLO)),
        (FRANK, "vectors", model(EMBED)),
        (FRANK, "local/x", pinned(0, "x")),
        (FRANK, "loop-a", Err(403)),
        // Out-of-range key index (a caller from another snapshot) and a forged Open.
        (Caller::Key(99), "chat", Err(403)),
        (Caller::Open, "chat", Err(403)),
    ];
    for (caller, requested, want) in cases {
        assert_eq!(outcome(&c, caller, requested), want, "{caller:?} {requested:?}");
    }
}

#[test]
fn not_found_is_decided_before_permission() {
    let c = keys_config();
    // The same 404 body for a caller with no grants and one with everything: nothing to probe.
    for name in ["missing", "nope/x", ""] {
        let denied = c.authorize(DAVE, name).unwrap_err();
        let all = c.authorize(BOB, name).unwrap_err();
        assert_eq!(denied, all);
        assert_eq!(denied.code, Some("model_not_found"));
    }
    let e = c.authorize(DAVE, "chat").unwrap_err();
    assert_eq!(
        (e.status, e.kind, e.code, e.param),
        (403, "permission_error", Some("model_not_allowed"), Some("model"))
    );
}

#[test]
fn open_mode_allows_everything_known() {
    let c = fixture("quickstart.yaml");
    assert!(c.keys.is_empty());
    assert_eq!(outcome(&c, Caller::Open, "default"), model(0));
    assert_eq!(outcome(&c, Caller::Open, "local/x"), pinned(0, "x"));
    assert_eq!(outcome(&c, Caller::Open, "nope"), Err(404));
    // A key index means nothing without keys.
    assert_eq!(outcome(&c, Caller::Key(0), "chat"), Err(403));
}

#[test]
fn full_fixture_grants() {
    // testdata/config/full.yaml: alice is in dev (chat, local/*, default); chat falls back to gpt.
    let c = fixture("full.yaml");
    let alice = Caller::Key(0);
    assert!(c.authorize(alice, "gpt").is_ok());
    assert!(c.authorize(alice, "local/x").is_ok());
    assert_eq!(outcome(&c, alice, "claude"), Err(403));
    // bob is also in research (*).
    assert!(c.authorize(Caller::Key(1), "claude").is_ok());
}

/// Keys with the same patterns and groups share one flattened set; others get their own.
#[test]
fn keys_with_the_same_grants_share_one_set() {
    let yaml = "providers: [{ name: p, kind: openai, base_url: 'http://h' }]
models: [{ name: m, targets: [{ provider: p, model: x }] }]
groups: [{ name: team, models: [m] }]
keys:
  - { name: a, digest: 'sha256:1111111111111111111111111111111111111111111111111111111111111111', groups: [team] }
  - { name: b, digest: 'sha256:2222222222222222222222222222222222222222222222222222222222222222', groups: [team] }
  - { name: c, digest: 'sha256:3333333333333333333333333333333333333333333333333333333333333333', models: [m] }
";
    let c = Config::try_from(serde_saphyr::from_str::<crate::config::RawConfig>(yaml).unwrap()).unwrap();
    assert!(Arc::ptr_eq(&c.grants[0], &c.grants[1]));
    assert!(!Arc::ptr_eq(&c.grants[0], &c.grants[2]));
    assert_eq!(c.grants[0], c.grants[2], "same models, flattened separately");
}
