"""The web dashboard (`/ui/`) end to end, in a real browser: headless Chromium (Debian's
`chromium` and `chromium-driver`, installed by scripts/test-tools) driven by Selenium, against
`ferrogate serve` on PostgreSQL (a schema of this module's own, dropped after).

The owner made with `ferrogate admin create-user` logs in through the page, creates a key and
sees its plaintext once, the gateway answers that key, the owner revokes it in the page and the
gateway refuses it (401); it makes an API token (shown once) and a viewer user, and logs out. The
viewer logs in and sees no create or delete control, and a change it forces through the API is
403. A key with a budget sends requests: the request log lists them (and exports them as CSV),
the overview counts them and the limits page shows the budget's bar amber at 80 % and red at
100 %, with its numbers. Every page is checked in the light and the dark scheme at 1366x768: every input has a
label, text contrast is at least 4.5:1. Any Content-Security-Policy violation or console error
fails the test (the browser log is read after every step)."""

from __future__ import annotations

import secrets
import shutil
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from conftest import Gateway, create_admin_user, own_postgres_gateway
from ui_browser import (assert_clean, browser_session, button, check_a11y, choose, console_problems, css, field, go,
                        login, nav_titles, session_of, shot, wait_for)

SCHEMA = f"fg_py_ui_{secrets.token_hex(6)}"
URL_ENV = "FG_UI_PG"
OWNER, OWNER_PASSWORD = "root", "owner-" + secrets.token_urlsafe(18)
VIEWER, VIEWER_PASSWORD = "watcher", "viewer-" + secrets.token_urlsafe(18)
VIEWER_PAGES = ["Overview", "Keys", "Groups", "Models", "Providers and targets", "Pricing", "Limits and budgets",
                "Requests", "Configuration problems", "API tokens"]
OWNER_PAGES = [*VIEWER_PAGES[:-1], "Audit log", "Users", "API tokens"]
# What every answer under /ui carries.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


@pytest.fixture(scope="module")
def gw():
    for g in own_postgres_gateway("ferrogate-ui-", SCHEMA, URL_ENV):
        create_admin_user(g, OWNER, OWNER_PASSWORD)
        yield g


browser = pytest.fixture(scope="module")(browser_session)


def chat(gw: Gateway, key: str, model: str = "chat") -> httpx.Response:
    return httpx.post(f"{gw.gateway_url}/v1/chat/completions", timeout=30,
                      headers={"authorization": f"Bearer {key}"},
                      json={"model": model, "messages": [{"role": "user", "content": "hi"}]})


def wait_status(gw: Gateway, key: str, status: int, model: str = "chat") -> httpx.Response:
    """The gateway's answer to `key` once it is `status` (snapshots reach the filter in seconds)."""
    deadline = time.monotonic() + 30
    while True:
        r = chat(gw, key, model)
        if r.status_code == status or time.monotonic() > deadline:
            return r
        time.sleep(0.25)


# --------------------------------------------------------------------------- tests

def test_the_ui_files_carry_the_security_headers(gw):
    moved = httpx.get(f"{gw.admin_url}/ui", timeout=10)
    assert moved.status_code == 308 and moved.headers["location"] == "/ui/", moved.headers
    for path, kind in (("/ui/", "text/html"), ("/ui/app.css", "text/css"), ("/ui/js/app.js", "text/javascript"),
                       ("/ui/nothing.js", "application/json")):
        r = httpx.get(f"{gw.admin_url}{path}", timeout=10)
        assert r.status_code == (404 if "nothing" in path else 200), (path, r.status_code)
        assert r.headers["content-type"].startswith(kind), (path, r.headers["content-type"])
        assert r.headers["content-security-policy"] == CSP, path
        assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff", path
        assert r.headers["referrer-policy"] == "no-referrer", path
    assert httpx.get(f"{gw.admin_url}/ui/app.css", timeout=10).headers["cache-control"] == "no-cache"


