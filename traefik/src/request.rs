//! `handle_request`: everything up to the upstream. The order of checks is the proxy-wasm
//! filter's: configuration, then the key (even for a path that does not exist), then the
//! endpoint; a forwarded request has its body read, goes through its guardrails (400 on a
//! block, the rewritten body on a redaction), is routed (404 unknown model, 403 not granted),
//! admitted on its limits (429/402), and rewritten for the provider.

use std::rc::Rc;

use ferrogate_core::auth::{extract_key, gemini_query_key, Caller};
use ferrogate_core::config::{Config, Unpriced};
use ferrogate_core::dialect::Dialect;
use ferrogate_core::headers::{self, CLIENT_CREDENTIALS};
use ferrogate_core::limits::{self, estimate, Metric};
use ferrogate_core::openai::{self, ApiError};
use ferrogate_core::route::cloud::with_client_betas;
use ferrogate_core::route::{classify, route_request, Api, Endpoint, RouteDecision};
use ferrogate_core::translate::{self, Outbound};

use crate::abi::{self, Kind};
use crate::guard::GuardState;
use crate::guest::{now_ns, Guest};
use crate::record::{self, Names, Outcome};
use crate::reply;
use crate::response::Pending;

/// What every answer to a request needs.
pub(crate) struct Request {
    pub(crate) id: String,
    pub(crate) dialect: Dialect,
    pub(crate) started_ns: u64,
    pub(crate) caller: Caller,
    /// Guardrails, when a policy applies to the request.
    pub(crate) guard: Option<Box<GuardState>>,
    /// The client's `User-Agent`, bounded: read only for a request that may be recorded.
    pub(crate) user_agent: Option<String>,
}

impl Guest {
    /// The request phase; returns the ABI's `ctx << 32 | next`.
    pub(crate) fn on_request(&mut self) -> u64 {
        let started_ns = now_ns();
        self.pending = None;
        self.refresh(started_ns / 1_000_000);
        let uri = abi::uri();
        let id = abi::header(Kind::Request, headers::REQUEST_ID)
            .and_then(|v| String::from_utf8(v).ok())
            .filter(|v| headers::usable_request_id(v));
        let generated = id.is_none();
        let id = id.unwrap_or_else(|| headers::generate_request_id(started_ns, self.next_seq()));
        let dialect = Dialect::from_path(&uri);
        let mut req = Request { id, dialect, started_ns, caller: Caller::Open, guard: None, user_agent: None };
        if generated {
            // The upstream and the usage record see the same id as the client.
            abi::set_header(Kind::Request, headers::REQUEST_ID, req.id.as_bytes());
        }
        let config = match (&self.settings, &self.active) {
            (Err(e), _) => {
                return reply::error(&ApiError::unavailable(format!("ferrogate: {e}")), req.dialect, &req.id)
            }
            (Ok(_), None) => {
                return reply::error(&ApiError::unavailable("no configuration snapshot yet"), req.dialect, &req.id)
            }
            (Ok(_), Some(config)) => Rc::clone(config),
        };
        match authenticate(&config, &uri, started_ns) {
            Ok(caller) => req.caller = caller,
            Err(e) => return reply::error(&e, req.dialect, &req.id),
        }
        match classify(&abi::method(), &uri) {
            Endpoint::ListModels => reply::json(200, &openai::models_list_for(&config, req.caller), &req.id, None),
            Endpoint::GetModel(id) => match openai::model_entry_for(&config, req.caller, id) {
                Ok(body) => reply::json(200, &body, &req.id, None),
                Err(e) => reply::error(&e, req.dialect, &req.id),
            },
            Endpoint::Reject(e) => reply::error(&e, req.dialect, &req.id),
            // No response store here: the middleware makes no calls to the sidecar.
            Endpoint::Stored(_) | Endpoint::Conversations(_) => {
                let (bare, _) = ferrogate_core::route::split_query(&uri);
                let e = ApiError::response_lifecycle_unsupported(&abi::method(), bare);
                reply::error(&e, req.dialect, &req.id)
            }
            Endpoint::Mcp { .. } | Endpoint::McpFederated | Endpoint::A2a { .. } => {
                reply::error(&ApiError::agent_paths_unsupported(), req.dialect, &req.id)
            }
            Endpoint::Forward(api) => self.forward(&config, api, &uri, req),
        }
    }

