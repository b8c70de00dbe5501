"""Two checkouts' embedded servers side by side on one model repository: req/s and server CPU per request.

For "no regression" checks across a change (docs/BENCHMARKS.md): both servers run at once and
are driven in turn, a few seconds each, alternating the order every round, so the machine's drift hits
both alike. One tritonclient HTTP client, one user, batch 1.

    python benchmarks/ab_servers.py --a . --b ../old-checkout --repository runs/R/model_repository --model cnn_cpu

For HTTP and gRPC at several user counts from client processes, with each server's own mean batch,
queue and compute time, on the CPU or a GPU: benchmarks/serve_matrix.py.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import tritonclient.http as httpclient

READY = re.compile(r"http=127\.0\.0\.1:(\d+)")


def start(root: Path, repository: Path) -> tuple[subprocess.Popen, int]:
    env = dict(os.environ, PYTHONPATH=str(root))
    proc = subprocess.Popen([sys.executable, "-m", "trainserve", "serve", "--model-repository", str(repository),
                             "--http-port", "0", "--grpc-port", "-1", "--metrics-port", "-1"],
                            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        if m := READY.search(line):
            return proc, int(m.group(1))
    raise SystemExit(f"the server of {root} exited before it was ready")


def drive(port: int, model: str, seconds: float) -> tuple[float, int]:
    """(requests/s, requests) of one closed-loop user for `seconds`, after 200 warm-up requests."""
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
    meta = client.get_model_metadata(model)
    inputs = []
    for t in meta["inputs"]:
        shape = [1, *(abs(int(d)) for d in t["shape"][1:])]
        i = httpclient.InferInput(t["name"], shape, t["datatype"])
        i.set_data_from_numpy(np.ones(shape, dtype=np.float32 if t["datatype"] == "FP32" else np.int64))
        inputs.append(i)
    for _ in range(200):
        client.infer(model, inputs)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        client.infer(model, inputs)
        n += 1
    return n / (time.perf_counter() - t0), n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", type=Path, required=True, help="checkout A (its trainserve package is served)")
    p.add_argument("--b", type=Path, required=True, help="checkout B")
    p.add_argument("--repository", type=Path, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seconds", type=float, default=3.0)
    args = p.parse_args()
    servers = {name: start(root.resolve(), args.repository.resolve()) for name, root in (("A", args.a), ("B", args.b))}
    try:
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in servers}
        for r in range(args.rounds):
            order = list(servers) if r % 2 == 0 else list(reversed(servers))
            for name in order:
                proc, port = servers[name]
                ps = psutil.Process(proc.pid)
                c0 = sum(ps.cpu_times()[:2])
                rate, n = drive(port, args.model, args.seconds)
                cpu_ms = (sum(ps.cpu_times()[:2]) - c0) / n * 1000
                results[name].append((rate, cpu_ms))
                print(f"round {r + 1} {name}: {rate:,.0f} req/s, server {cpu_ms:.3f} CPU-ms/request", flush=True)
        for name, rows in results.items():
            rates = sorted(x for x, _ in rows)
            cpus = sorted(c for _, c in rows)
            print(f"{name}: median {rates[len(rates) // 2]:,.0f} req/s, {cpus[len(cpus) // 2]:.3f} CPU-ms/request")
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
