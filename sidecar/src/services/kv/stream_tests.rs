//! The sequence rules, one case per test.

use super::*;

fn p(n: u8) -> Bytes {
    Bytes::from(vec![n])
}

fn steps(seq: &mut Sequence, f: impl FnOnce(&mut Sequence, &mut Vec<Step>)) -> Vec<Step> {
    let mut out = Vec::new();
    f(seq, &mut out);
    out
}

#[test]
fn in_order_batches_apply_and_duplicates_drop() {
    let mut s = Sequence::new(true);
    assert_eq!(steps(&mut s, |s, o| s.live(0, p(0), o)), [Step::Apply(0, p(0))]);
    assert_eq!(steps(&mut s, |s, o| s.live(1, p(1), o)), [Step::Apply(1, p(1))]);
    assert_eq!(steps(&mut s, |s, o| s.live(1, p(1), o)), []);
    assert_eq!(s.counts.duplicates, 1);
}

/// A replay-capable stream that has applied batches up to `last`.
fn at(last: u64) -> Sequence {
    let mut s = Sequence::new(true);
    for n in 0..=last {
        s.live(n, p(n as u8), &mut Vec::new());
    }
    s
}

#[test]
fn a_gap_is_replayed_in_order_with_live_batches_held() {
    let mut s = at(7);
    assert_eq!(steps(&mut s, |s, o| s.live(9, p(9), o)), [Step::Replay(8)]);
    assert!(s.replaying());
    assert_eq!(steps(&mut s, |s, o| s.live(10, p(10), o)), []);
    assert_eq!(steps(&mut s, |s, o| s.replayed(7, p(7), o)), [], "already applied");
    assert_eq!(steps(&mut s, |s, o| s.replayed(8, p(8), o)), [Step::Apply(8, p(8))]);
    assert_eq!(steps(&mut s, |s, o| s.replayed(9, p(9), o)), [Step::Apply(9, p(9))]);
    assert_eq!(steps(&mut s, |s, o| s.replay_done(o)), [Step::Apply(10, p(10))], "9 held but replayed already");
    assert_eq!((s.last(), s.counts.gaps, s.counts.replays), (Some(10), 1, 1));
}

#[test]
fn a_gap_replay_cannot_fill_clears() {
    let mut s = at(3);
    s.live(9, p(9), &mut Vec::new());
    // The engine's buffer starts at 6: 4 and 5 are gone.
    assert_eq!(steps(&mut s, |s, o| s.replayed(6, p(6), o)), [Step::Clear, Step::Apply(6, p(6))]);
    // A replay that times out with nothing: the held batch is past the gap.
    let mut t = at(3);
    t.live(9, p(9), &mut Vec::new());
    assert_eq!(steps(&mut t, |s, o| s.replay_done(o)), [Step::Clear, Step::Apply(9, p(9))]);
}

#[test]
fn without_replay_a_gap_clears() {
    let mut s = Sequence::new(false);
    s.live(0, p(0), &mut Vec::new());
    assert_eq!(steps(&mut s, |s, o| s.live(5, p(5), o)), [Step::Clear, Step::Apply(5, p(5))]);
    assert_eq!(s.counts.gaps, 1);
}

#[test]
fn a_number_going_back_is_a_restart() {
    let mut s = Sequence::new(false);
    s.live(41, p(1), &mut Vec::new());
    assert_eq!(steps(&mut s, |s, o| s.live(0, p(0), o)), [Step::Clear, Step::Apply(0, p(0))]);
    assert_eq!(s.counts.restarts, 1);
    // With replay, a restarted engine first seen past 0 has its earlier batches asked for.
    let mut r = Sequence::new(true);
    r.live(0, p(0), &mut Vec::new());
    r.live(1, p(1), &mut Vec::new());
    assert_eq!(steps(&mut r, |s, o| s.live(3, p(3), o)), [Step::Replay(2)]);
    r.replay_done(&mut Vec::new());
    assert_eq!(steps(&mut r, |s, o| s.live(2, p(2), o)), [Step::Clear, Step::Replay(0)]);
    assert_eq!(steps(&mut r, |s, o| s.replayed(0, p(0), o)), [Step::Apply(0, p(0))]);
    assert_eq!(steps(&mut r, |s, o| s.replayed(1, p(1), o)), [Step::Apply(1, p(1))]);
    assert_eq!(steps(&mut r, |s, o| s.replay_done(o)), [Step::Apply(2, p(2))]);
}

