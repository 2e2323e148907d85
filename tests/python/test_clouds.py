"""Cloud providers end to end: AWS Bedrock (SigV4 signed by the filter, Converse and
ConverseStream translated for every client, Claude through InvokeModel), Google Vertex AI (tokens minted by the sidecar
from a service-account key), Azure OpenAI (api-key and Entra ID), through `ferrogate serve`
and the official SDKs.

The clouds themselves are SaaS and cannot run here: `cloud_sims.CloudSim` stands in for them,
and checks what arrives with the clouds' own libraries (botocore's SigV4 signer, google-auth's
JWT verification); the Azure request shape is compared with what the official `AzureOpenAI`
client sends.
"""

from __future__ import annotations

import json
import os
import secrets
import time
import urllib.parse
from pathlib import Path

import anthropic
import httpx
import httpx2
import openai
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google import genai
from google.genai import types as gtypes

from cloud_sims import BEDROCK_USAGE, INVOKE_TEXT, CloudSim
from conftest import Gateway, _start, own_gateway

KEY = "carol"
CLAUDE_ID = "anthropic.claude-3-haiku-20240307-v1:0"
LLAMA_ID = "meta.llama3-1-70b-instruct-v1:0"
ENV = {
    "FG_T_AKID": "AKIDEXAMPLE" + secrets.token_hex(4).upper(),
    "FG_T_SECRET": secrets.token_urlsafe(30),
    "FG_T_BAD_SECRET": "wrong-" + secrets.token_urlsafe(20),
    "FG_T_AZURE_KEY": "az-" + secrets.token_hex(16),
    "FG_T_ENTRA_SECRET": "entra-" + secrets.token_hex(12),
}
GOOGLE_EXPIRES_IN = 310  # the sidecar renews 5 minutes before expiry: a new token every ~10 s


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> CloudSim:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    s = CloudSim(google_expires_in=GOOGLE_EXPIRES_IN, entra_secret=ENV["FG_T_ENTRA_SECRET"],
                 azure_api_key=ENV["FG_T_AZURE_KEY"])
    s.google_public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo)
    s.aws_keys[ENV["FG_T_AKID"]] = (ENV["FG_T_SECRET"], None)
    s.start()
    d = tmp_path_factory.mktemp("clouds")
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    s.sa_file = d / "sa.json"
    s.sa_file.write_text(json.dumps({
        "type": "service_account", "project_id": "my-proj-1", "private_key_id": "kid-" + secrets.token_hex(4),
        "private_key": pem, "client_email": "gw@my-proj-1.iam.gserviceaccount.com", "client_id": "1",
        "token_uri": f"{s.url}/google/token"}))
    s.web_identity = d / "token"
    s.web_identity.write_text("eyJhbGciOi.web-identity." + secrets.token_hex(8))
    yield s
    s.stop()


