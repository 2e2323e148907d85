"""The dashboard's providers-and-targets, pricing and configuration-problems pages in headless
Chromium (the Selenium helpers of ui_browser.py), against `ferrogate serve` on PostgreSQL (a
schema of this module's own, dropped after).

The targets page lists the providers (never a key) and shows the sim's target healthy once the
API has counted its probes; its KV section is empty as `GET /api/v1/kv` is, then shows a
publishing sim's stream as the API does; its queue section equals `/metrics`'
`ferrogate_queue_depth`: nothing, then 1 for a one-slot flow-controlled model with a request
waiting, then 0. The page's Prometheus parser reads escaped label values. The pricing page adds
a price (listed, and in the API), shows the API's refusal of a negative one with its path, and
deletes it. A negative price written straight into the store is dropped from the snapshot: the
problems page shows its path and message. A viewer sees no create or delete control. Every page
is checked for labels, contrast and width in both schemes; a console error or CSP violation
fails the test."""

from __future__ import annotations

import re
import secrets
import threading

import httpx
import pytest

from conftest import Gateway, Proc, _bin, _free_port, create_admin_user, own_postgres_gateway, psql
from ui_browser import (assert_clean, browser_session, button, check_a11y, console_problems, css, field, go, login,
                        nav_titles, shot, wait_for)

SCHEMA = f"fg_py_uip_{secrets.token_hex(6)}"
URL_ENV = "FG_UIP_PG"
OWNER, OWNER_PASSWORD = "root", "owner-" + secrets.token_urlsafe(18)
VIEWER, VIEWER_PASSWORD = "onlooker", "viewer-" + secrets.token_urlsafe(18)
# How long a request holds the one slot of the flow-controlled model (the sim's time to first
# token), and how long the clients wait for it: the queue lasts from the second request's
# arrival until the clients give up, long enough to compare the page with /metrics.
HOLD_MS, CLIENT_WAIT_S = 120_000, 45.0
SLOW_WAIT_S = 60.0  # waits that span probes, snapshot polls and flow-control ticks


@pytest.fixture(scope="module")
def gw():
    for g in own_postgres_gateway("ferrogate-uip-", SCHEMA, URL_ENV):
        create_admin_user(g, OWNER, OWNER_PASSWORD)
        yield g


browser = pytest.fixture(scope="module")(browser_session)


def call(gw: Gateway, method: str, path: str, body: dict | None = None) -> httpx.Response:
    """The admin API with the bootstrap token."""
    return httpx.request(method, f"{gw.admin_url}{path}", json=body, timeout=30,
                         headers={"authorization": f"Bearer {gw.admin_token}"})


def fresh_login(driver, gw: Gateway, name: str, password: str) -> None:
    """Logs in from a clean browser: an earlier test's session and log are left behind. The
    origin is opened on a page without scripts, so no call of a dashboard page is cut off."""
    driver.get(f"{gw.admin_url}/healthz")
    driver.execute_script("localStorage.clear()")
    driver.delete_all_cookies()
    console_problems(driver)
    login(driver, gw, name, password)


def main_text(driver) -> str:
    return css(driver, "main")[0].text


def refresh(driver) -> None:
    """Clicks the page's Refresh and waits for every section to have loaded again."""
    button(driver, "Refresh").click()
    wait_for("the refreshed page", lambda: not css(driver, "main .loading")
             and button(driver, "Refresh").is_enabled())


# --------------------------------------------------------------------------- /metrics

