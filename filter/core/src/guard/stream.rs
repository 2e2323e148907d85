//! Redaction of text that arrives in pieces (the deltas of a streamed answer), with a bounded
//! look-behind instead of the whole text.
//!
//! A [`StreamRedactor`] runs one stage (a policy's [`RuleSet`], or the restoring of a
//! [`Vault`]'s placeholders) over a text fed piece by piece. It keeps the text not yet sent
//! (`held`) and a window `W` of text already sent (the left context, scanned again but never
//! sent again). A scan reads context + held and sends everything up to `W` bytes before the
//! end, moved back to the start of any match (or `block` match) that crosses that point: a
//! match is decided by its own span plus one character either side and a detector
//! recognises a match within its `max_len` bytes, so with `W = max_len + 8`
//! ([`RuleSet::window`]) every match that starts in the sent part is seen whole, as it would
//! be in the whole text. When the detectors keep that contract, the concatenated output equals
//! [`RuleSet::rewrite`] of the whole text; the tests check it at every split point.
//!
//! - The context starts at a blank when one is at most [`BLANK_SEARCH`] bytes further back,
//!   outside any match and its prefix: a detector takes the start of its text for a boundary
//!   with no match in progress, and a match may depend on an earlier one (which consumed its
//!   prefix), so the context starts where the whole text has such a boundary too. Inside a longer token, a match a later scan reports
//!   although it starts in text already sent has its unsent part rendered as a placeholder.
//! - Overlapping matches are resolved across scans as [`super::scan::resolve`] does on a whole
//!   text (earliest first, then longest), carrying the end of the last applied match.
//! - A feed only scans once `held` reaches `1.5 W` and half the context more than `W`, so a
//!   byte is scanned a few times rather than once per delta.
//!
//! Latency and bounds: the text sent lags the text received by `W` to `1.5 W` bytes plus the
//! last piece (`W` is 264 bytes for the built-in detectors, whose longest, an email address,
//! is recognised within 256 bytes; [`PLACEHOLDER_MAX`] + 2 = 26 for the restore stage), more
//! inside a long token (half the context). A match that keeps growing (a secret token, a long
//! custom pattern) holds the cut back until [`MAX_HELD`] bytes are held: the match is then
//! rendered as it stands (a placeholder for the part seen) and the rest of its token — the
//! following run of non-blank characters, or the rest of a match that still crosses the sent
//! point — is dropped rather than sent. Memory per redactor: at most about
//! `MAX_HELD + BLANK_SEARCH + 2 W` bytes plus the last piece.

use std::cmp::Reverse;

use super::detect::Match;
use super::scan::{Action, Blocked, Hit, HitKind, RuleSet, Tally, Vault, PLACEHOLDER_MAX};

/// Held text past which a growing match is rendered as it stands instead of held (bytes).
pub const MAX_HELD: usize = 16 * 1024;

/// How far back from the window's start the context looks for a blank to start at (bytes): a
/// text whose runs of non-blank characters are all shorter is redacted exactly as a whole.
pub const BLANK_SEARCH: usize = MAX_HELD;

/// Bytes before a match that may belong to it without being in its span (`Bearer `): the
/// context never starts there.
const PREFIX: usize = 8;

/// What a [`StreamRedactor`] applies.
#[derive(Debug, Clone, Copy)]
pub enum Stage<'a> {
    /// One policy's rules (the caller keeps the set; it is passed in on every call).
    Rules(&'a RuleSet),
    /// Put back the originals of the vault's restorable placeholders.
    Restore,
}

impl Stage<'_> {
    /// The look-behind of this stage: bytes held back so that no match is cut.
    pub fn window(&self) -> usize {
        match self {
            Stage::Rules(rules) => rules.window(),
            // A placeholder plus one character either side.
            Stage::Restore => PLACEHOLDER_MAX + 2,
        }
    }

    /// Every match in `text`, with its action, in no particular order.
    fn find(&self, vault: &Vault, text: &str, out: &mut Vec<Found>) {
        match self {
            Stage::Rules(rules) => {
                let mut spans = Vec::new();
                for (i, rule) in rules.rules().iter().enumerate() {
                    spans.clear();
                    rule.detector.find(text, &mut spans);
                    out.extend(spans.iter().map(|m| Found { span: *m, what: HitKind::Rule(i), action: rule.action }));
                }
            }
            Stage::Restore => {
                let mut hits = Vec::new();
                vault.find(text, &mut hits);
                out.extend(hits.iter().map(|h| Found { span: h.span, what: h.what, action: Action::Redact }));
            }
        }
    }

    fn render(&self, vault: &mut Vault, text: &str, hits: &[Hit], out: &mut String) {
        match self {
            Stage::Rules(rules) => rules.render(vault, text, hits, out),
            // An empty set renders restore hits (and has no rule hits to render).
            Stage::Restore => RuleSet::default().render(vault, text, hits, out),
        }
    }
}

/// One match in the buffer, whatever its action.
#[derive(Debug, Clone, Copy)]
struct Found {
    span: Match,
    what: HitKind,
    action: Action,
}

