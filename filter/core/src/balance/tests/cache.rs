//! cache_aware and the prefix index under it.

use super::*;

/// Conversation `id` after `turns` turns: a 2 KiB system prompt of its own, then short turns.
fn conversation(id: usize, turns: usize) -> String {
    let mut text = format!("system {id}: {}\n", "You are a careful assistant. ".repeat(70));
    for t in 0..turns {
        text.push_str(&format!("user: question {t} of conversation {id}?\nassistant: answer {t}.\n"));
    }
    text
}

fn cache_aware(n: usize) -> CacheAware {
    CacheAware::new(n, DEFAULT_MAX_NODES)
}

#[test]
fn the_guard_constants() {
    assert_eq!(MATCH_THRESHOLD, 0.5);
    assert_eq!(BALANCE_ABS_THRESHOLD, 2);
    assert_eq!(BALANCE_REL_THRESHOLD, 1.5);
}

#[test]
fn the_guard_needs_both_margins() {
    // Absolute margin: more than 2 ahead (relative margin already met).
    assert!(!imbalanced(2, 0));
    assert!(imbalanced(3, 0));
    assert!(!imbalanced(3, 1));
    assert!(imbalanced(4, 1));
    // Relative margin: more than 1.5x (absolute margin already met).
    assert!(!imbalanced(15, 10));
    assert!(imbalanced(16, 10));
    assert!(!imbalanced(150, 100));
    assert!(imbalanced(151, 100));
    assert!(!imbalanced(0, 0) && !imbalanced(5, 5) && !imbalanced(u64::MAX, u64::MAX - 1));
}

#[test]
fn a_conversation_stays_on_one_replica_across_turns() {
    let mut s = cache_aware(4);
    let mut rng = Rng(21);
    let mut home: [Option<usize>; 6] = [None; 6];
    for turn in 1..12 {
        for id in 0..home.len() {
            // Each target is as busy as the conversations living on it (within the guard).
            let l: Vec<_> =
                (0..4).map(|t| Load::in_flight(home.iter().filter(|&&h| h == Some(t)).count() as u32)).collect();
            let text = conversation(id, turn);
            let t = s.pick(&ctx(text.as_bytes(), &l, rng.next()), &all(4)).unwrap();
            assert_eq!(*home[id].get_or_insert(t), t, "conversation {id} moved at turn {turn}");
        }
    }
    let used: std::collections::HashSet<_> = home.iter().flatten().collect();
    assert_eq!(used.len(), 4, "new conversations go to the least loaded: {home:?}");
}

/// Pins conversation 0 on a target, then asks again with `load` and returns the pick.
fn pinned_then(in_flight_of: impl Fn(usize) -> u32) -> (usize, usize) {
    let mut s = cache_aware(3);
    let text = conversation(0, 1);
    let home = s.pick(&ctx(text.as_bytes(), &loads(&[0, 0, 0]), 5), &all(3)).unwrap();
    let l: Vec<_> =
        (0..3).map(|i| Load::in_flight(if i == home { in_flight_of(0) } else { in_flight_of(1) })).collect();
    let next = conversation(0, 2);
    (home, s.pick(&ctx(next.as_bytes(), &l, 6), &all(3)).unwrap())
}

#[test]
fn the_load_guard_trips_only_past_both_margins() {
    // (warm queue, least queue, stays?)
    for (warm, least, stays) in
        [(2, 0, true), (3, 0, false), (3, 1, true), (4, 1, false), (15, 10, true), (16, 10, false)]
    {
        let (home, picked) = pinned_then(|i| if i == 0 { warm } else { least });
        assert_eq!(picked == home, stays, "warm {warm} vs least {least}");
    }
}

#[test]
fn after_the_guard_trips_the_conversation_follows_its_new_home() {
    let mut s = cache_aware(2);
    let first = conversation(0, 1);
    let home = s.pick(&ctx(first.as_bytes(), &loads(&[0, 0]), 1), &all(2)).unwrap();
    let other = 1 - home;
    let mut busy = loads(&[0, 0]);
    busy[home] = Load::in_flight(5);
    let second = conversation(0, 2);
    assert_eq!(s.pick(&ctx(second.as_bytes(), &busy, 2), &all(2)), Some(other));
    // Both now hold the start; the new home holds more of it, so equal loads keep it there.
    let third = conversation(0, 3);
    assert_eq!(s.pick(&ctx(third.as_bytes(), &loads(&[0, 0]), 3), &all(2)), Some(other));
}

