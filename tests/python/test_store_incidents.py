"""Store incidents in the analytics events feed: `ferrogate serve` on PostgreSQL shares its
limit counters through a private `redis-server` that the test starts, stops and starts again
on the same port; `GET /api/v1/analytics/events` then shows `store_down` for `redis` (with the
error) and, once it is back, `store_up`, both with the replica that saw them."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from conftest import Proc, _free_port, _start, own_gateway, psql, schema_url

SCHEMA = f"fg_py_inc_{secrets.token_hex(6)}"
URL_ENV, REDIS_ENV = "FG_INCIDENTS_PG", "FG_INCIDENTS_REDIS"
WAIT_S = 60.0


def _redis(port: int, workdir: Path) -> Proc:
    return Proc("redis", ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no"], workdir / "redis.log", dict(os.environ))


@pytest.fixture(scope="module")
def setup():
    workdir = Path(tempfile.mkdtemp(prefix="ferrogate-incidents-"))
    port = _free_port()
    redis = _redis(port, workdir)
    psql(f"CREATE SCHEMA {SCHEMA}")
    os.environ[URL_ENV], os.environ[REDIS_ENV] = schema_url(SCHEMA), f"redis://127.0.0.1:{port}"

    def on_postgres_and_redis(base: dict) -> dict:
        base["store"] = {"kind": "postgres", "url_env": URL_ENV}
        # Read at start whatever the store: the limits ledger shares its counters through it.
        base["redis"] = {"url_env": REDIS_ENV}
        return base

    try:
        for gw in own_gateway("ferrogate-incidents-", lambda w, n: _start(w, n, on_postgres_and_redis)):
            yield gw, redis, port, workdir
    finally:
        for name in (URL_ENV, REDIS_ENV):
            os.environ.pop(name, None)
        psql(f"DROP SCHEMA {SCHEMA} CASCADE")
        shutil.rmtree(workdir, ignore_errors=True)


def incidents(gw) -> list[dict]:
    r = httpx.get(f"{gw.admin_url}/api/v1/analytics/events", params={"from": 0, "limit": 1000},
                  headers={"authorization": f"Bearer {gw.admin_token}"}, timeout=10)
    assert r.status_code == 200, r.text
    return [e for e in r.json()["events"] if e["kind"] in ("store_down", "store_up")]


def wait_for_kind(gw, kind: str) -> dict:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        seen = [e for e in incidents(gw) if e["kind"] == kind and e["store"] == "redis"]
        if seen:
            return seen[0]
        time.sleep(0.2)
    logs = "\n".join(line for p in gw.procs for line in p.log_text().splitlines() if "subscription lost" not in line)[-4000:]
    raise AssertionError(f"no {kind} event for redis within {WAIT_S:.0f}s: {incidents(gw)}\n{logs}")


def test_a_redis_outage_and_its_end_are_events(setup):
    gw, redis, port, workdir = setup
    assert incidents(gw) == [], "no incident while Redis answers"
    redis.stop()
    down = wait_for_kind(gw, "store_down")
    assert down["detail"] and down["replica"], down
    assert (down["status"], down["key"], down["request_id"]) == (0, None, ""), down
    back = _redis(port, workdir)
    try:
        up = wait_for_kind(gw, "store_up")
        assert up["at"] >= down["at"] and up["replica"] == down["replica"], (down, up)
        assert [e["kind"] for e in incidents(gw)] == ["store_up", "store_down"], "newest first"
    finally:
        back.stop()
