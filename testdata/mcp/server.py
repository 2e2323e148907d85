"""A small MCP server built on the official `mcp` Python SDK, for the gateway's MCP tests.

Runs under either SDK era (the SDK is detected at import):

  * mcp 2.x (tests/python/requirements.txt, .venv): `mcp.server.mcpserver.MCPServer`; the app
    factories take the transport options: `streamable_http_app(streamable_http_path=...)`,
    `sse_app(sse_path=..., message_path=...)`. Its server also answers the 2026-07-28
    `server/discover` probe of 2.x clients.
  * mcp 1.x (tests/python/requirements-mcp1.txt, .venv-mcp1): `mcp.server.fastmcp.FastMCP`;
    the same options are constructor settings and `streamable_http_app()` / `sse_app()` take
    none. Initialize handshake only.

    server.py [--port N] [--transport streamable-http|sse] --token T|--token-file PATH
              [--headers-log PATH] [--calls-log PATH] [--name NAME]

--token-file accepts any bearer token listed in the file (one per line, read on every request):
what an OAuth resource server accepts from its authorization server.

Endpoints (the SDK defaults): streamable HTTP at `/mcp`; SSE as `GET /sse` (the event stream,
whose first event names the message URL) plus `POST /messages/?session_id=...`.

`--port 0` picks a free port. Once the server accepts connections it prints exactly one line,
`LISTENING <port>`, to stdout (the SDK and uvicorn log to stderr).

Every HTTP request must carry `Authorization: Bearer <T>`, else it gets 401 (checked by an ASGI
middleware around the SDK's Starlette app, before the SDK sees the request). `--headers-log PATH`
appends one JSON line per HTTP request, rejected ones included, before that check:
{"method": ..., "path": ..., "query": ..., "headers": {lower-cased name: value}} (repeated
headers joined with ", ").

Host header: the server binds 127.0.0.1, for which both SDK eras switch on their DNS-rebinding
protection by default: a request whose Host is not `127.0.0.1:<any port>`, `localhost:<any
port>` or `[::1]:<any port>` gets 421 Misdirected Request, and one with an Origin header other
than http:// on those hosts gets 403. A gateway forwarding `Host: 127.0.0.1:<port>` (or passing
the client's Host through when that is one of the above) is accepted; the protection is kept on
on purpose, so a test notices a gateway forwarding its own public Host.

Tools: echo(text) -> text, add(a, b) -> a + b, delete_everything() (harmless; a tool the tests
do not grant), slow(seconds) -> sleeps that long (for timeouts and cancellation). Prompt:
greet(who) -> "Hello, <who>, from <name>!". Resource: memo://<name>/readme -> "readme of <name>".
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import version
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import listen  # noqa: E402  (testdata/listen.py: serve and announce the port)

SDK_VERSION = version("mcp")
SDK_MAJOR = int(SDK_VERSION.split(".")[0])

if SDK_MAJOR >= 2:
    from mcp.server.mcpserver import MCPServer as _Server
else:
    from mcp.server.fastmcp import FastMCP as _Server


def build_server(name: str, calls_log: str | None = None):
    mcp = _Server(name)

    def called(tool: str) -> None:
        """Appends the tool's name to --calls-log: the proof of which calls reached the server."""
        if calls_log:
            with open(calls_log, "a", encoding="utf-8") as f:
                f.write(tool + "\n")

    @mcp.tool()
    def echo(text: str) -> str:
        """Returns the text unchanged."""
        called("echo")
        return text

    @mcp.tool()
    def add(a: int, b: int) -> int:
        """Adds two integers."""
        called("add")
        return a + b

    @mcp.tool()
    def delete_everything() -> str:
        """Pretends to delete everything (a tool a policy should not grant)."""
        called("delete_everything")
        return "deleted everything (not really)"

    @mcp.tool()
    async def slow(seconds: float) -> str:
        """Sleeps for the given number of seconds, then answers."""
        called("slow")
        await anyio.sleep(seconds)
        return f"slept {seconds}"

    @mcp.prompt()
    def greet(who: str) -> str:
        """A greeting, signed by the server."""
        return f"Hello, {who}, from {name}!"

    @mcp.resource(f"memo://{name}/readme")
    def readme() -> str:
        """The server's readme."""
        return f"readme of {name}"

    return mcp


def starlette_app(mcp, transport: str):
    """The SDK's Starlette app for the transport, at the SDK's default paths."""
    if transport == "sse":
        return mcp.sse_app()  # GET /sse + POST /messages/
    return mcp.streamable_http_app()  # /mcp


def accepting(token: str | None, token_file: str | None):
    """What the gate accepts: `Bearer <token>`, or any bearer token listed in `token_file`
    (read on every request)."""
    def accepts(_scope, authorization: str | None) -> bool:
        if token_file:
            with open(token_file, encoding="utf-8") as f:
                tokens = {line.strip() for line in f if line.strip()}
            return authorization is not None and authorization.removeprefix("Bearer ") in tokens
        return authorization == f"Bearer {token}"
    return accepts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    ap.add_argument("--transport", choices=("streamable-http", "sse"), default="streamable-http")
    who = ap.add_mutually_exclusive_group(required=True)
    who.add_argument("--token", help="the bearer token every request must carry")
    who.add_argument("--token-file", help="accept any bearer token listed in this file")
    ap.add_argument("--headers-log", help="append one JSON line per HTTP request to this file")
    ap.add_argument("--name", default="ferrogate-mcp-fixture", help="the server's MCP name")
    ap.add_argument("--calls-log", help="append each called tool's name to this file")
    args = ap.parse_args()

    app = listen.BearerGate(starlette_app(build_server(args.name, args.calls_log), args.transport),
                            accepting(args.token, args.token_file), args.headers_log, "mcp-fixture")
    sock = listen.bind(args.port)
    print(f"mcp {SDK_VERSION} {args.transport} server {args.name!r} on 127.0.0.1:{sock.getsockname()[1]}",
          file=sys.stderr, flush=True)
    listen.serve(app, sock)


if __name__ == "__main__":
    main()