    /// A request for an upstream: read and routed, or answered here.
    fn forward(&mut self, config: &Rc<Config>, api: Api, uri: &str, mut req: Request) -> u64 {
        let max_body = self.settings.as_ref().map_or(0, |s| s.max_body_bytes);
        let Some(body) = abi::body(Kind::Request, max_body) else {
            return reply::error(&ApiError::payload_too_large(max_body), req.dialect, &req.id);
        };
        if body.is_empty() {
            return reply::error(&ApiError::bad_request("The request body is empty."), req.dialect, &req.id);
        }
        if api == Api::CountTokens {
            return count_tokens(config, &req, &body);
        }
        // One more host call, made only when records are written.
        if self.settings.as_ref().is_ok_and(|s| s.usage_file.is_some()) {
            req.user_agent =
                abi::header(Kind::Request, headers::USER_AGENT).map(|v| ferrogate_core::usage::bounded_user_agent(&v));
        }
        let body = match self.guard_input(config, api, uri, &mut req, body) {
            Ok(body) => body,
            Err(answered) => return answered,
        };
        if api == Api::Responses {
            if let Err(e) = ferrogate_core::stored::check_background(&body) {
                return reply::error(&e, req.dialect, &req.id);
            }
        }
        let content_type = abi::header(Kind::Request, "content-type");
        let seq = self.next_seq();
        match route_request(config, req.caller, api, uri, content_type.as_deref(), &body, seq) {
            Ok(decision) => self.send(config, api, req, &body, decision),
            Err(e) => {
                let requested = openai::requested_model(&body, api);
                self.refuse(config, &req, (&e, None), &Names { requested: &requested, ..Names::default() })
            }
        }
    }

    /// The input guardrails over the request body: the body to route (rewritten when a rule
    /// redacted or masked), or the refusal answered and recorded.
    fn guard_input(
        &self,
        config: &Config,
        api: Api,
        uri: &str,
        req: &mut Request,
        body: Vec<u8>,
    ) -> Result<Vec<u8>, u64> {
        req.guard = GuardState::for_request(config, req.caller, api, uri, &body);
        let Some(guard) = req.guard.as_mut() else { return Ok(body) };
        match guard.input(&config.guardrails, api, &body) {
            Ok(rewritten) => Ok(rewritten.unwrap_or(body)),
            Err(e) => {
                let requested = ferrogate_core::route::requested_name(api, uri, &body);
                Err(self.refuse(config, req, (&e, None), &Names { requested: &requested, ..Names::default() }))
            }
        }
    }

    /// A routed request: admitted on its limits, then rewritten for the provider and handed on.
    fn send(&mut self, config: &Rc<Config>, api: Api, req: Request, body: &[u8], mut d: RouteDecision<'_>) -> u64 {
        // `on_request` answered already when the settings were refused.
        let Ok(settings) = &self.settings else { return 0 };
        let (buffering, json) = (settings.followed_by_buffering, !api.is_multipart());
        let cluster_header = settings.cluster_header.clone();
        let sent = d.body.take().unwrap_or_else(|| body.to_vec());
        let out = with_betas(config, &d, sent).and_then(|out| sized_for_traefik(out, buffering, json));
        let names = Names { requested: &d.requested, provider: d.provider, upstream: &d.upstream_model };
        // Checked before the limits, so a request that cannot be sent holds no reservation.
        let out = match out {
            Ok(out) => out,
            Err(e) => return self.refuse(config, &req, (&e, None), &names),
        };
        let signed = match sign_bedrock(&d, &out) {
            Ok(signed) => signed,
            Err(e) => return self.refuse(config, &req, (&e, None), &names),
        };
        let reservation = match self.admit(config, &req, &d, body) {
            Ok(reservation) => reservation,
            Err((e, retry)) => return self.refuse(config, &req, (&e, retry.as_deref()), &names),
        };
        abi::set_body(Kind::Request, &out);
        rewrite_head(&cluster_header, &d);
        let counter = self.next_seq();
        let key_pick = crate::keys::pick(&self.keys, config, d.provider_index, counter, now_ns() / 1_000_000).map(
            |(pick, credential)| {
                abi::set_header(Kind::Request, credential.name, credential.value.as_bytes());
                pick
            },
        );
        if let Some(signed) = signed {
            abi::set_header(Kind::Request, "content-type", b"application/json");
            for (name, value) in signed.pairs() {
                abi::set_header(Kind::Request, name, value.as_bytes());
            }
        }
        let streaming = api == Api::StreamGenerateContent
            || d.translation.as_ref().map_or(d.may_stream && openai::requests_stream(body), |(_, c)| c.stream);
        self.pending = Some(Pending::new(req, config, api, d, (reservation, streaming), key_pick));
        1 << 32 | 1
    }

    /// Answers a request refused after its model was read (with `retry-after` when given), and
    /// records it.
    fn refuse(&self, config: &Config, req: &Request, (e, retry): (&ApiError, Option<&str>), names: &Names<'_>) -> u64 {
        let path = self.settings.as_ref().ok().and_then(|s| s.usage_file.as_deref());
        record::write(path, config, req, names, &Outcome { status: e.status, ..Outcome::default() });
        reply::error_with(e, req.dialect, &req.id, retry.map(|r| ("retry-after", r)))
    }

