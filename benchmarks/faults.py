"""What a careless or hostile client costs the embedded server (issue 27): another client's latency while
slow large bodies arrive, and the server's RSS idle / peak / after for refused gzip bodies, refused gRPC
requests and a gRPC flood.

One `trainserve serve` on the tests' tiny repository (tests/serve/tiny_models.py: 'classifier' and 'ints',
whose INT64 input has a free second dimension, so one request can be any size), HTTP and gRPC on.

    python benchmarks/faults.py                       # every scenario, prints one JSON line each
    python benchmarks/faults.py --only slow           # one of: slow, gzip, grpc_refused, grpc_flood
    python benchmarks/faults.py --source /tmp/base    # the server from another checkout (PYTHONPATH), to compare

"after" is the RSS once the server has been idle for --settle-s seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

MiB = 1 << 20


def start(repo: Path, source: str | None, *args: str) -> tuple[subprocess.Popen, int, int]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if source:
        env["PYTHONPATH"] = source
    cmd = [sys.executable, "-m", "trainserve", "serve", "--model-repository", str(repo), "--http-port", "0",
           "--grpc-port", "0", "--metrics-port", "-1", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=source or None)
    for line in proc.stdout:
        if m := re.search(r"ready http=[^:]+:(\d+) grpc=[^:]+:(\d+)", line):
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, int(m.group(1)), int(m.group(2))
    raise SystemExit(f"server did not start: {proc.wait()}")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Rss:
    """The server's RSS: idle before, peak while, after once idle."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.proc = psutil.Process(pid)
        self.idle = self.peak = self.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def now(self) -> int:
        return self.proc.memory_info().rss

    def _watch(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.now())

    def result(self, settle_s: float) -> dict:
        time.sleep(settle_s)
        self._stop.set()
        after = self.now()
        return {"rss_idle_mib": self.idle // MiB, "rss_peak_mib": self.peak // MiB, "rss_after_mib": after // MiB,
                "after_over_idle": round(after / self.idle, 3)}


def small_infer_latencies(port: int, stop_event: threading.Event) -> list[float]:
    """One keep-alive client sending batch-1 classifier requests back to back; seconds per answer."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=120)
    x = np.ones((1, 4), np.float32)
    inp = httpclient.InferInput("input", [1, 4], "FP32")
    inp.set_data_from_numpy(x)
    out = []
    while not stop_event.is_set():
        t0 = time.perf_counter()
        client.infer("classifier", [inp])
        out.append(time.perf_counter() - t0)
        time.sleep(0.005)
    client.close()
    return out


def slow_bodies(port: int, pid: int, n: int, body_mib: int, seconds: float) -> dict:
    """n connections each send a body of body_mib MiB over `seconds`, complete; another client's latencies."""
    rss = Rss(pid)
    done = threading.Event()
    lat: list[float] = []
    other = threading.Thread(target=lambda: lat.extend(small_infer_latencies(port, done)))
    other.start()
    time.sleep(0.5)
    declared = body_mib * MiB
    chunk = 256 * 1024
    statuses: list[str] = []

    def one() -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
            s.sendall((f"POST /v2/models/classifier/infer HTTP/1.1\r\nHost: b\r\nContent-Length: {declared}\r\n"
                       "Inference-Header-Content-Length: 100\r\n\r\n").encode())
            pause = seconds / (declared / chunk)
            data = b"\x01" * chunk
            for sent in range(0, declared, chunk):
                s.sendall(data[: min(chunk, declared - sent)])
                time.sleep(pause)
            statuses.append(s.recv(200).split(b"\r\n", 1)[0].decode(errors="replace"))

    senders = [threading.Thread(target=one) for _ in range(n)]
    for t in senders:
        t.start()
    for t in senders:
        t.join()
    time.sleep(0.5)
    done.set()
    other.join()
    lat_ms = np.array(lat) * 1000
    out = {"scenario": "slow_bodies", "connections": n, "body_mib": body_mib, "send_s": seconds,
           "other_requests": len(lat), "other_p50_ms": round(float(np.percentile(lat_ms, 50)), 2),
           "other_p99_ms": round(float(np.percentile(lat_ms, 99)), 2), "other_max_ms": round(float(lat_ms.max()), 2),
           "answers": sorted(set(statuses))}
    out.update(rss.result(1.0))
    return out


