//! External checks: each policy's webhooks and moderation endpoints are called at once with
//! `dispatch_http_call`, and the request (or the held answer) waits for all of them. A `block`
//! refuses; a `rewrite` replaces the text parts; no usable answer counts as the rule's `fail`
//! setting says (closed: refuse with 503; open: go on). Each verdict and its latency go into
//! the usage record and the metrics.

use std::time::Duration;

use ferrogate_core::config::guardrails::{Check, CheckTarget};
use ferrogate_core::config::Config;
use ferrogate_core::guard::apply::Stage;
use ferrogate_core::guard::body::{self, Shape};
use ferrogate_core::guard::check::{self, CheckError, CheckRequest, Verdict};
use ferrogate_core::openai::ApiError;
use ferrogate_core::usage::GuardrailCheck;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::{Action, BufferType};

use super::super::Stream;

/// Checks in flight, and what their verdicts came to so far.
#[derive(Default)]
pub(super) struct Pending {
    calls: Vec<Call>,
    stage: Option<Stage>,
    shape: Option<Shape>,
    /// The texts sent (a rewrite must give as many back).
    sent: usize,
    /// The first refusal: the error the caller gets.
    pub(super) refusal: Option<ApiError>,
    /// The last rewrite asked for.
    rewrite: Option<Vec<String>>,
}

struct Call {
    token: u32,
    policy: usize,
    check: usize,
    started_ns: u64,
}

impl Pending {
    /// The texts a `rewrite` verdict asked for.
    pub(super) fn rewrite_texts(self) -> Option<Vec<String>> {
        self.rewrite
    }

    /// True while some check is in flight.
    pub(super) fn waiting(&self) -> bool {
        !self.calls.is_empty()
    }
}

impl Stream {
    /// Calls every check of the request's policies on `stage` over `body`; true when some
    /// call is in flight (the caller waits; [`Stream::on_guard_answer`] resumes).
    pub(super) fn start_checks(&mut self, config: &Config, stage: Stage, shape: Shape, body: &[u8]) -> bool {
        let Some(state) = self.guard.as_ref() else { return false };
        let g = &config.guardrails;
        let wanted: Vec<(usize, usize)> = state
            .policies
            .iter()
            .filter_map(|p| Some((*p, g.policy(*p)?)))
            .flat_map(|(p, pol)| {
                let checks = if stage == Stage::Input { &pol.input_checks } else { &pol.output_checks };
                (0..checks.len()).map(move |c| (p, c))
            })
            .collect();
        if wanted.is_empty() {
            return false;
        }
        let texts = body::texts(shape, body).unwrap_or_default();
        let mut pending = Pending { stage: Some(stage), shape: Some(shape), sent: texts.len(), ..Pending::default() };
        for (p, c) in wanted {
            let Some(check) = checks_of(config, p, stage).and_then(|cs| cs.get(c)) else { continue };
            let rule = super::label(g, p, &check.name);
            match self.dispatch_check(config, p, check, stage, &rule, &texts) {
                Ok(token) => {
                    pending.calls.push(Call { token, policy: p, check: c, started_ns: self.callback_start_ns })
                }
                Err(e) => self.check_done(&mut pending, check, &rule, stage, Err(e), 0),
            }
        }
        let waiting = pending.waiting();
        if let Some(state) = self.guard.as_mut() {
            state.pending = pending;
        }
        waiting
    }

    fn dispatch_check(
        &self,
        config: &Config,
        policy: usize,
        check: &Check,
        stage: Stage,
        rule: &str,
        texts: &[String],
    ) -> Result<u32, CheckError> {
        let timeout = Duration::from_millis(check.timeout_ms);
        let policy_name = config.guardrails.policy(policy).map_or("", |p| p.name.as_str());
        let (cluster, authority, path, credential, body) = match &check.target {
            CheckTarget::Webhook { cluster, url } => {
                let request_id = self.request_id.as_deref().unwrap_or_default();
                let key = self.caller.key_index().and_then(|k| config.keys.get(k)).map(|k| k.name.as_str());
                let request = CheckRequest {
                    stage: stage.as_str(),
                    policy: policy_name,
                    rule: rule.rsplit('/').next().unwrap_or(rule),
                    request_id,
                    key,
                    model: self.guard.as_ref().map_or("", |s| s.model.as_str()),
                    api: self.api_label,
                    texts,
                };
                let path = if url.path_prefix.is_empty() { "/".to_string() } else { url.path_prefix.clone() };
                (cluster.clone(), url.authority(), path, None, check::webhook_body(&request))
            }
            CheckTarget::Moderation { provider, model } => {
                let p = config
                    .provider_index(provider)
                    .and_then(|i| config.providers.get(i))
                    .ok_or(CheckError::NoAnswer)?;
                let path = format!("{}/v1/moderations", p.base_url.path_prefix);
                let body = check::moderation_body(model.as_deref(), texts);
                (p.name.clone(), p.authority.clone(), path, p.credential.clone(), body)
            }
        };
        let mut headers = vec![
            (":method", "POST"),
            (":path", path.as_str()),
            (":authority", authority.as_str()),
            ("content-type", "application/json"),
        ];
        if let Some(cred) = &credential {
            headers.push((cred.name, cred.value.as_str()));
        }
        headers.extend(self.traceparent.as_deref().map(|t| ("traceparent", t)));
        hostcalls::dispatch_http_call(&cluster, headers, Some(&body), vec![], timeout).map_err(|e| {
            log::warn!("#{} guardrail check {rule} not sent: {e:?}", self.id);
            CheckError::NoAnswer
        })
    }

