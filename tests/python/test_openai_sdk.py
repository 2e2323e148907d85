"""The official OpenAI Python SDK against `ferrogate serve` in front of `ferrogate sim`.

The gateway (see conftest.py) serves `chat` and `embed` (both local/sim-small), alias
`default: chat`; keys: alice (group dev: chat, embed), bob (embed only), old (expired).
The sim answers SIM_OUTPUT_TOKENS words per completion, SIM_ITL_MS apart.
"""

from __future__ import annotations

import json
import secrets

import httpx
import openai
import pytest

from conftest import NO_AUTH, SIM_OUTPUT_TOKENS, Gateway, digest, new_key

MESSAGES = [{"role": "user", "content": "Say hello to the gateway."}]


# --------------------------------------------------------------------------- helpers

def assert_openai_error(err: openai.APIStatusError, status: int) -> dict:
    """The error is the SDK's type for `status` and its body is OpenAI-shaped:
    {"error": {"message", "type", "param", "code"}}."""
    assert err.status_code == status, f"expected {status}, got {err.status_code}: {err.response.text}"
    body = err.response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert isinstance(error.get("message"), str) and error["message"], error
    assert isinstance(error.get("type"), str) and error["type"], error
    assert "param" in error and "code" in error, error
    # The SDK unwraps "error" into e.body.
    assert isinstance(err.body, dict) and err.body.get("message") == error["message"], err.body
    return error


def collect(stream) -> list:
    chunks = list(stream)
    assert chunks, "the stream had no chunks"
    return chunks


def text_of(chunks) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


# --------------------------------------------------------------------------- chat completions

def test_chat_completion_plain(gateway: Gateway):
    client = gateway.client("alice")
    raw = client.chat.completions.with_raw_response.create(model="chat", messages=MESSAGES)

    assert raw.headers.get("x-ferrogate-provider") == "local"
    assert raw.headers.get("x-ferrogate-model") == "sim-small"
    assert raw.headers.get("x-request-id"), dict(raw.headers)

    resp = raw.parse()
    assert resp.model == "sim-small"  # the filter routed chat -> local/sim-small
    assert resp.object == "chat.completion"
    assert resp.choices and resp.choices[0].message.role == "assistant"
    content = resp.choices[0].message.content
    assert content and content.strip()
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None
    assert resp.usage.prompt_tokens > 0
    assert resp.usage.completion_tokens == SIM_OUTPUT_TOKENS
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_chat_completion_through_alias(gateway: Gateway):
    raw = gateway.client("alice").chat.completions.with_raw_response.create(model="default", messages=MESSAGES)
    assert raw.headers.get("x-ferrogate-model") == "sim-small"
    resp = raw.parse()
    assert resp.model == "sim-small"
    assert resp.choices[0].message.content


def test_request_ids_are_unique(gateway: Gateway):
    client = gateway.client("alice")
    ids = {client.chat.completions.with_raw_response.create(model="chat", messages=MESSAGES,
                                                            max_tokens=1).headers.get("x-request-id")
           for _ in range(3)}
    assert None not in ids and len(ids) == 3, ids


def test_stream_without_include_usage_hides_usage_chunk(gateway: Gateway):
    """The gateway asks the upstream for usage (to meter the request) but the client did not:
    the usage-only chunk must not reach it."""
    stream = gateway.client("alice").chat.completions.create(model="chat", messages=MESSAGES, stream=True)
    chunks = collect(stream)

    text = text_of(chunks)
    assert text.strip()
    assert len(text.split()) == SIM_OUTPUT_TOKENS, text
    assert all(c.model == "sim-small" for c in chunks)
    assert all(c.object == "chat.completion.chunk" for c in chunks)

    usage_chunks = [c for c in chunks if not c.choices]
    assert usage_chunks == [], f"chunks without choices reached the client: {usage_chunks}"
    with_usage = [c for c in chunks if c.usage is not None]
    assert with_usage == [], f"usage reached a client that did not ask for it: {with_usage}"
    # The stream ended properly: the last chunk closes the choice.
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_stream_with_include_usage_keeps_usage_chunk(gateway: Gateway):
    stream = gateway.client("alice").chat.completions.create(
        model="chat", messages=MESSAGES, stream=True, stream_options={"include_usage": True})
    chunks = collect(stream)

    assert text_of(chunks).strip()
    last = chunks[-1]
    assert last.choices == [], "the usage chunk must come last, with empty choices"
    assert last.usage is not None
    assert last.usage.completion_tokens == SIM_OUTPUT_TOKENS
    assert last.usage.prompt_tokens > 0
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    assert [c for c in chunks[:-1] if c.usage is not None] == []
    assert chunks[-2].choices[0].finish_reason == "stop"