#[test]
fn a_restarted_engine_repeating_the_last_number_is_told_apart() {
    let mut s = Sequence::new(false);
    s.live(0, p(0), &mut Vec::new());
    assert_eq!(steps(&mut s, |s, o| s.live(0, p(0), o)), [], "the same batch again");
    assert_eq!(steps(&mut s, |s, o| s.live(0, p(9), o)), [Step::Clear, Step::Apply(0, p(9))], "another batch 0");
    s.connected();
    assert_eq!(steps(&mut s, |s, o| s.live(0, p(9), o)), [Step::Clear, Step::Apply(0, p(9))], "after a reconnect");
    s.connected();
    assert_eq!(steps(&mut s, |s, o| s.live(1, p(1), o)), [Step::Apply(1, p(1))], "a reconnect to the same engine");
    assert_eq!(s.counts.restarts, 2);
}

#[test]
fn a_resync_fetches_what_a_new_subscription_missed() {
    let mut s = Sequence::new(true);
    s.connected();
    assert_eq!(s.resync(), Some(0));
    assert_eq!(s.resync(), None, "one at a time");
    assert_eq!(steps(&mut s, |s, o| s.live(2, p(2), o)), [], "held");
    assert_eq!(steps(&mut s, |s, o| s.replayed(0, p(0), o)), [Step::Apply(0, p(0))]);
    assert_eq!(steps(&mut s, |s, o| s.replayed(1, p(1), o)), [Step::Apply(1, p(1))]);
    assert_eq!(steps(&mut s, |s, o| s.replay_done(o)), [Step::Apply(2, p(2))]);
    assert_eq!(Sequence::new(false).resync(), None);
}

#[test]
fn a_reconnection_to_the_same_engine_goes_on() {
    let mut s = at(2);
    s.connected();
    assert_eq!(s.resync(), Some(0), "the whole buffer, to compare");
    for n in 0..=2 {
        assert_eq!(steps(&mut s, |s, o| s.replayed(n, p(n as u8), o)), [], "already applied");
    }
    assert_eq!(steps(&mut s, |s, o| s.replayed(3, p(3), o)), [Step::Apply(3, p(3))], "missed while away");
    assert_eq!(steps(&mut s, |s, o| s.live(3, p(3), o)), [], "held, then a duplicate");
    assert_eq!(steps(&mut s, |s, o| s.replay_done(o)), []);
    assert_eq!((s.last(), s.counts.restarts), (Some(3), 0));
}

#[test]
fn a_reconnection_to_a_restarted_engine_starts_over() {
    // The new engine's batch 2 differs from the old one's.
    let mut s = at(2);
    s.connected();
    s.resync();
    assert_eq!(steps(&mut s, |s, o| s.replayed(0, p(10), o)), []);
    assert_eq!(steps(&mut s, |s, o| s.replayed(1, p(11), o)), []);
    let restarted = [Step::Clear, Step::Apply(0, p(10)), Step::Apply(1, p(11)), Step::Apply(2, p(12))];
    assert_eq!(steps(&mut s, |s, o| s.replayed(2, p(12), o)), restarted);
    // The new engine has published less than the old one had: its numbers stay below.
    let mut t = at(5);
    t.connected();
    t.resync();
    t.replayed(0, p(10), &mut Vec::new());
    t.live(1, p(11), &mut Vec::new());
    let restarted = [Step::Clear, Step::Apply(0, p(10)), Step::Apply(1, p(11))];
    assert_eq!(steps(&mut t, |s, o| s.replay_done(o)), restarted, "the held live batch follows");
    assert_eq!(t.counts.restarts, 1);
    // Nothing replayed (a new engine with nothing yet): the first live batch decides.
    let mut u = at(5);
    u.connected();
    u.resync();
    u.replay_done(&mut Vec::new());
    assert_eq!(steps(&mut u, |s, o| s.live(0, p(10), o)), [Step::Clear, Step::Apply(0, p(10))]);
}

#[test]
fn a_new_subscription_asks_for_what_it_missed() {
    let mut s = Sequence::new(true);
    assert_eq!(steps(&mut s, |s, o| s.live(5, p(5), o)), [Step::Replay(0)]);
    let mut t = Sequence::new(true);
    assert_eq!(steps(&mut t, |s, o| s.live(0, p(0), o)), [Step::Apply(0, p(0))], "nothing before 0");
    let mut u = Sequence::new(false);
    assert_eq!(steps(&mut u, |s, o| s.live(5, p(5), o)), [Step::Apply(5, p(5))], "no replay socket");
}
