//! Properties every built-in detector keeps: sorted, non-overlapping matches on character
//! boundaries, decisions that depend on the match and its immediate neighbours only, and
//! linear scans of hostile runs.

use super::*;

const BUILTINS: [&str; 7] = ["email", "phone", "card", "iban", "ip", "ssn", "secret"];

fn builtin(name: &str) -> Detector {
    Detector::builtin(name).unwrap()
}

fn find(d: &Detector, text: &str) -> Vec<Match> {
    let mut out = Vec::new();
    d.find(text, &mut out);
    out
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }
}

/// Pieces that make texts full of near-misses: values, their fragments, separators, words
/// and non-ASCII letters.
const PIECES: &[&str] = &[
    "john@example.com",
    "a@b.co",
    "@",
    ".",
    "-",
    " ",
    "  ",
    ":",
    "::",
    "(",
    ")",
    "+",
    "_",
    "=",
    "\n",
    "4111111111111111",
    "4111 1111 1111 1111",
    "4111-1111-1111-1111",
    "378282246310005",
    "1234",
    "555-123-4567",
    "(555) 123-4567",
    "+44 20 7946 0958",
    "+1",
    "555",
    "4567",
    "2024-01-15",
    "DE89370400440532013000",
    "DE89 3704 0044 0532 0130 00",
    "DE89",
    "GB82 WEST",
    "0130 00",
    "192.168.1.1",
    "1.2.3.4",
    "255",
    "::1",
    "fe80::1",
    "2001:db8::7334",
    "::ffff:1.2.3.4",
    "ff",
    "123-45-6789",
    "078-05-1120",
    "AKIAIOSFODNN7EXAMPLE",
    "sk-abcdefghijklmnopqrstuvwxyz",
    "eyJhbGciOiJIUzI1NiJ9.e30.sig",
    "Bearer ",
    "abcdefghijklmnopqrstuvwx",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "MIIEow",
    "é",
    "电话",
    "x",
    "Z",
    "0",
    "9",
    ",",
];

fn random_text(rng: &mut Rng) -> String {
    let n = 1 + rng.next() % 12;
    (0..n).map(|_| rng.pick(PIECES)).collect()
}

/// The start of the character before `i` (or `i`), and the end of the `n`th character after
/// `i` (or the text's end).
fn widen(text: &str, start: usize, end: usize, left: usize, right: usize) -> (usize, usize) {
    let from = text[..start].char_indices().rev().nth(left.saturating_sub(1)).map_or(0, |(i, _)| i);
    let from = if left == 0 { start } else { from };
    let to = text[end..].char_indices().nth(right).map_or(text.len(), |(i, _)| end + i);
    (from, to)
}

#[test]
fn matches_are_sorted_disjoint_and_on_character_boundaries() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..3000 {
        let text = random_text(&mut rng);
        for name in BUILTINS {
            let found = find(&builtin(name), &text);
            for w in found.windows(2) {
                assert!(w[0].end <= w[1].start, "{name} overlaps in {text:?}: {found:?}");
            }
            for m in &found {
                assert!(
                    m.start < m.end && text.is_char_boundary(m.start) && text.is_char_boundary(m.end),
                    "{name} {m:?} in {text:?}"
                );
            }
        }
    }
}

/// A match is found again in the window a stream keeps around it: one character before (eight
/// for secrets, for the `Bearer ` before a token) and `max_len` bytes and a character after its
/// start, or two characters after its end (a final dot and what follows) when that is further.
/// Detectors whose values have one reading only (email, IBAN, IP, SSN) need no more than those
/// two characters after the end; phones and cards choose the longest grouping from a start.
#[test]
fn a_match_depends_on_its_neighbours_only() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    for _ in 0..3000 {
        let text = random_text(&mut rng);
        for name in BUILTINS {
            let d = builtin(name);
            let left = if name == "secret" { 8 } else { 1 };
            for m in find(&d, &text) {
                let (from, tight) = widen(&text, m.start, m.end, left, 2);
                let mut reach = (m.start + d.max_len()).min(text.len());
                while !text.is_char_boundary(reach) {
                    reach += 1;
                }
                let (_, stream) = widen(&text, m.start, reach.max(m.end), 0, 1);
                let to = if matches!(name, "phone" | "card") { stream.max(tight) } else { tight };
                let window = &text[from..to];
                let again = find(&d, window);
                let want = Match { start: m.start - from, end: m.end - from };
                assert!(
                    again.contains(&want),
                    "{name}: {:?} of {text:?} not found again in {window:?}: {again:?}",
                    &text[m.start..m.end]
                );
            }
        }
    }
}

#[test]
fn max_len_of_each_builtin() {
    let lens: Vec<usize> = BUILTINS.iter().map(|n| builtin(n).max_len()).collect();
    assert_eq!(lens, vec![256, 32, 24, 41, 47, 11, 93]);
}

/// Hostile runs: each scanner does bounded work per byte by construction (maximal runs are
/// walked once, every start reads a bounded prefix); these only have to finish. No clock is
/// asserted: a shared machine makes timings flaky.
#[test]
fn long_runs_scan_in_linear_time() {
    const MIB: usize = 1 << 20;
    let inputs = [
        "7".repeat(MIB),
        "a@".repeat(MIB / 2),
        "a.".repeat(MIB / 2) + "@",
        "@".to_string() + &"a.".repeat(MIB / 2),
        ":f".repeat(MIB / 2),
        "1:".repeat(MIB / 2),
        "1.".repeat(MIB / 2),
        "4111 ".repeat(MIB / 5),
        "DE89 ".repeat(MIB / 5),
        "+1 ".repeat(MIB / 3),
        "sk-".repeat(MIB / 3),
        "-".repeat(MIB),
        "123-45-".repeat(MIB / 7),
    ];
    for text in &inputs {
        for name in BUILTINS {
            let found = find(&builtin(name), text);
            assert!(found.len() <= text.len());
        }
    }
    // A run too long to be anything is nothing, whatever its windows would be.
    assert!(find(&builtin("card"), &inputs[0]).is_empty());
    assert!(find(&builtin("ip"), &inputs[4]).is_empty());
}

#[test]
fn each_builtin_finds_its_kind_in_one_text() {
    let text = "Mail john@example.com or call +1 (555) 123-4567; card 4111 1111 1111 1111, \
                IBAN DE89 3704 0044 0532 0130 00, host 10.0.0.1, SSN 123-45-6789, key AKIAIOSFODNN7EXAMPLE.";
    let want = [
        ("email", "john@example.com"),
        ("phone", "+1 (555) 123-4567"),
        ("card", "4111 1111 1111 1111"),
        ("iban", "DE89 3704 0044 0532 0130 00"),
        ("ip", "10.0.0.1"),
        ("ssn", "123-45-6789"),
        ("secret", "AKIAIOSFODNN7EXAMPLE"),
    ];
    for (name, value) in want {
        let found: Vec<&str> = find(&builtin(name), text).iter().map(|m| &text[m.start..m.end]).collect();
        assert_eq!(found, vec![value], "{name}");
    }
}
