"""Guardrail policies (the `guardrails:` block) end to end, through the official OpenAI (Chat
Completions and Responses), Anthropic and Google Gen AI SDKs.

This module runs its own `ferrogate sim` + `ferrogate serve` (conftest.own_gateway) with the
policies below, each on its own public model (all -> provider `local` -> the sim's OpenAI
surface, so the Anthropic, Gemini and Responses clients are translated), granted to alice
through the group `guard`; `g-plain` has no policy. Alongside run a guardrail webhook (a
`http.server` in a thread, one behaviour per path) and, for the moderation rule, the sim's
`POST /v1/moderations`, which stands in for OpenAI's SaaS moderation endpoint: it flags a text
holding `violence-trigger` as `violence` (docs/sim.md, "Moderation").

What the provider saw is read from the sim's answer: with `x-sim-echo-prompt: 1` the answer is
the prompt the sim received (`user: <text>`), and with `x-sim-chunk-chars: N` it streams that
text in N-character deltas, so a planted email address is split across chunks. Whether the
sim was called at all is read from its `/metrics` (requests admitted and finished).
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as gtypes
from prometheus_client.parser import text_string_to_metric_families

from conftest import Gateway, _start, own_gateway

KEY = "alice"
EMAIL = "bob.smith@example.com"
OTHER_EMAIL = "carol.jones@example.org"
CARD = "4111 1111 1111 1111"  # the Visa test number: passes Luhn
MAX_TOKENS = 1024  # Anthropic requires it; the echoes stay far below
CHUNK_CHARS = 5  # an email of 21 characters spans at least four such deltas wherever it starts
ECHO = {"x-sim-echo-prompt": "1"}  # the sim answers with the prompt it received
# ... in deltas of CHUNK_CHARS characters, without pauses between them
SPLIT = {**ECHO, "x-sim-chunk-chars": str(CHUNK_CHARS), "x-sim-itl-ms": "0"}
# Text around a planted value in a streamed answer: longer than what the gateway holds back
# to see a match whole (an email can be 254 bytes), so the answer streams in several pieces.
FILLER = " ".join(f"filler{i}" for i in range(80))
HOOK_TIMEOUT_MS = 5_000  # generous: the machine is shared
SLOW_HOOK_TIMEOUT_MS = 300  # the webhook that never answers in time
SETTLE_TIMEOUT_S = 60.0  # counters reach the admin /metrics on the filter's next tick

DIALECTS = ("openai-chat", "openai-responses", "anthropic", "gemini")
# How each dialect types a 400 (OpenAI and Anthropic `type`, Gemini `status`); OpenAI's
# envelope also carries the `code`.
BAD_REQUEST_KIND = {"openai-chat": "invalid_request_error", "openai-responses": "invalid_request_error",
                    "anthropic": "invalid_request_error", "gemini": "INVALID_ARGUMENT"}
BLOCKED_CODE = "guardrail_blocked"

# The webhook's behaviours, by path: (path, fail setting, timeout).
HOOKS = {
    "allow": ("/allow", "closed", HOOK_TIMEOUT_MS),
    "block": ("/block", "closed", HOOK_TIMEOUT_MS),
    "rewrite": ("/rewrite", "closed", HOOK_TIMEOUT_MS),
    "down": ("/error", "closed", HOOK_TIMEOUT_MS),  # answers 500
    "slow": ("/slow", "closed", SLOW_HOOK_TIMEOUT_MS),  # answers only when the test lets it
    "open": ("/error", "open", HOOK_TIMEOUT_MS),
}
HOOK_REASON = "hook says no"
REWRITE = ("launch", "REWRITTEN-BY-HOOK")


def policies(hook_url: str) -> list[dict]:
    """The `guardrails:` block."""
    email = {"detector": "email", "action": "redact"}
    return [
        {"name": "pii", "input": [
            email,
            {"detector": "card", "action": "block"},
            {"name": "codename", "detector": "keywords", "words": ["bluebird"], "action": "block"},
            {"name": "ticket", "detector": "regex", "pattern": "TCK-[0-9]{6}", "action": "mask"},
        ]},
        {"name": "restore", "restore": True, "input": [email]},
        {"name": "out", "output": [
            email,
            {"name": "fruit", "detector": "keywords", "words": ["pineapple"], "action": "block"},
        ]},
        {"name": "limit", "max_prompt_chars": 200},
        {"name": "mod", "input": [
            {"kind": "moderation", "name": "mod", "provider": "local", "model": "omni-moderation-latest"}]},
        *({"name": f"hook{kind}", "input": [
            email,
            {"kind": "webhook", "name": "hook", "url": hook_url + path, "timeout_ms": timeout, "fail": fail},
        ]} for kind, (path, fail, timeout) in HOOKS.items()),
    ]


def model(policy: str | None) -> str:
    """The public model of a policy (`g-plain`: none)."""
    return f"g-{policy or 'plain'}"


# --------------------------------------------------------------------------- the webhook

class Webhook:
    """A guardrail webhook on a free port: answers by path (allow, block with a reason,
    rewrite, 500, or only once `release` is set), keeping every body it was sent."""

    def __init__(self):
        self.calls: list[tuple[str, dict]] = []
        self.release = threading.Event()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (the http.server name)
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"null")
                hook.calls.append((self.path, body))
                texts = body.get("texts", []) if isinstance(body, dict) else []
                if self.path == "/slow":
                    hook.release.wait(30)
                answers = {
                    "/allow": (200, {"action": "allow"}),
                    "/slow": (200, {"action": "allow"}),
                    "/block": (200, {"action": "block", "reason": HOOK_REASON}),
                    "/rewrite": (200, {"action": "rewrite", "texts": [t.replace(*REWRITE) for t in texts]}),
                }
                status, answer = answers.get(self.path, (500, {"error": "down"}))
                data = json.dumps(answer).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the gateway gave up on /slow

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def received(self, path: str) -> list[dict]:
        return [body for p, body in self.calls if p == path]

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


# --------------------------------------------------------------------------- fixtures

@dataclass
class Env:
    gw: Gateway
    hook: Webhook
    _clients: dict = field(default_factory=dict)

    def client(self, dialect: str, headers: dict[str, str] | None = None) -> Any:
        """alice's SDK client for `dialect`, sending `headers` on every request."""
        headers = headers or {}
        k = (dialect.split("-")[0], tuple(sorted(headers.items())))
        if k not in self._clients:
            key = self.gw.keys[KEY]
            if dialect.startswith("openai"):
                c = self.gw.client(KEY, default_headers=headers)
            elif dialect == "anthropic":
                c = anthropic.Anthropic(base_url=self.gw.gateway_url, api_key=key, max_retries=0, timeout=30.0,
                                        default_headers=headers)
                self.gw.clients.append(c)
            else:
                c = genai.Client(api_key=key, vertexai=False, http_options=gtypes.HttpOptions(
                    base_url=self.gw.gateway_url, api_version="v1beta", timeout=30_000, headers=headers))
                self.gw.clients.append(c)
            self._clients[k] = c
        return self._clients[k]