/// What one scan sends.
#[derive(Debug, Default)]
struct Plan {
    /// Buffer offset up to which text is sent.
    end: usize,
    /// Hits to render before `end`, ascending; `true`: the unsent tail of a late match.
    hits: Vec<(Hit, bool)>,
    /// A `block` match that is decided.
    blocked: Option<Blocked>,
}

/// Redaction of one text fed in pieces, for one stage (see the module docs).
#[derive(Debug, Default)]
pub struct StreamRedactor {
    /// Sent context (the first `ctx` bytes) followed by the held text.
    buf: String,
    ctx: usize,
    /// End of the last rendered match, buffer offset (0 once it is behind the buffer).
    last_end: usize,
    /// The text at `ctx` continues a match rendered early ([`MAX_HELD`]): drop it.
    swallow: bool,
    blocked: Option<Blocked>,
    found: Vec<Found>,
}

impl StreamRedactor {
    /// A redactor at the start of a text.
    pub fn new() -> StreamRedactor {
        StreamRedactor::default()
    }

    /// Feeds the next piece of the text; appends to `out` the text that can no longer be part
    /// of a match (redacted). After an `Err`, nothing of this piece is sent and every later
    /// call returns the same error.
    pub fn feed(
        &mut self,
        stage: Stage<'_>,
        vault: &mut Vault,
        tally: &mut Tally,
        text: &str,
        out: &mut String,
    ) -> Result<(), Blocked> {
        if let Some(b) = self.blocked {
            return Err(b);
        }
        self.buf.push_str(text);
        // A scan reads the context and the held text again: wait until it can send half as
        // much (and half a window), so a byte is scanned a few times rather than once per delta.
        let window = stage.window();
        if self.held() < window + (window / 2).max(self.ctx / 2) {
            return Ok(());
        }
        self.step(stage, vault, tally, out, false)
    }

    /// The end of the text: sends what is held. The redactor is then ready for a new text.
    pub fn finish(
        &mut self,
        stage: Stage<'_>,
        vault: &mut Vault,
        tally: &mut Tally,
        out: &mut String,
    ) -> Result<(), Blocked> {
        if let Some(b) = self.blocked {
            return Err(b);
        }
        let done = self.step(stage, vault, tally, out, true);
        self.buf.clear();
        self.ctx = 0;
        self.last_end = 0;
        self.swallow = false;
        done
    }

    /// Bytes received and not sent yet.
    pub fn held(&self) -> usize {
        self.buf.len().saturating_sub(self.ctx)
    }

    /// The `block` match that ended the text, if one did.
    pub fn blocked(&self) -> Option<Blocked> {
        self.blocked
    }

    /// One scan of the buffer: sends what is decided (everything when `last`).
    fn step(
        &mut self,
        stage: Stage<'_>,
        vault: &mut Vault,
        tally: &mut Tally,
        out: &mut String,
        last: bool,
    ) -> Result<(), Blocked> {
        let mut found = std::mem::take(&mut self.found);
        found.clear();
        stage.find(vault, &self.buf, &mut found);
        found.sort_by_key(|f| (f.span.start, Reverse(f.span.end)));
        let from = self.skip_swallowed(&found, last);
        let plan = self.plan(stage.window(), &found, from, last);
        self.count(&found, &plan, tally);
        self.found = found;
        if let Some(b) = plan.blocked {
            self.blocked = Some(b);
            return Err(b);
        }
        let hits: Vec<Hit> = plan
            .hits
            .iter()
            .map(|(h, _)| Hit {
                span: Match { start: h.span.start.saturating_sub(from), end: h.span.end.saturating_sub(from) },
                what: h.what,
            })
            .collect();
        stage.render(vault, self.buf.get(from..plan.end).unwrap_or_default(), &hits, out);
        if let Some((h, _)) = plan.hits.last() {
            self.last_end = self.last_end.max(h.span.end);
            // A match rendered early that reaches the end may go on in the next piece.
            self.swallow |= !last && h.span.end == self.buf.len();
        }
        self.advance(plan.end, stage.window());
        Ok(())
    }

    /// Where sending starts: after the continuation of a match rendered early, if any.
    fn skip_swallowed(&mut self, found: &[Found], last: bool) -> usize {
        if !self.swallow {
            return self.ctx;
        }
        let rest = self.buf.get(self.ctx..).unwrap_or_default();
        let mut from = self.ctx + rest.find(char::is_whitespace).unwrap_or(rest.len());
        for f in found.iter().filter(|f| redacts(f) && f.span.start < self.ctx) {
            from = from.max(f.span.end);
        }
        self.swallow = !last && from >= self.buf.len();
        from
    }

    /// The matches to apply, greedily as [`super::scan::resolve`] does, continuing from the
    /// last one applied; a match that starts before `from` only counts for its unsent tail.
    fn kept(&self, found: &[Found], from: usize) -> Vec<(Hit, bool)> {
        let mut last = self.last_end.max(from);
        let mut kept = Vec::new();
        for f in found.iter().filter(|f| redacts(f)) {
            let late = f.span.start < from;
            if late && !(f.span.start >= self.last_end && f.span.end > from) {
                continue;
            }
            let start = f.span.start.max(from);
            if start >= last {
                last = f.span.end;
                kept.push((Hit { span: Match { start, end: f.span.end }, what: f.what }, late));
            }
        }
        kept
    }

