"""Admin identity end to end, on two `ferrogate serve` replicas sharing one PostgreSQL schema:
the first owner is made with `ferrogate admin create-user`, logs in over HTTP (session cookie,
CSRF token), makes an API token that works on both replicas, and revokes it on one: the other
refuses it on the very next request (tokens are looked up in the database on every use). The
serve logs and the CLI's output never hold the password, the token, the cookie or the CSRF
token.

Real parts: the machine's PostgreSQL (a schema of this module's own, dropped after), two
`ferrogate serve` processes and the `ferrogate` CLI."""

from __future__ import annotations

import os
import secrets
import subprocess

import httpx
import pytest

from conftest import Gateway, _bin, _start, own_gateway, psql, schema_url

SCHEMA = f"fg_py_identity_{secrets.token_hex(6)}"
URL_ENV = "FG_IDENTITY_PG"
PASSWORD = "owner-" + secrets.token_urlsafe(18)
USED: list[str] = [PASSWORD]  # every secret this module used: none may be logged


def on_postgres(base: dict) -> dict:
    base["store"] = {"kind": "postgres", "url_env": URL_ENV}
    return base


def boot(gw: Gateway) -> dict:
    return {"authorization": f"Bearer {gw.admin_token}"}


@pytest.fixture(scope="module")
def replicas():
    """Two serve processes on one schema. The second `_start` generates keys of its own and
    waits until its key `alice` is served: its digest is put in the store (through the first
    replica's admin API) before the second starts."""
    psql(f"CREATE SCHEMA {SCHEMA}")
    saved = os.environ.get(URL_ENV)
    os.environ[URL_ENV] = schema_url(SCHEMA)
    try:
        for first in own_gateway("ferrogate-identity-a-", lambda w, n: _start(w, n, on_postgres)):
            def second_config(base: dict) -> dict:
                alice = next(k for k in base["keys"] if k["name"] == "alice")
                r = httpx.put(f"{first.admin_url}/api/v1/keys/alice", json=alice, headers=boot(first), timeout=30)
                assert r.status_code == 200, r.text
                return on_postgres(base)

            for second in own_gateway("ferrogate-identity-b-", lambda w, n: _start(w, n, second_config)):
                yield first, second
    finally:
        os.environ.pop(URL_ENV, None) if saved is None else os.environ.__setitem__(URL_ENV, saved)
        psql(f"DROP SCHEMA {SCHEMA} CASCADE")


def create_user(gw: Gateway, *args: str, password: str = PASSWORD) -> subprocess.CompletedProcess:
    argv = [str(_bin()), "admin", "create-user", "--config", str(gw.workdir / "ferrogate.json"), *args,
            "--password-stdin"]
    return subprocess.run(argv, input=password + "\n", capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def owner(replicas) -> str:
    first, _ = replicas
    made = create_user(first, "--name", "root")
    assert made.returncode == 0, made.stderr
    assert '"role": "owner"' in made.stdout and '"password_set": true' in made.stdout, made.stdout
    for out in (made.stdout, made.stderr):
        assert PASSWORD not in out and "argon2" not in out, out
    return "root"


def login(gw: Gateway, name: str, password: str) -> httpx.Response:
    return httpx.post(f"{gw.admin_url}/api/v1/session", json={"name": name, "password": password}, timeout=30)


def test_the_cli_refuses_with_what_is_wrong(replicas, owner):
    first, _ = replicas
    taken = create_user(first, "--name", owner)
    assert taken.returncode != 0 and "user root exists" in taken.stderr, taken.stderr
    short = create_user(first, "--name", "shorty", password="short")
    assert short.returncode != 0 and "at least 15 characters" in short.stderr, short.stderr
    role = create_user(first, "--name", "someone", "--role", "root")
    assert role.returncode != 0 and "owner, admin, key-manager or viewer" in role.stderr, role.stderr
    rows = psql(f"SELECT name, role, left(password_hash, 31) FROM {SCHEMA}.fg_admin_users")
    assert rows == "root|owner|$argon2id$v=19$m=19456,t=2,p=1$", rows
    audit = psql(f"SELECT actor, action, object FROM {SCHEMA}.fg_audit WHERE actor = 'cli'")
    assert audit == "cli|user_created|users/root", audit


def test_a_password_login_gives_a_session_both_replicas_know(replicas, owner):
    first, second = replicas
    wrong = login(first, owner, "not the password at all")
    assert (wrong.status_code, wrong.json()) == (401, {"error": "wrong name or password"})
    r = login(first, owner, PASSWORD)
    assert r.status_code == 200, r.text
    set_cookie = r.headers["set-cookie"]
    assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie, set_cookie
    cookie, csrf = set_cookie.split(";")[0], r.json()["csrf_token"]
    USED.extend([cookie.split("=", 1)[1], csrf])
    for gw in (first, second):
        me = httpx.get(f"{gw.admin_url}/api/v1/session", headers={"cookie": cookie}, timeout=30)
        assert me.status_code == 200 and me.json()["name"] == owner and me.json()["csrf_token"] == csrf, me.text
    refused = httpx.post(f"{second.admin_url}/api/v1/tokens", json={"name": "x"}, headers={"cookie": cookie},
                         timeout=30)
    assert refused.status_code == 403 and "X-CSRF-Token" in refused.json()["error"], refused.text
    out = httpx.delete(f"{second.admin_url}/api/v1/session", headers={"cookie": cookie, "x-csrf-token": csrf},
                     timeout=30)
    assert out.status_code == 200, out.text
    gone = httpx.get(f"{first.admin_url}/api/v1/session", headers={"cookie": cookie}, timeout=30)
    assert gone.status_code == 401, "a logout on one replica ends the session on both"


def test_a_token_revoked_on_one_replica_is_refused_by_the_other_at_once(replicas, owner):
    first, second = replicas
    r = login(first, owner, PASSWORD)
    cookie, csrf = r.headers["set-cookie"].split(";")[0], r.json()["csrf_token"]
    USED.extend([cookie.split("=", 1)[1], csrf])
    made = httpx.post(f"{first.admin_url}/api/v1/tokens", json={"name": "ci", "role": "admin"},
                      headers={"cookie": cookie, "x-csrf-token": csrf}, timeout=30)
    assert made.status_code == 200, made.text
    token, token_id = made.json()["token"], made.json()["id"]
    USED.append(token)
    bearer = {"authorization": f"Bearer {token}"}
    for gw in (first, second):
        me = httpx.get(f"{gw.admin_url}/api/v1/session", headers=bearer, timeout=30)
        assert me.status_code == 200 and me.json()["role"] == "admin", me.text
    revoked = httpx.delete(f"{first.admin_url}/api/v1/tokens/{token_id}", headers=bearer, timeout=30)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"], revoked.text
    refused = httpx.get(f"{second.admin_url}/api/v1/users", headers=bearer, timeout=30)
    assert refused.status_code == 401, refused.text
    listed = httpx.get(f"{second.admin_url}/api/v1/tokens?all=true", headers=boot(second), timeout=30)
    assert token not in listed.text and listed.json()["tokens"][0]["prefix"] == token[:12], listed.text


def test_no_secret_reaches_a_log_or_the_audit_table(replicas, owner):
    audit = psql(f"SELECT coalesce(json_agg(a)::text, '') FROM {SCHEMA}.fg_audit a")
    assert "authn_login_success" in audit and "token_revoked" in audit, audit
    for gw in replicas:
        for p in gw.procs:
            text = p.log.read_text(errors="replace")
            for secret in USED:
                assert secret not in text, f"a secret in {p.log}"
    for secret in USED:
        assert secret not in audit, "a secret in fg_audit"
