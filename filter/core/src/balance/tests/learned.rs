//! pipeline, predicted_latency and lora_aware: the strategies that learn from traffic.

use super::*;

fn pipeline(weights: &[u32]) -> Pipeline {
    Pipeline::new(weights.to_vec(), PipelineWeights::default())
}

#[test]
fn pipeline_keeps_a_session_on_its_target() {
    let mut p = pipeline(&[1, 1, 1]);
    let mut rng = Rng(2);
    let first = PickContext { session: Some("s-1"), ..ctx(b"", &[], rng.next()) };
    let home = p.pick(&first, &all(3)).unwrap();
    for _ in 0..50 {
        // One request busier than the others: stickiness (3) outweighs the load difference.
        let mut l = loads(&[0, 0, 0]);
        l[home] = Load::in_flight(2);
        let again = PickContext { session: Some("s-1"), ..ctx(b"", &l, rng.next()) };
        assert_eq!(p.pick(&again, &all(3)), Some(home));
    }
    let away: Vec<_> = (0..3).filter(|&i| i != home).collect();
    let down = PickContext { session: Some("s-1"), ..ctx(b"", &[], 1) };
    assert!(away.contains(&p.pick(&down, &away).unwrap()), "an ineligible home is not forced");
    assert_eq!(p.sessions(), 1);
}

#[test]
fn pipeline_session_table_is_bounded() {
    let mut p = pipeline(&[1, 1]);
    for i in 0..DEFAULT_SESSIONS + 100 {
        let s = format!("s{i}");
        p.pick(&PickContext { session: Some(&s), ..ctx(b"", &[], i as u64) }, &all(2));
    }
    assert_eq!(p.sessions(), DEFAULT_SESSIONS);
}

#[test]
fn pipeline_weights_steer_until_load_outweighs_them() {
    let mut p = pipeline(&[3, 1]);
    let mut rng = Rng(4);
    for _ in 0..20 {
        assert_eq!(p.pick(&ctx(b"", &[], rng.next()), &all(2)), Some(0));
    }
    // Weight 1 + load 1/2 = 1.5 beats weight 1/3 + load 1.
    assert_eq!(p.pick(&ctx(b"", &loads(&[1, 0]), 1), &all(2)), Some(0));
    // Weight 1 + load 1/4 = 1.25 loses to 1/3 + 1.
    assert_eq!(p.pick(&ctx(b"", &loads(&[3, 0]), 1), &all(2)), Some(1));
}

#[test]
fn pipeline_prefers_the_target_holding_the_prefix_and_breaks_ties_at_random() {
    let mut p = pipeline(&[1, 1, 1]);
    let text = "system: a long shared instruction block. ".repeat(40);
    let home = p.pick(&ctx(text.as_bytes(), &[], 3), &all(3)).unwrap();
    let mut l = loads(&[0, 0, 0]);
    l[home] = Load::in_flight(1);
    for r in 0..20 {
        assert_eq!(p.pick(&ctx(text.as_bytes(), &l, r), &all(3)), Some(home));
    }
    let mut seen = [0; 3];
    let mut rng = Rng(8);
    for _ in 0..300 {
        seen[p.pick(&ctx(b"", &[], rng.next()), &all(3)).unwrap()] += 1;
    }
    assert!(seen.iter().all(|&n| n > 60), "{seen:?}");
}

/// Trains `m` on `samples` requests of a target whose true latency is `w0 + w1·q + w2·k`.
fn train(m: &mut PredictedLatency, target: usize, w: [f64; 3], samples: usize, rng: &mut Rng) {
    for _ in 0..samples {
        let (q, tokens) = (rng.below(20), rng.below(8000));
        let ms = w[0] + w[1] * q as f64 + w[2] * tokens as f64 / 1000.0;
        let outcome =
            Outcome { success: true, latency_ms: ms as u64, ttft_ms: None, queue_depth: q, prompt_tokens: tokens };
        m.observe(target, Observed::Finished(outcome));
    }
}

