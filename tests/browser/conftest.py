"""Browser fixtures: one headless system Chromium for the package (Playwright), pages that record their errors.

Skipped, with the reason, only where Chromium or Playwright is missing; CI installs both and sets
TRAINSERVE_REQUIRE_BROWSER=1 (.ci/run), which turns that skip into a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.chromium import launch, missing_reason
from tests.loadtest.conftest import embedded_server  # noqa: F401  (the real server on the tiny model)


# package scope: Playwright's sync API keeps an event loop running in this thread while it is open, which
# would break every later test that calls asyncio.run(); it is closed when tests/browser/ is done.
@pytest.fixture(scope="package")
def browser_context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    reason = missing_reason()
    if reason:
        if os.environ.get("TRAINSERVE_REQUIRE_BROWSER"):
            pytest.fail(f"TRAINSERVE_REQUIRE_BROWSER is set but {reason}")
        pytest.skip(f"browser tests need Chromium and Playwright: {reason}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = launch(p, tmp_path_factory.mktemp("chromium-profile"))
        context.set_default_timeout(15_000)
        try:
            yield context
        finally:
            context.close()


class Page:
    """A browser tab and the errors it reported (console errors, uncaught exceptions, failed loads)."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: self.errors.append(f"failed request: {r.url}"))


@pytest.fixture
def tab(browser_context: Any) -> Iterator[Page]:
    page = browser_context.new_page()
    try:
        yield Page(page)
    finally:
        page.close()
