"""The response cache (`cache:` on models, groups and keys) end to end, through the official
OpenAI (Chat Completions and Responses), Anthropic and Google Gen AI SDKs.

This module runs its own `ferrogate sim` + `ferrogate serve` (conftest.own_gateway) with cached
public models that all lead to provider `local` (the sim's OpenAI surface, so the Anthropic,
Gemini and Responses clients are translated). Whether a request reached the sim is read from the
sim's `/metrics` (`vllm:request_success_total`): a hit leaves it unchanged.

The Redis tests start their own `redis-server` on a free port (so it can be stopped) and two
`serve` replicas sharing it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import types as gtypes
from prometheus_client.parser import text_string_to_metric_families

from conftest import Gateway, Proc, _bin, _free_port, _start, _wait_until, own_gateway

KEY, OTHER = "alice", "carol"  # both in group `dev` (alice's first group; carol's too, below)
MAX_TOKENS = 256
SETTLE_TIMEOUT_S = 60.0  # counters and purges reach the filter on its next tick
TTL_S = 2  # the short-lived model's entries
DIALECTS = ("openai-chat", "openai-responses", "anthropic", "gemini")

CACHED, TEAM, BRIEF, PLAIN = "cached", "cached-team", "cached-brief", "uncached"


def config(base: dict) -> dict:
    """The generated config plus cached models granted to group `dev`."""
    target = [{"provider": "local", "model": "sim-small"}]
    base["models"] += [
        {"name": CACHED, "targets": target, "cache": {"ttl_secs": 600}},
        {"name": TEAM, "targets": target, "cache": {"ttl_secs": 600, "scope": "group"}},
        {"name": BRIEF, "targets": target, "cache": {"ttl_secs": TTL_S}},
        {"name": PLAIN, "targets": target},
    ]
    dev = next(g for g in base["groups"] if g["name"] == "dev")
    dev["models"] += [CACHED, TEAM, BRIEF, PLAIN]
    carol = next(k for k in base["keys"] if k["name"] == OTHER)
    carol["groups"] = ["dev", *carol["groups"]]
    return base


@pytest.fixture(scope="module")
def gw(request) -> Gateway:
    for g in own_gateway("ferrogate-cache-", lambda w, n: _start(w, n, config)):
        previous = getattr(request.config, "_ferrogate_gateway", None)
        request.config._ferrogate_gateway = g
        yield g
        request.config._ferrogate_gateway = previous


# --------------------------------------------------------------------------- one call per dialect

@dataclass
class Reply:
    text: str
    cache: str  # the x-ferrogate-cache header ("" when absent)
    request_id: str


def _h(headers) -> dict[str, str]:
    return {k.lower(): v for k, v in dict(headers or {}).items()}


def _reply(text: str, headers) -> Reply:
    h = _h(headers)
    return Reply(text, h.get("x-ferrogate-cache", ""), h.get("x-request-id", ""))


def openai_chat(gw: Gateway, key: str, model: str, prompt: str, stream: bool, headers: dict) -> Reply:
    c = gw.client(key, default_headers=headers)
    msgs = [{"role": "user", "content": prompt}]
    if not stream:
        raw = c.chat.completions.with_raw_response.create(model=model, messages=msgs)
        return _reply(raw.parse().choices[0].message.content or "", raw.headers)
    raw = c.chat.completions.with_raw_response.create(model=model, messages=msgs, stream=True,
                                                      stream_options={"include_usage": True})
    chunks = list(raw.parse())
    assert chunks[-1].usage is not None, "the usage chunk asked for is the last one"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    return _reply(text, raw.headers)


def openai_responses(gw: Gateway, key: str, model: str, prompt: str, stream: bool, headers: dict) -> Reply:
    c = gw.client(key, default_headers=headers)
    raw = c.responses.with_raw_response.create(model=model, input=prompt, store=False, stream=stream)
    if not stream:
        return _reply(raw.parse().output_text, raw.headers)
    events = list(raw.parse())
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    completed = [e.response.output_text for e in events if e.type == "response.completed"]
    assert completed == [deltas], [e.type for e in events]
    return _reply(deltas, raw.headers)


def anthropic_messages(gw: Gateway, key: str, model: str, prompt: str, stream: bool, headers: dict) -> Reply:
    c = anthropic.Anthropic(base_url=gw.gateway_url, api_key=gw.keys[key], max_retries=0, timeout=30.0,
                            default_headers=headers)
    gw.clients.append(c)
    kw = {"model": model, "max_tokens": MAX_TOKENS, "messages": [{"role": "user", "content": prompt}]}
    if not stream:
        raw = c.messages.with_raw_response.create(**kw)
        return _reply("".join(b.text for b in raw.parse().content if b.type == "text"), raw.headers)
    with c.messages.stream(**kw) as s:
        headers_seen = s.response.headers
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert final.stop_reason is not None and final.usage.output_tokens > 0, final
    return _reply(text, headers_seen)


def genai_generate(gw: Gateway, key: str, model: str, prompt: str, stream: bool, headers: dict) -> Reply:
    c = genai.Client(api_key=gw.keys[key], vertexai=False, http_options=gtypes.HttpOptions(
        base_url=gw.gateway_url, api_version="v1beta", timeout=30_000, headers=headers))
    gw.clients.append(c)

    def text(resp) -> str:
        content = resp.candidates[0].content if resp.candidates else None
        return "".join(p.text or "" for p in (content.parts or [])) if content else ""

    if not stream:
        resp = c.models.generate_content(model=model, contents=prompt)
        return _reply(text(resp), resp.sdk_http_response.headers)
    chunks = list(c.models.generate_content_stream(model=model, contents=prompt))
    return _reply("".join(text(ch) for ch in chunks), chunks[0].sdk_http_response.headers)


DRIVERS: dict[str, Callable[..., Reply]] = {
    "openai-chat": openai_chat, "openai-responses": openai_responses,
    "anthropic": anthropic_messages, "gemini": genai_generate,
}


def ask(gw: Gateway, dialect: str, prompt: str, *, model: str = CACHED, key: str = KEY, stream: bool = False,
        headers: dict | None = None) -> Reply:
    return DRIVERS[dialect](gw, key, model, prompt, stream, headers or {})


def prompt() -> str:
    """A prompt no other test sends."""
    return f"Tell me about caching, please ({uuid.uuid4().hex[:12]})."


# --------------------------------------------------------------------------- the sim and the gateway

def sim_requests(gw: Gateway) -> float:
    """Requests the sim finished, over all its models."""
    r = httpx.get(f"{gw.sim_url}/metrics", timeout=10)
    assert r.status_code == 200, r.text[:300]
    return sum(s.value for f in text_string_to_metric_families(r.text) for s in f.samples
               if s.name == "vllm:request_success_total")


def counters(gw: Gateway) -> dict[tuple, float]:
    r = httpx.get(f"{gw.admin_url}/metrics", timeout=10)
    assert r.status_code == 200, r.text[:300]
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def lookups(model: str, outcome: str) -> tuple:
    return ("ferrogate_cache_lookups_total", tuple(sorted({"model": model, "outcome": outcome}.items())))


def admin(gw: Gateway, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(method, f"{gw.admin_url}{path}", json=body, timeout=10,
                         headers={"authorization": f"Bearer {gw.admin_token}"})


def until(what: str, probe: Callable[[], Any], timeout: float = SETTLE_TIMEOUT_S) -> Any:
    """Polls `probe` until it returns something truthy (the event), or fails naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not seen within {timeout}s")
        time.sleep(0.1)


