"""The Traefik build with the official OpenAI and Anthropic SDKs (non-streamed calls).

The deployment a Traefik user runs, on loopback: `ferrogate sidecar` keeps the snapshot file
and ingests the usage inbox on a directory that is the plugin's mount; `ferrogate http-wasm`
runs `ferrogate_traefik.wasm` the way Traefik does, with one internal route per provider
matched on the routing header and Traefik's `buffering` middleware after it
(`followedByBuffering: true`); `ferrogate sim` answers in every provider dialect. A second
deployment is the default topology (`traefik/examples/dynamic.yml`: no `buffering`), where a
rewritten body must keep the client's length.

Environment: FERROGATE_BIN, FERROGATE_TRAEFIK_WASM (default: the workspace's release build).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from cloud_sims import INVOKE_TEXT, CloudSim
from test_key_pools import ENV as POOL_ENV, start_upstream
from conftest import (REPO, SIM_ITL_MS, SIM_OUTPUT_TOKENS, STARTUP_TIMEOUT_S, USAGE_TIMEOUT_S, Proc,
                      _bin, _free_port, _wait_until, digest, new_key, start_with_retries)

TRAEFIK_WASM = Path(os.environ.get("FERROGATE_TRAEFIK_WASM")
                    or REPO / "target" / "wasm32-wasip1" / "release" / "ferrogate_traefik.wasm")


@dataclass
class Deployment:
    url: str  # the Traefik build's listener
    admin_url: str
    admin_token: str
    key: str
    procs: list[Proc]
    workdir: Path

    def usage_record(self, request_id: str) -> dict:
        deadline = time.monotonic() + USAGE_TIMEOUT_S
        while True:
            r = httpx.get(f"{self.admin_url}/api/v1/usage", params={"key": "dana", "limit": 200},
                          headers={"authorization": f"Bearer {self.admin_token}"}, timeout=10)
            for rec in r.json().get("records", []):
                if rec.get("request_id") == request_id:
                    return rec
            if time.monotonic() > deadline:
                pytest.fail(f"no usage record of {request_id} reached the sidecar: {r.text[:800]}")
            time.sleep(0.1)


BEDROCK_ID = "meta.llama3-1-70b-instruct-v1:0"
BEDROCK_CLAUDE_ID = "anthropic.claude-3-haiku-20240307-v1:0"
BEDROCK_ENV = {"FG_T_TR_AKID": "AKIDTRAEFIK" + secrets.token_hex(4).upper(), "FG_T_TR_SECRET": secrets.token_urlsafe(30)}

# Aliases longer than their upstream names: a rewritten body is shorter, so it is padded.
LONG_OA = "oa-chat-with-a-long-public-alias"
LONG_AN = "an-chat-with-a-long-public-alias"


def _config(sim: str, key: str, cloud: str | None = None, pool: str | None = None) -> dict:
    doc = {
        "providers": [
            {"name": "local", "kind": "openai_compatible", "base_url": sim},
            {"name": "claude", "kind": "anthropic", "base_url": sim, "api_key_env": "FERROGATE_TEST_ANTHROPIC_KEY"},
        ],
        "models": [
            {"name": "oa-chat", "targets": [{"provider": "local", "model": "sim-small"}]},
            {"name": "an-chat", "targets": [{"provider": "claude", "model": "sim-claude"}]},
            {"name": LONG_OA, "targets": [{"provider": "local", "model": "sim-small"}]},
            {"name": LONG_AN, "targets": [{"provider": "claude", "model": "sim-claude"}]},
        ],
        "keys": [{"name": "dana", "digest": digest(key), "models": ["*"]}],
    }
    if pool:  # a provider with a key pool (test_key_pools.PoolUpstream), keys from the environment
        doc["providers"].append({"name": "pool", "kind": "openai_compatible", "base_url": pool,
                                 "api_keys_env": list(POOL_ENV.values())})
        doc["models"].append({"name": "pooled", "targets": [{"provider": "pool", "model": "stand-model"}]})
    if cloud:  # a Bedrock provider (cloud_sims.CloudSim), keys from the environment
        doc["providers"].append({"name": "bedrock", "kind": "bedrock", "region": "eu-west-1", "base_url": cloud,
                                 "credentials": {"source": "aws_env", "access_key_id_env": "FG_T_TR_AKID",
                                                 "secret_access_key_env": "FG_T_TR_SECRET"}})
        doc["models"].append({"name": "br-chat", "targets": [{"provider": "bedrock", "model": BEDROCK_ID}]})
        doc["models"].append({"name": "br-claude", "targets": [{"provider": "bedrock", "model": BEDROCK_CLAUDE_ID}]})
    return doc


def _start(workdir: Path, attempt: int, buffering: bool = True, cloud: CloudSim | None = None,
           pool: str | None = None) -> Deployment:
    binary = str(_bin())
    if not TRAEFIK_WASM.is_file():
        pytest.exit(f"{TRAEFIK_WASM} is missing (make wasm)", returncode=2)
    sim_port, tr_port, admin_port, side_port = (_free_port() for _ in range(4))
    key, admin_token = new_key(), secrets.token_hex(24)
    mount = workdir / f"mount.{attempt}"
    mount.mkdir()
    cfg = workdir / f"ferrogate.{attempt}.json"
    cfg.write_text(json.dumps(_config(f"http://127.0.0.1:{sim_port}", key, cloud.url if cloud else None, pool)))
    settings = workdir / f"settings.{attempt}.json"
    settings.write_text(json.dumps({"snapshotFile": "/ferrogate/snapshot.json", "usageFile": "/ferrogate/usage.jsonl",
                                    "followedByBuffering": buffering}))
    env = dict(os.environ, NO_COLOR="1", FERROGATE_ADMIN_TOKEN=admin_token,
               FERROGATE_TEST_ANTHROPIC_KEY="sim-key-" + secrets.token_hex(8), **BEDROCK_ENV)
    env.pop("FERROGATE_INTERNAL_TOKEN", None)
    procs: list[Proc] = []
    try:
        procs.append(Proc("sim", [binary, "sim", "--listen", f"127.0.0.1:{sim_port}", "--model", "sim-small",
                                  "--model", "sim-claude", "--itl-ms", str(SIM_ITL_MS),
                                  "--output-tokens", str(SIM_OUTPUT_TOKENS)], workdir / f"sim.{attempt}.log", env))
        procs.append(Proc("sidecar", [binary, "sidecar", "--config", str(cfg), "--sidecar-listen",
                                      f"127.0.0.1:{side_port}", "--admin-listen", f"127.0.0.1:{admin_port}",
                                      "--snapshot-file", str(mount / "snapshot.json"),
                                      "--usage-inbox", str(mount / "usage.jsonl")],
                          workdir / f"sidecar.{attempt}.log", env))
        sim = f"http://127.0.0.1:{sim_port}"
        procs.append(Proc("http-wasm", [binary, "http-wasm", "--wasm", str(TRAEFIK_WASM), "--settings", str(settings),
                                        "--listen", f"127.0.0.1:{tr_port}", "--mount", f"{mount}:/ferrogate",
                                        "--route", f"local={sim}", "--route", f"claude={sim}"]
                          + (["--route", f"bedrock={cloud.url}"] if cloud else [])
                          + (["--route", f"pool={pool}"] if pool else [])
                          + (["--buffering"] if buffering else []),
                          workdir / f"http-wasm.{attempt}.log", env))
        d = Deployment(url=f"http://127.0.0.1:{tr_port}", admin_url=f"http://127.0.0.1:{admin_port}",
                       admin_token=admin_token, key=key, procs=procs, workdir=workdir)
        _wait_until("the Traefik build to serve /v1/models", procs,
                    lambda: httpx.get(f"{d.url}/v1/models", timeout=5,
                                      headers={"authorization": f"Bearer {key}"}).status_code == 200,
                    STARTUP_TIMEOUT_S)
        return d
    except BaseException:
        for p in procs:
            p.stop()
        raise


def deployment(prefix: str, what: str, **start):
    """A Traefik deployment (`_start` with `start`) in a fresh work directory, stopped and
    removed afterwards: a fixture's body."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        d, errors = start_with_retries(lambda w, a: _start(w, a, **start), workdir, ("sim", "sidecar", "http-wasm"))
        if d is None:
            pytest.fail(f"could not start the {what}:\n" + errors)
        yield d
        for p in reversed(d.procs):
            p.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def traefik():
    yield from deployment("ferrogate-traefik-", "Traefik deployment")


