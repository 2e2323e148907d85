//! The guardrails' streaming redactor over arbitrary text with planted sensitive values, cut at
//! arbitrary points: never panics, never sends a planted value, and sends exactly what the
//! whole-text rewrite gives (the detectors' locality contract makes that hold for any cut).
//!
//! Input: the first byte is the number of cuts (low 4 bits), then two bytes per cut (a byte
//! offset, little-endian); the rest is the text (lossy UTF-8), in which each byte 0x01..=0x08
//! plants a value of `PLANTED`, on a line of its own.
#![no_main]

use ferrogate_core::guard::detect::Detector;
use ferrogate_core::guard::scan::{Action, Rule, RuleSet, Tally, Vault};
use ferrogate_core::guard::stream::{Stage, StreamRedactor, MAX_HELD};
use libfuzzer_sys::fuzz_target;

const PLANTED: [&str; 8] = [
    "jane.doe@example.com",
    "4111 1111 1111 1111",
    "DE89 3704 0044 0532 0130 00",
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_1234567890abcdefghijABCDEFGHIJ123456",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "-----BEGIN PRIVATE KEY-----\nMIIBVQIBADANBgkqhkiG9w0BAQEFAASCAT8wggE7AgEAAkEAq7BFUpkGp3\n-----END PRIVATE KEY-----",
    "falcon",
];

fn rules() -> RuleSet {
    let mut rules: Vec<Rule> = ["email", "phone", "card", "iban", "ip", "ssn", "secret"]
        .iter()
        .filter_map(|name| Detector::builtin(name).map(|d| (name, d)))
        .map(|(name, detector)| Rule { name: name.to_string(), detector, action: Action::Redact })
        .collect();
    if let Ok(words) = Detector::keywords(&["falcon".into(), "project bluebird".into()]) {
        rules.push(Rule { name: "codes".into(), detector: words, action: Action::Redact });
    }
    RuleSet::new(rules, false)
}

/// The largest character boundary of `s` at or before `at`.
fn floor(s: &str, at: usize) -> usize {
    let mut at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else { return };
    let n = usize::from(n & 15).min(rest.len() / 2);
    let (cuts, body) = rest.split_at(n * 2);
    // The text, with the planted values; and the text without them.
    let mut text = String::new();
    let mut plain = String::new();
    for c in String::from_utf8_lossy(body).chars() {
        match c {
            '\u{1}'..='\u{8}' => {
                text.push('\n');
                text.push_str(PLANTED[c as usize - 1]);
                text.push('\n');
            }
            c => {
                text.push(c);
                plain.push(c);
            }
        }
    }
    let mut cuts: Vec<usize> =
        cuts.chunks(2).map(|c| floor(&text, usize::from(u16::from_le_bytes([c[0], c[1]])))).collect();
    cuts.sort_unstable();
    cuts.push(text.len());

    let rules = rules();
    let stage = Stage::Rules(&rules);
    let mut vault = Vault::default();
    let mut tally = Tally::default();
    let mut redactor = StreamRedactor::new();
    let mut out = String::new();
    let mut at = 0;
    for cut in cuts {
        let piece = &text[at..cut];
        at = cut;
        redactor.feed(stage, &mut vault, &mut tally, piece, &mut out).expect("no block rule");
        assert!(redactor.held() <= MAX_HELD + 2 * rules.window() + piece.len());
    }
    redactor.finish(stage, &mut vault, &mut tally, &mut out).expect("no block rule");

    for v in PLANTED {
        // Only the planted copies must go: the text itself may hold one undetectably.
        assert!(out.matches(v).count() <= plain.matches(v).count(), "{v:?} was sent");
    }
    // A token longer than the cap is cut short on purpose (see `MAX_HELD`).
    if text.len() < MAX_HELD {
        let whole = rules.rewrite(&mut Vault::default(), &text, &mut Tally::default()).expect("no block rule");
        assert_eq!(out, whole.unwrap_or_else(|| text.clone()), "the stream must redact as the whole text");
    }
});
