"""Open loop against a server that stalls: the rate holds and the latencies include the stall."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT, subprocess_env
from tests.conftest import stop_process
from tests.loadtest.conftest import start_stub

LOCUSTFILE = REPO_ROOT / "loadtest" / "locustfile.py"


def test_stall_shows_in_open_loop_latency(tmp_path: Path) -> None:
    rate, stall_s = 100, 1.0
    proc, url = start_stub("--stall-at", "0.5", "--stall-for", str(stall_s))
    try:
        cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary", "-t", "3s",
               "--server-url", url, "--model-name", "stub", "--load-shape", "PoissonRate", "--rate", str(rate),
               "--results-json", str(tmp_path / "r.json")]
        subprocess.run(cmd, env=subprocess_env(), cwd=REPO_ROOT, capture_output=True, timeout=60, check=True)
    finally:
        stop_process(proc)
    r = json.loads((tmp_path / "r.json").read_text())
    lat = r["latency"]
    # the rate held through the stall: about rate x window requests were sent and answered
    assert lat["count"] >= 0.7 * rate * r["requests_window_s"]
    # those due at the start of the stall waited for all of it, measured from their scheduled time
    assert lat["max_ms"] >= 0.8 * stall_s * 1000
    # about a third of the run fell in the stall: the p90 carries it, not just the maximum
    assert lat["p90_ms"] >= 0.2 * stall_s * 1000
    assert r["failures"] == 0