SAMPLE = re.compile(r'^ferrogate_queue_depth\{(?P<labels>.*)\}\s+(?P<value>\S+)(\s+\S+)?$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def queue_depths(gw: Gateway) -> list[tuple[str, str, str]]:
    """(model, band, depth) of every `ferrogate_queue_depth` sample of /metrics, sorted."""
    text = httpx.get(f"{gw.admin_url}/metrics", timeout=30).text
    out = []
    for line in text.splitlines():
        m = SAMPLE.match(line.strip())
        if m:
            labels = {k: re.sub(r'\\(.)', lambda e: "\n" if e.group(1) == "n" else e.group(1), v)
                      for k, v in LABEL.findall(m.group("labels"))}
            out.append((labels.get("model", ""), labels.get("band", ""), str(int(float(m.group("value"))))))
    return sorted(out)


def page_queues(driver) -> list[tuple[str, str, str]]:
    rows = []
    for r in css(driver, "#tg-queues tbody tr"):
        cells = [c.text for c in r.find_elements("css selector", "td")]
        rows.append((cells[0], cells[1], cells[2]))
    return sorted(rows)


def queue_matches(driver, gw: Gateway, want_depth: str):
    """The page's queue table once it equals /metrics before and after the refresh, holding
    `want_depth` for the flow-controlled model."""
    before = queue_depths(gw)
    refresh(driver)
    shown = page_queues(driver)
    after = queue_depths(gw)
    return shown == before == after and ("fc-chat", "0", want_depth) in shown and shown


# --------------------------------------------------------------------------- tests

def test_the_targets_page_shows_providers_health_kv_and_queues(gw, browser):
    driver = browser
    fresh_login(driver, gw, OWNER, OWNER_PASSWORD)
    titles = nav_titles(driver)
    for title in ("Providers and targets", "Pricing", "Configuration problems"):
        assert title in titles, titles
    assert titles.index("Providers and targets") == titles.index("Models") + 1, titles
    assert titles.index("Configuration problems") == titles.index("Audit log") - 1, titles

    # The sim's target is probed (the API counts the probes), and the page says healthy.
    endpoint = gw.sim_url.removeprefix("http://")

    def probed():
        for t in call(gw, "GET", "/api/v1/targets").json()["targets"]:
            if t["provider"] == "local" and t["endpoint"] == endpoint and t["probes"] >= 1 and t["healthy"]:
                return t
        return None
    target = wait_for("a successful probe of the sim", probed, timeout=SLOW_WAIT_S)
    go(driver, gw, "targets", "Providers and targets")
    cell = wait_for("the sim's target", lambda: css(driver, f'[data-target="local/{endpoint}"]')[0])
    row = cell.find_element("xpath", "./ancestor::tr")
    assert row.find_element("css selector", "[data-health]").get_attribute("data-health") == "healthy", row.text
    assert row.text.split()[1] == "healthy" and str(target["consecutive_failures"]) in row.text, row.text
    claude = css(driver, f'[data-target="claude/{endpoint}"]')[0].find_element("xpath", "./ancestor::tr")
    assert "not probed" in claude.text, claude.text

    # The providers: kinds, where their keys come from, never a key; the owner may delete them.
    providers = css(driver, "#tg-providers")[0].text
    assert "openai_compatible" in providers and "anthropic" in providers and "gemini" in providers, providers
    assert "from FERROGATE_TEST_ANTHROPIC_KEY" in providers, providers
    assert "sim-key-" not in driver.page_source, "no provider key in the page"
    assert button(driver, "Delete local") is not None

    # No KV-event stream: the API's empty answer, the page's empty state.
    assert call(gw, "GET", "/api/v1/kv").json() == {"providers": []}
    assert css(driver, "#kv-empty")[0].text == "No engine publishes KV events."

    # No queue yet: /metrics has no queue gauge, the page says so and points at Envoy's stats.
    assert queue_depths(gw) == []
    empty = css(driver, "#queues-empty")[0].text
    assert "No request is waiting" in empty and "Envoy" in empty, empty
    check_a11y(driver, "the targets page")
    assert_clean(driver, "the targets page")
    flow_control_queue(driver, gw)


def flow_control_queue(driver, gw: Gateway) -> None:
    """A model with one slot and a queue: a request waiting behind another shows as depth 1,
    as /metrics has it, and 0 once the clients gave up."""
    made = [call(gw, "POST", "/api/v1/providers", {"name": "fc", "kind": "openai_compatible",
                                                   "base_url": gw.sim_url, "max_concurrency": 1}),
            call(gw, "POST", "/api/v1/models", {"name": "fc-chat", "targets": [{"provider": "fc", "model": "sim-small"}],
                                                "flow_control": {"max_queue": 10, "queue_ttl_ms": 300_000}}),
            call(gw, "POST", "/api/v1/keys", {"name": "fc-user", "models": ["fc-chat"]})]
    assert all(r.status_code in (200, 201) for r in made), [r.text for r in made]
    key = made[2].json()["key"]

    def ask(ttft_ms: int, timeout: float) -> int:
        try:
            return httpx.post(f"{gw.gateway_url}/v1/chat/completions", timeout=timeout,
                              headers={"authorization": f"Bearer {key}", "x-sim-ttft-ms": str(ttft_ms)},
                              json={"model": "fc-chat", "messages": [{"role": "user", "content": "hi"}]}).status_code
        except httpx.TimeoutException:
            return 0
    wait_for("the gateway to serve fc-chat", lambda: ask(0, 30) == 200, timeout=SLOW_WAIT_S)
    waiting = [threading.Thread(target=ask, args=(HOLD_MS, CLIENT_WAIT_S)) for _ in range(2)]
    for t in waiting:
        t.start()
    try:
        wait_for("a request in the queue on /metrics", lambda: ("fc-chat", "0", "1") in queue_depths(gw),
                 timeout=CLIENT_WAIT_S - 10)
        shown = wait_for("the page's queue to be /metrics'", lambda: queue_matches(driver, gw, "1"),
                         timeout=CLIENT_WAIT_S - 10)
        assert css(driver, '[data-queue="fc-chat/0"]'), shown
        shot(driver, "targets")
        check_a11y(driver, "the targets page with a queue")
    finally:
        for t in waiting:
            t.join(timeout=CLIENT_WAIT_S + 30)
    # The clients gave up: the queue empties and its gauge stays, at 0.
    wait_for("the queue to empty on /metrics", lambda: ("fc-chat", "0", "0") in queue_depths(gw), timeout=SLOW_WAIT_S)
    wait_for("the page's empty queue", lambda: queue_matches(driver, gw, "0"), timeout=SLOW_WAIT_S)
    assert_clean(driver, "the targets page with a queue")


def test_the_kv_section_shows_a_publishing_engine(gw, browser):
    """A sim publishing KV-cache events, added as a provider through the API: its stream shows
    connected, with the last sequence and blocks the API gives, once a request stored blocks."""
    driver = browser
    port, pub = _free_port(), _free_port()
    sim = Proc("kv-sim", [str(_bin()), "sim", "--listen", f"127.0.0.1:{port}", "--model", "sim-small",
                          "--kv-events", f"tcp://127.0.0.1:{pub}"], gw.workdir / "kv-sim.log")
    endpoint = f"127.0.0.1:{port}"
    try:
        wait_for("the KV sim", lambda: httpx.get(f"http://{endpoint}/v1/models", timeout=2).status_code == 200,
                 timeout=SLOW_WAIT_S)
        made = call(gw, "POST", "/api/v1/providers", {
            "name": "kvp", "kind": "openai_compatible", "base_url": f"http://{endpoint}", "kv_block_size": 16,
            "endpoints": [{"address": endpoint, "kv_events": f"tcp://127.0.0.1:{pub}"}]})
        assert made.status_code in (200, 201), made.text

        def stream(ready):
            for p in call(gw, "GET", "/api/v1/kv").json()["providers"]:
                for e in p["endpoints"] if p["provider"] == "kvp" else []:
                    if ready(e):
                        return e
            return None
        wait_for("the subscription", lambda: stream(lambda e: e["connected"]), timeout=SLOW_WAIT_S)
        prompt = " ".join(f"word{i}" for i in range(200))

        def stored():
            # Straight to the engine: its cache changes are published whoever sent the request.
            httpx.post(f"http://{endpoint}/v1/chat/completions", timeout=30,
                       json={"model": "sim-small", "messages": [{"role": "user", "content": prompt}]})
            return stream(lambda e: e.get("last_sequence") is not None and e["blocks"] > 0)
        wait_for("an event batch applied", stored, timeout=SLOW_WAIT_S)
        go(driver, gw, "targets", "Providers and targets")

        def shown():
            refresh(driver)
            e = stream(lambda e: True)
            cell = css(driver, f'[data-kv="kvp/{endpoint}"]')
            if not cell:
                return None
            cells = [c.text for c in cell[0].find_element("xpath", "./ancestor::tr").find_elements("css selector", "td")]
            want = [endpoint, "connected", str(e["last_sequence"]),
                    f"{e['gpu_blocks']} / {e['cpu_blocks']} / {e['storage_blocks']}"]
            return cells[:4] == want and cells
        cells = wait_for("the stream in the page as the API has it", shown, timeout=SLOW_WAIT_S)
        assert cells[4].endswith(" ago") and cells[5] == "0 / 0 / 0", cells
        assert not css(driver, "#kv-empty")
        check_a11y(driver, "the targets page with a KV stream")
        shot(driver, "targets-kv")
        assert_clean(driver, "the targets page with a KV stream")
    finally:
        call(gw, "DELETE", "/api/v1/providers/kvp")
        sim.stop()


PROM_TEXT = r'''# HELP ferrogate_queue_depth Requests waiting.
# TYPE ferrogate_queue_depth gauge
ferrogate_queue_depth{model="a \"quoted\" one",band="10"} 3
ferrogate_queue_depth{band="-1",model="back\\slash, {braces}\nnewline"} 0 1700000000000
ferrogate_queue_depth 7
ferrogate_queue_depth{model="unterminated} 4
ferrogate_requests_total{model="x"} 9
ferrogate_queue_depth{model="inf"} +Inf
'''


def test_the_page_parser_reads_escaped_label_values(gw, browser):
    """prom.js, run in the page: escapes inside quotes, label order, timestamps, a line it
    cannot read skipped, other families left out."""
    driver = browser
    driver.get(f"{gw.admin_url}/ui/")
    wait_for("the page", lambda: css(driver, "main"))
    got = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "import('/ui/js/prom.js').then((m) => done(m.samples(arguments[0], 'ferrogate_queue_depth')"
        ".map((s) => [s.labels, String(s.value)])), (e) => done(String(e)));", PROM_TEXT)
    assert got == [
        [{"model": 'a "quoted" one', "band": "10"}, "3"],
        [{"band": "-1", "model": "back\\slash, {braces}\nnewline"}, "0"],
        [{}, "7"],
        [{"model": "inf"}, "Infinity"],
    ], got
    assert_clean(driver, "the parser")


