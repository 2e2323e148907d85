"""The client's User-Agent in the usage records, end to end: requests through `ferrogate serve`
(Postgres store, a schema of this module's own) with the official `openai` and `anthropic` SDKs,
with httpx and a User-Agent longer than the 256 bytes a record keeps, and with none; the request
log shows each record's `user_agent` (the long one cut to 256 bytes, `null` for none), and
`GET /api/v1/analytics/top?by=client` ranks the clients with their request counts."""

from __future__ import annotations

import secrets
import time

import anthropic
import httpx
import openai
import pytest

from conftest import Gateway, own_postgres_gateway

SCHEMA = f"fg_py_client_{secrets.token_hex(6)}"
URL_ENV = "FG_CLIENT_PG"
RUN = secrets.token_hex(4)  # request ids of this run
LONG_UA = "long-client/2.0 " + "x" * 300
RECORD_TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def gw():
    yield from own_postgres_gateway("ferrogate-client-", SCHEMA, URL_ENV)


def admin_get(gw: Gateway, path: str, **params) -> dict:
    r = httpx.get(f"{gw.admin_url}{path}", params=params, timeout=10,
                  headers={"authorization": f"Bearer {gw.admin_token}"})
    assert r.status_code == 200, f"GET {r.url} -> {r.status_code}: {r.text[:500]}"
    return r.json()


def record_of(gw: Gateway, request_id: str) -> dict:
    """The request log's item of `request_id`, once its record is stored."""
    deadline = time.monotonic() + RECORD_TIMEOUT_S
    while True:
        # The record is written after the answer reaches the client, so right after a request
        # the log may not hold it yet: the endpoint answers 404 until it does.
        r = httpx.get(f"{gw.admin_url}/api/v1/requests/{request_id}", timeout=10,
                      headers={"authorization": f"Bearer {gw.admin_token}"})
        assert r.status_code in (200, 404), f"GET {r.url} -> {r.status_code}: {r.text[:500]}"
        items = r.json()["requests"] if r.status_code == 200 else []
        if items:
            assert len(items) == 1, items
            return items[0]
        if time.monotonic() > deadline:
            pytest.fail(f"no record of {request_id} within {RECORD_TIMEOUT_S}s")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def sent(gw: Gateway) -> dict[str, list[str]]:
    """Three OpenAI SDK requests, two Anthropic SDK ones, one httpx request with a long
    User-Agent and one without any: their request ids by client."""
    ids: dict[str, list[str]] = {"openai": [], "anthropic": [], "long": [], "none": []}
    oa = gw.client("alice")
    for i in range(3):
        rid = f"ua-oa-{RUN}-{i}"
        oa.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}],
                                   extra_headers={"x-request-id": rid})
        ids["openai"].append(rid)
    an = anthropic.Anthropic(base_url=gw.gateway_url, api_key=gw.keys["carol"], max_retries=0, timeout=30.0)
    gw.clients.append(an)
    for i in range(2):
        rid = f"ua-an-{RUN}-{i}"
        an.messages.create(model="an-chat", max_tokens=64, messages=[{"role": "user", "content": "hi"}],
                           extra_headers={"x-request-id": rid})
        ids["anthropic"].append(rid)
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    auth = {"authorization": f"Bearer {gw.keys['alice']}"}
    rid = f"ua-long-{RUN}"
    r = httpx.post(f"{gw.base_url}/chat/completions", json=body, timeout=30,
                   headers={**auth, "user-agent": LONG_UA, "x-request-id": rid})
    assert r.status_code == 200, r.text
    ids["long"].append(rid)
    with httpx.Client(timeout=30) as bare:
        del bare.headers["user-agent"]  # httpx sends its own unless removed
        rid = f"ua-none-{RUN}"
        r = bare.post(f"{gw.base_url}/chat/completions", json=body, headers={**auth, "x-request-id": rid})
        assert r.status_code == 200, r.text
    ids["none"].append(rid)
    return ids


def test_the_request_log_shows_each_clients_user_agent(gw, sent):
    for rid in sent["openai"]:
        assert record_of(gw, rid)["user_agent"] == f"OpenAI/Python {openai.__version__}"
    for rid in sent["anthropic"]:
        assert record_of(gw, rid)["user_agent"] == f"Anthropic/Python {anthropic.__version__}"
    long = record_of(gw, sent["long"][0])
    assert long["user_agent"] == LONG_UA[:256], "cut to the 256 bytes a record keeps"
    none = record_of(gw, sent["none"][0])
    assert none["user_agent"] is None, none
    # The request log's pages carry it too, and the usage query's records.
    page = admin_get(gw, "/api/v1/requests", limit=100)["requests"]
    assert {i["request_id"]: i["user_agent"] for i in page}[sent["long"][0]] == LONG_UA[:256]
    usage = admin_get(gw, "/api/v1/usage", limit=100)["records"]
    by_id = {r["request_id"]: r for r in usage}
    assert by_id[sent["openai"][0]]["user_agent"].startswith("OpenAI/Python ")
    assert "user_agent" not in by_id[sent["none"][0]], "a record without one does not write it"


def test_the_analytics_rank_the_clients(gw, sent):
    for rids in sent.values():
        for rid in rids:
            record_of(gw, rid)
    top = admin_get(gw, "/api/v1/analytics/top", by="client", limit=100)
    assert top["by"] == "client"
    ranked = [(i["name"], i["requests"]) for i in top["items"]]
    assert ranked == [("OpenAI/Python", 3), ("Anthropic/Python", 2), ("", 1), ("long-client", 1)], ranked
    usage = admin_get(gw, "/api/v1/analytics/usage", by="client", bucket="day")
    assert [(s["name"], s["requests"]) for s in usage["series"]] == ranked