def test_the_owner_manages_keys_tokens_and_users_in_the_page(gw, browser):
    from selenium.webdriver.common.by import By
    driver = browser
    driver.get(f"{gw.admin_url}/ui")
    wait_for("the login form", lambda: css(driver, "#login-form"))
    assert driver.current_url == f"{gw.admin_url}/ui/", driver.current_url
    assert not css(driver, "#sso"), "no single sign-on button without admin.oidc"
    assert_clean(driver, "the login page")
    check_a11y(driver, "the login page")
    login(driver, gw, OWNER, OWNER_PASSWORD)
    assert nav_titles(driver) == OWNER_PAGES, nav_titles(driver)
    assert f"{OWNER} · owner" in driver.find_element(By.ID, "who").text
    wait_for("the overview, the first page", lambda: driver.current_url.endswith("#/overview"))

    # A model: created in the page with a routing strategy, then in the API's list.
    go(driver, gw, "models", "Models")
    form = wait_for("the model form", lambda: css(driver, "#model-create")[0])
    check_a11y(driver, "the models page")
    field(form, "Name").send_keys("ui-chat")
    choose(field(form, "Strategy"), "least_loaded")
    choose(field(form, "Target 1: provider"), "local")
    field(form, "Target 1: upstream model").send_keys("sim-small")
    button(driver, "Create model", form).click()
    wait_for("the model's row", lambda: next(r for r in css(driver, "main tbody tr") if "ui-chat" in r.text))
    made = httpx.get(f"{gw.admin_url}/api/v1/models/ui-chat", headers={"authorization": f"Bearer {gw.admin_token}"},
                     timeout=10)
    assert made.status_code == 200 and made.json()["strategy"] == "least_loaded", made.text
    assert made.json()["targets"] == [{"provider": "local", "model": "sim-small"}], made.text
    shot(driver, "models")
    assert_clean(driver, "creating a model")
    go(driver, gw, "keys", "Keys")

    # A key for that model: created in the page, its plaintext shown once, answered by the gateway.
    form = wait_for("the key form", lambda: css(driver, "#key-create")[0])
    check_a11y(driver, "the keys page")
    field(form, "Name").send_keys("ui-key")
    field(form, "Models").send_keys("ui-chat")
    field(form, "Requests per minute").send_keys("100")
    button(driver, "Create key", form).click()
    secret = wait_for("the key, shown once", lambda: css(driver, "input[data-secret]")[0])
    key = secret.get_attribute("value")
    assert key.startswith("fg-") and len(key) == 67, key
    assert driver.switch_to.active_element == secret, "the secret is focused, selected for copying"
    assert button(driver, "Copy") is not None
    row = wait_for("the key's row", lambda: next(r for r in css(driver, "main tbody tr") if "ui-key" in r.text))
    assert "ui-chat" in row.text and "requests_per_minute 100" in row.text, row.text
    assert_clean(driver, "creating a key")
    button(driver, "Done, hide it").click()
    wait_for("the secret to go", lambda: not css(driver, "input[data-secret]"))
    assert key not in driver.page_source, "the key is shown once, then gone"
    answered = wait_status(gw, key, 200, "ui-chat")
    assert answered.status_code == 200, answered.text

    # Revoked in the page: the gateway refuses it.
    button(driver, "Revoke ui-key").click()
    confirm = wait_for("the confirmation", lambda: button(driver, "Confirm: ui-key"))
    assert driver.switch_to.active_element == confirm, "the confirmation takes the focus"
    confirm.click()
    wait_for("the revocation", lambda: "Key ui-key revoked" in driver.find_element(By.CSS_SELECTOR, "main").text)
    wait_for("the row to go", lambda: not any("ui-key" in r.text for r in css(driver, "main tbody tr")))
    refused = wait_status(gw, key, 401, "ui-chat")
    assert refused.status_code == 401, refused.text
    assert_clean(driver, "revoking a key")

    # The API's own error message shows in the form.
    form = css(driver, "#key-create")[0]
    field(form, "Name").send_keys("alice")
    button(driver, "Create key", form).click()
    alert = wait_for("the error", lambda: next(a for a in css(driver, "#key-create .alert.error") if a.is_displayed()))
    assert "conflict: keys/alice already exists" in alert.text, alert.text
    assert [e for e in console_problems(driver) if "409" not in e] == [], "only the refused POST is logged"

    # The audit log shows both, filtered and paged.
    go(driver, gw, "audit", "Audit log")
    check_a11y(driver, "the audit page")
    filters = css(driver, "#audit-filters")[0]
    field(filters, "Object").send_keys("keys/ui-key")
    choose(field(filters, "Rows per page"), "25")
    button(driver, "Apply filters", filters).click()
    wait_for("the filtered events", lambda: [r.text for r in css(driver, "main tbody tr")]
             and all("keys/ui-key" in r.text for r in css(driver, "main tbody tr"))
             and any("keys.delete" in r.text for r in css(driver, "main tbody tr")))
    actions = [r.find_elements(By.TAG_NAME, "td")[2].text for r in css(driver, "main tbody tr")]
    assert actions == ["keys.delete", "keys.create"], actions
    shot(driver, "audit")
    assert_clean(driver, "the audit log")

    # An API token of the owner's own, shown once, usable.
    go(driver, gw, "tokens", "API tokens")
    check_a11y(driver, "the tokens page")
    form = css(driver, "#token-create")[0]
    field(form, "Name").send_keys("ci")
    choose(field(form, "Role"), "viewer")
    button(driver, "Create token", form).click()
    token = wait_for("the token, shown once", lambda: css(driver, "input[data-secret]")[0].get_attribute("value"))
    assert token.startswith("fgt_"), token
    me = httpx.get(f"{gw.admin_url}/api/v1/session", headers={"authorization": f"Bearer {token}"}, timeout=10)
    assert me.status_code == 200 and me.json()["role"] == "viewer", me.text
    wait_for("the token's row", lambda: any("ci" in r.text and "active" in r.text for r in css(driver, "main tbody tr")))
    assert_clean(driver, "making a token")

    # A viewer user, made by the owner.
    go(driver, gw, "users", "Users")
    check_a11y(driver, "the users page")
    form = css(driver, "#user-create")[0]
    field(form, "Name").send_keys(VIEWER)
    choose(field(form, "Role"), "viewer")
    field(form, "Password").send_keys(VIEWER_PASSWORD)
    button(driver, "Create user", form).click()
    wait_for("the viewer's row", lambda: any(VIEWER in r.text and "viewer" in r.text for r in css(driver, "main tbody tr")))
    assert VIEWER_PASSWORD not in driver.page_source
    go(driver, gw, "groups", "Groups")
    assert css(driver, "#group-create"), "the owner may create groups"
    check_a11y(driver, "the groups page")
    assert_clean(driver, "the other pages")

    # Logout ends the session.
    cookie, _ = session_of(driver, gw)
    driver.find_element(By.ID, "logout").click()
    wait_for("the login form", lambda: css(driver, "#login-form"))
    assert not driver.find_element(By.ID, "top").is_displayed()
    gone = httpx.get(f"{gw.admin_url}/api/v1/session", headers=cookie, timeout=10)
    assert gone.status_code == 401, gone.text
    driver.refresh()
    wait_for("the login form after a reload", lambda: css(driver, "#login-form"))
    assert_clean(driver, "logging out")


