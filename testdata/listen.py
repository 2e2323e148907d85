"""Serving a test fixture's ASGI app on 127.0.0.1 and announcing its port with one line,
`LISTENING <port>`, on stdout once uvicorn accepts connections: the tests wait on that line,
never on a sleep. Also the fixtures' bearer gate, which logs every request's headers. Shared by
testdata/mcp/server.py and testdata/a2a/agent.py; it needs only the standard library and
uvicorn, so either era's venv of the MCP SDK runs it."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Callable

import uvicorn


def bind(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:`port` (0: a free port, read back with getsockname)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


async def _serve(app, sock: socket.socket) -> None:
    # lifespan on: the MCP SDK's streamable HTTP session manager runs inside it.
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))

    async def announce() -> None:
        while not server.started:
            await asyncio.sleep(0.01)
        print(f"LISTENING {sock.getsockname()[1]}", flush=True)

    announcer = asyncio.create_task(announce())
    try:
        await server.serve(sockets=[sock])
    finally:
        announcer.cancel()


def serve(app, sock: socket.socket) -> None:
    """Serves `app` on `sock` until killed, announcing the port when ready."""
    asyncio.run(_serve(app, sock))


class BearerGate:
    """ASGI middleware: appends every HTTP request's method, path, query and headers to
    `headers_log` (one JSON line each), then lets through only what `accepts(scope,
    authorization)` accepts; anything else gets 401 with a `Bearer` challenge in `realm`."""

    def __init__(self, app, accepts: Callable[[dict, str | None], bool], headers_log: str | None, realm: str):
        self.app = app
        self.accepts = accepts
        self.headers_log = headers_log
        self.challenge = f'Bearer realm="{realm}"'.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":  # lifespan (runs the MCP SDK's streamable HTTP session manager)
            await self.app(scope, receive, send)
            return
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope["headers"]:
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        if self.headers_log:
            line = {
                "method": scope["method"],
                "path": scope["path"],
                "query": scope.get("query_string", b"").decode("latin-1"),
                "headers": headers,
            }
            with open(self.headers_log, "a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")
        if not self.accepts(scope, headers.get("authorization")):
            body = b'{"error":"unauthorized"}'
            await send({
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", self.challenge),
                ],
            })
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)
