"""An A2A agent behind the gateway (/a2a/{agent}), with the official `a2a-sdk` on both sides:
its card rewritten to the gateway's URL (signature dropped), messages sent plainly and streamed
over A2A 1.0 and 0.3, the agent's own credential in place of the virtual key, grants, records.

Keys: alice may use the agent "echo"; carol only its plain send (`echo/SendMessage`,
`echo/message/send` in 0.3); bob no agent. The agent is testdata/a2a/agent.py."""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass

import httpx
import pytest

from a2a_support import Agent, a2a_agent, client_output, run_a2a_client
from conftest import Gateway, _free_port, _start, own_gateway

TOKEN = "agent-token-" + secrets.token_hex(8)
TEXT = "through the gateway"


@dataclass
class Env:
    gw: Gateway
    agent: Agent

    @property
    def url(self) -> str:
        return f"{self.gw.gateway_url}/a2a/echo"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    with a2a_agent(TOKEN, tmp_path_factory.mktemp("a2a-gw"), "echo", sign=True) as agent:
        os.environ["FG_A2A_ECHO_TOKEN"] = TOKEN

        def config(base: dict) -> dict:
            base["a2a_agents"] = [
                {"name": "echo", "url": agent.url, "api_key_env": "FG_A2A_ECHO_TOKEN"},
                {"name": "down", "url": f"http://127.0.0.1:{_free_port()}/", "auth": "none"},
            ]
            keys = {k["name"]: k for k in base["keys"]}
            keys["alice"]["a2a"] = ["echo", "down"]
            keys["carol"]["a2a"] = ["echo/SendMessage", "echo/message/send"]
            return base

        yield from (Env(gw, agent) for gw in own_gateway("ferrogate-a2a-", lambda w, n: _start(w, n, config)))


def rpc(env: Env, agent: str, body: str | bytes, key: str | None = "alice") -> httpx.Response:
    headers = {"content-type": "application/json", "a2a-version": "1.0"}
    if key:
        headers["authorization"] = f"Bearer {env.gw.keys.get(key, key)}"
    return httpx.post(f"{env.gw.gateway_url}/a2a/{agent}", content=body, headers=headers, timeout=30)


@pytest.mark.parametrize("version", ["1.0", "0.3"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_messages_go_through_the_gateway_with_the_agents_credential(env: Env, stream: bool, version: str):
    before = len(env.agent.requests())
    proc = run_a2a_client(env.url, env.gw.keys["alice"], TEXT, stream=stream, protocol_version=version)
    out = client_output(proc, env.agent.stderr_log, *(p.log for p in env.gw.procs))
    assert out["error"] is None, out
    assert out["card_url"] == env.url, "the client must send to the gateway, as the rewritten card says"
    if stream:
        assert out["texts"] == ["echo:", f" {TEXT}"] and out["final_state"] == "TASK_STATE_COMPLETED", out
    else:
        assert out["texts"] == [f"echo: {TEXT}"], out
    seen = env.agent.requests()[before:]
    assert [r["method"] for r in seen] == ["GET", "POST"], seen
    assert all(r["headers"].get("authorization") == f"Bearer {TOKEN}" for r in seen), seen
    assert not any(env.gw.keys["alice"] in json.dumps(r) for r in seen), "the virtual key reached the agent"
    assert seen[1]["headers"].get("a2a-version") == version, seen[1]


def test_the_card_names_only_the_gateway(env: Env):
    r = httpx.get(f"{env.url}/.well-known/agent-card.json",
                  headers={"authorization": f"Bearer {env.gw.keys['alice']}"}, timeout=30)
    assert r.status_code == 200, r.text
    card = r.json()
    assert {i["url"] for i in card["supportedInterfaces"]} == {env.url}, card
    assert card["url"] == env.url, card
    assert "signatures" not in card and "signatures" in env.agent.card(), "a re-pointed card loses its signature"
    assert f"127.0.0.1:{env.agent.port}" not in r.text, r.text
    assert card["skills"] == env.agent.card()["skills"]


def test_keys_and_agents_are_checked_at_the_door(env: Env):
    ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t"}})
    for agent, key, status in [("ghost", "alice", 404), ("echo", "bob", 403), ("echo", None, 401)]:
        r = rpc(env, agent, ping, key=key)
        assert r.status_code == status and r.json()["error"]["data"]["http_status"] == status, (agent, key, r.text)
    r = rpc(env, "echo", b'{"jsonrpc": "2.0", "id": 1, "method": ')
    assert (r.status_code, r.json()["error"]["code"]) == (400, -32700), r.text
    # A2A has no notifications: a request without an id is refused, not passed on unchecked.
    r = rpc(env, "echo", json.dumps({"jsonrpc": "2.0", "method": "SendMessage", "params": {}}))
    assert (r.status_code, r.json()["error"]["code"]) == (400, -32600), r.text
    r = rpc(env, "down", ping)
    assert r.status_code >= 500 and r.json()["error"]["code"] == -32603, r.text


def test_each_call_leaves_a_usage_record(env: Env):
    out = client_output(run_a2a_client(env.url, env.gw.keys["alice"], "recorded"), env.agent.stderr_log)
    assert out["error"] is None, out
    deadline = time.monotonic() + 30
    while True:
        records = env.gw.usage(key="alice", model="SendMessage", limit=200)["records"]
        mine = [r for r in records if r["provider"] == "a2a:echo" and r["status"] == 200]
        if mine or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert mine and mine[0]["upstream_model"] == "SendMessage", records


@pytest.mark.parametrize("version", ["1.0", "0.3"])
def test_a_key_granted_some_methods_calls_those_and_no_other(env: Env, version: str):
    sent = client_output(run_a2a_client(env.url, env.gw.keys["carol"], TEXT, protocol_version=version),
                         env.agent.stderr_log, *(p.log for p in env.gw.procs))
    assert sent["error"] is None and sent["texts"] == [f"echo: {TEXT}"], sent
    posts = lambda: [r for r in env.agent.requests() if r["method"] == "POST"]  # noqa: E731
    before = len(posts())
    streamed = run_a2a_client(env.url, env.gw.keys["carol"], TEXT, stream=True, protocol_version=version)
    assert streamed.returncode != 0 and "403" in streamed.stderr, (streamed.stdout, streamed.stderr[-2000:])
    method = "SendStreamingMessage" if version == "1.0" else "message/stream"
    refused = rpc(env, "echo", json.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": {}}), key="carol")
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["data"]["type"] == "permission_error" and method in refused.text, refused.text
    # Another binding's path would carry a method the grant cannot see: refused at the door.
    seen = len(env.agent.requests())
    rest = httpx.get(f"{env.url}/tasks/t-1", headers={"authorization": f"Bearer {env.gw.keys['carol']}"}, timeout=30)
    assert rest.status_code == 403 and "GET /tasks/t-1" in rest.text, rest.text
    assert len(env.agent.requests()) == seen and len(posts()) == before, "a refused method reached the agent"
