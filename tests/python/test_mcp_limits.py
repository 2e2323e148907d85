"""Request and tool-call limits on MCP servers (docs/limits.md, docs/mcp.md "Limits"), with a
server of the official `mcp` SDK (2.x) behind `ferrogate serve` and the SDK's own client.

  * alice: `tool_calls_per_minute: 2` (and a model `requests_per_minute: 1`): two calls go
    through, the third is refused with a JSON-RPC 429 while `tools/list` still works, and her
    model request is not counted by her MCP traffic;
  * server "capped" (the same MCP server under another name) has `mcp_requests_per_minute: 3`:
    carol's three requests fill it and bob's first one is refused;
  * A2A agent "echo" (testdata/a2a/agent.py) has `tool_calls_per_minute: 1`: a second message
    send is refused, a `GetTask` is not a tool call;
  * two `serve` replicas sharing Redis admit exactly the limit of a burst split over both.

A minute window slides: each test's requests go out within seconds of each other, far inside
the 30 s after a bucket boundary in which the sliding share of the previous bucket still holds
every count taken in it."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from conftest import (Gateway, Proc, StartError, _bin, _start, _wait_until, digest, new_key, own_gateway,
                      start_with_retries, _free_port)
from a2a_support import Agent, a2a_agent
from mcp_support import Server, client_output, mcp_server, run_client

TOKEN = f"srv-tools-{secrets.token_hex(8)}"
TOKEN_ENV = "FG_MCP_LIMITS_TOKEN"
AGENT_TOKEN = f"agent-{secrets.token_hex(8)}"
AGENT_TOKEN_ENV = "FG_A2A_LIMITS_TOKEN"
RPC_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
VERSION = {"mcp-protocol-version": "2025-11-25"}
WAIT_S = 60.0  # generous: the machine is shared


@dataclass
class Env:
    gw: Gateway
    server: Server
    agent: Agent

    def url(self, server: str) -> str:
        return f"{self.gw.gateway_url}/mcp/{server}"

    def post(self, server: str, message: dict, key: str, **headers) -> httpx.Response:
        h = dict(RPC_HEADERS, authorization=f"Bearer {self.gw.keys[key]}", **headers)
        return httpx.post(self.url(server), content=json.dumps(message), headers=h, timeout=30)

    def limits(self, key: str) -> list[dict]:
        r = httpx.get(f"{self.gw.admin_url}/api/v1/limits", params={"key": key},
                      headers={"authorization": f"Bearer {self.gw.admin_token}"}, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()["limits"]


def call(tool: str, id_: int = 7, **arguments) -> dict:
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


def until(what: str, probe, timeout: float = WAIT_S):
    """Polls `probe` until it returns something truthy (records travel asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got or time.monotonic() > deadline:
            assert got, f"{what}: not within {timeout}s"
            return got
        time.sleep(0.1)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    with mcp_server("2.x", "streamable-http", TOKEN, tmp_path_factory.mktemp("tools"), "tools") as srv, \
            a2a_agent(AGENT_TOKEN, tmp_path_factory.mktemp("agent"), "echo") as agent:
        os.environ[TOKEN_ENV] = TOKEN
        os.environ[AGENT_TOKEN_ENV] = AGENT_TOKEN

        def config(base: dict) -> dict:
            base["mcp_servers"] = [
                {"name": "tools", "url": srv.url, "api_key_env": TOKEN_ENV},
                # The same server under another name, with a cap on all its callers together.
                {"name": "capped", "url": srv.url, "api_key_env": TOKEN_ENV,
                 "limits": {"mcp_requests_per_minute": 3}},
            ]
            base["a2a_agents"] = [{"name": "echo", "url": agent.url, "api_key_env": AGENT_TOKEN_ENV,
                                   "limits": {"tool_calls_per_minute": 1}}]
            keys = {k["name"]: k for k in base["keys"]}
            keys["alice"].update(mcp=["tools"], limits={"tool_calls_per_minute": 2, "requests_per_minute": 1})
            keys["bob"]["mcp"] = ["capped"]
            keys["carol"].update(mcp=["capped", "tools"], a2a=["echo"])
            return base

        yield from (Env(gw, srv, agent) for gw in own_gateway("ferrogate-mcp-limits-", lambda w, n: _start(w, n, config)))


def test_a_keys_third_tool_call_in_a_minute_is_a_json_rpc_429(env: Env):
    calls = env.server.calls
    before = calls().count("echo")
    for i in range(2):
        out = client_output(run_client("2.x", env.url("tools"), "streamable-http", env.gw.keys["alice"],
                                       "--call", "echo", "--args", json.dumps({"text": f"call-{i}"})))
        assert out["error"] is None and out["call"]["content_text"] == f"call-{i}", out
    third = client_output(run_client("2.x", env.url("tools"), "streamable-http", env.gw.keys["alice"],
                                     "--call", "echo", "--args", json.dumps({"text": "call-3"})))
    assert "echo" in third["tools"], "tools/list is not a tool call: it still works"
    assert third["call"] is None and third["error"]["code"] == -32600, third
    assert third["error"]["message"] == "Rate limit reached: key alice allows 2 tool calls per minute.", third
    # The federated /mcp calls the server as alice: her counter refuses that call too.
    fed = client_output(run_client("2.x", f"{env.gw.gateway_url}/mcp", "streamable-http", env.gw.keys["alice"],
                                   "--call", "tools__echo", "--args", json.dumps({"text": "call-4"})))
    assert fed["call"] is None and "allows 2 tool calls per minute" in fed["error"]["message"], fed
    assert calls().count("echo") == before + 2, "the refused call reached the server"

    # On the wire: 429, Retry-After, a JSON-RPC error answering the call's id.
    r = env.post("tools", call("echo", 41, text="x"), "alice")
    assert r.status_code == 429, r.text
    assert 1 <= int(r.headers["retry-after"]) <= 120, r.headers
    body = r.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == 41, body
    assert body["error"]["data"] == {"http_status": 429, "type": "rate_limit_error"}, body

    # The refused call leaves a record with its status.
    refused = until("the refused call's record", lambda: [
        rec for rec in env.gw.usage(key="alice", model="echo", limit=200)["records"]
        if rec["provider"] == "mcp:tools" and rec["status"] == 429])
    assert refused[0]["upstream_model"] == "echo", refused[0]

    # Model limits count no MCP request: alice's one model request a minute is still free.
    chat = env.gw.client("alice").chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}])
    assert chat.choices[0].message.content
    # The admin view shows her tool calls (the two admitted) apart from her model requests.
    def seen():
        got = {(c["metric"], c["window"]): c["used"] for c in env.limits("alice")}
        return got if got.get(("tool_calls", "minute")) == 2 and got.get(("requests", "minute")) == 1 else None
    until("alice's consumption in GET /api/v1/limits", seen)


