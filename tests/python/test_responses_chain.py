"""Follow-ups with `previous_response_id` through `ferrogate serve`, with the official `openai` SDK.

Translated targets (the sim in its chat completions, Anthropic and Gemini dialects) get the
whole conversation, rebuilt from the stored chain. The sim derives its text and its token counts
from the conversation it is sent, so a follow-up's answer must equal the answer to the same
conversation sent whole with `store=False`: equal text and input tokens show that every earlier
turn arrived and that the first turn's `instructions` did not (OpenAI's rule). A function call
and its output arrive as a tool call and its result, paired: the sim, asked with
`x-sim-echo-tools`, answers with every call and result of the conversation it was sent, so a
call missing from the rebuild shows (the sim's usual answer names the last result only). A
chain created natively by an OpenAI provider is continued there: `previous_response_id` is
passed on and nothing rebuilt; that provider is a small recording server in this module, since
OpenAI's service cannot run here.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest

from conftest import Gateway, _start, own_gateway

TRANSLATED = ("oa-chat", "an-chat", "ge-chat")
# Alice's limit per conversation in the module's own gateway: more than one turn of LONG uses,
# less than two (the second turn carries the first).
CONVERSATION_TOKENS = 200
LONG = " ".join(f"word{i}" for i in range(100))
# Makes the sim answer with the tool calls and results it received (docs/sim.md).
ECHO_TOOLS = {"x-sim-echo-tools": "1"}
TOOLS = [{
    "type": "function", "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}]


def create(client: openai.OpenAI, stream: bool, **kw):
    """`responses.create`, or its streamed form's final response."""
    if not stream:
        return client.responses.create(**kw)
    events = list(client.responses.create(stream=True, **kw))
    completed = [e for e in events if e.type == "response.completed"]
    assert len(completed) == 1, [e.type for e in events]
    return completed[0].response


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("model", TRANSLATED)
def test_a_follow_up_carries_the_whole_conversation(gateway: Gateway, model: str, stream: bool):
    client = gateway.client("carol")
    first = client.responses.create(model=model, input="Tell me about ducks.", instructions="Answer briefly.")
    second = create(client, stream, model=model, input="And geese?", previous_response_id=first.id)
    whole = client.responses.create(model=model, store=False, input=[
        {"role": "user", "content": "Tell me about ducks."},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "And geese?"},
    ])
    assert second.output_text == whole.output_text
    assert second.usage.input_tokens == whole.usage.input_tokens, "every turn, and no inherited instructions"
    assert second.previous_response_id == first.id, "the answer echoes what it continues"
    stored = client.responses.retrieve(second.id)
    assert stored.previous_response_id == first.id
    # What the turn added is stored, not the rebuilt conversation.
    assert [i.content[0].text for i in client.responses.input_items.list(second.id)] == ["And geese?"]
    third = create(client, stream, model=model, input="And swans?", previous_response_id=second.id)
    assert third.usage.input_tokens > second.usage.input_tokens, "a chain of three"


