"""Driving the dashboard in headless Chromium (Debian's `chromium` and `chromium-driver`,
installed by scripts/test-tools) with Selenium: the browser session, waits, element lookups, the
login, and the checks every page passes (no console error or Content-Security-Policy violation;
labels, contrast and width in the light and the dark scheme). Used by the test_ui*.py modules."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from conftest import REPO, Gateway

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
WAIT_S = 20.0


def _chromium_installed() -> bool:
    return CHROMIUM.is_file() and CHROMEDRIVER.is_file()


def browser_session():
    """Headless Chromium at 1366x768 with its console log readable. Installs Debian's chromium
    with scripts/test-tools when it is missing; skips only when that fails."""
    if not _chromium_installed():
        done = subprocess.run([str(REPO / "scripts" / "test-tools")], capture_output=True, text=True, timeout=900)
        if not _chromium_installed():
            pytest.skip(f"chromium and chromium-driver are not installed and scripts/test-tools could not install "
                        f"them (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1366,768", "--no-first-run", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    profile = Path(tempfile.mkdtemp(prefix="ferrogate-ui-chrome-"))
    opts.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(options=opts, service=Service(str(CHROMEDRIVER)))
    driver.set_window_size(1366, 768)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


# --------------------------------------------------------------------------- browser helpers

def console_problems(driver) -> list[str]:
    """The browser log since the last call: errors and CSP violations (anything else ignored)."""
    bad = []
    for entry in driver.get_log("browser"):
        message = entry.get("message", "")
        if entry.get("level") == "SEVERE" or "Content Security Policy" in message or "Refused to" in message:
            bad.append(f"{entry.get('level')} {entry.get('source')}: {message}")
    return bad


def assert_clean(driver, step: str) -> None:
    bad = console_problems(driver)
    assert not bad, f"{step}: the browser logged errors or CSP violations:\n" + "\n".join(bad)


def wait_for(what: str, probe, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            got = probe()
            if got:
                return got
        except Exception as e:  # an element not there yet, or gone stale
            last = e
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} ({last!r})")


def css(driver, selector: str):
    from selenium.webdriver.common.by import By
    return driver.find_elements(By.CSS_SELECTOR, selector)


def button(driver, text: str, scope=None):
    """The visible button whose accessible text (label, or aria-label) is `text`."""
    from selenium.webdriver.common.by import By
    root = scope or driver
    for b in root.find_elements(By.TAG_NAME, "button"):
        if b.is_displayed() and (b.text.strip() == text or b.get_attribute("aria-label") == text):
            return b
    return None


def field(form, label: str):
    """The input labelled `label` inside `form`."""
    from selenium.webdriver.common.by import By
    for lab in form.find_elements(By.TAG_NAME, "label"):
        if lab.text.strip() == label and lab.get_attribute("for"):
            return form.find_element(By.ID, lab.get_attribute("for"))
    raise AssertionError(f"no field labelled {label!r}")


def go(driver, gw: Gateway, page: str, heading: str) -> None:
    """Follows the navigation link to `page` and waits for its heading and content."""
    from selenium.webdriver.common.by import By
    link = wait_for(f"the {heading} link", lambda: next(
        (a for a in css(driver, "#nav a") if a.text == heading), None))
    link.click()
    wait_for(f"the {heading} page", lambda: driver.current_url.endswith(f"#/{page}")
             and driver.find_element(By.CSS_SELECTOR, "main h1").text == heading
             and not css(driver, "main .loading"))


def login(driver, gw: Gateway, name: str, password: str) -> None:
    """Logs in with the keyboard: types the name, tabs to the password, presses Enter."""
    from selenium.webdriver.common.keys import Keys
    driver.get(f"{gw.admin_url}/ui")
    form = wait_for("the login form", lambda: css(driver, "#login-form")[0])
    name_input = field(form, "User name")
    wait_for("focus on the name field", lambda: driver.switch_to.active_element == name_input)
    name_input.send_keys(name)
    driver.switch_to.active_element.send_keys(Keys.TAB)
    assert driver.switch_to.active_element == field(form, "Password"), "Tab moves from the name to the password"
    driver.switch_to.active_element.send_keys(password + Keys.ENTER)
    wait_for("the navigation", lambda: css(driver, "#nav a") and css(driver, "#top")[0].is_displayed())
    assert_clean(driver, f"login of {name}")


def choose(select, value: str) -> None:
    from selenium.webdriver.support.ui import Select
    Select(select).select_by_value(value)


def nav_titles(driver) -> list[str]:
    return [a.text for a in css(driver, "#nav a")]


def session_of(driver, gw: Gateway) -> tuple[dict, str]:
    """The browser's session cookie as a header, and its CSRF token (for calls made outside)."""
    cookie = next(c for c in driver.get_cookies() if "ferrogate_session" in c["name"])
    header = {"cookie": f"{cookie['name']}={cookie['value']}"}
    me = httpx.get(f"{gw.admin_url}/api/v1/session", headers=header, timeout=10)
    assert me.status_code == 200, me.text
    return header, me.json()["csrf_token"]


