"""The SDK matrix: the official OpenAI (Chat Completions and Responses), Anthropic and Google Gen
AI Python SDKs, each against an OpenAI-compatible, an Anthropic and a Gemini upstream through
`ferrogate serve`, plain, streamed, with a tool call and streamed with a tool call; then, per
client and upstream, a second turn that hands the tool's result back.

The upstreams are the public models of conftest.UPSTREAMS (`oa-chat`, `an-chat`, `ge-chat`), all
answered by the one `ferrogate sim`, which the gateway speaks to in the provider's dialect; key
`carol` may use them. Where client and provider speak the same dialect the gateway forwards the
bytes, everywhere else it translates both ways (streams event by event).

The sim's answers are deterministic and the same in every dialect (text from a hash of the
conversation, usage from its words; a tool call of the first declared tool with arguments built
from its schema), so every combination is checked against what the sim answers to the same
conversation asked directly in its OpenAI dialect: same text, same usage, the same call. Only
typed SDK objects are inspected (the parsed answers, stream events and chunks); the gateway's
response headers and its usage record show where the request went and what it was metered at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import types as gtypes

from conftest import SIM_OUTPUT_TOKENS, UPSTREAMS, Gateway, Upstream

KEY = "carol"
PROMPT = "What is the weather like in Paris today?"
TOOL_NAME = "get_weather"
TOOL_DESCRIPTION = "Current weather in a city"
TOOL_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "Name of the city"}},
    "required": ["city"],
}
TOOL_ARGS = {"city": "sim"}  # what the sim fills the schema with
TOOL_RESULT = {"temp_c": 21, "sky": "clear"}
TOOL_ANSWER_PREFIX = "The tool returned: "  # the sim's answer to a turn of tool results
MAX_TOKENS = 256  # Anthropic requires it; far above what the sim says

OPENAI_TOOL = {"type": "function",
               "function": {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "parameters": TOOL_SCHEMA}}
RESPONSES_TOOL = {"type": "function", "name": TOOL_NAME, "description": TOOL_DESCRIPTION,
                  "parameters": TOOL_SCHEMA, "strict": False}
ANTHROPIC_TOOL = {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "input_schema": TOOL_SCHEMA}
GENAI_TOOL = gtypes.Tool(function_declarations=[
    gtypes.FunctionDeclaration(name=TOOL_NAME, description=TOOL_DESCRIPTION, parameters_json_schema=TOOL_SCHEMA)])

SDKS = ("openai-chat", "openai-responses", "anthropic", "google-genai")
CASES = ("plain", "streamed", "tool_call", "streamed_tool_call")


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def clients(gateway: Gateway) -> dict[str, Any]:
    """One client per SDK, all with carol's key, no retries."""
    key = gateway.keys[KEY]
    oa = gateway.client(KEY)
    an = anthropic.Anthropic(base_url=gateway.gateway_url, api_key=key, max_retries=0, timeout=30.0)
    ge = genai.Client(api_key=key, vertexai=False, http_options=gtypes.HttpOptions(
        base_url=gateway.gateway_url, api_version="v1beta", timeout=30_000))
    gateway.clients += [an, ge]
    return {"openai-chat": oa, "openai-responses": oa, "anthropic": an, "google-genai": ge}


@dataclass(frozen=True)
class Expected:
    """The sim's own answer to the conversation, asked directly (no gateway) in its OpenAI dialect."""
    text: str
    calls: list[tuple[str, dict]]
    prompt_tokens: int
    completion_tokens: int


@pytest.fixture(scope="module")
def expected(gateway: Gateway) -> Callable[[Upstream, bool], Expected]:
    cache: dict[tuple[str, bool], Expected] = {}

    def get(upstream: Upstream, tools: bool) -> Expected:
        k = (upstream.upstream_model, tools)
        if k not in cache:
            body: dict = {"model": upstream.upstream_model, "messages": [{"role": "user", "content": PROMPT}]}
            if tools:
                body["tools"] = [OPENAI_TOOL]
            r = httpx.post(f"{gateway.sim_url}/v1/chat/completions", json=body, timeout=30)
            assert r.status_code == 200, r.text
            choice = r.json()["choices"][0]
            calls = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                     for c in choice["message"].get("tool_calls") or []]
            usage = r.json()["usage"]
            cache[k] = Expected(choice["message"].get("content") or "", calls,
                                usage["prompt_tokens"], usage["completion_tokens"])
            # The sim behaves as the tests assume.
            assert cache[k].calls == ([(TOOL_NAME, TOOL_ARGS)] if tools else []), cache[k]
            assert tools or len(cache[k].text.split()) == SIM_OUTPUT_TOKENS, cache[k]
        return cache[k]

    return get


