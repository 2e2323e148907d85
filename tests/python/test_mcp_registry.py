"""The MCP and A2A registry in the PostgreSQL store, managed through the admin API: a server
made with `POST /api/v1/mcp_servers` and a grant given with `PUT /api/v1/keys/{name}` serve
the official `mcp` SDK's client through the gateway, with the server's credential (sealed at
rest, never listed) and only the granted tools. A server a grant names cannot be deleted, and
bad bodies are refused with what is wrong.

Real parts: the machine's PostgreSQL (a schema of this module's own, dropped after), the
`mcp` SDK's server and client (testdata/mcp)."""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import time
from dataclasses import dataclass

import httpx
import pytest

from conftest import Gateway, _start, own_gateway, psql, schema_url
from mcp_support import Server, client_output, mcp_server, run_client

SCHEMA = f"fg_py_registry_{secrets.token_hex(6)}"
TOKEN = f"srv-registry-{secrets.token_hex(8)}"
WAIT_S = 60.0


@dataclass
class Env:
    gw: Gateway
    server: Server

    def admin(self, method: str, path: str, body: dict | None = None) -> httpx.Response:
        return httpx.request(method, f"{self.gw.admin_url}/api/v1/{path}", json=body, timeout=30,
                             headers={"authorization": f"Bearer {self.gw.admin_token}"})

    def mcp_status(self, key: str) -> int:
        ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        headers = {"authorization": f"Bearer {self.gw.keys[key]}", "content-type": "application/json",
                   "accept": "application/json, text/event-stream"}
        return httpx.post(f"{self.gw.gateway_url}/mcp/tools", content=ping, headers=headers, timeout=30).status_code


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    psql(f"CREATE SCHEMA {SCHEMA}")
    saved = {k: os.environ.get(k) for k in ("FG_REGISTRY_PG", "FERROGATE_MASTER_KEY")}
    os.environ["FG_REGISTRY_PG"] = schema_url(SCHEMA)
    os.environ["FERROGATE_MASTER_KEY"] = base64.b64encode(secrets.token_bytes(32)).decode()

    def config(base: dict) -> dict:
        base["store"] = {"kind": "postgres", "url_env": "FG_REGISTRY_PG"}
        return base

    try:
        with mcp_server("2.x", "streamable-http", TOKEN, tmp_path_factory.mktemp("tools"), "tools") as server:
            yield from (Env(gw, server) for gw in own_gateway("ferrogate-registry-", lambda w, n: _start(w, n, config)))
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        psql(f"DROP SCHEMA {SCHEMA} CASCADE")


def until(what: str, probe) -> None:
    deadline = time.monotonic() + WAIT_S
    while not probe():
        assert time.monotonic() < deadline, f"waited {WAIT_S} s for {what}"
        time.sleep(0.05)


def grant(env: Env, key: str, mcp: list[str]) -> None:
    row = next(k for k in env.admin("GET", "keys").json() if k["name"] == key)
    r = env.admin("PUT", f"keys/{key}", {**row, "mcp": mcp})
    assert r.status_code == 200, r.text


def test_a_server_and_a_grant_made_through_the_admin_api_serve_the_sdk(env: Env):
    assert env.mcp_status("alice") == 404, "no server yet"
    made = env.admin("POST", "mcp_servers", {"name": "tools", "url": env.server.url, "api_key": TOKEN})
    assert made.status_code == 200 and made.json()["version"] > 0, made.text
    listed = env.admin("GET", "mcp_servers")
    assert listed.json() == [{"name": "tools", "url": env.server.url, "api_key_set": True}], listed.text
    sealed, spec = psql(f"SELECT api_key_sealed, spec::text FROM {SCHEMA}.fg_mcp_servers").split("|", 1)
    assert sealed.startswith("fgs1:") and TOKEN not in sealed and TOKEN not in spec, (sealed, spec)

    until("the server in the gateway's snapshot (alice not granted: 403)", lambda: env.mcp_status("alice") == 403)
    grant(env, "alice", ["tools/echo"])
    until("alice's grant in the gateway's snapshot", lambda: env.mcp_status("alice") not in (403, 404))
    out = client_output(run_client("2.x", f"{env.gw.gateway_url}/mcp/tools", "streamable-http", env.gw.keys["alice"],
                                   "--call", "echo", "--args", '{"text": "from the store"}'),
                        *(p.log for p in env.gw.procs), env.server.stderr_log)
    assert out["tools"] == ["echo"] and out["call"]["content_text"] == "from the store", out
    seen = env.server.requests()
    assert seen and all(r["headers"].get("authorization") == f"Bearer {TOKEN}" for r in seen), seen


def test_a_server_a_grant_names_cannot_be_deleted(env: Env):
    if not any(s["name"] == "tools" for s in env.admin("GET", "mcp_servers").json()):
        pytest.skip("needs the server of the test before")
    refused = env.admin("DELETE", "mcp_servers/tools")
    assert refused.status_code == 409 and "keys/alice" in refused.json()["error"], refused.text
    grant(env, "alice", [])
    gone = env.admin("DELETE", "mcp_servers/tools")
    assert gone.status_code == 200, gone.text
    assert env.admin("DELETE", "mcp_servers/tools").status_code == 404
    until("the server to leave the gateway", lambda: env.mcp_status("alice") == 404)


def test_bad_bodies_are_refused_with_what_is_wrong(env: Env):
    unknown = env.admin("POST", "mcp_servers", {"name": "x", "url": "http://127.0.0.1:1/mcp", "timeout": 5})
    assert unknown.status_code == 400 and "timeout" in unknown.json()["error"], unknown.text
    ftp = env.admin("POST", "mcp_servers", {"name": "x", "url": "ftp://127.0.0.1/mcp"})
    assert ftp.status_code == 400, ftp.text
    assert [p["path"] for p in ftp.json()["problems"]] == ["mcp_servers[0].url"], ftp.text
    a2a = env.admin("POST", "a2a_agents", {"name": "helper", "url": "http://127.0.0.1:1/", "auth": "basic"})
    assert a2a.status_code == 400 and a2a.json()["problems"][0]["path"] == "a2a_agents[0].auth", a2a.text
    ghost = env.admin("PUT", "keys/bob", {**next(k for k in env.admin("GET", "keys").json() if k["name"] == "bob"),
                                          "a2a": ["nowhere"]})
    assert ghost.status_code == 400 and ghost.json()["problems"][0]["path"].endswith(".a2a[0]"), ghost.text
