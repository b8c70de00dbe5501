"""The one way this project drives a browser: Playwright on the system's Chromium (Debian's `chromium`).

Playwright's own browser download is not needed: `launch` starts the installed Chromium, headless,
with a fresh profile in `profile_dir`, and nothing that reaches beyond the pages it is given.
Used by tests/browser/ and by scripts/screenshots.py.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage"]


def find_chromium() -> str | None:
    """$CHROMIUM, else the first installed system Chromium, else None."""
    env = os.environ.get("CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for path in CANDIDATES:
        if os.access(path, os.X_OK):
            return path
    found = shutil.which("chromium")
    return found


def missing_reason() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    if find_chromium() is None:
        return "no Chromium installed (apt-get install -y chromium, or set CHROMIUM=/path/to/chrome)"
    return None


def launch(playwright: Any, profile_dir: Path, width: int = 1280, height: int = 900) -> Any:
    """A persistent headless Chromium context in a fresh `profile_dir` (a BrowserContext)."""
    path = find_chromium()
    if path is None:
        raise RuntimeError(missing_reason() or "no Chromium")
    return playwright.chromium.launch_persistent_context(
        str(profile_dir), executable_path=path, headless=True, args=ARGS,
        viewport={"width": width, "height": height}, device_scale_factor=1)
