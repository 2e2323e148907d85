"""The A2A test fixtures themselves, without any gateway: testdata/a2a/agent.py and client.py on
the official `a2a-sdk` (1.x, this venv).

One agent (port 0, waited for on its `LISTENING <port>` line) answers the client over both
protocol versions it serves on its one JSON-RPC endpoint — 1.0 (`SendMessage`,
`SendStreamingMessage`) and 0.3 (`message/send`, `message/stream`) — plainly (a Message) and
streamed (a Task, its updates, completion); a wrong token is refused with 401 while the card stays
public. A second agent checks `--public-url` and `--sign` on the card.
"""

from __future__ import annotations

import secrets

import pytest

from a2a_support import Agent, a2a_agent, client_output, run_a2a_client

TOKEN = "a2a-fixture-" + secrets.token_hex(8)
TEXT = "hello agent"


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    with a2a_agent(TOKEN, tmp_path_factory.mktemp("a2a"), "fixture-echo") as a:
        yield a


@pytest.mark.parametrize("version", ["1.0", "0.3"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_send(agent: Agent, stream: bool, version: str):
    before = len(agent.requests())
    out = client_output(run_a2a_client(agent.url, TOKEN, TEXT, stream=stream, protocol_version=version),
                        agent.stderr_log)
    assert out["error"] is None and out["sdk"].startswith("1."), out
    assert out["card_url"] == agent.url, out
    if stream:  # Task (submitted), working, artifact "echo:" + " <text>", completed
        assert out["texts"] == ["echo:", f" {TEXT}"], out
        assert out["final_state"] == "TASK_STATE_COMPLETED", out
    else:  # a bare Message
        assert out["texts"] == [f"echo: {TEXT}"], out
        assert out["final_state"] is None, out
    card_get, post = agent.requests()[before:]
    assert card_get["method"] == "GET" and card_get["path"] == "/.well-known/agent-card.json", card_get
    assert post["method"] == "POST" and post["path"] == "/", post
    for r in (card_get, post):
        assert r["headers"].get("authorization") == f"Bearer {TOKEN}", r
    assert card_get["headers"].get("a2a-version") == "1.0", card_get
    assert post["headers"].get("a2a-version") == version, post
    assert ("text/event-stream" in post["headers"].get("accept", "")) == stream, post


def test_card(agent: Agent):
    card = agent.card()  # no credentials: the card is public
    assert [(i["url"], i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]] == [
        (agent.url, "JSONRPC", "1.0"), (agent.url, "JSONRPC", "0.3")], card
    assert (card["url"], card["preferredTransport"], card["protocolVersion"]) == (agent.url, "JSONRPC", "0.3"), card
    assert card["capabilities"]["streaming"] is True, card
    assert [s["id"] for s in card["skills"]] == ["echo"], card
    assert "signatures" not in card, card
    assert "authorization" not in agent.requests()[-1]["headers"]


def test_wrong_token_is_refused(agent: Agent):
    proc = run_a2a_client(agent.url, "wrong", TEXT)
    assert proc.returncode == 1 and "401" in proc.stderr, (proc.returncode, proc.stderr)
    last = agent.requests()[-1]
    assert last["method"] == "POST" and last["headers"].get("authorization") == "Bearer wrong", last


def test_public_url_and_signature(tmp_path):
    public = "http://gateway.invalid:8080/a2a/echo/"
    with a2a_agent(TOKEN, tmp_path, "fixture-public", public_url=public, sign=True) as a:
        card = a.card()
    assert {i["url"] for i in card["supportedInterfaces"]} == {public} and card["url"] == public, card
    [sig] = card["signatures"]
    assert sig["protected"] and sig["signature"], sig
