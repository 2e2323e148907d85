"""`make run` as a newcomer meets it: Ctrl-C stops it cleanly, a busy port stops it with a clear
message and a non-zero exit, and the quickstart's own commands work.

Each test runs `make run` in a process group of its own, on free ports, with a config whose
provider points at that run's simulated engine; Ctrl-C is SIGINT to the whole group, as a
terminal sends it. The build is already there when `make test` runs this (`make run` only checks
that it is up to date).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 600.0  # `make run` may have to bring the build up to date first
STOP_TIMEOUT_S = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(tmp_path: Path, sim_port: int) -> Path:
    config = tmp_path / "quickstart.yaml"
    config.write_text(
        "providers: [{ name: local, kind: openai_compatible, base_url: 'http://127.0.0.1:%d' }]\n"
        "models: [{ name: chat, targets: [{ provider: local, model: sim-small }] }]\n" % sim_port
    )
    return config


def _as_from_a_terminal() -> None:
    """preexec_fn: SIGINT at its default, as a shell gives a foreground job (a runner that
    started the tests in the background may have left it ignored, and that is inherited)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _make_run(tmp_path: Path, listen: int, sim: int) -> subprocess.Popen:
    log = open(tmp_path / "make-run.log", "wb")
    return subprocess.Popen(
        ["make", "--no-print-directory", "run", f"LISTEN=127.0.0.1:{listen}",
         f"SIM_LISTEN=127.0.0.1:{sim}", f"CONFIG={_config(tmp_path, sim)}"],
        cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True, preexec_fn=_as_from_a_terminal,
    )


def _log(tmp_path: Path) -> str:
    return (tmp_path / "make-run.log").read_text(errors="replace")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _wait_for_answer(proc: subprocess.Popen, port: int, tmp_path: Path) -> httpx.Response:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"make run exited early ({proc.returncode}):\n{_log(tmp_path)}"
        try:
            r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=5,
                           json={"model": "chat", "messages": [{"role": "user", "content": "Hello!"}]})
            if r.status_code == 200:
                return r
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"no answer on {port}:\n{_log(tmp_path)}")


def test_ctrl_c_stops_make_run_cleanly(tmp_path: Path) -> None:
    listen, sim = _free_port(), _free_port()
    proc = _make_run(tmp_path, listen, sim)
    try:
        answer = _wait_for_answer(proc, listen, tmp_path)
        assert answer.json()["choices"][0]["message"]["content"]
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        code = proc.wait(timeout=STOP_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    log = _log(tmp_path)
    # Killed by SIGINT (a shell shows 130) or a clean exit; never a crash.
    assert code in (0, 130, -signal.SIGINT), f"exit {code}:\n{log}"
    assert "Segmentation fault" not in log and "core dumped" not in log, log
    assert _port_free(listen) and _port_free(sim), "sim or gateway still running after Ctrl-C"


def test_a_busy_gateway_port_stops_make_run_with_a_clear_message(tmp_path: Path) -> None:
    sim = _free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = taken.getsockname()[1]
        proc = _make_run(tmp_path, listen, sim)
        try:
            code = proc.wait(timeout=START_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    log = _log(tmp_path)
    assert code != 0, log
    assert f"cannot listen on 127.0.0.1:{listen}" in log and "--listen" in log, log
    assert "Segmentation fault" not in log, log
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while not _port_free(sim) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _port_free(sim), "the simulated engine was left running"
