"""MCP servers and clients of the official `mcp` SDK for the tests (testdata/mcp/server.py and
client.py): 2.x runs in this venv (sys.executable), 1.x in .venv-mcp1 (FERROGATE_MCP1_PYTHON,
set by scripts/pytest). A server is waited for on its `LISTENING <port>` line, never a sleep."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from conftest import REPO, _die_with_parent, read_log

MCP_DIR = REPO / "testdata" / "mcp"
ENDPOINT = {"streamable-http": "/mcp", "sse": "/sse"}
START_TIMEOUT_S = 30.0
CLIENT_TIMEOUT_S = 60.0


def python(era: str) -> str:
    if era == "2.x":
        return sys.executable
    py = os.environ.get("FERROGATE_MCP1_PYTHON")
    if not py:
        pytest.skip("FERROGATE_MCP1_PYTHON is unset (scripts/pytest points it at .venv-mcp1/bin/python)")
    return py


@dataclass
class Server:
    era: str
    transport: str
    port: int
    headers_log: Path
    calls_log: Path
    stderr_log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{ENDPOINT[self.transport]}"

    def requests(self) -> list[dict]:
        if not self.headers_log.exists():
            return []
        return [json.loads(line) for line in self.headers_log.read_text().splitlines()]

    def calls(self) -> list[str]:
        return self.calls_log.read_text().splitlines() if self.calls_log.exists() else []


@contextmanager
def listening(argv: list[str], stderr_log: Path, what: str) -> Iterator[int]:
    """Runs `argv` (a fixture server of testdata/) and yields the port of its `LISTENING <port>`
    line; the process is killed on the way out."""
    with open(stderr_log, "wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True,
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
            pytest.fail(f"{what} did not announce its port: {line!r}\n" + read_log(stderr_log))
        yield int(line.split()[1])
    finally:
        proc.kill()
        proc.wait(timeout=10)
        pumper.join(timeout=5)
        proc.stdout.close()


@contextmanager
def mcp_server(era: str, transport: str, token: str, work: Path, name: str,
               token_file: Path | None = None) -> Iterator[Server]:
    """server.py under `era`'s SDK on a free port, requiring `Bearer <token>` (or any token
    listed in `token_file` when given)."""
    srv = Server(era, transport, 0, work / "headers.jsonl", work / "calls.log", work / "server.stderr")
    argv = [python(era), str(MCP_DIR / "server.py"), "--port", "0", "--transport", transport,
            *(["--token-file", str(token_file)] if token_file else ["--token", token]),
            "--headers-log", str(srv.headers_log), "--calls-log", str(srv.calls_log), "--name", name]
    with listening(argv, srv.stderr_log, f"server.py ({era}, {transport})") as port:
        srv.port = port
        yield srv


def run_client(era: str, url: str, transport: str, token: str, *args: str) -> subprocess.CompletedProcess:
    """client.py under `era`'s SDK: lists the tools (and makes a call with --call)."""
    return subprocess.run(
        [python(era), str(MCP_DIR / "client.py"), "--url", url, "--token", token, "--transport", transport, *args],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)


def client_output(proc: subprocess.CompletedProcess, *logs: Path) -> dict:
    """The client's one JSON line; a failed run shows its stderr and the given logs."""
    assert proc.returncode == 0, (f"client exited {proc.returncode}\n--- stderr:\n{proc.stderr}\n"
                                  + "\n".join(f"--- {log}:\n{read_log(log)}" for log in logs))
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, f"expected one JSON line, got: {proc.stdout!r}"
    return json.loads(lines[0])