#[test]
fn the_match_threshold_is_half_the_prefix_inclusive() {
    let held = [b'a'; BLOCK_BYTES];
    // Target 1 holds 64 bytes and is one request busier; 0 is least loaded.
    let l = loads(&[0, 1]);
    let run = |extra: usize| {
        let mut s = cache_aware(2);
        s.record(&ctx(&held, &[], 0), 1);
        let mut text = held.to_vec();
        text.extend(std::iter::repeat_n(b'b', extra));
        s.pick(&ctx(&text, &l, 0), &all(2)).unwrap()
    };
    assert_eq!(run(BLOCK_BYTES), 1, "64 of 128 bytes is exactly the threshold");
    assert_eq!(run(BLOCK_BYTES + 2), 0, "64 of 130 bytes is below it");
}

#[test]
fn without_load_affinity_stands_and_new_prefixes_go_to_the_least_warmed() {
    let mut s = cache_aware(3);
    let mut homes = Vec::new();
    for id in 0..3 {
        let text = conversation(id, 1);
        homes.push(s.pick(&ctx(text.as_bytes(), &[], 0), &all(3)).unwrap());
    }
    homes.sort();
    assert_eq!(homes, [0, 1, 2], "each new conversation to the least-warmed target");
    let text = conversation(1, 2);
    let home = s.pick(&ctx(text.as_bytes(), &[], 9), &all(3)).unwrap();
    for r in 0..10 {
        assert_eq!(s.pick(&ctx(text.as_bytes(), &[], r), &all(3)), Some(home));
    }
}

#[test]
fn only_eligible_targets_are_matched_or_chosen() {
    let mut s = cache_aware(3);
    let text = conversation(0, 1);
    let home = s.pick(&ctx(text.as_bytes(), &loads(&[0, 0, 0]), 1), &all(3)).unwrap();
    let others: Vec<_> = (0..3).filter(|&i| i != home).collect();
    // The warm target is down and idle-looking; the pick goes to the least loaded of the rest.
    let mut l = loads(&[4, 4, 4]);
    l[home] = Load::in_flight(0);
    l[others[1]] = Load::in_flight(2);
    assert_eq!(s.pick(&ctx(text.as_bytes(), &l, 1), &others), Some(others[1]));
}

#[test]
fn the_prefix_index_stays_within_its_bound() {
    let mut index = PrefixIndex::new(0);
    let cap = 2 * PREFIX_BYTES / BLOCK_BYTES; // the floor: twice the longest path
    let mut matched = [0u32; 2];
    for i in 0..200u32 {
        let prompt: Vec<u8> = (0..4096u32).map(|b| (hash64(u64::from(i), &b.to_le_bytes()) % 251) as u8).collect();
        index.insert(&prompt, (i % 2) as usize);
        assert!(index.len() <= cap, "{} > {cap}", index.len());
        index.match_lengths(&prompt, &mut matched);
        assert_eq!(matched[(i % 2) as usize], 4096, "the newest prompt is always held");
    }
    assert_eq!(index.len(), cap);
    assert_eq!(index.evictions(), 200 * 64 - cap as u64);
}

#[test]
fn eviction_drops_old_leaves_and_keeps_shared_prefixes() {
    let mut index = PrefixIndex::new(0); // floor: 1024 blocks
    let system = [b's'; 10 * BLOCK_BYTES];
    let tail = |i: u64| -> Vec<u8> { (0..4096u64).map(|b| (hash64(i, &b.to_le_bytes()) % 251) as u8).collect() };
    let prompt = |i: u64| [system.as_slice(), &tail(i)].concat();
    for i in 0..100 {
        index.insert(&prompt(i), 0);
    }
    assert!(index.evictions() > 0);
    let mut matched = [0u32; 1];
    index.match_lengths(&prompt(0), &mut matched);
    assert_eq!(matched[0] as usize, system.len(), "the first tail is gone, the shared start is not");
    index.match_lengths(&prompt(99), &mut matched);
    assert_eq!(matched[0] as usize, system.len() + 4096);
}

#[test]
fn matching_is_per_target_and_partial_blocks_count_when_exact() {
    let mut index = PrefixIndex::new(DEFAULT_MAX_NODES);
    index.insert(b"short prompt", 2);
    index.insert(&[b'x'; 200], 0);
    let mut m = [0u32; 3];
    index.match_lengths(b"short prompt", &mut m);
    assert_eq!(m, [0, 0, 12]);
    index.match_lengths(&[b'x'; 300], &mut m);
    assert_eq!(m, [192, 0, 0], "three whole blocks; the partial block of 8 differs");
    index.insert(&[b'x'; 200], 70); // beyond the tracked 64 targets: ignored
    index.match_lengths(b"", &mut m);
    assert_eq!(m, [0, 0, 0]);
}

