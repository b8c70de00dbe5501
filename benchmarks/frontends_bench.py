"""Batch-1 requests/s of `trainserve serve --frontends N` for N in 1, 2, 4 (issue 23): HTTP and gRPC at 16 and 64 users.

For each front-end count one server is started on the repository's model; every point is driven by
the project's own load generator (`trainserve load`, Locust, several client processes), and the
server's own statistics before and after give its mean batch (inference_count / execution_count)
and the requests it counted. The server's CPU (the model process and its front ends) per request is
read from /proc. Optionally a ramp per N finds the capacity within a p99 SLO.

    python benchmarks/frontends_bench.py --device cuda --frontends 1,2,4 --users 16,64 --protocols http,grpc \
        --duration-s 15 --processes 6 --out "$OUT/frontends"          # [--repository R --model cnn_gpu] [--ramp]

Without --repository it trains the zoo CNN (small) briefly and exports it with `trainserve train` /
`trainserve export`, as a user would, and serves that repository as written. Writes frontends.json
and frontends.md under --out; each server's log beside them.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import tritonclient.http as httpclient

READY = re.compile(r"trainserve serve: ready http=(\S+) grpc=(\S+) metrics=(\S+) frontends=(\d+)")


def start_server(repository: Path, device: str, frontends: int, log: Path) -> tuple[subprocess.Popen, dict[str, str]]:
    logf = open(log, "w")
    proc = subprocess.Popen([sys.executable, "-m", "trainserve", "serve", "--model-repository", str(repository),
                             "--device", device, "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
                             "--frontends", str(frontends)], stdout=subprocess.PIPE, stderr=logf, text=True)
    for line in proc.stdout:
        logf.write(line)
        if m := READY.search(line):
            threading.Thread(target=lambda: [logf.write(rest) for rest in proc.stdout], daemon=True).start()
            return proc, {"http": m.group(1), "grpc": m.group(2), "metrics": m.group(3), "frontends": m.group(4)}
    raise SystemExit(f"the server with --frontends {frontends} exited before it was ready; see {log}")


def exported_repository(root: Path) -> Path:
    """The zoo CNN (small), trained for one short epoch and exported at the defaults: runs/bench/model_repository."""
    for argv in (["train", "--model", "cnn", "--preset", "small", "--samples", "256", "--epochs", "1",
                  "--batch-size", "64", "--device", "cpu"], ["export", "--eval-samples", "64"]):
        done = subprocess.run([sys.executable, "-m", "trainserve", *argv, "--run", "bench", "--runs-dir", str(root)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"trainserve {argv[0]} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return root / "bench" / "model_repository"


def server_cpu_s(pid: int) -> float:
    """CPU seconds of the server process and its children (the front ends)."""
    total = 0.0
    procs = [psutil.Process(pid)]
    procs += procs[0].children(recursive=True)
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def stats(http: str, model: str) -> dict:
    s = httpclient.InferenceServerClient(http).get_inference_statistics(model)["model_stats"]
    return {"inference_count": sum(m["inference_count"] for m in s), "execution_count": sum(m["execution_count"] for m in s),
            "success": sum(m["inference_stats"]["success"]["count"] for m in s),
            "queue_ns": sum(m["inference_stats"]["queue"]["ns"] for m in s),
            "compute_ns": sum(m["inference_stats"]["compute_infer"]["ns"] for m in s)}


def load(args, addresses: dict[str, str], protocol: str, users: int | None, target: str, runs: Path,
         ramp: bool = False) -> dict:
    url = addresses["http" if protocol == "http" else "grpc"]
    cmd = [sys.executable, "-m", "trainserve", "load", "--url", url, "--model", args.model, "--protocol", protocol,
           "--batch", "1", "--processes", str(args.processes), "--run", "frontends", "--runs-dir", str(runs),
           "--target", target, "--metrics-url", f"http://{addresses['metrics']}/metrics", "--validate", "off"]
    if ramp:
        cmd += ["--ramp", "--ramp-stop-p99-ms", f"{args.slo_p99_ms:g}", "--ramp-step-s", f"{args.ramp_step_s:g}",
                "--ramp-max-users", str(args.ramp_max_users)]
    else:
        cmd += ["--users", str(users), "--duration", f"{args.duration_s:g}s"]
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
    path = runs / "frontends" / "load" / f"{target}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repository", type=Path, help="model repository (default: train and export the zoo CNN)")
    p.add_argument("--model", help="served model name (default: cnn_gpu or cnn_cpu by --device)")
    p.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    p.add_argument("--frontends", default="1,2,4", help="front-end counts to compare")
    p.add_argument("--users", default="16,64")
    p.add_argument("--protocols", default="http,grpc")
    p.add_argument("--duration-s", type=float, default=20.0)
    p.add_argument("--processes", type=int, default=6, help="Locust client processes per point")
    p.add_argument("--ramp", action="store_true", help="also ramp HTTP users per front-end count (capacity within the SLO)")
    p.add_argument("--slo-p99-ms", type=float, default=20.0)
    p.add_argument("--ramp-step-s", type=float, default=5.0)
    p.add_argument("--ramp-max-users", type=int, default=128)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = args.out / "runs"
    if args.repository is None:
        args.repository = exported_repository(runs)
    args.model = args.model or f"cnn_{'gpu' if args.device == 'cuda' else 'cpu'}"
    points = []
    for n in [int(v) for v in args.frontends.split(",")]:
        proc, addresses = start_server(args.repository, args.device, n, args.out / f"serve-frontends{n}.log")
        try:
            plan = [(proto, int(u)) for proto in args.protocols.split(",") for u in args.users.split(",")]
            if args.ramp:
                plan.append(("http", 0))
            for protocol, users in plan:
                target = f"fe{n}-{protocol}-" + (f"u{users}" if users else "ramp")
                before, cpu0, t0 = stats(addresses["http"], args.model), server_cpu_s(proc.pid), time.monotonic()
                record = load(args, addresses, protocol, users, target, runs, ramp=not users)
                after, cpu1, elapsed = stats(addresses["http"], args.model), server_cpu_s(proc.pid), time.monotonic() - t0
                executions = after["execution_count"] - before["execution_count"]
                requests = after["success"] - before["success"]
                speed = record.get("speed", {})
                latency = speed.get("latency", {})
                point = {"frontends": n, "protocol": protocol, "users": users or "ramp",
                         "requests_s": speed.get("requests_s"), "p50_ms": latency.get("p50_ms"),
                         "p99_ms": latency.get("p99_ms"),
                         "server_mean_batch": round((after["inference_count"] - before["inference_count"]) / executions, 2)
                         if executions else None,
                         "server_requests": requests,
                         "server_queue_ms": round((after["queue_ns"] - before["queue_ns"]) / requests / 1e6, 3) if requests else None,
                         "server_cpu_cores": round((cpu1 - cpu0) / elapsed, 2),
                         "server_cpu_us_per_request": round((cpu1 - cpu0) / requests * 1e6, 1) if requests else None,
                         "warnings": record.get("validity", {}).get("warnings", []),
                         "ramp": record.get("extra", {}).get("ramp") if not users else None}
                if point["ramp"]:  # the most req/s of a ramp step whose p99 met the SLO
                    within = [q["requests_s"] for q in point["ramp"] if q.get("p99_ms") is not None
                              and q["p99_ms"] <= args.slo_p99_ms and q.get("requests_s") is not None]
                    point["capacity_within_slo_req_s"] = max(within, default=None)
                points.append(point)
                print(json.dumps({k: v for k, v in point.items() if k != "ramp"}), flush=True)
        finally:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
    (args.out / "frontends.json").write_text(json.dumps({"model": args.model, "device": args.device,
                                                          "processes": args.processes, "points": points}, indent=1))
    lines = [f"# `--frontends N`: batch-1 {args.model} on {args.device}, {args.processes} Locust processes", "",
             "| frontends | protocol | users | req/s | p50 ms | p99 ms | server mean batch | server queue ms | server CPU cores | server CPU µs/req |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for q in points:
        lines.append(f"| {q['frontends']} | {q['protocol']} | {q['users']} | {q['requests_s']} | {q['p50_ms']} | {q['p99_ms']} | "
                     f"{q['server_mean_batch']} | {q['server_queue_ms']} | {q['server_cpu_cores']} | {q['server_cpu_us_per_request']} |")
    lines += [f"- ramp, {q['frontends']} front ends: capacity within p99 <= {args.slo_p99_ms:g} ms: "
              f"{q.get('capacity_within_slo_req_s')} req/s (server mean batch over the ramp {q['server_mean_batch']})"
              for q in points if q["users"] == "ramp"]
    (args.out / "frontends.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
