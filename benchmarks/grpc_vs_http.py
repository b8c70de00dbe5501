"""The embedded server's gRPC front end against its HTTP front end, on one server, in alternating rounds.

The target: at 16 concurrent users, batch 1, gRPC must answer >= 0.8x HTTP's requests/s, so a Triton client
loses little by choosing gRPC.

One `trainserve serve` (HTTP, gRPC and metrics on ephemeral ports) on a repository written by the
export stage itself (`trainserve.publish.export_and_publish` on a random-weight zoo CNN: the same config.pbtxt
`trainserve export` writes), then rounds of [HTTP point, a gRPC point per --grpc-client], the order
reversed every other round so that a drift in machine load hits all alike. Every point is closed-loop, `--users` users in
`--client-procs` separate processes (the clients never share the server's GIL), and the clients are
what a user would run:
  HTTP: tritonclient.http.InferenceServerClient, binary tensors, greenlets sharing one client per
        process (gevent, as serve_bench.py and Locust's HTTP users);
  gRPC: tritonclient.grpc.InferenceServerClient, one per user thread, blocking `infer` (the client
        Locust's gRPC users run, one channel per user); or, with --grpc-client aio,
        tritonclient.grpc.aio, one client per coroutine on one event loop per process; or, with
        --grpc-client stream, one ModelStreamInfer stream per user (one request in flight on each).
Per point: requests/s, p50/p99, server and client CPU-ms per request, and the server's own queue and
compute_infer per request from GET /v2/models/<m>/stats. On a machine whose cores the clients share
with the server, requests/s follows total CPU per request; the server's CPU-ms per request is the
figure the server alone decides.

    python benchmarks/grpc_vs_http.py                       # 3 rounds x 8 s, c=16, batch 1
    python benchmarks/grpc_vs_http.py --rounds 5 --seconds 10
    python benchmarks/grpc_vs_http.py --grpc-client sync stream --floor   # unary and streaming gRPC, and
                                                                          # a bare grpc.aio server for each
Writes $OUT/grpc_vs_http.json (default OUT=./bench-out).
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from benchmarks.serve_bench import (
    _free_port,
    closed_loop,
    server_stats,
    spawn_clients,
    start_process,
    stats_delta,
    stop_process,
)

TARGET_RATIO = 0.8  # gRPC req/s over HTTP req/s at c=16, batch 1
GRPC_CLIENTS = {"sync": "grpc", "aio": "grpc-aio", "stream": "grpc-stream"}  # --grpc-client -> client kind
GRPC_CLIENT_TEXT = {"sync": "tritonclient.grpc, one InferenceServerClient per user thread, blocking infer",
                    "aio": "tritonclient.grpc.aio, one InferenceServerClient per coroutine, one event loop per process",
                    "stream": "tritonclient.grpc, one ModelStreamInfer stream per user thread, one request in flight"}


def export_repository(root: Path, preset: str, device: str = "cpu") -> tuple[Path, str, list[int]]:
    """Random-weight cnn `preset` through the real export stage; (repository, model name, input shape)."""
    import torch

    from trainserve.serve.repository import RepositoryConfig
    from trainserve.core.card import ModelCard, TensorSpec
    from trainserve.publish import export_and_publish
    from trainserve.train.export import ExportConfig
    from trainserve.train.models import build_model, config_to_dict, io_spec, preset_config

    torch.manual_seed(0)
    config = preset_config("cnn", preset)
    ins, outs = io_spec(config)
    card = ModelCard(family="cnn", preset=preset, config=config_to_dict(config),
                     inputs=[TensorSpec(**t) for t in ins], outputs=[TensorSpec(**t) for t in outs],
                     classes=[str(i) for i in range(config.num_classes)])
    train_dir = root / "train"
    train_dir.mkdir(parents=True)
    card.save(train_dir)
    model = build_model(config).eval()
    torch.save({"model": model.state_dict(), "epoch": 0, "step": 0, "card": card.to_dict()}, train_dir / "checkpoint.pt")
    result = export_and_publish(root, train_dir / "checkpoint.pt", train_dir / "model.json",
                        ExportConfig(eval_limit=256, seed=0), RepositoryConfig())
    return result.repository, f"{card.name}_{'gpu' if device == 'cuda' else 'cpu'}", list(card.inputs[0].shape)


# ------------------------------------------------------------------ clients (one process each)
def _http_users(url: str, model: str, x: np.ndarray, users: int, run_user) -> None:
    import gevent
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url, concurrency=users, connection_timeout=60, network_timeout=60)
    inp = httpclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    out = httpclient.InferRequestedOutput("logits", binary_data=True)
    try:
        gevent.joinall([gevent.spawn(run_user, lambda: client.infer(model, [inp], outputs=[out]))
                        for _ in range(users)])
    finally:
        client.close()


def _grpc_users(url: str, model: str, x: np.ndarray, users: int, run_user) -> None:
    import tritonclient.grpc as grpcclient

    clients = [grpcclient.InferenceServerClient(url) for _ in range(users)]
    inp = grpcclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    out = grpcclient.InferRequestedOutput("logits")
    threads = [threading.Thread(target=run_user, args=(lambda c=c: c.infer(model, [inp], outputs=[out]),))
               for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in clients:
        c.close()


def _grpc_stream_users(url: str, model: str, x: np.ndarray, users: int, run_user) -> None:
    """One ModelStreamInfer stream per user thread: send one request, wait for its answer, repeat."""
    import queue

    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    inp = grpcclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    out = grpcclient.InferRequestedOutput("logits")

    def user() -> None:
        client = grpcclient.InferenceServerClient(url)
        answers: queue.SimpleQueue = queue.SimpleQueue()
        client.start_stream(callback=lambda result, error: answers.put((result, error)))

        def call():
            client.async_stream_infer(model, [inp], outputs=[out])
            result, error = answers.get()
            if error is not None:
                raise InferenceServerException(str(error))
            return result

        try:
            run_user(call)
        finally:
            client.stop_stream()
            client.close()

    threads = [threading.Thread(target=user) for _ in range(users)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _grpc_aio_users(url: str, model: str, x: np.ndarray, users: int, record) -> None:
    """`users` coroutines on one event loop, each with its own tritonclient.grpc.aio client."""
    import asyncio

    import tritonclient.grpc.aio as aioclient

    async def user(client) -> None:
        inp = aioclient.InferInput("input", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        out = aioclient.InferRequestedOutput("logits")
        while (t0 := time.monotonic()) < record.end:
            try:
                result = await client.infer(model, [inp], outputs=[out])
            except Exception as e:
                record.error(e)
                continue
            record.done(t0, result)

    async def main() -> None:
        clients = [aioclient.InferenceServerClient(url) for _ in range(users)]
        try:
            await asyncio.gather(*(user(c) for c in clients))
        finally:
            await asyncio.gather(*(c.close() for c in clients))

    asyncio.run(main())


class _Record:
    """Latencies inside [begin, end] and errors, shared by a client process's users."""

    def __init__(self, begin: float, end: float) -> None:
        self.begin, self.end = begin, end
        self.latencies: list[float] = []
        self.errors: list[str] = []

    def error(self, e: Exception) -> None:  # counted, and the user goes on: a refused request is a result too
        self.errors.append(str(e)[:200])

    def done(self, t0: float, result) -> None:
        t1 = time.monotonic()
        if t0 >= self.begin and t1 <= self.end:
            self.latencies.append(t1 - t0)
        assert result.as_numpy("logits").shape[0] == 1