@pytest.fixture(scope="module")
def traefik_default():
    """The default topology: no `buffering` middleware, `followedByBuffering: false`."""
    yield from deployment("ferrogate-traefik-default-", "default Traefik deployment", buffering=False)


def test_openai_sdk_chat_through_the_traefik_build(traefik):
    client = openai.OpenAI(base_url=f"{traefik.url}/v1", api_key=traefik.key, max_retries=0, timeout=30)
    raw = client.chat.completions.with_raw_response.create(
        model="oa-chat", messages=[{"role": "user", "content": "hello"}], max_tokens=8)
    answer = raw.parse()
    assert answer.choices[0].message.content
    assert raw.headers["x-ferrogate-provider"] == "local"
    record = traefik.usage_record(raw.headers["x-request-id"])
    assert record["model_requested"] == "oa-chat" and record["provider"] == "local"
    assert record["completion_tokens"] == answer.usage.completion_tokens
    assert record["user_agent"] == f"OpenAI/Python {openai.__version__}", "the client's User-Agent, as sent"


def test_anthropic_sdk_messages_through_the_traefik_build(traefik):
    client = anthropic.Anthropic(base_url=traefik.url, api_key=traefik.key, max_retries=0, timeout=30)
    raw = client.messages.with_raw_response.create(
        model="an-chat", max_tokens=8, messages=[{"role": "user", "content": "hello"}])
    msg = raw.parse()
    assert msg.content[0].text
    record = traefik.usage_record(raw.headers["x-request-id"])
    assert record["provider"] == "claude"
    assert record["user_agent"] == f"Anthropic/Python {anthropic.__version__}"


