"""Stored Responses API responses through `ferrogate serve`, with the official `openai` SDK.

`responses.create` with `store=True` (or no `store`) keeps the response in the sidecar's store;
`responses.retrieve`, `responses.input_items.list` and `responses.delete` read and remove it, in
OpenAI's shapes (the SDK parses them into its own types). Only the key that created a response
sees it: every other key gets 404, as for an id that never existed. `store=False` keeps nothing,
and a stored response expires after `responses.ttl_secs` (a gateway of its own with a short TTL).
The model `chat` is the sim's chat completions, so these responses are translated ones.
"""

from __future__ import annotations

import time

import openai
import pytest

from conftest import Gateway, _start, own_gateway

MODEL = "chat"
SHORT_TTL_S = 4
# How long an expired response may still be seen: reads check the expiry, so only a slow
# machine makes this wait at all.
EXPIRY_WAIT_S = 60.0


def same_response(got, want) -> None:
    """What the client got from create and what retrieve answers agree."""
    assert got.id == want.id
    assert got.object == "response" and got.status == want.status == "completed"
    assert got.model == want.model
    assert got.output_text == want.output_text and got.output_text
    assert [o.id for o in got.output] == [o.id for o in want.output]
    assert got.usage.input_tokens == want.usage.input_tokens
    assert got.usage.output_tokens == want.usage.output_tokens
    assert got.store is True and want.store is True


def test_a_stored_response_reads_back(gateway: Gateway):
    client = gateway.client("alice")
    created = client.responses.create(model=MODEL, input="Keep this one.", store=True)
    got = client.responses.retrieve(created.id)
    same_response(got, created)
    assert got.previous_response_id is None


def test_a_streamed_response_is_stored_from_its_completed_event(gateway: Gateway):
    client = gateway.client("alice")
    events = list(client.responses.create(model=MODEL, input="Stream and keep.", stream=True))
    completed = [e for e in events if e.type == "response.completed"]
    assert len(completed) == 1, [e.type for e in events]
    same_response(client.responses.retrieve(completed[0].response.id), completed[0].response)


def test_a_streamed_response_cut_short_by_its_token_bound_is_stored(gateway: Gateway):
    # The sim writes more tokens than the bound: the answer ends with response.incomplete.
    client = gateway.client("alice")
    events = list(client.responses.create(model=MODEL, input="Stop early.", max_output_tokens=3, stream=True))
    final = events[-1]
    assert final.type == "response.incomplete", [e.type for e in events]
    got = client.responses.retrieve(final.response.id)
    assert (got.status, got.incomplete_details.reason) == ("incomplete", "max_output_tokens"), got
    assert got.output_text == final.response.output_text and got.output_text


def test_store_is_the_default(gateway: Gateway):
    client = gateway.client("alice")
    created = client.responses.create(model=MODEL, input="No store parameter.")
    assert client.responses.retrieve(created.id).id == created.id


def test_input_items_are_listed_and_paged(gateway: Gateway):
    client = gateway.client("alice")
    turns = [{"role": "user", "content": f"turn {i}"} for i in range(3)]
    created = client.responses.create(model=MODEL, input=turns, store=True)
    everything = client.responses.input_items.list(created.id, order="asc")
    texts = [item.content[0].text for item in everything.data]
    assert texts == ["turn 0", "turn 1", "turn 2"]
    assert all(item.type == "message" and item.role == "user" and item.id for item in everything.data)
    newest_first = client.responses.input_items.list(created.id)
    assert [i.id for i in newest_first.data] == [i.id for i in reversed(everything.data)]
    first = client.responses.input_items.list(created.id, order="asc", limit=2)
    assert [i.id for i in first.data] == [i.id for i in everything.data[:2]]
    assert first.has_more is True and first.first_id == everything.data[0].id and first.last_id == first.data[-1].id
    rest = client.responses.input_items.list(created.id, order="asc", limit=2, after=first.last_id)
    assert [i.id for i in rest.data] == [everything.data[2].id] and rest.has_more is False
    # The SDK's auto-pagination walks the same pages.
    assert [i.id for i in client.responses.input_items.list(created.id, order="asc", limit=1)] == \
        [i.id for i in everything.data]


def test_a_deleted_response_is_gone(gateway: Gateway):
    client = gateway.client("alice")
    created = client.responses.create(model=MODEL, input="Delete me.", store=True)
    deleted = client.responses.with_raw_response.delete(created.id)
    assert deleted.status_code == 200
    assert deleted.http_response.json() == {"id": created.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)