def _client_process(protocol: str, url: str, model: str, shape: list[int], users: int,
                    begin: float, end: float, conn) -> None:
    """`users` closed-loop batch-1 users; sends back latencies inside [begin, end], errors and CPU time."""
    latencies: list[float] = []
    errors: list[str] = []

    def run_user(call) -> None:
        closed_loop(call, begin, end, 1, latencies, errors)

    x = np.random.rand(1, *shape).astype(np.float32)
    cpu0 = time.process_time()
    if protocol == "grpc-aio":
        record = _Record(begin, end)
        _grpc_aio_users(url, model, x, users, record)
        latencies, errors = record.latencies, record.errors
    else:
        users_of = {"http": _http_users, "grpc": _grpc_users, "grpc-stream": _grpc_stream_users}[protocol]
        users_of(url, model, x, users, run_user)
    conn.send({"latencies": latencies, "errors": errors[:5], "error_count": len(errors),
               "cpu_s": time.process_time() - cpu0})


def _floor_server(port: int, ready) -> None:
    """The embedded server's servicer on grpc.aio, registered as it registers it, answering every
    inference with one canned response: what grpc.aio and its C core cost per request, without the core."""
    import asyncio

    import grpc
    from tritonclient.grpc import service_pb2 as pb

    from trainserve.serve.protocol.grpc_server import InferenceServicer, _generic_handlers

    response = pb.ModelInferResponse(model_name="floor", model_version="1")
    response.outputs.add(name="logits", datatype="FP32", shape=[1, 10])
    response.raw_output_contents.append(bytes(40))

    class Canned(InferenceServicer):  # ModelInfer and ModelStreamInfer as served, the core left out
        async def _infer(self, request: pb.ModelInferRequest) -> pb.ModelInferResponse:
            return response

    async def main() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(_generic_handlers(Canned(core=None)))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        ready.set()
        await server.wait_for_termination()

    asyncio.run(main())


