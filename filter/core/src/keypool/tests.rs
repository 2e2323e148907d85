use super::*;
use crate::config::Credential;

fn keys(secrets: &[&str]) -> Vec<PoolKey> {
    let key = |s: &&str| PoolKey {
        credential: Credential { name: "authorization", value: format!("Bearer {s}") },
        fingerprint: fingerprint(s),
    };
    secrets.iter().map(key).collect()
}

fn pool(keys: &[PoolKey]) -> Pool<'_> {
    Pool { provider: "p", keys, generation: generation(keys), cooldown_ms: 60_000 }
}

fn answer(status: u16, retry_after: Option<&[u8]>, sent_ms: u64) -> Answer<'_> {
    Answer { status, retry_after, sent_ms }
}

/// Which keys `n` consecutive picks use, by index.
fn picks(pool: &Pool<'_>, table: &KeyTable, now_ms: u64, n: u64) -> Vec<usize> {
    (0..n).filter_map(|c| pick(pool, table, now_ms, c)).collect()
}

#[test]
fn fingerprints_are_stable_short_and_never_the_key() {
    let f = fingerprint("sk-secret-1");
    assert_eq!(f, fingerprint("sk-secret-1"));
    assert_ne!(f, fingerprint("sk-secret-2"));
    assert_eq!(f.len(), 10);
    assert!(f.starts_with("k-") && f[2..].bytes().all(|b| b.is_ascii_hexdigit()), "{f}");
    // SHA-256("abc") begins ba7816bf.
    assert_eq!(fingerprint("abc"), "k-ba7816bf");
    assert!(!format!("{:?}", keys(&["sk-secret-1"])).contains("sk-secret"), "Debug hides the key");
}

#[test]
fn the_generation_follows_the_key_list() {
    let (ab, ba, abc) = (keys(&["a", "b"]), keys(&["b", "a"]), keys(&["a", "b", "c"]));
    assert_eq!(generation(&ab), generation(&keys(&["a", "b"])));
    assert_ne!(generation(&ab), generation(&ba));
    assert_ne!(generation(&ab), generation(&abc));
}

#[test]
fn picks_spread_round_robin_over_usable_keys() {
    let k = keys(&["a", "b", "c"]);
    let p = pool(&k);
    let empty = KeyTable::default();
    assert_eq!(picks(&p, &empty, 0, 6), [0, 1, 2, 0, 1, 2]);
    let mut t = KeyTable::default();
    t.record_answer(&p, 1, &answer(429, None, 0), 1_000);
    assert_eq!(picks(&p, &t, 1_000, 6), [0, 2, 0, 2, 0, 2], "the resting key is left out, evenly");
    assert_eq!(pick(&pool(&[]), &empty, 0, 3), None, "no keys, no pick");
}

#[test]
fn a_429_rests_its_key_for_the_cooldown_then_it_returns() {
    let k = keys(&["a", "b"]);
    let p = pool(&k);
    let mut t = KeyTable::default();
    assert_eq!(t.record_answer(&p, 0, &answer(429, None, 900), 1_000), Change::Cooldown);
    assert_eq!(t.state(&p, &k[0].fingerprint, 1_000), Some(KeyState::Resting { until_ms: 61_000 }));
    assert_eq!(picks(&p, &t, 60_999, 4), [1, 1, 1, 1]);
    assert_eq!(t.state(&p, &k[0].fingerprint, 61_000), None, "the rest is over");
    assert_eq!(picks(&p, &t, 61_000, 4), [0, 1, 0, 1]);
    // Another 429 while it rests extends the rest but is no new event; once over, it is one.
    assert_eq!(t.record_answer(&p, 0, &answer(429, None, 900), 2_000), Change::Changed);
    assert_eq!(t.record_answer(&p, 0, &answer(429, None, 900), 2_000), Change::Unchanged);
    assert_eq!(t.record_answer(&p, 0, &answer(429, None, 61_500), 61_500), Change::Changed, "extended");
    assert_eq!(t.state(&p, &k[0].fingerprint, 61_500), Some(KeyState::Resting { until_ms: 121_500 }));
    assert_eq!(t.record_answer(&p, 0, &answer(429, None, 200_000), 200_000), Change::Cooldown);
}

