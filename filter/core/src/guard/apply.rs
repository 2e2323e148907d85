//! The policies of one request applied to a whole body: its size bound, then each policy's
//! detector rules in turn over the body's text parts ([`super::body`]), sharing one
//! [`Vault`]. The filter and the Traefik middleware both call this; neither knows rules.

use crate::config::guardrails::{Guardrails, Policy};
use crate::route::Api;

use super::body::{self, RewriteError, Shape};
use super::scan::{Action, Blocked, RuleSet, Tally};
use super::Vault;

/// Which side of the exchange a text is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The request.
    Input,
    /// The answer.
    Output,
}

impl Stage {
    /// `input` or `output` (records, metrics, webhooks).
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Input => "input",
            Stage::Output => "output",
        }
    }
}

/// Why a body was refused: the policy and rule (never the matched text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Index of the policy.
    pub policy: usize,
    /// The rule's name (`max_prompt_chars` for the size bound).
    pub rule: String,
    /// The side it was found on.
    pub stage: Stage,
}

/// Matches per policy and stage, for records and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tallies {
    /// `(policy, stage, tally over that policy's rules)`.
    pub entries: Vec<(usize, Stage, Tally)>,
}

impl Tallies {
    /// The tally of `policy` on `stage`, made on first use.
    pub fn of(&mut self, policy: usize, stage: Stage) -> &mut Tally {
        let found = self.entries.iter().position(|(p, s, _)| *p == policy && *s == stage);
        let at = found.unwrap_or_else(|| {
            self.entries.push((policy, stage, Tally::default()));
            self.entries.len() - 1
        });
        // `at` was just found or pushed: in bounds.
        &mut self.entries[at].2
    }

    /// Each rule that matched: `(policy, stage, rule name, action, count)`.
    pub fn each<'g>(
        &'g self,
        g: &'g Guardrails,
    ) -> impl Iterator<Item = (&'g Policy, Stage, &'g str, Action, u32)> + 'g {
        self.entries.iter().flat_map(move |(p, stage, tally)| {
            let policy = g.policy(*p);
            let rules = policy.map(|pol| if *stage == Stage::Input { &pol.input } else { &pol.output });
            tally.counts.iter().enumerate().filter(|(_, n)| **n > 0).filter_map(move |(i, n)| {
                let rule = rules?.rules().get(i)?;
                Some((policy?, *stage, rule.name.as_str(), rule.action, *n))
            })
        })
    }
}

/// The shape of a request body of `api`; `None`: not scanned (audio, images, multipart).
pub fn request_shape(api: Api) -> Option<Shape> {
    Some(match api {
        Api::ChatCompletions => Shape::ChatRequest,
        Api::Completions => Shape::CompletionsRequest,
        Api::Embeddings => Shape::EmbeddingsRequest,
        Api::Messages | Api::CountTokens => Shape::MessagesRequest,
        Api::GenerateContent | Api::StreamGenerateContent => Shape::GeminiRequest,
        Api::Responses => Shape::ResponsesRequest,
        Api::ImagesGenerations | Api::AudioSpeech | Api::AudioTranscriptions | Api::AudioTranslations => return None,
    })
}

/// The shape of a non-streamed answer to `api`, in the client's dialect.
pub fn answer_shape(api: Api) -> Option<Shape> {
    Some(match api {
        Api::ChatCompletions => Shape::ChatAnswer,
        Api::Completions => Shape::CompletionsAnswer,
        Api::Messages => Shape::MessagesAnswer,
        Api::GenerateContent | Api::StreamGenerateContent => Shape::GeminiAnswer,
        Api::Responses => Shape::ResponsesAnswer,
        _ => return None,
    })
}

/// What scanning a body came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Forward the body as it is.
    Unchanged,
    /// Forward these bytes instead.
    Rewritten(Vec<u8>),
    /// Refuse it.
    Refused(Refusal),
}