A11Y_SCRIPT = r"""
const lum = (c) => {
  const m = c.match(/rgba?\(([^)]+)\)/); if (!m) return null;
  const p = m[1].split(',').map((x) => parseFloat(x));
  if (p.length === 4 && p[3] === 0) return null;
  const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
  return 0.2126 * f(p[0]) + 0.7152 * f(p[1]) + 0.0722 * f(p[2]);
};
const bg = (el) => {
  for (let e = el; e; e = e.parentElement) {
    const l = lum(getComputedStyle(e).backgroundColor); if (l !== null) return l;
  }
  return lum('rgb(255,255,255)');
};
const problems = [];
for (const el of document.querySelectorAll('input, select, textarea')) {
  if (el.type === 'hidden') continue;
  if (!(el.labels && el.labels.length) && !el.getAttribute('aria-label')) problems.push(`unlabelled ${el.outerHTML.slice(0, 80)}`);
}
for (const el of document.querySelectorAll('body *')) {
  if (!el.offsetParent && el.tagName !== 'BODY') continue;
  if (el.disabled || el.closest('.visually-hidden')) continue;
  const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
  if (!own) continue;
  const fg = lum(getComputedStyle(el).color); const b = bg(el);
  if (fg === null || b === null) continue;
  const ratio = (Math.max(fg, b) + 0.05) / (Math.min(fg, b) + 0.05);
  if (ratio < 4.5) problems.push(`contrast ${ratio.toFixed(2)} of "${el.textContent.trim().slice(0, 40)}" (${el.tagName})`);
}
if (document.documentElement.scrollWidth > window.innerWidth + 1) problems.push(`scrolls sideways: ${document.documentElement.scrollWidth}px`);
return problems;
"""


def shot(driver, name: str) -> None:
    """Saves a screenshot under $FERROGATE_UI_SCREENSHOTS when it is set (to look at the pages)."""
    folder = os.environ.get("FERROGATE_UI_SCREENSHOTS")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    # The page from its top, as tall as its content (up to 2,000 px), at the tests' width.
    size = driver.get_window_size()
    height = driver.execute_script("window.scrollTo(0, 0); return document.documentElement.scrollHeight")
    driver.set_window_size(size["width"], max(size["height"], min(int(height) + 140, 2000)))
    try:
        driver.save_screenshot(str(Path(folder) / f"{name}.png"))
    finally:
        driver.set_window_size(size["width"], size["height"])


# axe-core (tests/ui-audit, pinned in its package-lock.json), run in every page check_a11y sees.
AXE_DIR = REPO / "tests" / "ui-audit"
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
AXE_FAILING_IMPACTS = ("serious", "critical")
AXE_TARGETS_SHOWN = 3
_axe_source: str | None = None

