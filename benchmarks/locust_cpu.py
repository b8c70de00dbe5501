"""Requests per Locust CPU-second: what one load-generator process costs per inference request.

Starts a server that is never the bottleneck (the stand-in KServe v2 server with canned binary
answers, tests/loadtest/stub_server.py, or any server given by --url) pinned to one core, and one
headless Locust process pinned to another; the locustfile reports the CPU seconds its process spent
between test start and stop. Writes $OUT/locust_cpu.json (OUT defaults to ./bench-out).

    python benchmarks/locust_cpu.py [--users 8] [--duration 10] [--clients prepared,tritonclient]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pin(cpu: int | None):
    return (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, default=8)
    p.add_argument("--duration", type=int, default=10, help="seconds per measurement")
    p.add_argument("--clients", default="prepared,tritonclient")
    p.add_argument("--protocols", default="http", help="http and/or grpc (grpc needs --url of a gRPC server)")
    p.add_argument("--url", default="", help="HOST:PORT of a server to use instead of the stand-in")
    p.add_argument("--model", default="stub")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    out = Path(os.environ.get("OUT", "bench-out"))
    out.mkdir(parents=True, exist_ok=True)
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu, locust_cpu = (cpus[-1], cpus[0]) if len(cpus) > 1 else (None, None)
    server = None
    url = args.url
    if not url:
        server = subprocess.Popen([sys.executable, str(ROOT / "tests/loadtest/stub_server.py"), "--port", "0"],
                                  stdout=subprocess.PIPE, text=True, preexec_fn=_pin(server_cpu))
        line = server.stdout.readline()
        url = "127.0.0.1:" + line.strip().rsplit("=", 1)[1]
    locust = shutil.which("locust", path=str(Path(sys.executable).parent)) or "locust"
    rows = []
    try:
        for protocol in args.protocols.split(","):
            for client in (args.clients.split(",") if protocol == "http" else ["tritonclient"]):
                for rep in range(args.repeats):
                    with tempfile.TemporaryDirectory() as tmp:
                        res = Path(tmp) / "res.json"
                        user = "TritonGrpcUser" if protocol == "grpc" else "TritonHttpUser"
                        cmd = [locust, "-f", str(ROOT / "loadtest/locustfile.py"), "--headless", "--only-summary",
                               "-u", str(args.users), "-r", str(args.users), "-t", f"{args.duration}s",
                               "--server-url", url, "--model-name", args.model, "--http-client", client,
                               "--results-json", str(res), user]
                        subprocess.run(cmd, check=False, preexec_fn=_pin(locust_cpu), cwd=ROOT,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=args.duration + 60)
                        r = json.loads(res.read_text())
                    cpu = r["load_generator"]["cpu_s"]
                    ok = r["latency"]["count"]
                    row = {"protocol": protocol, "client": client, "repeat": rep, "users": args.users,
                           "requests": ok, "failures": r["failures"], "window_s": r["window_s"], "cpu_s": cpu,
                           "requests_per_s": round(ok / r["window_s"], 1),
                           "requests_per_cpu_s": round(ok / cpu, 1) if cpu else None,
                           "p50_ms": r["latency"]["p50_ms"]}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
    summary = {}
    for r in rows:
        key = f"{r['protocol']}/{r['client']}"
        summary.setdefault(key, []).append(r["requests_per_cpu_s"])
    result = {"date": time.strftime("%Y-%m-%d"), "host": os.uname().nodename, "cpus": len(cpus),
              "server_cpu": server_cpu, "locust_cpu": locust_cpu, "url": url if args.url else "stand-in",
              "median_requests_per_cpu_s": {k: sorted(v)[len(v) // 2] for k, v in summary.items()}, "runs": rows}
    (out / "locust_cpu.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["median_requests_per_cpu_s"]))


if __name__ == "__main__":
    main()
