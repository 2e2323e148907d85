"""The MCP test fixtures themselves, without any gateway: testdata/mcp/server.py and client.py
under both eras of the official `mcp` SDK — 2.x from this venv (sys.executable) and 1.x from
FERROGATE_MCP1_PYTHON (.venv-mcp1, set by scripts/pytest) — over both transports.

Each server era x transport is one server (port 0, waited for on its `LISTENING <port>` line);
each client era lists its tools, calls add(3, 4), and is refused with a wrong token. A 2.x client
meets a 2.x server at 2026-07-28 (server/discover); every other pairing falls back to the
initialize handshake at 2025-11-25.
"""

from __future__ import annotations

import secrets

import pytest

from mcp_support import ENDPOINT, Server, client_output, mcp_server, run_client

TOKEN = "mcp-fixture-" + secrets.token_hex(8)
TOOLS = ["add", "delete_everything", "echo", "slow"]


@pytest.fixture(scope="module", params=[(e, t) for e in ("2.x", "1.x") for t in ENDPOINT],
                ids=lambda p: f"server{p[0]}-{p[1]}")
def server(request, tmp_path_factory):
    era, transport = request.param
    work = tmp_path_factory.mktemp(f"mcp-{era}-{transport}")
    with mcp_server(era, transport, TOKEN, work, f"fixture-{era}-{transport}") as srv:
        yield srv


def client(era: str, srv: Server, *args: str, token: str = TOKEN):
    return run_client(era, srv.url, srv.transport, token, *args)


@pytest.mark.parametrize("client_era", ["2.x", "1.x"])
def test_list_and_call(server: Server, client_era: str):
    out = client_output(client(client_era, server, "--call", "add", "--args", '{"a": 3, "b": 4}'), server.stderr_log)
    assert out["sdk"].startswith(client_era[0] + "."), out
    assert sorted(out["tools"]) == TOOLS, out
    assert out["call"] == {"content_text": "7", "is_error": False}, out
    assert out["error"] is None, out
    modern = client_era == server.era == "2.x"
    assert out["protocol"] == ("2026-07-28" if modern else "2025-11-25"), out
    seen = server.requests()
    assert any(r["headers"].get("authorization") == f"Bearer {TOKEN}" for r in seen), seen
    assert all(r["headers"]["host"].startswith("127.0.0.1:") for r in seen), seen


@pytest.mark.parametrize("client_era", ["2.x", "1.x"])
def test_wrong_token_is_refused(server: Server, client_era: str):
    proc = client(client_era, server, "--call", "add", "--args", '{"a": 1, "b": 2}', token="wrong")
    if proc.returncode == 1:  # the SDK raised the HTTP 401 as such
        assert "401" in proc.stderr, proc.stderr
    else:  # the 2.x streamable HTTP transport turns it into a JSON-RPC error while connecting
        out = client_output(proc, server.stderr_log)
        assert out["error"] is not None and out["tools"] == [] and out["call"] is None, out
    assert any(r["headers"].get("authorization") == "Bearer wrong" for r in server.requests())