def overview_requests(driver) -> int:
    return int(driver.find_element("css selector", "#ov-requests .stat-value").text.replace(",", ""))


def test_the_overview_request_log_and_limits_show_the_traffic(gw, browser):
    """A request through the gateway shows in the request log and raises the overview's count;
    a key's budget shows as a bar with its number, amber at 80 %."""
    from selenium.webdriver.common.by import By
    driver = browser
    login(driver, gw, OWNER, OWNER_PASSWORD)
    wait_for("the overview", lambda: driver.current_url.endswith("#/overview") and css(driver, "#ov-requests")
             and css(driver, "#ov-forecast") and not css(driver, "main .loading"))
    before = overview_requests(driver)
    assert css(driver, "svg.chart[aria-label]"), "the charts carry a text summary"
    assert css(driver, "details.chart-data table"), "and a table of their figures"
    check_a11y(driver, "the overview")
    assert_clean(driver, "the overview")

    # A budget on a key, set in the page, used 4 times out of 5: the bar is amber, 80 %.
    go(driver, gw, "keys", "Keys")
    form = wait_for("the key form", lambda: css(driver, "#key-create")[0])
    field(form, "Name").send_keys("budgeted")
    field(form, "dev").click()
    field(form, "Requests per day").send_keys("5")
    button(driver, "Create key", form).click()
    key = wait_for("the key, shown once", lambda: css(driver, "input[data-secret]")[0].get_attribute("value"))
    button(driver, "Done, hide it").click()
    stored = httpx.get(f"{gw.admin_url}/api/v1/keys/budgeted", headers={"authorization": f"Bearer {gw.admin_token}"},
                       timeout=10)
    assert stored.json()["limits"] == {"requests_per_day": 5}, stored.text
    wait_for("the key's row", lambda: any("budgeted" in r.text for r in css(driver, "main tbody tr")))
    assert_clean(driver, "a key with a budget")
    for _ in range(4):
        assert wait_status(gw, key, 200).status_code == 200

    # The request log shows the key's requests, filtered by key; the CSV export works.
    go(driver, gw, "requests", "Requests")
    check_a11y(driver, "the request log")
    filters = css(driver, "#requests-filters")[0]
    field(filters, "Key").send_keys("budgeted")
    choose(field(filters, "Status class"), "2xx")

    def rows():
        button(driver, "Apply filters", filters).click()
        time.sleep(0.3)
        found = [r.text for r in css(driver, "main tbody tr")]
        return len(found) >= 4 and all("budgeted" in r and "200" in r for r in found) and found
    wait_for("the key's requests in the log", rows)
    assert "4 requests" in driver.find_element(By.CSS_SELECTOR, ".pager [role=status]").text
    shot(driver, "requests")
    downloads = Path(tempfile.mkdtemp(prefix="ferrogate-ui-csv-"))
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    button(driver, "Export CSV").click()
    csv_file = wait_for("the CSV download", lambda: next(iter(downloads.glob("*.csv")), None))
    lines = wait_for("the CSV's rows", lambda: (lambda ls: len(ls) == 5 and ls)(csv_file.read_text().splitlines()))
    assert lines[0].startswith("When,Request id,Key,Model,"), lines[0]
    assert all(",budgeted,chat," in line and ",200," in line for line in lines[1:]), lines
    shutil.rmtree(downloads, ignore_errors=True)
    assert_clean(driver, "the request log and its CSV export")

    # The overview counts them.
    go(driver, gw, "overview", "Overview")

    def counted():
        button(driver, "Refresh").click()
        time.sleep(0.3)
        return overview_requests(driver) >= before + 4
    wait_for("the overview's count to grow by 4", counted)
    choose(css(driver, "main select")[0], "1h")
    wait_for("the last hour's count", lambda: overview_requests(driver) >= 4)

    # Broken down by key: a line for the budgeted key; the ranking by key counts its requests.
    toolbar = css(driver, "main .toolbar")[0]
    choose(field(toolbar, "Break down by"), "key")
    chart = wait_for("the requests-by-key chart", lambda: css(driver, "#ov-chart-by-requests")[0])
    assert "budgeted" in [li.text for li in chart.find_elements(By.CSS_SELECTOR, ".legend li")], chart.text
    top = css(driver, "#ov-top")[0].find_element(By.XPATH, "./ancestor::section")
    choose(field(top, "Rank"), "key")
    ranked = wait_for("the budgeted key in the ranking", lambda: next(
        r for r in css(driver, "#ov-top tbody tr") if r.find_elements(By.TAG_NAME, "td")[0].text == "budgeted"))
    assert ranked.find_elements(By.TAG_NAME, "td")[1].text == "4", ranked.text
    check_a11y(driver, "the overview broken down by key")
    shot(driver, "overview")
    assert_clean(driver, "the overview after the requests")

    # The keys page: the key's usage this month.
    go(driver, gw, "keys", "Keys")
    wait_for("the key's usage in its row", lambda: any(
        "budgeted" in r.text and "4 requests" in r.text for r in css(driver, "main tbody tr")))
    shot(driver, "keys")
    assert_clean(driver, "the keys page with usage")

    # The limits page: the budget's bar, amber, with its numbers.
    go(driver, gw, "limits", "Limits and budgets")

    def bar(text: str):
        driver.refresh()
        wait_for("the limits table", lambda: css(driver, "main h1") and not css(driver, "main .loading"))
        level = css(driver, '[data-limit="key/budgeted/requests/day"]')
        return level and text in level[0].text and level[0]
    level = wait_for("the budget at 80 %", lambda: bar("4 of 5 (80 %)"))
    assert "warn" in level.get_attribute("class").split(), level.get_attribute("class")
    row = level.find_element(By.XPATH, "./ancestor::tr")
    meter = row.find_element(By.CSS_SELECTOR, "svg.meter")
    assert "warn" in meter.get_attribute("class").split() and "80.0 % used" in meter.get_attribute("aria-label")
    assert row.find_elements(By.TAG_NAME, "td")[-1].text == "1", row.text
    check_a11y(driver, "the limits page")
    # One more: 100 %, red.
    assert wait_status(gw, key, 200).status_code == 200
    level = wait_for("the budget at 100 %", lambda: bar("5 of 5 (100 %)"))
    assert "over" in level.get_attribute("class").split(), level.get_attribute("class")
    check_a11y(driver, "the limits page over budget")
    shot(driver, "limits")
    assert_clean(driver, "the limits page")
    driver.find_element(By.ID, "logout").click()
    wait_for("the login form", lambda: css(driver, "#login-form"))