def test_a_servers_cap_counts_every_caller_together(env: Env):
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    for _ in range(3):
        r = env.post("capped", ping, "carol")
        assert r.status_code != 429, r.text  # the server answers what it answers; the gateway let it by
    seen = len(env.server.requests())
    r = env.post("capped", ping, "bob")
    assert r.status_code == 429 and "retry-after" in r.headers, (r.status_code, r.headers, r.text)
    body = r.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None, body  # refused at the headers
    assert body["error"]["message"] == "Rate limit reached: MCP server capped allows 3 MCP/A2A requests per minute.", body
    # A GET stream counts as a request too; carol's other server is not capped.
    get = httpx.get(env.url("capped"), headers={"accept": "text/event-stream",
                                                "authorization": f"Bearer {env.gw.keys['carol']}"}, timeout=30)
    assert get.status_code == 429, get.text
    assert len(env.server.requests()) == seen, "a refused request reached the server"
    assert env.post("tools", ping, "carol").status_code != 429


def test_an_agents_cap_counts_message_sends(env: Env):
    headers = {"content-type": "application/json", "a2a-version": "1.0",
               "authorization": f"Bearer {env.gw.keys['carol']}"}
    rpc = lambda body: httpx.post(f"{env.gw.gateway_url}/a2a/echo", content=json.dumps(body), headers=headers,
                                  timeout=30)
    send = lambda i: {"jsonrpc": "2.0", "id": i, "method": "SendMessage",
                      "params": {"message": {"messageId": f"m{i}", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}}
    first = rpc(send(1))
    assert first.status_code == 200 and "result" in first.json(), first.text
    second = rpc(send(2))
    assert second.status_code == 429 and "retry-after" in second.headers, second.text
    body = second.json()
    assert body["id"] == 2 and body["error"]["message"] == \
        "Rate limit reached: A2A agent echo allows 1 tool calls per minute.", body
    # Another method is a request, not a tool call.
    task = rpc({"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": "t"}})
    assert task.status_code != 429, task.text


