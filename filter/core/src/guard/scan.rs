//! One policy's rules over one text: the hits, the verdict, and the rewritten text.
//!
//! A text goes through each applying policy in turn ([`RuleSet::rewrite`]): a `block` hit
//! anywhere refuses it, `redact` replaces a value with a numbered placeholder of its kind
//! (`[EMAIL_1]`; the same value gets the same placeholder within a request, so a model can
//! still tell two addresses apart), `mask` keeps the last four letters or digits, `log` only
//! counts. Placeholders live in the request's [`Vault`], which can put the originals back in
//! the answer ([`Vault::restore_text`]) when the policy asks for it.

use std::fmt::Write as _;

use super::detect::{Detector, Kind, Match};

/// What a rule does with a match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Refuse the request (or end the answer).
    Block,
    /// Replace the value with a typed placeholder.
    Redact,
    /// Replace all but the last four letters or digits with `*`.
    Mask,
    /// Only count the match.
    Log,
}

impl Action {
    /// Parses the configuration spelling.
    pub fn parse(s: &str) -> Option<Action> {
        Some(match s {
            "block" => Action::Block,
            "redact" => Action::Redact,
            "mask" => Action::Mask,
            "log" => Action::Log,
            _ => return None,
        })
    }

    /// The configuration spelling (also the metrics label).
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Block => "block",
            Action::Redact => "redact",
            Action::Mask => "mask",
            Action::Log => "log",
        }
    }
}

/// One rule: a detector and its action.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The rule's name inside its policy (the detector's, or the one configured).
    pub name: String,
    /// What it looks for.
    pub detector: Detector,
    /// What it does with a match.
    pub action: Action,
}

/// The rule that refused a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    /// Index of the rule in its set.
    pub rule: usize,
}

/// A hit to apply: a rule's match, or a restorable placeholder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    /// Where it is.
    pub span: Match,
    /// What it is.
    pub what: HitKind,
}

/// What a [`Hit`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitKind {
    /// A match of the rule at this index (redact or mask).
    Rule(usize),
    /// A placeholder of the vault entry at this index, to put the original back.
    Restore(usize),
}

/// Matches per rule, for metrics and records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Count per rule index.
    pub counts: Vec<u32>,
}

impl Tally {
    fn add(&mut self, rule: usize) {
        self.add_n(rule, 1);
    }

    /// Adds `n` matches of rule `rule`.
    pub fn add_n(&mut self, rule: usize, n: u32) {
        if self.counts.len() <= rule {
            self.counts.resize(rule + 1, 0);
        }
        if let Some(c) = self.counts.get_mut(rule) {
            *c = c.saturating_add(n);
        }
    }

    /// True when nothing matched.
    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(|c| *c == 0)
    }
}

/// The rules of one policy for one direction (input or output).
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    rules: Vec<Rule>,
    /// Placeholders this set makes may be restored in the answer.
    restorable: bool,
    window: usize,
}

impl RuleSet {
    /// A set over `rules`; `restorable`: its placeholders go back into the answer.
    pub fn new(rules: Vec<Rule>, restorable: bool) -> RuleSet {
        // One character of context on each side of the longest match.
        let window = rules.iter().map(|r| r.detector.max_len()).max().unwrap_or(0) + 8;
        RuleSet { rules, restorable, window }
    }

    /// The rules, in configuration order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// True when there is no rule.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Bytes a stream must hold back so that no match is cut ([`super::stream`]).
    pub fn window(&self) -> usize {
        self.window
    }

    /// The hits to apply in `text` (non-overlapping, ascending; `log` matches only counted in
    /// `tally`), or the first `block` match's rule.
    pub fn hits(&self, text: &str, tally: &mut Tally, out: &mut Vec<Hit>) -> Result<(), Blocked> {
        let mut found = Vec::new();
        let mut blocked: Option<(usize, usize)> = None;
        for (i, rule) in self.rules.iter().enumerate() {
            found.clear();
            rule.detector.find(text, &mut found);
            for m in &found {
                tally.add(i);
                match rule.action {
                    Action::Block if blocked.is_none_or(|(at, _)| m.start < at) => blocked = Some((m.start, i)),
                    Action::Redact | Action::Mask => out.push(Hit { span: *m, what: HitKind::Rule(i) }),
                    Action::Block | Action::Log => {}
                }
            }
        }
        if let Some((_, rule)) = blocked {
            return Err(Blocked { rule });
        }
        resolve(out);
        Ok(())
    }

    /// Writes `text` with `hits` applied to `out` (placeholders from `vault`).
    pub fn render(&self, vault: &mut Vault, text: &str, hits: &[Hit], out: &mut String) {
        let mut at = 0;
        for hit in hits {
            let (Some(before), Some(value)) = (text.get(at..hit.span.start), text.get(hit.span.start..hit.span.end))
            else {
                continue;
            };
            out.push_str(before);
            match hit.what {
                HitKind::Rule(i) => match self.rules.get(i) {
                    Some(rule) if rule.action == Action::Mask => mask(value, out),
                    Some(rule) => out.push_str(vault.placeholder(rule.detector.kind(), value, self.restorable)),
                    None => out.push_str(value),
                },
                HitKind::Restore(e) => out.push_str(vault.original(e).unwrap_or(value)),
            }
            at = hit.span.end;
        }
        out.push_str(text.get(at..).unwrap_or_default());
    }

