"""Embedded server vs onnxruntime in process vs a minimal KServe v2 server, side by side in one run.

The model is the zoo CNN trained briefly and exported by `trainserve train` / `trainserve export` at
their defaults; the embedded server serves that repository exactly as written and is started as a
user starts it (no thread or instance options), so what is measured is what users get. Same client
for all (tritonclient.http, binary tensors, in separate client processes so the client never shares
the server's GIL):
  (a) onnxruntime `session.run` in this process, the limit: batch-1 latency at each intra-op thread
      count (the best is the limit) and samples/s per batch size up to max_batch_size;
  (b) the embedded server, `trainserve serve` (core, dynamic batcher, HTTP/gRPC/metrics front ends),
      with its own queue and compute time per request for every point (from /v2/models/<m>/stats);
  (c) benchmarks/minimal_kserve.py: aiohttp around one session, no batching: the baseline.
(a) and (c) get as many threads as the servers have cores (--server-cpus, else this process's).
Targets (the server must cost little beside onnxruntime alone): (b) batch-1 p50 at concurrency 1 <= (a) + 0.4 ms; (b) req/s at concurrency 16
batch 1 >= 1.5x (c); (b) samples/s with batch-64 requests at concurrency 4 >= 85% of (a) at batch 64.
With --device cuda: (b) with dynamic batching >= 90% of (a)'s samples/s at its best batch; (b) also
runs once per embedded-server configuration in VARIANTS (config.pbtxt parameters added to the
exported config: batch buckets, sessions per bucket, cuDNN search), each its own server, and
onnxruntime's cost of changing shapes is timed in process.

    python benchmarks/serve_bench.py                      # CPU, cnn tiny
    python benchmarks/serve_bench.py --server-cpus 0-1    # many cores: servers on 2, clients on the rest
    OUT=bench-out python benchmarks/serve_bench.py --device cuda --preset small
Writes $OUT/serve_bench-<device>.json (default OUT=./bench-out).
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
MODEL = "cnn"
# Embedded-server configurations compared on the GPU, each its own server process (config.pbtxt parameters)
VARIANTS = {
    "default": {},  # the server's defaults (on CUDA: power-of-two buckets, a session each, warmed at load)
    "no_buckets": {"batch_buckets": "none"},  # every batch size as it comes (each new shape pays on CUDA)
    "shared_buckets": {"batch_buckets": "pow2", "bucket_sessions": "false"},  # padded, but one session
    "bucket_sessions": {"batch_buckets": "pow2", "bucket_sessions": "true"},  # = default on CUDA; opt-in on CPU
    "cudnn_default": {"batch_buckets": "none", "cudnn_conv_algo_search": "2"},  # no cuDNN algorithm query at all
    # every run on an instance thread: an idle batcher otherwise runs a short request on the event loop,
    # which then reads no other request during a 0.6 ms GPU run (c16 batch-1 runs were 99% batch 1)
    "no_inline": {"idle_inline_max_us": "0"},
    # a GPU session's CPU-side work (shape ops, copies) on one thread: no sleeping pool to wake per run
    "one_thread": {"intra_op_thread_count": "1"},
}
GPU_VARIANTS = ["default", "no_inline", "one_thread"]
TARGETS = {"latency_overhead_ms": 0.4, "c16_speedup_vs_minimal": 1.5, "b64_fraction_of_offline": 0.85,
           "gpu_fraction_of_offline_best": 0.90}


# ------------------------------------------------------------------ model
def exported_repository(root: Path, preset: str, device: str) -> tuple[Path, str, Path, int]:
    """Train the zoo CNN briefly and export it with `trainserve train` / `trainserve export` at their
    defaults, exactly as a user would; (repository, served model name, its ONNX file, max_batch_size).
    The benchmark serves that repository as written: no config.pbtxt of its own."""
    from trainserve.core.procs import child_env  # importable once main() has put REPO_ROOT on sys.path

    env = child_env()
    common = ["--run", "bench", "--runs-dir", str(root)]
    for argv in (["train", "--model", MODEL, "--preset", preset, "--samples", "256", "--epochs", "1",
                  "--batch-size", "64", "--device", "cpu"], ["export", "--eval-samples", "64"]):
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "trainserve", *argv, *common], env=env, capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise SystemExit(f"trainserve {argv[0]} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        log(f"trainserve {argv[0]}: {time.perf_counter() - t0:.1f} s")
    repo = root / "bench" / "model_repository"
    name = f"{MODEL}_{'gpu' if device == 'cuda' else 'cpu'}"
    from trainserve.serve.repository import parse_config_file

    config = parse_config_file(repo / name / "config.pbtxt")
    return repo, name, repo / name / "1" / (config.default_model_filename or "model.onnx"), config.max_batch_size


def variant_repository(base: Path, root: Path, model: str, params: dict[str, str]) -> Path:
    """A copy of the repository `base` whose `model`'s config.pbtxt adds `params` (a deliberate variant)."""
    import shutil

    shutil.copytree(base, root)
    cfg = root / model / "config.pbtxt"
    cfg.write_text(cfg.read_text() + "".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in params.items()))
    return root