def cloud_config(sim: CloudSim):
    def edit(doc: dict) -> dict:
        url = sim.url
        doc["providers"] += [
            {"name": "bedrock", "kind": "bedrock", "region": "us-east-1", "base_url": url,
             "credentials": {"source": "aws_env", "access_key_id_env": "FG_T_AKID",
                             "secret_access_key_env": "FG_T_SECRET"}},
            {"name": "bedrock-bad", "kind": "bedrock", "region": "us-east-1", "base_url": url,
             "credentials": {"source": "aws_env", "access_key_id_env": "FG_T_AKID",
                             "secret_access_key_env": "FG_T_BAD_SECRET"}},
            {"name": "bedrock-irsa", "kind": "bedrock", "region": "us-west-2", "base_url": url,
             "credentials": {"source": "aws_web_identity", "role_arn": "arn:aws:iam::123456789012:role/gw",
                             "token_file": str(sim.web_identity), "token_url": f"{url}/sts/"}},
            {"name": "azure", "kind": "azure_openai", "base_url": url, "api_version": "2024-10-21",
             "api_key_env": "FG_T_AZURE_KEY"},
            {"name": "azure-entra", "kind": "azure_openai", "base_url": url,
             "credentials": {"source": "azure_client_credentials", "tenant_id": "t1", "client_id": "c1",
                             "client_secret_env": "FG_T_ENTRA_SECRET",
                             "token_url": f"{url}/t1/oauth2/v2.0/token"}},
            {"name": "vertex", "kind": "vertex", "project": "my-proj-1", "region": "us-east5", "base_url": url,
             "credentials": {"source": "gcp_service_account", "key_file": str(sim.sa_file)}},
        ]
        models = {
            "br-llama": ("bedrock", LLAMA_ID),
            "br-fail": ("bedrock", "us.fail.model-v1:0"),
            "br-bad": ("bedrock-bad", LLAMA_ID),
            "br-irsa": ("bedrock-irsa", LLAMA_ID),
            "br-claude": ("bedrock", CLAUDE_ID),
            "br-claude-fail": ("bedrock", "us.anthropic.fail-v1:0"),
            "az": ("azure", "gpt4o-deploy"),
            "az-entra": ("azure-entra", "gpt4o-deploy"),
            "vx-gem": ("vertex", "gemini-2.5-flash"),
            "vx-claude": ("vertex", "claude-sonnet-4@20250514"),
        }
        doc["models"] += [{"name": n, "targets": [{"provider": p, "model": m}]} for n, (p, m) in models.items()]
        next(g for g in doc["groups"] if g["name"] == "sdk")["models"] += list(models)
        return doc
    return edit


@pytest.fixture(scope="module")
def gw(sim: CloudSim) -> Gateway:
    saved = {k: os.environ.get(k) for k in ENV}
    os.environ.update(ENV)
    try:
        yield from own_gateway("fg-clouds-", lambda w, n: _start(w, n, cloud_config(sim)))
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


SIGNED_IN = ("br-llama", "br-irsa", "az-entra", "vx-gem")


@pytest.fixture(scope="module")
def oa(gw: Gateway) -> openai.OpenAI:
    """carol's client, once the sidecar has signed in to every cloud and the filter holds the
    credentials (until then those providers answer 503)."""
    deadline = time.monotonic() + 60
    for model in SIGNED_IN:
        while True:
            r = httpx.post(f"{gw.base_url}/chat/completions", timeout=30,
                           headers={"authorization": f"Bearer {gw.keys[KEY]}"},
                           json={"model": model, "messages": HI})
            if r.status_code != 503:
                break
            gw.check_alive()
            if time.monotonic() > deadline:
                pytest.fail(f"{model} still answers 503 after 60 s: {r.text}")
            time.sleep(0.1)
    return gw.client(KEY)


@pytest.fixture(scope="module")
def an(gw: Gateway) -> anthropic.Anthropic:
    c = anthropic.Anthropic(base_url=gw.gateway_url, api_key=gw.keys[KEY], max_retries=0, timeout=30.0)
    gw.clients.append(c)
    return c


@pytest.fixture(scope="module")
def ge(gw: Gateway) -> genai.Client:
    c = genai.Client(api_key=gw.keys[KEY], vertexai=False, http_options=gtypes.HttpOptions(
        base_url=gw.gateway_url, api_version="v1beta", timeout=30_000))
    gw.clients.append(c)
    return c


def log_count(gw: Gateway, proc: str, needle: str) -> int:
    p = next(p for p in gw.procs if p.name == proc)
    return p.log.read_bytes().decode("utf-8", "replace").count(needle)


def wait_for_log(gw: Gateway, proc: str, needle: str, count: int, timeout: float) -> None:
    """Waits for the `count`th line holding `needle` in `proc`'s log (an event, not a sleep)."""
    deadline = time.monotonic() + timeout
    while log_count(gw, proc, needle) < count:
        gw.check_alive()
        if time.monotonic() > deadline:
            pytest.fail(f"{proc} logged {needle!r} {log_count(gw, proc, needle)} times, not {count}, in {timeout}s")
        time.sleep(0.1)


HI = [{"role": "user", "content": "hi"}]
WEATHER = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                             "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                            "required": ["city"]}}}]


