"""MCP servers behind the gateway (/mcp/{server}), with the official `mcp` SDK on both sides:
a 2.x server ("tools"), a 1.x server ("legacy", sessions) and a 2.x server on the HTTP+SSE
transport ("old"), reached by 2.x and 1.x clients.

Keys: alice may use tools/echo, tools/add, legacy/add and old/{add,e*}; carol everything ("*");
bob no server.
The servers demand their own bearer tokens, which only the gateway holds. No mock: the servers
and clients are the SDK's own (testdata/mcp)."""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from conftest import Gateway, _free_port, _start, own_gateway
from mcp_support import Server, client_output, mcp_server, run_client

TOKENS = {name: f"srv-{name}-{secrets.token_hex(8)}" for name in ("tools", "legacy", "old")}
TRANSPORTS = {"tools": "streamable-http", "legacy": "streamable-http", "old": "sse"}
GRANTED = {"tools": ["add", "echo"], "legacy": ["add"], "old": ["add", "echo"]}
EVERY_TOOL = ["add", "delete_everything", "echo", "slow"]
RPC_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@dataclass
class Env:
    gw: Gateway
    servers: dict[str, Server]

    def url(self, server: str) -> str:
        return f"{self.gw.gateway_url}/mcp/{server}"

    def post(self, server: str, body: bytes | str, key: str | None = "alice", **headers) -> httpx.Response:
        h = dict(RPC_HEADERS, **headers)
        if key:
            h["authorization"] = f"Bearer {self.gw.keys.get(key, key)}"
        return httpx.post(self.url(server), content=body, headers=h, timeout=30)

    def logs(self) -> list[Path]:
        return [p.log for p in self.gw.procs] + [s.stderr_log for s in self.servers.values()]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    servers = {}
    mk = tmp_path_factory.mktemp
    with mcp_server("2.x", TRANSPORTS["tools"], TOKENS["tools"], mk("tools"), "tools") as a, \
            mcp_server("1.x", TRANSPORTS["legacy"], TOKENS["legacy"], mk("legacy"), "legacy") as b, \
            mcp_server("2.x", TRANSPORTS["old"], TOKENS["old"], mk("old"), "old") as c:
        servers = {"tools": a, "legacy": b, "old": c}
        for name, token in TOKENS.items():
            os.environ[f"FG_MCP_{name.upper()}_TOKEN"] = token
        os.environ["FG_MCP_WRONG_TOKEN"] = "not-the-servers-token"

        def config(base: dict) -> dict:
            base["mcp_servers"] = [
                *({"name": n, "url": s.url, "api_key_env": f"FG_MCP_{n.upper()}_TOKEN",
                   "transport": TRANSPORTS[n].replace("-", "_")} for n, s in servers.items()),
                # Nothing listens there: the gateway must say so as a JSON-RPC error.
                {"name": "down", "url": f"http://127.0.0.1:{_free_port()}/mcp", "auth": "none"},
                # The tools server with a credential it refuses.
                {"name": "miscredentialed", "url": servers["tools"].url, "api_key_env": "FG_MCP_WRONG_TOKEN"},
            ]
            keys = {k["name"]: k for k in base["keys"]}
            keys["alice"]["mcp"] = ["tools/echo", "tools/add", "legacy/add", "old/add", "old/e*"]
            keys["carol"]["mcp"] = ["*"]
            return base

        yield from (Env(gw, servers) for gw in own_gateway("ferrogate-mcp-", lambda w, n: _start(w, n, config)))


def client(env: Env, era: str, server: str, key: str, *args: str) -> dict:
    proc = run_client(era, env.url(server), TRANSPORTS.get(server, "streamable-http"), env.gw.keys[key], *args)
    return client_output(proc, *env.logs())


