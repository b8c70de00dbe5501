"""Two checkouts' embedded servers side by side: HTTP and gRPC, 1 / 16 / 64 users, batch 1, CPU and/or CUDA.

For a change to the server (e.g. to batching under concurrency), `before` (a path to an older checkout)
and `after` (this tree, unless --after says otherwise) each run `trainserve serve` on one repository written
by `trainserve train` / `trainserve export` at their defaults (or --repository), both at once, and every
point is driven on one, then the other, the order swapped from point to point, so drift hits both alike.
Load: closed-loop batch-1 users spread over persistent client processes (spawned once; --client-procs,
default one per client core; with --server-cpus the servers are pinned and the clients get the other
cores), with the clients a user would run (benchmarks/grpc_vs_http.py's: tritonclient.http with gevent,
tritonclient.grpc with a blocking client per user thread). Per point: req/s, client p50/p99, and from the
server's statistics extension over the window: mean batch (inference_count / execution_count), queue and
compute_infer per request (Triton's figures: a request's share of the whole batch's run), server and
client CPU. A point whose clients used >= 90% of their cores is marked client-bound.

    python benchmarks/serve_matrix.py --before /tmp/base                          # CPU, 1 16 64 users
    python benchmarks/serve_matrix.py --before /tmp/base --users 1 16 --rounds 3  # the 2-core machine
    OUT=out python benchmarks/serve_matrix.py --before bench-before --device cpu cuda --server-cpus 0-7
Writes $OUT/serve_matrix.json and $OUT/serve_matrix.md (default OUT=./bench-out).

The two sides may be one tree served two ways, no older checkout needed: --before-env / --after-env set
environment variables of one side's server (e.g. TRAINSERVE_SERVE_SPIN=0, serve/engine/spin.py) and
--before-args / --after-args add `trainserve serve` options (e.g. "--frontends 1"):

    python benchmarks/serve_matrix.py --before-env TRAINSERVE_SERVE_SPIN=0 --after-env TRAINSERVE_SERVE_SPIN=1 \
        --before-args="--frontends 2" --after-args="--frontends 2" --users 1 16 --rounds 3
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import shlex
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from benchmarks.grpc_vs_http import _client_process  # noqa: E402  (after the path: this tree's benchmarks)
from benchmarks.serve_bench import (  # noqa: E402
    _free_port, exported_repository, machine, parse_cpus, server_stats, stop_process)

CLIENT_BOUND = 0.9  # a point whose clients used this share of their cores or more is the client's figure


# ------------------------------------------------------------------ clients: persistent processes
def _client_worker(conn, cpus: set[int] | None) -> None:
    """One client process: runs points sent on `conn` (grpc_vs_http's users) until it receives None."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    while (job := conn.recv()) is not None:
        _client_process(*job, conn)


class ClientPool:
    """`n` client processes started once (imports paid once), driven point after point."""

    def __init__(self, n: int, cpus: set[int] | None) -> None:
        import psutil

        ctx = mp.get_context("spawn")
        self.pipes, self.procs = [], []
        for _ in range(n):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_client_worker, args=(child, cpus), daemon=True)
            p.start()
            self.pipes.append(parent)
            self.procs.append(p)
        self.ps = [psutil.Process(p.pid) for p in self.procs]

    def drive(self, protocol: str, url: str, model: str, shape: list[int], users: int, warmup_s: float,
              seconds: float, server_pid: int, http_port: int) -> dict:
        """`users` closed-loop batch-1 users over the pool for warm-up + `seconds`; figures over the window."""
        import psutil

        n = min(users, len(self.procs))
        per = [users // n + (1 if i < users % n else 0) for i in range(n)]
        begin = time.monotonic() + 0.5 + warmup_s  # every process has its clients connected by then
        end = begin + seconds
        for pipe, k in zip(self.pipes, per):
            pipe.send((protocol, url, model, shape, k, begin, end))
        server = psutil.Process(server_pid)
        time.sleep(max(begin - time.monotonic(), 0))
        s0, c0 = server_stats(http_port, model), sum(sum(p.cpu_times()[:2]) for p in self.ps[:n])
        cpu0 = server_cpu_s(server)
        time.sleep(max(end - time.monotonic(), 0))
        s1, c1 = server_stats(http_port, model), sum(sum(p.cpu_times()[:2]) for p in self.ps[:n])
        cpu1 = server_cpu_s(server)
        reports = []
        for pipe, p in zip(self.pipes[:n], self.procs[:n]):
            if not pipe.poll(60):
                raise SystemExit(f"client process {p.pid} sent no report (exit code {p.exitcode})")
            reports.append(pipe.recv())
        lat = np.array([x for r in reports for x in r["latencies"]])
        client_cores = (c1 - c0) / seconds
        # no request both began and ended inside the window (answers slower than it): no latency to report
        pct = (lambda q: 1e3 * float(np.percentile(lat, q))) if lat.size else (lambda q: None)  # noqa: E731
        return {"requests": int(lat.size), "requests_per_s": lat.size / seconds, "p50_ms": pct(50), "p99_ms": pct(99),
                "errors": sum(r["error_count"] for r in reports),
                "error_samples": [e for r in reports for e in r["errors"]][:3], "client_processes": n,
                "client_cpu_cores": client_cores, "client_bound": client_cores >= CLIENT_BOUND * n,
                "server_cpu_cores": (cpu1 - cpu0) / seconds, **window_stats(s0, s1)}

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.send(None)
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.kill()


def server_cpu_s(server) -> float:
    """CPU seconds of the server and its children (the front-end processes of `serve --frontends N`)."""
    import psutil

    total = sum(server.cpu_times()[:2])
    for child in server.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return total


def window_stats(before: dict, after: dict) -> dict:
    """The server's own figures over one window (statistics extension): mean batch, queue and compute µs."""
    runs = after["execution_count"] - before["execution_count"]
    rows = after["inference_count"] - before["inference_count"]

    def per_request_us(name: str) -> float | None:
        a, b = after["inference_stats"][name], before["inference_stats"][name]
        n = a["count"] - b["count"]
        return (a["ns"] - b["ns"]) / n / 1e3 if n else None

    return {"server_runs": runs, "mean_batch": rows / runs if runs else None,
            "queue_us": per_request_us("queue"), "compute_infer_us": per_request_us("compute_infer")}


# ------------------------------------------------------------------ servers
STARTUP_NOTES: dict[int, list[str]] = {}  # server pid -> its start-up lines worth recording


def start_server(root: Path, repo: Path, device: str, cpus: set[int] | None, extra_env: dict[str, str] | None = None,
                 extra_args: list[str] | None = None):
    """`trainserve serve` of checkout `root` (its own package first on the path), with `extra_env` and
    `extra_args`; (process, http, grpc ports)."""
    import re
    import subprocess

    grpc_port = _free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p),
               PYTHONUNBUFFERED="1", COLUMNS="200", **(extra_env or {}))  # COLUMNS: log lines unwrapped
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    proc = subprocess.Popen([sys.executable, "-m", "trainserve", "serve", "--model-repository", str(repo),
                             "--device", device, "--http-port", "0", "--grpc-port", str(grpc_port),
                             "--metrics-port", "-1", *(extra_args or [])], cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, preexec_fn=pin)
    lines = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (line := proc.stdout.readline()):
        lines.append(line)
        if "busy-poll" in line:  # the model process's polling choice (serve/engine/spin.py), kept for the record
            STARTUP_NOTES.setdefault(proc.pid, []).append(" ".join(line.split()))
        if m := re.search(r"ready http=[^:]+:(\d+)", line):
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # a full pipe would stall it
            return proc, int(m.group(1)), grpc_port
    stop_process(proc)
    raise SystemExit(f"the server of {root} did not become ready:\n{''.join(lines[-20:])}")