    /// Takes one check's verdict into `pending` and the record.
    fn check_done(
        &mut self,
        pending: &mut Pending,
        check: &Check,
        rule: &str,
        stage: Stage,
        verdict: Result<Verdict, CheckError>,
        latency_ms: u64,
    ) {
        let name = match &verdict {
            Ok(v) => v.as_str(),
            Err(_) => "error",
        };
        if let Some(state) = self.guard.as_mut() {
            let record = GuardrailCheck {
                rule: rule.to_string(),
                stage: stage.as_str().into(),
                verdict: name.into(),
                latency_ms,
            };
            state.checks.push(record);
        }
        match verdict {
            Ok(Verdict::Allow) => {}
            Ok(Verdict::Block(reason)) => {
                if pending.refusal.is_none() {
                    pending.refusal = Some(ApiError::guardrail_blocked(rule, stage.as_str(), reason.as_deref()));
                    self.guard_blocked(rule);
                }
            }
            Ok(Verdict::Rewrite(texts)) => pending.rewrite = Some(texts),
            Err(e) if check.fail_open => log::warn!("#{} guardrail check {rule}: {e} (fails open)", self.id),
            Err(e) => {
                log::warn!("#{} guardrail check {rule}: {e} (fails closed)", self.id);
                if pending.refusal.is_none() {
                    pending.refusal = Some(ApiError::guardrail_unavailable(rule, &e.to_string()));
                    self.guard_blocked(rule);
                }
            }
        }
    }

    fn guard_blocked(&mut self, rule: &str) {
        if let Some(state) = self.guard.as_mut() {
            state.blocked.get_or_insert_with(|| rule.to_string());
        }
    }

    /// A check's answer; false when `token` is not one of this request's checks.
    pub(in crate::http) fn on_guard_answer(&mut self, token: u32, num_headers: usize, body_size: usize) -> bool {
        let Some(state) = self.guard.as_mut() else { return false };
        let Some(at) = state.pending.calls.iter().position(|c| c.token == token) else { return false };
        let call = state.pending.calls.swap_remove(at);
        let mut pending = std::mem::take(&mut state.pending);
        let Some(config) = self.config.clone() else { return true };
        let stage = pending.stage.unwrap_or(Stage::Input);
        let Some(check) = checks_of(&config, call.policy, stage).and_then(|cs| cs.get(call.check)) else { return true };
        let status = crate::sidecar_call::answer_status(num_headers);
        let body =
            hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size).ok().flatten().unwrap_or_default();
        let verdict = match check.target {
            CheckTarget::Webhook { .. } => check::parse_webhook(status, &body, pending.sent),
            CheckTarget::Moderation { .. } => check::parse_moderation(status, &body),
        };
        let now = crate::raw::now_nanos();
        let latency_ms = now.saturating_sub(call.started_ns) / 1_000_000;
        let rule = super::label(&config.guardrails, call.policy, &check.name);
        self.check_done(&mut pending, check, &rule, stage, verdict, latency_ms);
        let done = !pending.waiting();
        if let Some(state) = self.guard.as_mut() {
            state.pending = pending;
        }
        if done {
            self.checks_finished(stage);
        }
        true
    }

    /// Every check answered: refuse, or go on (with the rewritten texts, if asked).
    pub(super) fn checks_finished(&mut self, stage: Stage) {
        let Some(state) = self.guard.as_mut() else { return };
        let pending = std::mem::take(&mut state.pending);
        match stage {
            Stage::Input => self.resume_after_checks(pending),
            Stage::Output => self.release_answer(pending),
        }
    }

    /// The input checks all answered while the request waited: refuse it, or route it.
    fn resume_after_checks(&mut self, pending: Pending) {
        if let Some(error) = &pending.refusal {
            self.reply_error(error);
            return;
        }
        self.apply_rewrite(pending);
        let Some(plugin) = self.shared.plugin.clone() else { return };
        if self.timed(|s| s.finish(&plugin)) == Action::Continue {
            self.resume_http_request();
        }
    }
}

impl Stream {
    /// Puts a check's rewritten texts into the request body; the new body, if any.
    pub(super) fn apply_rewrite(&mut self, pending: Pending) -> Option<Vec<u8>> {
        let (texts, shape) = (pending.rewrite?, pending.shape?);
        let body = self.get_http_request_body(0, self.body_size).unwrap_or_default();
        let bytes = replace_texts(shape, &body, texts)?;
        self.replace_request_body(&bytes);
        Some(bytes)
    }

    /// Checks that ended without a call in flight (none could be sent): refuse or go on now.
    pub(super) fn checks_settled_now(&mut self) -> super::Guarded {
        let pending = self.guard.as_mut().map(|s| std::mem::take(&mut s.pending)).unwrap_or_default();
        if let Some(error) = &pending.refusal {
            return super::Guarded::Stop(self.reply_error(error));
        }
        super::Guarded::Go(self.apply_rewrite(pending))
    }
}

/// The checks of policy `p` on `stage`.
fn checks_of(config: &Config, p: usize, stage: Stage) -> Option<&Vec<Check>> {
    let policy = config.guardrails.policy(p)?;
    Some(if stage == Stage::Input { &policy.input_checks } else { &policy.output_checks })
}

/// `body` with its text parts replaced, in order, by `texts`.
pub(super) fn replace_texts(shape: Shape, body: &[u8], texts: Vec<String>) -> Option<Vec<u8>> {
    let mut texts = texts.into_iter();
    body::rewrite(shape, body, &mut |_: &str| Ok::<_, ()>(texts.next())).ok().flatten()
}
