"""The locustfile: no torch, and the web UI's start form shows the custom fields and the shapes."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

from tests.conftest import REPO_ROOT, free_port, stop_process, subprocess_env


def test_no_torch_in_load_generator_imports() -> None:
    code = ("import sys, loadtest.locustfile, loadtest.runner, trainserve.commands.load; "
            "bad = [m for m in ('torch', 'onnxruntime') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], env=subprocess_env(), cwd=REPO_ROOT, check=True, timeout=60)


def test_web_ui_form_has_custom_fields_and_shapes() -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "locust", "-f", str(REPO_ROOT / "loadtest" / "locustfile.py"), "--web-host",
           "127.0.0.1", "--web-port", str(port), "--class-picker", "--model-name", "tiny_cpu"]
    proc = subprocess.Popen(cmd, env=subprocess_env(), cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline, page = time.monotonic() + 30, ""
        while time.monotonic() < deadline and not page:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
                    page = r.read().decode()
            except OSError:
                time.sleep(0.2)
        assert page, "the Locust web UI did not answer"
        for field in ("server_url", "model_name", "protocol", "batch_size", "input_data", "validate",
                      "expected_output", "rate", "slo_p99_ms"):
            assert f'"{field}"' in page, field
        for name in ("TritonHttpUser", "TritonGrpcUser", "OpenLoopUser", "StepRamp", "PoissonRate"):
            assert name in page, name
        assert "results_json" not in page  # runner-only options stay out of the form
    finally:
        stop_process(proc)