    /// Decides how far this scan sends, which hits it renders, and whether it blocks.
    fn plan(&self, window: usize, found: &[Found], from: usize, last: bool) -> Plan {
        let len = self.buf.len();
        let kept = self.kept(found, from);
        // `block` matches not wholly in the sent context, from where they are unsent.
        let blocks: Vec<(usize, usize, usize)> = found
            .iter()
            .filter(|f| f.action == Action::Block && f.span.end > self.ctx)
            .filter_map(|f| match f.what {
                HitKind::Rule(rule) => Some((f.span.start.max(self.ctx), f.span.end, rule)),
                HitKind::Restore(_) => None,
            })
            .collect();
        let mut end = len;
        if !last {
            let natural = floor_boundary(&self.buf, len.saturating_sub(window)).max(from);
            let mut spans: Vec<(usize, usize)> = kept.iter().map(|(h, _)| (h.span.start, h.span.end)).collect();
            spans.extend(blocks.iter().filter(|b| b.0 >= from).map(|b| (b.0, b.1)));
            spans.sort_by_key(|s| Reverse(s.0));
            let mut cut = natural;
            for (start, stop) in spans {
                if start < cut && stop > cut {
                    cut = start;
                }
            }
            end = cut;
            if len.saturating_sub(cut) > MAX_HELD.max(window) {
                // A match too long to hold: render it as it stands, send up to its end.
                let crossing = kept.iter().find(|(h, _)| h.span.start < natural && h.span.end > natural);
                end = crossing.map_or(natural, |(h, _)| h.span.end);
            }
        }
        let blocked = blocks.iter().filter(|b| b.0 < end).min_by_key(|b| b.0).map(|b| Blocked { rule: b.2 });
        let hits = kept.into_iter().filter(|(h, _)| h.span.start < end).collect();
        Plan { end, hits, blocked }
    }

    /// Counts the matches that start in the text sent now (each match once, whatever the
    /// action, as [`RuleSet::hits`] counts a whole text), and late tails rendered now.
    fn count(&self, found: &[Found], plan: &Plan, tally: &mut Tally) {
        let sent = |f: &&Found| f.span.start >= self.ctx && f.span.start < plan.end;
        for f in found.iter().filter(sent) {
            if let HitKind::Rule(rule) = f.what {
                add(tally, rule);
            }
        }
        for (h, _) in plan.hits.iter().filter(|(_, late)| *late) {
            if let HitKind::Rule(rule) = h.what {
                add(tally, rule);
            }
        }
    }

    /// Marks the text up to `end` as sent and keeps `window` bytes of it as context.
    fn advance(&mut self, end: usize, window: usize) {
        let natural = floor_boundary(&self.buf, end.saturating_sub(window));
        let near = floor_boundary(&self.buf, natural.saturating_sub(BLANK_SEARCH));
        // Near the start of the text, its true start is kept instead.
        let drop = self.free_blank(near, natural).unwrap_or(if near == 0 { 0 } else { natural });
        self.buf.drain(..drop);
        self.ctx = end.saturating_sub(drop);
        self.last_end = self.last_end.saturating_sub(drop);
    }

    /// The last blank in `near..natural` outside every match of the last scan and the
    /// [`PREFIX`] bytes before it. A detector takes the start of its text for a boundary with
    /// no match in progress; such a blank is one in the whole text too.
    fn free_blank(&self, near: usize, natural: usize) -> Option<usize> {
        let text = self.buf.get(near..natural)?;
        let mut spans: Vec<(usize, usize)> = self
            .found
            .iter()
            .map(|f| (f.span.start.saturating_sub(PREFIX), f.span.end))
            .filter(|(lo, hi)| *hi > near && *lo < natural)
            .collect();
        spans.sort_unstable();
        // The furthest end of the spans up to each one.
        let mut reach = Vec::with_capacity(spans.len());
        let mut furthest = 0;
        for (_, hi) in &spans {
            furthest = furthest.max(*hi);
            reach.push(furthest);
        }
        for (i, c) in text.char_indices().rev() {
            let at = near + i;
            let before = spans.partition_point(|(lo, _)| *lo <= at);
            let covered = before.checked_sub(1).and_then(|k| reach.get(k)).is_some_and(|r| *r > at);
            if c.is_whitespace() && !covered {
                return Some(at);
            }
        }
        None
    }
}

/// True for matches that rewrite the text.
fn redacts(f: &Found) -> bool {
    matches!(f.action, Action::Redact | Action::Mask)
}

fn add(tally: &mut Tally, rule: usize) {
    if tally.counts.len() <= rule {
        tally.counts.resize(rule + 1, 0);
    }
    if let Some(c) = tally.counts.get_mut(rule) {
        *c = c.saturating_add(1);
    }
}

/// The largest character boundary of `s` at or before `at`.
fn floor_boundary(s: &str, at: usize) -> usize {
    let mut at = at.min(s.len());
    while at > 0 && !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

#[cfg(test)]
mod tests;
