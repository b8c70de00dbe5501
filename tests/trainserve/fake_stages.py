"""Stand-ins for the stage CLIs, so `trainserve run`'s orchestration is tested in seconds.

    python fake_stages.py <train|compare|export|serve|load> [the stage's options]

They write real profile records where the real stages do. FAKE_FAIL=<stage> makes that stage
fail; FAKE_SLOW=<stage> makes it hang (and start a grandchild that must be stopped with it).
"""

from __future__ import annotations

import argparse
import http.server
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from trainserve.core.profile import LatencyStats, ProfileRecord  # noqa: E402
from trainserve.core.served import ClientCpu, Served, ServerProcess  # noqa: E402
from trainserve.core.servedparts import (  # noqa: E402
    LoadParts,
    LoadSettings,
    RampStep,
    RampStop,
    Saturation,
    SearchProbe,
    ServerInfo,
    ServerSearch,
)


def _opts(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    for name in ("--run", "--runs-dir", "--model", "--url", "--batch", "--users", "--device", "--model-repository",
                 "--duration", "--ramp-step-s", "--ramp-max-users", "--metrics-url", "--target", "--budget-s",
                 "--rate", "--slo-p99-ms", "--server-pid", "--shared-rate-basis"):
        p.add_argument(name)
    p.add_argument("--ramp", action="store_true")
    p.add_argument("--search", action="store_true")
    args, _ = p.parse_known_args(argv)
    return args


def _hang() -> None:
    # a grandchild in the same process group, like a Locust worker or a DataLoader worker
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    time.sleep(600)


def main() -> None:
    stage, argv = sys.argv[1], sys.argv[2:]
    a = _opts(argv)
    print(f"fake {stage} {' '.join(argv)}", file=sys.stderr, flush=True)
    if os.environ.get("FAKE_FAIL") == stage:
        print(f"error: fake {stage} broke on purpose", file=sys.stderr)
        sys.exit(1)
    if os.environ.get("FAKE_SLOW") == stage:
        _hang()
    run = Path(a.runs_dir or "runs") / (a.run or "default")
    if stage == "train":
        r = ProfileRecord(phase="train", model=a.model, backend="torch", device=a.device, batch_size=64)
        r.speed.throughput_samples_s = 500.0
        r.speed.latency = LatencyStats.from_samples_ms([120.0, 128.0, 131.0])
        r.save(run / "train" / "profile.json")
    elif stage == "compare" and "--sweep" in argv:
        for batch in (8, 16, 32):
            r = ProfileRecord(phase="train", model=a.model, backend="torch", device=a.device, batch_size=batch)
            r.speed.throughput_samples_s = (100.0 if a.device == "cpu" else 10000.0) * batch ** 0.5
            r.memory.peak_bytes = 1000 * batch
            r.extra["sweep"] = True
            r.save(run / "sweep" / a.device / f"fp32-b{batch}.json")
            print(f"sweep point: {a.device} fp32 batch {batch}", flush=True)
    elif stage == "compare":
        for device in ("cpu", "cuda"):
            r = ProfileRecord(phase="train", model=a.model, backend="torch", device=device, batch_size=128)
            r.speed.throughput_samples_s = 300.0 if device == "cpu" else 60000.0
            r.save(run / "compare" / f"profile-{device}.json")
    elif stage == "export":
        (run / "model_repository" / f"{a.model or 'cnn'}_cpu" / "1").mkdir(parents=True, exist_ok=True)
    elif stage == "frontier":
        from trainserve.core.frontier_result import FrontierPoint, FrontierResult

        point = FrontierPoint(series="train fp32", mode="train", precision="fp32", checkpointing=False, size=32,
                              params=30000, batch_size=8, status="fits", peak_bytes=600000)
        FrontierResult(device=a.device, device_name="fake CPU", model="transformer", batch_size=8,
                       capacity_bytes=None, capacity_source="no capacity", points=[point]).save(run / "frontier")
    elif stage == "limits":
        for batch, threads in ((1, 1), (64, 1)):
            r = ProfileRecord(phase="infer", model=a.model, backend="onnxruntime", device=a.device, batch_size=batch,
                              concurrency=1, target=f"in-process/{a.model}")
            r.speed.throughput_samples_s = 2000.0 * batch ** 0.6
            r.speed.latency = LatencyStats.from_samples_ms([0.3 * batch ** 0.4] * 5)
            r.settings = {"intra_op_threads": threads, "allow_spinning": False}
            r.extra = {"limit": True, "sweep": "threads" if batch == 1 else "layout"}
            r.save(run / "limits" / a.device / a.model / f"b{batch}-t{threads}.json")
    elif stage == "serve":
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
        port = server.server_address[1]
        print(f"trainserve serve: ready http=127.0.0.1:{port} grpc=off metrics=off", flush=True)
        if os.environ.get("FAKE_SLOW") == "serve-child":
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        server.serve_forever()
    elif stage == "load":
        batch, users = int(a.batch), int(a.users or 1)
        device = "cuda" if a.model.endswith("_gpu") else "cpu"
        r = ProfileRecord(phase="infer", model=a.model, backend="onnxruntime", device=device, batch_size=batch,
                          concurrency=users, target=f"{a.url}/{a.model}")
        r.speed.throughput_samples_s = 800.0 * batch ** 0.5 * users
        r.speed.latency = LatencyStats.from_samples_ms([1.0 * batch ** 0.5, 1.2, 1.5])
        r.validity.stability = {"stable": True, "rule": "windows", "reason": "3 windows agree",
                                "windows_used": [1, 2, 3]}
        r.extra.update(requests=3000, failures=0)
        scenario = "SingleStream" if users == 1 and batch == 1 else "Offline"
        slo = float(a.slo_p99_ms) if a.slo_p99_ms else 20.0
        parts = LoadParts(settings=LoadSettings(
            protocol="http", mode="closed", users=users, rate=None, duration_s=1.0, processes=1, input_data="random",
            validate="off", http_client="prepared", url=a.url, metrics_url=None, locust_exit_code=0,
            scenario=scenario, warmup_s=0.0, window_s=1.0, slo_p99_ms=slo, repeats=1,
            server_pid=int(a.server_pid) if a.server_pid else None),
            server=ServerInfo(name="fake", version="0", metrics={}, instance_group=None, max_batch_size=64,
                              frontends=1))
        if a.search:  # the Server scenario (the pipeline starts it at 80% of the ramp's best, 3200 req/s)
            parts.settings.scenario, parts.settings.mode = "Server", "search"
            parts.settings.rate = float(a.rate) if a.rate else None  # none: the closed-loop probe sets it
            r.speed.throughput_samples_s = 1200.0
            figure = SearchProbe(rate=1200.0, passed=True, reasons=[], requests_s=1200.0, window_s=2.5, mean_ms=1.0,
                                 min_ms=0.5, max_ms=3.0, p50_ms=1.0, p90_ms=1.2, p95_ms=1.3, p99_ms=1.5, p999_ms=2.0,
                                 requests=3000, failures=0, late=0, client_core_fraction=0.3,
                                 per_process_core_fraction=None, stability=None, server=None)
            parts.search = ServerSearch(capacity_req_s=1200.0, upper_req_s=1300.0, lower_bound=False,
                                        budget_ended=False, bracket=0.08, client_limited=False,
                                        stop_reason="bracketed within 5%", slo_p99_ms=slo, max_error_fraction=0.001,
                                        probes=[figure], estimate=None, first_rate_req_s=float(a.rate or 1100.0), step=1.25,
                                        elapsed_s=10.0, stability=None, figure=figure, percentiles_short=[])
        if a.rate and not a.search and not a.ramp:  # open loop at one rate: batching queues, without it p99 grows
            parts.settings.scenario, parts.settings.mode, parts.settings.rate = "open loop", "open", float(a.rate)
            parts.settings.duration_s = 3.0
            r.concurrency = None
            r.speed.latency = LatencyStats.from_samples_ms([9.0, 1.0, 1.2] if a.model.endswith("_nobatch")
                                                           else [3.0, 2.0, 2.5])
        if a.ramp:
            r.validity.stability = None
            parts.settings.scenario, parts.settings.mode = "ramp", "ramp"
            parts.saturation = Saturation(users=4, requests_s=3200.0, reason="limit", stop=RampStop.LIMIT)
            parts.ramp = [RampStep(users=u, rate=None, requests_s=800.0 * u, throughput_samples_s=800.0 * u,
                                   p50_ms=1.0 + u / 4, p90_ms=1.3 + u / 4, p95_ms=1.5 + u / 4, p99_ms=2.0 + u / 4,
                                   p999_ms=2.5 + u / 4, failures=0, window_s=1.0, mean_ms=1.0 + u / 4,
                                   client_cpu=ClientCpu(), server=None, wall_start=0.0, wall_end=1.0)
                          for u in (1, 2, 4)]
        r.served = Served(slo_p99_ms=slo,
                          server_process=ServerProcess(pid=int(a.server_pid), window_s=1.0, ticks=5,
                                                       rss_max_bytes=64 * 1024**2) if a.server_pid else None)
        parts.write(r)
        if a.shared_rate_basis:  # as the load stage writes it (loadtest/runner.py)
            base = a.model.removesuffix("_nobatch")
            r.extra["shared_rate"] = {"rate_req_s": float(a.rate), "pair": [base, base + "_nobatch"],
                                      "basis": a.shared_rate_basis}
        out = run / "load" / f"{a.target}.json"
        r.save(out)
        out.with_name(f"{a.target}_stats.csv").write_text("Type,Name\n")
    time.sleep(0.1)


if __name__ == "__main__":
    main()