@pytest.mark.parametrize("client_era", ["2.x", "1.x"])
@pytest.mark.parametrize("server", ["tools", "legacy", "old"])
def test_granted_tools_are_listed_and_called_with_the_servers_credential(env: Env, server: str, client_era: str):
    out = client(env, client_era, server, "alice", "--call", "add", "--args", '{"a": 3, "b": 4}')
    assert out["error"] is None, out
    assert sorted(out["tools"]) == GRANTED[server], "ungranted tools are absent from the list"
    assert out["call"] == {"content_text": "7", "is_error": False}, out
    seen = env.servers[server].requests()
    assert seen, "the server saw no request"
    assert all(r["headers"].get("authorization") == f"Bearer {TOKENS[server]}" for r in seen), seen
    assert not any(env.gw.keys["alice"] in json.dumps(r) for r in seen), "the virtual key reached the server"
    # A key granted every tool sees the server's whole list.
    everything = client(env, client_era, server, "carol")
    assert sorted(everything["tools"]) == EVERY_TOOL, everything


@pytest.mark.parametrize("client_era", ["2.x", "1.x"])
@pytest.mark.parametrize("server", ["tools", "legacy", "old"])
def test_an_ungranted_tool_is_refused_before_the_server(env: Env, server: str, client_era: str):
    calls = env.servers[server].calls
    before = calls().count("delete_everything")
    out = client(env, client_era, server, "alice", "--call", "delete_everything", "--args", "{}")
    assert out["call"] is None and out["error"]["code"] == -32602, out
    assert "delete_everything" in out["error"]["message"], out
    assert calls().count("delete_everything") == before, "the refused call reached the server"
    allowed = client(env, client_era, server, "carol", "--call", "delete_everything", "--args", "{}")
    assert allowed["call"]["is_error"] is False and calls().count("delete_everything") == before + 1


def test_each_tool_call_leaves_a_usage_record(env: Env):
    marker = "usage-" + secrets.token_hex(4)
    out = client(env, "2.x", "tools", "alice", "--call", "echo", "--args", json.dumps({"text": marker}))
    assert out["call"]["content_text"] == marker, out
    deadline = time.monotonic() + 30
    while True:
        records = env.gw.usage(key="alice", model="echo", limit=200)["records"]
        mine = [r for r in records if r["provider"] == "mcp:tools" and r["status"] == 200]
        if mine or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert mine, records
    assert mine[0]["upstream_model"] == "echo" and mine[0]["groups"] == ["dev"], mine[0]


def test_servers_keys_and_credentials_are_checked_at_the_door(env: Env):
    init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    for server, key, status in [("nope", "alice", 404), ("tools", "bob", 403), ("tools", None, 401),
                                ("tools", "not-a-key", 401)]:
        r = env.post(server, init, key=key)
        assert r.status_code == status, (server, key, r.status_code, r.text)
        error = r.json()["error"]
        assert r.json()["jsonrpc"] == "2.0" and error["data"]["http_status"] == status, r.text
    assert not any(r["headers"].get("authorization") is None for r in env.servers["tools"].requests())


def test_bad_json_rpc_gets_clear_errors_and_reaches_no_server(env: Env):
    calls = len(env.servers["tools"].calls())
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}}
    cases = [
        (b'{"jsonrpc": "2.0", "id": 1, "method": ', 400, -32700),
        (json.dumps([call, call]), 400, -32600),  # batches left MCP in 2025-06-18
        (json.dumps({**call, "jsonrpc": "1.0"}), 400, -32600),
        (json.dumps({"jsonrpc": "2.0", "id": {"x": 1}, "method": "tools/call"}), 400, -32600),
    ]
    for body, status, code in cases:
        r = env.post("tools", body)
        assert (r.status_code, r.json()["error"]["code"]) == (status, code), (body, r.text)
    # 2026-07-28 headers must agree with the body: a granted name cannot smuggle another call.
    r = env.post("tools", json.dumps({**call, "params": {"name": "delete_everything"}}),
                 **{"mcp-method": "tools/call", "mcp-name": "echo"})
    assert (r.status_code, r.json()["error"]["code"]) == (400, -32020), r.text
    big = json.dumps({**call, "params": {"name": "echo", "arguments": {"text": "x" * (11 << 20)}}})
    assert env.post("tools", big).status_code == 413
    assert len(env.servers["tools"].calls()) == calls, "a refused message reached the server"


