"""A2A agents and clients of the official `a2a-sdk` for the tests (testdata/a2a/agent.py and
client.py), run with this venv's python. An agent is waited for on its `LISTENING <port>` line,
never a sleep."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from conftest import REPO, _die_with_parent, read_log
from mcp_support import client_output  # the client's one JSON line; the same contract as MCP's

A2A_DIR = REPO / "testdata" / "a2a"
CARD_PATH = "/.well-known/agent-card.json"
START_TIMEOUT_S = 30.0
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
    with open(agent.stderr_log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(A2A_DIR / "agent.py"), "--port", "0", "--token", token,
             "--headers-log", str(agent.headers_log), "--name", name,
             *(["--public-url", public_url] if public_url else []), *(["--sign"] if sign else [])],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True,
            preexec_fn=_die_with_parent)
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:  # every stdout line, then None at EOF
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    pumper = threading.Thread(target=pump, daemon=True)
    pumper.start()
    try:
        try:
            line = lines.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            line = None
        if not line or not line.startswith("LISTENING "):
            pytest.fail(f"agent.py did not announce its port: {line!r}\n" + read_log(agent.stderr_log))
        agent.port = int(line.split()[1])
        yield agent
    finally:
        proc.kill()
        proc.wait(timeout=10)
        pumper.join(timeout=5)
        proc.stdout.close()


def run_a2a_client(url: str, token: str, text: str, stream: bool = False,
                   protocol_version: str | None = None) -> subprocess.CompletedProcess:
    """client.py: resolves the card from `url` (the base URL) and sends `text`; parse a
    successful run with client_output()."""
    return subprocess.run(
        [sys.executable, str(A2A_DIR / "client.py"), "--url", url, "--token", token, "--text", text,
         *(["--stream"] if stream else []),
         *(["--protocol-version", protocol_version] if protocol_version else [])],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)