def test_pricing_is_created_refused_and_deleted_in_the_page(gw, browser):
    driver = browser
    fresh_login(driver, gw, OWNER, OWNER_PASSWORD)
    go(driver, gw, "pricing", "Pricing")
    form = wait_for("the price form", lambda: css(driver, "#price-create")[0])
    check_a11y(driver, "the pricing page")
    field(form, "Upstream model").send_keys("local/sim-small")
    field(form, "Input (USD per million tokens)").send_keys("0.25")
    field(form, "Output (USD per million tokens)").send_keys("1.5")
    button(driver, "Add price", form).click()
    cell = wait_for("the price's row", lambda: css(driver, '[data-price="local/sim-small"]')[0])
    row = cell.find_element("xpath", "./ancestor::tr")
    assert "$0.25" in row.text and "$1.5" in row.text, row.text
    stored = call(gw, "GET", "/api/v1/pricing/local%2Fsim-small")
    assert stored.status_code == 200 and stored.json()["input_per_mtok"] == 0.25, stored.text
    assert stored.json()["output_per_mtok"] == 1.5, stored.text
    assert_clean(driver, "adding a price")

    # A negative price: the API refuses it, the form shows its message and the problem's path.
    form = css(driver, "#price-create")[0]
    field(form, "Upstream model").send_keys("neg")
    field(form, "Input (USD per million tokens)").send_keys("-1")
    field(form, "Output (USD per million tokens)").send_keys("1")
    button(driver, "Add price", form).click()
    alert = wait_for("the error", lambda: next(a for a in css(driver, "#price-create .alert.error") if a.is_displayed()))
    refused = call(gw, "POST", "/api/v1/pricing", {"model": "neg", "input_per_mtok": -1, "output_per_mtok": 1})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"] in alert.text, (alert.text, refused.text)
    problem = refused.json()["problems"][0]
    assert problem["path"] == "pricing.neg.input_per_mtok", problem
    assert f"{problem['path']}: {problem['message']}" in alert.text, alert.text
    assert [e for e in console_problems(driver) if "400" not in e] == [], "only the refused POST is logged"
    check_a11y(driver, "the pricing page with an error")
    shot(driver, "pricing")

    # Deleted with a confirmation: gone from the page and from the API.
    button(driver, "Delete local/sim-small").click()
    wait_for("the confirmation", lambda: button(driver, "Confirm: local/sim-small")).click()
    wait_for("the deletion", lambda: "Price of local/sim-small deleted" in main_text(driver))
    wait_for("the row to go", lambda: not css(driver, '[data-price="local/sim-small"]'))
    assert call(gw, "GET", "/api/v1/pricing/local%2Fsim-small").status_code == 404
    assert_clean(driver, "deleting a price")