def test_a_follow_up_is_charged_for_the_conversation_the_provider_billed(gateway: Gateway):
    client = gateway.client("carol")
    first = client.responses.create(model="an-chat", input="Tell me about ducks.")
    raw = client.responses.with_raw_response.create(model="an-chat", input="And geese?",
                                                    previous_response_id=first.id)
    second = raw.parse()
    record = gateway.wait_usage(raw.headers["x-request-id"], key="carol", model="an-chat")
    assert record["prompt_tokens"] == second.usage.input_tokens > first.usage.input_tokens, record
    assert record["completion_tokens"] == second.usage.output_tokens, record
    # The record says what it continued, and that the gateway sent the conversation whole.
    assert (record["continues"], record["rebuilt"]) == (first.id, True), record
    alone = gateway.wait_usage(first._request_id, key="carol", model="an-chat")
    assert "continues" not in alone and "rebuilt" not in alone, alone


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("model", TRANSLATED)
def test_a_tool_call_and_its_output_carry_over(gateway: Gateway, model: str, stream: bool):
    client = gateway.client("carol")
    first = create(client, stream, model=model, input="What is the weather in Paris?", tools=TOOLS)
    calls = [o for o in first.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather", first.output
    second = create(client, stream, model=model, tools=TOOLS, previous_response_id=first.id, extra_headers=ECHO_TOOLS,
                    input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 degrees"}])
    # The sim's answer is every tool call and result of the conversation it was sent.
    seen = json.loads(second.output_text)
    assert len(seen["calls"]) == 1 and len(seen["results"]) == 1, seen
    call, result = seen["calls"][0], seen["results"][0]
    assert (call["name"], call["arguments"]) == (calls[0].name, json.loads(calls[0].arguments)), seen
    assert "sunny, 21 degrees" in result["output"], seen
    assert result["ref"] == call["ref"], f"the output answers the stored call: {seen}"
    # Gemini pairs a call and its response by the function's name; the others by the call's id.
    assert call["ref"] == (calls[0].name if model == "ge-chat" else calls[0].call_id), seen


def refused(call) -> dict:
    with pytest.raises(openai.BadRequestError) as caught:
        call()
    return caught.value.response.json()["error"]


def test_an_id_the_key_does_not_own_is_not_found(gateway: Gateway):
    alice, bob = gateway.client("alice"), gateway.client("bob")
    mine = alice.responses.create(model="chat", input="Mine only.")
    for client, model, previous in ((bob, "embed", mine.id), (alice, "chat", "resp_nobodyhasthisone")):
        error = refused(lambda: client.responses.create(model=model, input="x", previous_response_id=previous))
        assert (error["code"], error["param"]) == ("previous_response_not_found", "previous_response_id"), error
        assert previous in error["message"]
    alice.responses.delete(mine.id)
    error = refused(lambda: alice.responses.create(model="chat", input="x", previous_response_id=mine.id))
    assert error["code"] == "previous_response_not_found"


def test_a_malformed_id_or_one_with_a_conversation_is_refused(gateway: Gateway):
    alice = gateway.client("alice")
    error = refused(lambda: alice.responses.create(model="chat", input="x", previous_response_id="msg_1"))
    assert (error["code"], error["param"]) == ("invalid_value", "previous_response_id"), error
    first = alice.responses.create(model="chat", input="hi")
    error = refused(lambda: alice.responses.create(
        model="chat", input="x", previous_response_id=first.id, conversation="conv_1"))
    assert error["param"] == "previous_response_id" and "conversation" in error["message"], error


class Recorder(BaseHTTPRequestHandler):
    """OpenAI's `POST /v1/responses`, answering a fixed text and keeping every request body."""

    bodies: list[dict] = []

    def do_POST(self):  # noqa: N802 (the http.server name)
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        Recorder.bodies.append(body)
        n = len(Recorder.bodies)
        answer = {
            "id": f"resp_up{n}", "object": "response", "created_at": 1, "status": "completed", "model": body["model"],
            "output": [{"type": "message", "id": f"msg_up{n}", "status": "completed", "role": "assistant",
                        "content": [{"type": "output_text", "text": f"upstream {n}", "annotations": []}]}],
            "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5,
                      "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "previous_response_id": body.get("previous_response_id"),
        }
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def native():
    """A gateway of its own with an OpenAI provider (the recorder) as model `gpt`, chains of at
    most three responses, conversations of at most CONVERSATION_TOKENS tokens for alice, and
    at most two conversations of five items per key."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def config(base: dict) -> dict:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        base["providers"].append({"name": "oai", "kind": "openai", "base_url": url})
        base["models"].append({"name": "gpt", "targets": [{"provider": "oai", "model": "gpt-up"}]})
        next(g for g in base["groups"] if g["name"] == "sdk")["models"].append("gpt")
        next(k for k in base["keys"] if k["name"] == "alice")["limits"] = {"tokens_per_conversation": CONVERSATION_TOKENS}
        return {**base, "responses": {"max_chain_depth": 3, "max_conversation_items": 5, "max_conversations_per_key": 2}}

    yield from own_gateway("ferrogate-chain-", lambda w, a: _start(w, a, config))
    server.shutdown()


def test_a_native_chain_goes_on_at_its_provider(native: Gateway):
    client = native.client("carol")
    first = client.responses.create(model="gpt", input="hi")
    second = client.responses.create(model="gpt", input="next", previous_response_id=first.id)
    assert second.output_text == "upstream 2"
    sent = Recorder.bodies[-1]
    assert (sent["previous_response_id"], sent["input"], sent["model"]) == (first.id, "next", "gpt-up"), sent
    # Continued at the provider, which keeps the conversation: nothing rebuilt here.
    record = native.wait_usage(second._request_id, key="carol", model="gpt")
    assert record["continues"] == first.id and "rebuilt" not in record, record


def test_a_translated_chain_is_rebuilt_for_an_openai_provider(native: Gateway):
    client = native.client("carol")
    first = client.responses.create(model="oa-chat", input="Tell me about ducks.")
    client.responses.create(model="gpt", input="And geese?", previous_response_id=first.id)
    sent = Recorder.bodies[-1]
    assert "previous_response_id" not in sent, sent
    assert [(i.get("role"), i.get("type")) for i in sent["input"]] == \
        [("user", "message"), ("assistant", "message"), ("user", None)], sent["input"]
    assert sent["input"][1]["content"][0]["text"] == first.output_text
    assert all("id" not in i for i in sent["input"]), "stored ids are not the provider's"


def test_reasoning_goes_back_only_to_the_provider_family_that_signed_it(native: Gateway):
    """A chain through OpenAI, then Anthropic, continued at OpenAI: its reasoning signed at OpenAI
    goes back there, what Anthropic signed does not (OpenAI cannot read it)."""
    client = native.client("carol")

    def thought(signature: str) -> dict:
        return {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Hmm."}],
                "encrypted_content": signature}

    first = client.responses.create(model="gpt", input=[
        {"role": "user", "content": "Hi."}, thought("openai-blob"), {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Ducks?"}])
    second = client.responses.create(model="an-chat", previous_response_id=first.id, input=[
        thought("anthropic-signature"), {"role": "assistant", "content": "Ducks."}, {"role": "user", "content": "Geese?"}])
    client.responses.create(model="gpt", input="Swans?", previous_response_id=second.id)
    sent = Recorder.bodies[-1]
    assert "previous_response_id" not in sent, "a chain not all native is rebuilt"
    signed = [i["encrypted_content"] for i in sent["input"] if i.get("type") == "reasoning"]
    assert signed == ["openai-blob"], sent["input"]


def test_a_chain_longer_than_the_bound_is_refused(native: Gateway):
    client = native.client("carol")
    previous = None
    # A follow-up may continue up to three responses: the fourth response is made, not a fifth.
    for _ in range(4):
        previous = client.responses.create(model="oa-chat", input="more", previous_response_id=previous).id
    error = refused(lambda: client.responses.create(model="oa-chat", input="more", previous_response_id=previous))
    assert (error["code"], error["param"]) == ("previous_response_chain_too_long", "previous_response_id"), error


def test_a_conversation_limit_stops_the_third_turn_and_no_other_conversation(native: Gateway):
    alice = native.client("alice", max_retries=2)
    first = alice.responses.create(model="chat", input=LONG)
    second = alice.responses.create(model="chat", input=LONG, previous_response_id=first.id)
    used = first.usage.total_tokens + second.usage.total_tokens
    assert first.usage.total_tokens < CONVERSATION_TOKENS <= used, (first.usage, second.usage)
    with pytest.raises(openai.RateLimitError) as caught:
        alice.responses.create(model="chat", input="And more?", previous_response_id=second.id)
    error = caught.value.response.json()["error"]
    assert error["code"] == "conversation_limit_exceeded" and f"{used} tokens" in error["message"], error
    assert caught.value.response.headers["x-should-retry"] == "false", "the SDK does not retry it"
    # The same key's other conversations go on, long first turns included.
    other = alice.responses.create(model="chat", input=LONG)
    alice.responses.create(model="chat", input="Next.", previous_response_id=other.id)
    # A conversation of the Conversations API is bounded alike.
    conv = alice.conversations.create()
    alice.responses.create(model="chat", input=LONG, conversation=conv.id)
    alice.responses.create(model="chat", input=LONG, conversation=conv.id)
    with pytest.raises(openai.RateLimitError) as caught:
        alice.responses.create(model="chat", input="And more?", conversation=conv.id)
    assert caught.value.response.json()["error"]["code"] == "conversation_limit_exceeded"


def test_conversations_are_bounded(native: Gateway):
    client = native.client("carol")
    item = {"role": "user", "content": "a"}
    conv = client.conversations.create(items=[item] * 3)
    client.conversations.create()
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.create()
    assert "max_conversations_per_key" in caught.value.response.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.create(conv.id, items=[item] * 3)
    assert caught.value.response.json()["error"]["param"] == "items"
    assert len(client.conversations.items.create(conv.id, items=[item] * 2).data) == 2
    error = refused(lambda: client.responses.create(model="oa-chat", conversation=conv.id, input="More?"))
    assert error["param"] == "conversation" and "max_conversation_items" in error["message"], error