# Runs axe in the page and hands back its serious and critical violations, shortened. The source
# of axe.min.js is put in front of this text by `axe_violations`: WebDriver runs the whole as a
# function through the DevTools protocol, which the page's Content-Security-Policy
# (`script-src 'self'`) does not govern: no <script> element is added, nothing is refused and the
# console stays clean (test_ui_axe.py checks that). It loads once per document: `window.axe`
# survives the scheme switch and the hash routes, not a reload.
AXE_RUN_SCRIPT = r"""
const done = arguments[arguments.length - 1];
const failing = arguments[0], tags = arguments[1], shown = arguments[2];
window.axe.run(document, {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']})
  .then((r) => done(r.violations.filter((v) => failing.includes(v.impact)).map((v) => ({
    id: v.id, impact: v.impact, help: v.help, count: v.nodes.length,
    targets: v.nodes.slice(0, shown).map((n) => n.target.join(' ')),
    summary: (v.nodes[0] && v.nodes[0].failureSummary || '').trim().replace(/:\n\s*/g, ': ')
      .replace(/\n\s*/g, '; ').slice(0, 300),
  }))))
  .catch((e) => done({error: String(e && e.stack || e)}));
"""


def axe_source() -> str:
    """axe.min.js, installed on first use by tests/ui-audit/install.sh (npm ci from the lock file)
    and read once. Without node or npm the audit cannot run: that fails the test, saying so,
    rather than letting a page pass unaudited."""
    global _axe_source
    if _axe_source is None:
        try:
            done = subprocess.run(["bash", str(AXE_DIR / "install.sh")], capture_output=True, text=True, timeout=600)
        except OSError as e:
            pytest.fail(f"cannot run tests/ui-audit/install.sh for the axe-core audit: {e}")
        if done.returncode == 3:
            pytest.fail("the dashboard's accessibility audit needs axe-core, installed with npm, but "
                        f"node or npm is missing (e.g. apt-get install nodejs npm): {done.stderr.strip()}")
        if done.returncode != 0:
            pytest.fail(f"tests/ui-audit/install.sh failed (exit {done.returncode}), so axe-core is not "
                        f"installed: {done.stderr.strip()[-1500:]}")
        _axe_source = (AXE_DIR / "node_modules" / "axe-core" / "axe.min.js").read_text()
    return _axe_source


def axe_violations(driver) -> list[dict]:
    """axe-core's violations of the WCAG 2.0 and 2.1 A and AA rules in the page as it is now,
    those of a serious or critical impact only (minor and moderate ones are not failures)."""
    loaded = driver.execute_script("return typeof window.axe === 'object' && typeof window.axe.run === 'function'")
    script = AXE_RUN_SCRIPT if loaded else axe_source() + "\n;" + AXE_RUN_SCRIPT
    found = driver.execute_async_script(script, list(AXE_FAILING_IMPACTS), AXE_TAGS, AXE_TARGETS_SHOWN)
    if isinstance(found, dict):
        raise AssertionError(f"axe-core could not run in the page: {found.get('error')}")
    return found


def axe_report(violations: list[dict]) -> str:
    return "; ".join(
        f"axe {v['id']} ({v['impact']}): {v['help']}, {v['count']} element(s): {', '.join(v['targets'])}"
        + (f" [{v['summary']}]" if v.get("summary") else "")
        for v in violations)


def check_a11y(driver, step: str) -> None:
    """Labels, contrast and width in the light and the dark scheme, by our own script and by
    axe-core's audit (rules tagged WCAG 2.0 and 2.1, levels A and AA; a serious or critical
    violation fails)."""
    try:
        for scheme in ("light", "dark"):
            driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                                   {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
            problems = driver.execute_script(A11Y_SCRIPT)
            assert not problems, f"{step} ({scheme}): " + "; ".join(problems)
            violations = axe_violations(driver)
            assert not violations, f"{step} ({scheme}): " + axe_report(violations)
    finally:
        # A failure, caught by a test that expects it, leaves the browser in its own scheme.
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
