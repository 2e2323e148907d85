"""An A2A client built on the official `a2a-sdk` (1.x), for the gateway's A2A tests.

    client.py --url BASE --token T --text TEXT [--stream] [--protocol-version 1.0|0.3]

Does what the SDK's `create_client(BASE, client_config=ClientConfig(streaming=...,
httpx_client=...))` does, spelled out so the card can be looked at: `ClientFactory(config)`,
`A2ACardResolver(httpx_client, BASE).get_agent_card()` (GET BASE/.well-known/agent-card.json),
`factory.create(card)`; then sends one user message with `send_message()`. Every HTTP request,
the card fetch included, goes through one `httpx.AsyncClient` carrying `Authorization: Bearer T`,
to which the factory adds `A2A-Version: 1.0` (the 0.3 transport sends `A2A-Version: 0.3` on its
calls instead).

The SDK picks the card's JSON-RPC interface of protocol version 1.0 and posts to its `url`;
`--protocol-version V` keeps only the card's interfaces of version V: with 0.3 the SDK's 0.3
compatibility transport is used (`message/send`, `message/stream`). Without `--stream` the
client is configured `streaming=False` (one `SendMessage` POST answered with JSON); with it,
`SendStreamingMessage` answered with an SSE stream (the agent's card says streaming: true).

Prints ONE JSON line to stdout:

    {"sdk": "<a2a-sdk version>", "card_url": "<the chosen interface's url: where the message was POSTed>",
     "texts": [every text part received, in order], "final_state": "TASK_STATE_..." | null,
     "error": {"code": int, "message": str} | null}

"texts" holds the text parts of each event the SDK yields: a Message's parts, a Task's artifacts
(not its history, which echoes the user's message), a status update's message, an artifact
update's artifact. "final_state" is the last task state seen (the 1.0 enum name), null when the
answer was a bare Message. A JSON-RPC error answer (the SDK raises the A2A error class mapped
from its code, or `A2AClientError("JSON-RPC Error <code>: <message>")` for other codes) is
reported in "error" with exit status 0 (the 0.3 transport keeps the code of mapped errors only,
so an unmapped code there counts as "anything else"); anything else (connection refused, an HTTP error status
such as a 401, a card that cannot be resolved) exits 1 with the traceback on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import traceback
import uuid
from importlib.metadata import version
from typing import Any

import httpx

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import get_text_parts, new_text_part
from a2a.types import Message, Role, SendMessageRequest, StreamResponse, TaskState
from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP, A2AError

SDK_VERSION = version("a2a-sdk")
HTTP_TIMEOUT = httpx.Timeout(30.0, read=300.0)


def _texts(event: StreamResponse) -> tuple[list[str], int | None]:
    """The text parts of one event and the task state it carries, if any."""
    if event.HasField("message"):
        return get_text_parts(event.message.parts), None
    if event.HasField("task"):
        task = event.task
        texts = [t for a in task.artifacts for t in get_text_parts(a.parts)]
        if task.status.HasField("message"):
            texts += get_text_parts(task.status.message.parts)
        return texts, task.status.state
    if event.HasField("status_update"):
        status = event.status_update.status
        return (get_text_parts(status.message.parts) if status.HasField("message") else []), status.state
    if event.HasField("artifact_update"):
        return get_text_parts(event.artifact_update.artifact.parts), None
    return [], None


def _rpc_error(e: BaseException) -> dict[str, Any] | None:
    """The JSON-RPC error `e` reports, or None when it is not one (a transport error)."""
    if not isinstance(e, A2AError):
        return None
    code = JSON_RPC_ERROR_CODE_MAP.get(type(e))
    if code is not None:
        return {"code": code, "message": e.message}
    m = re.match(r"JSON-RPC Error (-?\d+): (.*)", e.message, re.S)
    return {"code": int(m.group(1)), "message": m.group(2)} if m else None


async def run(args, out: dict[str, Any]) -> None:
    posted: list[str] = []

    async def record(request: httpx.Request) -> None:
        if request.method == "POST":
            posted.append(str(request.url))

    headers = {"Authorization": f"Bearer {args.token}"}
    async with httpx.AsyncClient(headers=headers, timeout=HTTP_TIMEOUT, event_hooks={"request": [record]}) as http:
        # What create_client(BASE, client_config=config) does, with a look at the card in between.
        # The factory comes first: it adds `A2A-Version: 1.0` to the httpx client, card fetch included.
        factory = ClientFactory(ClientConfig(streaming=args.stream, httpx_client=http))
        card = await A2ACardResolver(http, args.url).get_agent_card()
        if args.protocol_version:
            chosen = [i for i in card.supported_interfaces if i.protocol_version == args.protocol_version]
            del card.supported_interfaces[:]
            card.supported_interfaces.extend(chosen)
        client = factory.create(card)
        request = SendMessageRequest(message=Message(
            role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[new_text_part(args.text)]))
        try:
            async for event in client.send_message(request):
                texts, state = _texts(event)
                out["texts"] += texts
                if state is not None:
                    out["final_state"] = TaskState.Name(state)
        except A2AError as e:
            if (err := _rpc_error(e)) is None:
                raise
            out["error"] = err
        finally:
            out["card_url"] = posted[0] if posted else None
            await client.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True, help="the agent's base URL (the card is at BASE/.well-known/...)")
    ap.add_argument("--token", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--stream", action="store_true", help="SendStreamingMessage (SSE) instead of SendMessage")
    ap.add_argument("--protocol-version", choices=("1.0", "0.3"),
                    help="use the card's interface of this version (default: the SDK's choice, 1.0)")
    args = ap.parse_args()

    out: dict[str, Any] = {"sdk": SDK_VERSION, "card_url": None, "texts": [], "final_state": None, "error": None}
    try:
        asyncio.run(run(args, out))
    except Exception:
        traceback.print_exc()
        return 1
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
