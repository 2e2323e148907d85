"""Serving a test fixture's ASGI app on 127.0.0.1 and announcing its port with one line,
`LISTENING <port>`, on stdout once uvicorn accepts connections: the tests wait on that line,
never on a sleep. Shared by testdata/mcp/server.py and testdata/a2a/agent.py; it needs only the
standard library and uvicorn, so either era's venv of the MCP SDK runs it."""

from __future__ import annotations

import asyncio
import socket

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