def gzip_bomb(inflated: int) -> bytes:
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip framing
    zeros = b"\0" * (16 * MiB)
    parts = [comp.compress(zeros) for _ in range(inflated // len(zeros))]
    return b"".join(parts) + comp.flush()


def refused_gzip(port: int, pid: int, n: int, inflated_mib: int, settle_s: float) -> dict:
    import requests

    body = gzip_bomb(inflated_mib * MiB)
    rss = Rss(pid)
    codes = []
    for _ in range(n):
        r = requests.post(f"http://127.0.0.1:{port}/v2/models/classifier/infer", data=body, timeout=300,
                          headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
        codes.append(r.status_code)
    out = {"scenario": "refused_gzip", "requests": n, "body_kib": len(body) // 1024, "inflates_to_mib": inflated_mib,
           "answers": codes}
    out.update(rss.result(settle_s))
    return out


def _ints_request(rows: int, width: int, name: str = "input_ids"):
    import tritonclient.grpc as grpcclient

    x = np.ones((rows, width), np.int64)
    inp = grpcclient.InferInput(name, list(x.shape), "INT64")
    inp.set_data_from_numpy(x)
    return [inp]


def refused_grpc(grpc_port: int, pid: int, n: int, body_mib: int, settle_s: float) -> dict:
    """n requests of body_mib MiB that the server refuses (an input name the model lacks)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    inputs = _ints_request(1, body_mib * MiB // 8, name="no_such_input")
    rss = Rss(pid)
    errors = set()
    for _ in range(n):
        try:
            client.infer("ints", inputs)
        except Exception as e:  # every one is refused: the point
            errors.add(type(e).__name__ + ": " + str(e)[:80])
    client.close()
    out = {"scenario": "refused_grpc", "requests": n, "body_mib": body_mib, "answers": sorted(errors)}
    out.update(rss.result(settle_s))
    return out


def grpc_flood(grpc_port: int, pid: int, n: int, body_kib: int, settle_s: float) -> dict:
    """n requests of body_kib KiB each, all at once, over one aio channel."""
    import tritonclient.grpc.aio as aioclient

    x = np.ones((4, body_kib * 1024 // 32), np.int64)
    rss = Rss(pid)

    async def flood() -> dict[str, int]:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        inp = aioclient.InferInput("input_ids", list(x.shape), "INT64")
        inp.set_data_from_numpy(x)
        res = await asyncio.gather(*(client.infer("ints", [inp]) for _ in range(n)), return_exceptions=True)
        await client.close()
        codes: dict[str, int] = {}
        for r in res:
            key = "ok" if not isinstance(r, Exception) else str(r)[:60]
            codes[key] = codes.get(key, 0) + 1
        return codes

    codes = asyncio.run(flood())
    out = {"scenario": "grpc_flood", "requests": n, "body_kib": body_kib, "answers": codes}
    out.update(rss.result(settle_s))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["slow", "gzip", "grpc_refused", "grpc_flood"])
    parser.add_argument("--source", help="run the server from this checkout (PYTHONPATH), e.g. a git archive of main")
    parser.add_argument("--slow-connections", type=int, default=11)
    parser.add_argument("--slow-mib", type=int, default=60)
    parser.add_argument("--slow-s", type=float, default=3.0, help="how long each slow body takes to send, seconds")
    parser.add_argument("--settle-s", type=float, default=5.0, help="idle time before the 'after' RSS, seconds")
    args = parser.parse_args()
    from tests.serve.tiny_models import make_repository

    with tempfile.TemporaryDirectory(prefix="faults-") as tmp:
        repo = make_repository(Path(tmp) / "repo", classifier_delay_us=0)
        for name in ("slow", "gzip", "grpc_refused", "grpc_flood"):
            if args.only and name != args.only:
                continue
            proc, port, grpc_port = start(repo, args.source)
            try:
                time.sleep(2.0)
                if name == "slow":
                    r = slow_bodies(port, proc.pid, args.slow_connections, args.slow_mib, args.slow_s)
                elif name == "gzip":
                    r = refused_gzip(port, proc.pid, 2, 1024, args.settle_s)
                elif name == "grpc_refused":
                    r = refused_grpc(grpc_port, proc.pid, 12, 59, args.settle_s)
                else:
                    r = grpc_flood(grpc_port, proc.pid, 1500, 512, args.settle_s)
                print(json.dumps(r), flush=True)
            finally:
                stop(proc)


if __name__ == "__main__":
    main()