def test_openai_sdk_to_an_anthropic_provider_is_translated(traefik):
    client = openai.OpenAI(base_url=f"{traefik.url}/v1", api_key=traefik.key, max_retries=0, timeout=30)
    answer = client.chat.completions.create(model="an-chat", messages=[{"role": "user", "content": "hi"}], max_tokens=8)
    assert answer.object == "chat.completion" and answer.model == "an-chat"
    assert answer.usage.prompt_tokens > 0


def test_sdk_errors_are_typed(traefik):
    client = openai.OpenAI(base_url=f"{traefik.url}/v1", api_key="fg-not-a-key", max_retries=0, timeout=30)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="oa-chat", messages=[{"role": "user", "content": "hi"}])
    client = anthropic.Anthropic(base_url=traefik.url, api_key=traefik.key, max_retries=0, timeout=30)
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="no-such-model", max_tokens=8, messages=[{"role": "user", "content": "hi"}])


def test_sdks_through_the_default_topology(traefik_default):
    """Without `buffering`, a rewritten body must keep the client's length (traefik/README.md,
    "Request body length"). The SDKs send compact JSON, so there is no whitespace to lose."""
    d = traefik_default
    oa = openai.OpenAI(base_url=f"{d.url}/v1", api_key=d.key, max_retries=0, timeout=30)
    an = anthropic.Anthropic(base_url=d.url, api_key=d.key, max_retries=0, timeout=30)
    # An alias longer than the upstream name: the rewrite is padded and the call is served.
    raw = oa.chat.completions.with_raw_response.create(
        model=LONG_OA, messages=[{"role": "user", "content": "hello"}], max_tokens=8)
    assert raw.parse().choices[0].message.content
    record = d.usage_record(raw.headers["x-request-id"])
    assert record["model_requested"] == LONG_OA and record["status"] == 200
    assert an.messages.create(model=LONG_AN, max_tokens=8, messages=[{"role": "user", "content": "hello"}]).content
    # "oa-chat" becomes "sim-small", two bytes longer, and cannot fit: a clear error in the
    # SDK's own shape, naming the lengths and the fix, never a bare 500.
    with pytest.raises(openai.InternalServerError) as e:
        oa.chat.completions.create(model="oa-chat", messages=[{"role": "user", "content": "hello"}], max_tokens=8)
    message = e.value.body["message"]
    assert "Content-Length" in message and "followedByBuffering: true" in message, e.value.body
    with pytest.raises(anthropic.InternalServerError) as e:
        an.messages.create(model="an-chat", max_tokens=8, messages=[{"role": "user", "content": "hello"}])
    assert e.value.body["type"] == "error", e.value.body
    message = e.value.body["error"]["message"]
    assert "Content-Length" in message and "followedByBuffering: true" in message, e.value.body