def input_shape_of(http_port: int, model: str) -> list[int]:
    """The served model's one input, without the batch dimension (its metadata, GET /v2/models/<m>)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/models/{model}", timeout=30) as r:
        inputs = json.loads(r.read())["inputs"]
    if len(inputs) != 1 or inputs[0]["datatype"] != "FP32" or inputs[0]["name"] != "input":
        raise SystemExit(f"model {model} must have one FP32 input named 'input' (the clients send that): {inputs}")
    return [int(d) for d in inputs[0]["shape"][1:]]


# ------------------------------------------------------------------ report
def markdown(result: dict) -> str:
    head = ("| device | protocol | users | checkout | req/s | p50 ms | p99 ms | mean batch | queue µs/req | "
            "compute µs/req | server CPU-ms/req | client CPU cores (procs) | errors |\n" + "|---" * 13 + "|\n")
    rows = []
    fmt = lambda v, f: "–" if v is None else format(v, f)  # noqa: E731
    for p in result["points"]:
        for name in ("before", "after"):
            m = p[name]
            bound = " client-bound" if m["client_bound"] else ""
            rows.append(f"| {p['device']} | {p['protocol']} | {p['users']} | {name} | {m['requests_per_s']:,.0f} | "
                        f"{fmt(m['p50_ms'], '.2f')} | {fmt(m['p99_ms'], '.2f')} | {fmt(m['mean_batch'], '.2f')} | "
                        f"{fmt(m['queue_us'], '.0f')} | {fmt(m['compute_infer_us'], '.0f')} | "
                        f"{fmt(1e3 * m['server_cpu_cores'] / m['requests_per_s'] if m['requests'] else None, '.3f')} | "
                        f"{m['client_cpu_cores']:.2f} ({m['client_processes']}){bound} | "
                        f"{m['errors']} |")
        p50 = (p["after"]["p50_ms"] / p["before"]["p50_ms"]) if p["after"]["p50_ms"] and p["before"]["p50_ms"] else None
        rows.append(f"| | | | after/before | **{fmt(p['ratio_requests_per_s'], '.2f')}**x | {fmt(p50, '.2f')}x "
                    "| | | | | | | |")
    return (f"Serve matrix, {result['date']}, {result['machine'].get('cpu_model', '')} "
            f"({result['machine']['cpu_count']} CPUs), model {result['model']}, batch 1, "
            f"{result['seconds']} s per point, median of {result['rounds']} round(s).\n"
            f"Command: `{result['command']}`\n\n" + sides_line(result) + head + "\n".join(rows) + "\n")


def sides_line(result: dict) -> str:
    """What told the two servers apart besides their checkouts (environment, serve options), when anything."""
    parts = []
    for name, side in result.get("sides", {}).items():
        what = " ".join([*(f"{k}={v}" for k, v in side["env"].items()), *side["args"]])
        notes = "; ".join(f"{device}: {' / '.join(lines) or 'one process or an older tree (no line)'}"
                          for device, lines in side.get("polling", {}).items())
        what = " ".join(filter(None, [f"`{what}`" if what else "", f"(log: {notes})" if notes else ""]))
        if what:
            parts.append(f"{name}: {what}")
    return ("Servers: " + "; ".join(parts) + ".\n\n") if parts else ""


def median_of(runs: list[dict]) -> dict:
    """The run with the median req/s, with every run's req/s and p50."""
    mid = dict(sorted(runs, key=lambda r: r["requests_per_s"])[len(runs) // 2])
    mid["rounds_requests_per_s"] = [r["requests_per_s"] for r in runs]
    mid["rounds_p50_ms"] = [r["p50_ms"] for r in runs]
    return mid


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, default=REPO_ROOT,
                   help="the older checkout (its trainserve is served; default: this tree, told apart by the options below)")
    p.add_argument("--after", type=Path, default=REPO_ROOT, help="the newer checkout (default: this tree)")
    p.add_argument("--device", nargs="+", choices=["cpu", "cuda"], default=["cpu"])
    p.add_argument("--protocols", nargs="+", choices=["http", "grpc"], default=["http", "grpc"])
    p.add_argument("--users", nargs="+", type=int, default=[1, 16, 64])
    p.add_argument("--preset", default="small", help="cnn preset of the exported model (ignored with --repository)")
    p.add_argument("--repository", type=Path, help="serve this repository instead of exporting one")
    p.add_argument("--model", help="with --repository: the model's name (default cnn_cpu / cnn_gpu per device); "
                                   "one FP32 input 'input', an output 'logits'")
    p.add_argument("--seconds", type=float, default=3.0, help="measurement window per point")
    p.add_argument("--warmup", type=float, default=1.0, help="warm-up before each window, seconds")
    p.add_argument("--rounds", type=int, default=1, help="runs of every point on each server (median reported)")
    p.add_argument("--server-cpus", help="pin both servers to these CPUs (e.g. 0-7); clients get the others")
    for side in ("before", "after"):
        p.add_argument(f"--{side}-env", action="append", default=[], metavar="KEY=VALUE",
                       help=f"an environment variable of the {side} server (repeatable)")
        p.add_argument(f"--{side}-args", default="", help=f"more `trainserve serve` options of the {side} server")
    p.add_argument("--client-procs", type=int, help="client processes (default: one per client CPU, at most 16)")
    args = p.parse_args()

    server_cpus = parse_cpus(args.server_cpus)
    client_cpus = (os.sched_getaffinity(0) - server_cpus) if server_cpus else None
    if server_cpus is not None and not client_cpus:
        raise SystemExit(f"--server-cpus {args.server_cpus} leaves no CPU for the clients")
    procs = args.client_procs or min(16, len(client_cpus or os.sched_getaffinity(0)))
    roots = {"before": args.before.resolve(), "after": args.after.resolve()}
    for name in roots:
        if any("=" not in kv for kv in getattr(args, f"{name}_env")):
            raise SystemExit(f"--{name}-env takes KEY=VALUE")
    sides = {name: {"env": dict(kv.split("=", 1) for kv in getattr(args, f"{name}_env")),
                    "args": shlex.split(getattr(args, f"{name}_args"))} for name in roots}
    for name, root in roots.items():
        if not (root / "trainserve" / "__init__.py").exists():
            raise SystemExit(f"--{name} {root} is not a trainserve checkout (no trainserve/__init__.py)")
    t_start = time.perf_counter()
    points = []
    with tempfile.TemporaryDirectory(prefix="serve-matrix-") as tmp:
        if args.repository:
            repo = args.repository.resolve()
        else:
            repo, _, _, _ = exported_repository(Path(tmp), args.preset, "cpu")
        pool = ClientPool(procs, client_cpus)
        try:
            for device in args.device:
                model = args.model or f"cnn_{'gpu' if device == 'cuda' else 'cpu'}"
                t0 = time.perf_counter()
                servers = {name: start_server(root, repo, device, server_cpus, sides[name]["env"], sides[name]["args"])
                           for name, root in roots.items()}
                log(f"{device}: both servers ready in {time.perf_counter() - t0:.0f} s")
                for name, (proc, _, _) in servers.items():
                    sides[name].setdefault("polling", {})[device] = STARTUP_NOTES.get(proc.pid, [])
                shape = input_shape_of(servers["after"][1], model)
                try:
                    k = 0
                    for protocol in args.protocols:
                        # each server's first load on a protocol (connections, gRPC's threads) is not measured
                        for name, (proc, http_port, grpc_port) in servers.items():
                            url = f"127.0.0.1:{http_port if protocol == 'http' else grpc_port}"
                            pool.drive(protocol, url, model, shape, max(args.users), 0.0, args.warmup, proc.pid,
                                       http_port)
                        for users in args.users:
                            runs: dict[str, list[dict]] = {"before": [], "after": []}
                            for _ in range(args.rounds):
                                order = ["before", "after"] if k % 2 == 0 else ["after", "before"]
                                k += 1
                                for name in order:
                                    proc, http_port, grpc_port = servers[name]
                                    url = f"127.0.0.1:{http_port if protocol == 'http' else grpc_port}"
                                    m = pool.drive(protocol, url, model, shape, users, args.warmup, args.seconds,
                                                   proc.pid, http_port)
                                    runs[name].append(m)
                                    log(f"{device} {protocol} {users:>3} users {name:6}: {m['requests_per_s']:8,.0f} req/s"
                                        f"  p50 {m['p50_ms'] or 0:.2f} ms  p99 {m['p99_ms'] or 0:.2f} ms"
                                        f"  batch {m['mean_batch'] or 0:.2f}  queue {m['queue_us'] or 0:.0f} us"
                                        f"  compute {m['compute_infer_us'] or 0:.0f} us"
                                        f"  clients {m['client_cpu_cores']:.2f} cores")
                            point = {"device": device, "protocol": protocol, "users": users,
                                     **{name: median_of(r) for name, r in runs.items()}}
                            before_rate = point["before"]["requests_per_s"]
                            point["ratio_requests_per_s"] = (point["after"]["requests_per_s"] / before_rate
                                                             if before_rate else None)
                            points.append(point)
                finally:
                    for proc, _, _ in servers.values():
                        stop_process(proc)
        finally:
            pool.close()
    result = {"benchmark": "serve_matrix", "date": datetime.date.today().isoformat(), "command": " ".join(sys.argv),
              "machine": {**machine(), "load_average_at_end": os.getloadavg()}, "model": args.model or "cnn",
              "preset": None if args.repository else args.preset, "checkouts": {k: str(v) for k, v in roots.items()},
              "sides": sides,
              "server_cpus": args.server_cpus, "client_processes": procs, "seconds": args.seconds,
              "rounds": args.rounds, "wall_s": time.perf_counter() - t_start, "points": points}
    out = Path(os.environ.get("OUT", "bench-out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "serve_matrix.json").write_text(json.dumps(result, indent=2))
    (out / "serve_matrix.md").write_text(markdown(result))
    print(markdown(result))
    print(f"wrote {out / 'serve_matrix.json'} and {out / 'serve_matrix.md'} in {result['wall_s']:.0f} s")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
