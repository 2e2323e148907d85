//! Flow control: service order, the gate's decisions, bounds, time to live, the bytes.

use super::*;

const T0: u64 = 1_000_000;
const LIMITS: (u32, u64) = (10, 5_000);

fn caller(band: i32, fair: u32) -> Caller {
    Caller { band, fair, owner: Owner { waker: 7, ctx: fair } }
}

/// Queues requests `(band, fair)` in order while nothing is free; returns their numbers.
fn queued(q: &mut Queue, who: &[(i32, u32)]) -> Vec<u64> {
    who.iter()
        .map(|&(band, fair)| match gate(q, None, caller(band, fair), LIMITS, 0, T0) {
            Gate::Wait(seq) => seq,
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn with_room_and_nobody_waiting_a_request_goes_without_touching_the_queue() {
    let mut q = Queue::default();
    assert_eq!(gate(&mut q, None, caller(0, 1), LIMITS, 1, T0), Gate::Go);
    assert!(q.is_empty());
    assert_eq!(q.encode(), Queue::default().encode());
}

#[test]
fn newcomers_queue_behind_waiting_requests_even_with_room() {
    let mut q = Queue::default();
    let first = queued(&mut q, &[(0, 1)])[0];
    // Room for one: the newcomer is second in line, so it waits; the first one goes.
    let second = match gate(&mut q, None, caller(0, 2), LIMITS, 1, T0) {
        Gate::Wait(seq) => seq,
        other => panic!("{other:?}"),
    };
    assert_eq!(gate(&mut q, Some(second), caller(0, 2), LIMITS, 1, T0), Gate::Wait(second));
    assert_eq!(gate(&mut q, Some(first), caller(0, 1), LIMITS, 1, T0), Gate::Went(first));
    assert_eq!(q.confirm(first).map(|e| e.seq), Some(second));
    assert_eq!(gate(&mut q, Some(second), caller(0, 2), LIMITS, 1, T0), Gate::Went(second));
    assert!(q.confirm(second).is_none());
    assert!(q.is_empty());
}

#[test]
fn higher_bands_go_first_and_keys_alternate_within_a_band() {
    let mut q = Queue::default();
    // Batch key 1 queues three, interactive key 9 (band 10) one, batch key 2 two.
    let seqs = queued(&mut q, &[(0, 1), (0, 1), (0, 1), (10, 9), (0, 2), (0, 2)]);
    let order: Vec<u64> = q.order().iter().map(|e| e.seq).collect();
    assert_eq!(order, [seqs[3], seqs[0], seqs[4], seqs[1], seqs[5], seqs[2]]);
    // Serving key 1 moves the band's turn to key 2.
    assert_eq!(gate(&mut q, Some(seqs[3]), caller(10, 9), LIMITS, 1, T0), Gate::Went(seqs[3]));
    q.confirm(seqs[3]);
    assert_eq!(gate(&mut q, Some(seqs[0]), caller(0, 1), LIMITS, 1, T0), Gate::Went(seqs[0]));
    q.confirm(seqs[0]);
    let order: Vec<u64> = q.order().iter().map(|e| e.seq).collect();
    assert_eq!(order, [seqs[4], seqs[1], seqs[5], seqs[2]]);
    // With room for two, the first two in order go.
    assert_eq!(gate(&mut q, Some(seqs[1]), caller(0, 1), LIMITS, 2, T0), Gate::Went(seqs[1]));
    q.confirm(seqs[1]);
    assert_eq!(gate(&mut q, Some(seqs[5]), caller(0, 2), LIMITS, 2, T0), Gate::Wait(seqs[5]), "third in line");
}

#[test]
fn a_full_band_refuses_and_other_bands_still_queue() {
    let mut q = Queue::default();
    let limits = (2, 5_000);
    for _ in 0..2 {
        assert!(matches!(gate(&mut q, None, caller(0, 1), limits, 0, T0), Gate::Wait(_)));
    }
    assert_eq!(gate(&mut q, None, caller(0, 1), limits, 0, T0), Gate::Full);
    assert!(matches!(gate(&mut q, None, caller(5, 1), limits, 0, T0), Gate::Wait(_)));
}

#[test]
fn a_request_past_its_time_to_live_expires_and_abandoned_entries_are_dropped() {
    let mut q = Queue::default();
    let limits = (10, 3 * DEAD_MS);
    let mut seqs = Vec::new();
    for fair in [1, 2] {
        if let Gate::Wait(seq) = gate(&mut q, None, caller(0, fair), limits, 0, T0) {
            seqs.push(seq);
        }
    }
    // The second keeps checking; the first stops (its request went away without leaving).
    let later = T0 + DEAD_MS - 1;
    assert_eq!(gate(&mut q, Some(seqs[1]), caller(0, 2), limits, 0, later), Gate::Wait(seqs[1]));
    assert_eq!(q.rank(seqs[1]), Some(1));
    assert_eq!(gate(&mut q, Some(seqs[1]), caller(0, 2), limits, 0, T0 + DEAD_MS), Gate::Wait(seqs[1]));
    assert_eq!(q.rank(seqs[1]), Some(0), "the silent entry was dropped");
    assert_eq!(gate(&mut q, Some(seqs[1]), caller(0, 2), limits, 1, T0 + limits.1), Gate::Expired);
}

#[test]
fn engine_thresholds_count_unknown_figures_as_saturated() {
    use crate::balance::Load;
    let load = |running: Option<u32>, waiting: Option<u32>, kv_usage: Option<f32>| Load {
        in_flight: 0,
        running,
        waiting,
        kv_usage,
        cache_occupancy: None,
    };
    let fc = FlowControl {
        max_queue: 1,
        ttl_ms: 1,
        max_waiting: Some(4),
        max_running: None,
        max_kv_usage: None,
        bands: vec![],
    };
    assert!(!fc.engine_saturated(&load(None, Some(3), None)));
    assert!(fc.engine_saturated(&load(None, Some(4), None)));
    assert!(fc.engine_saturated(&load(Some(1), None, Some(0.1))), "stale or never scraped");
    let kv = FlowControl { max_waiting: None, max_kv_usage: Some(0.9), ..fc.clone() };
    assert!(kv.engine_saturated(&load(None, None, Some(0.95))) && !kv.engine_saturated(&load(None, None, Some(0.5))));
    let running = FlowControl { max_waiting: None, max_running: Some(8), ..fc.clone() };
    assert!(
        running.engine_saturated(&load(Some(8), Some(0), None))
            && !running.engine_saturated(&load(Some(7), None, None))
    );
    let none = FlowControl { max_waiting: None, ..fc };
    assert!(!none.engine_saturated(&load(None, None, None)), "no threshold, no engine figures needed");
}

#[test]
fn bands_override_the_models_bounds() {
    let band = Band { priority: 10, max_queue: 3, ttl_ms: 100 };
    let fc = FlowControl {
        max_queue: 50,
        ttl_ms: 9_000,
        max_waiting: None,
        max_running: None,
        max_kv_usage: None,
        bands: vec![band],
    };
    assert_eq!((fc.band(10), fc.band(0)), ((3, 100), (50, 9_000)));
}

#[test]
fn the_queue_round_trips_its_bytes_and_junk_is_empty() {
    let mut q = Queue::default();
    let seqs = queued(&mut q, &[(0, 1), (-3, 7), (0, 2), (0, 3)]);
    q.take(seqs[0], T0);
    q.take(seqs[3], T0);
    assert_eq!(q.in_transit(), 2);
    let back = Queue::decode(&q.encode());
    assert_eq!(back, q);
    assert_eq!(back.order(), q.order());
    assert_eq!(Queue::decode(b"junk"), Queue::default());
    let mut truncated = q.encode();
    truncated.pop();
    assert_eq!(Queue::decode(&truncated), Queue::default());
    let mut huge = Queue::default().encode();
    huge.truncate(huge.len() - 4);
    huge.extend_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(Queue::decode(&huge), Queue::default());
}

#[test]
fn a_request_let_go_counts_against_the_room_until_it_confirms() {
    let mut q = Queue::default();
    let seqs = queued(&mut q, &[(0, 1), (0, 2)]);
    // Two VMs read the in-flight counts at the same moment: both see one free slot. The first
    // lets its request go; the second, reading the queue after it, must not take the same slot.
    assert_eq!(gate(&mut q, Some(seqs[0]), caller(0, 1), LIMITS, 1, T0), Gate::Went(seqs[0]));
    assert_eq!(gate(&mut q, Some(seqs[1]), caller(0, 2), LIMITS, 1, T0), Gate::Wait(seqs[1]));
    // A newcomer with the queue empty but one in transit waits too.
    let mut alone = Queue::default();
    let s = queued(&mut alone, &[(0, 1)])[0];
    assert_eq!(gate(&mut alone, Some(s), caller(0, 1), LIMITS, 1, T0), Gate::Went(s));
    assert!(matches!(gate(&mut alone, None, caller(0, 2), LIMITS, 1, T0), Gate::Wait(_)));
    // Confirmed, the slot is in the in-flight counts: the next in line is named for a wake-up.
    assert_eq!(q.confirm(seqs[0]).map(|e| (e.seq, e.waker, e.ctx)), Some((seqs[1], 7, 2)));
    assert_eq!(gate(&mut q, Some(seqs[1]), caller(0, 2), LIMITS, 1, T0), Gate::Went(seqs[1]));
}

#[test]
fn a_request_that_lost_its_target_gets_its_place_and_its_turn_back() {
    let mut q = Queue::default();
    // Key 1 was served last; key 2 and key 1 wait: key 2 is next.
    let seqs = queued(&mut q, &[(0, 1), (0, 2), (0, 1)]);
    assert_eq!(gate(&mut q, Some(seqs[0]), caller(0, 1), LIMITS, 1, T0), Gate::Went(seqs[0]));
    assert!(q.confirm(seqs[0]).is_some());
    assert_eq!(gate(&mut q, Some(seqs[1]), caller(0, 2), LIMITS, 1, T0), Gate::Went(seqs[1]));
    // Its target filled in between: back in line, and still first (key 1 does not jump it).
    assert!(q.restore(seqs[1], T0));
    assert!(!q.restore(seqs[1], T0), "only once");
    assert_eq!(q.order().iter().map(|e| e.seq).collect::<Vec<_>>(), [seqs[1], seqs[2]]);
    assert_eq!(q.in_transit(), 0);
}

#[test]
fn a_transit_never_confirmed_stops_counting_after_its_bound() {
    let mut q = Queue::default();
    let seqs = queued(&mut q, &[(0, 1), (0, 2)]);
    assert_eq!(gate(&mut q, Some(seqs[0]), caller(0, 1), LIMITS, 1, T0), Gate::Went(seqs[0]));
    let later = T0 + TRANSIT_MS;
    assert_eq!(gate(&mut q, Some(seqs[1]), caller(0, 2), LIMITS, 1, later), Gate::Went(seqs[1]));
}

#[test]
fn a_newcomer_that_goes_past_waiting_requests_is_in_transit_under_its_own_number() {
    let mut q = Queue::default();
    let batch = queued(&mut q, &[(0, 1)])[0];
    // A slot is free and the batch request has not yet been woken: a higher band's newcomer
    // goes first, through an entry of its own that it must confirm or restore, as any let go.
    let Gate::Went(seq) = gate(&mut q, None, caller(10, 2), LIMITS, 1, T0) else { panic!("the newcomer waits") };
    assert_ne!(seq, batch);
    assert_eq!(q.in_transit(), 1, "it counts against the room");
    assert_eq!(gate(&mut q, Some(batch), caller(0, 1), LIMITS, 1, T0), Gate::Wait(batch));
    // Confirmed, its slot is in the in-flight counts, not in the queue: the batch request is
    // named for a wake-up and goes with the next free slot, with nothing left behind in transit.
    assert_eq!(q.confirm(seq).map(|e| e.seq), Some(batch));
    assert_eq!(q.in_transit(), 0);
    assert_eq!(gate(&mut q, Some(batch), caller(0, 1), LIMITS, 1, T0), Gate::Went(batch));
}
