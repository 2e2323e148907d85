//! Guardrails on the data path: the request's policies (its model's, groups' and key's) run
//! over the request body before it is routed ([`ferrogate_core::guard::apply`]), then over the
//! answer ([`output`]); external checks are `dispatch_http_call`s the request waits for
//! ([`checks`]). With no policy configured, nothing here runs beyond one emptiness test.

mod checks;
mod output;

use std::rc::Rc;

use ferrogate_core::config::guardrails::Guardrails;
use ferrogate_core::config::{Config, Resolved};
use ferrogate_core::guard::apply::{self, Outcome, Refusal, Stage, Tallies};
use ferrogate_core::guard::body::Shape;
use ferrogate_core::guard::Vault;
use ferrogate_core::openai::ApiError;
use ferrogate_core::route::{self, Api};
use ferrogate_core::usage::{GuardrailCheck, GuardrailHit, GuardrailRecord};
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::Action;

use super::Stream;

/// What guardrails hold for one request.
pub(crate) struct GuardState {
    /// The policies that apply, indices into the configuration's.
    policies: Vec<usize>,
    /// The model the client asked for (for external checks).
    model: String,
    /// Placeholders of this request.
    vault: Vault,
    /// Matches per policy and stage.
    tallies: Tallies,
    /// `policy/rule` that refused the request or ended the answer.
    blocked: Option<String>,
    /// Finished external checks.
    checks: Vec<GuardrailCheck>,
    /// External checks in flight.
    pending: checks::Pending,
    /// The input side ran (a request resumed after its checks is not scanned again).
    input_done: bool,
    /// The answer's side ([`output`]).
    answer: output::Answer,
}

/// What the request phase does after the input guardrails.
pub(super) enum Guarded {
    /// Go on with this body (`Some`: the rewritten one, already set on the request).
    Go(Option<Vec<u8>>),
    /// The request was answered here.
    Stop(Action),
    /// Wait for external checks.
    Wait,
}

/// `policy/rule`.
fn label(g: &Guardrails, policy: usize, rule: &str) -> String {
    let name = g.policy(policy).map_or("", |p| p.name.as_str());
    format!("{name}/{rule}")
}

impl Stream {
    /// Runs the input guardrails over `body`, the whole request body of `api`.
    pub(super) fn guard_request(&mut self, config: &Rc<Config>, api: Api, path: &str, body: &[u8]) -> Guarded {
        let g = &config.guardrails;
        if g.is_empty() || self.guard.as_ref().is_some_and(|s| s.input_done) {
            return Guarded::Go(None);
        }
        let policies = self.guard_policies(config, api, path, body);
        if policies.is_empty() {
            return Guarded::Go(None);
        }
        let mut state = Box::new(GuardState {
            policies,
            model: route::requested_name(api, path, body),
            vault: Vault::default(),
            tallies: Tallies::default(),
            blocked: None,
            checks: Vec::new(),
            pending: checks::Pending::default(),
            input_done: true,
            answer: output::Answer::default(),
        });
        let Some(shape) = apply::request_shape(api) else {
            self.guard = Some(state);
            return Guarded::Go(None);
        };
        let outcome = apply::body(g, &state.policies, Stage::Input, shape, body, &mut state.vault, &mut state.tallies);
        self.guard = Some(state);
        let rewritten = match outcome {
            Outcome::Refused(refusal) => {
                return Guarded::Stop(self.guard_refuse(config, api, path, body, &refusal, None))
            }
            Outcome::Rewritten(bytes) => {
                self.replace_request_body(&bytes);
                Some(bytes)
            }
            Outcome::Unchanged => None,
        };
        let current = rewritten.as_deref().unwrap_or(body);
        if self.start_checks(config, Stage::Input, shape, current) {
            return Guarded::Wait;
        }
        match self.checks_settled_now() {
            Guarded::Go(None) => Guarded::Go(rewritten),
            other => other,
        }
    }

