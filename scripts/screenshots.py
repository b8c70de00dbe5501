"""Screenshots for docs/, taken with the browser tests' setup (Playwright on the system Chromium).

  python scripts/screenshots.py locust [OUT.png]          Locust's start form (default docs/locust-ui.png)
  python scripts/screenshots.py report HTML [OUT.png]     a report page (default docs/example-report-screenshot.png)

Run from the repository root with the project's Python (.venv/bin/python); needs /usr/bin/chromium.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.browser.chromium import launch, missing_reason  # noqa: E402
from tests.conftest import free_port, stop_process, subprocess_env  # noqa: E402


def shoot_locust(out: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", "loadtest/locustfile.py", "--web-host", "127.0.0.1",
         "--web-port", str(port), "--model-name", "cnn_cpu", "--server-url", "127.0.0.1:8000"],
        cwd=ROOT, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(url, timeout=2).close()
                break
            except OSError:
                time.sleep(0.2)
        with _page(1280, 900) as page:
            page.goto(url)
            page.get_by_text("Custom parameters").click()
            page.wait_for_selector("form [name=modelName][data-ts-label]")
            page.wait_for_timeout(500)  # the accordion's animation
            page.screenshot(path=str(out), full_page=True)
    finally:
        stop_process(proc)


def shoot_report(html: Path, out: Path) -> None:
    with _page(1280, 900) as page:
        page.goto(html.resolve().as_uri())
        page.wait_for_load_state("load")
        page.screenshot(path=str(out), full_page=True)


class _page:
    """A page in a fresh headless Chromium, closed on exit."""

    def __init__(self, width: int, height: int) -> None:
        self.size = (width, height)

    def __enter__(self):
        from playwright.sync_api import sync_playwright

        self._tmp = tempfile.TemporaryDirectory()
        self._pw = sync_playwright().start()
        self._ctx = launch(self._pw, Path(self._tmp.name), *self.size)
        return self._ctx.new_page()

    def __exit__(self, *exc: object) -> None:
        self._ctx.close()
        self._pw.stop()
        self._tmp.cleanup()


def main(argv: list[str]) -> int:
    reason = missing_reason()
    if reason:
        print(f"screenshots: {reason}", file=sys.stderr)
        return 1
    if argv[:1] == ["locust"] and len(argv) <= 2:
        out = Path(argv[1] if len(argv) > 1 else "docs/locust-ui.png")
        shoot_locust(out)
    elif argv[:1] == ["report"] and 2 <= len(argv) <= 3:
        out = Path(argv[2] if len(argv) > 2 else "docs/example-report-screenshot.png")
        shoot_report(Path(argv[1]), out)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
