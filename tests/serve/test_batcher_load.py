"""Batching under concurrency, on a real `trainserve serve` process over loopback: 16 users of real
tritonclient clients on a model whose run takes a few milliseconds form batches over gRPC and both
HTTP paths (the server's own statistics say so), and one sequential user still skips the queue.

Before the batcher judged loneliness by idle time since the last run, a run on the event loop kept
the loop from reading the other users' requests, each then looked lone, and gRPC was served one
request at a time (mean batch 1.00 here, 16 users)."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import stop_process, subprocess_env, trainserve_cmd
from tests.serve.test_grpc_server import slow_classifier_onnx
from tests.serve.tiny_models import expected_logits

READY = re.compile(r"ready http=127\.0\.0\.1:(\d+) grpc=127\.0\.0\.1:(\d+)")
USERS = 16
REQUESTS_PER_USER = 25
SPINS = 3600  # the slow model's loop: ~3 ms a run on the 2-core CI machine, whatever the batch (a loaded machine's loop turns stay well below it)
# A request that waited for company would show this in its queue time: the batcher must not wait it out.
QUEUE_DELAY_US = 100_000


@pytest.fixture(scope="module")
def slow_repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("batching") / "repo"
    slow_classifier_onnx(repo / "slow" / "1" / "model.onnx", spins=SPINS)
    (repo / "slow" / "config.pbtxt").write_text(
        'max_batch_size: 16\ninput [ { name: "input" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "logits" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
        f"dynamic_batching {{ max_queue_delay_microseconds: {QUEUE_DELAY_US} }}\n"
        # however slow this machine makes the run today, a lone request may run on the loop
        'parameters { key: "idle_inline_max_us" value: { string_value: "50000" } }\n')
    return repo


@contextmanager
def serving(repo: Path) -> Iterator[tuple[int, int]]:
    """`trainserve serve` on ephemeral ports; (HTTP port, gRPC port). Stopped on the way out."""
    proc = subprocess.Popen(trainserve_cmd("serve", "--model-repository", str(repo), "--http-port", "0",
                                           "--grpc-port", "0", "--metrics-port", "-1"),
                            env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:
            if m := READY.search(line):
                break
        else:
            raise AssertionError(f"the server exited before it was ready (code {proc.wait(10)})")
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # a full pipe would stall it
        yield int(m.group(1)), int(m.group(2))
    finally:
        stop_process(proc)


def stats(http_port: int) -> tuple[int, int, int]:
    """(execution_count, inference_count, queue ns) of the slow model, from GET /v2/models/slow/stats."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/models/slow/stats", timeout=30) as r:
        s = json.loads(r.read())["model_stats"][0]
    return s["execution_count"], s["inference_count"], s["inference_stats"]["queue"]["ns"]


def client_call(protocol: str, http_port: int, grpc_port: int) -> Callable[[np.ndarray], np.ndarray]:
    """One user's own client: x (1, 4) -> logits. `http-aiohttp` adds a query string, which the lean HTTP
    path hands to aiohttp: the same requests through the server's other HTTP path."""
    if protocol == "grpc":
        import tritonclient.grpc as client_module
        client = client_module.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        extra = {}
    else:
        import tritonclient.http as client_module
        client = client_module.InferenceServerClient(f"127.0.0.1:{http_port}", network_timeout=60)
        extra = {"query_params": {"path": "aiohttp"}} if protocol == "http-aiohttp" else {}

    def call(x: np.ndarray) -> np.ndarray:
        inp = client_module.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        return client.infer("slow", [inp], **extra).as_numpy("logits")

    return call


def run_users(protocol: str, http_port: int, grpc_port: int, users: int, requests: int) -> list[str]:
    """`users` closed-loop users, each on its own thread and client, `requests` requests each, every answer
    checked against the model's own arithmetic; the failures, as text."""
    failures: list[str] = []
    start = threading.Barrier(users)

    def user(k: int) -> None:
        try:
            call = client_call(protocol, http_port, grpc_port)
            start.wait(60)
            for i in range(requests):
                x = np.full((1, 4), k + i / 100, np.float32)
                np.testing.assert_allclose(call(x), expected_logits(x), rtol=1e-5)
        except Exception as e:  # reported by the caller's assertion
            failures.append(f"user {k}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=user, args=(k,)) for k in range(users)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return failures


@pytest.mark.parametrize("protocol", ["grpc", "http", "http-aiohttp"])
def test_sixteen_users_are_batched_and_a_lone_user_skips_the_queue(slow_repo, protocol):
    with serving(slow_repo) as (http_port, grpc_port):
        assert not run_users(protocol, http_port, grpc_port, 1, 10)  # warm-up: every run time known
        before = stats(http_port)
        assert not run_users(protocol, http_port, grpc_port, 1, 40)
        after = stats(http_port)
        runs, requests, queue_ns = (b - a for a, b in zip(before, after))
        assert requests == 40 and runs == 40
        # one user: nothing to batch with, and no wait for company (the delay is 100 ms)
        # (a few go through the queue to look for company: a loop turn each)
        assert queue_ns / requests < 500_000, f"a lone user's requests queued {queue_ns / requests / 1e3:.0f} us each"

        before = stats(http_port)
        failures = run_users(protocol, http_port, grpc_port, USERS, REQUESTS_PER_USER)
        after = stats(http_port)
    assert not failures, failures[:3]
    runs, requests, _ = (b - a for a, b in zip(before, after))
    assert requests == USERS * REQUESTS_PER_USER
    assert requests / runs > 1.5, f"{USERS} {protocol} users were served {requests / runs:.2f} requests a run"