    /// Reserves the request's amounts on its key's limits (counted in this instance); a
    /// refusal is the error and its `retry-after`.
    fn admit(
        &mut self,
        config: &Config,
        req: &Request,
        d: &RouteDecision<'_>,
        body: &[u8],
    ) -> Result<Option<limits::Reservation>, (ApiError, Option<String>)> {
        let plan = config.limit_plans.for_key(req.caller.key_index());
        if plan.is_empty() {
            return Ok(None);
        }
        let amounts = estimate::amounts(config, plan, (d.provider, &d.upstream_model), body);
        let usd = plan.iter().any(|s| s.metric == Metric::MicroUsd);
        if amounts.micro_usd.is_none() && usd && config.unpriced == Unpriced::Block {
            return Err((limits::unpriced_refusal(&d.upstream_model), None));
        }
        limits::admit(plan, amounts, req.started_ns / 1_000_000, &mut self.counters)
            .map(Some)
            .map_err(|refusal| refusal.answer(plan))
    }
}

/// The caller, from the credential headers or a Gemini path's `?key=`.
fn authenticate(config: &Config, uri: &str, now_ns: u64) -> Result<Caller, ApiError> {
    let [authorization, x_api_key, x_goog_api_key, api_key] =
        CLIENT_CREDENTIALS.map(|name| abi::header(Kind::Request, name));
    let x_api_key = x_api_key.or(api_key);
    let key = extract_key(authorization.as_deref(), x_api_key.as_deref(), x_goog_api_key.as_deref())
        .or_else(|| gemini_query_key(uri));
    let now_secs = i64::try_from(now_ns / 1_000_000_000).unwrap_or(i64::MAX);
    Ok(config.authenticate(key, now_secs)?)
}

/// `count_tokens`: answered here with an estimate, for a model the caller may use.
fn count_tokens(config: &Config, req: &Request, body: &[u8]) -> u64 {
    match translate::count::answer_for(config, req.caller, body) {
        Ok(answer) => reply::json(200, &answer, &req.id, None),
        Err(e) => reply::error(&e, req.dialect, &req.id),
    }
}

/// The body to hand on: Traefik forwards the client's `Content-Length` whatever the guest
/// wrote, so unless a `buffering` middleware follows, a body of another length is brought to
/// the client's (`ferrogate_core::traefik::fit_length`).
fn sized_for_traefik(body: Vec<u8>, followed_by_buffering: bool, json: bool) -> Result<Vec<u8>, ApiError> {
    let client_len = abi::header(Kind::Request, "content-length")
        .and_then(|v| std::str::from_utf8(&v).ok().and_then(|v| v.trim().parse::<usize>().ok()));
    let Some(want) = client_len.filter(|&n| !followed_by_buffering && n != body.len()) else { return Ok(body) };
    ferrogate_core::traefik::fit_length(body, want, json).map_err(|e| {
        ApiError::from_upstream(
            500,
            format!("{e}: this route needs Traefik's buffering middleware after ferrogate (followedByBuffering: true)"),
        )
    })
}

/// The SigV4 headers of a Bedrock request over the body as sent (`None` for other providers);
/// keys about to expire are a 503 before anything is reserved.
fn sign_bedrock(
    d: &RouteDecision<'_>,
    body: &[u8],
) -> Result<Option<ferrogate_core::clouds::sigv4::SignedHeaders>, ApiError> {
    let Some((region, keys)) = d.aws else { return Ok(None) };
    let request = ferrogate_core::clouds::BedrockRequest {
        host: d.authority,
        path: &d.path,
        content_type: "application/json",
        body,
    };
    ferrogate_core::clouds::sign_bedrock(keys, region, &request, now_ns() / 1_000_000_000)
        .map(Some)
        .map_err(|e| ApiError::unavailable(format!("Provider '{}': {e}.", d.provider)))
}

/// The request's head for the provider: its credential instead of the client's, its path,
/// and the routing header Traefik's routers match to reach its service.
fn rewrite_head(cluster_header: &str, d: &RouteDecision<'_>) {
    for name in CLIENT_CREDENTIALS {
        abi::remove(Kind::Request, name);
    }
    // Never sent upstream, and a client must not pick the endpoint itself.
    abi::remove(Kind::Request, ferrogate_core::kv::TOKEN_IDS_HEADER);
    abi::remove(Kind::Request, headers::DESTINATION_ENDPOINT);
    if let Some(cred) = d.credential {
        abi::set_header(Kind::Request, cred.name, cred.value.as_bytes());
    }
    if d.translation.as_ref().is_some_and(|(pair, _)| pair.outbound == Outbound::Anthropic) {
        abi::set_header(Kind::Request, "anthropic-version", translate::anthropic::VERSION.as_bytes());
    }
    abi::set_header(Kind::Request, cluster_header, d.provider.as_bytes());
    abi::set_request_uri(&d.path);
    abi::set_header(Kind::Response, headers::PROVIDER, d.provider.as_bytes());
    abi::set_header(Kind::Response, headers::MODEL, d.upstream_model.as_bytes());
}

/// `body` with the client's `anthropic-beta` betas when it goes to Claude on Bedrock
/// ([`with_client_betas`]).
fn with_betas(config: &Config, d: &RouteDecision<'_>, body: Vec<u8>) -> Result<Vec<u8>, ApiError> {
    let Some(header) = abi::header(Kind::Request, "anthropic-beta") else { return Ok(body) };
    Ok(with_client_betas(config, d, &body, &header)?.unwrap_or(body))
}