const FAST_IDLE: [f64; 3] = [100.0, 50.0, 20.0];
const SLOW_IDLE: [f64; 3] = [400.0, 10.0, 20.0];

#[test]
fn predicted_latency_is_least_loaded_while_cold() {
    let mut m = PredictedLatency::new(2);
    let mut rng = Rng(6);
    train(&mut m, 0, FAST_IDLE, 50, &mut rng);
    train(&mut m, 1, SLOW_IDLE, MIN_SAMPLES as usize - 1, &mut rng);
    assert_eq!(m.predict(1, 0, 0), None);
    assert_eq!(m.pick(&ctx(b"", &loads(&[5, 0]), 1), &all(2)), Some(1), "cold: least loaded");
    train(&mut m, 1, SLOW_IDLE, 1, &mut rng);
    assert!(m.predict(1, 0, 0).is_some());
}

#[test]
fn predicted_latency_learns_each_target_and_picks_the_fastest() {
    let mut m = PredictedLatency::new(2);
    let mut rng = Rng(9);
    train(&mut m, 0, FAST_IDLE, 3000, &mut rng);
    train(&mut m, 1, SLOW_IDLE, 3000, &mut rng);
    for (target, truth) in [(0, FAST_IDLE), (1, SLOW_IDLE)] {
        let w = m.coefficients(target).unwrap();
        for (got, want) in w.iter().zip(truth) {
            assert!((got - want).abs() <= want * 0.1, "target {target}: {w:?} vs {truth:?}");
        }
    }
    let text = vec![b'x'; 8000]; // 2000 tokens
                                 // Equal queues: 100 + 40 vs 400 + 40.
    assert_eq!(m.pick(&ctx(&text, &loads(&[0, 0]), 1), &all(2)), Some(0));
    // Busier yet faster: 100 + 100 + 40 vs 400 + 40; least-loaded would say 1.
    assert_eq!(m.pick(&ctx(&text, &loads(&[2, 0]), 1), &all(2)), Some(0));
    // Queue 10 on the fast one: 600 + 40 vs 400 + 40.
    assert_eq!(m.pick(&ctx(&text, &loads(&[10, 0]), 1), &all(2)), Some(1));
}

#[test]
fn failures_do_not_train_and_outliers_are_capped() {
    let mut m = PredictedLatency::new(1);
    let failed = Outcome { success: false, latency_ms: 5, ..Outcome::default() };
    m.observe(0, Observed::Finished(failed));
    m.observe(0, Observed::Started);
    assert_eq!((m.samples(0), m.latency_ewma_ms(0)), (0, None));
    let mut rng = Rng(10);
    train(&mut m, 0, FAST_IDLE, 2000, &mut rng);
    let before = m.predict(0, 4, 1000).unwrap();
    let week = Outcome { success: true, latency_ms: 7 * 24 * 3_600_000, ..Outcome::default() };
    m.observe(0, Observed::Finished(week));
    let after = m.predict(0, 4, 1000).unwrap();
    assert!(after < before * 1.5, "one sample moved {before} to {after}");
    assert!(m.coefficients(0).unwrap().iter().all(|&w| (0.0..=MAX_SAMPLE_MS).contains(&w)));
    train(&mut m, 0, FAST_IDLE, 300, &mut rng);
    let p = m.predict(0, 4, 1000).unwrap();
    assert!((p - 320.0).abs() < 32.0, "recovered to {p}");
}

#[test]
fn the_time_to_first_token_is_learned_when_streamed() {
    let mut m = PredictedLatency::new(1);
    let streamed = Outcome { success: true, latency_ms: 9000, ttft_ms: Some(120), ..Outcome::default() };
    for _ in 0..20 {
        m.observe(0, Observed::Finished(streamed));
    }
    let ewma = m.latency_ewma_ms(0).unwrap();
    assert!((ewma - 120.0).abs() < 1.0, "{ewma}");
    assert!((m.predict(0, 0, 0).unwrap() - 120.0).abs() < 5.0);
}

