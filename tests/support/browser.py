"""Headless Chromium for the web console's tests: Playwright for Python driving the system's chromium.

* :func:`chromium` starts ``/usr/bin/chromium`` (Debian's package, listed in .ci/install-system-packages); when it
  is missing or cannot start the test is skipped with the reason and the command that installs it.
* :func:`login_link` asks the API server for a one-time login link (``POST /console/api/logincodes``) with a
  user's bearer token, exactly as ``nodus console`` does.
* :class:`Screenshots` saves a page's screenshot into a directory of the test run, and also into
  ``$NODUS_CONSOLE_SCREENSHOTS`` when that is set (docs/console.md's pictures are taken that way).
* :func:`serious_violations` runs axe-core (from console/node_modules, installed by ``make console``) in the page
  and returns its serious and critical violations.
* :class:`PageProblems` records what the browser itself reports: script errors and Content-Security-Policy
  refusals, which a page of the console must never cause.
* :func:`navigate` loads a page again when Chromium aborted the load with ``net::ERR_NETWORK_CHANGED``: Chromium
  cancels requests in flight whenever a network interface comes or goes on the machine, and the simulated hosts'
  container networks come and go while the tests run. Only a full load is retried; a page's own requests
  (watches, log streams) reconnect by themselves, which is part of what the tests check. :func:`download`
  clicks a download link again for the same reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Download, Locator, Page, Request, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from tests.support.cluster import Cluster

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
AXE = ROOT / "console" / "node_modules" / "axe-core" / "axe.min.js"
VENDOR = ROOT / "nodus" / "console" / "vendor" / "uPlot.iife.min.js"
SCREENSHOTS_ENV = "NODUS_CONSOLE_SCREENSHOTS"
NETWORK_CHANGED = "ERR_NETWORK_CHANGED"
LOAD_ATTEMPTS = 3


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """A headless Chromium; skips the test when it cannot start."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/install-system-packages lists it)")
    with sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        except PlaywrightError as exc:
            pytest.skip(f"chromium cannot start: {str(exc).splitlines()[0]}")
        try:
            yield browser
        finally:
            browser.close()


def require_built_console() -> None:
    """Fail with the fix when the console's vendored libraries or axe-core were not installed."""
    missing = [str(path.relative_to(ROOT)) for path in (VENDOR, AXE) if not path.exists()]
    if missing:
        pytest.fail(f"the web console's libraries are not installed ({', '.join(missing)}): run `make console`")


def login_link(cluster: Cluster, user: str) -> str:
    """A one-time login link for ``user``, from POST /console/api/logincodes with their bearer token."""
    with cluster.client(user) as client:
        response = client.post("/console/api/logincodes")
    assert response.status_code == 201, response.text
    url = str(response.json()["url"])
    assert url.startswith(f"{cluster.url}/console/login?code="), url
    return url


class Screenshots:
    """Saves screenshots into ``directory`` and, when set, into ``$NODUS_CONSOLE_SCREENSHOTS``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        extra = os.environ.get(SCREENSHOTS_ENV)
        self.extra = Path(extra) if extra else None

    def take(self, page: Page, name: str) -> Path:
        path = self.directory / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        if self.extra is not None:
            self.extra.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, self.extra / path.name)
        return path


def serious_violations(page: Page) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it is now (id, impact, help, the elements).

    axe is evaluated through the DevTools protocol, which the page's Content-Security-Policy does not govern, so
    the page under test keeps its real policy."""
    page.evaluate(AXE.read_text(encoding="utf-8") + "\n;true")
    results = page.evaluate("async () => (await axe.run(document, {resultTypes: ['violations']})).violations")
    return [
        {
            "id": violation["id"],
            "impact": violation["impact"],
            "help": violation["help"],
            "nodes": [node["target"] for node in violation["nodes"]][:5],
        }
        for violation in results
        if violation["impact"] in ("serious", "critical")
    ]


class PageProblems:
    """Script errors and CSP refusals reported by a page (console messages and uncaught exceptions)."""

    def __init__(self, page: Page) -> None:
        self.problems: list[str] = []
        self.network_changed = False
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.problems.append(f"uncaught: {error}"))
        page.on("requestfailed", self._failed)

    def _failed(self, request: Request) -> None:
        if NETWORK_CHANGED in (request.failure or ""):
            self.network_changed = True

    def _console(self, message: ConsoleMessage) -> None:
        text = message.text
        if "Content Security Policy" in text or (message.type == "error" and "Failed to load resource" not in text):
            self.problems.append(f"{message.type}: {text}")


def navigate(page: Page, problems: PageProblems, url: Callable[[], str], ready: Callable[[], None]) -> None:
    """Load ``url()`` and wait for ``ready()`` (an ``expect``); again, with a new ``url()``, when a request of the
    load failed with net::ERR_NETWORK_CHANGED (up to LOAD_ATTEMPTS loads). Anything else fails at once."""
    for attempt in range(1, LOAD_ATTEMPTS + 1):
        problems.network_changed = False
        try:
            page.goto(url())
            ready()
            return
        except (PlaywrightError, AssertionError) as exc:
            if attempt == LOAD_ATTEMPTS or not (problems.network_changed or NETWORK_CHANGED in str(exc)):
                raise
            problems.problems.clear()  # what the aborted load reported


def download(page: Page, link: Locator) -> Download:
    """The finished download that clicking ``link`` starts; clicked again when Chromium aborted it with
    net::ERR_NETWORK_CHANGED (up to LOAD_ATTEMPTS times). Any other failure fails the test."""
    for attempt in range(1, LOAD_ATTEMPTS + 1):
        with page.expect_download() as started:
            link.click()
        failure = started.value.failure()
        if failure is None:
            return started.value
        if attempt == LOAD_ATTEMPTS or NETWORK_CHANGED not in failure:
            pytest.fail(f"the download from {started.value.url} failed: {failure}")
    raise AssertionError("unreachable")