# --------------------------------------------------------------------------- Bedrock

def test_bedrock_request_is_signed_as_botocore_signs(gw, sim, oa):
    r = oa.chat.completions.with_raw_response.create(model="br-llama", messages=HI, max_tokens=20)
    done = r.parse()
    assert done.choices[0].message.content == "Hello from Bedrock"
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (11, 4)
    seen = sim.last("/model/")
    # botocore escapes every reserved byte of the model id; the sim re-signed it and agreed.
    assert seen.path == "/model/meta.llama3-1-70b-instruct-v1%3A0/converse"
    assert seen.headers["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={ENV['FG_T_AKID']}/")
    assert "SignedHeaders=content-type;host;x-amz-date," in seen.headers["authorization"]
    body = seen.json()
    assert body["messages"] == [{"role": "user", "content": [{"text": "hi"}]}]
    assert body["inferenceConfig"]["maxTokens"] == 20 and "model" not in body
    rec = gw.wait_usage(r.headers["x-request-id"], key=KEY, model="br-llama")
    assert (rec["prompt_tokens"], rec["completion_tokens"], rec["provider"]) == (11, 4, "bedrock")


def test_bedrock_refuses_tampering_a_stale_date_and_a_wrong_secret(gw, sim, oa):
    oa.chat.completions.create(model="br-llama", messages=HI)
    seen = sim.last("/model/")
    url = f"{sim.url}{seen.path}"
    headers = {k: v for k, v in seen.headers.items() if k not in ("content-length", "transfer-encoding")}
    assert httpx.post(url, content=seen.body, headers=headers).status_code == 200, "a replay verifies"
    tampered = seen.body.replace(b'"hi"', b'"ho"')
    r = httpx.post(url, content=tampered, headers=headers)
    assert r.status_code == 403 and "does not match" in r.json()["message"]
    stale = dict(headers, **{"x-amz-date": "20200101T000000Z"})
    r = httpx.post(url, content=seen.body, headers=stale)
    assert r.status_code == 403 and r.json()["message"] == "Signature expired"
    with pytest.raises(openai.PermissionDeniedError) as e:
        oa.chat.completions.create(model="br-bad", messages=HI)
    assert "signature" in str(e.value).lower()


