//! One ext_proc stream driven through a worker's filter VM, as `serve`'s HTTP driver drives a
//! proxied request: messages from the gateway go into the VM, the VM's [`StreamEvent`]s come
//! back out as ext_proc replies. Nothing is forwarded upstream; the gateway does that with the
//! pick the reply carries.

use std::rc::Rc;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ext_proc::v3::processing_request::Request as Msg;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response as Out;
use envoy_types::pb::envoy::service::ext_proc::v3::{body_mutation, HttpBody, HttpHeaders, ProcessingRequest};
use ferrogate_host::{Headers, StreamEvent, StreamId, StreamInfo};
use tokio::sync::Notify;
use tonic::Status;

use ferrogate_core::epp;
use ferrogate_core::headers::{DESTINATION_ENDPOINT, HOST_ONLY};

use super::{convert, hint};
use super::{BodyMode, Job, Reply};
use crate::serve::worker::{new_request_id, VmRef, Worker};

mod response;

/// Where the request side stands.
#[derive(Default)]
struct RequestSide {
    /// The headers the VM was given (what mutations are computed against).
    given: Option<Headers>,
    /// The gateway said no body follows the headers (or sends none: mode NONE).
    bodyless: bool,
    /// Body bytes received from the gateway.
    body_in: Vec<u8>,
    /// Headers the VM released (the routing decision).
    released: Option<Headers>,
    /// Body bytes the VM released.
    body_out: Vec<u8>,
    /// The headers message was already answered (non-duplex modes answer it at once).
    headers_answered: bool,
    /// Body messages received (STREAMED answers each one).
    chunks: usize,
    /// The routing reply went out.
    done: bool,
}

/// Where the response side stands.
#[derive(Default)]
struct ResponseSide {
    started: bool,
    headers_answered: bool,
    body_in: Vec<u8>,
    body_out: Vec<u8>,
    done: bool,
}

/// A local reply of the filter being collected.
#[derive(Default)]
struct Local {
    headers: Headers,
    details: String,
    body: Vec<u8>,
}

pub(super) struct Driver {
    worker: Rc<Worker>,
    vm: VmRef,
    id: StreamId,
    wake: Arc<Notify>,
    job: Job,
    request_mode: BodyMode,
    response_mode: BodyMode,
    req: RequestSide,
    resp: ResponseSide,
    local: Option<Local>,
    /// The stream is over (reply sent, error sent, or the gateway went away).
    ended: bool,
    /// The VM's stream ends as reset (error or the gateway vanished mid-way).
    reset: bool,
    /// The pick sent to the gateway (the whole list, fallbacks included).
    pick: Option<String>,
}

/// Removes the headers only a host may give the filter (failover's and the picker's own),
/// from a client's request or an upstream's answer.
fn strip_host_headers(headers: &mut Headers) {
    for name in HOST_ONLY {
        headers.remove(name);
    }
}

impl Driver {
    pub(super) fn new(worker: Rc<Worker>, job: Job) -> Driver {
        let vm = worker.vm();
        let wake = Arc::new(Notify::new());
        let waker = wake.clone();
        let info = StreamInfo {
            source_address: job.peer,
            destination_address: None,
            connection_id: 0,
            protocol: "HTTP/1.1".into(),
        };
        let id = vm.borrow_mut().create_stream(info, Some(Box::new(move || waker.notify_one())));
        Driver {
            worker,
            vm,
            id,
            wake,
            job,
            request_mode: BodyMode::Duplex,
            response_mode: BodyMode::Duplex,
            req: RequestSide::default(),
            resp: ResponseSide::default(),
            local: None,
            ended: false,
            reset: false,
            pick: None,
        }
    }

    /// Runs the stream to its end, then finishes the VM's stream (usage, in-flight release).
    pub(super) async fn run(mut self) {
        loop {
            self.apply_events().await;
            if self.ended {
                break;
            }
            let wake = self.wake.clone();
            tokio::select! {
                biased;
                _ = wake.notified() => {}
                msg = self.job.inbound.message() => match msg {
                    Ok(Some(m)) => self.on_message(m).await,
                    Ok(None) => {
                        self.reset = !self.resp.done && self.resp.started;
                        self.ended = true;
                    }
                    Err(e) => {
                        tracing::debug!(stream = self.id, error = %e, "ext_proc stream failed");
                        self.reset = true;
                        self.ended = true;
                    }
                },
                () = self.job.out.closed() => {
                    self.reset = true;
                    self.ended = true;
                }
            }
        }
        let _ = self.vm.borrow_mut().finish_stream(self.id, self.reset);
        self.worker.pump(&self.vm);
    }

