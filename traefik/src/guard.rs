//! Guardrails in the Traefik build: the request's policies (its model's, its key's groups', its
//! key's) run their detector rules over the buffered request body before it is routed, and
//! over a non-streamed answer the guest buffers (`ferrogate_core::guard::apply`, the same code
//! as the proxy-wasm filter).
//!
//! What the ABI allows shapes the rest: external checks (webhooks, moderation endpoints) need
//! calls out, so they are not run here (a configuration that has them is logged once); a
//! stream is never scanned, since the guest sees it whole or not at all.

use ferrogate_core::auth::Caller;
use ferrogate_core::config::guardrails::Guardrails;
use ferrogate_core::config::{Config, Resolved};
use ferrogate_core::guard::apply::{self, Outcome, Stage, Tallies};
use ferrogate_core::guard::body::Shape;
use ferrogate_core::guard::Vault;
use ferrogate_core::openai::ApiError;
use ferrogate_core::route::{self, Api};
use ferrogate_core::usage::{GuardrailHit, GuardrailRecord};

use crate::abi::{self, Level};

/// What guardrails hold for one request.
pub(crate) struct GuardState {
    /// The policies that apply, indices into the configuration's.
    policies: Vec<usize>,
    /// Placeholders of this request (restored in the answer when a policy asks).
    vault: Vault,
    /// Matches per policy and stage.
    tallies: Tallies,
    /// `policy/rule` that refused the request or the answer.
    blocked: Option<String>,
}

impl GuardState {
    /// The guardrails of a request to `api` at `uri` with `body`; `None` when no policy applies.
    pub(crate) fn for_request(
        config: &Config,
        caller: Caller,
        api: Api,
        uri: &str,
        body: &[u8],
    ) -> Option<Box<GuardState>> {
        let g = &config.guardrails;
        if g.is_empty() {
            return None;
        }
        let model = match config.resolve(&route::requested_name(api, uri, body)) {
            Some(Resolved::Model(i)) => Some(i),
            _ => None,
        };
        let key = caller.key_index();
        let groups = key.and_then(|k| config.keys.get(k)).map_or(&[][..], |k| k.groups.as_slice());
        let policies = g.for_request(model, key, groups);
        if policies.is_empty() {
            return None;
        }
        Some(Box::new(GuardState { policies, vault: Vault::default(), tallies: Tallies::default(), blocked: None }))
    }

    /// The input rules over the request body of `api`: the body to forward instead
    /// (`Ok(Some)`), as it is (`Ok(None)`), or the refusal to answer.
    pub(crate) fn input(&mut self, g: &Guardrails, api: Api, body: &[u8]) -> Result<Option<Vec<u8>>, ApiError> {
        let Some(shape) = apply::request_shape(api) else { return Ok(None) };
        self.scan(g, Stage::Input, shape, body)
    }

    /// The shape of `api`'s answer when the output side has work on it: output rules, or input
    /// placeholders to restore (external checks are not run here).
    pub(crate) fn answer_shape(&self, g: &Guardrails, api: Api) -> Option<Shape> {
        let reads = |p: usize| g.policy(p).is_some_and(|pol| !pol.output.is_empty() || pol.restore);
        if self.blocked.is_some() || !self.policies.iter().any(|p| reads(*p)) {
            return None;
        }
        apply::answer_shape(api)
    }

    /// The output rules over a whole answer of `shape` in the caller's dialect, then the
    /// restored placeholders: the answer to send instead (`Ok(Some)`), or the refusal.
    pub(crate) fn output(&mut self, g: &Guardrails, shape: Shape, body: &[u8]) -> Result<Option<Vec<u8>>, ApiError> {
        let scanned = self.scan(g, Stage::Output, shape, body)?;
        let current = scanned.as_deref().unwrap_or(body);
        Ok(apply::restore(shape, current, &self.vault).or(scanned))
    }

    fn scan(&mut self, g: &Guardrails, stage: Stage, shape: Shape, body: &[u8]) -> Result<Option<Vec<u8>>, ApiError> {
        match apply::body(g, &self.policies, stage, shape, body, &mut self.vault, &mut self.tallies) {
            Outcome::Unchanged => Ok(None),
            Outcome::Rewritten(bytes) => Ok(Some(bytes)),
            Outcome::Refused(refusal) => {
                let rule = label(g, refusal.policy, &refusal.rule);
                let error = ApiError::guardrail_blocked(&rule, refusal.stage.as_str(), None);
                self.blocked = Some(rule);
                Err(error)
            }
        }
    }

    /// What guardrails did, for the usage record (rules and counts, never the matched text).
    pub(crate) fn record(&self, g: &Guardrails) -> GuardrailRecord {
        let hits = self.tallies.each(g).map(|(policy, stage, rule, action, count)| GuardrailHit {
            rule: format!("{}/{rule}", policy.name),
            stage: stage.as_str().to_string(),
            action: action.as_str().to_string(),
            count,
        });
        GuardrailRecord { blocked: self.blocked.clone(), hits: hits.collect(), checks: Vec::new() }
    }
}

/// `policy/rule`.
fn label(g: &Guardrails, policy: usize, rule: &str) -> String {
    let name = g.policy(policy).map_or("", |p| p.name.as_str());
    format!("{name}/{rule}")
}

/// Logs, once per configuration taken into use, each policy whose external checks this build
/// skips.
pub(crate) fn warn_skipped_checks(config: &Config) {
    for policy in &config.guardrails.policies.items {
        let checks = policy.input_checks.iter().chain(&policy.output_checks);
        let names: Vec<&str> = checks.map(|c| c.name.as_str()).collect();
        if !names.is_empty() {
            let msg = format!(
                "ferrogate: guardrail {:?}: external checks ({}) are not run by the Traefik build; its detector rules are",
                policy.name,
                names.join(", ")
            );
            abi::log_line(Level::Warn, &msg);
        }
    }
}
