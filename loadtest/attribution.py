"""Where a served request's time goes: the client, the network, the server's front end, its queue, its compute.

The client's own time is calibrated against a null endpoint (trainserve.loadtest.nullserver): the
same client code (loadtest/clients.py, the same request bytes, the same answer parsing) calls a
loopback endpoint that answers a real server's canned answer at once, in another process; the client
runs in a process of its own set up as a Locust worker is (gevent's monkey-patching, gRPC on gevent's
loop: loadtest/calibrate.py), as that setup costs time of its own. Over a few hundred calls, the
median round trip minus the null endpoint's own CPU per call (read from its process) is the client's
time per request: its CPU (encoding, system calls, parsing) and its own waiting, such as gRPC's
hand-offs between its threads, plus a loopback hop of microseconds. The client's CPU per call is its
floor. Locust's bookkeeping after a request is outside the timed call, so it is rightly not here. The
server's health endpoint was the other candidate; it would fold the server's HTTP handling into the
client's share, which is what this split is meant to separate.

Queue and compute come from the server's own statistics (loadtest/serverstats.py) read before and
after the window; the server's front end is its request duration minus those; the network is what
is left of the client's mean latency. `attribute` marks a split whose measured parts exceed the
latency by more than a tolerance as inconsistent instead of showing a negative segment.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from trainserve.core.procs import child_env
from trainserve.core.served import Attribution, as_dict
from trainserve.loadtest.clientcpu import StepCpu
from trainserve.loadtest.model_info import ModelInfo
from trainserve.loadtest.serverstats import StatsReader, window

log = logging.getLogger(__name__)
CALIBRATION_CALLS = 300
WARMUP_CALLS = 30
TOLERANCE_MS = 0.05  # plus TOLERANCE_FRACTION of the latency: clocks and means of slightly different sets
TOLERANCE_FRACTION = 0.05


def attribute(latency_ms: float | None, client_ms: float | None, server: dict[str, Any] | None) -> Attribution | None:
    """Split a mean client latency with the calibrated client time and the server's window (serverstats.window)."""
    if latency_ms is None or server is None or not server.get("requests") or server.get("success_ms") is None:
        return None
    queue = server.get("queue_ms") or 0.0
    compute = sum(server.get(f"{p}_ms") or 0.0 for p in ("compute_input", "compute_infer", "compute_output"))
    server_ms = server["success_ms"]
    a = Attribution(latency_ms=round(latency_ms, 4), client_ms=None if client_ms is None else round(client_ms, 4),
                    server_ms=round(server_ms, 4), queue_ms=round(queue, 4), compute_ms=round(compute, 4),
                    frontend_ms=round(max(0.0, server_ms - queue - compute), 4), requests=int(server["requests"]),
                    mean_batch=server.get("mean_batch"))
    rest = latency_ms - (client_ms or 0.0) - server_ms
    if rest < -(TOLERANCE_MS + TOLERANCE_FRACTION * latency_ms):
        a.consistent = False
        a.note = (f"the measured parts exceed the client's mean latency by {-rest:.3f} ms (client "
                  f"{client_ms or 0:.3f} + server {server_ms:.3f} vs {latency_ms:.3f} ms)")
    a.network_ms = round(max(0.0, rest), 4)
    return a


# --- the null endpoint ----------------------------------------------------------------------------


