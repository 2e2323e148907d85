//! Proves the per-request authentication path allocates nothing once warm.
//!
//! This is its own test binary so the counting `#[global_allocator]` affects nothing else.
//! Only allocations made by the measuring thread while a measurement is running are counted
//! (a `const` thread-local flag), so the test harness's own threads cannot disturb the count.
//!
//! The measured path is what the filter runs for every request: [`extract_key`] on the raw
//! header values, [`Config::authenticate`] (one SHA-256, one hash lookup) and
//! [`Config::authorize`] (name resolution and the grant check) for a granted public model, an
//! alias and a pinned `provider/model`. To see the test fail, add e.g.
//! `let _ = requested.to_string();` to `Config::authorize` in `src/grants.rs`: the count
//! becomes 1 per call and `steady_state_auth_path_does_not_allocate` reports it.
//! `counter_sees_allocations` keeps the counter itself honest.

// A global allocator must implement the `unsafe` GlobalAlloc trait; it only forwards to System.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;

use ferrogate_core::{extract_key, Caller, Config, KeyMemo, RawConfig};

struct Counting;

thread_local! {
    // `const` initialisers: no lazy initialisation, so touching these never allocates.
    static MEASURING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn note_allocation() {
    // `try_with`: thread-locals may already be gone while a thread is being torn down.
    let measuring = MEASURING.try_with(Cell::get).unwrap_or(false);
    if measuring {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
    }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by this thread while running `f`.
fn allocations_in(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|n| n.set(0));
    MEASURING.with(|m| m.set(true));
    f();
    MEASURING.with(|m| m.set(false));
    ALLOCATIONS.with(Cell::get)
}

fn keys_config() -> Result<Config, Box<dyn std::error::Error>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/config/keys.yaml");
    let raw: RawConfig = serde_saphyr::from_str(&std::fs::read_to_string(path)?)?;
    Ok(Config::try_from(raw)?)
}

/// One request's auth work, as the filter does it: raw header bytes in, a decision out.
fn auth_path(config: &Config, authorization: &[u8], requested: &str) -> bool {
    let key = extract_key(Some(authorization), None, Some(b"ignored"));
    let Ok(caller) = config.authenticate(black_box(key), black_box(1_700_000_000)) else {
        return false;
    };
    config.authorize(caller, black_box(requested)).is_ok()
}

#[test]
fn steady_state_auth_path_does_not_allocate() {
    let config = keys_config().unwrap();
    // alice: group dev grants chat (+ its fallbacks), which `default` aliases, and local/*.
    let requests = [
        (b"Bearer sk-alice".as_slice(), "chat"),
        (b"bearer sk-alice".as_slice(), "default"),
        (b"Bearer sk-alice".as_slice(), "local/any-model"),
        (b"Bearer sk-alice".as_slice(), "gpt"),
        (b"Bearer sk-bob".as_slice(), "pool/llama-70b"),
    ];
    // Warm-up: anything lazily initialised (none expected) happens here, not below.
    for (auth, model) in requests {
        assert!(auth_path(&config, auth, model), "{model} should be allowed");
    }
    for (auth, model) in requests {
        let n = allocations_in(|| {
            for _ in 0..100 {
                black_box(auth_path(&config, black_box(auth), model));
            }
        });
        assert_eq!(n, 0, "{model}: {n} allocation(s) in 100 requests");
    }
    assert_eq!(config.authenticate(Some(b"sk-alice"), 0), Ok(Caller::Key(0)));
}

/// The filter's form: the per-VM key memo in front of SHA-256. Once a key is remembered the
/// path must stay allocation-free too (a miss stores the key, which allocates, once).
#[test]
fn steady_state_memo_auth_path_does_not_allocate() {
    let config = keys_config().unwrap();
    let mut memo = KeyMemo::default();
    let keys = [b"sk-alice".as_slice(), b"sk-bob".as_slice()];
    for key in keys {
        assert!(config.authenticate_memo(Some(key), 0, &mut memo).is_ok());
    }
    for key in keys {
        let n = allocations_in(|| {
            for _ in 0..100 {
                let caller = config.authenticate_memo(black_box(Some(key)), black_box(0), &mut memo);
                black_box(caller.is_ok_and(|c| config.authorize(c, black_box("chat")).is_ok()));
            }
        });
        assert_eq!(n, 0, "{n} allocation(s) in 100 requests");
    }
}