# --------------------------------------------------------------------------- one turn per SDK

@dataclass
class Outcome:
    """What one SDK call gave, in the SDK's own typed fields, reduced to what all share."""
    headers: dict[str, str]  # lower-cased response headers
    text: str  # the answer's text (joined from the deltas when streamed)
    calls: list[tuple[str, dict]]  # (name, arguments); streamed: arguments joined from fragments
    usage: tuple[int, int]  # (prompt/input tokens, completion/output tokens)
    deltas: list[str] = field(default_factory=list)  # streamed text fragments
    arg_fragments: list[str] = field(default_factory=list)  # streamed argument fragments


def _headers(h) -> dict[str, str]:
    return {k.lower(): v for k, v in dict(h).items()}


def openai_chat(client: openai.OpenAI, model: str, *, stream: bool, tools: bool) -> Outcome:
    kw: dict = {"model": model, "messages": [{"role": "user", "content": PROMPT}]}
    if tools:
        kw["tools"] = [OPENAI_TOOL]
    want_finish = "tool_calls" if tools else "stop"
    if not stream:
        raw = client.chat.completions.with_raw_response.create(**kw)
        resp = raw.parse()
        assert resp.object == "chat.completion"
        assert len(resp.choices) == 1, resp.choices
        choice = resp.choices[0]
        assert choice.finish_reason == want_finish, choice
        assert choice.message.role == "assistant"
        calls = []
        for tc in choice.message.tool_calls or []:
            assert tc.type == "function" and tc.id, tc
            calls.append((tc.function.name, json.loads(tc.function.arguments)))
        u = resp.usage
        assert u is not None and u.total_tokens == u.prompt_tokens + u.completion_tokens, u
        return Outcome(_headers(raw.headers), choice.message.content or "", calls,
                       (u.prompt_tokens, u.completion_tokens))

    raw = client.chat.completions.with_raw_response.create(**kw, stream=True,
                                                           stream_options={"include_usage": True})
    chunks = list(raw.parse())
    assert chunks, "no chunks"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    # include_usage: the usage chunk comes last, with no choices; no other chunk has usage.
    *body, last = chunks
    assert last.choices == [] and last.usage is not None, last
    assert all(c.usage is None and len(c.choices) == 1 for c in body), body
    finishes = [c.choices[0].finish_reason for c in body if c.choices[0].finish_reason]
    assert finishes == [want_finish], finishes
    assert body[-1].choices[0].finish_reason == want_finish, "the finish reason closes the choice"
    deltas = [c.choices[0].delta.content for c in body if c.choices[0].delta.content]
    # Tool calls arrive as fragments by index: id, type and name once, then the arguments in pieces.
    parts: dict[int, dict] = {}
    fragments: list[str] = []
    for c in body:
        for tc in c.choices[0].delta.tool_calls or []:
            p = parts.setdefault(tc.index, {"id": None, "name": None, "args": ""})
            if tc.id:
                assert p["id"] is None, f"call {tc.index} got a second id"
                p["id"] = tc.id
            if tc.function and tc.function.name:
                assert p["name"] is None, f"call {tc.index} got a second name"
                p["name"] = tc.function.name
            if tc.function and tc.function.arguments:
                p["args"] += tc.function.arguments
                fragments.append(tc.function.arguments)
    assert all(p["id"] and p["name"] for p in parts.values()), parts
    calls = [(p["name"], json.loads(p["args"])) for _, p in sorted(parts.items())]
    u = last.usage
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens, u
    return Outcome(_headers(raw.headers), "".join(deltas), calls, (u.prompt_tokens, u.completion_tokens),
                   deltas, fragments)


