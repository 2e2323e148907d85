"""OpenAI's Conversations API through `ferrogate serve`, with the official `openai` SDK.

A conversation is created, read, updated and deleted, its items added, listed, read and deleted,
in OpenAI's shapes (the SDK parses them into its own types). `responses.create(conversation=…)`
sends the conversation's items before the request's input, to translated providers too (the
sim's answer equals the answer to the same conversation sent whole), and appends the turn (its
input, then its output) when the response completed, even with `store=False`. Only the key that
created a conversation sees it: every other key gets 404.
"""

from __future__ import annotations

import openai
import pytest

from conftest import Gateway

TRANSLATED = ("oa-chat", "an-chat", "ge-chat")


def texts(items) -> list[str]:
    return [part.text for item in items for part in item.content]


def test_a_conversation_and_its_items_are_managed(gateway: Gateway):
    client = gateway.client("alice")
    conv = client.conversations.create(metadata={"topic": "ducks"},
                                       items=[{"type": "message", "role": "user", "content": "Hello"}])
    assert conv.id.startswith("conv_") and conv.object == "conversation" and conv.metadata == {"topic": "ducks"}
    assert client.conversations.retrieve(conv.id).created_at == conv.created_at
    assert client.conversations.update(conv.id, metadata={"topic": "geese"}).metadata == {"topic": "geese"}
    added = client.conversations.items.create(conv.id, items=[
        {"type": "message", "role": "user", "content": "One"}, {"role": "user", "content": "Two"}])
    assert len(added.data) == 2 and all(i.id for i in added.data)
    assert texts(client.conversations.items.list(conv.id, order="asc")) == ["Hello", "One", "Two"]
    newest = client.conversations.items.list(conv.id, limit=1)
    assert texts(newest.data) == ["Two"] and newest.has_more is True
    item = client.conversations.items.retrieve(added.data[0].id, conversation_id=conv.id)
    assert item.id == added.data[0].id
    assert client.conversations.items.delete(item.id, conversation_id=conv.id).id == conv.id
    assert texts(client.conversations.items.list(conv.id, order="asc")) == ["Hello", "Two"]
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(item.id, conversation_id=conv.id)
    deleted = client.conversations.delete(conv.id)
    assert (deleted.id, deleted.deleted) == (conv.id, True)
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conv.id)


def test_bad_input_is_refused_by_name(gateway: Gateway):
    client = gateway.client("alice")
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.create(metadata={f"k{i}": "v" for i in range(17)})
    assert caught.value.response.json()["error"]["param"] == "metadata"
    conv = client.conversations.create()
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.create(conv.id, items=[{"role": "user", "content": "x"}] * 21)
    assert caught.value.response.json()["error"]["param"] == "items"
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.retrieve("resp_not_a_conversation")
    assert caught.value.response.json()["error"]["param"] == "conversation_id"


def test_another_key_gets_404_everywhere(gateway: Gateway):
    alice, bob = gateway.client("alice"), gateway.client("bob")
    conv = alice.conversations.create(items=[{"role": "user", "content": "Mine."}])
    item = alice.conversations.items.list(conv.id).data[0]
    for call in (lambda: bob.conversations.retrieve(conv.id),
                 lambda: bob.conversations.update(conv.id, metadata={"x": "y"}),
                 lambda: bob.conversations.items.list(conv.id),
                 lambda: bob.conversations.items.create(conv.id, items=[{"role": "user", "content": "x"}]),
                 lambda: bob.conversations.items.retrieve(item.id, conversation_id=conv.id),
                 lambda: bob.conversations.items.delete(item.id, conversation_id=conv.id),
                 lambda: bob.conversations.delete(conv.id)):
        with pytest.raises(openai.NotFoundError):
            call()
    assert texts(alice.conversations.items.list(conv.id)) == ["Mine."], "nothing changed"
    with pytest.raises(openai.BadRequestError) as caught:
        bob.responses.create(model="embed", input="x", conversation=conv.id)
    assert caught.value.response.json()["error"]["param"] == "conversation"


@pytest.mark.parametrize("model", TRANSLATED)
def test_responses_in_a_conversation_see_and_extend_it(gateway: Gateway, model: str):
    client = gateway.client("carol")
    conv = client.conversations.create(items=[{"role": "user", "content": "Tell me about ducks."}])
    first = client.responses.create(model=model, conversation=conv.id, input="And geese?")
    whole = client.responses.create(model=model, store=False, input=[
        {"role": "user", "content": "Tell me about ducks."}, {"role": "user", "content": "And geese?"}])
    assert first.output_text == whole.output_text
    assert first.usage.input_tokens == whole.usage.input_tokens
    listed = client.conversations.items.list(conv.id, order="asc").data
    assert [i.role for i in listed] == ["user", "user", "assistant"]
    assert texts(listed) == ["Tell me about ducks.", "And geese?", first.output_text]
    assert first.conversation.id == conv.id, "the answer names its conversation"
    assert client.responses.retrieve(first.id).conversation.id == conv.id
    # store=False keeps no response, but the turn joins the conversation all the same.
    second = client.responses.create(model=model, conversation={"id": conv.id}, input="And swans?", store=False)
    assert second.usage.input_tokens > first.usage.input_tokens
    assert len(client.conversations.items.list(conv.id).data) == 5
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(second.id)