def test_a_viewer_sees_no_changes_and_a_forced_one_is_refused(gw, browser):
    from selenium.webdriver.common.by import By
    driver = browser
    login(driver, gw, VIEWER, VIEWER_PASSWORD)
    assert nav_titles(driver) == VIEWER_PAGES, nav_titles(driver)
    go(driver, gw, "keys", "Keys")
    wait_for("the keys list", lambda: "alice" in driver.find_element(By.CSS_SELECTOR, "main").text)
    for page, title in (("keys", "Keys"), ("groups", "Groups"), ("models", "Models")):
        go(driver, gw, page, title)
        assert not css(driver, "main form"), f"{page}: no create form for a viewer"
        labels = [b.text for b in css(driver, "main button")]
        assert not labels, f"{page}: a viewer sees no buttons, saw {labels}"
        check_a11y(driver, f"the viewer's {page} page")
    driver.get(f"{gw.admin_url}/ui/#/audit")
    wait_for("the first page instead of the audit log", lambda: driver.current_url.endswith("#/overview"))
    header, csrf = session_of(driver, gw)
    forced = httpx.post(f"{gw.admin_url}/api/v1/keys", json={"name": "sneaky"}, timeout=10,
                        headers={**header, "x-csrf-token": csrf})
    assert forced.status_code == 403 and "needs the key-manager role" in forced.json()["error"], forced.text
    forced = httpx.delete(f"{gw.admin_url}/api/v1/keys/alice", timeout=10, headers={**header, "x-csrf-token": csrf})
    assert forced.status_code == 403, forced.text
    assert_clean(driver, "the viewer's pages")
    driver.find_element(By.ID, "logout").click()
    wait_for("the login form", lambda: css(driver, "#login-form"))
    assert_clean(driver, "the viewer's logout")


def test_the_console_check_sees_a_csp_violation(gw, browser):
    """The check above is not blind: an inline script is refused by the policy and logged."""
    driver = browser
    driver.get(f"{gw.admin_url}/ui/")
    wait_for("the login form", lambda: css(driver, "#login-form"))
    assert_clean(driver, "the login page")
    driver.execute_script("const s = document.createElement('script'); s.textContent = 'window.x = 1'; "
                          "document.head.append(s);")
    seen = wait_for("the violation in the log", lambda: console_problems(driver), timeout=5)
    assert any("Content Security Policy" in m for m in seen), seen
    assert driver.execute_script("return window.x === undefined"), "the inline script did not run"