#[test]
fn counter_sees_allocations() {
    // If this fails, a zero above would prove nothing.
    let n = allocations_in(|| {
        black_box(String::from("not free"));
    });
    assert_eq!(n, 1);
    // Failure paths build an error message, and that is counted too.
    let config = keys_config().unwrap();
    let n = allocations_in(|| {
        black_box(config.authorize(Caller::Key(3), "chat").is_err());
    });
    assert!(n >= 1, "{n}");
}

/// Counters in a fixed array, like shared data seen from the filter: updating one allocates
/// nothing, so the count below is the admission logic's own.
struct ArrayStore {
    keys: [&'static str; 8],
    counters: [ferrogate_core::limits::Counter; 8],
}

impl ferrogate_core::limits::CounterStore for ArrayStore {
    fn update<E>(
        &mut self,
        key: &str,
        f: &mut dyn FnMut(&mut ferrogate_core::limits::Counter) -> Result<(), E>,
    ) -> Result<(), E> {
        let i = self.keys.iter().position(|k| *k == key).unwrap_or(0);
        let mut c = self.counters[i];
        f(&mut c)?;
        self.counters[i] = c;
        Ok(())
    }
}

/// Admission (reserve on every limit, or on none) and settlement allocate nothing.
#[test]
fn limit_admission_does_not_allocate() -> Result<(), Box<dyn std::error::Error>> {
    use ferrogate_core::limits::{admit, Amounts};
    let yaml = r#"
providers: [{ name: p, kind: openai, base_url: "http://h" }]
models: [{ name: m, targets: [{ provider: p, model: x }] }]
limits: { requests_per_day: 1000000 }
groups: [{ name: team, models: ["*"], limits: { tokens_per_minute: 100000000, cost_usd_per_month: 1000 } }]
keys: [{ name: a, digest: "sha256:1111111111111111111111111111111111111111111111111111111111111111", groups: [team], limits: { requests_per_minute: 1000000 } }]
"#;
    let config = Config::try_from(serde_saphyr::from_str::<RawConfig>(yaml)?)?;
    let plan = config.limit_plans.for_key(Some(0));
    let keys: Vec<&'static str> = plan.iter().map(|s| &*Box::leak(s.counter.clone().into_boxed_str())).collect();
    let mut store = ArrayStore { keys: [""; 8], counters: Default::default() };
    store.keys[..keys.len()].copy_from_slice(&keys);
    let amounts = Amounts::model(500, Some(30));
    let n = allocations_in(|| {
        for i in 0..100u64 {
            let r = admit(plan, amounts, 1_000_000 + i, &mut store).expect("room");
            r.settle(plan, Amounts::model(20, Some(3)), 1_000_500 + i, &mut store);
        }
    });
    assert_eq!(n, 0, "admission and settlement allocated {n} times");
    assert_eq!(store.counters[0].own.current, 100, "every request counted");
    Ok(())
}

/// A cut stream's allowance (the room left on its limits, turned into completion tokens)
/// allocates nothing.
#[test]
fn the_stream_allowance_does_not_allocate() -> Result<(), Box<dyn std::error::Error>> {
    use ferrogate_core::limits::cut::{allowance, Room};
    use ferrogate_core::limits::{admit, Amounts};
    let yaml = r#"
providers: [{ name: p, kind: openai, base_url: "http://h" }]
models: [{ name: m, targets: [{ provider: p, model: x }] }]
keys: [{ name: a, digest: "sha256:1111111111111111111111111111111111111111111111111111111111111111", models: ["*"], limits: { tokens_per_day: 100000000, cost_usd_per_month: 1000, overrun: cut } }]
"#;
    let config = Config::try_from(serde_saphyr::from_str::<RawConfig>(yaml)?)?;
    let plan = config.limit_plans.for_key(Some(0));
    let keys: Vec<&'static str> = plan.iter().map(|s| &*Box::leak(s.counter.clone().into_boxed_str())).collect();
    let mut store = ArrayStore { keys: [""; 8], counters: Default::default() };
    store.keys[..keys.len()].copy_from_slice(&keys);
    let amounts = Amounts::model(500, Some(30));
    let r = admit(plan, amounts, 1_000_000, &mut store).expect("room");
    let mut tokens = 0;
    let n = allocations_in(|| {
        for i in 0..100u64 {
            let room = Room::read(plan, r.amounts, 1_000_000 + i, &mut store);
            tokens = allowance(400, room, Some(2.0)).map_or(0, |a| a.completion_tokens);
        }
    });
    assert_eq!(n, 0, "the allowance allocated {n} times");
    assert_eq!(tokens, 400 + 100_000_000 - 500, "the token limit is the tighter");
    Ok(())
}