def _raw_sse(gateway: Gateway, body: dict) -> tuple[httpx.Response, list[str]]:
    with httpx.stream("POST", f"{gateway.base_url}/chat/completions", json=body, timeout=30,
                      headers={"authorization": f"Bearer {gateway.keys['alice']}"}) as r:
        data = [line[len("data:"):].strip() for line in r.iter_lines() if line.startswith("data:")]
        return r, data


def test_stream_wire_format_ends_with_done(gateway: Gateway):
    """Below the SDK: the SSE ends with `data: [DONE]` and, without include_usage, no event
    carries usage."""
    r, data = _raw_sse(gateway, {"model": "chat", "messages": MESSAGES, "stream": True})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert data and data[-1] == "[DONE]", data[-3:]
    assert data.count("[DONE]") == 1
    events = [json.loads(d) for d in data[:-1]]
    assert events
    assert all(e.get("usage") is None for e in events), [e for e in events if e.get("usage")]
    assert all(e.get("choices") for e in events)


def test_stream_wire_format_with_include_usage(gateway: Gateway):
    r, data = _raw_sse(gateway, {"model": "chat", "messages": MESSAGES, "stream": True,
                                 "stream_options": {"include_usage": True}})
    assert r.status_code == 200
    assert data and data[-1] == "[DONE]"
    last = json.loads(data[-2])
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == SIM_OUTPUT_TOKENS


# --------------------------------------------------------------------------- usage records

def _check_record(rec: dict, *, streamed: bool, status: int = 200) -> None:
    assert rec["key"] == "alice", rec
    assert rec["status"] == status, rec
    assert rec["streamed"] is streamed, rec
    assert rec["model_requested"] == "chat", rec
    assert rec["provider"] == "local", rec
    assert rec["upstream_model"] == "sim-small", rec
    assert rec["prompt_tokens"] > 0, rec
    assert rec["completion_tokens"] == SIM_OUTPUT_TOKENS, rec
    assert "dev" in rec["groups"], rec
    assert rec["latency_ms"] >= 0 and rec["started_at_unix_ms"] > 0, rec


def test_usage_records_of_streams(gateway: Gateway):
    client = gateway.client("alice")
    ids = {}
    for label, extra in (("plain-stream", {}), ("usage-stream", {"stream_options": {"include_usage": True}})):
        raw = client.chat.completions.with_raw_response.create(model="chat", messages=MESSAGES, stream=True, **extra)
        rid = raw.headers.get("x-request-id")
        assert rid, f"{label}: no x-request-id"
        text = text_of(collect(raw.parse()))
        assert len(text.split()) == SIM_OUTPUT_TOKENS
        ids[label] = rid
    assert ids["plain-stream"] != ids["usage-stream"]

    for label, rid in ids.items():
        rec = gateway.wait_usage(rid, key="alice", model="chat")
        _check_record(rec, streamed=True)
        assert rec["ttft_ms"] is not None and rec["ttft_ms"] <= rec["latency_ms"], (label, rec)


def test_usage_record_of_plain_completion(gateway: Gateway):
    raw = gateway.client("alice").chat.completions.with_raw_response.create(model="chat", messages=MESSAGES)
    rid = raw.headers.get("x-request-id")
    resp = raw.parse()
    rec = gateway.wait_usage(rid, key="alice", model="chat")
    _check_record(rec, streamed=False)
    assert rec["prompt_tokens"] == resp.usage.prompt_tokens


def test_usage_api_needs_admin_token(gateway: Gateway):
    url = f"{gateway.admin_url}/api/v1/usage"
    assert httpx.get(url, timeout=10).status_code == 401
    assert httpx.get(url, timeout=10, headers={"authorization": "Bearer nope"}).status_code == 401
    assert httpx.get(url, timeout=10, headers={"authorization": f"Bearer {gateway.admin_token}"}).status_code == 200