    /// [`Stream::guard_request`] from `finish`: the body to route, or what to return.
    pub(super) fn guard_body(&mut self, config: &Rc<Config>, api: Api, original: Vec<u8>) -> Result<Vec<u8>, Action> {
        if config.guardrails.is_empty() {
            return Ok(original);
        }
        let path = self.head_map.get(self.path.clone()).unwrap_or_default();
        let path = String::from_utf8_lossy(path).into_owned();
        match self.guard_request(config, api, &path, &original) {
            Guarded::Go(None) => Ok(original),
            Guarded::Go(Some(body)) => Ok(body),
            Guarded::Stop(action) => Err(action),
            Guarded::Wait => {
                self.api = Some(api); // Routed when the checks answer.
                Err(Action::Pause)
            }
        }
    }

    /// A conversation rebuilt from the response store goes upstream whole: the input rules
    /// run over it too (stored answers may hold values an earlier turn restored).
    pub(super) fn guard_rebuilt(&mut self, config: &Config, rebuilt: Vec<u8>) -> Result<Vec<u8>, Action> {
        let Some(state) = self.guard.as_mut() else { return Ok(rebuilt) };
        let g = &config.guardrails;
        let (vault, tallies) = (&mut state.vault, &mut state.tallies);
        match apply::body(g, &state.policies, Stage::Input, Shape::ResponsesRequest, &rebuilt, vault, tallies) {
            Outcome::Unchanged => Ok(rebuilt),
            Outcome::Rewritten(bytes) => Ok(bytes),
            Outcome::Refused(refusal) => {
                let path = String::new();
                Err(self.guard_refuse(config, Api::Responses, &path, &rebuilt, &refusal, None))
            }
        }
    }

    /// The policies of this request: its model's, its key's groups', its key's.
    fn guard_policies(&self, config: &Config, api: Api, path: &str, body: &[u8]) -> Vec<usize> {
        let name = route::requested_name(api, path, body);
        let model = match config.resolve(&name) {
            Some(Resolved::Model(i)) => Some(i),
            _ => None,
        };
        let key = self.caller.key_index();
        let groups = key.and_then(|k| config.keys.get(k)).map_or(&[][..], |k| k.groups.as_slice());
        config.guardrails.for_request(model, key, groups)
    }

    /// Puts `bytes` in place of the request body; the framing headers follow in `apply`.
    fn replace_request_body(&mut self, bytes: &[u8]) {
        self.set_http_request_body(0, self.body_size, bytes);
        self.body_size = bytes.len();
        self.body_rewritten = true;
    }

    /// Answers a refused request in the caller's dialect, naming the rule.
    fn guard_refuse(
        &mut self,
        config: &Config,
        api: Api,
        path: &str,
        body: &[u8],
        refusal: &Refusal,
        reason: Option<&str>,
    ) -> Action {
        let rule = label(&config.guardrails, refusal.policy, &refusal.rule);
        log::debug!("#{} refused by guardrail {rule} ({})", self.id, refusal.stage.as_str());
        if self.model_requested.is_empty() {
            self.model_requested = route::requested_name(api, path, body);
        }
        let error = ApiError::guardrail_blocked(&rule, refusal.stage.as_str(), reason);
        if let Some(state) = self.guard.as_mut() {
            state.blocked = Some(rule);
        }
        self.reply_error(&error)
    }

    /// True when a guardrail refused the request or ended its answer.
    pub(super) fn guard_refused(&self) -> bool {
        self.guard.as_ref().is_some_and(|s| s.blocked.is_some())
    }

    /// What guardrails did, for the usage record; `None` when no policy applied.
    pub(super) fn guard_record(&self) -> Option<GuardrailRecord> {
        let state = self.guard.as_ref()?;
        let g = &self.config.as_deref()?.guardrails;
        let hits = state.tallies.each(g).map(|(policy, stage, rule, action, count)| GuardrailHit {
            rule: format!("{}/{rule}", policy.name),
            stage: stage.as_str().to_string(),
            action: action.as_str().to_string(),
            count,
        });
        Some(GuardrailRecord { blocked: state.blocked.clone(), hits: hits.collect(), checks: state.checks.clone() })
    }

    /// Counts each rule's matches and each check's verdict in the VM's metrics.
    pub(super) fn guard_metrics(&self, record: &GuardrailRecord) {
        let mut metrics = self.shared.metrics.borrow_mut();
        for hit in &record.hits {
            metrics.guardrail_hit(&hit.rule, &hit.stage, &hit.action, u64::from(hit.count));
        }
        for check in &record.checks {
            metrics.guardrail_check(&check.rule, &check.stage, &check.verdict);
        }
    }
}