def openai_responses(client: openai.OpenAI, model: str, *, stream: bool, tools: bool) -> Outcome:
    kw: dict = {"model": model, "input": PROMPT}
    if tools:
        kw["tools"] = [RESPONSES_TOOL]

    def reduce(resp) -> tuple[str, list, tuple[int, int]]:
        assert resp.object == "response"
        assert resp.status == "completed" and resp.incomplete_details is None, resp
        assert resp.error is None, resp.error
        kinds = [o.type for o in resp.output]
        assert kinds == (["function_call"] if tools else ["message"]), kinds
        calls = []
        for o in resp.output:
            if o.type == "function_call":
                assert o.call_id and o.status == "completed", o
                calls.append((o.name, json.loads(o.arguments)))
        u = resp.usage
        assert u is not None and u.total_tokens == u.input_tokens + u.output_tokens, u
        return resp.output_text, calls, (u.input_tokens, u.output_tokens)

    if not stream:
        raw = client.responses.with_raw_response.create(**kw)
        text, calls, usage = reduce(raw.parse())
        return Outcome(_headers(raw.headers), text, calls, usage)

    raw = client.responses.with_raw_response.create(**kw, stream=True)
    events = list(raw.parse())
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"], kinds
    assert kinds[-1] == "response.completed" and kinds.count("response.completed") == 1, kinds
    assert [e.sequence_number for e in events] == list(range(len(events))), "sequence numbers"
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    text_done = [e.text for e in events if e.type == "response.output_text.done"]
    assert text_done == ([] if tools else ["".join(deltas)]), (text_done, deltas)
    fragments = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    args_done = [e for e in events if e.type == "response.function_call_arguments.done"]
    added = [e.item for e in events if e.type == "response.output_item.added" and e.item.type == "function_call"]
    calls = [(item.name, json.loads("".join(fragments))) for item in added]
    if tools:
        assert len(added) == 1 and len(args_done) == 1, kinds
        assert args_done[0].arguments == "".join(fragments), (args_done[0], fragments)
    # The closing event repeats the whole answer; it must agree with the deltas.
    text, final_calls, usage = reduce(events[-1].response)
    assert text == "".join(deltas), (text, deltas)
    assert final_calls == calls, (final_calls, calls)
    return Outcome(_headers(raw.headers), "".join(deltas), calls, usage, deltas, fragments)