#[test]
fn retry_after_decides_the_rest_when_usable() {
    let k = keys(&["a"]);
    let p = pool(&k);
    let rest = |retry_after: &[u8]| {
        let mut t = KeyTable::default();
        t.record_answer(&p, 0, &answer(429, Some(retry_after), 0), 1_000);
        match t.state(&p, &k[0].fingerprint, 1_000) {
            Some(KeyState::Resting { until_ms }) => until_ms - 1_000,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(rest(b"2"), 2_000);
    assert_eq!(rest(b" 7 "), 7_000);
    assert_eq!(rest(b"86400"), MAX_REST_MS, "capped");
    for unusable in [&b"0"[..], b"-3", b"soon", b"Wed, 21 Oct 2015 07:28:00 GMT"] {
        assert_eq!(rest(unusable), 60_000, "{unusable:?}: the pool's cooldown");
    }
}

#[test]
fn a_success_clears_a_rest_only_when_sent_since_it_began() {
    let k = keys(&["a", "b"]);
    let p = pool(&k);
    let mut t = KeyTable::default();
    t.record_answer(&p, 0, &answer(429, None, 900), 1_000);
    // Sent before the 429 came, answered after: says nothing about the key now.
    assert_eq!(t.record_answer(&p, 0, &answer(200, None, 950), 1_100), Change::Unchanged);
    assert!(t.state(&p, &k[0].fingerprint, 1_100).is_some());
    // Sent to it since (every key resting, so it was tried): it works again.
    assert_eq!(t.record_answer(&p, 0, &answer(200, None, 5_000), 5_100), Change::Changed);
    assert!(t.entries.is_empty());
    assert_eq!(t.record_answer(&p, 1, &answer(200, None, 0), 5_100), Change::Unchanged, "healthy: no write");
    assert_eq!(t.record_answer(&p, 1, &answer(500, None, 0), 5_100), Change::Unchanged, "not the key's fault");
}

#[test]
fn a_401_or_403_disables_until_the_generation_changes() {
    let k = keys(&["a", "b", "c"]);
    let p = pool(&k);
    let mut t = KeyTable::default();
    assert_eq!(t.record_answer(&p, 1, &answer(401, None, 0), 1_000), Change::Disabled);
    assert_eq!(t.record_answer(&p, 2, &answer(403, None, 0), 1_000), Change::Disabled);
    assert_eq!(t.record_answer(&p, 1, &answer(401, None, 0), 1_000), Change::Unchanged);
    let a_year_later = 1_000 + 365 * 86_400_000;
    assert_eq!(picks(&p, &t, a_year_later, 3), [0, 0, 0], "never picked again");
    assert_eq!(t.record_answer(&p, 1, &answer(429, None, 0), 2_000), Change::Unchanged, "stays disabled");
    // The key list changed (a key added): the old disablings no longer hold.
    let more = keys(&["a", "b", "c", "d"]);
    let q = pool(&more);
    assert_eq!(picks(&q, &t, 2_000, 4), [0, 1, 2, 3]);
    assert_eq!(t.record_answer(&q, 0, &answer(429, None, 0), 2_000), Change::Cooldown);
    assert_eq!(t.entries.len(), 1, "the stale disablings were dropped with that write");
}

#[test]
fn a_resting_key_that_answers_401_is_disabled() {
    let k = keys(&["a", "b"]);
    let p = pool(&k);
    let mut t = KeyTable::default();
    t.record_answer(&p, 0, &answer(429, None, 0), 1_000);
    assert_eq!(t.record_answer(&p, 0, &answer(401, None, 0), 1_100), Change::Disabled);
    assert_eq!(t.state(&p, &k[0].fingerprint, 500_000), Some(KeyState::Disabled { generation: p.generation }));
}

#[test]
fn with_every_key_resting_the_soonest_back_is_tried() {
    let k = keys(&["a", "b", "c"]);
    let p = pool(&k);
    let mut t = KeyTable::default();
    t.record_answer(&p, 0, &answer(429, Some(b"30"), 0), 1_000);
    t.record_answer(&p, 1, &answer(429, Some(b"5"), 0), 1_000);
    t.record_answer(&p, 2, &answer(401, None, 0), 1_000);
    assert_eq!(picks(&p, &t, 2_000, 3), [1, 1, 1], "rests ending first; never the disabled key");
    // Every key disabled: any key, round-robin (the upstream's 401 reaches the client).
    let mut off = KeyTable::default();
    for i in 0..3 {
        off.record_answer(&p, i, &answer(403, None, 0), 1_000);
    }
    assert_eq!(picks(&p, &off, 2_000, 3), [0, 1, 2]);
}

#[test]
fn other_providers_and_removed_keys_are_kept_apart() {
    let k = keys(&["a", "b"]);
    let p = pool(&k);
    let q = Pool { provider: "q", ..p };
    let mut t = KeyTable::default();
    t.record_answer(&q, 0, &answer(429, None, 0), 1_000);
    assert_eq!(picks(&p, &t, 1_000, 2), [0, 1], "q's rest is q's");
    // A key removed from p's pool: its entry goes with p's next write.
    t.record_answer(&p, 1, &answer(401, None, 0), 1_000);
    let only_a = keys(&["a"]);
    let p2 = Pool { generation: p.generation, ..pool(&only_a) };
    t.record_answer(&p2, 0, &answer(429, None, 0), 1_000);
    assert!(t.entries.iter().all(|e| e.fingerprint != k[1].fingerprint), "{t:?}");
    // Ended rests of other providers are dropped too.
    t.record_answer(&p2, 0, &answer(200, None, 999_999), 999_999);
    assert!(t.entries.is_empty(), "{t:?}");
}

#[test]
fn the_table_is_bounded() {
    let k = keys(&["a"]);
    let mut t = KeyTable::default();
    let names: Vec<String> = (0..MAX_ENTRIES + 10).map(|i| format!("p{i}")).collect();
    for name in &names {
        let p = Pool { provider: name, ..pool(&k) };
        t.record_answer(&p, 0, &answer(429, None, 0), 1_000);
    }
    assert_eq!(t.entries.len(), MAX_ENTRIES);
    let last = Pool { provider: &names[MAX_ENTRIES + 5], ..pool(&k) };
    assert_eq!(t.record_answer(&last, 0, &answer(401, None, 0), 1_000), Change::Unchanged, "full: not recorded");
    let mut long = t.encode();
    long.extend_from_slice(b"extra k-00000000 0 rest 99999999\n");
    assert_eq!(KeyTable::parse(&long).entries.len(), MAX_ENTRIES, "a longer shared form is cut");
}

#[test]
fn the_shared_form_round_trips() {
    let k = keys(&["a", "b"]);
    let p = pool(&k);
    let mut t = KeyTable::default();
    t.record_answer(&p, 0, &answer(429, Some(b"2"), 0), 1_000);
    t.record_answer(&p, 1, &answer(401, None, 0), 1_500);
    let text = String::from_utf8(t.encode()).unwrap();
    let want = format!("p {} 1000 rest 3000\np {} 1500 off {}\n", k[0].fingerprint, k[1].fingerprint, p.generation);
    assert_eq!(text, want);
    assert_eq!(KeyTable::parse(text.as_bytes()), t);
    assert_eq!(KeyTable::parse(b"junk\np k 1 nap 2\np k x rest 2\n\xff").entries, []);
}

#[test]
fn the_empty_table_shortcut_agrees_with_record_answer() {
    let k = keys(&["a"]);
    let p = pool(&k);
    for status in [200, 201, 400, 401, 403, 404, 429, 500, 503] {
        let changed = KeyTable::default().record_answer(&p, 0, &answer(status, Some(b"3"), 0), 1_000).changed();
        assert_eq!(answer_changes_empty_table(status), changed, "{status}");
    }
    assert_eq!(Change::Cooldown.event(), Some("cooldown"));
    assert_eq!(Change::Disabled.event(), Some("disabled"));
    assert_eq!(Change::Changed.event(), None);
}
