"""Fixtures for the end-to-end tests: `ferrogate sim` behind `ferrogate serve`, driven by the
official OpenAI, Anthropic and Google Gen AI Python SDKs.

One session-scoped gateway serves every test:

  * `ferrogate sim` (deterministic upstream: --itl-ms 20 --output-tokens 6), serving the models
    `sim-small`, `sim-claude` and `sim-gemini` in all three provider dialects on one port;
  * `ferrogate serve` with a generated config: providers `local` (openai_compatible), `claude`
    (anthropic) and `gem` (gemini), all three -> the sim; models `chat` and `embed` (both
    local/sim-small), alias `default: chat`, group `dev` [chat, embed] and keys `alice` (group
    dev), `bob` (models [embed]) and `old` (expired). For the SDK matrix (test_sdk_matrix.py):
    the public models of UPSTREAMS (`oa-chat` -> local/sim-small, `an-chat` ->
    claude/sim-claude, `ge-chat` -> gem/sim-gemini), group `sdk` granting them, and key `carol`
    (group sdk). The anthropic and gemini providers take their (dummy) keys from `api_key_env`
    variables set for serve. Plaintext keys are made here; the config holds only their
    `sha256:` digests. FERROGATE_ADMIN_TOKEN is set so the admin usage API can be queried.

Ports are picked free on 127.0.0.1 (a start that loses a port race is retried with new ones).
Logs go to files in a temporary directory; a failing test gets the part of each log written
while it ran appended to its report, and a failed start shows the logs in its error. The
processes are stopped at the end of the session (and die with pytest if it is killed).

Environment: FERROGATE_BIN (default target/debug/ferrogate), FERROGATE_FILTER_WASM (passed as
--filter when set), FERROGATE_TEST_KEEP_LOGS=1 keeps the log directory.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import httpx
import openai
import pytest

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO / "target" / "debug" / "ferrogate"

SIM_ITL_MS = 20
SIM_OUTPUT_TOKENS = 6
STARTUP_TIMEOUT_S = 90.0  # a debug build compiles the filter wasm at start; the machine is shared
USAGE_TIMEOUT_S = 10.0  # usage records travel asynchronously: filter queue -> sidecar
LOG_TAIL_BYTES = 16_000
NO_AUTH = {"Authorization": openai.omit}  # extra_headers that make the SDK send no key
SIM_MODELS = ("sim-small", "sim-claude", "sim-gemini")
PROVIDER_KEY_ENV = {"claude": "FERROGATE_TEST_ANTHROPIC_KEY", "gem": "FERROGATE_TEST_GEMINI_KEY"}


@dataclass(frozen=True)
class Upstream:
    """A public model of the SDK matrix and where the gateway sends it."""
    model: str  # public name the clients send
    provider: str  # provider name in the config
    kind: str  # provider kind: the dialect the gateway speaks to the sim
    upstream_model: str  # model id the sim answers as


UPSTREAMS = (
    Upstream("oa-chat", "local", "openai_compatible", "sim-small"),
    Upstream("an-chat", "claude", "anthropic", "sim-claude"),
    Upstream("ge-chat", "gem", "gemini", "sim-gemini"),
)


# --------------------------------------------------------------------------- processes

PG = os.environ.get("FERROGATE_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")


def psql(sql: str) -> str:
    """Runs `sql` on the test database with psql; its output, unaligned."""
    done = subprocess.run(["psql", PG, "-v", "ON_ERROR_STOP=1", "-qAtc", sql],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def schema_url(schema: str) -> str:
    """The test database's URL with `schema` as the search path (a module's own tables)."""
    return f"{PG}{'&' if '?' in PG else '?'}options=-csearch_path%3D{schema}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM when pytest dies, however it dies (Linux)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class Proc:
    """A child process whose stdout+stderr go to a log file."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None):
        self.name = name
        self.argv = argv
        self.log = log
        self._fh = open(log, "ab")
        self.popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._fh,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=_die_with_parent,
        )

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=5)
        self._fh.close()

    def log_text(self, start: int = 0) -> str:
        return read_log(self.log, start)

    def log_size(self) -> int:
        try:
            return self.log.stat().st_size
        except OSError:
            return 0


def read_log(path: Path, start: int = 0, limit: int = LOG_TAIL_BYTES) -> str:
    """The log from byte `start` on, at most its last `limit` bytes."""
    try:
        data = path.read_bytes()[start:]
    except OSError as e:
        return f"<cannot read {path}: {e}>"
    cut = ""
    if len(data) > limit:
        cut = f"... ({len(data) - limit} earlier bytes not shown; full log: {path})\n"
        data = data[-limit:]
    return cut + data.decode("utf-8", "replace")