@pytest.fixture(scope="module")
def env(request) -> Env:
    hook = Webhook()

    def config(base: dict) -> dict:
        names = [model(None), *(model(p["name"]) for p in policies(hook.url))]
        base["guardrails"] = policies(hook.url)
        target = [{"provider": "local", "model": "sim-small"}]
        base["models"] += [{"name": model(None), "targets": target},
                           *({"name": model(p["name"]), "targets": target, "guardrails": [p["name"]]}
                             for p in policies(hook.url))]
        base["groups"].append({"name": "guard", "models": names})
        next(k for k in base["keys"] if k["name"] == KEY)["groups"].append("guard")
        return base

    try:
        for gw in own_gateway("ferrogate-guardrails-", lambda w, n: _start(w, n, config)):
            # conftest appends the logs of the gateway it knows to a failing test's report.
            previous = getattr(request.config, "_ferrogate_gateway", None)
            request.config._ferrogate_gateway = gw
            yield Env(gw, hook)
            request.config._ferrogate_gateway = previous
    finally:
        hook.close()


# --------------------------------------------------------------------------- one call per dialect

@dataclass
class Answer:
    text: str  # the answer's text (joined from the deltas when streamed)
    request_id: str
    deltas: list[str] = field(default_factory=list)  # streamed text deltas
    whole: list[str] = field(default_factory=list)  # texts a stream repeats whole (Responses' done events)


def _headers(h) -> dict[str, str]:
    return {k.lower(): v for k, v in dict(h or {}).items()}