fn lora_ctx<'a>(adapter: &'a str, text: &'a [u8], l: &'a [Load]) -> PickContext<'a> {
    PickContext { adapter: Some(adapter), ..ctx(text, l, 0) }
}

#[test]
fn lora_aware_prefers_targets_holding_the_adapter_over_load() {
    let mut s = LoraAware::new(3, 2);
    let home = s.pick(&lora_ctx("sql", b"q1", &loads(&[1, 0, 1])), &all(3)).unwrap();
    assert_eq!(home, 1);
    assert!(s.holds(1, "sql") && !s.holds(0, "sql"));
    // Much busier, still preferred: loading the adapter elsewhere costs more.
    assert_eq!(s.pick(&lora_ctx("sql", b"q2", &loads(&[0, 9, 0])), &all(3)), Some(1));
    // Another adapter balances on load; without an adapter the scorer is neutral.
    assert_eq!(s.pick(&lora_ctx("chat", b"q3", &loads(&[0, 9, 3])), &all(3)), Some(0));
    let l = loads(&[4, 9, 3]);
    assert_eq!(s.pick(&ctx(b"q4", &l, 0), &all(3)), Some(2));
    // The resident target is down: fall back to the rest, which then holds the adapter too.
    assert_eq!(s.pick(&lora_ctx("sql", b"q5", &loads(&[2, 0, 1])), &[0, 2]), Some(2));
    assert!(s.holds(2, "sql"));
}

#[test]
fn lora_residency_is_bounded_by_max_loras() {
    let mut s = LoraAware::new(2, 2);
    for adapter in ["a", "b", "a", "c"] {
        s.pick(&lora_ctx(adapter, b"", &[]), &[0]);
    }
    assert!(s.holds(0, "a") && s.holds(0, "c") && !s.holds(0, "b"), "a was refreshed, b is the oldest");
    let mut one = LoraAware::new(1, DEFAULT_MAX_LORAS);
    for adapter in ["a", "b"] {
        one.pick(&lora_ctx(adapter, b"", &[]), &[0]);
    }
    assert!(one.holds(0, "b") && !one.holds(0, "a"));
}

#[test]
fn lora_aware_uses_prefix_affinity_among_holders() {
    let mut s = LoraAware::new(3, 4);
    let text = "system: shared tool instructions. ".repeat(60);
    for t in [0, 2] {
        s.pick(&lora_ctx("sql", b"warm-up", &[]), &[t]);
    }
    s.pick(&lora_ctx("sql", text.as_bytes(), &[]), &[2]);
    // Both hold the adapter; 2 holds the prefix and is one request busier: prefix wins.
    assert_eq!(s.pick(&lora_ctx("sql", text.as_bytes(), &loads(&[0, 0, 1])), &all(3)), Some(2));
}

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("pool/m@10.0.0.{i}:8000")).collect()
}

fn report<'a>(adapters: &'a [String], max_loras: Option<u32>) -> Residency<'a> {
    Residency { adapters, max_loras }
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn lora_engine_reports_beat_learned_residency() {
    let mut s = LoraAware::new(3, 1);
    s.pick(&lora_ctx("sql", b"q", &[]), &[0]);
    assert!(s.holds(0, "sql"));
    // The engines report sql on 2 and chat on 0: the learned belief is replaced.
    let (sql, chat) = (strings(&["sql"]), strings(&["chat"]));
    s.residency(0, report(&chat, Some(1)));
    s.residency(2, report(&sql, Some(1)));
    assert!(!s.holds(0, "sql") && s.holds(0, "chat") && s.holds(2, "sql"));
    let l = loads(&[0, 0, 3]);
    for random in 0..8 {
        let c = PickContext { random, ..lora_ctx("sql", b"q", &l) };
        assert_eq!(s.pick(&c, &all(3)), Some(2));
    }
}

