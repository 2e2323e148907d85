"""Single sign-on to the admin API with a real, certified OpenID provider: panva's
node-oidc-provider 8.x (tests/oidc/provider.mjs, installed from tests/oidc/package-lock.json by
tests/oidc/install.sh), in front of `ferrogate serve` on the machine's PostgreSQL (a schema of
this module's own, dropped after). The browser is httpx driven by hand: redirects followed one
by one, cookies kept per host:port, the provider's login and consent forms parsed and
submitted.

Covered: the authorization code flow with PKCE S256 to a key-manager session with its key
groups; what that role may and may not call; an owner; a user whose groups map to no role
(403, no session, audited); tampered, replayed and foreign states (400), an open redirect
(400), the provider's refusal (401); an ID token whose payload was forged under the provider's
real signature (401); a signing-key rotation at the provider followed (the JWKS fetched again
on the unknown kid); logout giving the provider's end-session URL, which the provider accepts;
and no code, token, state or cookie value in the serve log."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlencode, urlsplit, urlunsplit

import httpx
import pytest

from conftest import (REPO, STARTUP_TIMEOUT_S, Gateway, Proc, _bin, _free_port, _wait_until, gateway_config,
                      new_key, psql, schema_url, start_with_retries)

SCHEMA = f"fg_py_oidc_{secrets.token_hex(6)}"
OIDC_DIR = REPO / "tests" / "oidc"
CLIENT_ID = "ferrogate-admin"
CALLBACK = "/api/v1/session/oidc/callback"
JWKS_MIN_REFETCH_S = 10.5  # the sidecar fetches the provider's keys at most once per 10 s


# --------------------------------------------------------------------------- a browser

class _Forms(HTMLParser):
    """The forms of a page: action, method and the named inputs' values."""

    def __init__(self):
        super().__init__()
        self.forms: list[dict] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.forms.append({"action": a.get("action") or "", "method": (a.get("method") or "get").lower(),
                               "fields": {}})
        elif tag == "input" and self.forms and a.get("name"):
            self.forms[-1]["fields"][a["name"]] = a.get("value") or ""


def forms(html: str) -> list[dict]:
    p = _Forms()
    p.feed(html)
    return p.forms


class Browser:
    """Cookies per host:port (with Path and expiry), no automatic redirects."""

    def __init__(self):
        self.jar: dict[str, dict[str, tuple[str, str]]] = {}
        self.seen_cookie_values: list[str] = []

    def cookie(self, url: str, name: str) -> str | None:
        found = self.jar.get(urlsplit(url).netloc, {}).get(name)
        return found[0] if found else None

    def request(self, method: str, url: str, headers: dict | None = None, **kw) -> httpx.Response:
        u = urlsplit(url)
        path = u.path or "/"
        cookies = "; ".join(f"{n}={v}" for n, (v, p) in self.jar.get(u.netloc, {}).items()
                            if path.startswith(p))
        headers = dict(headers or {})
        if cookies:
            headers["cookie"] = cookies
        r = httpx.request(method, url, headers=headers, follow_redirects=False, timeout=30, **kw)
        for line in r.headers.get_list("set-cookie"):
            parts = [p.strip() for p in line.split(";")]
            name, _, value = parts[0].partition("=")
            attrs = {k.strip().lower(): v.strip() for k, _, v in (p.partition("=") for p in parts[1:])}
            gone = not value or attrs.get("max-age") == "0"
            if "expires" in attrs and not gone:
                try:
                    gone = parsedate_to_datetime(attrs["expires"]).timestamp() < time.time()
                except (TypeError, ValueError):
                    pass
            jar = self.jar.setdefault(u.netloc, {})
            if gone:
                jar.pop(name, None)
            else:
                jar[name] = (value, attrs.get("path") or "/")
                self.seen_cookie_values.append(value)
        return r

    def get(self, url: str, **kw) -> httpx.Response:
        return self.request("GET", url, **kw)


# --------------------------------------------------------------------------- the stack

@dataclass
class Op:
    issuer: str
    control: str

    def rotate(self) -> str:
        r = httpx.post(f"{self.control}/rotate", timeout=10)
        assert r.status_code == 200, r.text
        return r.json()["kid"]

    def tamper_next_token(self) -> None:
        assert httpx.post(f"{self.control}/tamper", timeout=10).status_code == 200


