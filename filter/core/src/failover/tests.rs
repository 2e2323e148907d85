use super::*;
use crate::config::RawConfig;

fn config(yaml: &str) -> Config {
    let raw: RawConfig = serde_saphyr::from_str(yaml).unwrap();
    Config::try_from(raw).unwrap()
}

fn fresh(attempts: u32) -> Progress {
    Progress { attempts, elapsed_ms: 0, more: true, nothing_sent: true }
}

#[test]
fn retryable_outcomes() {
    for o in
        [Outcome::ConnectFailure, Outcome::Timeout, Outcome::Status(429), Outcome::Status(500), Outcome::Status(503)]
    {
        assert!(o.retryable(), "{o:?}");
    }
    for s in [200, 201, 400, 401, 403, 404, 408, 413, 422] {
        assert!(!Outcome::Status(s).retryable(), "{s}");
    }
}

#[test]
fn other_4xx_is_delivered_at_once() {
    assert_eq!(decide(Outcome::Status(400), fresh(1), None), Step::Deliver);
    assert_eq!(decide(Outcome::Status(200), fresh(1), None), Step::Deliver);
    assert_eq!(decide(Outcome::Status(502), fresh(1), None), Step::Retry { delay_ms: 0 });
}

#[test]
fn budgets_end_the_retries() {
    assert_eq!(decide(Outcome::Timeout, fresh(MAX_ATTEMPTS - 1), None), Step::Retry { delay_ms: 0 });
    assert_eq!(decide(Outcome::Timeout, fresh(MAX_ATTEMPTS), None), Step::Deliver);
    let late = Progress { elapsed_ms: TIME_BUDGET_MS, ..fresh(1) };
    assert_eq!(decide(Outcome::ConnectFailure, late, None), Step::Deliver);
    let nearly = Progress { elapsed_ms: TIME_BUDGET_MS - 1_000, ..fresh(1) };
    assert_eq!(decide(Outcome::Status(429), nearly, Some(b"2")), Step::Deliver, "the delay would overrun");
}

#[test]
fn nothing_left_or_bytes_sent_means_deliver() {
    let none_left = Progress { more: false, ..fresh(1) };
    assert_eq!(decide(Outcome::Status(500), none_left, None), Step::Deliver);
    let sent = Progress { nothing_sent: false, ..fresh(1) };
    assert_eq!(decide(Outcome::Status(500), sent, None), Step::Deliver);
}

#[test]
fn retry_after_is_honoured_up_to_the_cap() {
    assert_eq!(decide(Outcome::Status(429), fresh(1), Some(b"1")), Step::Retry { delay_ms: 1_000 });
    assert_eq!(decide(Outcome::Status(429), fresh(1), Some(b" 60 ")), Step::Retry { delay_ms: RETRY_AFTER_CAP_MS });
    let date = b"Wed, 21 Oct 2015 07:28:00 GMT";
    assert_eq!(decide(Outcome::Status(503), fresh(1), Some(date)), Step::Retry { delay_ms: 0 });
    assert_eq!(retry_after_ms(b"-1"), None);
}

#[test]
fn chain_is_breadth_first_without_repeats() {
    let c = config(
        "providers: [{name: a, kind: openai, base_url: 'http://a'}]\nmodels:\n\
         - {name: m, targets: [{provider: a, model: x}], fallbacks: [f1, f2]}\n\
         - {name: f1, targets: [{provider: a, model: y}], fallbacks: [f3, m]}\n\
         - {name: f2, targets: [{provider: a, model: z}], fallbacks: [f1]}\n\
         - {name: f3, targets: [{provider: a, model: w}]}\n",
    );
    assert_eq!(chain(&c, 0), [0, 1, 2, 3]);
    assert_eq!(chain(&c, 3), [3]);
}

#[test]
fn tried_ids_round_trip() {
    let ids = [target_id("chat", 0), target_id("other", 2)].join(",");
    assert_eq!(parse_tried(&ids), ["chat#0", "other#2"]);
    assert!(parse_tried(" , ").is_empty());
    assert_eq!(target_id("m", 1234567), "m#1234567");
    assert_eq!(tried_slot(&target_id("chat", 12), "chat"), Some(12));
    // A model whose name extends another's is not that model.
    assert_eq!(tried_slot("chat-2#0", "chat"), None);
    assert_eq!(tried_slot("chat#+1", "chat"), None);
    assert_eq!(tried_slot("chat#", "chat"), None);
}
