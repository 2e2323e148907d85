"""Provider key pools end to end: one provider with several keys (`api_keys_env`) in front of a
stand-in upstream that answers each key its own way.

The stand-in (`PoolUpstream`, OpenAI chat completions) answers the rate-limited key's first
request with 429 and `Retry-After: 2`, then normally; the revoked key always with 401; the
good keys always with 200. Through the gateway: requests spread over the usable keys, the
rate-limited key is left alone for its rest and used again after it (waited for as an event,
never a fixed sleep), the revoked key is never used again, `/metrics` counts the cooldown and
the disabling by fingerprint, the admin targets view lists the fingerprints, and no key shows
in any log, in `/metrics` or in the admin answers.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import Gateway, _start, own_gateway

MESSAGES = [{"role": "user", "content": "Which key was it?"}]
# Variables the pool names, in order; UNSET is never set (the pool skips it).
ENV = {name: f"FG_T_POOL_{name.upper()}" for name in ("good_a", "limited", "unset", "revoked", "good_b")}
REST_S = 2  # the rate-limited key's Retry-After
EVENT_TIMEOUT_S = 60.0  # generous: a loaded machine, a debug build


def fingerprint(key: str) -> str:
    """What the gateway names a key by: `k-` and 8 hex digits of its SHA-256."""
    return "k-" + hashlib.sha256(key.encode()).hexdigest()[:8]


@dataclass
class PoolUpstream:
    """The stand-in upstream: which key each chat completion came with, and when."""
    keys: dict[str, str]  # role -> key
    seen: list[tuple[float, str]] = field(default_factory=list)  # (monotonic time, role)
    lock: threading.Lock = field(default_factory=threading.Lock)
    limited_once: bool = False
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def roles(self) -> list[str]:
        with self.lock:
            return [role for _, role in self.seen]

    def times(self, role: str) -> list[float]:
        with self.lock:
            return [t for t, r in self.seen if r == role]

    def answer(self, auth: str) -> tuple[int, dict, dict]:
        """Status, extra headers and JSON body for a request with `Authorization: auth`."""
        role = next((r for r, k in self.keys.items() if auth == f"Bearer {k}"), "unknown")
        with self.lock:
            self.seen.append((time.monotonic(), role))
            first_limit = role == "limited" and not self.limited_once
            self.limited_once = self.limited_once or first_limit
        if first_limit:
            return 429, {"Retry-After": str(REST_S)}, error("Rate limit reached for requests.", "rate_limit_exceeded")
        if role in ("revoked", "unknown"):
            return 401, {}, error("Incorrect API key provided.", "invalid_api_key")
        return 200, {}, completion(role)


def error(message: str, code: str) -> dict:
    # Never the key: the gateway's logs are checked for it, and so should an upstream be.
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}


def completion(role: str) -> dict:
    return {"id": f"chatcmpl-{secrets.token_hex(6)}", "object": "chat.completion", "created": int(time.time()),
            "model": "stand-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": f"served by {role}"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}


def start_upstream(keys: dict[str, str]) -> PoolUpstream:
    upstream = PoolUpstream(keys)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet: pytest shows failures, not traffic
            pass

        def reply(self, status: int, headers: dict, body: dict | None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            # The sidecar probes engines: healthy, without engine metrics.
            if self.path == "/health":
                self.reply(200, {}, {"status": "ok"})
            else:
                self.reply(404, {}, None)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path != "/v1/chat/completions":
                return self.reply(404, {}, None)
            self.reply(*upstream.answer(self.headers.get("authorization", "")))

    upstream.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=upstream.server.serve_forever, daemon=True).start()
    return upstream


@pytest.fixture(scope="module")
def upstream():
    keys = {role: f"sk-pool-{role}-{secrets.token_hex(16)}" for role in ENV if role != "unset"}
    up = start_upstream(keys)
    yield up
    up.server.shutdown()
    up.server.server_close()


@pytest.fixture(scope="module")
def gw(upstream: PoolUpstream) -> Gateway:
    def pooled(doc: dict) -> dict:
        doc["providers"].append({"name": "pool", "kind": "openai_compatible", "base_url": upstream.url,
                                 "api_keys_env": list(ENV.values())})
        doc["models"].append({"name": "pooled", "targets": [{"provider": "pool", "model": "stand-model"}]})
        next(g for g in doc["groups"] if g["name"] == "dev")["models"].append("pooled")
        return doc

    saved = {var: os.environ.get(var) for var in ENV.values()}
    for role, var in ENV.items():
        if role in upstream.keys:
            os.environ[var] = upstream.keys[role]
        else:
            os.environ.pop(var, None)
    try:
        yield from own_gateway("fg-key-pools-", lambda w, n: _start(w, n, pooled))
    finally:
        for var, value in saved.items():
            os.environ.pop(var, None) if value is None else os.environ.__setitem__(var, value)


@dataclass
class Traffic:
    statuses: list[int]  # every client answer, in order
    before_return: list[str]  # roles the upstream saw after both bad keys answered, until the limited key's return
    after_return: list[str]  # roles it saw in the requests after that


@pytest.fixture(scope="module")
def traffic(gw: Gateway, upstream: PoolUpstream) -> Traffic:
    """Sends requests until each bad key has answered, then until the limited key is used
    again after its rest, then a few more."""
    statuses: list[int] = []
    headers = {"authorization": f"Bearer {gw.keys['alice']}"}
    with httpx.Client(base_url=gw.gateway_url, headers=headers, timeout=30) as http:
        def send() -> None:
            r = http.post("/v1/chat/completions", json={"model": "pooled", "messages": MESSAGES})
            statuses.append(r.status_code)

        def until(what: str, done) -> None:
            deadline = time.monotonic() + EVENT_TIMEOUT_S
            while not done():
                assert time.monotonic() < deadline, f"{what}: the upstream saw {upstream.roles()}"
                send()
                time.sleep(0.02)

        until("both bad keys answered", lambda: {"limited", "revoked"} <= set(upstream.roles()))
        both_seen = len(upstream.roles())
        until("the limited key was used again", lambda: upstream.roles().count("limited") >= 2)
        back_at = len(upstream.roles()) - 1
        for _ in range(12):
            send()
    roles = upstream.roles()
    return Traffic(statuses, roles[both_seen:back_at], roles[back_at + 1:])


def test_requests_spread_over_the_usable_keys(traffic: Traffic):
    resting = traffic.before_return
    assert set(resting) == {"good_a", "good_b"}, resting
    assert min(resting.count("good_a"), resting.count("good_b")) >= len(resting) // 4, resting
    # Back from its rest (a 200 ended it), the limited key takes its turn again.
    assert {"good_a", "good_b", "limited"} == set(traffic.after_return), traffic.after_return


def test_the_rate_limited_key_rests_for_its_retry_after_then_returns(traffic: Traffic, upstream: PoolUpstream):
    first, second = upstream.times("limited")[:2]
    assert second - first >= REST_S - 0.1, f"used again after {second - first:.2f}s"
    assert traffic.statuses.count(429) == 1, traffic.statuses
    assert "unknown" not in upstream.roles(), "a key the pool does not have went out"


def test_the_revoked_key_is_never_used_again(traffic: Traffic, upstream: PoolUpstream):
    assert upstream.roles().count("revoked") == 1, upstream.roles()
    assert traffic.statuses.count(401) == 1, traffic.statuses
    assert set(traffic.statuses) == {200, 401, 429}, traffic.statuses


def scrape(gw: Gateway) -> str:
    r = httpx.get(f"{gw.admin_url}/metrics", timeout=10)
    assert r.status_code == 200, r.text[:500]
    return r.text


def key_events(text: str) -> dict[tuple[str, str], float]:
    """(key, outcome) -> count of `ferrogate_provider_key_events_total{provider="pool"}`."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "ferrogate_provider_key_events_total" and s.labels.get("provider") == "pool":
                out[(s.labels.get("key"), s.labels.get("outcome"))] = s.value
    return out