@dataclass
class Env:
    gw: Gateway
    op: Op
    secret: str
    last_jwks_fetch: float = 0.0
    secrets_seen: list[str] = field(default_factory=list)  # what must never be logged

    @property
    def admin(self) -> str:
        return self.gw.admin_url

    def serve_log(self) -> str:
        serve = next(p for p in self.gw.procs if p.name == "serve")
        return serve.log.read_text(errors="replace")


def install_provider() -> None:
    done = subprocess.run([str(OIDC_DIR / "install.sh")], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        pytest.fail(f"cannot install the test OpenID provider (tests/oidc/install.sh, status {done.returncode}):\n"
                    f"{done.stderr}")


def start(workdir: Path, attempt: int, secret: str) -> tuple[Gateway, Op]:
    """The provider and serve (no sim: nothing here calls a model), on fresh ports. A local
    copy of `conftest._start`:
    `admin.oidc.redirect_uri` needs the admin port before serve starts, which `_start`'s
    config callable is not given."""
    binary = str(_bin())
    sim_port, gw_port, admin_port, side_port, op_port, control_port = (_free_port() for _ in range(6))
    admin_url = f"http://127.0.0.1:{admin_port}"
    issuer = f"http://127.0.0.1:{op_port}"
    keys = {name: new_key() for name in ("alice", "bob", "old", "carol")}
    doc = gateway_config(sim_port, keys)
    doc["store"] = {"kind": "postgres", "url_env": "FG_OIDC_PG"}
    doc["admin"] = {"oidc": {
        "issuer": issuer, "client_id": CLIENT_ID, "client_secret_env": "FG_OIDC_CLIENT_SECRET",
        "redirect_uri": admin_url + CALLBACK, "scopes": ["email", "profile", "groups"],
        "role_map": {"gw-keys": "key-manager", "gw-owners": "owner"}, "key_groups": {"gw-keys": ["dev"]},
        "post_logout_redirect_uri": admin_url + "/ui/logged-out"}}
    cfg = workdir / "ferrogate.json"
    cfg.write_text(json.dumps(doc, indent=2))
    env = dict(os.environ)
    env.update({"FERROGATE_LOG": "info,ferrogate_sidecar=debug", "NO_COLOR": "1",
                "FERROGATE_ADMIN_TOKEN": secrets.token_hex(24), "FG_OIDC_CLIENT_SECRET": secret,
                "FG_OIDC_PG": schema_url(SCHEMA),
                "FERROGATE_TEST_ANTHROPIC_KEY": "sim", "FERROGATE_TEST_GEMINI_KEY": "sim"})
    env.pop("FERROGATE_INTERNAL_TOKEN", None)
    procs: list[Proc] = []
    try:
        procs.append(Proc("oidc", ["node", str(OIDC_DIR / "provider.mjs"), "--port", str(op_port),
                                   "--control-port", str(control_port), "--redirect-uri", admin_url + CALLBACK,
                                   "--post-logout-redirect-uri", admin_url + "/ui/logged-out",
                                   "--client-secret", secret], workdir / f"oidc.{attempt}.log", env))
        argv = [binary, "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{gw_port}",
                "--admin-listen", f"127.0.0.1:{admin_port}", "--sidecar-listen", f"127.0.0.1:{side_port}",
                "--workers", "1"]
        if os.environ.get("FERROGATE_FILTER_WASM"):
            argv += ["--filter", os.environ["FERROGATE_FILTER_WASM"]]
        procs.append(Proc("serve", argv, workdir / f"serve.{attempt}.log", env))
        gw = Gateway(base_url=f"http://127.0.0.1:{gw_port}/v1", gateway_url=f"http://127.0.0.1:{gw_port}",
                     admin_url=admin_url, admin_token=env["FERROGATE_ADMIN_TOKEN"], keys=keys, procs=procs,
                     workdir=workdir, sim_url=f"http://127.0.0.1:{sim_port}")
        _wait_until("the OpenID provider", procs, lambda: httpx.get(
            f"{issuer}/.well-known/openid-configuration", timeout=2).status_code == 200, STARTUP_TIMEOUT_S)
        _wait_until("serve admin /readyz", procs,
                    lambda: httpx.get(f"{admin_url}/readyz", timeout=2).status_code == 200, STARTUP_TIMEOUT_S)
        return gw, Op(issuer=issuer, control=f"http://127.0.0.1:{control_port}")
    except BaseException:
        for p in procs:
            p.stop()
        raise


@pytest.fixture(scope="module")
def env():
    if not shutil.which("node"):
        pytest.fail("the OIDC end-to-end test needs Node.js 18 or 20 (node) for tests/oidc/provider.mjs")
    install_provider()
    psql(f"CREATE SCHEMA {SCHEMA}")
    secret = secrets.token_hex(16)
    workdir = Path(tempfile.mkdtemp(prefix="ferrogate-oidc-"))
    try:
        started, errors = start_with_retries(lambda w, n: start(w, n, secret), workdir, ("oidc", "serve"))
        if started is None:
            pytest.fail("could not start the OpenID provider and serve:\n" + errors)
        gw, op = started
        e = Env(gw=gw, op=op, secret=secret)
        e.secrets_seen.append(secret)
        yield e
        for p in reversed(gw.procs):
            p.stop()
        if os.environ.get("FERROGATE_TEST_KEEP_LOGS"):
            print(f"\nferrogate OIDC test logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    finally:
        psql(f"DROP SCHEMA {SCHEMA} CASCADE")


# --------------------------------------------------------------------------- the flow

def through_provider(env: Env, b: Browser, url: str, login: str | None, abort: bool = False) -> str:
    """Follows the provider's pages from `url` (its authorization URL), logging in as `login`
    and consenting (or aborting at the login page); returns the callback URL it sends the
    browser to, not yet requested."""
    method, data = "GET", None
    for _ in range(20):
        r = b.request(method, url, data=data)
        method, data = "GET", None
        if r.status_code in (302, 303):
            url = urljoin(url, r.headers["location"])
            if url.startswith(env.admin + CALLBACK):
                return url
            continue
        assert r.status_code == 200, f"{r.status_code} from the provider at {url}: {r.text[:500]}"
        page = forms(r.text)
        assert page, f"no form at {url}: {r.text[:500]}"
        form = page[0]
        if "login" in form["fields"]:
            if abort:
                url = url.rstrip("/") + "/abort"
                continue
            form["fields"].update(login=login, password="any password")
        url, method, data = urljoin(url, form["action"]), form["method"].upper(), form["fields"]
    raise AssertionError("the provider never sent the browser back")


def start_login(env: Env, b: Browser, return_to: str = "/ui/after") -> str:
    r = b.get(f"{env.admin}/api/v1/session/oidc/login?" + urlencode({"return_to": return_to}))
    assert r.status_code == 302, r.text
    assert r.headers["cache-control"] == "no-store"
    pre = next(c for c in r.headers.get_list("set-cookie") if c.startswith("ferrogate_oidc="))
    assert "HttpOnly" in pre and "SameSite=Lax" in pre and "Path=/api/v1/session/oidc" in pre and "Max-Age=600" in pre
    return r.headers["location"]


def callback(env: Env, b: Browser, url: str) -> httpx.Response:
    q = parse_qs(urlsplit(url).query)
    env.secrets_seen += q.get("code", []) + q.get("state", [])
    r = b.get(url)
    env.secrets_seen += [v for v in b.seen_cookie_values if len(v) >= 16]
    return r


def login(env: Env, who: str, b: Browser | None = None) -> tuple[Browser, httpx.Response]:
    b = b or Browser()
    authorize = start_login(env, b)
    return b, callback(env, b, through_provider(env, b, authorize, who))


def session_headers(env: Env, b: Browser, csrf: str | None = None) -> dict:
    h = {"cookie": "; ".join(f"{n}={v}" for n, (v, _) in b.jar.get(urlsplit(env.admin).netloc, {}).items())}
    if csrf:
        h["x-csrf-token"] = csrf
    return h


def me(env: Env, b: Browser) -> httpx.Response:
    return httpx.get(f"{env.admin}/api/v1/session", headers=session_headers(env, b), timeout=10)


def session_cookie(r: httpx.Response) -> str | None:
    return next((c for c in r.headers.get_list("set-cookie") if "ferrogate_session=" in c), None)


# --------------------------------------------------------------------------- tests

def test_code_flow_with_pkce_opens_a_key_manager_session(env: Env):
    b = Browser()
    authorize = start_login(env, b)
    u = urlsplit(authorize)
    assert f"{u.scheme}://{u.netloc}" == env.op.issuer, authorize
    q = {k: v[0] for k, v in parse_qs(u.query).items()}
    assert q["response_type"] == "code" and q["client_id"] == CLIENT_ID
    assert q["redirect_uri"] == env.admin + CALLBACK
    assert q["scope"].split() == ["openid", "email", "profile", "groups"]
    assert q["code_challenge_method"] == "S256" and len(q["code_challenge"]) == 43
    assert len(q["state"]) == 43 and len(q["nonce"]) == 43
    digest = hashlib.sha256(q["state"].encode()).hexdigest()
    assert psql(f"SELECT return_to FROM {SCHEMA}.fg_admin_oidc_flows WHERE state_digest = '\\x{digest}'") == "/ui/after"

    r = callback(env, b, through_provider(env, b, authorize, "kate"))
    env.last_jwks_fetch = time.monotonic()
    assert r.status_code == 302, r.text
    assert r.headers["location"] == "/ui/after"
    assert session_cookie(r) and "SameSite=Strict" in session_cookie(r)
    assert b.cookie(env.admin, "ferrogate_oidc") is None, "the pre-session cookie is cleared"
    assert psql(f"SELECT count(*) FROM {SCHEMA}.fg_admin_oidc_flows WHERE state_digest = '\\x{digest}'") == "0"

    who = me(env, b)
    assert who.status_code == 200, who.text
    body = who.json()
    assert (body["name"], body["role"], body["key_groups"]) == ("kate", "key-manager", ["dev"]), body
    row = psql(f"SELECT oidc_issuer, oidc_subject, role FROM {SCHEMA}.fg_admin_users WHERE name = 'kate'")
    assert row == f"{env.op.issuer}|kate|key-manager", row
    audit = psql(f"SELECT actor, detail, status FROM {SCHEMA}.fg_audit WHERE action = 'authn_login_success'")
    assert "user:kate|oidc|302" in audit.splitlines(), audit

    keys = httpx.get(f"{env.admin}/api/v1/keys", headers=session_headers(env, b), timeout=10)
    assert keys.status_code == 200, keys.text
    made = httpx.post(f"{env.admin}/api/v1/providers", headers=session_headers(env, b, body["csrf_token"]),
                      json={"name": "x", "kind": "openai_compatible", "base_url": "http://127.0.0.1:9"}, timeout=10)
    assert made.status_code == 403, made.text


def test_an_owner_group_gives_the_owner_role(env: Env):
    b, r = login(env, "olga")
    assert r.status_code == 302, r.text
    body = me(env, b).json()
    assert (body["name"], body["role"], body["key_groups"]) == ("olga", "owner", []), body


def test_a_user_whose_groups_map_to_no_role_is_refused(env: Env):
    b, r = login(env, "nobody")
    assert r.status_code == 403, r.text
    assert "no role for this user" in r.json()["error"] and "other" in r.json()["error"]
    assert session_cookie(r) is None
    assert me(env, b).status_code == 401
    assert psql(f"SELECT count(*) FROM {SCHEMA}.fg_admin_users WHERE name = 'nobody'") == "0"
    fails = psql(f"SELECT object, status FROM {SCHEMA}.fg_audit WHERE action = 'authn_login_fail'")
    assert "users/nobody|403" in fails.splitlines(), fails


def test_tampered_replayed_and_foreign_states_and_open_redirects_are_refused(env: Env):
    b = Browser()
    url = through_provider(env, b, start_login(env, b), "kate")
    u = urlsplit(url)
    q = parse_qs(u.query)
    tampered = dict(q, state=[q["state"][0][:-2] + ("AA" if not q["state"][0].endswith("AA") else "BB")])
    r = callback(env, b, urlunsplit(u._replace(query=urlencode(tampered, doseq=True))))
    assert r.status_code == 400 and "state" in r.json()["error"], r.text
    # Another browser (no pre-session cookie) presenting this browser's code and state.
    other = callback(env, Browser(), url)
    assert other.status_code == 400 and "not started in this browser" in other.json()["error"], other.text
    # That consumed the flow: single use, even for the right browser now.
    again = callback(env, b, url)
    assert again.status_code == 400 and "state" in again.json()["error"], again.text
    assert session_cookie(again) is None
    for bad in ("//evil.example/x", "https://evil.example/", "/\\evil.example"):
        r = Browser().get(f"{env.admin}/api/v1/session/oidc/login?" + urlencode({"return_to": bad}))
        assert r.status_code == 400 and "return_to" in r.json()["error"], (bad, r.text)


def test_the_providers_refusal_is_a_401(env: Env):
    b = Browser()
    url = through_provider(env, b, start_login(env, b), None, abort=True)
    assert "error=access_denied" in url, url
    r = callback(env, b, url)
    assert r.status_code == 401 and "access_denied" in r.json()["error"], r.text
    assert session_cookie(r) is None


def test_an_id_token_forged_under_the_providers_signature_is_refused(env: Env):
    env.op.tamper_next_token()
    b, r = login(env, "kate")
    assert r.status_code == 401, r.text
    assert "signature does not verify" in r.json()["error"], r.text
    assert session_cookie(r) is None
    fails = psql(f"SELECT status, detail FROM {SCHEMA}.fg_audit WHERE action = 'authn_login_fail'")
    assert "401|oidc: the ID token's signature does not verify" in fails.splitlines(), fails


def test_a_signing_key_rotation_at_the_provider_is_followed(env: Env):
    fetched = env.serve_log().count("OIDC signing keys fetched")
    assert fetched == 1, "one fetch so far: every token was signed with the first key"
    wait = JWKS_MIN_REFETCH_S - (time.monotonic() - env.last_jwks_fetch)
    if wait > 0:
        time.sleep(wait)
    kid = env.op.rotate()
    b, r = login(env, "kate")
    assert r.status_code == 302, r.text
    header = json.loads(base64.urlsafe_b64decode(_id_token_of(env, b).split(".")[0] + "=="))
    assert header["kid"] == kid, "the new key signed"
    assert env.serve_log().count("OIDC signing keys fetched") == 2, "fetched again for the new kid"
    assert me(env, b).json()["role"] == "key-manager"


def _id_token_of(env: Env, b: Browser) -> str:
    """The session's ID token, as the database keeps it for logout."""
    value = b.cookie(env.admin, "ferrogate_session") or b.cookie(env.admin, "__Host-ferrogate_session")
    digest = hashlib.sha256(value.encode()).hexdigest()
    token = psql(f"SELECT id_token FROM {SCHEMA}.fg_admin_sessions WHERE id_digest = '\\x{digest}'")
    env.secrets_seen.append(token)
    return token


def test_logout_gives_the_providers_end_session_url(env: Env):
    b, r = login(env, "kate")
    assert r.status_code == 302, r.text
    id_token = _id_token_of(env, b)
    csrf = me(env, b).json()["csrf_token"]
    out = httpx.delete(f"{env.admin}/api/v1/session", headers=session_headers(env, b, csrf), timeout=10)
    assert out.status_code == 200, out.text
    url = out.json()["logout_url"]
    u = urlsplit(url)
    q = {k: v[0] for k, v in parse_qs(u.query).items()}
    assert f"{u.scheme}://{u.netloc}{u.path}" == f"{env.op.issuer}/session/end", url
    assert q == {"id_token_hint": id_token, "client_id": CLIENT_ID,
                 "post_logout_redirect_uri": env.admin + "/ui/logged-out"}, q
    assert me(env, b).status_code == 401, "the session is gone"
    # The provider accepts the hint and the redirect, asks, and sends the browser back.
    page = b.get(url)
    assert page.status_code == 200, page.text[:500]
    form = forms(page.text)[0]
    done = b.request("POST", urljoin(url, form["action"]), data={**form["fields"], "logout": "yes"})
    for _ in range(5):
        if not done.headers.get("location", "").startswith(env.op.issuer):
            break
        done = b.get(urljoin(env.op.issuer, done.headers["location"]))
    assert done.status_code in (302, 303) and done.headers["location"] == env.admin + "/ui/logged-out", done.text


def test_the_serve_log_holds_no_code_token_state_or_cookie(env: Env):
    log = env.serve_log()
    assert "OIDC signing keys fetched" in log, "the log is the serve log"
    leaked = [s[:12] + "..." for s in env.secrets_seen if s and s in log]
    assert not leaked, f"secrets in the serve log: {leaked}"
    assert len(env.secrets_seen) > 10
    assert not re.search(r"eyJ[A-Za-z0-9_-]{10,}\.eyJ", log), "a JWT in the serve log"