/// Applies `policies` (indices into `g`) on `stage` to `body` of `shape`: the size bound
/// (input), then each policy's rules in order. A body that is not JSON is left to the caller's
/// own checks (`Unchanged`).
pub fn body(
    g: &Guardrails,
    policies: &[usize],
    stage: Stage,
    shape: Shape,
    body: &[u8],
    vault: &mut Vault,
    tallies: &mut Tallies,
) -> Outcome {
    if stage == Stage::Input {
        if let Some(refusal) = too_long(g, policies, shape, body) {
            return Outcome::Refused(refusal);
        }
    }
    if shape == Shape::GeminiAnswer && body.trim_ascii_start().starts_with(b"[") {
        // `streamGenerateContent` without `alt=sse` answers a JSON array of chunks.
        return elements(body, |element| self::body(g, policies, stage, shape, element, vault, tallies));
    }
    let mut current: Option<Vec<u8>> = None;
    for &p in policies {
        let Some(policy) = g.policy(p) else { continue };
        let rules = if stage == Stage::Input { &policy.input } else { &policy.output };
        if rules.is_empty() {
            continue;
        }
        let tally = tallies.of(p, stage);
        let text = current.as_deref().unwrap_or(body);
        match rewrite(rules, shape, text, vault, tally) {
            Ok(Some(new)) => current = Some(new),
            Ok(None) => {}
            Err(Some(Blocked { rule })) => {
                let rule = rules.rules().get(rule).map(|r| r.name.clone()).unwrap_or_default();
                return Outcome::Refused(Refusal { policy: p, rule, stage });
            }
            Err(None) => return Outcome::Unchanged,
        }
    }
    match current {
        Some(bytes) => Outcome::Rewritten(bytes),
        None => Outcome::Unchanged,
    }
}

/// Applies `each` to every element of a JSON array body and joins the results.
fn elements(body: &[u8], mut each: impl FnMut(&[u8]) -> Outcome) -> Outcome {
    let Ok(items) = serde_json::from_slice::<Vec<Box<serde_json::value::RawValue>>>(body) else {
        return Outcome::Unchanged;
    };
    let mut out = Vec::with_capacity(body.len());
    let mut changed = false;
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match each(item.get().as_bytes()) {
            Outcome::Unchanged => out.extend_from_slice(item.get().as_bytes()),
            Outcome::Rewritten(bytes) => {
                changed = true;
                out.extend_from_slice(&bytes);
            }
            refused @ Outcome::Refused(_) => return refused,
        }
    }
    out.push(b']');
    if changed {
        Outcome::Rewritten(out)
    } else {
        Outcome::Unchanged
    }
}

/// One rule set over a body; `Err(None)`: the body is not readable JSON.
fn rewrite(
    rules: &RuleSet,
    shape: Shape,
    body: &[u8],
    vault: &mut Vault,
    tally: &mut Tally,
) -> Result<Option<Vec<u8>>, Option<Blocked>> {
    body::rewrite(shape, body, &mut |text: &str| rules.rewrite(vault, text, tally)).map_err(|e| match e {
        RewriteError::Stopped(blocked) => Some(blocked),
        RewriteError::Body(_) => None,
    })
}

/// The first policy whose `max_prompt_chars` the body's text exceeds.
fn too_long(g: &Guardrails, policies: &[usize], shape: Shape, body: &[u8]) -> Option<Refusal> {
    let bound = |p: &usize| g.policy(*p).and_then(|pol| pol.max_prompt_chars).map(|max| (*p, max));
    let bounds: Vec<(usize, u64)> = policies.iter().filter_map(bound).collect();
    if bounds.is_empty() {
        return None;
    }
    let chars = body::text_chars(shape, body).ok()? as u64;
    let (policy, _) = bounds.into_iter().find(|(_, max)| chars > *max)?;
    Some(Refusal { policy, rule: "max_prompt_chars".into(), stage: Stage::Input })
}

/// Restores the vault's restorable placeholders in an answer's text parts.
pub fn restore(shape: Shape, body: &[u8], vault: &Vault) -> Option<Vec<u8>> {
    if !vault.has_restorable() {
        return None;
    }
    if shape == Shape::GeminiAnswer && body.trim_ascii_start().starts_with(b"[") {
        let outcome = elements(body, |e| restore(shape, e, vault).map_or(Outcome::Unchanged, Outcome::Rewritten));
        return match outcome {
            Outcome::Rewritten(bytes) => Some(bytes),
            _ => None,
        };
    }
    body::rewrite(shape, body, &mut |text: &str| Ok::<_, ()>(vault.restore_text(text))).ok().flatten()
}

#[cfg(test)]
mod tests;