def anthropic_messages(client: anthropic.Anthropic, model: str, *, stream: bool, tools: bool) -> Outcome:
    kw: dict = {"model": model, "max_tokens": MAX_TOKENS, "messages": [{"role": "user", "content": PROMPT}]}
    if tools:
        kw["tools"] = [ANTHROPIC_TOOL]
    want_stop = "tool_use" if tools else "end_turn"

    def reduce(msg) -> tuple[str, list, tuple[int, int]]:
        assert msg.type == "message" and msg.role == "assistant", msg
        assert msg.stop_reason == want_stop, msg
        kinds = [b.type for b in msg.content]
        assert kinds == (["tool_use"] if tools else ["text"]), kinds
        calls = []
        for b in msg.content:
            if b.type == "tool_use":
                assert b.id, b
                calls.append((b.name, b.input))  # parsed by the SDK
        text = "".join(b.text for b in msg.content if b.type == "text")
        return text, calls, (msg.usage.input_tokens, msg.usage.output_tokens)

    if not stream:
        raw = client.messages.with_raw_response.create(**kw)
        text, calls, usage = reduce(raw.parse())
        return Outcome(_headers(raw.headers), text, calls, usage)

    with client.messages.stream(**kw) as s:
        headers = _headers(s.response.headers)
        events = list(s)
        final = s.get_final_message()  # accumulated by the SDK from the events
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
    deltas = [e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"]
    fragments = [e.delta.partial_json for e in events
                 if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
    starts = [e.content_block for e in events if e.type == "content_block_start"]
    assert [b.type for b in starts] == (["tool_use"] if tools else ["text"]), starts
    assert kinds.count("content_block_stop") == len(starts), kinds
    stops = [e.delta.stop_reason for e in events if e.type == "message_delta"]
    assert stops == [want_stop], stops
    calls = [(b.name, json.loads("".join(fragments))) for b in starts if b.type == "tool_use"]
    text, final_calls, usage = reduce(final)
    assert text == "".join(deltas), (text, deltas)
    assert final_calls == calls, (final_calls, calls)
    return Outcome(headers, "".join(deltas), calls, usage, deltas, fragments)


def genai_generate(client: genai.Client, model: str, *, stream: bool, tools: bool) -> Outcome:
    config = None
    if tools:
        # Automatic function calling off: the call must come back to the test.
        config = gtypes.GenerateContentConfig(
            tools=[GENAI_TOOL], automatic_function_calling=gtypes.AutomaticFunctionCallingConfig(disable=True))

    def parts(resp) -> list:
        assert resp.candidates and len(resp.candidates) == 1, resp
        content = resp.candidates[0].content
        if content is None or not content.parts:
            return []
        assert content.role == "model", content
        return content.parts

    def usage_of(resp) -> tuple[int, int]:
        u = resp.usage_metadata
        assert u is not None, resp
        assert u.total_token_count == u.prompt_token_count + u.candidates_token_count, u
        return u.prompt_token_count, u.candidates_token_count

    if not stream:
        resp = client.models.generate_content(model=model, contents=PROMPT, config=config)
        assert resp.candidates[0].finish_reason == gtypes.FinishReason.STOP, resp
        ps = parts(resp)
        text = "".join(p.text for p in ps if p.text)
        calls = [(p.function_call.name, p.function_call.args) for p in ps if p.function_call]
        assert [(c.name, c.args) for c in resp.function_calls or []] == calls
        return Outcome(_headers(resp.sdk_http_response.headers), text, calls, usage_of(resp))

    chunks = list(client.models.generate_content_stream(model=model, contents=PROMPT, config=config))
    assert chunks, "no chunks"
    finishes = [c.candidates[0].finish_reason for c in chunks if c.candidates and c.candidates[0].finish_reason]
    assert finishes == [gtypes.FinishReason.STOP], finishes
    assert chunks[-1].candidates[0].finish_reason == gtypes.FinishReason.STOP, "the last chunk finishes"
    deltas = [p.text for c in chunks for p in parts(c) if p.text]
    # Gemini sends each call whole, in one part.
    calls = [(p.function_call.name, p.function_call.args) for c in chunks for p in parts(c) if p.function_call]
    fragments = [json.dumps(args) for _, args in calls]
    return Outcome(_headers(chunks[0].sdk_http_response.headers), "".join(deltas), calls,
                   usage_of(chunks[-1]), deltas, fragments)


DRIVERS = {
    "openai-chat": openai_chat,
    "openai-responses": openai_responses,
    "anthropic": anthropic_messages,
    "google-genai": genai_generate,
}


# --------------------------------------------------------------------------- the matrix

@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("upstream", UPSTREAMS, ids=lambda u: u.model)
@pytest.mark.parametrize("sdk", SDKS)
def test_sdk_matrix(gateway: Gateway, clients, expected, sdk: str, upstream: Upstream, case: str):
    stream = case.startswith("streamed")
    tools = case.endswith("tool_call")
    out = DRIVERS[sdk](clients[sdk], upstream.model, stream=stream, tools=tools)
    want = expected(upstream, tools)

    # Routed to the provider of the public model.
    assert out.headers.get("x-ferrogate-provider") == upstream.provider, out.headers
    assert out.headers.get("x-ferrogate-model") == upstream.upstream_model, out.headers

    # The sim's answer, whatever the dialects on either side.
    assert out.text == want.text, f"text: {out.text!r}, the sim says {want.text!r}"
    assert out.calls == want.calls, f"calls: {out.calls}, the sim calls {want.calls}"
    if tools:
        assert out.calls == [(TOOL_NAME, TOOL_ARGS)], out.calls
    assert out.usage == (want.prompt_tokens, want.completion_tokens), \
        f"usage (prompt, completion) {out.usage}, the sim counts {(want.prompt_tokens, want.completion_tokens)}"
    if stream:
        if tools:
            assert out.arg_fragments and json.loads("".join(out.arg_fragments)) == TOOL_ARGS, out.arg_fragments
        else:
            assert len(out.deltas) >= 2, f"expected several text deltas, got {out.deltas}"

    # Metered at what the provider said, in whichever dialect it said it.
    rid = out.headers.get("x-request-id")
    assert rid, out.headers
    rec = gateway.wait_usage(rid, key=KEY, model=upstream.model)
    assert rec["status"] == 200 and rec["streamed"] is stream, rec
    assert (rec["provider"], rec["upstream_model"]) == (upstream.provider, upstream.upstream_model), rec
    assert (rec["prompt_tokens"], rec["completion_tokens"]) == out.usage, rec


# --------------------------------------------------------------------------- tool results

def assert_tool_result_echoed(text: str, *, wrapped_ok: bool) -> None:
    """The sim answers a turn of tool results with `The tool returned: <result>`."""
    assert text.startswith(TOOL_ANSWER_PREFIX), text
    echoed = json.loads(text[len(TOOL_ANSWER_PREFIX):])
    if echoed == TOOL_RESULT:
        return
    # A Gemini functionResponse holds an object, so a result sent as a string reaches a Gemini
    # provider wrapped in a one-key object.
    assert wrapped_ok and isinstance(echoed, dict) and len(echoed) == 1, f"tool result lost: {text!r}"
    (inner,) = echoed.values()
    assert json.loads(inner) == TOOL_RESULT, f"tool result lost: {text!r}"


def follow_openai_chat(client: openai.OpenAI, model: str) -> tuple[dict, str]:
    messages: list = [{"role": "user", "content": PROMPT}]
    first = client.chat.completions.create(model=model, messages=messages, tools=[OPENAI_TOOL])
    assert first.choices[0].finish_reason == "tool_calls", first
    call = first.choices[0].message.tool_calls[0]
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": json.dumps(TOOL_RESULT)}]
    raw = client.chat.completions.with_raw_response.create(model=model, messages=messages, tools=[OPENAI_TOOL])
    resp = raw.parse()
    choice = resp.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls, choice
    assert resp.usage.completion_tokens > 0 and resp.usage.prompt_tokens > first.usage.prompt_tokens, resp.usage
    return _headers(raw.headers), choice.message.content


def follow_openai_responses(client: openai.OpenAI, model: str) -> tuple[dict, str]:
    first = client.responses.create(model=model, input=PROMPT, tools=[RESPONSES_TOOL])
    (call,) = [o for o in first.output if o.type == "function_call"]
    items = [{"role": "user", "content": PROMPT},
             {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
             {"type": "function_call_output", "call_id": call.call_id, "output": json.dumps(TOOL_RESULT)}]
    raw = client.responses.with_raw_response.create(model=model, input=items, tools=[RESPONSES_TOOL])
    resp = raw.parse()
    assert resp.status == "completed", resp
    assert [o.type for o in resp.output] == ["message"], resp.output
    assert resp.usage.output_tokens > 0 and resp.usage.input_tokens > first.usage.input_tokens, resp.usage
    return _headers(raw.headers), resp.output_text


def follow_anthropic(client: anthropic.Anthropic, model: str) -> tuple[dict, str]:
    messages: list = [{"role": "user", "content": PROMPT}]
    first = client.messages.create(model=model, max_tokens=MAX_TOKENS, messages=messages, tools=[ANTHROPIC_TOOL])
    assert first.stop_reason == "tool_use", first
    (call,) = [b for b in first.content if b.type == "tool_use"]
    messages += [{"role": "assistant", "content": first.content},
                 {"role": "user", "content": [
                     {"type": "tool_result", "tool_use_id": call.id, "content": json.dumps(TOOL_RESULT)}]}]
    raw = client.messages.with_raw_response.create(model=model, max_tokens=MAX_TOKENS, messages=messages,
                                                   tools=[ANTHROPIC_TOOL])
    msg = raw.parse()
    assert msg.stop_reason == "end_turn", msg
    assert [b.type for b in msg.content] == ["text"], msg.content
    assert msg.usage.output_tokens > 0 and msg.usage.input_tokens > first.usage.input_tokens, msg.usage
    return _headers(raw.headers), msg.content[0].text


def follow_genai(client: genai.Client, model: str) -> tuple[dict, str]:
    config = gtypes.GenerateContentConfig(
        tools=[GENAI_TOOL], automatic_function_calling=gtypes.AutomaticFunctionCallingConfig(disable=True))
    contents = [gtypes.Content(role="user", parts=[gtypes.Part(text=PROMPT)])]
    first = client.models.generate_content(model=model, contents=contents, config=config)
    (call,) = first.function_calls
    response_part = gtypes.Part.from_function_response(name=call.name, response=TOOL_RESULT)
    if call.id:  # echo the call's id when the answer had one
        response_part.function_response.id = call.id
    contents += [first.candidates[0].content, gtypes.Content(role="user", parts=[response_part])]
    resp = client.models.generate_content(model=model, contents=contents, config=config)
    assert resp.candidates[0].finish_reason == gtypes.FinishReason.STOP, resp
    assert not resp.function_calls, resp.function_calls
    u = resp.usage_metadata
    assert u.candidates_token_count > 0 and u.prompt_token_count > first.usage_metadata.prompt_token_count, u
    return _headers(resp.sdk_http_response.headers), "".join(p.text for p in resp.candidates[0].content.parts if p.text)


FOLLOW_UPS = {
    "openai-chat": follow_openai_chat,
    "openai-responses": follow_openai_responses,
    "anthropic": follow_anthropic,
    "google-genai": follow_genai,
}


@pytest.mark.parametrize("upstream", UPSTREAMS, ids=lambda u: u.model)
@pytest.mark.parametrize("sdk", SDKS)
def test_tool_result_turn(gateway: Gateway, clients, sdk: str, upstream: Upstream):
    """The call the SDK got, answered with the tool's result in the SDK's own shapes: the model
    (the sim) reads the result and answers in text."""
    headers, text = FOLLOW_UPS[sdk](clients[sdk], upstream.model)
    assert headers.get("x-ferrogate-provider") == upstream.provider, headers
    assert_tool_result_echoed(text, wrapped_ok=upstream.kind == "gemini" and sdk != "google-genai")