def drive(protocol: str, url: str, model: str, shape: list[int], users: int, procs: int,
          warmup_s: float, seconds: float, server_pid: int) -> dict:
    """One closed-loop point; requests/s, latency and CPU (server and clients) over the window."""

    procs = min(procs, users)
    per = [users // procs + (1 if i < users % procs else 0) for i in range(procs)]
    start = time.monotonic() + 3.0  # spawn and import time: every process runs before the warm-up ends
    begin, end = start + warmup_s, start + warmup_s + seconds
    reports, server_cpu_s, clients_cpu_s = spawn_clients(
        _client_process, [(protocol, url, model, shape, n) for n in per], begin, end, server_pid)
    lat = np.array([x for r in reports for x in r["latencies"]])
    if lat.size == 0:
        raise SystemExit(f"no successful {protocol} requests to {url}: {[r['errors'] for r in reports]}")
    return {"protocol": protocol, "users": users, "client_processes": procs, "requests": int(lat.size),
            "requests_per_s": lat.size / seconds,
            "p50_ms": 1e3 * float(np.percentile(lat, 50)), "p99_ms": 1e3 * float(np.percentile(lat, 99)),
            "errors": sum(r["error_count"] for r in reports), "error_samples": reports[0]["errors"],
            "server_cpu_ms_per_request": 1e3 * server_cpu_s / lat.size,
            "client_cpu_ms_per_request": 1e3 * clients_cpu_s / lat.size,
            "client_cpu_cores": clients_cpu_s / seconds, "server_cpu_cores": server_cpu_s / seconds}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", help="cnn preset")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="the server's device: cpu serves <cnn>_cpu, cuda serves <cnn>_gpu")
    parser.add_argument("--users", type=int, default=16, help="closed-loop users per point")
    parser.add_argument("--client-procs", type=int, default=4, help="client processes the users are spread over")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every point (order reversed every other round)")
    parser.add_argument("--seconds", type=float, default=8.0, help="measurement window per point")
    parser.add_argument("--warmup", type=float, default=2.0, help="warm-up before each window, seconds")
    parser.add_argument("--grpc-client", nargs="+", choices=list(GRPC_CLIENTS), default=["sync"],
                        help="one gRPC point per client: sync = tritonclient.grpc, a blocking client per user thread "
                             "(as Locust's gRPC users); aio = tritonclient.grpc.aio, a client per coroutine, one event "
                             "loop per process; stream = tritonclient.grpc, one ModelStreamInfer stream per user thread")
    parser.add_argument("--floor", action="store_true",
                        help="each gRPC point also runs against a bare grpc.aio server answering a canned response "
                             "(gRPC's own cost per request, no model, no core)")
    parser.add_argument("--serve-args", default="", help="extra `trainserve serve` arguments, e.g. '--busy-poll-us 0'")
    args = parser.parse_args()

    # point name -> (client kind, "server" or "floor")
    points = {"http": ("http", "server")}
    for c in args.grpc_client:
        points[f"grpc_{c}"] = (GRPC_CLIENTS[c], "server")
        if args.floor:
            points[f"floor_{c}"] = (GRPC_CLIENTS[c], "floor")
    with tempfile.TemporaryDirectory(prefix="grpc-vs-http-") as tmp:
        t0 = time.perf_counter()
        repo, model, shape = export_repository(Path(tmp), args.preset, args.device)
        log(f"exported {model} {shape} in {time.perf_counter() - t0:.0f} s")
        grpc_port = _free_port()  # start_process reads back one port (HTTP's); gRPC's is chosen here
        cmd = [sys.executable, "-m", "trainserve", "serve", "--model-repository", str(repo), "--device", args.device,
               "--http-port", "0", "--grpc-port", str(grpc_port), "--metrics-port", "0", *args.serve_args.split()]
        proc, http_port = start_process(cmd, r"ready http=[^:]+:(\d+)")
        floor = None
        try:
            if args.floor:
                floor_port, ready = _free_port(), mp.get_context("spawn").Event()
                floor = mp.get_context("spawn").Process(target=_floor_server, args=(floor_port, ready), daemon=True)
                floor.start()
                if not ready.wait(60):
                    raise SystemExit("the --floor gRPC server did not start within 60 s")
            rounds = []
            for i in range(args.rounds):
                one: dict = {}
                for name in (list(points) if i % 2 == 0 else list(points)[::-1]):
                    client, target = points[name]
                    if target == "floor":
                        point = drive(client, f"127.0.0.1:{floor_port}", "floor", shape, args.users,
                                      args.client_procs, args.warmup, args.seconds, floor.pid)
                    else:
                        before = server_stats(http_port, model)
                        point = drive(client, f"127.0.0.1:{http_port if client == 'http' else grpc_port}", model,
                                      shape, args.users, args.client_procs, args.warmup, args.seconds, proc.pid)
                        point["server_stats"] = stats_delta(before, server_stats(http_port, model))
                    one[name] = point
                    stats = point.get("server_stats", {})
                    log(f"round {i + 1} {name:12}: {point['requests_per_s']:6.0f} req/s  p50 {point['p50_ms']:.2f} ms"
                        f"  p99 {point['p99_ms']:.2f} ms  server {point['server_cpu_ms_per_request']:.3f} CPU-ms/req"
                        f"  clients {point['client_cpu_ms_per_request']:.3f} CPU-ms/req"
                        f" ({point['client_cpu_cores']:.2f} cores)  queue {stats.get('queue_mean_ms')} ms"
                        f"  compute {stats.get('compute_infer_mean_ms')} ms  errors {point['errors']}")
                for c in args.grpc_client:
                    g, h = one[f"grpc_{c}"], one["http"]
                    one[f"ratio_{c}"] = g["requests_per_s"] / h["requests_per_s"]
                    one[f"server_cpu_ratio_{c}"] = g["server_cpu_ms_per_request"] / h["server_cpu_ms_per_request"]
                    log(f"round {i + 1}: gRPC ({c}) / HTTP req/s {one[f'ratio_{c}']:.3f}, "
                        f"server CPU per request {one[f'server_cpu_ratio_{c}']:.3f}")
                rounds.append(one)
        finally:
            stop_process(proc)
            if floor is not None:
                floor.kill()

    def median(key: str, name: str | None = None) -> float:
        return float(np.median([(r[name][key] if name else r[key]) for r in rounds]))

    keys = ("requests_per_s", "p50_ms", "p99_ms", "server_cpu_ms_per_request", "client_cpu_ms_per_request")
    result = {"benchmark": "grpc_vs_http", "date": datetime.date.today().isoformat(), "command": " ".join(sys.argv),
              "machine": {"cpu_count": os.cpu_count(), "host": platform.node(), "load_average_at_end": os.getloadavg()},
              "model": model, "users": args.users, "batch": 1, "client_processes": args.client_procs,
              "clients": {"http": "tritonclient.http, gevent greenlets sharing one client per process",
                          **{f"grpc_{c}": GRPC_CLIENT_TEXT[c] for c in args.grpc_client}},
              "seconds_per_point": args.seconds, "target": f">= {TARGET_RATIO}", "rounds": rounds,
              "median": {name: {k: median(k, name) for k in keys} for name in points},
              "ratio": {c: {"value": median(f"ratio_{c}"), "rounds": [r[f"ratio_{c}"] for r in rounds],
                            "server_cpu_ratio": median(f"server_cpu_ratio_{c}")} for c in args.grpc_client}}
    out = Path(os.environ.get("OUT", "bench-out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "grpc_vs_http.json").write_text(json.dumps(result, indent=2))
    for name, m in result["median"].items():
        print(f"{name:12} {m['requests_per_s']:6.0f} req/s  p50 {m['p50_ms']:.2f} ms  p99 {m['p99_ms']:.2f} ms  "
              f"server {m['server_cpu_ms_per_request']:.3f} CPU-ms/req  clients {m['client_cpu_ms_per_request']:.3f} CPU-ms/req")
    for c, r in result["ratio"].items():
        print(f"gRPC ({c}) / HTTP req/s: {r['value']:.3f} (rounds {', '.join(f'{x:.3f}' for x in r['rounds'])}; "
              f"target >= {TARGET_RATIO}: {'met' if r['value'] >= TARGET_RATIO else 'MISSED'}); "
              f"server CPU per request gRPC/HTTP: {r['server_cpu_ratio']:.3f}")
    print(f"wrote {out / 'grpc_vs_http.json'}")


if __name__ == "__main__":
    main()
