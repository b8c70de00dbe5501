"""A flood against the embedded server: N batch-64 requests at once, the server's RSS before, at its peak
and after, and how long the answers took (a bounded queue must answer 503 at once and give the
memory back).

One `trainserve serve` on the cnn repository `trainserve train` / `trainserve export` write (tiny preset,
CPU), started as a user starts it plus `--server-args`; every request is fired at once from one asyncio
client (aiohttp, binary tensors), twice (the second flood shows what the first left behind).

    python benchmarks/flood.py                                   # 1500 requests, the server's defaults
    python benchmarks/flood.py --server-args "--max-queue-bytes 100000000000 --queue-timeout-s 0"   # unbounded
Prints one JSON line per flood.

    python benchmarks/flood.py --slow-bodies 10 --body-mib 60 --server-args "--body-timeout-s 5"
Slow bodies instead: N connections each declare a body of M MiB and send all of it but
the last byte; prints the server's RSS before, at its peak and after, how long until the server closed
each connection, and whether an infer request was answered while they were held.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.serve_bench import exported_repository, start_process, stop_process  # noqa: E402


async def flood(port: int, pid: int, model: str, n: int, batch: int) -> dict:
    import aiohttp
    import psutil

    proc = psutil.Process(pid)
    x = np.random.default_rng(0).random((batch, 3, 32, 32), dtype=np.float32)
    header = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": list(x.shape),
                                     "parameters": {"binary_data_size": x.nbytes}}]}).encode()
    body = header + x.tobytes()

    async def one(session) -> tuple[int, float]:
        t0 = time.perf_counter()
        async with session.post(f"http://127.0.0.1:{port}/v2/models/{model}/infer", data=body,
                                headers={"Inference-Header-Content-Length": str(len(header))}) as r:
            await r.read()
            return r.status, time.perf_counter() - t0

    rss_before = peak = proc.memory_info().rss

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, proc.memory_info().rss)
            await asyncio.sleep(0.02)

    watcher = asyncio.create_task(watch())
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        t0 = time.perf_counter()
        results = await asyncio.gather(*(one(session) for _ in range(n)), return_exceptions=True)
        took = time.perf_counter() - t0
    watcher.cancel()
    await asyncio.sleep(2.0)  # let the server settle
    codes: dict[str, int] = {}
    for r in results:
        key = str(r[0]) if isinstance(r, tuple) else type(r).__name__
        codes[key] = codes.get(key, 0) + 1
    lat = sorted(r[1] for r in results if isinstance(r, tuple))
    return {"requests": n, "batch": batch, "rss_before_mib": rss_before >> 20, "rss_peak_mib": peak >> 20,
            "rss_after_mib": proc.memory_info().rss >> 20, "seconds": round(took, 2), "answers": codes,
            "p50_s": round(lat[len(lat) // 2], 3) if lat else None, "max_s": round(lat[-1], 3) if lat else None}


def slow_bodies(port: int, pid: int, model: str, n: int, body_mib: int) -> dict:
    import socket
    import threading

    import psutil
    import requests

    proc = psutil.Process(pid)
    declared = body_mib << 20
    rss_before = peak = proc.memory_info().rss
    closed_after: list[float] = []
    statuses: list[str] = []
    lock = threading.Lock()

    def one() -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=600) as s:
            head = (f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: b\r\nContent-Length: {declared}\r\n"
                    "Inference-Header-Content-Length: 100\r\n\r\n").encode()
            s.sendall(head + b"\x01" * (declared - 1))
            t0 = time.perf_counter()
            answer = b""
            try:
                while chunk := s.recv(65536):
                    answer += chunk
            except ConnectionResetError:
                pass
            with lock:
                closed_after.append(time.perf_counter() - t0)
                statuses.append(answer.split(b"\r\n", 1)[0].decode(errors="replace") or "closed, no answer")

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    served_meanwhile = None
    while any(t.is_alive() for t in threads):
        peak = max(peak, proc.memory_info().rss)
        if served_meanwhile is None and peak - rss_before > (declared * n) // 2:
            x = np.zeros((1, 3, 32, 32), np.float32)
            r = requests.post(f"http://127.0.0.1:{port}/v2/models/{model}/infer", timeout=60,
                              json={"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 32, 32],
                                                "data": x.ravel().tolist()}]})
            served_meanwhile = r.status_code
        time.sleep(0.02)
    time.sleep(2.0)  # let the server settle
    codes: dict[str, int] = {}
    for st in statuses:
        codes[st] = codes.get(st, 0) + 1
    return {"connections": n, "body_mib": body_mib, "rss_before_mib": rss_before >> 20, "rss_peak_mib": peak >> 20,
            "rss_after_mib": proc.memory_info().rss >> 20, "closed_after_s": [round(min(closed_after), 2),
                                                                              round(max(closed_after), 2)],
            "answers": codes, "infer_status_meanwhile": served_meanwhile}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1500, help="requests fired at once per flood")
    parser.add_argument("--batch", type=int, default=64, help="rows per request (<= the export's max batch 64)")
    parser.add_argument("--floods", type=int, default=2, help="floods, one after the other, on one server")
    parser.add_argument("--server-args", default="", help="extra `trainserve serve` arguments")
    parser.add_argument("--slow-bodies", type=int, default=0, help="instead of floods: this many slow-body connections")
    parser.add_argument("--body-mib", type=int, default=60, help="body each slow connection declares, MiB")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="flood-") as tmp:
        repo, model, _, _ = exported_repository(Path(tmp), "tiny", "cpu")
        cmd = [sys.executable, "-m", "trainserve", "serve", "--model-repository", str(repo), "--http-port", "0",
               "--grpc-port", "-1", "--metrics-port", "-1", *args.server_args.split()]
        proc, port = start_process(cmd, r"ready http=[^:]+:(\d+)")
        try:
            time.sleep(1.0)
            if args.slow_bodies:
                print(json.dumps(slow_bodies(port, proc.pid, model, args.slow_bodies, args.body_mib)), flush=True)
                return
            for _ in range(args.floods):
                print(json.dumps(asyncio.run(flood(port, proc.pid, model, args.requests, args.batch))), flush=True)
        finally:
            stop_process(proc)


if __name__ == "__main__":
    main()
