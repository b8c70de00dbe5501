"""The locustfile: no torch, and the web UI's start form shows the custom fields and the shapes."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

from tests.conftest import REPO_ROOT, free_port, stop_process, subprocess_env


def test_no_torch_in_load_generator_imports() -> None:
    code = ("import sys, loadtest.locustfile, loadtest.runner, trainserve.commands.load_command; "
            "bad = [m for m in ('torch', 'onnxruntime') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], env=subprocess_env(), cwd=REPO_ROOT, check=True, timeout=60)


def test_web_ui_form_has_custom_fields_and_shapes() -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "locust", "-f", str(REPO_ROOT / "loadtest" / "locustfile.py"), "--web-host",
           "127.0.0.1", "--web-port", str(port), "--model-name", "tiny_cpu"]  # no --class-picker: on by default
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


def test_setup_failure_is_one_failure_per_user_without_tracebacks() -> None:
    # nothing listens on the port: each user reports one 'setup' failure and stops quietly
    cmd = [sys.executable, "-m", "locust", "-f", str(REPO_ROOT / "loadtest" / "locustfile.py"), "--headless",
           "-u", "3", "-r", "3", "--run-time", "4s", "--server-url", f"127.0.0.1:{free_port()}", "--model-name",
           "tiny_cpu", "--abort-after-s", "1", "TritonHttpUser"]
    out = subprocess.run(cmd, env=subprocess_env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    log = out.stdout + out.stderr
    assert "Traceback" not in log, log[-3000:]
    assert "StopUser" not in log, log[-3000:]
    assert "setup" in log and "no HTTP inference server answers" in log, log[-3000:]
