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
import socket
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
            mcp_server("2.x", TRANSPORTS["old"], TOKENS["old"], mk("old"), "old") as c, \
            socket.create_server(("127.0.0.1", 0), backlog=64) as hung:
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
                # Takes connections and never answers: its timeout ends every call.
                {"name": "hung", "url": f"http://127.0.0.1:{hung.getsockname()[1]}/mcp", "auth": "none",
                 "timeout_ms": 1500},
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
        # Without an id a call would pass as a notification, unchecked: only notifications/* may.
        (json.dumps({k: v for k, v in call.items() if k != "id"}), 400, -32600),
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


def test_a_server_past_its_timeout_is_a_json_rpc_504(env: Env):
    """`timeout_ms` ("hung": 1.5 s, a server that takes connections and never answers) ends the
    call with the proxy's 504 as a JSON-RPC error, long before the proxy's own bounds; the SDK
    raises it as a protocol error."""
    call = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "slow", "arguments": {}}}
    started = time.monotonic()
    r = env.post("hung", json.dumps(call), key="carol")
    took = time.monotonic() - started
    assert r.status_code == 504, r.text
    body = r.json()
    assert body["jsonrpc"] == "2.0" and "upstream request timeout" in body["error"]["message"], body
    assert body["error"]["data"]["http_status"] == 504, body
    assert 1.5 <= took < 25, took
    out = client(env, "2.x", "hung", "carol")
    assert out["error"] is not None and "upstream request timeout" in out["error"]["message"], out


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


# --- The federated /mcp: every granted server as one, through the sidecar -------------------

FEDERATED_ALICE = ["legacy__add", "old__add", "old__echo", "tools__add", "tools__echo"]


def federated(env: Env, era: str, key: str, *args: str, query: str = "") -> dict:
    proc = run_client(era, f"{env.gw.gateway_url}/mcp{query}", "streamable-http", env.gw.keys[key], *args)
    return client_output(proc, *env.logs())


def rpc(env: Env, method: str, params: dict | None = None, key: str = "alice", query: str = "", **headers) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, **({"params": params} if params is not None else {})}
    h = dict(RPC_HEADERS, authorization=f"Bearer {env.gw.keys.get(key, key)}", **headers)
    return httpx.post(f"{env.gw.gateway_url}/mcp{query}", json=body, headers=h, timeout=60)


@pytest.mark.parametrize("client_era,call,server", [("2.x", "old__add", "old"), ("1.x", "legacy__add", "legacy")])
def test_federated_mcp_lists_and_calls_the_tools_of_every_granted_server(env: Env, client_era, call, server):
    out = federated(env, client_era, "alice", "--call", call, "--args", '{"a": 3, "b": 4}')
    assert out["error"] is None, out
    assert sorted(out["tools"]) == FEDERATED_ALICE, "each granted tool, named <server>__<tool>, and no other"
    assert out["call"] == {"content_text": "7", "is_error": False}, out
    seen = env.servers[server].requests()
    assert all(r["headers"].get("authorization") == f"Bearer {TOKENS[server]}" for r in seen), seen
    assert not any(env.gw.keys["alice"] in json.dumps(r) for r in seen), "the virtual key reached the server"


@pytest.mark.parametrize("name", ["tools__delete_everything", "nope__echo", "delete_everything"])
def test_federated_mcp_refuses_ungranted_and_unknown_tools(env: Env, name: str):
    calls = env.servers["tools"].calls
    before = calls().count("delete_everything")
    out = federated(env, "2.x", "alice", "--call", name, "--args", "{}")
    assert out["call"] is None and out["error"]["code"] == -32602 and name in out["error"]["message"], out
    assert calls().count("delete_everything") == before, "the refused call reached the server"


def test_federated_mcp_lists_the_others_when_a_server_is_down(env: Env):
    out = federated(env, "2.x", "carol")
    assert out["error"] is None, out
    listed = {name.split("__")[0] for name in out["tools"]}
    assert listed == {"tools", "legacy", "old"}, out["tools"]
    r = rpc(env, "tools/list", key="carol")
    assert r.status_code == 200, r.text
    unavailable = {u["server"]: u["error"] for u in r.json()["result"]["_meta"]["io.ferrogate/unavailable"]}
    assert set(unavailable) == {"down", "miscredentialed", "hung"}, unavailable
    assert "refused the gateway's credential" in unavailable["miscredentialed"], unavailable
    down = federated(env, "2.x", "carol", "--call", "down__echo", "--args", '{"text": "x"}')
    assert down["error"]["code"] == -32603 and "`down`" in down["error"]["message"], down