def test_metrics_count_the_cooldown_and_the_disabling_by_fingerprint(gw: Gateway, upstream: PoolUpstream,
                                                                     traffic: Traffic):
    want = {(fingerprint(upstream.keys["limited"]), "cooldown"), (fingerprint(upstream.keys["revoked"]), "disabled")}
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while not want <= set(events := key_events(scrape(gw))):
        assert time.monotonic() < deadline, f"key events in /metrics: {events}"
        time.sleep(0.1)
    assert events == {k: 1.0 for k in want}, events


def test_the_targets_view_lists_the_fingerprints(gw: Gateway, upstream: PoolUpstream):
    r = httpx.get(f"{gw.admin_url}/api/v1/targets", headers={"authorization": f"Bearer {gw.admin_token}"},
                  timeout=10)
    assert r.status_code == 200, r.text[:500]
    pools = {p["provider"]: p["keys"] for p in r.json().get("provider_keys", [])}
    order = [role for role in ENV if role in upstream.keys]
    assert pools.get("pool") == [fingerprint(upstream.keys[role]) for role in order], pools


def assert_no_key(upstream: PoolUpstream, texts: list[str]) -> None:
    for role, key in upstream.keys.items():
        secret = key.removeprefix("sk-pool-")  # the random part: a prefix alone says nothing
        for text in texts:
            assert secret not in text, f"the {role} key leaked"


def admin_get(gw: Gateway, path: str) -> str:
    r = httpx.get(f"{gw.admin_url}{path}", headers={"authorization": f"Bearer {gw.admin_token}"}, timeout=10)
    assert r.status_code == 200, r.text[:500]
    return r.text


def test_no_key_in_logs_metrics_or_admin_answers(gw: Gateway, upstream: PoolUpstream, traffic: Traffic):
    texts = [text for _, text in gw.logs()] + [scrape(gw)]
    texts += [admin_get(gw, path) for path in ("/api/v1/targets", "/api/v1/config/problems")]
    assert_no_key(upstream, texts)
    # The operator finds the keys' trouble in the log, by fingerprint.
    serve_log = next(text for name, text in gw.logs() if name.startswith("serve"))
    assert fingerprint(upstream.keys["revoked"]) in serve_log


def test_the_admin_provider_listing_hides_the_pool_keys(gw: Gateway, upstream: PoolUpstream):
    listing = admin_get(gw, "/api/v1/providers")
    assert_no_key(upstream, [listing])
    pool = next(p for p in json.loads(listing) if p["name"] == "pool")
    assert pool["api_keys_env"] == list(ENV.values()) and pool["api_key_set"] is True, pool
