"""Prometheus metrics as an operator scrapes them from `ferrogate serve`'s admin `/metrics`.

Every scrape is read with the official `prometheus_client` parser. After traffic the labelled
series carry what the usage records say; 1,000 requests with made-up model names add no series
(their label is `unknown`) and are counted, as are requests the filter refuses itself.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from typing import Callable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import (PROVIDER_KEY_ENV, Gateway, Proc, _bin, _free_port, _wait_until, gateway_config,
                      own_gateway)

MESSAGES = [{"role": "user", "content": "Count the series."}]
# The filter hands its counters to the host on each tick (250 ms with a sidecar), after the
# answer: a scrape waits for the figures it expects, up to this long on a loaded machine.
SETTLE_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def gateway() -> Gateway:
    """This module's own sim and gateway: its tests compare counters before and after their
    requests, so no other module's traffic may still be on its way to them."""
    yield from own_gateway("ferrogate-metrics-")


def scrape(gw: Gateway) -> str:
    r = httpx.get(f"{gw.admin_url}/metrics", timeout=10)
    assert r.status_code == 200, r.text[:500]
    assert r.headers["content-type"].startswith("text/plain"), r.headers
    return r.text


def samples(text: str) -> dict[tuple, float]:
    """Every sample of a scrape, parsed by prometheus_client: (name, sorted labels) -> value."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(series: dict[tuple, float], name: str, **labels) -> float:
    return series.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape_until(gw: Gateway, ready: Callable[[str], bool], what: str) -> str:
    """Scrapes until `ready` accepts the text (the counters of earlier requests have reached
    the host); fails with `what` and the last scrape's families after SETTLE_TIMEOUT_S."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        text = scrape(gw)
        if ready(text):
            return text
        if time.monotonic() > deadline:
            names = sorted({f.name for f in text_string_to_metric_families(text)})
            raise AssertionError(f"{what}: not in /metrics after {SETTLE_TIMEOUT_S}s; families {names}")
        time.sleep(0.1)


def settled(gw: Gateway, before: dict[tuple, float], want: dict[tuple[str, tuple], float]) -> dict[tuple, float]:
    """The samples once every series of `want` has grown by its figure since `before`."""
    def ready(text: str) -> bool:
        now = samples(text)
        return all(now.get(k, 0.0) - before.get(k, 0.0) >= d for k, d in want.items())

    return samples(scrape_until(gw, ready, f"the counts {want}"))


def series(name: str, **labels) -> tuple[str, tuple]:
    return (name, tuple(sorted(labels.items())))


