//! Whose signature a carried reasoning item bears, and what a target may be sent of it.
//!
//! A `reasoning` item's `encrypted_content` is the signature of the provider that produced it
//! (Anthropic's thinking signature, Gemini's thought signature, OpenAI's encrypted reasoning),
//! and only a provider of the same [`Family`] can check it: Anthropic refuses a thinking block
//! whose signature is not its own, Gemini a call bearing a foreign thought signature, OpenAI
//! reasoning it cannot decrypt. So the sidecar tags each stored reasoning item with the family
//! of the provider that answered its response ([`FAMILY_KEY`], from [`FAMILY_HEADER`] on the
//! store call), and once the follow-up is routed, [`fit`] drops the reasoning the target's
//! family did not sign. The item goes whole: without its signature it is unsigned reasoning,
//! which no target is sent (Anthropic refuses unsigned thinking, OpenAI unsigned reasoning
//! items without a stored id, and Gemini has no use for thoughts without a signature).
//! Reasoning whose signer is not known (stored before families were recorded, or added to a
//! conversation by the client) is not carried at all.

use serde_json::Value;

use crate::error::ApiError;
use crate::route::RouteDecision;
use crate::translate::Outbound;

/// On the store call: the [`Family`] of the provider that answered.
pub const FAMILY_HEADER: &str = "x-ferrogate-family";
/// On a reasoning item of the sidecar's chain answer: the [`Family`] that signed it (absent:
/// not known). The rebuild removes it; no provider sees it.
pub const FAMILY_KEY: &str = "ferrogate_family";

/// A dialect family: the providers that can check one another's reasoning signatures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// OpenAI's Responses API and chat completions engines.
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
    /// Google's Gemini API.
    Gemini,
}

impl Family {
    /// The wire spelling (`openai`, `anthropic`, `gemini`).
    pub fn as_str(self) -> &'static str {
        match self {
            Family::OpenAi => "openai",
            Family::Anthropic => "anthropic",
            Family::Gemini => "gemini",
        }
    }

    /// Reads [`Family::as_str`]'s spelling.
    pub fn parse(s: &str) -> Option<Family> {
        match s {
            "openai" => Some(Family::OpenAi),
            "anthropic" => Some(Family::Anthropic),
            "gemini" => Some(Family::Gemini),
            _ => None,
        }
    }

    /// The family of a Responses request's target: `outbound` is its translation (`None`: the
    /// request goes untranslated, to an OpenAI provider).
    pub fn of(outbound: Option<Outbound>) -> Family {
        match outbound {
            None | Some(Outbound::OpenAiChat) => Family::OpenAi,
            Some(Outbound::Anthropic) => Family::Anthropic,
            Some(Outbound::Gemini) => Family::Gemini,
            // Bedrock's reasoning signatures are Claude's, which Anthropic documents as valid
            // across its platforms (its API, Bedrock, Vertex).
            Some(Outbound::Converse) => Family::Anthropic,
        }
    }
}

/// A follow-up rebuilt from its chain ([`super::rebuild`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rebuilt {
    /// The request with the chain's items in front of its input: what is routed. It holds
    /// every signed reasoning item whose family is known, whatever the target.
    pub body: Vec<u8>,
    /// Each of those reasoning items: its index in `input` and the family that signed it.
    pub(super) signed: Vec<(usize, Family)>,
}

impl Rebuilt {
    /// The body for a target of `family`: without the reasoning another family signed.
    /// `None` when that is [`Rebuilt::body`] as it is.
    pub fn for_family(&self, family: Family) -> Option<Vec<u8>> {
        if self.signed.iter().all(|&(_, signer)| signer == family) {
            return None;
        }
        let Ok(Value::Object(mut fields)) = serde_json::from_slice::<Value>(&self.body) else { return None };
        let Some(Value::Array(input)) = fields.get_mut("input") else { return None };
        let foreign: Vec<usize> =
            self.signed.iter().filter(|&&(_, signer)| signer != family).map(|&(i, _)| i).collect();
        let mut index = 0;
        input.retain(|_| {
            index += 1;
            !foreign.contains(&(index - 1))
        });
        serde_json::to_vec(&Value::Object(fields)).ok()
    }
}

/// Fits a routed follow-up's body to its target: when the chain carries reasoning another
/// family signed, the body is made again without it (translated again for a translated
/// target, with the upstream model for an OpenAI one). Chat completions targets are sent no
/// reasoning at all (their translation drops it), so nothing changes for them.
///
/// # Errors
/// The fitted conversation cannot be translated (it differs from the routed one only by
/// reasoning items, which translate to nothing a provider's encoder refuses).
pub fn fit(rebuilt: &Rebuilt, d: &mut RouteDecision<'_>) -> Result<(), ApiError> {
    let outbound = d.translation.as_ref().map(|(pair, _)| pair.outbound);
    if outbound == Some(Outbound::OpenAiChat) {
        return Ok(());
    }
    let Some(body) = rebuilt.for_family(Family::of(outbound)) else { return Ok(()) };
    d.body = Some(match &d.translation {
        Some((pair, _)) => pair.request_for_model(&body, "", false, &d.upstream_model).map_err(|e| pair.refusal(&e))?.0,
        None => match crate::openai::find_model(&body) {
            Ok(field) => crate::openai::rewrite_model(&body, field.span, &d.upstream_model),
            Err(_) => body,
        },
    });
    Ok(())
}

#[cfg(test)]
mod tests;