def test_federated_mcp_tool_calls_leave_usage_records(env: Env):
    marker = "fed-" + secrets.token_hex(4)
    req_id = "fed-record-" + secrets.token_hex(4)
    r = rpc(env, "tools/call", {"name": "tools__echo", "arguments": {"text": marker}}, **{"x-request-id": req_id})
    assert r.json()["result"]["content"][0]["text"] == marker, r.text
    deadline = time.monotonic() + 30
    while True:  # the record of the call through /mcp/tools, under the client request's id
        records = env.gw.usage(key="alice", model="echo", limit=500)["records"]
        mine = [r for r in records if r["request_id"] == req_id]
        if mine or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(mine) == 1, records
    assert (mine[0]["provider"], mine[0]["upstream_model"], mine[0]["status"]) == ("mcp:tools", "echo", 200)


def test_federated_mcp_sessions_belong_to_their_key(env: Env):
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    r = rpc(env, "initialize", init)
    assert r.status_code == 200 and r.json()["result"]["protocolVersion"] == "2025-06-18", r.text
    sealed = r.headers["mcp-session-id"]
    assert rpc(env, "tools/list", **{"mcp-session-id": sealed}).status_code == 200
    stolen = rpc(env, "tools/list", key="carol", **{"mcp-session-id": sealed})
    assert stolen.status_code == 404 and stolen.json()["error"]["code"] == -32600, stolen.text
    h = dict(RPC_HEADERS, authorization=f"Bearer {env.gw.keys['alice']}", **{"mcp-session-id": sealed})
    assert httpx.delete(f"{env.gw.gateway_url}/mcp", headers=h, timeout=30).status_code == 200


def test_federated_mcp_bad_input_and_keys_without_servers(env: Env):
    r = rpc(env, "tools/list", key="bob")
    assert r.status_code == 403 and r.json()["error"]["data"]["http_status"] == 403, r.text
    h = dict(RPC_HEADERS, authorization=f"Bearer {env.gw.keys['alice']}")
    for body, code in [(b'{"jsonrpc": "2.0", "id": 1, "method": ', -32700),
                       (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', -32600),
                       (b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}', -32600)]:
        r = httpx.post(f"{env.gw.gateway_url}/mcp", content=body, headers=h, timeout=30)
        assert (r.status_code, r.json()["error"]["code"]) == (400, code), (body, r.text)
    assert rpc(env, "completion/complete").json()["error"]["code"] == -32601
    # The filter's headers cannot be forged by a client to reach ungranted servers.
    forged = rpc(env, "tools/call", {"name": "down__echo", "arguments": {}}, key="alice",
                 **{"x-ferrogate-mcp-servers": "down,tools"})
    assert forged.json()["error"]["code"] == -32602, forged.text


def test_search_tools_finds_the_few_granted_tools_for_a_task(env: Env):
    listed = federated(env, "2.x", "alice", query="?tools=search")
    assert listed["error"] is None and sorted(listed["tools"]) == ["call_tool", "search_tools"], listed
    found = rpc(env, "tools/call", {"name": "search_tools", "arguments": {"query": "echo text back", "limit": 3}},
                query="?tools=search")
    tools = [t["name"] for t in found.json()["result"]["structuredContent"]["tools"]]
    assert tools and set(tools) <= {"tools__echo", "old__echo"} and "tools__delete_everything" not in tools, found.text
    assert all("inputSchema" in t for t in found.json()["result"]["structuredContent"]["tools"])
    marker = "searched-" + secrets.token_hex(4)
    out = federated(env, "1.x", "alice", "--call", "call_tool", "--args",
                    json.dumps({"name": tools[0], "arguments": {"text": marker}}), query="?tools=search")
    assert out["call"] == {"content_text": marker, "is_error": False}, out


def test_federated_mcp_prompts_and_resources(env: Env):
    """Prompts are named <server>__<prompt> like tools; resources keep their servers' URIs and
    a read goes to the server listing the URI."""
    prompts = rpc(env, "prompts/list").json()["result"]["prompts"]
    assert {p["name"] for p in prompts} == {"tools__greet", "legacy__greet", "old__greet"}, prompts
    got = rpc(env, "prompts/get", {"name": "legacy__greet", "arguments": {"who": "Ann"}}).json()
    assert got["result"]["messages"][0]["content"]["text"] == "Hello, Ann, from legacy!", got
    assert rpc(env, "prompts/get", {"name": "nope__greet"}).json()["error"]["code"] == -32602
    resources = rpc(env, "resources/list").json()["result"]["resources"]
    assert {r["uri"] for r in resources} == {f"memo://{s}/readme" for s in ("tools", "legacy", "old")}, resources
    read = rpc(env, "resources/read", {"uri": "memo://old/readme"}).json()
    assert read["result"]["contents"][0]["text"] == "readme of old", read
    assert rpc(env, "resources/read", {"uri": "memo://x/readme"}).json()["error"]["code"] == -32002
