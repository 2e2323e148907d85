"""An MCP server whose tokens come from an OAuth 2.0 authorization server (client-credentials
grant): the sidecar fetches a token, the filter sends it, and a new one is fetched before the
old one expires.

The authorization server is a small token endpoint in this test (tokens living TOKEN_LIFE_S);
the MCP server is the official SDK's (testdata/mcp/server.py --token-file), accepting exactly
the tokens the endpoint issued."""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from conftest import Gateway, _free_port, _start, own_gateway
from mcp_support import Server, client_output, mcp_server, run_client

TOKEN_LIFE_S = 4
SECRET = "client-secret-" + secrets.token_hex(8)
SECRET_ENV = "FG_MCP_OAUTH_TEST_SECRET"
WAIT_S = 60.0


@dataclass
class TokenEndpoint:
    tokens_file: Path
    issued: list[dict] = field(default_factory=list)  # {"at": monotonic, "form": {...}, "token": ...}
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handler(self):
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                length = int(self.headers.get("content-length", "0"))
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                if form.get("grant_type") != "client_credentials" or form.get("client_secret") != SECRET:
                    self._answer(401, {"error": "invalid_client"})
                    return
                token = f"oauth-tok-{secrets.token_hex(8)}"
                with endpoint.lock:
                    with open(endpoint.tokens_file, "a", encoding="utf-8") as f:
                        f.write(token + "\n")
                    endpoint.issued.append({"at": time.monotonic(), "form": form, "token": token})
                self._answer(200, {"access_token": token, "token_type": "Bearer", "expires_in": TOKEN_LIFE_S})

            def _answer(self, status: int, body: dict):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        return Handler

    def snapshot(self) -> list[dict]:
        with self.lock:
            return list(self.issued)


@dataclass
class Env:
    gw: Gateway
    server: Server
    tokens: TokenEndpoint


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    work = tmp_path_factory.mktemp("oauth")
    tokens = TokenEndpoint(work / "tokens.txt")
    tokens.tokens_file.write_text("")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), tokens.handler())
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    os.environ[SECRET_ENV] = SECRET
    token_url = f"http://127.0.0.1:{httpd.server_address[1]}/token"
    try:
        with mcp_server("2.x", "streamable-http", "", work, "secure", token_file=tokens.tokens_file) as srv:
            def config(base: dict) -> dict:
                oauth = {"token_url": token_url, "client_id": "ferrogate", "client_secret_env": SECRET_ENV,
                         "scope": "tools"}
                base["mcp_servers"] = [
                    {"name": "secure", "url": srv.url, "auth": "oauth_client_credentials", "oauth": oauth},
                    # Its secret's variable is unset: no token is ever had.
                    {"name": "locked", "url": f"http://127.0.0.1:{_free_port()}/mcp", "auth": "oauth_client_credentials",
                     "oauth": {**oauth, "client_secret_env": "FG_MCP_OAUTH_TEST_UNSET"}},
                ]
                base["keys"][0]["mcp"] = ["*"]  # alice
                return base

            yield from (Env(gw, srv, tokens) for gw in own_gateway("ferrogate-mcp-oauth-", lambda w, n: _start(w, n, config)))
    finally:
        httpd.shutdown()


def call(env: Env, server: str = "secure") -> dict:
    proc = run_client("2.x", f"{env.gw.gateway_url}/mcp/{server}", "streamable-http", env.gw.keys["alice"],
                      "--call", "add", "--args", '{"a": 20, "b": 22}')
    return client_output(proc, *(p.log for p in env.gw.procs), env.server.stderr_log)


def wait_for(what: str, probe, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout}s")
        time.sleep(0.1)


def test_the_token_is_fetched_with_client_credentials_and_sent_to_the_server(env: Env):
    issued = wait_for("a first token", env.tokens.snapshot)
    form = issued[0]["form"]
    assert form == {"grant_type": "client_credentials", "client_id": "ferrogate", "client_secret": SECRET,
                    "scope": "tools", "resource": env.server.url}, form
    out = wait_for("a call with the token", lambda: (o := call(env))["call"] and o)
    assert out["call"] == {"content_text": "42", "is_error": False}, out
    sent = {r["headers"].get("authorization") for r in env.server.requests()}
    assert sent <= {f"Bearer {t['token']}" for t in env.tokens.snapshot()}, sent
    assert not any(env.gw.keys["alice"] in json.dumps(r) for r in env.server.requests())


def test_tokens_are_kept_until_due_and_fetched_again_before_they_expire(env: Env):
    first = env.tokens.snapshot()[0]["token"]
    wait_for("a second token", lambda: len(env.tokens.snapshot()) >= 2)
    issued = env.tokens.snapshot()
    gaps = [b["at"] - a["at"] for a, b in zip(issued, issued[1:])]
    # Fetched again after four fifths of its life, never earlier: one fetch per token, not per call.
    assert all(gap >= 0.8 * TOKEN_LIFE_S - 0.2 for gap in gaps), gaps

    def a_newer_token_is_sent() -> bool:
        call(env)
        return env.server.requests()[-1]["headers"].get("authorization") != f"Bearer {first}"

    wait_for("a call carrying a newer token", a_newer_token_is_sent)


def test_a_server_without_a_token_is_a_clear_error(env: Env):
    out = call(env, "locked")
    assert out["call"] is None and out["error"] is not None, out
    r = httpx.post(f"{env.gw.gateway_url}/mcp/locked", content=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
                   headers={"authorization": f"Bearer {env.gw.keys['alice']}", "content-type": "application/json",
                            "accept": "application/json, text/event-stream"}, timeout=30)
    assert r.status_code == 503 and "no OAuth token" in r.json()["error"]["message"], r.text