#[test]
fn lora_a_repeated_report_does_not_undo_newer_picks() {
    let mut s = LoraAware::new(1, 1);
    let a = strings(&["a"]);
    s.residency(0, report(&a, None));
    s.pick(&lora_ctx("b", b"", &[]), &[0]); // sent since the scrape: the engine loads b
    s.residency(0, report(&a, None)); // the same (older) report again
    assert!(s.holds(0, "b") && !s.holds(0, "a"));
    let c = strings(&["c"]);
    s.residency(0, report(&c, None)); // a new report: the engine moved on
    assert!(s.holds(0, "c") && !s.holds(0, "b"));
    // An empty report (an idle vLLM lists nothing) is no report: the belief stays.
    s.residency(0, report(&[], None));
    assert!(s.holds(0, "c"));
}

#[test]
fn lora_reported_capacity_bounds_residency() {
    let mut s = LoraAware::new(1, 1);
    let ab = strings(&["b", "a", "a", ""]);
    s.residency(0, report(&ab, Some(3)));
    assert!(s.holds(0, "a") && s.holds(0, "b"));
    s.pick(&lora_ctx("c", b"", &[]), &[0]);
    assert!(s.holds(0, "a") && s.holds(0, "b") && s.holds(0, "c"), "capacity 3 from the engine");
    s.pick(&lora_ctx("d", b"", &[]), &[0]);
    assert!(
        s.holds(0, "d") && s.holds(0, "c") && [s.holds(0, "a"), s.holds(0, "b")].iter().filter(|h| **h).count() == 1
    );
    // Learned with another balancer's picks on the same engine.
    s.adapter_loaded(0, "e");
    assert!(s.holds(0, "e"));
}

#[test]
fn lora_a_new_adapter_goes_where_there_is_room() {
    let mut s = LoraAware::new(3, 1);
    s.pick(&lora_ctx("a", b"", &[]), &[0]);
    s.pick(&lora_ctx("b", b"", &[]), &[1]);
    let l = loads(&[0, 0, 1]);
    for random in 0..8 {
        let mut fresh = LoraAware::new(3, 1);
        fresh.adapter_loaded(0, "a");
        fresh.adapter_loaded(1, "b");
        let c = PickContext { random, ..lora_ctx("c", b"", &l) };
        assert_eq!(fresh.pick(&c, &all(3)), Some(2), "2 has room though busier");
    }
    // Every target full: loading somewhere is unavoidable, still a pick.
    let l = loads(&[0, 0, 0]);
    let c = lora_ctx("c", b"", &l);
    s.pick(&lora_ctx("x", b"", &[]), &[2]);
    assert!(s.pick(&c, &all(3)).is_some());
}

#[test]
fn lora_a_new_adapter_has_the_same_home_on_every_vm() {
    let names = names(4);
    let l = loads(&[1, 1, 1, 1]);
    for adapter in ["sql", "chat", "summarize", "code"] {
        let homes: Vec<_> = (0..6)
            .map(|random| {
                let mut vm = LoraAware::with_names(names.iter().map(String::as_str), DEFAULT_MAX_LORAS);
                let c = PickContext { random, ..lora_ctx(adapter, b"", &l) };
                vm.pick(&c, &all(4)).unwrap()
            })
            .collect();
        assert!(homes.windows(2).all(|w| w[0] == w[1]), "{adapter}: {homes:?}");
    }
    // A clearly busier home gives way to the least loaded.
    let mut vm = LoraAware::with_names(names.iter().map(String::as_str), DEFAULT_MAX_LORAS);
    let home = vm.pick(&lora_ctx("sql", b"", &loads(&[1, 1, 1, 1])), &all(4)).unwrap();
    let mut busy = vec![0; 4];
    busy[home] = 9;
    let mut other = LoraAware::with_names(names.iter().map(String::as_str), DEFAULT_MAX_LORAS);
    assert_ne!(other.pick(&lora_ctx("sql", b"", &loads(&busy)), &all(4)), Some(home));
}
