"""The admin API against its own OpenAPI document, with schemathesis: `ferrogate serve` on
PostgreSQL (a schema of this module's own), the live `/openapi.json`, the bootstrap owner token,
a fixed seed and a bounded number of examples per operation. Checks: no 5xx
(`not_a_server_error`), every status, content type and body as documented
(`status_code_conformance`, `content_type_conformance`, `response_schema_conformance`), data
the schemas forbid is refused (`negative_data_rejection`), and an operation that needs
credentials refuses a request without them (`ignored_auth`). No failure is allowed.

Excluded, each for its reason (everything else runs):
  * GET /api/v1/session/oidc/login and GET /api/v1/session/oidc/callback: the browser redirects of
    single sign-on, which need an OpenID provider; none is configured here, so both answer 404
    and generating their inputs would test nothing.

Real parts: the machine's PostgreSQL, the ferrogate binary, schemathesis (pinned in
requirements.txt)."""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from conftest import Gateway, _start, own_gateway, psql, schema_url

SCHEMA = f"fg_py_schemathesis_{secrets.token_hex(6)}"
SEED = 20260601
MAX_EXAMPLES = 12
CHECKS = ("not_a_server_error", "status_code_conformance", "content_type_conformance",
          "negative_data_rejection", "response_schema_conformance", "ignored_auth")
EXCLUDED = ("/api/v1/session/oidc/login", "/api/v1/session/oidc/callback")
RUN_TIMEOUT_S = 900  # a hang guard: the run takes 65-80 s on an idle 2-core machine, about twice under load


@pytest.fixture(scope="module")
def gw():
    psql(f"CREATE SCHEMA {SCHEMA}")
    saved = {k: os.environ.get(k) for k in ("FG_SCHEMATHESIS_PG", "FERROGATE_MASTER_KEY")}
    os.environ["FG_SCHEMATHESIS_PG"] = schema_url(SCHEMA)
    os.environ["FERROGATE_MASTER_KEY"] = base64.b64encode(secrets.token_bytes(32)).decode()

    def config(base: dict) -> dict:
        base["store"] = {"kind": "postgres", "url_env": "FG_SCHEMATHESIS_PG"}
        return base

    try:
        yield from own_gateway("ferrogate-schemathesis-", lambda w, n: _start(w, n, config))
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        psql(f"DROP SCHEMA {SCHEMA} CASCADE")


def test_the_admin_api_keeps_to_its_openapi_document(gw: Gateway, tmp_path: Path):
    doc = httpx.get(f"{gw.admin_url}/openapi.json", timeout=10).json()
    documented = {p for p in doc["paths"]}
    assert set(EXCLUDED) <= documented, "an excluded operation is gone: drop it from EXCLUDED"
    argv = [
        str(Path(sys.executable).with_name("schemathesis")), "run", f"{gw.admin_url}/openapi.json",
        "--checks", ",".join(CHECKS),
        "--seed", str(SEED),
        "--max-examples", str(MAX_EXAMPLES),
        "--phases", "examples,coverage,fuzzing",
        "--workers", "1",
        "--generation-database", "none",
        "--request-timeout", "20",
        "--header", f"Authorization: Bearer {gw.admin_token}",
        "--no-color",
        "--report", "junit", "--report-dir", str(tmp_path),
        *(arg for path in EXCLUDED for arg in ("--exclude-path", path)),
    ]
    env = dict(os.environ, SCHEMATHESIS_HOOKS="", PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env, cwd=tmp_path)
    out = done.stdout + done.stderr
    gw.check_alive()
    assert done.returncode == 0, f"schemathesis found failures (exit {done.returncode}):\n{out[-20000:]}"
    assert "passed" in out, out[-5000:]
