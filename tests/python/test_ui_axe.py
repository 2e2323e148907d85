"""The dashboard's accessibility audit is not blind: `check_a11y` (tests/python/ui_browser.py)
runs axe-core in the page, in the light and the dark scheme, and fails on a serious or critical
violation of the WCAG 2.0 and 2.1 A and AA rules. The login page passes it; an image without a
text alternative put in the page (axe's `image-alt`, critical) fails it, naming the rule and the
element; text readable on the light background but not on the dark one is found in the dark
scheme only (`color-contrast`, serious). The console stays clean throughout: axe runs outside the
page's Content-Security-Policy. The gateway is `ferrogate serve` with its default file store;
only the login page is needed."""

from __future__ import annotations

import pytest

from conftest import own_gateway
from ui_browser import (assert_clean, axe_violations, browser_session, check_a11y, console_problems, css,
                        wait_for)


@pytest.fixture(scope="module")
def gw():
    yield from own_gateway("ferrogate-ui-axe-")


browser = pytest.fixture(scope="module")(browser_session)


def open_login_page(driver, gw) -> None:
    driver.get(f"{gw.admin_url}/ui/")
    # The file store has no logins: the login page says so, with no form (enough for the audit).
    wait_for("the login page", lambda: css(driver, "main .login h1"))
    # Its one logged error, the refused session probe, is read off the log here, so the log
    # after the audit shows only what the audit caused.
    loaded = console_problems(driver)
    assert all("/api/v1/session - " in m and "401" in m for m in loaded), loaded


def test_the_audit_names_an_injected_violation(gw, browser):
    driver = browser
    open_login_page(driver, gw)
    check_a11y(driver, "the login page")
    assert_clean(driver, "the audit of the login page")

    # Put in by WebDriver, not by a script of the page's: the policy does not apply to it.
    driver.execute_script("const i = document.createElement('img'); i.id = 'no-alt'; "
                          "i.src = 'favicon.svg'; document.querySelector('main').append(i);")
    wait_for("the image to load", lambda: driver.execute_script(
        "const i = document.getElementById('no-alt'); return i.complete && i.naturalWidth > 0"))
    with pytest.raises(AssertionError) as failed:
        check_a11y(driver, "the login page with an image without alt")
    message = str(failed.value)
    assert "axe image-alt (critical)" in message and "#no-alt" in message, message
    assert "(light)" in message, message
    assert_clean(driver, "the audit of the broken page")


def test_the_audit_sees_the_dark_scheme(gw, browser):
    driver = browser
    open_login_page(driver, gw)
    # Dark grey text: 12.6:1 on the light scheme's white, 1.4:1 on the dark scheme's background.
    # (Set through the CSSOM, which the policy allows, unlike a style attribute.)
    driver.execute_script("const p = document.createElement('p'); p.id = 'dark-grey'; "
                          "p.textContent = 'Readable in the light scheme only'; p.style.color = '#333333'; "
                          "document.querySelector('main').append(p);")
    try:
        seen = {}
        for scheme in ("light", "dark"):
            driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                                   {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
            seen[scheme] = {v["id"]: v["targets"] for v in axe_violations(driver)}
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    assert seen["light"] == {}, seen
    assert seen["dark"] == {"color-contrast": ["#dark-grey"]}, seen
    assert_clean(driver, "the audit in both schemes")
