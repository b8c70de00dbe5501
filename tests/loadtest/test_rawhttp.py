"""The lean keep-alive HTTP client: framing, header lookup, reuse, and the watchdog's timeout."""

from __future__ import annotations

import json
import subprocess
import sys

from trainserve.loadtest.rawhttp import encode_request, header
from tests.conftest import REPO_ROOT, subprocess_env


def test_encode_request_is_exact() -> None:
    req = encode_request("POST", "h:1", "/v2/models/m/infer", {"Inference-Header-Content-Length": "3"}, b"abcde")
    assert req == (b"POST /v2/models/m/infer HTTP/1.1\r\nHost: h:1\r\nInference-Header-Content-Length: 3\r\n"
                   b"Content-Length: 5\r\n\r\nabcde")


def test_header_lookup_ignores_case_and_spaces() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: x\r\nInference-Header-Content-Length:  42 "
    assert header(head, "inference-header-content-length") == "42"
    assert header(head, "content-type") == "x"
    assert header(head, "content-length") is None


def test_exchanges_under_gevent() -> None:
    p = subprocess.run([sys.executable, str(REPO_ROOT / "tests/loadtest/rawhttp_check.py")], cwd=REPO_ROOT,
                       env=subprocess_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    body = '{"x":1}' + bytes(range(200)).decode("latin-1")
    split = out["/split"]
    assert [r["status"] for r in split] == [200, 200, 200]
    assert all(r["body"] == body and r["ihcl"] == "7" for r in split)
    assert split[0]["open"] == 1 and split[1]["open"] == 1  # the keep-alive connection is reused
    assert out["/chunked"] == [{"status": 200, "body": "hello world", "ihcl": None, "open": 1}]
    assert out["/error"][0]["status"] == 400 and out["/error"][0]["body"] == '{"error":"nope"}\n'
    assert out["/close"] == [{"status": 200, "body": "to the end", "ihcl": None, "open": 0}]  # not kept
    stall = out["stall"]
    assert "timed out" in stall["error"] and stall["open"] == 0
    assert 0.5 <= stall["after_s"] < 2.0  # timeout_s=0.5, watchdog tick 0.05 s