def test_every_family_parses_and_has_help(gateway: Gateway):
    gateway.client("alice").chat.completions.create(model="chat", messages=MESSAGES)
    # prometheus_client names counter families without their `_total`.
    wanted = ("ferrogate_requests", "ferrogate_request_duration_seconds", "ferrogate_snapshot_version",
              "ferrogate_filter_duration_seconds", "ferrogate_target_healthy")

    # This request's own series: earlier ones (the fixture's /v1/models) may have made the
    # family already, and a count still on its way would land in the next test's figures.
    ok = series("ferrogate_requests_total", api="chat_completions", model="chat", provider="local", status="200",
                status_class="2xx")

    def counted(text: str) -> bool:
        names = {f.name for f in text_string_to_metric_families(text)}
        return all(w in names for w in wanted) and samples(text).get(ok, 0.0) >= 1

    text = scrape_until(gateway, counted, f"the families {wanted} and this request")
    typed = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    helped = {line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")}
    assert typed and not [t for t in typed if t not in helped], "a family without # HELP"
    assert len(typed) == len(set(typed)), "a family declared twice"


def test_labelled_series_carry_what_the_usage_records_say(gateway: Gateway):
    # Every earlier test of this module waited for its own counts, so nothing is in transit.
    before = samples(scrape(gateway))
    client = gateway.client("alice")
    plain = client.chat.completions.with_raw_response.create(model="chat", messages=MESSAGES)
    stream = client.chat.completions.with_raw_response.create(model="chat", messages=MESSAGES, stream=True)
    list(stream.parse())
    records = [gateway.wait_usage(r.headers["x-request-id"], key="alice", model="chat") for r in (plain, stream)]
    ok = dict(api="chat_completions", model="chat", provider="local", status="200", status_class="2xx")
    at = dict(model="chat", provider="local")
    after = settled(gateway, before, {series("ferrogate_requests_total", **ok): 2,
                                      series("ferrogate_request_duration_seconds_count", **at): 2,
                                      series("ferrogate_time_to_first_token_seconds_count", **at): 2,
                                      series("ferrogate_inter_token_latency_seconds_count", **at): 1,
                                      series("ferrogate_upstream_attempts_total", provider="local"): 2,
                                      **{series("ferrogate_tokens_total", **at, type=kind): sum(r[field] for r in records)
                                         for kind, field in (("input", "prompt_tokens"), ("output", "completion_tokens"))}})

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("ferrogate_requests_total", **ok) == 2
    for kind, field in (("input", "prompt_tokens"), ("output", "completion_tokens"), ("cached_input", "cached_tokens")):
        want = sum(r[field] for r in records)
        assert delta("ferrogate_tokens_total", model="chat", provider="local", type=kind) == want, kind
    assert delta("ferrogate_request_duration_seconds_count", **at) == 2
    assert delta("ferrogate_time_to_first_token_seconds_count", **at) == 2
    assert delta("ferrogate_inter_token_latency_seconds_count", **at) == 1, "one value per stream"
    # Seconds, not milliseconds: the sim answers in well under a second.
    assert 0 < delta("ferrogate_request_duration_seconds_sum", **at) < 2
    assert delta("ferrogate_upstream_attempts_total", provider="local") == 2


def test_made_up_model_names_add_no_series_and_refusals_are_counted(gateway: Gateway):
    before = samples(scrape(gateway))
    tag = "zz" + secrets.token_hex(4)
    headers = {"authorization": f"Bearer {gateway.keys['alice']}", "content-type": "application/json"}
    with httpx.Client(base_url=gateway.gateway_url, headers=headers, timeout=10) as http:
        for i in range(1000):
            r = http.post("/v1/chat/completions", json={"model": f"{tag}-{i}", "messages": MESSAGES})
            assert r.status_code == 404, r.text
        assert http.post("/v1/chat/completions", content=b"{not json").status_code == 400
        assert http.get("/v1/nowhere").status_code == 404
    anonymous = httpx.post(f"{gateway.gateway_url}/v1/chat/completions", json={"model": "chat", "messages": MESSAGES})
    assert anonymous.status_code == 401, anonymous.text
    unknown = dict(api="chat_completions", model="unknown", provider="none")
    after = settled(gateway, before, {
        series("ferrogate_requests_total", **unknown, status="404", status_class="4xx"): 1000,
        series("ferrogate_errors_total", **unknown, reason="model_not_found"): 1000,
        series("ferrogate_requests_total", **unknown, status="400", status_class="4xx"): 1,
        series("ferrogate_requests_total", **unknown, status="401", status_class="4xx"): 1,
        series("ferrogate_requests_total", api="unknown", model="unknown", provider="none", status="404",
               status_class="4xx"): 1})
    text = scrape(gateway)
    assert tag not in text, "a client's model name became a label"
    new = set(after) - set(before)
    assert len(new) <= 8, f"1,000 made-up names added series: {sorted(new)}"

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("ferrogate_requests_total", **unknown, status="404", status_class="4xx") == 1000
    assert delta("ferrogate_errors_total", **unknown, reason="model_not_found") == 1000
    assert delta("ferrogate_requests_total", **unknown, status="400", status_class="4xx") == 1
    assert delta("ferrogate_requests_total", **unknown, status="401", status_class="4xx") == 1
    assert delta("ferrogate_requests_total", api="unknown", model="unknown", provider="none",
                 status="404", status_class="4xx") == 1


def test_the_filter_applies_the_snapshot_the_sidecar_serves(gateway: Gateway):
    series = samples(scrape(gateway))
    served = value(series, "ferrogate_snapshot_served_version")
    assert served > 0 and value(series, "ferrogate_snapshot_version") == served
    assert ("ferrogate_snapshot_age_seconds", ()) in series
    assert value(series, "ferrogate_key_info", key="alice", group="dev") == 1


def test_the_standalone_sidecars_metrics_parse_too(gateway: Gateway, tmp_path):
    """`ferrogate sidecar` (next to an Envoy) serves its own /metrics: it parses, every family
    has # HELP, and its series are there."""
    side, admin = _free_port(), _free_port()
    cfg = tmp_path / "sidecar.json"
    cfg.write_text(json.dumps(gateway_config(_free_port(), gateway.keys)))
    env = {**os.environ, **{var: "sim-key" for var in PROVIDER_KEY_ENV.values()}}
    env.pop("FERROGATE_INTERNAL_TOKEN", None)
    proc = Proc("sidecar", [str(_bin()), "sidecar", "--config", str(cfg), "--sidecar-listen", f"127.0.0.1:{side}",
                            "--admin-listen", f"127.0.0.1:{admin}"], tmp_path / "sidecar.log", env)
    try:
        url = f"http://127.0.0.1:{admin}/metrics"
        _wait_until("sidecar /metrics", [proc], lambda: httpx.get(url, timeout=2).status_code == 200, 30)
        text = httpx.get(url, timeout=10).text
        series = samples(text)
        assert value(series, "ferrogate_snapshot_served_version") > 0
        assert value(series, "ferrogate_key_info", key="alice", group="dev") == 1
        assert any(name == "ferrogate_target_healthy" for name, _ in series), sorted(series)[:20]
        typed = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
        helped = {line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")}
        assert typed and all(t in helped for t in typed), typed
    finally:
        proc.stop()