#[test]
fn eviction_trims_the_oldest_prompt_from_its_end() {
    let mut index = PrefixIndex::new(0); // floor: 1024 blocks
    let noise =
        |seed: u64, len: u64| -> Vec<u8> { (0..len).map(|b| (hash64(seed, &b.to_le_bytes()) % 251) as u8).collect() };
    let oldest = noise(0, 4096); // 64 blocks
    index.insert(&oldest, 0);
    for i in 1..16 {
        index.insert(&noise(i, 4096), 1); // 15 × 64: the index is now exactly full
    }
    assert_eq!((index.len(), index.evictions()), (1024, 0));
    index.insert(&noise(99, 10 * BLOCK_BYTES as u64), 1);
    assert_eq!(index.evictions(), 10);
    let mut m = [0u32; 2];
    index.match_lengths(&oldest, &mut m);
    assert_eq!(m[0] as usize, (64 - 10) * BLOCK_BYTES, "the deepest blocks go first, the start stays usable");
}

/// Two worker VMs, each with its own prefix index: a conversation's first request on each goes
/// to the same home (a ring over the targets' names), so it warms one replica, not one per VM;
/// an overloaded home gives way like a warm target does.
#[test]
fn a_new_prefix_goes_home_on_every_vm() {
    let names = ["r0", "r1", "r2", "r3"];
    let (mut vm_a, mut vm_b) =
        (CacheAware::with_names(names, DEFAULT_MAX_NODES), CacheAware::with_names(names, DEFAULT_MAX_NODES));
    let idle = loads(&[0, 0, 0, 0]);
    let mut homes = std::collections::HashSet::new();
    for id in 0..32 {
        let first = conversation(id, 1);
        let a = vm_a.pick(&ctx(first.as_bytes(), &idle, id as u64), &all(4)).unwrap();
        // Another random number, another VM: the same target.
        let next = conversation(id, 2);
        let b = vm_b.pick(&ctx(next.as_bytes(), &idle, 1_000 + id as u64), &all(4)).unwrap();
        assert_eq!(a, b, "conversation {id}");
        homes.insert(a);
    }
    assert_eq!(homes.len(), 4, "homes spread over the targets");
    // The home is busy beyond both margins: the least loaded takes the new prefix instead.
    let text = conversation(99, 1);
    let home =
        CacheAware::with_names(names, DEFAULT_MAX_NODES).choose(&ctx(text.as_bytes(), &idle, 0), &all(4)).unwrap();
    let mut busy = vec![1; 4];
    busy[home] = 4;
    let moved = vm_a.choose(&ctx(text.as_bytes(), &loads(&busy), 0), &all(4)).unwrap();
    assert_ne!(moved, home);
}

/// Turn `turn` of conversation 0 picked by `vm`, with the shared record `table` when given.
fn pick_turn(vm: &mut CacheAware, turn: usize, l: &[Load], table: Option<&dyn PrefixTable>) -> usize {
    let text = conversation(0, turn);
    let shared = table.map(|table| SharedPrefixes { table, seed: 42 });
    vm.pick(&PickContext { shared, ..ctx(text.as_bytes(), l, turn as u64) }, &all(4)).unwrap()
}

/// Where VM B sends turn 3 after VM A's load guard moved turn 2 off the conversation's home.
fn follows_a_move(table: Option<&dyn PrefixTable>) -> (usize, usize, usize) {
    let names = ["r0", "r1", "r2", "r3"];
    let (mut vm_a, mut vm_b) =
        (CacheAware::with_names(names, DEFAULT_MAX_NODES), CacheAware::with_names(names, DEFAULT_MAX_NODES));
    let idle = loads(&[0, 0, 0, 0]);
    let home = pick_turn(&mut vm_b, 1, &idle, table);
    let mut busy = vec![1; 4];
    busy[home] = 6;
    let moved = pick_turn(&mut vm_a, 2, &loads(&busy), table);
    (home, moved, pick_turn(&mut vm_b, 3, &idle, table))
}

/// With the shared record a move made on one VM holds on the others; with per-VM indexes only,
/// VM B still sends the conversation to its old home (the case the shared record exists for).
#[test]
fn a_move_made_on_one_vm_is_followed_on_every_vm_through_the_shared_record() {
    let table = crate::balance::shared_prefix::MapTable::default();
    let (home, moved, next) = follows_a_move(Some(&table));
    assert_ne!(moved, home, "the guard moved turn 2");
    assert_eq!(next, moved, "VM B follows VM A's move");
    let (home, moved, next) = follows_a_move(None);
    assert_ne!(moved, home);
    assert_eq!(next, home, "without the shared record VM B knows only its own pick");
}
