//! Usage tests against the golden fixtures in `testdata/usage/`: extracted usage, and identical
//! results (usage and forwarded bytes) however the body is cut into chunks.

mod converse;
mod units;

use super::*;

pub(super) fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/../../testdata/usage/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn u(prompt_tokens: u64, completion_tokens: u64, cached_tokens: u64) -> Option<Usage> {
    Some(Usage { prompt_tokens, completion_tokens, cached_tokens })
}

/// Feeds `body` cut at `cuts` (ascending offsets); returns the bytes the client receives and
/// the usage found.
pub(super) fn run(t: &mut Tracker, body: &[u8], cuts: &[usize]) -> (Vec<u8>, Option<Usage>) {
    let mut sent = Vec::new();
    let mut start = 0;
    for &end in cuts.iter().chain(std::iter::once(&body.len())) {
        let chunk = &body[start..end];
        match t.on_chunk(chunk) {
            Chunk::Forward => sent.extend_from_slice(chunk),
            Chunk::Replace(v) => sent.extend_from_slice(&v),
        }
        start = end;
    }
    sent.extend_from_slice(&t.flush());
    (sent, t.finish())
}

/// (fixture, dialect, streaming, expected (prompt, completion, cached))
type Case = (&'static str, UsageDialect, bool, Option<(u64, u64, u64)>);

const CASES: &[Case] = {
    use UsageDialect::*;
    &[
        ("openai-chat.json", OpenAi, false, Some((1117, 46, 1024))),
        ("openai-chat-tools.json", OpenAi, false, Some((82, 17, 0))),
        ("openai-embeddings.json", OpenAi, false, Some((8, 0, 0))),
        ("openai-responses.json", OpenAi, false, Some((36, 87, 0))),
        ("openai-chat-stream.sse", OpenAi, true, None),
        ("openai-chat-stream-usage.sse", OpenAi, true, Some((19, 10, 0))),
        ("openai-chat-stream-tools.sse", OpenAi, true, Some((355, 18, 256))),
        ("vllm-chat-stream-continuous.sse", OpenAi, true, Some((24, 5, 0))),
        ("openai-responses-stream.sse", OpenAi, true, Some((37, 11, 0))),
        ("anthropic-messages.json", Anthropic, false, Some((3895, 503, 1800))),
        ("anthropic-messages-stream.sse", Anthropic, true, Some((2125, 15, 2000))),
        ("anthropic-messages-stream-tools.sse", Anthropic, true, Some((472, 89, 0))),
        ("gemini-generate.json", Gemini, false, Some((4120, 70, 4096))),
        ("gemini-stream.sse", Gemini, true, Some((9, 11, 0))),
        ("gemini-stream-array.json", Gemini, false, Some((9, 11, 0))),
    ]
};

fn expected(case: &Case) -> Option<Usage> {
    case.3.and_then(|(p, c, k)| u(p, c, k))
}

/// What a client must receive when hiding: the `.hidden.sse` golden file, or the fixture itself
/// for streams the gateway did not add a usage chunk to.
fn hidden_expectation(name: &str) -> Vec<u8> {
    let golden = name.replace(".sse", ".hidden.sse");
    let path = format!("{}/../../testdata/usage/{golden}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(path).unwrap_or_else(|_| fixture(name))
}

#[test]
fn fixtures_whole_body() {
    for case in CASES {
        let body = fixture(case.0);
        let mut t = Tracker::new(case.1, case.2, false);
        let (sent, usage) = run(&mut t, &body, &[]);
        assert_eq!(usage, expected(case), "{}", case.0);
        assert_eq!(sent, body, "{}", case.0);
        assert!(t.first_token_seen(), "{}", case.0);
    }
}

#[test]
fn hiding_removes_exactly_the_usage_chunk() {
    for case in CASES.iter().filter(|c| c.2 && c.1 == UsageDialect::OpenAi) {
        let body = fixture(case.0);
        let mut t = Tracker::new(case.1, true, true);
        let (sent, usage) = run(&mut t, &body, &[]);
        assert_eq!(usage, expected(case), "{}", case.0);
        assert_eq!(String::from_utf8_lossy(&sent), String::from_utf8_lossy(&hidden_expectation(case.0)), "{}", case.0);
    }
    assert_ne!(fixture("openai-chat-stream-usage.sse"), hidden_expectation("openai-chat-stream-usage.sse"));
}

/// Every fixture, cut in two at every byte, and cut into single bytes, with and without hiding.
#[test]
fn every_byte_boundary() {
    for case in CASES {
        let body = fixture(case.0);
        for hide in [false, true] {
            let want = if hide && case.2 { hidden_expectation(case.0) } else { body.clone() };
            for cut in 0..=body.len() {
                let mut t = Tracker::new(case.1, case.2, hide);
                let (sent, usage) = run(&mut t, &body, &[cut]);
                assert_eq!(usage, expected(case), "{} cut at {cut}", case.0);
                assert!(sent == want, "{} cut at {cut} (hide {hide}): bytes differ", case.0);
            }
            let singles: Vec<usize> = (1..body.len()).collect();
            let mut t = Tracker::new(case.1, case.2, hide);
            let (sent, usage) = run(&mut t, &body, &singles);
            assert_eq!(usage, expected(case), "{} byte by byte", case.0);
            assert!(sent == want, "{} byte by byte (hide {hide}): bytes differ", case.0);
        }
    }
}

/// Deterministic xorshift, so failures reproduce (the core crate has no randomness source).
pub(super) struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Ascending random cut points in `0..=len`, chunks of 1..=max bytes.
    pub fn cuts(&mut self, len: usize, max: u64) -> Vec<usize> {
        let mut cuts = Vec::new();
        let mut at = 0;
        loop {
            at += 1 + (self.next() % max) as usize;
            if at >= len {
                return cuts;
            }
            cuts.push(at);
        }
    }
}

#[test]
fn random_chunk_sizes() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for case in CASES {
        let body = fixture(case.0);
        for round in 0..200 {
            let hide = round % 2 == 1;
            let want = if hide && case.2 { hidden_expectation(case.0) } else { body.clone() };
            let cuts = rng.cuts(body.len(), [3, 17, 64, 700][round % 4]);
            let mut t = Tracker::new(case.1, case.2, hide);
            let (sent, usage) = run(&mut t, &body, &cuts);
            assert_eq!(usage, expected(case), "{} cuts {cuts:?}", case.0);
            assert!(sent == want, "{} cuts {cuts:?} (hide {hide}): bytes differ", case.0);
        }
    }
}