# --------------------------------------------------------------------------- two replicas, Redis

REDIS_URL = os.environ.get("FERROGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379")
LIMIT = 4
BURST = 12


def redis_reachable() -> bool:
    host, _, port = REDIS_URL.removeprefix("redis://").split("/")[0].rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port or 6379)), timeout=2):
            return True
    except OSError:
        return False


def start_replica(workdir: Path, cfg: Path, name: str, attempt: int, key: str) -> tuple[Proc, str, str]:
    gw_port, admin_port, side_port = (_free_port() for _ in range(3))
    env = dict(os.environ, NO_COLOR="1", FERROGATE_REDIS_URL=REDIS_URL)
    env.setdefault("FERROGATE_LOG", "info")
    env.pop("FERROGATE_INTERNAL_TOKEN", None)
    env.pop("FERROGATE_ADMIN_TOKEN", None)
    argv = [str(_bin()), "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{gw_port}",
            "--admin-listen", f"127.0.0.1:{admin_port}", "--sidecar-listen", f"127.0.0.1:{side_port}",
            "--workers", "2"]
    if os.environ.get("FERROGATE_FILTER_WASM"):
        argv += ["--filter", os.environ["FERROGATE_FILTER_WASM"]]
    proc = Proc(name, argv, workdir / f"{name}.{attempt}.log", env)
    base, admin = f"http://127.0.0.1:{gw_port}", f"http://127.0.0.1:{admin_port}"
    try:
        auth = {"authorization": f"Bearer {key}"}
        _wait_until(f"{name} to serve", [proc], lambda: httpx.get(f"{base}/v1/models", headers=auth,
                                                                   timeout=5).status_code == 200, 90)
        # Admission takes from leases once the filter's view of Redis is synced.
        synced = lambda: "ferrogate_limits_synced 1" in httpx.get(f"{admin}/metrics", timeout=5).text
        _wait_until(f"{name}'s limits view of Redis", [proc], synced, 90)
    except BaseException:
        proc.stop()
        raise
    return proc, base, admin