    /// Runs one host input and dispatches the callouts it issued.
    fn call(&mut self, f: impl FnOnce(&mut ferrogate_host::Vm, StreamId) -> Result<(), ferrogate_host::HostError>) {
        let result = f(&mut self.vm.borrow_mut(), self.id);
        self.worker.pump(&self.vm);
        if let Err(e) = result {
            tracing::error!(stream = self.id, error = %e, "filter host error; failing the ext_proc stream");
            self.fail(Status::internal("filter host error"));
        }
    }

    async fn send(&mut self, reply: Reply) {
        if self.job.out.send(reply).await.is_err() {
            self.reset = true;
            self.ended = true;
        }
    }

    /// Ends the stream with a gRPC error.
    fn fail(&mut self, status: Status) {
        let _ = self.job.out.try_send(Err(status));
        self.reset = true;
        self.ended = true;
    }

    /// Refuses a message out of sequence with an immediate 400 and ends the stream.
    async fn refuse(&mut self, why: &str) {
        tracing::debug!(stream = self.id, why, "malformed ext_proc sequence");
        self.send_refusal(400, why).await;
    }

    /// Ends the stream with an immediate `code` response saying `why`.
    async fn send_refusal(&mut self, code: i32, why: &str) {
        self.send(Ok(convert::refusal(code, why))).await;
        self.reset = true;
        self.ended = true;
    }

    async fn on_message(&mut self, m: ProcessingRequest) {
        if self.local.is_some() {
            return;
        }
        if let Some(config) = &m.protocol_config {
            match (BodyMode::of(config.request_body_mode), BodyMode::of(config.response_body_mode)) {
                (Some(BodyMode::Streamed), _) if !config.send_body_without_waiting_for_header_response => {
                    return self.fail(Status::unimplemented(
                        "request body mode STREAMED needs send_body_without_waiting_for_header_response: \
                         the pick is made from the body; or use FULL_DUPLEX_STREAMED",
                    ))
                }
                (Some(req), Some(resp)) => (self.request_mode, self.response_mode) = (req, resp),
                _ => return self.fail(Status::invalid_argument("unknown body send mode")),
            }
        }
        match m.request {
            Some(Msg::RequestHeaders(h)) => {
                let subset = hint::subset(m.metadata_context.as_ref());
                self.on_request_headers(h, subset).await
            }
            Some(Msg::RequestBody(b)) => self.on_request_body(b).await,
            Some(Msg::RequestTrailers(t)) => match self.req.given.is_some() && !self.req.bodyless {
                true => self.call(|vm, id| vm.request_trailers(id, convert::headers_in(t.trailers.as_ref()))),
                false => self.refuse("request trailers before request headers").await,
            },
            Some(Msg::ResponseHeaders(h)) => {
                let served = hint::served(m.metadata_context.as_ref());
                self.on_response_headers(h, served).await
            }
            Some(Msg::ResponseBody(b)) => self.on_response_body(b).await,
            Some(Msg::ResponseTrailers(t)) => match self.resp.started {
                true => self.call(|vm, id| vm.response_trailers(id, convert::headers_in(t.trailers.as_ref()))),
                false => self.refuse("response trailers before response headers").await,
            },
            None => self.refuse("a processing request with no message").await,
        }
    }

    async fn on_request_headers(&mut self, h: HttpHeaders, subset: Option<String>) {
        if self.req.given.is_some() {
            return self.refuse("request headers twice").await;
        }
        let given = convert::headers_in(h.headers.as_ref());
        let mut headers = given.clone();
        // Only this host may say what the filter trusts from its host: clients' copies go.
        strip_host_headers(&mut headers);
        if headers.get(ferrogate_core::headers::REQUEST_ID).is_none() {
            headers.set(ferrogate_core::headers::REQUEST_ID, new_request_id());
        }
        if let Some(subset) = subset {
            headers.set(epp::SUBSET_HEADER, subset);
        }
        if self.job.fallbacks > 0 {
            headers.set(epp::FALLBACKS_HEADER, self.job.fallbacks.to_string());
        }
        let eos = h.end_of_stream || self.request_mode == BodyMode::None;
        self.req.bodyless = eos;
        self.req.given = Some(given);
        self.call(|vm, id| vm.request_headers(id, headers, eos));
        if self.request_mode.waits_for_headers() && !eos {
            // Envoy waits for this reply before it sends the body: answer it now (unless the
            // filter already answered locally) and route with the body's reply.
            self.apply_events().await;
            if self.local.is_none() && !self.ended {
                self.req.headers_answered = true;
                let common = convert::common(None, None, false);
                self.send(Ok(convert::headers_reply(Out::RequestHeaders, common, None))).await;
            }
        }
    }

