"""`trainserve serve` as a real subprocess: the ready line, startup errors, SIGTERM finishing in-flight work."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import threading
import time

import numpy as np
import tritonclient.http as httpclient

from tests.conftest import stop_process, subprocess_env, trainserve_cmd
from tests.serve.tiny_models import classifier_onnx, expected_logits

READY = re.compile(r"trainserve serve: ready http=127\.0\.0\.1:(\d+) grpc=(\S+) metrics=(\S+)")


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        trainserve_cmd("serve", *args), env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_ready(proc: subprocess.Popen, timeout_s: float = 60) -> int:
    """Read stdout until the ready line; returns the HTTP port."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"server exited before ready: {proc.wait(5)} {proc.stderr.read()}")
        m = READY.search(line)
        if m:
            return int(m.group(1))
    raise AssertionError("server not ready in time")


def test_sigterm_finishes_in_flight_requests_and_exits_0(tmp_path):
    from tests.serve.test_grpc_server import slow_classifier_onnx

    # a run of a second or more keeps the request in flight while SIGTERM arrives
    slow_classifier_onnx(tmp_path / "slow" / "1" / "model.onnx", spins=3_000_000)  # ~2 s
    (tmp_path / "slow" / "config.pbtxt").write_text(
        'max_batch_size: 8\ninput [ { name: "input" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "logits" data_type: TYPE_FP32 dims: [ 3 ] } ]\ndynamic_batching { }\n')
    proc = _start("--model-repository", str(tmp_path), "--http-port", "0", "--grpc-port", "-1", "--metrics-port", "-1")
    try:
        port = _wait_ready(proc)
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
        assert client.is_server_ready()
        x = np.full((2, 4), 3.0, np.float32)
        result: dict = {}

        def send():
            i = httpclient.InferInput("input", [2, 4], "FP32")
            i.set_data_from_numpy(x)
            try:
                result["logits"] = httpclient.InferenceServerClient(f"127.0.0.1:{port}").infer("slow", [i]).as_numpy("logits")
            except Exception as e:  # reported by the assertion below
                result["error"] = e

        sender = threading.Thread(target=send)
        sender.start()
        time.sleep(0.5)  # the request is now running
        assert sender.is_alive() and not result
        proc.send_signal(signal.SIGTERM)
        sender.join(15)
        assert "error" not in result, result.get("error")
        np.testing.assert_allclose(result["logits"], expected_logits(x), rtol=1e-5)
        assert proc.wait(15) == 0
    finally:
        stop_process(proc, 15)


def test_missing_repository_is_one_line_and_exit_1(tmp_path):
    proc = _start("--model-repository", str(tmp_path / "absent"), "--http-port", "0")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "does not exist" in err and "Traceback" not in err


def test_repository_without_a_loadable_model_exits_1(tmp_path):
    (tmp_path / "bad" / "1").mkdir(parents=True)
    (tmp_path / "bad" / "1" / "model.onnx").write_bytes(b"junk")
    proc = _start("--model-repository", str(tmp_path), "--http-port", "0", "--grpc-port", "-1", "--metrics-port", "-1")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "no model in" in err and "could be loaded" in err and "Traceback" not in err


def test_port_in_use_exits_1(tmp_path):
    classifier_onnx(tmp_path / "m" / "1" / "model.onnx")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = _start("--model-repository", str(tmp_path), "--http-port", str(port), "--grpc-port", "-1", "--metrics-port", "-1")
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in err and "Traceback" not in err


def test_bad_device_is_refused_by_the_command_line(tmp_path):
    classifier_onnx(tmp_path / "m" / "1" / "model.onnx")
    proc = _start("--model-repository", str(tmp_path), "--device", "gpu")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2  # typer's usage error, before anything starts
    text = " ".join(err.replace("│", " ").split())  # unwrapped from its box
    assert "'gpu' is not one of 'cpu', 'cuda'" in text and "Traceback" not in text


def test_cuda_device_never_falls_back_to_the_cpu_silently(tmp_path):
    classifier_onnx(tmp_path / "m" / "1" / "model.onnx")
    proc = _start("--model-repository", str(tmp_path), "--device", "cuda", "--http-port", "0",
                  "--grpc-port", "-1", "--metrics-port", "-1")
    try:
        lines = iter(proc.stdout.readline, "")  # ends once the process exits
        if any(READY.search(line) for line in lines):  # a working CUDA provider (the GPU machine): it serves
            assert proc.poll() is None
        else:
            assert proc.wait(15) == 1
            err = proc.stderr.read()
            assert "CUDA was requested but onnxruntime fell back to" in err and "Traceback" not in err
    finally:
        stop_process(proc, 15)
