"""A2A agents and clients of the official `a2a-sdk` for the tests (testdata/a2a/agent.py and
client.py), run with this venv's python. An agent is waited for on its `LISTENING <port>` line,
never a sleep."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx

from conftest import REPO
from mcp_support import client_output, listening  # the client's one JSON line: MCP's contract

A2A_DIR = REPO / "testdata" / "a2a"
CARD_PATH = "/.well-known/agent-card.json"
CLIENT_TIMEOUT_S = 60.0

__all__ = ["A2A_DIR", "CARD_PATH", "Agent", "a2a_agent", "client_output", "run_a2a_client"]


@dataclass
class Agent:
    port: int
    headers_log: Path
    stderr_log: Path

    @property
    def url(self) -> str:
        """The agent's base URL, which is also its JSON-RPC endpoint (the card's default URL)."""
        return f"http://127.0.0.1:{self.port}/"

    def card(self) -> dict:
        """The agent card as served (GET without credentials: the card is public)."""
        r = httpx.get(self.url.rstrip("/") + CARD_PATH, timeout=10)
        r.raise_for_status()
        return r.json()

    def requests(self) -> list[dict]:
        """One {"method", "path", "query", "headers"} per HTTP request the agent got."""
        if not self.headers_log.exists():
            return []
        return [json.loads(line) for line in self.headers_log.read_text().splitlines()]


@contextmanager
def a2a_agent(token: str, work: Path, name: str, public_url: str | None = None,
              sign: bool = False) -> Iterator[Agent]:
    """agent.py on a free port, requiring `Bearer <token>` (but for its card); its card
    advertises `public_url` when given and carries a JWS signature with `sign`."""
    agent = Agent(0, work / "headers.jsonl", work / "agent.stderr")
    argv = [sys.executable, str(A2A_DIR / "agent.py"), "--port", "0", "--token", token,
            "--headers-log", str(agent.headers_log), "--name", name,
            *(["--public-url", public_url] if public_url else []), *(["--sign"] if sign else [])]
    with listening(argv, agent.stderr_log, "agent.py") as port:
        agent.port = port
        yield agent


def run_a2a_client(url: str, token: str, text: str, stream: bool = False,
                   protocol_version: str | None = None) -> subprocess.CompletedProcess:
    """client.py: resolves the card from `url` (the base URL) and sends `text`; parse a
    successful run with client_output()."""
    return subprocess.run(
        [sys.executable, str(A2A_DIR / "client.py"), "--url", url, "--token", token, "--text", text,
         *(["--stream"] if stream else []),
         *(["--protocol-version", protocol_version] if protocol_version else [])],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)