def openai_chat(c: openai.OpenAI, model: str, prompt: str, stream: bool) -> Answer:
    msgs = [{"role": "user", "content": prompt}]
    raw = c.chat.completions.with_raw_response.create(model=model, messages=msgs, stream=stream)
    rid = raw.headers.get("x-request-id", "")
    if not stream:
        return Answer(raw.parse().choices[0].message.content or "", rid)
    deltas = [ch.choices[0].delta.content for ch in raw.parse() if ch.choices and ch.choices[0].delta.content]
    return Answer("".join(deltas), rid, deltas)


def openai_responses(c: openai.OpenAI, model: str, prompt: str, stream: bool) -> Answer:
    raw = c.responses.with_raw_response.create(model=model, input=prompt, store=False, stream=stream)
    rid = raw.headers.get("x-request-id", "")
    if not stream:
        return Answer(raw.parse().output_text, rid)
    events = list(raw.parse())
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    whole = [e.text for e in events if e.type == "response.output_text.done"]
    whole += [e.response.output_text for e in events if e.type == "response.completed"]
    assert whole, [e.type for e in events]
    return Answer("".join(deltas), rid, deltas, whole)


def anthropic_messages(c: anthropic.Anthropic, model: str, prompt: str, stream: bool) -> Answer:
    kw = {"model": model, "max_tokens": MAX_TOKENS, "messages": [{"role": "user", "content": prompt}]}
    if not stream:
        raw = c.messages.with_raw_response.create(**kw)
        msg = raw.parse()
        return Answer("".join(b.text for b in msg.content if b.type == "text"), raw.headers.get("x-request-id", ""))
    with c.messages.stream(**kw) as s:
        rid = s.response.headers.get("x-request-id", "")
        events = list(s)
    deltas = [e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"]
    return Answer("".join(deltas), rid, deltas)


def genai_generate(c: genai.Client, model: str, prompt: str, stream: bool) -> Answer:
    def texts(resp) -> list[str]:
        content = resp.candidates[0].content if resp.candidates else None
        return [p.text for p in (content.parts or [])] if content else []

    def request_id(resp) -> str:
        return _headers(resp.sdk_http_response.headers).get("x-request-id", "")

    if not stream:
        resp = c.models.generate_content(model=model, contents=prompt)
        return Answer("".join(t for t in texts(resp) if t), request_id(resp))
    chunks = list(c.models.generate_content_stream(model=model, contents=prompt))
    deltas = [t for ch in chunks for t in texts(ch) if t]
    return Answer("".join(deltas), request_id(chunks[0]), deltas)


DRIVERS: dict[str, Callable[..., Answer]] = {
    "openai-chat": openai_chat, "openai-responses": openai_responses,
    "anthropic": anthropic_messages, "gemini": genai_generate,
}


def ask(env: Env, dialect: str, policy: str | None, prompt: str, *, headers: dict | None = None,
        stream: bool = False) -> Answer:
    return DRIVERS[dialect](env.client(dialect, headers), model(policy), prompt, stream)


@dataclass
class Refusal:
    """An error answer as the SDK raised it, reduced to what every dialect has."""
    status: int
    kind: str  # OpenAI/Anthropic `type`, Gemini `status`
    code: str | None  # OpenAI's `code`
    message: str
    request_id: str


def refused(env: Env, dialect: str, policy: str | None, prompt: str, *, status: int = 400,
            headers: dict | None = None) -> Refusal:
    """Makes the call, which must fail with the SDK's error for `status`."""
    errors = {
        "openai": openai.BadRequestError if status == 400 else openai.APIStatusError,
        "anthropic": anthropic.BadRequestError if status == 400 else anthropic.APIStatusError,
        "gemini": genai_errors.ClientError if status < 500 else genai_errors.ServerError,
    }[dialect.split("-")[0]]
    with pytest.raises(errors) as caught:
        ask(env, dialect, policy, prompt, headers=headers)
    e = caught.value
    rid = _headers(getattr(e.response, "headers", None)).get("x-request-id", "")
    if dialect == "gemini":
        assert e.code == status, e
        return Refusal(e.code, e.status, None, e.message or "", rid)
    assert e.status_code == status, e
    error = e.response.json()["error"]
    return Refusal(e.status_code, error["type"], error.get("code"), error["message"], rid)


def assert_blocked(dialect: str, r: Refusal, rule: str, *secrets: str) -> None:
    """A guardrail's 400 in `dialect`: names `rule`, never the matched `secrets`."""
    assert r.status == 400 and r.kind == BAD_REQUEST_KIND[dialect], r
    if dialect.startswith("openai"):
        assert r.code == BLOCKED_CODE, r
    assert rule in r.message, r
    for s in secrets:
        assert s.lower() not in r.message.lower(), f"the refusal shows what was matched: {r}"


# --------------------------------------------------------------------------- the sim and the gateway

def sim_served(gw: Gateway) -> tuple[float, float]:
    """(prompt tokens admitted, requests finished) by the sim over all its models."""
    r = httpx.get(f"{gw.sim_url}/metrics", timeout=10)
    assert r.status_code == 200, r.text[:300]
    admitted = finished = 0.0
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            if s.name == "vllm:prompt_tokens_total":
                admitted += s.value
            elif s.name == "vllm:request_success_total":
                finished += s.value
    return admitted, finished


def sim_answer(gw: Gateway, prompt: str) -> str:
    """The sim's own answer to a one-message conversation, asked directly (no gateway)."""
    r = httpx.post(f"{gw.sim_url}/v1/chat/completions", timeout=30,
                   json={"model": "sim-small", "messages": [{"role": "user", "content": prompt}]})
    assert r.status_code == 200, r.text[:300]
    return r.json()["choices"][0]["message"]["content"]


def sim_moderations(gw: Gateway) -> float:
    text = httpx.get(f"{gw.sim_url}/metrics", timeout=10).text
    m = re.search(r"^sim:moderation_requests_total (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def gateway_counters(gw: Gateway) -> dict[tuple, float]:
    r = httpx.get(f"{gw.admin_url}/metrics", timeout=10)
    assert r.status_code == 200, r.text[:300]
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def wait_counters(gw: Gateway, before: dict, want: dict[tuple, float]) -> dict[tuple, float]:
    """The admin /metrics once every series of `want` grew by its figure since `before` (the
    filter hands its counters to the host on its tick)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        now = gateway_counters(gw)
        if all(now.get(k, 0.0) - before.get(k, 0.0) >= d for k, d in want.items()):
            return now
        if time.monotonic() > deadline:
            seen = sorted(k for k in now if "guardrail" in k[0])
            raise AssertionError(f"counts {want} not reached in {SETTLE_TIMEOUT_S}s; guardrail series: {seen}")
        time.sleep(0.1)


def series(name: str, **labels) -> tuple:
    return (name, tuple(sorted(labels.items())))


def guard_record(env: Env, request_id: str, policy: str) -> dict:
    """The `guardrails` object of the request's usage record."""
    assert request_id, "the answer has no x-request-id"
    rec = env.gw.wait_usage(request_id, key=KEY, model=model(policy), ready=lambda r: "guardrails" in r)
    return rec["guardrails"]


# --------------------------------------------------------------------------- input: detectors

@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_provider_sees_placeholders_instead_of_emails(env: Env, dialect: str):
    before = sim_served(env.gw)
    prompt = f"Mail {EMAIL} or {EMAIL}, cc {OTHER_EMAIL}, about the launch."
    a = ask(env, dialect, "pii", prompt, headers=ECHO)
    # The sim echoes what it received: the same value has the same placeholder.
    assert "Mail [EMAIL_1] or [EMAIL_1], cc [EMAIL_2], about the launch." in a.text, a
    assert EMAIL not in a.text and OTHER_EMAIL not in a.text, a
    assert sim_served(env.gw)[1] == before[1] + 1


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_block_is_a_400_in_the_callers_dialect_and_the_provider_is_not_called(env: Env, dialect: str):
    before = sim_served(env.gw)
    r = refused(env, dialect, "pii", f"Charge my card {CARD} for the launch, and mail {EMAIL}.")
    assert_blocked(dialect, r, "pii/card", CARD, "4111", EMAIL)
    assert sim_served(env.gw) == before, "the provider was called"


def test_keywords_block_whatever_the_case(env: Env):
    before = sim_served(env.gw)
    r = refused(env, "openai-chat", "pii", "Any news on Project BlueBird?")
    assert_blocked("openai-chat", r, "pii/codename", "bluebird")
    # Whole words only: a longer word holding it passes.
    a = ask(env, "openai-chat", "pii", "The bluebirds sang.", headers=ECHO)
    assert "The bluebirds sang." in a.text, a
    assert sim_served(env.gw)[1] == before[1] + 1


def test_mask_keeps_the_last_four(env: Env):
    a = ask(env, "openai-chat", "pii", "Ticket TCK-123456 is open.", headers=ECHO)
    assert "Ticket ***-**3456 is open." in a.text, a
    assert "TCK-123456" not in a.text


def test_max_prompt_chars_refuses_a_long_prompt(env: Env):
    before = sim_served(env.gw)
    r = refused(env, "openai-chat", "limit", "word " * 100)
    assert r.code == BLOCKED_CODE and "limit/" in r.message, r
    assert sim_served(env.gw) == before
    a = ask(env, "openai-chat", "limit", "short enough", headers=ECHO)
    assert "short enough" in a.text, a


# --------------------------------------------------------------------------- output

@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_streamed_answer_is_redacted_across_chunk_boundaries(env: Env, dialect: str):
    prompt = f"{FILLER} Contact {EMAIL} today. {FILLER}"
    # Without a policy, the planted address arrives in pieces: no chunk holds it whole.
    plain = ask(env, dialect, None, prompt, headers=SPLIT, stream=True)
    assert EMAIL in plain.text, plain
    assert not [d for d in plain.deltas if EMAIL in d], plain.deltas
    assert any(d in EMAIL and "@" in d for d in plain.deltas), f"no chunk cuts into the address: {plain.deltas}"

    a = ask(env, dialect, "out", prompt, headers=SPLIT, stream=True)
    assert len(a.deltas) > 1, "the answer was not streamed"
    assert EMAIL not in a.text and "@example" not in a.text, a
    assert "Contact [EMAIL_1] today." in a.text, a
    for whole in a.whole:  # Responses repeats the whole text in its closing events
        assert EMAIL not in whole and "[EMAIL_1]" in whole, a.whole


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_plain_answer_is_redacted(env: Env, dialect: str):
    a = ask(env, dialect, "out", f"Contact {EMAIL} today.", headers=ECHO)
    assert "Contact [EMAIL_1] today." in a.text and EMAIL not in a.text, a


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_output_block_is_a_400_in_the_callers_dialect(env: Env, dialect: str):
    r = refused(env, dialect, "out", "Please say Pineapple.", headers=ECHO)
    assert_blocked(dialect, r, "out/fruit", "pineapple")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_restore_puts_the_original_back_in_the_answer(env: Env, dialect: str, stream: bool):
    prompt = f"{FILLER} Reply to {EMAIL} now. {FILLER}" if stream else f"Reply to {EMAIL} now."
    a = ask(env, dialect, "restore", prompt, headers=SPLIT if stream else ECHO, stream=stream)
    # The sim echoed "[EMAIL_1]" (split across chunks when streamed); the caller gets the address.
    assert f"Reply to {EMAIL} now." in a.text and "[EMAIL_" not in a.text, a
    for whole in a.whole:
        assert EMAIL in whole and "[EMAIL_" not in whole, a.whole
    hits = guard_record(env, a.request_id, "restore").get("hits", [])
    assert {"rule": "restore/email", "stage": "input", "action": "redact", "count": 1} in hits, hits
    # Without the echo, the sim's words come from a hash of the prompt it got: the redacted one.
    hashed = ask(env, dialect, "restore", prompt, stream=stream)
    assert hashed.text == sim_answer(env.gw, prompt.replace(EMAIL, "[EMAIL_1]")), hashed


# --------------------------------------------------------------------------- webhooks

def test_a_webhook_that_allows_gets_the_contract_and_no_redacted_text(env: Env):
    sent = len(env.hook.received("/allow"))
    a = ask(env, "openai-chat", "hookallow", f"Mail {EMAIL} about the launch.", headers=ECHO)
    assert "Mail [EMAIL_1] about the launch." in a.text, a
    calls = env.hook.received("/allow")[sent:]
    assert len(calls) == 1, calls
    call = calls[0]
    assert set(call) >= {"stage", "policy", "rule", "request_id", "key", "model", "api", "texts"}, call
    assert (call["stage"], call["policy"], call["rule"]) == ("input", "hookallow", "hook"), call
    assert (call["key"], call["model"], call["api"]) == (KEY, model("hookallow"), "chat_completions"), call
    assert call["request_id"] == a.request_id, (call, a.request_id)
    assert any("[EMAIL_1]" in t for t in call["texts"]), call
    assert EMAIL not in json.dumps(call), "the webhook saw what a detector redacted"
    checks = guard_record(env, a.request_id, "hookallow").get("checks", [])
    assert [(c["rule"], c["stage"], c["verdict"]) for c in checks] == [("hookallow/hook", "input", "allow")], checks
    assert all(isinstance(c["latency_ms"], int) for c in checks), checks


def test_a_webhook_block_shows_its_reason(env: Env):
    before = sim_served(env.gw)
    r = refused(env, "openai-chat", "hookblock", f"Mail {EMAIL} about the launch.")
    assert_blocked("openai-chat", r, "hookblock/hook", EMAIL)
    assert HOOK_REASON in r.message, r
    assert sim_served(env.gw) == before


def test_a_webhook_rewrite_is_what_the_provider_sees(env: Env):
    a = ask(env, "openai-chat", "hookrewrite", f"Mail {EMAIL} about the launch.", headers=ECHO)
    assert "Mail [EMAIL_1] about the REWRITTEN-BY-HOOK." in a.text, a
    assert EMAIL not in json.dumps(env.hook.received("/rewrite")), "the webhook saw what a detector redacted"


@pytest.mark.parametrize("policy", ["hookdown", "hookslow"])
def test_a_failing_webhook_that_fails_closed_refuses_with_503(env: Env, policy: str):
    before = sim_served(env.gw)
    env.hook.release.clear()  # /slow answers only once the gateway has given up
    try:
        r = refused(env, "openai-chat", policy, "Is the launch on?", status=503)
    finally:
        env.hook.release.set()
    assert r.code == "guardrail_unavailable" and f"{policy}/hook" in r.message, r
    assert sim_served(env.gw) == before


def test_a_failing_webhook_that_fails_open_lets_the_request_through(env: Env):
    sent = len(env.hook.received("/error"))
    a = ask(env, "openai-chat", "hookopen", "Is the launch on?", headers=ECHO)
    assert "Is the launch on?" in a.text, a
    assert len(env.hook.received("/error")) == sent + 1, "the webhook was not asked"


# --------------------------------------------------------------------------- moderation

def test_moderation_blocks_flagged_text_and_passes_clean_text(env: Env):
    """The sim's /v1/moderations stands in for OpenAI's SaaS moderation endpoint."""
    before, served = sim_moderations(env.gw), sim_served(env.gw)
    r = refused(env, "openai-chat", "mod", "a violence-trigger in a sentence")
    assert r.code == BLOCKED_CODE and "mod/mod" in r.message and "flagged: violence" in r.message, r
    assert sim_served(env.gw) == served, "a flagged request reached the provider"
    a = ask(env, "openai-chat", "mod", "a calm sentence", headers=ECHO)
    assert "a calm sentence" in a.text, a
    assert sim_moderations(env.gw) == before + 2, "the moderation endpoint was not asked both times"


# --------------------------------------------------------------------------- records and metrics

def test_usage_records_and_metrics_count_hits_and_blocks(env: Env):
    before = gateway_counters(env.gw)
    blocked = refused(env, "openai-chat", "pii", f"My card is {CARD}.")
    redacted = ask(env, "openai-chat", "pii", f"Mail {EMAIL}.", headers=ECHO)

    g = guard_record(env, blocked.request_id, "pii")
    assert g.get("blocked") == "pii/card", g
    assert {"rule": "pii/card", "stage": "input", "action": "block", "count": 1} in g.get("hits", []), g
    g = guard_record(env, redacted.request_id, "pii")
    assert "blocked" not in g, g
    assert g.get("hits") == [{"rule": "pii/email", "stage": "input", "action": "redact", "count": 1}], g

    hits = "ferrogate_guardrail_hits_total"
    want = {series(hits, rule="pii/card", stage="input", action="block"): 1,
            series(hits, rule="pii/email", stage="input", action="redact"): 1}
    wait_counters(env.gw, before, want)