/// The SSE fixtures with their line ends rewritten to `\r\n` and to bare `\r` (all legal SSE).
#[test]
fn other_line_endings() {
    let lf = |b: &[u8]| String::from_utf8_lossy(b).replace("\r\n", "\n");
    for case in CASES.iter().filter(|c| c.2) {
        for eol in ["\n", "\r\n", "\r"] {
            let body = lf(&fixture(case.0)).replace('\n', eol).into_bytes();
            let want = lf(&hidden_expectation(case.0)).replace('\n', eol).into_bytes();
            let mut rng = Rng(42);
            for _ in 0..50 {
                let cuts = rng.cuts(body.len(), 9);
                let mut t = Tracker::new(case.1, true, true);
                let (sent, usage) = run(&mut t, &body, &cuts);
                assert_eq!(usage, expected(case), "{} eol {eol:?}", case.0);
                assert!(sent == want, "{} eol {eol:?}: bytes differ", case.0);
            }
        }
    }
}

#[test]
fn forward_without_allocation_when_chunks_align_with_events() {
    let body = fixture("openai-chat-stream-usage.sse");
    let text = String::from_utf8_lossy(&body).into_owned();
    let mut t = Tracker::new(UsageDialect::OpenAi, true, true);
    let mut replaced = 0;
    for event in text.split_inclusive("\n\n") {
        if let Chunk::Replace(v) = t.on_chunk(event.as_bytes()) {
            assert!(v.is_empty(), "only the usage chunk is replaced, by nothing");
            replaced += 1;
        }
    }
    assert_eq!(replaced, 1);
    assert!(t.flush().is_empty());
    assert_eq!(t.finish(), u(19, 10, 0));
}