def test_client_disconnect_is_recorded_as_499(gateway: Gateway):
    client = gateway.client("alice")
    raw = client.chat.completions.with_raw_response.create(
        model="chat", messages=MESSAGES, stream=True, extra_headers={"x-sim-itl-ms": "300"})
    rid = raw.headers.get("x-request-id")
    assert rid
    stream = raw.parse()
    next(iter(stream))  # one chunk, then hang up well before the sim is done (6 x 300 ms)
    stream.close()
    rec = gateway.wait_usage(rid, key="alice", model="chat", ready=lambda r: r.get("status") == 499)
    assert rec["streamed"] is True
    assert rec["model_requested"] == "chat"
    gateway.check_alive()
    # The gateway goes on serving.
    assert client.chat.completions.create(model="chat", messages=MESSAGES).choices[0].message.content


# --------------------------------------------------------------------------- embeddings and models

def test_embeddings_with_bob(gateway: Gateway):
    resp = gateway.client("bob").embeddings.create(model="embed", input=["first text", "second text"])
    assert len(resp.data) == 2
    assert [d.index for d in resp.data] == [0, 1]
    for d in resp.data:
        assert len(d.embedding) > 0
        assert all(isinstance(x, float) for x in d.embedding)
    assert resp.usage.prompt_tokens > 0


def _model_ids(client: openai.OpenAI) -> set[str]:
    return {m.id for m in client.models.list()}


def test_models_list_for_bob_shows_only_his_models(gateway: Gateway):
    assert _model_ids(gateway.client("bob")) == {"embed"}


def test_models_list_for_alice(gateway: Gateway):
    assert _model_ids(gateway.client("alice")) == {"chat", "embed", "default"}


# --------------------------------------------------------------------------- errors

def test_no_key_is_401(gateway: Gateway):
    client = gateway.client(None)
    with pytest.raises(openai.AuthenticationError) as e:
        client.chat.completions.create(model="chat", messages=MESSAGES, extra_headers=NO_AUTH)
    assert_openai_error(e.value, 401)
    assert "authorization" not in {k.lower() for k in e.value.response.request.headers}
    with pytest.raises(openai.AuthenticationError) as e:
        client.models.list(extra_headers=NO_AUTH)
    assert_openai_error(e.value, 401)
    with pytest.raises(openai.AuthenticationError) as e:
        client.embeddings.create(model="embed", input="x", extra_headers=NO_AUTH)
    assert_openai_error(e.value, 401)


@pytest.mark.parametrize("key", ["unknown", "garbage", "digest-of-alice"])
def test_wrong_key_is_401(gateway: Gateway, key: str):
    literal = {
        "unknown": new_key(),  # well-formed, not in the config
        "garbage": "not-a-key-" + secrets.token_hex(4),
        "digest-of-alice": digest(gateway.keys["alice"]),  # what the config holds is no key
    }[key]
    with pytest.raises(openai.AuthenticationError) as e:
        gateway.client(literal).chat.completions.create(model="chat", messages=MESSAGES)
    assert_openai_error(e.value, 401)


def test_expired_key_is_401(gateway: Gateway):
    with pytest.raises(openai.AuthenticationError) as e:
        gateway.client("old").chat.completions.create(model="chat", messages=MESSAGES)
    assert_openai_error(e.value, 401)


def test_model_not_granted_is_403(gateway: Gateway):
    client = gateway.client("bob")
    for model in ("chat", "default"):  # the alias resolves to chat: same answer
        with pytest.raises(openai.PermissionDeniedError) as e:
            client.chat.completions.create(model=model, messages=MESSAGES)
        assert_openai_error(e.value, 403)
    with pytest.raises(openai.PermissionDeniedError) as e:
        client.chat.completions.create(model="chat", messages=MESSAGES, stream=True)
    assert_openai_error(e.value, 403)


@pytest.mark.parametrize("who", ["alice", "bob"])
def test_unknown_model_is_404_before_403(gateway: Gateway, who: str):
    model = "no-such-model-" + secrets.token_hex(3)
    with pytest.raises(openai.NotFoundError) as e:
        gateway.client(who).chat.completions.create(model=model, messages=MESSAGES)
    error = assert_openai_error(e.value, 404)
    assert model in error["message"], error