@pytest.fixture(scope="module")
def traefik_bedrock():
    """The Traefik build with a Bedrock provider: its requests are signed in the middleware
    (SigV4) and checked by botocore's signer in the stand-in (cloud_sims.py: Bedrock is SaaS)."""
    cloud = CloudSim()
    cloud.aws_keys[BEDROCK_ENV["FG_T_TR_AKID"]] = (BEDROCK_ENV["FG_T_TR_SECRET"], None)
    cloud.start()
    try:
        for d in deployment("ferrogate-traefik-bedrock-", "Traefik deployment", cloud=cloud):
            d.cloud = cloud
            yield d
    finally:
        cloud.stop()


def test_bedrock_through_the_traefik_build_is_signed(traefik_bedrock):
    d = traefik_bedrock
    client = openai.OpenAI(base_url=f"{d.url}/v1", api_key=d.key, max_retries=0, timeout=30.0)
    # The sidecar reads the keys into the snapshot file the middleware polls: until then, 503.
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        try:
            done = client.chat.completions.create(model="br-chat", messages=[{"role": "user", "content": "hi"}])
            break
        except openai.InternalServerError as e:
            assert "no credentials" in str(e) and time.monotonic() < deadline, str(e)
            time.sleep(0.2)
    assert done.choices[0].message.content == "Hello from Bedrock"
    seen = d.cloud.last("/model/")
    assert seen.path == "/model/meta.llama3-1-70b-instruct-v1%3A0/converse"
    assert "/eu-west-1/bedrock/aws4_request" in seen.headers["authorization"]
    # Claude through InvokeModel: its event stream reaches an Anthropic client as Anthropic's
    # server-sent events, betas in the signed body.
    an = anthropic.Anthropic(base_url=d.url, api_key=d.key, max_retries=0, timeout=30.0)
    with an.beta.messages.stream(model="br-claude", max_tokens=20, messages=[{"role": "user", "content": "hi"}],
                                 betas=["token-efficient-tools-2025-02-19"]) as s:
        assert "".join(s.text_stream) == INVOKE_TEXT and s.get_final_message().usage.output_tokens == 6
    seen = d.cloud.last("/model/")
    assert seen.path == "/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream"
    assert seen.json()["anthropic_beta"] == ["token-efficient-tools-2025-02-19"]


@pytest.fixture(scope="module")
def traefik_pool():
    """The Traefik build with a provider of several keys in front of test_key_pools' stand-in
    (one key rate-limited once with `Retry-After: 2`, one revoked, two good)."""
    keys = {role: f"sk-pool-{role}-{secrets.token_hex(16)}" for role in POOL_ENV if role != "unset"}
    upstream = start_upstream(keys)
    try:
        with pytest.MonkeyPatch.context() as env:
            for role, var in POOL_ENV.items():
                env.setenv(var, keys[role]) if role in keys else env.delenv(var, raising=False)
            for d in deployment("ferrogate-traefik-pool-", "Traefik deployment", pool=upstream.url):
                d.upstream = upstream
                yield d
    finally:
        upstream.server.shutdown()


def test_the_middleware_spreads_a_key_pool_and_rests_refused_keys(traefik_pool):
    """Round-robin over the usable keys; the 429 key rests for its Retry-After and returns (an
    event waited for); the revoked key is never used again (per instance: Traefik's instances
    share no memory, and sequential requests reuse one)."""
    d, up = traefik_pool, traefik_pool.upstream
    client = httpx.Client(base_url=d.url, headers={"authorization": f"Bearer {d.key}"}, timeout=30)
    deadline = time.monotonic() + 60

    def until(what, done):
        while not done():
            assert time.monotonic() < deadline, f"{what}: the upstream saw {up.roles()}"
            client.post("/v1/chat/completions", json={"model": "pooled", "messages": [{"role": "user", "content": "?"}]})
            time.sleep(0.02)

    until("both bad keys answered", lambda: {"limited", "revoked"} <= set(up.roles()))
    both_seen = len(up.roles())
    until("the limited key was used again", lambda: up.roles().count("limited") >= 2)
    roles = up.roles()
    resting = roles[both_seen:-1]
    assert set(resting) == {"good_a", "good_b"}, roles
    assert roles.count("revoked") == 1, roles
    limited = up.times("limited")
    assert limited[1] - limited[0] >= 2 - 0.1, "the rest lasted its Retry-After"