def test_a_session_belongs_to_the_key_that_opened_it(env: Env):
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    r = env.post("legacy", json.dumps(init), key="carol")
    assert r.status_code == 200, r.text
    sealed = r.headers["mcp-session-id"]
    upstream = sealed.rsplit(".", 1)[0]
    assert "." in sealed and upstream, sealed
    notified = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
    version = {"mcp-protocol-version": "2025-11-25"}
    assert env.post("legacy", notified, key="carol", **{"mcp-session-id": sealed}, **version).status_code == 202
    listing = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    for key, presented in [("alice", sealed), ("carol", upstream)]:
        r = env.post("legacy", listing, key=key, **{"mcp-session-id": presented}, **version)
        assert r.status_code == 404 and r.json()["error"]["code"] == -32600, (key, r.text)
        assert "session" in r.json()["error"]["message"]


def test_a_server_that_is_down_is_a_json_rpc_error(env: Env):
    r = env.post("down", json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}), key="carol")
    assert r.status_code >= 500, r.text
    body = r.json()
    assert body["jsonrpc"] == "2.0" and body["error"]["code"] == -32603 and body["error"]["message"], body
    out = client(env, "2.x", "down", "carol")
    assert out["error"] is not None and out["tools"] == [], out
    # The other servers are unaffected.
    assert sorted(client(env, "2.x", "tools", "carol")["tools"]) == EVERY_TOOL


def test_an_sse_session_belongs_to_the_key_that_opened_it(env: Env):
    """The HTTP+SSE transport: the GET stream's endpoint event points at the gateway, with the
    server's session_id sealed for the key; another key, or the unsealed id, gets 404."""
    headers = {"accept": "text/event-stream", "authorization": f"Bearer {env.gw.keys['carol']}"}
    with httpx.stream("GET", env.url("old"), headers=headers, timeout=30) as r:
        assert r.status_code == 200, r.read()
        lines = r.iter_lines()
        event = [next(lines), next(lines)]
    assert event[0] == "event: endpoint", event
    endpoint = event[1].removeprefix("data: ")
    assert endpoint.startswith("/mcp/old/messages/?session_id="), endpoint
    sealed = endpoint.split("session_id=", 1)[1]
    upstream = sealed.rsplit(".", 1)[0]
    ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    post = lambda key, sid: httpx.post(f"{env.gw.gateway_url}/mcp/old/messages/?session_id={sid}", content=ping,
                                       headers={**RPC_HEADERS, "authorization": f"Bearer {env.gw.keys[key]}"},
                                       timeout=30)
    for key, sid in [("alice", sealed), ("carol", upstream)]:
        r = post(key, sid)
        assert r.status_code == 404 and r.json()["error"]["code"] == -32600, (key, r.text)
    seen = [q["query"] for q in env.servers["old"].requests() if q["path"] == "/messages/"]
    assert f"session_id={upstream}" not in seen, "a refused session reached the server"


def test_a_server_refusing_the_gateways_credential_is_the_gateways_502(env: Env):
    """The client's credential (the virtual key) was accepted; the server's 401 is about the
    gateway's own, so it must neither reach the client as a 401 nor send it to the server's
    authorization server (WWW-Authenticate)."""
    r = env.post("miscredentialed", json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}), key="carol")
    assert r.status_code == 502 and "www-authenticate" not in r.headers, (r.status_code, r.headers)
    body = r.json()
    assert body["id"] == 9 and body["error"]["code"] == -32603, body
    assert "refused the gateway's credential" in body["error"]["message"], body
    assert not any(env.gw.keys["carol"] in json.dumps(q) for q in env.servers["tools"].requests())


def test_a_browsers_origin_does_not_reach_the_server(env: Env):
    """MCP servers refuse a foreign Origin (DNS-rebinding protection): the gateway is the
    server's client, so it does not pass one on."""
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    r = env.post("legacy", json.dumps(init), key="carol", origin="https://app.example")
    assert r.status_code == 200, r.text
    assert "origin" not in env.servers["legacy"].requests()[-1]["headers"]