def capture_answer(url: str, info: ModelInfo, arrays: dict[str, np.ndarray], protocol: str) -> bytes:
    """One real answer of the server to the load's request, as the bytes the null endpoint will send."""
    if protocol == "grpc":
        import tritonclient.grpc as tg

        inputs = []
        for spec in info.inputs:
            inp = tg.InferInput(spec.name, list(arrays[spec.name].shape), spec.datatype)
            inp.set_data_from_numpy(arrays[spec.name])
            inputs.append(inp)
        client = tg.InferenceServerClient(url)
        try:
            result = client.infer(info.name, inputs, outputs=[tg.InferRequestedOutput(o.name) for o in info.outputs])
            return result.get_response().SerializeToString()
        finally:
            client.close()
    import tritonclient.http as th

    inputs = []
    for spec in info.inputs:
        inp = th.InferInput(spec.name, list(arrays[spec.name].shape), spec.datatype)
        inp.set_data_from_numpy(arrays[spec.name], binary_data=True)
        inputs.append(inp)
    outputs = [th.InferRequestedOutput(o.name, binary_data=True) for o in info.outputs]
    body, json_size = th.InferenceServerClient.generate_request_body(inputs, outputs=outputs)
    headers = {"Inference-Header-Content-Length": str(json_size)} if json_size is not None else {}
    host, _, port = url.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", f"/v2/models/{info.name}/infer", body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"the server answered {resp.status}: {data[:200]!r}")
        wanted = ("content-type", "inference-header-content-length")
        keep = [(k, v) for k, v in resp.getheaders() if k.lower() in wanted]
    finally:
        conn.close()
    head = ["HTTP/1.1 200 OK", *(f"{k}: {v}" for k, v in keep), f"Content-Length: {len(data)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data


@contextlib.contextmanager
def null_endpoint(protocol: str, answer: bytes):
    """A running null endpoint (its own process) for the block; yields (HOST:PORT, its pid)."""
    with tempfile.TemporaryDirectory(prefix="trainserve-null.") as tmp:
        path = Path(tmp) / "answer.bin"
        path.write_bytes(answer)
        proc = subprocess.Popen([sys.executable, "-m", "trainserve.loadtest.nullserver", protocol, str(path)],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=child_env())
        try:
            line = proc.stdout.readline().decode().strip() if proc.stdout else ""
            if not line.startswith("port "):
                raise RuntimeError(f"the null endpoint did not start (exit code {proc.poll()})")
            yield f"127.0.0.1:{line.split()[1]}", proc.pid
        finally:
            proc.kill()
            proc.wait()
            if proc.stdout:
                proc.stdout.close()


def calibrate_client(url: str, info: ModelInfo, arrays: dict[str, np.ndarray], protocol: str, http_client: str,
                     want_outputs: bool, batch: int, input_data: str, calls: int = CALIBRATION_CALLS) -> dict[str, Any]:
    """The client's own time per request: {"client_ms", "client_cpu_ms", "null_rtt_ms", "null_cpu_ms", "calls"}.

    The calls come from a child process set up as a Locust worker is (loadtest/calibrate.py).
    """
    answer = capture_answer(url, info, arrays, protocol)
    spec = {"server": url, "model": info.name, "protocol": protocol, "batch": batch, "input_data": input_data,
            "http_client": http_client, "want_outputs": want_outputs, "calls": calls, "warmup": WARMUP_CALLS}
    with null_endpoint(protocol, answer) as (null_url, pid):
        n0 = _cpu_s(pid)
        argv = [sys.executable, "-m", "trainserve.loadtest.calibrate", json.dumps({**spec, "null": null_url})]
        done = subprocess.run(argv, capture_output=True, text=True, env=child_env(), timeout=120)
        null_cpu = _cpu_s(pid) - n0
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the calibration client failed (exit code {done.returncode}): "
                           f"{(done.stderr.strip().splitlines() or ['no output'])[-1][:200]}")
    got = json.loads(lines[-1])
    cpu, wall = min(got["cpu_s"], got["wall_s"]) / calls, got["median_call_s"]  # s per call
    null_cpu = null_cpu / (calls + WARMUP_CALLS)  # the null endpoint also answered the warm-up calls
    ms = lambda s: round(s * 1000, 4)  # noqa: E731
    return {"client_ms": ms(max(cpu, wall - null_cpu)), "client_cpu_ms": ms(cpu), "null_rtt_ms": ms(wall),
            "null_cpu_ms": ms(null_cpu), "calls": calls, "protocol": protocol,
            "http_client": http_client if protocol == "http" else None}


def _cpu_s(pid: int) -> float:
    """CPU seconds of a process, all its threads, at nanosecond resolution where Linux's schedstat has them.

    psutil's CPU times count clock ticks (10 ms), coarser than a few hundred calls of microseconds each.
    """
    total, seen = 0, False
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int(stat.read_text().split()[0])  # ns spent running
            seen = True
    if seen:
        return total / 1e9
    import psutil

    return float(sum(psutil.Process(pid).cpu_times()[:2]))


# --- ramp steps (runs on the Locust master, beside shapes.StepRamp) -------------------------------


class StepWindow:
    """The client's CPU and the server's statistics over one ramp step; `finish` gives the row's extra keys."""

    def __init__(self, collector: Any, server_url: str, model: str, protocol: str) -> None:
        self.reader = StatsReader(server_url, model, protocol)
        self.before = self.reader.snapshot()
        self.cpu = StepCpu(collector)
        self.t0, self.wall0 = time.perf_counter(), time.time()

    def finish(self, mean_ms: float | None) -> dict[str, Any]:
        seconds = time.perf_counter() - self.t0
        return {"mean_ms": mean_ms, "client_cpu": as_dict(self.cpu.finish()),
                "server": window(self.before, self.reader.snapshot(), seconds),
                "wall_start": round(self.wall0, 3), "wall_end": round(self.wall0 + seconds, 3)}