    /// The whole-text form: `Ok(None)` when nothing changes.
    pub fn rewrite(&self, vault: &mut Vault, text: &str, tally: &mut Tally) -> Result<Option<String>, Blocked> {
        let mut hits = Vec::new();
        self.hits(text, tally, &mut hits)?;
        if hits.is_empty() {
            return Ok(None);
        }
        let mut out = String::with_capacity(text.len());
        self.render(vault, text, &hits, &mut out);
        Ok(Some(out))
    }
}

/// Sorts hits and drops those overlapping an earlier (or, at the same start, a longer) one.
pub fn resolve(hits: &mut Vec<Hit>) {
    hits.sort_by_key(|h| (h.span.start, std::cmp::Reverse(h.span.end)));
    let mut last_end = 0;
    hits.retain(|h| {
        let keep = h.span.start >= last_end;
        if keep {
            last_end = h.span.end;
        }
        keep
    });
}

/// Keeps the last four letters or digits of `value`, every other one becomes `*`.
fn mask(value: &str, out: &mut String) {
    let total = value.chars().filter(|c| c.is_alphanumeric()).count();
    let mut seen = 0;
    for c in value.chars() {
        if c.is_alphanumeric() {
            seen += 1;
            out.push(if seen + 4 > total { c } else { '*' });
        } else {
            out.push(c);
        }
    }
}

/// The placeholders of one request, and what they stand for.
#[derive(Debug, Default)]
pub struct Vault {
    entries: Vec<Entry>,
}

#[derive(Debug)]
struct Entry {
    placeholder: String,
    original: String,
    restorable: bool,
}

/// The longest placeholder [`Vault`] makes, bytes (`[REDACTED_4294967295]`).
pub const PLACEHOLDER_MAX: usize = 24;

impl Vault {
    /// The placeholder of `value` (the same one for the same value and kind).
    pub fn placeholder(&mut self, kind: Kind, value: &str, restorable: bool) -> &str {
        let tag = kind.tag();
        let found =
            self.entries.iter().position(|e| e.original == value && e.placeholder.get(1..=tag.len()) == Some(tag));
        let index = match found {
            Some(i) => i,
            None => {
                let n = self.entries.iter().filter(|e| e.placeholder.get(1..=tag.len()) == Some(tag)).count() + 1;
                let mut placeholder = String::with_capacity(tag.len() + 6);
                let _ = write!(placeholder, "[{tag}_{n}]");
                self.entries.push(Entry { placeholder, original: value.to_string(), restorable });
                self.entries.len() - 1
            }
        };
        let entry = self.entries.get_mut(index);
        if let Some(e) = entry {
            e.restorable |= restorable;
            return &e.placeholder;
        }
        ""
    }

    /// The original of entry `i`.
    fn original(&self, i: usize) -> Option<&str> {
        self.entries.get(i).map(|e| e.original.as_str())
    }

    /// True when some placeholder may be restored.
    pub fn has_restorable(&self) -> bool {
        self.entries.iter().any(|e| e.restorable)
    }

    /// Placeholders made so far.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no placeholder was made.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Appends a [`HitKind::Restore`] hit for each restorable placeholder in `text`.
    pub fn find(&self, text: &str, out: &mut Vec<Hit>) {
        let bytes = text.as_bytes();
        let mut from = 0;
        while let Some(at) = bytes.get(from..).and_then(|b| b.iter().position(|c| *c == b'[')) {
            let start = from + at;
            let close = bytes
                .get(start..(start + PLACEHOLDER_MAX).min(bytes.len()))
                .and_then(|b| b.iter().position(|c| *c == b']'));
            let Some(close) = close else {
                from = start + 1;
                continue;
            };
            let end = start + close + 1;
            let candidate = text.get(start..end).unwrap_or_default();
            match self.entries.iter().position(|e| e.restorable && e.placeholder == candidate) {
                Some(i) => {
                    out.push(Hit { span: Match { start, end }, what: HitKind::Restore(i) });
                    from = end;
                }
                None => from = start + 1,
            }
        }
    }

    /// `text` with its restorable placeholders replaced by their originals; `None`: none.
    pub fn restore_text(&self, text: &str) -> Option<String> {
        let mut hits = Vec::new();
        self.find(text, &mut hits);
        if hits.is_empty() {
            return None;
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for h in &hits {
            out.push_str(text.get(at..h.span.start).unwrap_or_default());
            if let HitKind::Restore(i) = h.what {
                out.push_str(self.original(i).unwrap_or_default());
            }
            at = h.span.end;
        }
        out.push_str(text.get(at..).unwrap_or_default());
        Some(out)
    }
}

#[cfg(test)]
mod tests;
