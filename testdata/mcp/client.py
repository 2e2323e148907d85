"""An MCP client built on the official `mcp` Python SDK, for the gateway's MCP tests.

    client.py --url URL --token T [--transport streamable-http|sse] [--mode auto|legacy]
              [--call TOOL [--args JSON]]

Connects with `Authorization: Bearer T`, lists the tools, optionally calls one, and prints ONE
JSON line to stdout:

    {"sdk": "<mcp version>", "protocol": "<negotiated protocol version>" | null,
     "tools": [names...], "call": {"content_text": str, "is_error": bool} | null,
     "error": {"code": int, "message": str} | null}

A JSON-RPC error (mcp 1.x `McpError`, 2.x `MCPError`) is reported in "error" and the exit
status is 0; when it happens while connecting, "protocol" is null and "tools" empty. Anything
else (connection refused, an HTTP error the SDK raises as such) exits 1 with the traceback on
stderr. Note that the 2.x streamable HTTP transport turns an HTTP error status on a request
into a JSON-RPC error (a non-JSON-RPC 4xx/5xx body becomes -32603, a 404 before the session
exists -32601), so e.g. a 401 is exit 0 with "error" under 2.x but exit 1 under 1.x.

Runs under either SDK era (detected at import):

  * 2.x: `mcp.Client(transport, mode=...)`; the transport is
    `streamable_http_client(url, http_client=httpx2.AsyncClient(headers=...))` or
    `sse_client(url, headers=...)`. `--mode auto` (the default) probes `server/discover` and
    falls back to the `initialize` handshake; `--mode legacy` does the handshake only.
  * 1.x: `ClientSession` over `streamable_http_client(url, http_client=httpx.AsyncClient(...))`
    or `sse_client(url, headers=...)`, `initialize` handshake (`--mode` is ignored: 1.x knows
    no other).

The URL is the server's endpoint: `.../mcp` for streamable HTTP, `.../sse` for SSE.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import traceback
from importlib.metadata import version
from typing import Any

SDK_VERSION = version("mcp")
SDK_MAJOR = int(SDK_VERSION.split(".")[0])

if SDK_MAJOR >= 2:
    import httpx2 as _httpx
    from mcp import Client, MCPError as _RpcError
else:
    import httpx as _httpx
    from mcp import ClientSession, McpError as _RpcError
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

# The SDK's own defaults (create_mcp_http_client): 30 s, but 300 s to read a held-open stream.
HTTP_TIMEOUT = _httpx.Timeout(30.0, read=300.0)


def _error(e: Exception) -> dict[str, Any]:
    return {"code": e.error.code, "message": e.error.message}


def _call_result(result) -> dict[str, Any]:
    text = "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")
    is_error = result.is_error if SDK_MAJOR >= 2 else result.isError
    return {"content_text": text, "is_error": bool(is_error)}


async def _exercise(list_tools, call_tool, args, out: dict[str, Any]) -> None:
    """Lists the tools and makes the call; a JSON-RPC error ends up in out["error"]."""
    try:
        out["tools"] = [t.name for t in (await list_tools()).tools]
        if args.call:
            out["call"] = _call_result(await call_tool(args.call, json.loads(args.args)))
    except _RpcError as e:
        out["error"] = _error(e)


async def run_v2(args, headers: dict[str, str], out: dict[str, Any]) -> None:
    async with _httpx.AsyncClient(headers=headers, timeout=HTTP_TIMEOUT) as http:
        if args.transport == "sse":
            transport = sse_client(args.url, headers=headers)
        else:
            transport = streamable_http_client(args.url, http_client=http)
        async with Client(transport, mode=args.mode) as client:
            out["protocol"] = client.protocol_version
            await _exercise(client.list_tools, client.call_tool, args, out)


async def run_v1(args, headers: dict[str, str], out: dict[str, Any]) -> None:
    async with _httpx.AsyncClient(headers=headers, timeout=HTTP_TIMEOUT) as http:
        if args.transport == "sse":
            transport = sse_client(args.url, headers=headers)
        else:
            transport = streamable_http_client(args.url, http_client=http)
        async with transport as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                out["protocol"] = (await session.initialize()).protocolVersion
                await _exercise(session.list_tools, session.call_tool, args, out)


def _find_rpc_error(e: BaseException) -> Exception | None:
    """The JSON-RPC error in `e`, also when anyio wrapped it in (nested) exception groups."""
    if isinstance(e, _RpcError):
        return e
    for inner in getattr(e, "exceptions", ()):
        if (found := _find_rpc_error(inner)) is not None:
            return found
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--transport", choices=("streamable-http", "sse"), default="streamable-http")
    ap.add_argument("--mode", choices=("auto", "legacy"), default="auto",
                    help="2.x: auto = server/discover, then initialize; legacy = initialize only")
    ap.add_argument("--call", metavar="TOOL")
    ap.add_argument("--args", default="{}", metavar="JSON", help="the call's arguments (an object)")
    args = ap.parse_args()

    out: dict[str, Any] = {"sdk": SDK_VERSION, "protocol": None, "tools": [], "call": None, "error": None}
    headers = {"Authorization": f"Bearer {args.token}"}
    try:
        asyncio.run((run_v2 if SDK_MAJOR >= 2 else run_v1)(args, headers, out))
    except Exception as e:  # ExceptionGroup included
        rpc = _find_rpc_error(e)
        if rpc is None:
            traceback.print_exc()
            return 1
        out["error"] = _error(rpc)  # raised while connecting (e.g. the handshake was refused)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