def test_another_key_gets_404_everywhere(gateway: Gateway):
    alice, bob = gateway.client("alice"), gateway.client("bob")
    created = alice.responses.create(model=MODEL, input="Mine only.", store=True)
    for call in (lambda: bob.responses.retrieve(created.id),
                 lambda: bob.responses.input_items.list(created.id),
                 lambda: bob.responses.delete(created.id)):
        with pytest.raises(openai.NotFoundError) as caught:
            call()
        error = caught.value.response.json()["error"]
        assert error["type"] == "invalid_request_error" and created.id in error["message"], error
    # Same answer as an id nobody has: nothing tells the two apart.
    with pytest.raises(openai.NotFoundError) as unknown:
        bob.responses.retrieve("resp_nobodyhasthisone")
    assert unknown.value.status_code == 404
    # Bob's delete removed nothing.
    assert alice.responses.retrieve(created.id).id == created.id


def test_store_false_keeps_nothing(gateway: Gateway):
    client = gateway.client("alice")
    created = client.responses.create(model=MODEL, input="Forget this.", store=False)
    assert created.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)


def test_a_malformed_id_is_400(gateway: Gateway):
    with pytest.raises(openai.BadRequestError) as caught:
        gateway.client("alice").responses.retrieve("not-a-response-id")
    assert caught.value.response.json()["error"]["param"] == "response_id"


def test_include_is_checked_and_the_response_read_whole(gateway: Gateway):
    client = gateway.client("alice")
    created = client.responses.create(model=MODEL, input="Read me with include.")
    got = client.responses.retrieve(created.id, include=["reasoning.encrypted_content", "message.output_text.logprobs"])
    same_response(got, created)
    assert client.responses.input_items.list(created.id, include=["message.input_image.image_url"]).data
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.retrieve(created.id, include=["no.such.thing"])
    assert caught.value.response.json()["error"]["param"] == "include"


def test_background_is_refused_and_cancel_is_a_clear_400(gateway: Gateway):
    client = gateway.client("alice")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input="Later.", background=True)
    assert caught.value.response.json()["error"]["param"] == "background"
    created = client.responses.create(model=MODEL, input="Now.")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.cancel(created.id)
    error = caught.value.response.json()["error"]
    assert error["param"] == "response_id" and "background" in error["message"], error


@pytest.fixture(scope="module")
def short_lived() -> Gateway:
    """A gateway of its own whose stored responses live SHORT_TTL_S seconds."""
    extra = {"responses": {"ttl_secs": SHORT_TTL_S}}
    yield from own_gateway("ferrogate-responses-", lambda w, a: _start(w, a, extra))


def test_a_stored_response_expires(short_lived: Gateway):
    client = short_lived.client("alice")
    # Seen while young: on a machine too slow to read it back within the TTL, try again.
    for _ in range(3):
        start = time.monotonic()
        created = client.responses.create(model=MODEL, input="Short-lived.", store=True)
        try:
            client.responses.retrieve(created.id)
            break
        except openai.NotFoundError:
            if time.monotonic() - start < SHORT_TTL_S:
                raise
    else:
        pytest.fail(f"never read back within {SHORT_TTL_S}s of its creation")
    deadline = time.monotonic() + EXPIRY_WAIT_S
    while True:
        try:
            client.responses.retrieve(created.id)
        except openai.NotFoundError:
            break
        assert time.monotonic() < deadline, f"still stored {EXPIRY_WAIT_S}s after a {SHORT_TTL_S}s TTL"
        time.sleep(0.5)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(created.id)


@pytest.fixture(scope="module")
def by_group() -> Gateway:
    """A gateway of its own with `visibility: group`; carol's first group is alice's (dev)."""
    def config(base: dict) -> dict:
        next(k for k in base["keys"] if k["name"] == "carol")["groups"] = ["dev", "sdk"]
        return {**base, "responses": {"visibility": "group"}}
    yield from own_gateway("ferrogate-responses-group-", lambda w, a: _start(w, a, config))


def test_with_group_visibility_the_group_shares_and_others_do_not(by_group: Gateway):
    alice, carol, bob = by_group.client("alice"), by_group.client("carol"), by_group.client("bob")
    created = alice.responses.create(model=MODEL, input="For the team.")
    assert carol.responses.retrieve(created.id).id == created.id, "same first group"
    follow = carol.responses.create(model=MODEL, input="And then?", previous_response_id=created.id)
    assert alice.responses.retrieve(follow.id).previous_response_id == created.id
    conv = carol.conversations.create(items=[{"role": "user", "content": "Team notes."}])
    assert alice.conversations.retrieve(conv.id).id == conv.id
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        bob.conversations.retrieve(conv.id)
