"""A flood against the embedded server: N batch-64 requests at once, the server's RSS before, at its peak
and after, and how long the answers took (issue 18: a bounded queue answers 503 at once and gives the
memory back).

One `trainserve serve` on the cnn repository `trainserve train` / `trainserve export` write (tiny preset,
CPU), started as a user starts it plus `--server-args`; every request is fired at once from one asyncio
client (aiohttp, binary tensors), twice (the second flood shows what the first left behind).

    python benchmarks/flood.py                                   # 1500 requests, the server's defaults
    python benchmarks/flood.py --server-args "--max-queue-bytes 100000000000 --queue-timeout-s 0"   # unbounded
Prints one JSON line per flood.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1500, help="requests fired at once per flood")
    parser.add_argument("--batch", type=int, default=64, help="rows per request (<= the export's max batch 64)")
    parser.add_argument("--floods", type=int, default=2, help="floods, one after the other, on one server")
    parser.add_argument("--server-args", default="", help="extra `trainserve serve` arguments")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="flood-") as tmp:
        repo, model, _, _ = exported_repository(Path(tmp), "tiny", "cpu")
        cmd = [sys.executable, "-m", "trainserve", "serve", "--model-repository", str(repo), "--http-port", "0",
               "--grpc-port", "-1", "--metrics-port", "-1", *args.server_args.split()]
        proc, port = start_process(cmd, r"ready http=[^:]+:(\d+)")
        try:
            time.sleep(1.0)
            for _ in range(args.floods):
                print(json.dumps(asyncio.run(flood(port, proc.pid, model, args.requests, args.batch))), flush=True)
        finally:
            stop_process(proc)


if __name__ == "__main__":
    main()