def _wait_until(what: str, procs: list[Proc], probe: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        for p in procs:
            if not p.alive():
                raise StartError(f"{p.name} exited with status {p.popen.returncode} while waiting for {what}")
        try:
            if probe():
                return
        except (httpx.HTTPError, OSError):
            pass
        if time.monotonic() > deadline:
            raise StartError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


class StartError(Exception):
    pass


# --------------------------------------------------------------------------- keys and config

def new_key() -> str:
    return "fg-" + secrets.token_hex(32)


def digest(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def gateway_config(sim_port: int, keys: dict[str, str]) -> dict:
    """The config document (written as JSON, which `serve` accepts like YAML)."""
    sim = f"http://127.0.0.1:{sim_port}"
    return {
        "providers": [
            {"name": "local", "kind": "openai_compatible", "base_url": sim},
            {"name": "claude", "kind": "anthropic", "base_url": sim, "api_key_env": PROVIDER_KEY_ENV["claude"]},
            {"name": "gem", "kind": "gemini", "base_url": sim, "api_key_env": PROVIDER_KEY_ENV["gem"]},
        ],
        "models": [
            {"name": "chat", "targets": [{"provider": "local", "model": "sim-small"}]},
            {"name": "embed", "targets": [{"provider": "local", "model": "sim-small"}]},
            *({"name": u.model, "targets": [{"provider": u.provider, "model": u.upstream_model}]}
              for u in UPSTREAMS),
        ],
        "aliases": {"default": "chat"},
        "groups": [
            {"name": "dev", "models": ["chat", "embed"]},
            {"name": "sdk", "models": [u.model for u in UPSTREAMS]},
        ],
        "keys": [
            {"name": "alice", "digest": digest(keys["alice"]), "groups": ["dev"]},
            {"name": "bob", "digest": digest(keys["bob"]), "models": ["embed"]},
            {"name": "old", "digest": digest(keys["old"]), "groups": ["dev"],
             "expires_at": "2020-01-01T00:00:00Z"},
            {"name": "carol", "digest": digest(keys["carol"]), "groups": ["sdk"]},
        ],
    }


# --------------------------------------------------------------------------- the gateway

@dataclass
class Gateway:
    base_url: str  # http://127.0.0.1:<port>/v1, what the SDK takes
    gateway_url: str  # http://127.0.0.1:<port>
    admin_url: str
    admin_token: str
    keys: dict[str, str]
    procs: list[Proc]
    workdir: Path
    sim_url: str = ""  # http://127.0.0.1:<port> of `ferrogate sim`, for answers without the gateway
    clients: list = field(default_factory=list)  # SDK clients to close at the end (any SDK)

    def client(self, key: str | None = None, **kw) -> openai.OpenAI:
        """An SDK client for the named key ("alice", "bob", "old", "carol") or a literal key string.
        (For no key at all, pass `extra_headers=NO_AUTH` on the call: the SDK insists that the
        Authorization header be omitted explicitly, per request.)"""
        opts = dict(base_url=self.base_url, api_key=self.keys.get(key, key) if key else "unused",
                    max_retries=0, timeout=30.0)
        opts.update(kw)
        c = openai.OpenAI(**opts)
        self.clients.append(c)
        return c

    def usage(self, key: str | None = None, model: str | None = None, limit: int = 50) -> dict:
        params = {"limit": limit}
        if key is not None:
            params["key"] = key
        if model is not None:
            params["model"] = model
        r = httpx.get(f"{self.admin_url}/api/v1/usage", params=params,
                      headers={"authorization": f"Bearer {self.admin_token}"}, timeout=10)
        if r.status_code != 200:
            pytest.fail(f"GET {r.url} -> {r.status_code}: {r.text[:500]}")
        return r.json()

    def wait_usage(self, request_id: str, *, key: str, model: str,
                   ready: Callable[[dict], bool] = lambda r: True,
                   timeout: float = USAGE_TIMEOUT_S) -> dict:
        """Polls the admin usage API until the record of `request_id` shows up (and `ready`
        accepts it); returns it, or fails with what was seen."""
        deadline = time.monotonic() + timeout
        last: dict | None = None
        seen: list = []
        while True:
            answer = self.usage(key=key, model=model, limit=200)
            seen = answer.get("records", [])
            for rec in seen:
                if rec.get("request_id") == request_id:
                    last = rec
                    if ready(rec):
                        return rec
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if last is not None:
            pytest.fail(f"usage record of {request_id} never became ready within {timeout}s: {last}")
        ids = [r.get("request_id") for r in seen][:20]
        pytest.fail(f"no usage record for request {request_id} (key={key}, model={model}) within "
                    f"{timeout}s; records seen: {ids}")

    def logs(self, since: dict[str, int] | None = None) -> list[tuple[str, str]]:
        return [(f"{p.name} log ({p.log})", p.log_text((since or {}).get(p.name, 0))) for p in self.procs]

    def log_sizes(self) -> dict[str, int]:
        return {p.name: p.log_size() for p in self.procs}

    def check_alive(self) -> None:
        for p in self.procs:
            if not p.alive():
                pytest.fail(f"{p.name} has exited (status {p.popen.returncode})")


def _bin() -> Path:
    b = Path(os.environ.get("FERROGATE_BIN") or DEFAULT_BIN)
    if not b.is_file():
        pytest.exit(f"ferrogate binary not found at {b} (build it: cargo build -p ferrogate-sidecar, "
                    f"or set FERROGATE_BIN)", returncode=2)
    return b


def _start(workdir: Path, attempt: int, extra: dict | Callable[[dict], dict] | None = None) -> Gateway:
    """Starts sim + serve; `extra` adds top-level sections to the generated config, or (a
    callable) returns the config to use from the generated one."""
    binary = str(_bin())
    sim_port, gw_port, admin_port, side_port = (_free_port() for _ in range(4))
    keys = {name: new_key() for name in ("alice", "bob", "old", "carol")}
    admin_token = secrets.token_hex(24)
    cfg = workdir / "ferrogate.json"
    base = gateway_config(sim_port, keys)
    doc = extra(base) if callable(extra) else {**base, **(extra or {})}
    cfg.write_text(json.dumps(doc, indent=2))

    env = dict(os.environ)
    env.setdefault("FERROGATE_LOG", "info")
    env["NO_COLOR"] = "1"  # plain log files
    env["FERROGATE_ADMIN_TOKEN"] = admin_token
    env.pop("FERROGATE_INTERNAL_TOKEN", None)  # serve generates and shares its own
    for var in PROVIDER_KEY_ENV.values():  # the sim accepts and ignores any provider key
        env[var] = "sim-key-" + secrets.token_hex(8)

    procs: list[Proc] = []
    try:
        sim = Proc("sim", [binary, "sim", "--listen", f"127.0.0.1:{sim_port}",
                           *(arg for m in SIM_MODELS for arg in ("--model", m)),
                           "--itl-ms", str(SIM_ITL_MS), "--output-tokens", str(SIM_OUTPUT_TOKENS)],
                   workdir / f"sim.{attempt}.log", env)
        procs.append(sim)
        argv = [binary, "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{gw_port}",
                "--admin-listen", f"127.0.0.1:{admin_port}", "--sidecar-listen", f"127.0.0.1:{side_port}",
                "--workers", "2"]
        if os.environ.get("FERROGATE_FILTER_WASM"):
            argv += ["--filter", os.environ["FERROGATE_FILTER_WASM"]]
        serve = Proc("serve", argv, workdir / f"serve.{attempt}.log", env)
        procs.append(serve)

        gw = Gateway(base_url=f"http://127.0.0.1:{gw_port}/v1", gateway_url=f"http://127.0.0.1:{gw_port}",
                     admin_url=f"http://127.0.0.1:{admin_port}", admin_token=admin_token, keys=keys,
                     procs=procs, workdir=workdir, sim_url=f"http://127.0.0.1:{sim_port}")

        _wait_until("sim /v1/models", procs,
                    lambda: httpx.get(f"http://127.0.0.1:{sim_port}/v1/models", timeout=2).status_code == 200,
                    STARTUP_TIMEOUT_S)
        _wait_until("serve admin /healthz", procs,
                    lambda: httpx.get(f"{gw.admin_url}/healthz", timeout=2).status_code == 200,
                    STARTUP_TIMEOUT_S)
        # The filter answers 503 until it holds a config snapshot.
        _wait_until("the gateway to serve /v1/models", procs,
                    lambda: httpx.get(f"{gw.gateway_url}/v1/models", timeout=5,
                                      headers={"authorization": f"Bearer {keys['alice']}"}).status_code == 200,
                    STARTUP_TIMEOUT_S)
        return gw
    except BaseException:
        for p in procs:
            p.stop()
        raise


def start_with_retries(start: Callable[[Path, int], T], workdir: Path, logs: tuple[str, ...]) -> tuple[T | None, str]:
    """Calls `start(workdir, attempt)` up to three times: free ports are picked, released and
    then bound, so another process can take one in between. A lost race shows as "address in
    use" in a log (`workdir/<name>.<attempt>.log` for each name in `logs`); any other failure
    will not get better and ends the tries. Returns what `start` returned, or None and every
    attempt's error with the logs."""
    errors = []
    for attempt in range(3):
        try:
            return start(workdir, attempt), ""
        except StartError as e:
            text = "\n".join(f"----- {name} log -----\n{read_log(workdir / f'{name}.{attempt}.log')}"
                             for name in logs)
            errors.append(f"attempt {attempt + 1}: {e}\n{text}")
            if "in use" not in text.lower():
                break
    return None, "\n".join(errors)


def own_gateway(prefix: str, start: Callable[[Path, int], Gateway] = _start) -> Iterator[Gateway]:
    """A module's own sim and gateway (for a module fixture to `yield from`): started with
    `start`, its logs under a temporary folder named `prefix`, stopped and removed after."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    gw, errors = start_with_retries(start, workdir, ("sim", "serve"))
    if gw is None:
        pytest.fail("could not start ferrogate sim + serve:\n" + errors)
    yield gw
    for c in gw.clients:
        c.close()
    for p in reversed(gw.procs):
        p.stop()
    shutil.rmtree(workdir, ignore_errors=True)


def own_postgres_gateway(prefix: str, schema: str, url_env: str,
                         extra: Callable[[dict], dict] | None = None) -> Iterator[Gateway]:
    """`own_gateway` on the postgres store in `schema` of the test database (created here and
    dropped after), its URL in `url_env` while it runs; `extra` edits the config further."""
    def on_postgres(base: dict) -> dict:
        base["store"] = {"kind": "postgres", "url_env": url_env}
        return extra(base) if extra else base

    psql(f"CREATE SCHEMA {schema}")
    saved = os.environ.get(url_env)
    os.environ[url_env] = schema_url(schema)
    try:
        yield from own_gateway(prefix, lambda w, n: _start(w, n, on_postgres))
    finally:
        os.environ.pop(url_env, None) if saved is None else os.environ.__setitem__(url_env, saved)
        psql(f"DROP SCHEMA {schema} CASCADE")


def create_admin_user(gw: Gateway, name: str, password: str) -> None:
    """The first owner, made as an operator does: `ferrogate admin create-user --password-stdin`."""
    argv = [str(_bin()), "admin", "create-user", "--config", str(gw.workdir / "ferrogate.json"),
            "--name", name, "--password-stdin"]
    made = subprocess.run(argv, input=password + "\n", capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr


@pytest.fixture(scope="session")
def gateway(request) -> Gateway:
    workdir = Path(tempfile.mkdtemp(prefix="ferrogate-pytest-"))
    gw, errors = start_with_retries(_start, workdir, ("sim", "serve"))
    if gw is None:
        # Stop the session here: every test needs the gateway, and one dump of the logs is enough.
        pytest.exit("could not start ferrogate sim + serve:\n" + errors, returncode=3)
    request.config._ferrogate_gateway = gw
    yield gw
    for c in gw.clients:
        try:
            c.close()
        except Exception:
            pass
    for p in reversed(gw.procs):
        p.stop()
    failed = request.session.testsfailed
    if os.environ.get("FERROGATE_TEST_KEEP_LOGS") or failed:
        print(f"\nferrogate logs kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


# --------------------------------------------------------------------------- log dumps on failure

@pytest.fixture(autouse=True)
def _log_marks(request):
    """Remembers how long each log was when a test started, for the failure report."""
    gw = getattr(request.config, "_ferrogate_gateway", None)
    request.node._ferrogate_log_start = gw.log_sizes() if gw else {}
    yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and report.when in ("setup", "call"):
        gw = getattr(item.config, "_ferrogate_gateway", None)
        if gw is not None:
            time.sleep(0.2)  # let the processes flush what they log about the failure
            since = getattr(item, "_ferrogate_log_start", {})
            for title, text in gw.logs(since):
                report.sections.append((title, text or "<empty>"))
    return report