def test_the_problems_page_shows_a_row_the_snapshot_dropped(gw, browser):
    driver = browser
    fresh_login(driver, gw, OWNER, OWNER_PASSWORD)
    assert call(gw, "GET", "/api/v1/config/problems").json()["dropped"] == []
    go(driver, gw, "problems", "Configuration problems")
    assert "All rows are in use." in main_text(driver)
    check_a11y(driver, "the problems page")

    # A price the API would refuse, written straight into the store: the snapshot drops it.
    psql(f"INSERT INTO {SCHEMA}.fg_pricing (model, input_per_mtok, output_per_mtok) VALUES ('broken', -2, 1);"
         f"UPDATE {SCHEMA}.fg_config_version SET version = version + 1")
    try:
        answer = wait_for("the dropped row in the API", lambda: (lambda a: any(
            p["path"].startswith("pricing.broken.") for p in a["dropped"]) and a)(
            call(gw, "GET", "/api/v1/config/problems").json()), timeout=SLOW_WAIT_S)
        dropped = next(p for p in answer["dropped"] if p["path"].startswith("pricing.broken."))

        def shown():
            refresh(driver)
            return css(driver, f'[data-problem="{dropped["path"]}"]')
        cell = wait_for("the dropped row in the page", shown)[0]
        row = cell.find_element("xpath", "./ancestor::tr")
        assert row.text == f"{dropped['path']} {dropped['message']}", (row.text, dropped)
        version = css(driver, "#problems-version")[0].text
        assert version == f"Served configuration version {answer['version']}.", (version, answer)
        assert "All rows are in use." not in main_text(driver)
        check_a11y(driver, "the problems page with a dropped row")
        shot(driver, "problems")
        assert_clean(driver, "the problems page")
    finally:
        psql(f"DELETE FROM {SCHEMA}.fg_pricing WHERE model = 'broken';"
             f"UPDATE {SCHEMA}.fg_config_version SET version = version + 1")


def test_a_viewer_sees_these_pages_without_changes(gw, browser):
    made = call(gw, "POST", "/api/v1/users", {"name": VIEWER, "role": "viewer", "password": VIEWER_PASSWORD})
    assert made.status_code in (200, 201), made.text
    driver = browser
    fresh_login(driver, gw, VIEWER, VIEWER_PASSWORD)
    titles = nav_titles(driver)
    assert "Audit log" not in titles and "Users" not in titles, titles
    for page, title in (("targets", "Providers and targets"), ("pricing", "Pricing"),
                        ("problems", "Configuration problems")):
        go(driver, gw, page, title)
        assert not css(driver, "main form"), f"{page}: no create form for a viewer"
        labels = [b.text for b in css(driver, "main button")]
        assert labels == ([] if page == "pricing" else ["Refresh"]), f"{page}: saw buttons {labels}"
        check_a11y(driver, f"the viewer's {page} page")
        assert_clean(driver, f"the viewer's {page} page")
    # The providers are listed for the viewer too, without a Delete.
    go(driver, gw, "targets", "Providers and targets")
    assert "openai_compatible" in css(driver, "#tg-providers")[0].text
    assert button(driver, "Delete local") is None