    async fn on_request_body(&mut self, b: HttpBody) {
        if self.req.given.is_none() || self.req.bodyless {
            return self.fail(Status::invalid_argument("request body before request headers"));
        }
        if self.request_mode == BodyMode::Partial && !b.end_of_stream {
            // The rest of the body will never be seen here: the model cannot be read from it.
            return self.send_refusal(413, "request body larger than the gateway's ext_proc buffer").await;
        }
        self.req.chunks += 1;
        self.req.body_in.extend_from_slice(&b.body);
        self.call(|vm, id| vm.request_data(id, &b.body, b.end_of_stream));
    }

    /// Carries out everything the filter chain released, in order.
    async fn apply_events(&mut self) {
        while !self.ended {
            let events = self.vm.borrow_mut().take_events(self.id);
            if events.is_empty() {
                return;
            }
            for event in events {
                self.apply(event).await;
                if self.ended {
                    return;
                }
            }
        }
    }

    async fn apply(&mut self, event: StreamEvent) {
        match event {
            StreamEvent::RequestHeaders { headers, end_of_stream } => {
                self.req.released = Some(headers);
                if end_of_stream {
                    self.route().await;
                }
            }
            StreamEvent::RequestData { data, end_of_stream } => {
                self.req.body_out.extend_from_slice(&data);
                if end_of_stream {
                    self.route().await;
                }
            }
            StreamEvent::RequestTrailers(_) => self.route().await,
            StreamEvent::AbortUpstream { details } => {
                self.local = Some(Local { details, ..Local::default() });
            }
            StreamEvent::ResponseHeaders { headers, end_of_stream } => {
                self.on_released_head(headers, end_of_stream).await
            }
            StreamEvent::ResponseData { data, end_of_stream } => self.on_released_data(data, end_of_stream).await,
            StreamEvent::ResponseTrailers(_) => self.on_released_data(Vec::new(), true).await,
            StreamEvent::Reset { details } => {
                tracing::debug!(stream = self.id, details, "the filter reset the stream");
                self.fail(Status::aborted(format!("the filter reset the stream: {details}")));
            }
        }
    }

    /// The request is complete on the filter's side: send the routing decision.
    async fn route(&mut self) {
        if self.req.done || self.local.is_some() {
            return;
        }
        self.req.done = true;
        let given = self.req.given.clone().unwrap_or_default();
        let mut released = self.req.released.take().unwrap_or_else(|| given.clone());
        strip_host_headers(&mut released);
        self.pick = released.get_str(DESTINATION_ENDPOINT).map(str::to_string);
        let mut mutation = convert::mutation(&given, &released);
        let changed = self.req.body_out != self.req.body_in;
        if changed && !self.req.bodyless {
            let length = self.req.body_out.len().to_string();
            mutation.set_headers.retain(|h| h.header.as_ref().is_none_or(|h| h.key != "content-length"));
            mutation.remove_headers.retain(|h| h != "content-length");
            mutation.set_headers.extend(
                convert::mutation(&Headers::new(), &Headers::from_pairs([("content-length", length)])).set_headers,
            );
        }
        let metadata = convert::lb_metadata(&released);
        if !self.req.headers_answered {
            let common = convert::common(Some(mutation), None, true);
            self.send(Ok(convert::headers_reply(Out::RequestHeaders, common, metadata))).await;
            if self.request_mode == BodyMode::Duplex && !self.req.bodyless {
                for part in convert::streamed(Out::RequestBody, &self.req.body_out, true) {
                    self.send(Ok(part)).await;
                }
            } else if self.request_mode == BodyMode::Streamed {
                let body = changed.then(|| std::mem::take(&mut self.req.body_out));
                for part in convert::per_chunk(Out::RequestBody, body, self.req.chunks) {
                    self.send(Ok(part)).await;
                }
            }
        } else {
            let body = changed.then(|| body_mutation::Mutation::Body(self.req.body_out.clone()));
            let common = convert::common(Some(mutation), body, true);
            self.send(Ok(convert::body_reply(Out::RequestBody, common, metadata))).await;
        }
    }
}
