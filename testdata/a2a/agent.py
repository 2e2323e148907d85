"""A small A2A agent built on the official `a2a-sdk` (1.x), for the gateway's A2A tests.

    agent.py [--port N] --token T [--headers-log PATH] [--public-url URL] [--sign]
             [--name NAME]

Server API of the SDK: an `AgentExecutor` (below, `EchoExecutor`) behind
`DefaultRequestHandler(executor, task_store=InMemoryTaskStore(), agent_card=card)`, mounted on
Starlette with `create_agent_card_routes(card)` (GET /.well-known/agent-card.json) and
`create_jsonrpc_routes(handler, rpc_url='/', enable_v0_3_compat=True)` (POST /): one endpoint
that answers both the A2A 1.0 JSON-RPC methods (`SendMessage`, `SendStreamingMessage`, ...;
they require the request header `A2A-Version: 1.x`, a missing header meaning 0.3) and the 0.3
ones (`message/send`, `message/stream`, ...).

The card: name NAME, skill "echo", `capabilities.streaming` true, JSON-RPC only, two
`supportedInterfaces` at the same URL, protocolVersion "1.0" and "0.3"; the SDK also writes the
0.3 top-level fields (`url`, `preferredTransport`, `protocolVersion`) from the 0.3 one. The URL
is `--public-url` when given (what the agent is reached as, e.g. through a gateway), else
`http://127.0.0.1:<port>/`. It declares an HTTP bearer security scheme. `--sign` adds one
`signatures` entry: a real detached JWS (HS256, kid "a2a-fixture") made by the SDK's
`create_agent_card_signer` over the card as served, URLs included, so a proxy that rewrites
the URLs must drop it.

Skill "echo": the user's text comes back as `echo: <text>`.
  * non-streaming (`SendMessage` / `message/send`): the answer is a Message, no task;
  * streaming (`SendStreamingMessage` / `message/stream`): the SSE stream carries the Task
    (submitted), a status update (working), two chunks of one artifact "echo" (`echo:` then
    ` <text>` with append=true, lastChunk=true) and a final status update (completed).

Auth: every HTTP request must carry `Authorization: Bearer <T>`, else it gets 401 with a JSON
body and `WWW-Authenticate` (an ASGI middleware, before the SDK sees the request) — except
GET/HEAD of the agent card, which is public as A2A expects (the card is how a client learns
how to authenticate; secrets belong in the authenticated extended card, not offered here).
`--headers-log PATH` appends one JSON line per HTTP request, rejected ones included, before
that check: {"method", "path", "query", "headers": {lower-cased name: value}} (repeated
headers joined with ", ").

`--port 0` picks a free port. Once the agent accepts connections it prints exactly one line,
`LISTENING <port>`, to stdout (the SDK and uvicorn log to stderr).
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import version
from pathlib import Path

from starlette.applications import Starlette

from a2a.helpers import new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import listen  # noqa: E402  (testdata/listen.py: serve and announce the port)

SDK_VERSION = version("a2a-sdk")
STREAMING_METHODS = {"SendStreamingMessage", "message/stream"}  # 1.0 and 0.3 names
SIGNING_KEY = b"ferrogate-a2a-fixture-signing-key-0123456789"  # HS256: >= 32 bytes


class EchoExecutor(AgentExecutor):
    """Answers `echo: <text>`: a Message when called plainly, a streamed Task when streaming."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        if context.call_context.state.get("method") not in STREAMING_METHODS:
            await event_queue.enqueue_event(new_text_message(f"echo: {text}", context_id=context.context_id))
            return
        task = context.current_task or new_task_from_user_message(context.message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        artifact_id = f"echo-{task.id}"
        await updater.add_artifact([new_text_part("echo:")], artifact_id=artifact_id, name="echo")
        await updater.add_artifact([new_text_part(f" {text}")], artifact_id=artifact_id, name="echo",
                                   append=True, last_chunk=True)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def build_card(name: str, url: str, sign: bool) -> AgentCard:
    card = AgentCard(
        name=name,
        description="Echo agent of ferrogate's A2A test fixtures",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3"),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="Answers `echo: <text>`.",
                           tags=["echo", "test"], examples=["hello"])],
        security_schemes={"bearer": SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))},
        security_requirements=[SecurityRequirement(schemes={"bearer": StringList(list=[])})],
    )
    if sign:
        from a2a.utils.signing import create_agent_card_signer  # needs PyJWT (pinned)

        card = create_agent_card_signer(SIGNING_KEY, {"kid": "a2a-fixture", "alg": "HS256", "typ": "JOSE"})(card)
    return card


def starlette_app(card: AgentCard) -> Starlette:
    handler = DefaultRequestHandler(EchoExecutor(), task_store=InMemoryTaskStore(), agent_card=card)
    return Starlette(routes=[
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=True),
    ])


def accepting(token: str):
    """What the gate accepts: `Bearer <token>`, and anyone reading the card (it is public)."""
    def accepts(scope, authorization: str | None) -> bool:
        public = scope["method"] in ("GET", "HEAD") and scope["path"] == AGENT_CARD_WELL_KNOWN_PATH
        return public or authorization == f"Bearer {token}"
    return accepts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    ap.add_argument("--token", required=True, help="the bearer token every request (but the card's) must carry")
    ap.add_argument("--headers-log", help="append one JSON line per HTTP request to this file")
    ap.add_argument("--public-url", help="the URL the card advertises (default http://127.0.0.1:<port>/)")
    ap.add_argument("--sign", action="store_true", help="add a JWS signature to the card")
    ap.add_argument("--name", default="ferrogate-a2a-fixture", help="the agent's name on its card")
    args = ap.parse_args()

    sock = listen.bind(args.port)
    port = sock.getsockname()[1]
    card = build_card(args.name, args.public_url or f"http://127.0.0.1:{port}/", args.sign)
    app = listen.BearerGate(starlette_app(card), accepting(args.token), args.headers_log, "a2a-fixture")
    print(f"a2a-sdk {SDK_VERSION} agent {args.name!r} on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    listen.serve(app, sock)


if __name__ == "__main__":
    main()
