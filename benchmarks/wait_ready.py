"""Wait until a server answers its readiness endpoint: `python benchmarks/wait_ready.py [URL] [--timeout-s 60]`.

Exits 0 once GET URL (default http://127.0.0.1:18000/v2/health/ready) answers 200, 1 after the timeout.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.request


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url", nargs="?", default="http://127.0.0.1:18000/v2/health/ready")
    ap.add_argument("--timeout-s", type=float, default=60.0)
    a = ap.parse_args()
    deadline = time.monotonic() + a.timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(a.url, timeout=1):
                return 0
        except Exception:
            time.sleep(0.5)
    print(f"{a.url} did not answer within {a.timeout_s:.0f} s", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
