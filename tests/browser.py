"""Driving the web console in a real browser: Debian's ``chromium`` through
``chromium-driver`` with Selenium (the test extra). Without them the browser
tests skip, saying what is missing.

Selenium rather than Playwright: it drives the system's chromedriver as it
is, while Playwright's Python package brings its own driver (a Node.js
runtime) and expects browsers of its own build, which cannot be downloaded
here. Screenshots of every step go to ``ARTIFACTS`` (printed in pytest's
header).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

ARTIFACTS = Path(os.environ.get("AGENTD_WEB_ARTIFACTS") or Path(tempfile.gettempdir()) / "agentd-web-screenshots")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
WAIT = 30  # seconds any one wait for the page may take


def missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            return f"no {path}: install Debian's {package} (apt-get install -y chromium chromium-driver)"
    return None


def start_browser():
    """A headless Chromium driven by the system's chromedriver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,900", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


class Page:
    """The console in the shared browser: waits on the DOM, screenshots steps."""

    def __init__(self, driver: Any, name: str) -> None:
        self.driver = driver
        self.folder = ARTIFACTS / name
        shutil.rmtree(self.folder, ignore_errors=True)  # only this run's steps
        self.folder.mkdir(parents=True, exist_ok=True)
        self.step = 0

    def open(self, url: str) -> None:
        self.driver.get("about:blank")
        self.driver.get(url)
        self.wait_js("return document.getElementById('conn').dataset.state === 'open' && window.agentdConsole.connected",
                     "the page to connect")

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def wait_js(self, body: str, what: str, *args: Any, timeout: float = WAIT) -> Any:
        """Wait until the JavaScript function body ``body`` (given ``args`` as
        ``arguments``) returns something truthy, and return it. The browser
        re-checks it on every change of the DOM (a MutationObserver), so
        nothing here polls."""
        from selenium.common.exceptions import TimeoutException

        script = """
            const done = arguments[arguments.length - 1];
            const args = Array.prototype.slice.call(arguments, 0, -1);
            const test = () => { try { return (function () { %s }).apply(null, args); } catch (e) { return false; } };
            const first = test();
            if (first) { done(first); return; }
            const observer = new MutationObserver(() => {
              const value = test();
              if (value) { observer.disconnect(); done(value); }
            });
            observer.observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
        """ % body
        self.driver.set_script_timeout(timeout)
        try:
            return self.driver.execute_async_script(script, *args)
        except TimeoutException:
            self.shot(f"timeout-{what}".replace(" ", "-")[:60])
            raise AssertionError(f"the page did not show {what} within {timeout} s; screenshots in {self.folder}") from None

    def css(self, selector: str):
        return self.driver.find_element("css selector", selector)

    def wait_css(self, selector: str, what: str | None = None, timeout: float = WAIT):
        self.wait_js("return document.querySelector(arguments[0]) !== null", what or selector, selector, timeout=timeout)
        return self.css(selector)

    def click(self, selector: str) -> None:
        """Click what ``selector`` finds once it is there. The console
        re-renders a list when an event arrives; an element replaced between
        finding and clicking is found again (as a user's next try would),
        a bounded number of times."""
        from selenium.common.exceptions import StaleElementReferenceException

        for attempt in range(5):
            try:
                self.wait_css(selector).click()
                return
            except StaleElementReferenceException:
                if attempt == 4:
                    raise

    def shot(self, label: str) -> Path:
        self.step += 1
        path = self.folder / f"{self.step:02d}-{label}.png"
        self.driver.save_screenshot(str(path))
        return path

    def errors(self) -> list[str]:
        """SEVERE messages in the browser console (failed loads, CSP, exceptions)."""
        return [e["message"] for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]
