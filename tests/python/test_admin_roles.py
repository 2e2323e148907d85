"""Admin roles end to end: `ferrogate serve` on PostgreSQL, with an API token of each role
(rows of `fg_admin_users` and `fg_admin_tokens` inserted with psql, as an owner's
`POST /api/v1/users` would make them). Every operation of the live `/openapi.json` is called
without credentials and with each role, against the least role its `x-ferrogate-role` names;
the audit log shows a key made and a budget changed by a key manager, with the rows before and
after and no secret (neither in the audit log nor in serve's log); and the admin API refuses
bodies that are too large, not objects, or name a group or role that cannot be.

Real parts: the machine's PostgreSQL (a schema of this module's own, dropped after), the
ferrogate binary."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import subprocess
from dataclasses import dataclass

import httpx
import pytest

from conftest import Gateway, _start, own_gateway, psql, schema_url

SCHEMA = f"fg_py_roles_{secrets.token_hex(6)}"
PROVIDER_SECRET = f"sk-roles-provider-{secrets.token_hex(8)}"
ROLES = ("viewer", "key-manager", "admin", "owner")
RANK = {r: i for i, r in enumerate(ROLES)}


@dataclass
class Env:
    gw: Gateway
    tokens: dict[str, str]  # role (or "dev-manager": a key-manager of group dev) -> fgt_ token

    def call(self, method: str, path: str, who: str | None = None, body=None, **kw) -> httpx.Response:
        headers = {}
        if who == "bootstrap":
            headers["authorization"] = f"Bearer {self.gw.admin_token}"
        elif who is not None:
            headers["authorization"] = f"Bearer {self.tokens[who]}"
        if body is not None and "content" not in kw:
            kw["content"] = json.dumps(body)
            headers["content-type"] = "application/json"
        return httpx.request(method, f"{self.gw.admin_url}{path}", headers=headers, timeout=30, **kw)


def add_token(name: str, role: str, key_groups: list[str]) -> str:
    """A user of `role` (narrowed to `key_groups`) and an API token of it; the token."""
    groups = "{" + ",".join(key_groups) + "}"
    user = psql(f"INSERT INTO {SCHEMA}.fg_admin_users (name, role, key_groups) "
                f"VALUES ('{name}', '{role}', '{groups}') RETURNING id")
    token = f"fgt_{secrets.token_hex(20)}"
    digest = hashlib.sha256(token.encode()).hexdigest()
    psql(f"INSERT INTO {SCHEMA}.fg_admin_tokens (user_id, name, digest, role) "
         f"VALUES ({user}, 'pytest', '\\x{digest}'::bytea, '{role}')")
    return token


@pytest.fixture(scope="module")
def env():
    psql(f"CREATE SCHEMA {SCHEMA}")
    saved = {k: os.environ.get(k) for k in ("FG_ROLES_PG", "FERROGATE_MASTER_KEY")}
    os.environ["FG_ROLES_PG"] = schema_url(SCHEMA)
    os.environ["FERROGATE_MASTER_KEY"] = base64.b64encode(secrets.token_bytes(32)).decode()

    def config(base: dict) -> dict:
        base["store"] = {"kind": "postgres", "url_env": "FG_ROLES_PG"}
        return base

    try:
        for gw in own_gateway("ferrogate-roles-", lambda w, n: _start(w, n, config)):
            tokens = {role: add_token(f"pytest-{role}", role, []) for role in ROLES}
            tokens["dev-manager"] = add_token("pytest-dev-manager", "key-manager", ["dev"])
            e = Env(gw, tokens)
            made = e.call("POST", "/api/v1/providers", "bootstrap",
                          {"name": "sealed", "kind": "openai_compatible", "base_url": "http://127.0.0.1:9",
                           "api_key": PROVIDER_SECRET})
            assert made.status_code == 200, made.text
            yield e
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        psql(f"DROP SCHEMA {SCHEMA} CASCADE")


def concrete(path: str) -> str:
    """A path of the document with its parameters made up (rows that do not exist)."""
    return path.replace("{name}", "pytest-nothing").replace("{request_id}", "pytest-nothing") \
        .replace("{id}", "999999999")


def test_every_operation_takes_the_roles_its_document_names(env: Env):
    doc = env.call("GET", "/openapi.json").json()
    assert doc["openapi"] == "3.1.0"
    order = {"get": 0, "post": 1, "put": 2, "patch": 3, "delete": 4}
    ops = sorted(((m, p, o) for p, methods in doc["paths"].items() for m, o in methods.items()),
                 key=lambda op: order[op[0]])
    assert len(ops) > 60
    checked = 0
    for method, path, op in ops:
        role = op["x-ferrogate-role"]
        uri = concrete(path)
        body = {} if "requestBody" in op else None
        anonymous = env.call(method.upper(), uri, None, body)
        if role == "public":
            assert op["security"] == [], f"{method} {path}"
            assert anonymous.status_code != 401, f"{method} {path} is public: {anonymous.text}"
            continue
        assert role in ROLES, f"{method} {path}: {role}"
        assert f"Minimum role: {role}" in op["description"], op["description"]
        assert anonymous.status_code == 401, f"{method} {path} without credentials: {anonymous.text}"
        assert "error" in anonymous.json()
        for who in ROLES:
            r = env.call(method.upper(), uri, who, body)
            if RANK[who] >= RANK[role]:
                assert r.status_code not in (401, 403), f"{method} {uri} as {who} (needs {role}): {r.text}"
            else:
                assert r.status_code == 403, f"{method} {uri} as {who} (needs {role}): {r.text}"
                assert f"needs the {role} role" in r.json()["error"], r.text
            checked += 1
    assert checked > 200


def audit_events(env: Env, **query) -> list[dict]:
    r = env.call("GET", "/api/v1/audit", "admin", params=query)
    assert r.status_code == 200, r.text
    return r.json()["events"]


def test_the_audit_log_shows_a_key_made_and_a_budget_changed_without_secrets(env: Env):
    km = "dev-manager"
    made = env.call("POST", "/api/v1/keys", km, {"name": "audited", "groups": ["dev"]})
    assert made.status_code == 200, made.text
    plaintext = made.json()["key"]
    row = env.call("GET", "/api/v1/keys/audited", km).json()
    budget = {**row, "limits": {"cost_usd_per_day": 2.5}}
    assert env.call("PUT", "/api/v1/keys/audited", km, budget).status_code == 200
    group = env.call("GET", "/api/v1/groups/dev", km).json()
    changed = env.call("PUT", "/api/v1/groups/dev", km, {**group, "limits": {"requests_per_day": 1000}})
    assert changed.status_code == 200, changed.text
    refused = env.call("PUT", "/api/v1/keys/bob", km, {"name": "bob", "groups": ["dev"]})
    assert refused.status_code == 403 and "bob" in refused.json()["error"], refused.text

    created = [e for e in audit_events(env, object="keys/audited") if e["action"] == "keys.create"]
    assert len(created) == 1, created
    assert created[0]["before"] is None and created[0]["after"]["groups"] == ["dev"], created
    assert "dev-manager" in json.dumps(created[0]["actor"]), created[0]
    [replaced] = [e for e in audit_events(env, object="keys/audited") if e["action"] == "keys.replace"]
    assert "limits" not in replaced["before"], replaced
    assert replaced["after"]["limits"] == {"cost_usd_per_day": 2.5}, replaced
    [grouped] = [e for e in audit_events(env, object="groups/dev") if e["action"] == "groups.replace"]
    assert grouped["after"]["limits"] == {"requests_per_day": 1000} and "limits" not in (grouped["before"] or {})
    [bob] = [e for e in audit_events(env, object="keys/bob") if e["action"] == "keys.replace"]
    assert bob["status"] == 403 and bob["after"] is None, bob
    made = [e for e in audit_events(env, object="providers/sealed") if e["action"] == "providers.create"]
    assert made and made[0]["after"]["api_key_set"] is True, made

    everything = json.dumps(audit_events(env, limit=1000))
    logs = "".join((env.gw.workdir / f).read_text(errors="replace")
                   for f in os.listdir(env.gw.workdir) if f.endswith(".log"))
    assert "keys/audited" in logs, "serve logs each admin change (the log was read)"
    for secret in (plaintext, PROVIDER_SECRET, env.gw.admin_token, *env.tokens.values()):
        assert secret not in everything, f"a secret in the audit log: {secret[:8]}..."
        assert secret not in logs, f"a secret in serve's log: {secret[:8]}..."


def test_a_body_over_one_mib_is_413_json(env: Env):
    big = json.dumps({"name": "big", "models": ["x" * (1 << 20)]})
    r = httpx.post(f"{env.gw.admin_url}/api/v1/groups", content=big, timeout=30,
                   headers={"authorization": f"Bearer {env.tokens['owner']}", "content-type": "application/json"})
    assert r.status_code == 413, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert "too large" in r.json()["error"], r.text


def test_a_body_that_is_not_an_object_is_400(env: Env):
    before = env.call("GET", "/api/v1/groups", "owner").json()
    for body in ('["v\\u00fb\\u0019"]', '"dev"', "3"):
        r = httpx.post(f"{env.gw.admin_url}/api/v1/groups", content=body, timeout=30,
                       headers={"authorization": f"Bearer {env.tokens['owner']}", "content-type": "application/json"})
        assert r.status_code == 400, (body, r.text)
        assert r.json() == {"error": "body must be a JSON object"}, r.text
    assert env.call("GET", "/api/v1/groups", "owner").json() == before, "no group was made"


def test_a_group_name_with_a_control_character_is_400_naming_the_slug_rule(env: Env):
    for method, path, body in (("POST", "/api/v1/groups", {"name": "bad\u0007name"}),
                               ("PUT", "/api/v1/groups/bad%07name", {"name": "x"})):
        r = env.call(method, path, "owner", body)
        assert r.status_code == 400, r.text
        assert "slug" in r.text and "^[a-z0-9][a-z0-9-]{0,62}$" in r.text, r.text


def test_an_unknown_role_is_400(env: Env):
    r = env.call("POST", "/api/v1/users", "owner", {"name": "someone", "role": "superuser"})
    assert r.status_code == 400, r.text
    assert "superuser" in r.json()["error"] and "viewer" in r.json()["error"], r.text