# --------------------------------------------------------------------------- exact cache, in-proxy

@pytest.mark.parametrize("stream_first", [False, True], ids=["stored-plain", "stored-streamed"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_repeated_request_is_answered_without_the_provider(gw: Gateway, dialect: str, stream_first: bool):
    p = prompt()
    before = sim_requests(gw)
    first = ask(gw, dialect, p, stream=stream_first)
    assert first.cache == "miss" and first.text, first
    assert sim_requests(gw) == before + 1
    again = ask(gw, dialect, p, stream=stream_first)
    other_way = ask(gw, dialect, p, stream=not stream_first)
    assert (again.cache, other_way.cache) == ("hit", "hit"), (again, other_way)
    assert again.text == first.text == other_way.text
    assert sim_requests(gw) == before + 1, "a hit never reaches the provider"


def test_entries_are_per_key_unless_the_scope_is_the_group(gw: Gateway):
    p = prompt()
    before = sim_requests(gw)
    mine = ask(gw, "openai-chat", p)
    theirs = ask(gw, "openai-chat", p, key=OTHER)
    assert (mine.cache, theirs.cache) == ("miss", "miss") and sim_requests(gw) == before + 2
    shared = ask(gw, "openai-chat", p, model=TEAM)
    teammate = ask(gw, "openai-chat", p, model=TEAM, key=OTHER)
    assert (shared.cache, teammate.cache) == ("miss", "hit") and shared.text == teammate.text
    assert sim_requests(gw) == before + 3


def test_other_parameters_are_another_entry(gw: Gateway):
    p = prompt()
    c = gw.client(KEY)
    msgs = [{"role": "user", "content": p}]
    first = c.chat.completions.with_raw_response.create(model=CACHED, messages=msgs, temperature=0.2)
    warmer = c.chat.completions.with_raw_response.create(model=CACHED, messages=msgs, temperature=0.9)
    user = c.chat.completions.with_raw_response.create(model=CACHED, messages=msgs, temperature=0.2, user="u-7")
    got = [r.headers.get("x-ferrogate-cache") for r in (first, warmer, user)]
    assert got == ["miss", "miss", "hit"], "temperature is part of the key, `user` is not"


def test_an_entry_expires_after_its_ttl(gw: Gateway):
    p = prompt()
    assert ask(gw, "openai-chat", p, model=BRIEF).cache == "miss"
    assert ask(gw, "openai-chat", p, model=BRIEF).cache == "hit"
    before = sim_requests(gw)
    # The event: the first answer after the TTL is a miss (each hit before it costs the sim nothing).
    later = until("a miss once the entry expired",
                  lambda: (r := ask(gw, "openai-chat", p, model=BRIEF)).cache == "miss" and r)
    assert later.text and sim_requests(gw) == before + 1


def test_no_cache_no_store_and_bypass(gw: Gateway):
    p = prompt()
    assert ask(gw, "openai-chat", p).cache == "miss"
    before = sim_requests(gw)
    assert ask(gw, "openai-chat", p, headers={"cache-control": "no-cache"}).cache == "bypass"
    assert sim_requests(gw) == before + 1, "no-cache skips the lookup"
    assert ask(gw, "openai-chat", p, headers={"x-ferrogate-cache": "bypass"}).cache == "bypass"
    assert sim_requests(gw) == before + 2
    q = prompt()
    assert ask(gw, "anthropic", q, headers={"cache-control": "no-cache"}).cache == "bypass"
    assert ask(gw, "anthropic", q).cache == "hit", "no-cache stores the fresh answer"
    r = prompt()
    assert ask(gw, "anthropic", r, headers={"cache-control": "no-store"}).cache == "bypass"
    assert ask(gw, "anthropic", r).cache == "miss", "no-store kept nothing"


def test_a_failed_answer_is_not_stored(gw: Gateway):
    p = prompt()
    c = gw.client(KEY, default_headers={"x-sim-status": "500"})
    with pytest.raises(openai.APIStatusError):
        c.chat.completions.create(model=CACHED, messages=[{"role": "user", "content": p}])
    assert ask(gw, "openai-chat", p).cache == "miss"


def test_hits_are_recorded_as_cached_and_free_and_counted(gw: Gateway):
    p = prompt()
    before = counters(gw)
    miss = ask(gw, "openai-chat", p)
    hit = ask(gw, "openai-chat", p, stream=True)
    rec = gw.wait_usage(hit.request_id, key=KEY, model=CACHED)
    assert rec.get("cached") is True and rec.get("provider") in ("", None), rec
    assert rec.get("cost_micro_usd") in (0, None) and rec["completion_tokens"] > 0, rec
    original = gw.wait_usage(miss.request_id, key=KEY, model=CACHED)
    assert not original.get("cached") and original["completion_tokens"] == rec["completion_tokens"]
    until("the hit and the miss in ferrogate_cache_lookups_total", lambda: all(
        counters(gw).get(k, 0) - before.get(k, 0) >= 1 for k in (lookups(CACHED, "hit"), lookups(CACHED, "miss"))))


def test_an_admin_purge_empties_the_model(gw: Gateway):
    p = prompt()
    ask(gw, "openai-chat", p)
    assert ask(gw, "openai-chat", p).cache == "hit"
    r = admin(gw, "POST", "/api/v1/cache/purge", {"model": CACHED})
    assert r.status_code == 200, r.text
    until("a miss after the purge", lambda: ask(gw, "openai-chat", p).cache == "miss")
    assert admin(gw, "POST", "/api/v1/cache/purge", {"model": "no-such-model"}).status_code == 404
    assert admin(gw, "POST", "/api/v1/cache/purge", {"everything": True}).status_code == 400


# --------------------------------------------------------------------------- Redis, two replicas

@dataclass
class Pair:
    gw: Gateway  # replica A (and the sim)
    b_url: str  # replica B's gateway, same config
    redis: Proc


def _serve(binary: str, cfg: Path, workdir: Path, name: str, env: dict) -> tuple[Proc, str, str]:
    gw_port, admin_port, side_port = (_free_port() for _ in range(3))
    argv = [binary, "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{gw_port}",
            "--admin-listen", f"127.0.0.1:{admin_port}", "--sidecar-listen", f"127.0.0.1:{side_port}",
            "--workers", "2"]
    return Proc(name, argv, workdir / f"{name}.log", env), f"http://127.0.0.1:{gw_port}", \
        f"http://127.0.0.1:{admin_port}"


@pytest.fixture(scope="module")
def pair(request) -> Pair:
    workdir = Path(tempfile.mkdtemp(prefix="ferrogate-cache-redis-"))
    port = _free_port()
    redis = Proc("redis", ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                           "--appendonly", "no"], workdir / "redis.log", dict(os.environ))
    os.environ["FERROGATE_CACHE_TEST_REDIS"] = f"redis://127.0.0.1:{port}"

    def with_redis(base: dict) -> dict:
        base = config(base)
        base["redis"] = {"url_env": "FERROGATE_CACHE_TEST_REDIS"}
        base["cache_store"] = {"kind": "redis"}
        return base

    try:
        for gw in own_gateway("ferrogate-cache-a-", lambda w, n: _start(w, n, with_redis)):
            cfg = next(gw.workdir.glob("ferrogate.json"))
            env = dict(os.environ, NO_COLOR="1", FERROGATE_ADMIN_TOKEN=gw.admin_token)
            proc, url, admin_url = _serve(str(_bin()), cfg, workdir, "serve-b", env)
            _wait_until("replica B", [proc], lambda: httpx.get(
                f"{url}/v1/models", headers={"authorization": f"Bearer {gw.keys[KEY]}"}, timeout=5
            ).status_code == 200, 60)
            yield Pair(gw, url, redis)
            proc.stop()
    finally:
        redis.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def ask_at(url: str, key: str, text: str, stream: bool = False) -> Reply:
    c = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30.0)
    try:
        msgs = [{"role": "user", "content": text}]
        raw = c.chat.completions.with_raw_response.create(model=CACHED, messages=msgs, stream=stream)
        if stream:
            body = "".join(ch.choices[0].delta.content or "" for ch in raw.parse() if ch.choices)
        else:
            body = raw.parse().choices[0].message.content or ""
        return _reply(body, raw.headers)
    finally:
        c.close()


def test_two_replicas_share_a_redis_backed_hit(pair: Pair):
    gw, p = pair.gw, prompt()
    before = sim_requests(gw)
    stored = ask_at(gw.gateway_url, gw.keys[KEY], p)
    other = ask_at(pair.b_url, gw.keys[KEY], p, stream=True)
    assert (stored.cache, other.cache) == ("miss", "hit") and other.text == stored.text
    assert sim_requests(gw) == before + 1
    r = admin(gw, "POST", "/api/v1/cache/purge", {"key": KEY})
    assert r.status_code == 200 and r.json().get("purged", 0) >= 1, r.text
    assert ask_at(pair.b_url, gw.keys[KEY], p).cache == "miss", "a Redis purge is immediate"


def test_redis_down_means_misses_not_errors(pair: Pair):
    gw, p = pair.gw, prompt()
    pair.redis.stop()
    before = sim_requests(gw)
    answers = [ask_at(url, gw.keys[KEY], p) for url in (gw.gateway_url, pair.b_url, gw.gateway_url)]
    assert [a.cache for a in answers] == ["miss"] * 3 and all(a.text for a in answers)
    assert sim_requests(gw) == before + 3