@pytest.fixture
def replicas(env: Env):
    if not redis_reachable():
        pytest.skip(f"no Redis at {REDIS_URL} (set FERROGATE_TEST_REDIS_URL)")
    workdir = Path(tempfile.mkdtemp(prefix="ferrogate-mcp-leases-"))
    key, name = new_key(), f"leased-{secrets.token_hex(6)}"  # fresh counters in a shared Redis
    cfg = workdir / "ferrogate.json"
    capped = f"capped-{secrets.token_hex(4)}"
    cfg.write_text(json.dumps({
        "mcp_servers": [{"name": "tools", "url": env.server.url, "api_key_env": TOKEN_ENV},
                        {"name": capped, "url": env.server.url, "api_key_env": TOKEN_ENV,
                         "limits": {"mcp_requests_per_minute": LIMIT, "max_wait_ms": 10000}}],
        "keys": [{"name": name, "digest": digest(key), "mcp": ["tools", capped],
                  "limits": {"tool_calls_per_minute": LIMIT, "max_wait_ms": 10000}}],
        "redis": {"url_env": "FERROGATE_REDIS_URL"},
    }))
    procs: list[Proc] = []

    def start(_w: Path, attempt: int):
        procs[:] = []
        for n in ("serve-a", "serve-b"):
            try:
                procs.append(start_replica(workdir, cfg, n, attempt, key))
            except StartError:
                for p, _, _ in procs:
                    p.stop()
                raise
        return list(procs)

    started, errors = start_with_retries(start, workdir, ("serve-a", "serve-b"))
    if started is None:
        pytest.fail("could not start two replicas:\n" + errors)
    yield key, capped, [(base, admin) for _, base, admin in started]
    for p, _, _ in started:
        p.stop()
    if os.environ.get("FERROGATE_TEST_KEEP_LOGS"):
        print(f"\nreplica logs kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def open_session(base: str, key: str) -> str:
    h = dict(RPC_HEADERS, authorization=f"Bearer {key}")
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    r = httpx.post(f"{base}/mcp/tools", content=json.dumps(init), headers=h, timeout=30)
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    r = httpx.post(f"{base}/mcp/tools", content=json.dumps(done), headers=dict(h, **{"mcp-session-id": sid}, **VERSION),
                   timeout=30)
    assert r.status_code == 202, r.text
    return sid


def burst(urls: list[tuple[str, str]], server: str, message, headers: dict) -> list[tuple[int, str, str | None]]:
    """BURST posts at once, alternating between the replicas: (status, body, Retry-After)."""
    results: list[tuple[int, str, str | None]] = [(0, "", None)] * BURST

    def send(i: int) -> None:
        try:
            r = httpx.post(f"{urls[i % 2][0]}/mcp/{server}", content=json.dumps(message(i)), headers=headers,
                           timeout=60)
            results[i] = (r.status_code, r.text, r.headers.get("retry-after"))
        except httpx.HTTPError as e:
            results[i] = (0, repr(e), None)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(BURST)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def test_two_replicas_sharing_redis_admit_exactly_the_limit(env: Env, replicas):
    """A key's tool calls (counted at the body) and a server's requests (counted at the
    headers: POSTs whose body comes in while they wait for a grant) over two replicas."""
    key, capped, urls = replicas
    before = env.server.calls().count("echo")
    sid = open_session(urls[0][0], key)  # a session sealed for the key holds on every replica
    marker = "burst-" + secrets.token_hex(4)
    headers = dict(RPC_HEADERS, authorization=f"Bearer {key}", **{"mcp-session-id": sid}, **VERSION)
    results = burst(urls, "tools", lambda i: call("echo", 100 + i, text=marker), headers)
    statuses = sorted(s for s, _, _ in results)
    assert statuses == [200] * LIMIT + [429] * (BURST - LIMIT), results
    assert all(retry for s, _, retry in results if s == 429), results
    assert sum(marker in text for s, text, _ in results if s == 200) == LIMIT, results
    assert env.server.calls().count("echo") == before + LIMIT, "only the admitted calls reached the server"
    # The server's cap: its answer to a ping without a session is its own; the gateway's is 429.
    headers = dict(RPC_HEADERS, authorization=f"Bearer {key}")
    results = burst(urls, capped, lambda i: {"jsonrpc": "2.0", "id": i, "method": "ping"}, headers)
    refused = [r for r in results if r[0] == 429]
    assert len(refused) == BURST - LIMIT, results
    assert all(s != 0 for s, _, _ in results), results
    assert all("MCP server capped-" in text for _, text, _ in refused), refused