def parse_cpus(text: str | None) -> set[int] | None:
    """'0-1,4' -> {0, 1, 4}; None stays None. SystemExit with one sentence for text that is not that."""
    if not text:
        return None
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise SystemExit(f"--server-cpus {text!r} is not a CPU list; write it as 0-1 or 0,2,4") from None
    usable = os.sched_getaffinity(0)
    if not cpus or not cpus <= usable:
        raise SystemExit(f"--server-cpus {text!r} names CPUs this process cannot use; usable: {sorted(usable)}")
    return cpus


def input_shape(preset: str) -> tuple[int, int, int]:
    from trainserve.train.models import preset_config

    c = preset_config("cnn", preset)
    return c.in_channels, c.image_size, c.image_size


# ------------------------------------------------------------------ (a) offline
def make_session(onnx_path: Path, device: str, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    providers = ["CUDAExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
    if device == "cuda" and hasattr(ort, "preload_dlls"):  # the CUDA libraries of pip's nvidia-* packages (torch's)
        ort.preload_dlls()
    session = ort.InferenceSession(str(onnx_path), sess_options=so, providers=providers)
    if session.get_providers()[0] != providers[0]:
        raise SystemExit(f"onnxruntime fell back to {session.get_providers()}; {providers[0]} is not usable here")
    return session


def shape_switching(onnx_path: Path, shape: tuple[int, ...], seconds: float, sizes: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8)) -> dict:
    """CUDA only, in process: run time of batch sizes that change from run to run (what a dynamic batcher
    under batch-1 load sends) against one fixed size, per cuDNN algorithm search mode. On the H200 the
    server's batch-1 loads above 4 users slowed to ~100 ms a request, with both instance threads busy on
    the CPU; this tells onnxruntime/cuDNN (cycling slow here too: the algorithm choice redone at every
    shape change) from the server (fast here). DEFAULT skips cuDNN's algorithm query altogether."""
    import onnxruntime as ort

    out = {}
    for variant in ("HEURISTIC", "EXHAUSTIVE", "DEFAULT", "HEURISTIC+no_mem_pattern"):
        search = variant.split("+")[0]
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.enable_mem_pattern = "no_mem_pattern" not in variant  # a planned buffer per input shape
        sess = ort.InferenceSession(str(onnx_path), sess_options=so, providers=[
            ("CUDAExecutionProvider", {"cudnn_conv_algo_search": search}), "CPUExecutionProvider"])
        xs = {b: np.random.rand(b, *shape).astype(np.float32) for b in sizes}
        for _ in range(3):
            for b in sizes:
                sess.run(None, {"input": xs[b]})
        res = {}
        for mode, order in (("fixed", [sizes[len(sizes) // 2]]), ("cycling", list(sizes))):
            lat, i, end = [], 0, time.perf_counter() + seconds / 2
            while time.perf_counter() < end:
                t0 = time.perf_counter()
                sess.run(None, {"input": xs[order[i % len(order)]]})
                lat.append(time.perf_counter() - t0)
                i += 1
            res[mode] = {"runs": len(lat), "p50_ms": 1e3 * float(np.percentile(lat, 50)),
                         "p99_ms": 1e3 * float(np.percentile(lat, 99)), "max_ms": 1e3 * max(lat)}
        out[variant] = res
        del sess
    return out


def thread_counts(cores: int) -> list[int]:
    """1, 2, 4, ... up to `cores`, and `cores` itself."""
    counts = [1 << i for i in range(cores.bit_length()) if 1 << i <= cores]
    return sorted(set(counts) | {cores})


def offline(onnx_path: Path, device: str, cores: int, shape: tuple[int, ...], batches: list[int],
            seconds: float) -> dict:
    """onnxruntime in this process, the limit: batch-1 latency at each intra-op thread count (the best
    count is the limit), and samples/s per batch size with all `cores` threads."""
    def batch1(session) -> list[float]:
        x1 = np.random.rand(1, *shape).astype(np.float32)
        for _ in range(50):
            session.run(None, {"input": x1})
        lat, end = [], time.perf_counter() + seconds / 2
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            session.run(None, {"input": x1})
            lat.append(time.perf_counter() - t0)
        return lat

    per_threads = {}
    for n in thread_counts(cores) if device == "cpu" else [1]:  # CUDA: the GPU does the work
        lat = batch1(make_session(onnx_path, device, n))
        per_threads[n] = {"p50_ms": 1e3 * float(np.percentile(lat, 50)), "p99_ms": 1e3 * float(np.percentile(lat, 99))}
    best = min(per_threads, key=lambda n: per_threads[n]["p50_ms"])
    result = {"batch1_p50_ms": per_threads[best]["p50_ms"], "batch1_p99_ms": per_threads[best]["p99_ms"],
              "batch1_threads": best, "batch1_by_threads": per_threads, "samples_per_s": {}}
    session = make_session(onnx_path, device, cores)
    for b in batches:
        xb = np.random.rand(b, *shape).astype(np.float32)
        for _ in range(5):
            session.run(None, {"input": xb})
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            session.run(None, {"input": xb})
            n += b
        result["samples_per_s"][b] = n / (time.perf_counter() - t0)
    return result


# ------------------------------------------------------------------ clients
def closed_loop(call, begin: float, end: float, rows: int, latencies: list[float], errors: list[str]) -> None:
    """One closed-loop user until `end` (time.monotonic): each answer checked to carry `rows` rows; the
    latencies of the calls inside [begin, end] appended, failures counted and the user goes on."""
    while (t0 := time.monotonic()) < end:
        try:
            result = call()
        except Exception as e:  # count and keep going: a refused request is a result too
            errors.append(str(e)[:200])
            continue
        t1 = time.monotonic()
        if t0 >= begin and t1 <= end:
            latencies.append(t1 - t0)
        assert result.as_numpy("logits").shape[0] == rows


def _client_process(url: str, model: str, batch: int, shape: tuple, greenlets: int, begin: float, end: float,
                    conn, cpus: set[int] | None = None) -> None:
    """One client process: `greenlets` closed-loop users on one tritonclient.http client (gevent)."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    import gevent
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url, concurrency=greenlets, connection_timeout=60, network_timeout=60)
    x = np.random.rand(batch, *shape).astype(np.float32)
    inp = httpclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    out = httpclient.InferRequestedOutput("logits", binary_data=True)
    latencies: list[float] = []
    errors: list[str] = []

    def user() -> None:
        closed_loop(lambda: client.infer(model, [inp], outputs=[out]), begin, end, batch, latencies, errors)

    cpu0 = time.process_time()
    gevent.joinall([gevent.spawn(user) for _ in range(greenlets)])
    conn.send({"latencies": latencies, "errors": errors[:5], "error_count": len(errors),
               "cpu_s": time.process_time() - cpu0})
    client.close()


def spawn_clients(target, per_process: list[tuple], begin: float, end: float, server_pid: int,
                  extra: tuple = ()) -> tuple[list[dict], float, float]:
    """One client process per entry of `per_process`, each running target(*entry, begin, end, conn, *extra)
    and sending one report on conn; (the reports, the server's and the clients' CPU seconds over
    [begin, end]). A client that dies (import error, crash) fails the run instead of hanging it."""
    import psutil

    ctx = mp.get_context("spawn")
    pipes, workers = [], []
    for head in per_process:
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=target, args=(*head, begin, end, child, *extra), daemon=True)
        p.start()
        pipes.append(parent)
        workers.append(p)
    server = psutil.Process(server_pid)
    clients = [psutil.Process(p.pid) for p in workers]
    time.sleep(max(begin - time.monotonic(), 0))
    server_begin = sum(server.cpu_times()[:2])  # user + system, seconds, all threads
    clients_begin = sum(sum(c.cpu_times()[:2]) for c in clients)
    time.sleep(max(end - time.monotonic(), 0))
    server_cpu_s = sum(server.cpu_times()[:2]) - server_begin
    clients_cpu_s = sum(sum(c.cpu_times()[:2]) for c in clients) - clients_begin
    reports = []
    try:
        for pipe, p in zip(pipes, workers):
            if not pipe.poll(max(end - time.monotonic(), 0) + 60):
                raise SystemExit(f"client process {p.pid} sent no report (exit code {p.exitcode})")
            reports.append(pipe.recv())
    finally:
        for p in workers:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return reports, server_cpu_s, clients_cpu_s


def drive(url: str, model: str, batch: int, shape: tuple, concurrency: int, procs: int, warmup_s: float, seconds: float,
          server_pid: int, client_cpus: set[int] | None = None) -> dict:
    """Closed-loop load at `concurrency` from `procs` processes; requests/s and latency over the window,
    and the server's CPU time over it (a cost per request that load from elsewhere changes little)."""

    procs = min(procs, concurrency)
    per = [concurrency // procs + (1 if i < concurrency % procs else 0) for i in range(procs)]
    start = time.monotonic() + 2.0  # spawn time: every process starts before the warm-up ends
    begin, end = start + warmup_s, start + warmup_s + seconds
    reports, server_cpu_s, clients_cpu_s = spawn_clients(
        _client_process, [(url, model, batch, shape, g) for g in per], begin, end, server_pid, (client_cpus,))
    lat = np.array([x for r in reports for x in r["latencies"]])
    if lat.size == 0:
        raise SystemExit(f"no successful requests to {url}: {[r['errors'] for r in reports]}")
    return {"concurrency": concurrency, "batch": batch, "client_processes": procs, "requests": int(lat.size),
            "requests_per_s": lat.size / seconds, "samples_per_s": lat.size * batch / seconds,
            "p50_ms": 1e3 * float(np.percentile(lat, 50)), "p90_ms": 1e3 * float(np.percentile(lat, 90)),
            "p99_ms": 1e3 * float(np.percentile(lat, 99)),
            "errors": sum(r["error_count"] for r in reports), "error_samples": reports[0]["errors"],
            "client_cpu_s": sum(r["cpu_s"] for r in reports), "server_cpu_s": server_cpu_s,
            "server_cpu_ms_per_request": 1e3 * server_cpu_s / lat.size,
            # the client processes' CPU over the measurement window only (client_cpu_s includes the warm-up)
            "client_cpu_ms_per_request": 1e3 * clients_cpu_s / lat.size}


def server_stats(port: int, model: str) -> dict:
    """The embedded server's own statistics of the model (Triton's GET /v2/models/<m>/stats)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/{model}/stats", timeout=10) as r:
        return json.loads(r.read())["model_stats"][0]


def stats_delta(before: dict, after: dict) -> dict:
    """What the server spent over one point: queue and compute_infer per request, and per batch size
    the runs and mean compute_infer. Tells a slow session.run (onnxruntime) from time lost elsewhere."""
    def d(path: tuple[str, ...]) -> tuple[int, int]:
        a, b = after, before
        for k in path:
            a, b = a[k], b[k]
        return a["count"] - b["count"], a["ns"] - b["ns"]

    out = {}
    for name in ("queue", "compute_infer"):
        n, ns = d(("inference_stats", name))
        out[f"{name}_mean_ms"] = round(ns / n / 1e6, 4) if n else None
    old = {b["batch_size"]: b for b in before["batch_stats"]}
    per = {}
    for b in after["batch_stats"]:
        prev = old.get(b["batch_size"], {"compute_infer": {"count": 0, "ns": 0}})["compute_infer"]
        n, ns = b["compute_infer"]["count"] - prev["count"], b["compute_infer"]["ns"] - prev["ns"]
        if n:
            per[b["batch_size"]] = {"runs": n, "compute_infer_mean_ms": round(ns / n / 1e6, 4)}
    out["batches"] = per
    return out


# ------------------------------------------------------------------ servers
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_process(cmd: list[str], pattern: str, timeout_s: float = 120,
                  cpus: set[int] | None = None) -> tuple[subprocess.Popen, int]:
    """Start a server (on `cpus` only, when given), wait for the line that carries its HTTP port; (process, port)."""
    from trainserve.core.procs import child_env  # importable once main() has put REPO_ROOT on sys.path

    env = child_env(PYTHONUNBUFFERED="1")
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, preexec_fn=pin)
    deadline = time.monotonic() + timeout_s
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if m := re.search(pattern, line):
            # keep reading its output, or a full pipe would stall the server mid-benchmark
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, int(m.group(1))
    stop_process(proc)
    raise SystemExit(f"server {cmd} did not become ready:\n{''.join(lines[-20:])}")


def stop_process(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ------------------------------------------------------------------ main
def machine() -> dict:
    import onnxruntime as ort

    info = {"cpu_count": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
            "python": platform.python_version(), "onnxruntime": ort.__version__, "host": platform.node()}
    try:
        info["cpu_model"] = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                                 if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:  # a GPU host's figures name its card (docs/BENCHMARKS.md shows the machine of each table)
        names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                               text=True, timeout=30).stdout.split("\n")
        if gpus := [n.strip() for n in names if n.strip()]:
            info["gpus"] = gpus
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def _median_point(points: list[dict]) -> dict:
    """The round with the median requests/s, plus every round's requests/s and p50 for the record."""
    ordered = sorted(points, key=lambda p: p["requests_per_s"])
    mid = dict(ordered[len(ordered) // 2])
    mid["rounds_requests_per_s"] = [p["requests_per_s"] for p in points]
    mid["rounds_p50_ms"] = [p["p50_ms"] for p in points]
    return mid


def ratios_of(a: dict, b: dict, c: dict, gpu: bool) -> dict:
    """The issue's targets from one round's (a) offline, (b) embedded and (c) minimal figures."""
    best = max(a["samples_per_s"], key=a["samples_per_s"].get)
    r = {"latency_overhead_ms": b["c1_b1"]["p50_ms"] - a["batch1_p50_ms"],
         "c16_speedup_vs_minimal": b["c16_b1"]["requests_per_s"] / c["c16_b1"]["requests_per_s"],
         "b64_fraction_of_offline": b["c4_b64"]["samples_per_s"] / a["samples_per_s"][64],
         # not a target: server CPU per request, (c) over (b); what req/s would be on a CPU-bound machine
         "c16_cpu_per_request_minimal_over_embedded": c["c16_b1"]["server_cpu_ms_per_request"]
         / b["c16_b1"]["server_cpu_ms_per_request"]}
    if gpu:
        dynamic = max(v["samples_per_s"] for k, v in b.items() if k.startswith("gpu_dynamic"))
        r["gpu_fraction_of_offline_best"] = dynamic / a["samples_per_s"][best]
    return r


def run(args: argparse.Namespace) -> dict:
    """Rounds of: (a) offline, then every scenario on (b) and (c) back to back, so that load from
    elsewhere on the machine hits the three alike; each ratio is the median over rounds. On the GPU,
    (b) runs once per configuration in `args.variants` ("default" first: the ratios are its)."""
    shape = input_shape(args.preset)
    gpu = args.device == "cuda"
    server_cpus = parse_cpus(args.server_cpus)
    client_cpus = (os.sched_getaffinity(0) - server_cpus) if server_cpus else None
    if server_cpus is not None and not client_cpus:
        raise SystemExit(f"--server-cpus {args.server_cpus} leaves no CPU for the clients")
    if server_cpus:  # (a) runs in this process: its onnxruntime threads inherit this affinity
        os.sched_setaffinity(0, server_cpus)
    cores = len(os.sched_getaffinity(0))  # what the servers may use: (a), (b) and (c) get as many threads
    rounds: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="serve-bench-") as tmp:
        repo, model, onnx_path, max_batch = exported_repository(Path(tmp), args.preset, args.device)
        # (a) at every power-of-two batch the server may form: its best is what the server can reach
        batches = [b for b in (1 << i for i in range(max_batch.bit_length())) if b <= max_batch] if gpu else [64]
        scenarios = {"c1_b1": (1, 1), "c16_b1": (1, 16), "c4_b64": (64, 4)}
        if gpu:  # one point per request size; the target takes the best (how a user would size requests)
            for rows in args.gpu_request_batch:
                scenarios[f"gpu_dynamic_r{rows}"] = (rows, args.gpu_concurrency)
        # the server as a user starts it: no thread or instance options, the exported config.pbtxt decides
        embedded = [sys.executable, "-m", "trainserve", "serve", "--device", args.device,
                    "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
        if args.spin:
            embedded.append("--spin")
        if args.busy_poll_us is not None:
            embedded += ["--busy-poll-us", str(args.busy_poll_us)]
        servers = {}
        for variant in args.variants:
            root = repo if variant == "default" else variant_repository(repo, Path(tmp) / variant, model,
                                                                        VARIANTS[variant])
            name = "embedded" if variant == "default" else f"embedded_{variant}"
            servers[name] = (embedded + ["--model-repository", str(root)], r"ready http=[^:]+:(\d+)")
        servers["minimal"] = ([sys.executable, str(REPO_ROOT / "benchmarks" / "minimal_kserve.py"), str(onnx_path),
                               "--name", model, "--port", "0", "--threads", str(cores), "--provider",
                               "CUDAExecutionProvider" if gpu else "CPUExecutionProvider"], r"listening on (\d+)")
        procs: dict[str, subprocess.Popen] = {}
        try:
            ports = {}
            for name, (cmd, pattern) in servers.items():
                t0 = time.perf_counter()
                procs[name], ports[name] = start_process(cmd, pattern, cpus=server_cpus)
                log(f"{name} ready in {time.perf_counter() - t0:.1f} s")
            for i in range(args.rounds):
                log(f"round {i + 1}/{args.rounds}: offline")
                one = {"offline": offline(onnx_path, args.device, cores, shape, batches, args.seconds)} | {
                    name: {} for name in servers}
                if gpu and i == 0:
                    one["offline"]["shape_switching"] = shape_switching(onnx_path, shape, args.seconds)
                    log(f"shape switching: {json.dumps(one['offline']['shape_switching'])}")
                for scenario, (batch, concurrency) in scenarios.items():
                    for name in servers:
                        if name == "minimal" and scenario.startswith("gpu_dynamic"):
                            continue
                        before = server_stats(ports[name], model) if name != "minimal" else None
                        one[name][scenario] = drive(f"127.0.0.1:{ports[name]}", model, batch, shape, concurrency,
                                                    args.client_procs, args.warmup, args.seconds, procs[name].pid,
                                                    client_cpus)
                        point = one[name][scenario]
                        if before is not None:  # over warm-up and window alike
                            point["server_stats"] = stats_delta(before, server_stats(ports[name], model))
                        own = point.get("server_stats", {})
                        log(f"round {i + 1}: {name} {scenario}: {point['requests_per_s']:.0f} req/s, "
                            f"p50 {point['p50_ms']:.2f} ms, p99 {point['p99_ms']:.2f} ms, "
                            f"server {point['server_cpu_ms_per_request']:.2f} CPU-ms/request"
                            + (f", queue {own['queue_mean_ms']} ms + compute {own['compute_infer_mean_ms']} ms "
                               "per request" if own else ""))
                one["ratios"] = ratios_of(one["offline"], one["embedded"], one["minimal"], gpu)
                one["variant_ratios"] = {name: ratios_of(one["offline"], one[name], one["minimal"], gpu)
                                         for name in servers if name.startswith("embedded_")}
                rounds.append(one)
        finally:
            for proc in procs.values():
                stop_process(proc)
    targets = {"latency_overhead_ms": ("<=", TARGETS["latency_overhead_ms"]),
               "c16_speedup_vs_minimal": (">=", TARGETS["c16_speedup_vs_minimal"]),
               "b64_fraction_of_offline": (">=", TARGETS["b64_fraction_of_offline"]),
               "gpu_fraction_of_offline_best": (">=", TARGETS["gpu_fraction_of_offline_best"])}
    ratios = {}
    for key in rounds[0]["ratios"]:
        values = [r["ratios"][key] for r in rounds]
        value = float(np.median(values))
        if key not in targets:
            ratios[key] = {"value": value, "rounds": values}
            continue
        op, target = targets[key]
        ratios[key] = {"value": value, "rounds": values, "target": f"{op} {target}",
                       "met": value <= target if op == "<=" else value >= target}
    a_rounds = [r["offline"] for r in rounds]
    offline_summary = {"batch1_p50_ms": float(np.median([x["batch1_p50_ms"] for x in a_rounds])),
                       "samples_per_s": {b: float(np.median([x["samples_per_s"][b] for x in a_rounds]))
                                         for b in batches}}
    offline_summary["best_batch"] = max(offline_summary["samples_per_s"], key=offline_summary["samples_per_s"].get)
    names = [n for n in rounds[0] if n == "minimal" or n.startswith("embedded")]
    median = {name: {s: _median_point([r[name][s] for r in rounds]) for s in rounds[0][name]} for name in names}
    variant_ratios = {name: {key: float(np.median([r["variant_ratios"][name][key] for r in rounds]))
                             for key in rounds[0]["variant_ratios"][name]} for name in rounds[0]["variant_ratios"]}
    return {"benchmark": "serve_bench", "date": datetime.date.today().isoformat(), "device": args.device,
            "model": f"cnn_{args.preset}", "served_model": model, "input_shape": list(shape), "server_cores": cores,
            "repository": "as written by trainserve export (defaults)",
            "machine": machine(), "load_average_at_end": os.getloadavg(), "command": " ".join(sys.argv),
            "seconds_per_point": args.seconds, "rounds": len(rounds), "client_processes_max": args.client_procs,
            "server_cpus": sorted(server_cpus) if server_cpus else None, "variants": args.variants,
            "offline": offline_summary, **median, "ratios": ratios, "variant_ratios": variant_ratios,
            "per_round": rounds}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--preset", default=None, help="cnn preset (default: tiny on cpu, small on cuda)")
    parser.add_argument("--spin", action="store_true", help="start the embedded server with --spin (idle threads busy-wait)")
    parser.add_argument("--busy-poll-us", type=int, default=None,
                        help="the embedded server's --busy-poll-us (default: the server's own default)")
    parser.add_argument("--seconds", type=float, default=5.0, help="measurement window per point")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up before each window, seconds")
    parser.add_argument("--client-procs", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                        help="client processes at most, per point (default: half the cores)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every point; ratios are medians")
    parser.add_argument("--gpu-request-batch", type=int, nargs="+", default=[32, 64],
                        help="rows per request, one GPU point each")
    parser.add_argument("--gpu-concurrency", type=int, default=64, help="users in the GPU point")
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=None,
                        help=f"embedded-server configurations, one server each (default: {' '.join(GPU_VARIANTS)} "
                             "on cuda, default on cpu)")
    parser.add_argument("--server-cpus", default=None,
                        help="pin the servers and (a) to these CPUs, e.g. 0-1, and the clients to the others "
                             "(a many-core host measuring what 2 cores give, with the client out of their way)")
    args = parser.parse_args()
    args.variants = args.variants or (GPU_VARIANTS if args.device == "cuda" else ["default"])
    if "default" not in args.variants:
        args.variants = ["default", *args.variants]
    args.preset = args.preset or ("small" if args.device == "cuda" else "tiny")
    result = run(args)
    out = Path(os.environ.get("OUT", "bench-out"))
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"serve_bench-{args.device}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2))
    tmp.replace(path)
    for key, r in result["ratios"].items():
        verdict = f" (target {r['target']}) {'met' if r['met'] else 'MISSED'}" if "target" in r else ""
        print(f"{key}: {r['value']:.3f}{verdict}")
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_ROOT))
    main()