def test_bedrock_stream_through_three_sdks(gw, sim, oa, an, ge):
    chunks = list(oa.chat.completions.create(model="br-llama", messages=HI, stream=True,
                                             stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello from Bedrock"
    assert chunks[-1].usage.prompt_tokens == 11 and chunks[-1].usage.completion_tokens == 4
    assert sim.last("/model/").path.endswith("%3A0/converse-stream")

    with an.messages.stream(model="br-llama", max_tokens=50, messages=HI) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == "Hello from Bedrock" and final.usage.output_tokens == 4

    got = list(ge.models.generate_content_stream(model="br-llama", contents="hi"))
    assert "".join(c.text or "" for c in got) == "Hello from Bedrock"
    assert got[-1].usage_metadata.candidates_token_count == 4


def test_bedrock_tool_calls_both_ways(gw, sim, oa):
    done = oa.chat.completions.create(model="br-llama", messages=[{"role": "user", "content": "weather in Paris?"}],
                                      tools=WEATHER)
    call = done.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == \
        ("tooluse_1", "get_weather", {"city": "Paris"})
    assert done.choices[0].finish_reason == "tool_calls"
    spec = sim.last("/model/").json()["toolConfig"]["tools"][0]["toolSpec"]
    assert spec["name"] == "get_weather" and spec["inputSchema"]["json"]["required"] == ["city"]

    args = ""
    for c in oa.chat.completions.create(model="br-llama", messages=[{"role": "user", "content": "weather?"}],
                                        tools=WEATHER, stream=True):
        for tc in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            args += tc.function.arguments or ""
    assert json.loads(args) == {"city": "Paris"}

    history = [{"role": "user", "content": "weather?"},
               {"role": "assistant", "tool_calls": [{"id": "tooluse_1", "type": "function",
                                                     "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
               {"role": "tool", "tool_call_id": "tooluse_1", "content": "18 C"}]
    assert oa.chat.completions.create(model="br-llama", messages=history, tools=WEATHER) \
        .choices[0].message.content == "Hello from Bedrock"
    sent = sim.last("/model/").json()["messages"]
    assert sent[1]["content"][0]["toolUse"] == {"toolUseId": "tooluse_1", "name": "get_weather", "input": {"city": "Paris"}}
    assert sent[2]["role"] == "user" and sent[2]["content"][0]["toolResult"]["toolUseId"] == "tooluse_1"


def test_bedrock_exception_after_200_reaches_the_client_as_a_stream_error(gw, sim, oa):
    with pytest.raises(openai.APIError) as e:
        for _ in oa.chat.completions.create(model="br-fail", messages=HI, stream=True):
            pass
    assert "throttlingException" in str(e.value) or "Too many tokens" in str(e.value)


def test_bedrock_web_identity_keys_from_sts(gw, sim, oa):
    assert oa.chat.completions.create(model="br-irsa", messages=HI).choices[0].message.content == "Hello from Bedrock"
    seen = sim.last("/model/")
    assert "/us-west-2/bedrock/aws4_request" in seen.headers["authorization"]
    akid = seen.headers["authorization"].split("Credential=")[1].split("/")[0]
    assert akid.startswith("ASIA") and sim.aws_keys[akid][1] == seen.headers["x-amz-security-token"]
    assert sim.sts_calls >= 1


# --------------------------------------------------------------------------- Claude on Bedrock

def bedrock_sdk(sim: CloudSim) -> anthropic.AnthropicBedrock:
    """Anthropic's own Bedrock client, straight at the stand-in: what it sends is InvokeModel's
    contract, and it reads the stand-in's streams with botocore's event-stream parser."""
    return anthropic.AnthropicBedrock(aws_access_key=ENV["FG_T_AKID"], aws_secret_key=ENV["FG_T_SECRET"],
                                      aws_region="us-east-1", base_url=sim.url, max_retries=0)


BETA = "token-efficient-tools-2025-02-19"
# Bedrock's documented InvokeModel version; this SDK release fills in its own API date instead
# unless the body names one, so the direct calls name it.
VERSION = {"anthropic_version": "bedrock-2023-05-31"}


def test_claude_on_bedrock_gets_the_body_anthropics_bedrock_client_sends(gw, sim, an):
    direct = bedrock_sdk(sim).beta.messages.create(model=CLAUDE_ID, max_tokens=20, messages=HI, betas=[BETA],
                                                   extra_body=VERSION)
    sdk = sim.last("/model/")
    r = an.beta.messages.with_raw_response.create(model="br-claude", max_tokens=20, messages=HI, betas=[BETA])
    via = r.parse()
    seen = sim.last("/model/")
    # The SDK leaves `:` unescaped, the gateway escapes it as botocore's signer does: one path to AWS.
    assert seen.path == "/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke"
    assert urllib.parse.unquote(seen.path) == urllib.parse.unquote(sdk.path)
    assert seen.json() == sdk.json()
    assert seen.json()["anthropic_version"] == "bedrock-2023-05-31" and seen.json()["anthropic_beta"] == [BETA]
    assert via.content[0].text == direct.content[0].text == INVOKE_TEXT
    rec = gw.wait_usage(r.headers["x-request-id"], key=KEY, model="br-claude")
    assert (rec["prompt_tokens"], rec["completion_tokens"], rec["provider"]) == (8, 6, "bedrock")


def test_claude_on_bedrock_streams_anthropic_events_to_every_client(gw, sim, an, oa, ge):
    with bedrock_sdk(sim).messages.stream(model=CLAUDE_ID, max_tokens=20, messages=HI, extra_body=VERSION) as s:
        assert "".join(s.text_stream) == INVOKE_TEXT, "the stand-in's frames are what the SDK reads"
    with an.messages.with_streaming_response.create(model="br-claude", max_tokens=20, messages=HI,
                                                    stream=True) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        request_id = r.headers["x-request-id"]
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert sim.last("/model/").path.endswith("%3A0/invoke-with-response-stream")
    assert "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta") == INVOKE_TEXT
    assert events[-1]["amazon-bedrock-invocationMetrics"]["outputTokenCount"] == 6, "events pass verbatim"
    rec = gw.wait_usage(request_id, key=KEY, model="br-claude")
    assert (rec["prompt_tokens"], rec["completion_tokens"], rec["streamed"]) == (8, 6, True)

    with an.messages.stream(model="br-claude", max_tokens=20, messages=HI) as s:
        assert "".join(s.text_stream) == INVOKE_TEXT and s.get_final_message().usage.output_tokens == 6
    chunks = list(oa.chat.completions.create(model="br-claude", messages=HI, stream=True,
                                             stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == INVOKE_TEXT
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (8, 6)
    assert sim.last("/model/").json()["anthropic_version"] == "bedrock-2023-05-31"
    got = list(ge.models.generate_content_stream(model="br-claude", contents="hi"))
    assert "".join(c.text or "" for c in got) == INVOKE_TEXT


def test_claude_on_bedrock_throttled_mid_stream_is_an_anthropic_error(gw, sim, an, oa):
    with pytest.raises(anthropic.APIStatusError) as e:
        with an.messages.stream(model="br-claude-fail", max_tokens=20, messages=HI) as s:
            for _ in s.text_stream:
                pass
    assert "overloaded_error" in str(e.value.body) and "Too many tokens" in str(e.value)
    with pytest.raises(openai.APIError) as e:
        for _ in oa.chat.completions.create(model="br-claude-fail", messages=HI, stream=True):
            pass
    assert "Too many tokens" in str(e.value)


# --------------------------------------------------------------------------- Vertex

def test_vertex_tokens_minted_from_the_service_account_and_refreshed(gw, sim, oa):
    # Every minted token passed google-auth's verification of the sidecar's JWT at the sim.
    assert sim.google_tokens, "no token was minted"
    first = len(sim.google_tokens)
    needle = "cloud credentials refreshed provider=vertex"
    wait_for_log(gw, "serve", needle, count=log_count(gw, "serve", needle) + 1, timeout=60)
    assert len(sim.google_tokens) > first
    # A renewed token reaches the filter with the next snapshot: wait until a request has one.
    deadline = time.monotonic() + 30
    while True:
        done = oa.chat.completions.create(model="vx-gem", messages=HI)
        assert done.choices[0].message.content == "Hi from Gemini on Vertex"
        seen = sim.last("/v1/projects/")
        if seen.headers["authorization"].removeprefix("Bearer ") in sim.google_tokens[first:]:
            break
        assert time.monotonic() < deadline, "the renewed token never reached the filter"
        time.sleep(0.1)
    assert seen.path == "/v1/projects/my-proj-1/locations/us-east5/publishers/google/models/gemini-2.5-flash:generateContent"


def test_vertex_gemini_and_claude_through_their_sdks(gw, sim, oa, an, ge):
    got = ge.models.generate_content(model="vx-gem", contents="hi")
    assert got.text == "Hi from Gemini on Vertex" and got.usage_metadata.total_token_count == 11
    streamed = list(ge.models.generate_content_stream(model="vx-gem", contents="hi"))
    assert "".join(c.text or "" for c in streamed) == "Hi from Gemini on Vertex"
    assert sim.last("/v1/projects/").path.endswith(":streamGenerateContent?alt=sse")

    msg = an.messages.create(model="vx-claude", max_tokens=20, messages=HI)
    assert msg.content[0].text == "Hi from Claude on Vertex"
    sent = sim.last("/v1/projects/")
    assert sent.path.endswith("/publishers/anthropic/models/claude-sonnet-4@20250514:rawPredict")
    assert sent.json()["anthropic_version"] == "vertex-2023-10-16" and "model" not in sent.json()
    with an.messages.stream(model="vx-claude", max_tokens=20, messages=HI) as s:
        assert "".join(s.text_stream) == "Hi from Claude on Vertex"
    assert sim.last("/v1/projects/").path.endswith(":streamRawPredict")
    assert oa.chat.completions.create(model="vx-claude", messages=HI).choices[0].message.content == \
        "Hi from Claude on Vertex"


# --------------------------------------------------------------------------- Azure

def azure_sdk_request(sim: CloudSim) -> httpx2.Request:
    """What the official AzureOpenAI client sends for a chat completion to deployment
    `gpt4o-deploy` (captured by a mock transport: nothing leaves the process)."""
    captured = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        captured.append(request)
        return httpx2.Response(200, json={"id": "x", "object": "chat.completion", "created": 1, "model": "m",
                                          "choices": [{"index": 0, "finish_reason": "stop",
                                                       "message": {"role": "assistant", "content": "ok"}}]})

    client = openai.AzureOpenAI(azure_endpoint=sim.url, api_key=ENV["FG_T_AZURE_KEY"], api_version="2024-10-21",
                                http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))
    client.chat.completions.create(model="gpt4o-deploy", messages=HI)
    return captured[0]


def test_azure_request_has_the_shape_of_the_official_client(gw, sim, oa):
    want = azure_sdk_request(sim)
    done = oa.chat.completions.create(model="az", messages=HI)
    assert done.choices[0].message.content == "Hi from Azure"
    got = sim.last("/openai/")
    assert got.path == f"{want.url.raw_path.decode()}"
    assert got.path == "/openai/deployments/gpt4o-deploy/chat/completions?api-version=2024-10-21"
    assert got.headers["api-key"] == want.headers["api-key"] == ENV["FG_T_AZURE_KEY"]
    assert "authorization" not in got.headers, "the client's key never goes upstream"


def test_azure_content_filter_in_each_dialect(gw, sim, oa, an):
    with pytest.raises(openai.BadRequestError) as e:
        oa.chat.completions.create(model="az", messages=[{"role": "user", "content": "FILTERME"}])
    assert e.value.code == "content_filter"
    with pytest.raises(anthropic.BadRequestError) as e:
        an.messages.create(model="az", max_tokens=10, messages=[{"role": "user", "content": "FILTERME"}])
    assert "content management policy" in str(e.value)


def test_azure_entra_token_from_client_credentials(gw, sim, oa):
    assert oa.chat.completions.create(model="az-entra", messages=HI).choices[0].message.content == "Hi from Azure"
    got = sim.last("/openai/")
    assert got.path == "/openai/v1/chat/completions"
    assert got.headers["authorization"] == f"Bearer {sim.entra_tokens[-1]}"
    assert "api-key" not in got.headers


def test_an_api_key_header_authenticates_and_never_goes_upstream(gw, sim):
    """Azure SDKs send the key as `api-key`: the gateway reads it as the virtual key, and it is
    stripped like every client credential (the Entra provider would not overwrite it)."""
    r = httpx.post(f"{gw.base_url}/chat/completions", headers={"api-key": gw.keys[KEY]}, timeout=30,
                   json={"model": "az-entra", "messages": HI})
    assert r.status_code == 200, r.text
    got = sim.last("/openai/")
    assert "api-key" not in got.headers and got.headers["authorization"].startswith("Bearer ")
    assert gw.keys[KEY] not in json.dumps(got.headers)
    r = httpx.post(f"{gw.base_url}/chat/completions", headers={"api-key": "fg-not-a-key"}, timeout=30,
                   json={"model": "az-entra", "messages": HI})
    assert r.status_code == 401


def test_no_credential_in_logs(gw, sim):
    text = "".join(t for _, t in gw.logs())
    for secret in [ENV["FG_T_SECRET"], ENV["FG_T_AZURE_KEY"], ENV["FG_T_ENTRA_SECRET"], *sim.google_tokens,
                   *sim.entra_tokens, *(s for s, _ in sim.aws_keys.values())]:
        assert secret not in text
