"""Headless load tests: Locust as a subprocess, the server's metrics alongside, one profile record out.

`run_load(config)` checks that the server and the model are ready, runs
`python -m locust -f loadtest/locustfile.py --headless ...` in its own process group (so no worker
outlives the run, also on Ctrl+C), scrapes the server's Prometheus metrics meanwhile, and writes
`runs/<run>/load/<target>.json` (trainserve.core.profile.ProfileRecord, phase "infer") with Locust's CSVs
beside it. Failed requests or an aborted run still write the record, marked validity.partial, and
then raise a UserError (exit code 1).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainserve.loadtest.clientcpu import USERS_PER_PROCESS, auto_processes
from trainserve.loadtest.histogram import Histogram
from trainserve.loadtest.metrics import MetricsScraper
from trainserve.loadtest.model_info import ModelInfo, build_arrays, fetch_model_info
from trainserve.loadtest.options import strip_scheme
from trainserve.loadtest.search import SearchConfig, highest_rate
from trainserve.loadtest.servedrecord import ServedWindow, instances_of
from trainserve.loadtest.serverprocess import ServerProcessWatch
from trainserve.loadtest.windows import percentiles_short
from trainserve.core import meters
from trainserve.core.bounds import NOBATCH_SUFFIX
from trainserve.core.errors import UserError
from trainserve.core.options.load import LoadJob
from trainserve.core.procs import child_env, die_with_parent, stop_group
from trainserve.core.profile import LatencyStats, ProfileRecord, host_info, package_versions
from trainserve.core.runs import run_dir
from trainserve.core.servedparts import (LoadParts, LoadSettings, RampStep, Repeat, Saturation, ServerInfo,
                                         ServerSearch)
from trainserve.core.telemetry import EnergyReading, fill_energy
from trainserve.core.typedjson import from_json

log = logging.getLogger(__name__)
DURATION_S = 30.0  # a load's run time when --duration is not given
# a search's budget when --duration is not given: the closed-loop probe (4 s) and 5 to 6 rates of about 5 s
# (warm-up and three to four windows) bracket capacity within 5% from the estimate, 8 rates when it is 2x off
# (30 to 45 s, tests/loadtest/test_search.py); doubling from 100 req/s needs 9 rates to pass 25,000 req/s
SEARCH_DURATION_S = 60.0
LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
SEARCH_MAX_RATE = SearchConfig.max_rate  # requests/s
_TARGET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@dataclass(kw_only=True)
class LoadConfig(LoadJob):
    """One headless load test: LoadJob (trainserve/core/options/load.py: each field's default and meaning)
    plus its checks."""

    def __post_init__(self) -> None:
        self.url = strip_scheme(self.url)
        if self.duration_s is None:
            self.duration_s = SEARCH_DURATION_S if self.search else DURATION_S
        host, _, port = self.url.rpartition(":")
        if not host or not port.isdigit():
            raise UserError(f"--url {self.url!r} is not HOST:PORT; pass e.g. 127.0.0.1:8000 (gRPC: 8001)")
        if self.users is not None and self.rate is not None:
            raise UserError("--users and --rate exclude each other: --users for closed loop, --rate for open loop")
        if self.ramp and self.rate is not None:
            raise UserError("--ramp steps up users (closed loop); drop --rate, or drop --ramp for open loop")
        if self.search and (self.ramp or self.users is not None):
            raise UserError("--search finds the highest open-loop rate within the SLO; drop --ramp and --users")
        if self.shared_rate_basis is not None and (self.rate is None or self.search):
            raise UserError("--shared-rate-basis marks one fixed open-loop rate; pass --rate R without --search")
        for name, value, ok, allowed in (
            ("users", self.users, self.users is None or self.users >= 1, ">= 1"),
            ("rate", self.rate, self.rate is None or self.rate > 0, "> 0 per second"),
            ("duration", self.duration_s, self.duration_s > 0, "> 0 s"),
            ("batch", self.batch, self.batch >= 1, ">= 1"),
            ("processes", self.processes, self.processes >= 0, ">= 0 (0: from the target and the cores)"),
            *self.shared_checks(),
            ("warmup_s", self.warmup_s, self.warmup_s >= 0, ">= 0 s"),
            ("repeats", self.repeats, self.repeats >= 1, ">= 1"),
        ):
            if not ok:
                raise UserError(f"--{name.replace('_', '-')} {value!r} is invalid; allowed: {allowed}")
        if self.target is not None and not _TARGET.match(self.target):
            raise UserError(f"--target {self.target!r} is invalid; use letters, digits, '.', '_' and '-'")
        if self.metrics_url is None:
            self.metrics_url = f"http://{self.url.rpartition(':')[0]}:8002/metrics"

    @property
    def p99_limit_ms(self) -> float:
        """The p99 this load is held to: a ramp's stopping point, else the SLO (the search's budget)."""
        return self.ramp_stop_p99_ms if self.ramp else self.slo_p99_ms

    @property
    def mode(self) -> str:
        return "ramp" if self.ramp else "search" if self.search else "open" if self.rate is not None else "closed"

    @property
    def scenario(self) -> str:
        """MLPerf's name for what this load measures (the closed-loop ramp and a fixed rate have none)."""
        if self.mode == "search":
            return "Server"
        if self.mode == "closed":
            return "SingleStream" if (self.users or 1) == 1 and self.batch == 1 else "Offline"
        return "ramp" if self.mode == "ramp" else "open loop"


def default_target(config: LoadConfig, info: ModelInfo) -> str:
    server = "triton" if info.backend == "triton" else "embedded"
    load = ("search" if config.search else f"rate{config.rate:g}" if config.rate is not None
            else "ramp" if config.ramp else f"u{config.users or 1}")
    return f"{server}-{info.device}-{config.model}-{config.protocol}-b{config.batch}-{load}"


def locust_command(config: LoadConfig, csv_prefix: Path, results: Path) -> list[str]:
    """The headless Locust command line for `config`."""
    # the search's budget is its duration; Locust's run time is a backstop above it
    run_s = config.duration_s + config.search_probe_s + 10 if config.search else config.duration_s
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary",
           "--csv", str(csv_prefix), "-t", f"{max(1, round(run_s))}s",
           "--warmup-s", f"{0.0 if config.ramp else config.warmup_s:g}", "--window-s", f"{config.window_s:g}",
           "--server-url", config.url, "--model-name", config.model, "--protocol", config.protocol,
           "--batch-size", str(config.batch), "--input-data", config.input_data, "--validate", config.validate,
           "--http-client", config.http_client, "--results-json", str(results),
           "--html", f"{csv_prefix}.html"]  # Locust's own HTML report, beside its CSV files
    if config.expected_output:
        cmd += ["--expected-output", config.expected_output]
    if config.processes > 1:
        cmd += ["--processes", str(config.processes)]
    if config.mode == "search":
        # one open-loop user per process: each worker sends rate/processes (loadtest/search_workers.py)
        # without --rate a closed-loop probe estimates the first rate: as many users per process as keep it busy
        closed = 0 if config.rate is not None else USERS_PER_PROCESS
        cmd += ["--load-shape", "ServerSearch", "--rate", f"{config.rate or 100.0:g}", "--open-loop-users",
                str(max(1, config.processes)), "--search-closed-users", str(closed),
                "--slo-p99-ms", f"{config.slo_p99_ms:g}", "--search-budget-s", f"{config.duration_s:g}",
                "--search-probe-s", f"{config.search_probe_s:g}"]
    elif config.mode == "open":
        cmd += ["--load-shape", "PoissonRate", "--rate", f"{config.rate:g}", "--open-loop-users",
                str(config.processes)]
    elif config.mode == "ramp":
        cmd += ["--load-shape", "StepRamp", "--ramp-start-users", "1", "--ramp-step-users", str(config.processes),
                "--ramp-step-s", f"{config.ramp_step_s:g}", "--ramp-max-users", str(config.ramp_max_users),
                "--ramp-stop-p99-ms", f"{config.ramp_stop_p99_ms:g}"]
    else:
        users = config.users or 1
        cmd += ["-u", str(users), "-r", str(users), "TritonGrpcUser" if config.protocol == "grpc" else "TritonHttpUser"]
    return cmd


def run_load(config: LoadConfig) -> tuple[Path, ProfileRecord]:
    """Run one load test; returns the record's path and the record (raises UserError after writing a partial one)."""
    info = fetch_model_info(config.url, config.model, config.protocol)
    arrays = build_arrays(info, config.batch, config.input_data)  # a bad batch or .npz fails here, not in every user
    if config.processes == 0:
        # a search needs enough processes for the highest rate it may try within its time; without --rate, all
        # it may have (its closed-loop probe is to fill the server, whatever its capacity)
        rate = (highest_rate(config.rate, config.duration_s, config.warmup_s + 3 * config.window_s)
                if config.rate is not None else SEARCH_MAX_RATE) if config.search else config.rate
        config.processes = auto_processes(mode=config.mode, users=config.users, rate=rate,
                                          ramp_max_users=config.ramp_max_users, device=info.device)
    target = config.target or default_target(config, info)
    watch = ServerProcessWatch(config.server_pid) if config.server_pid is not None else None  # a wrong pid fails here
    out_dir = run_dir(config.run, config.runs_dir, writable=True) / "load"
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob(f".{target}.*"):  # what a load killed midway left (one writer per target)
        shutil.rmtree(stale, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target}.", dir=out_dir))
    try:
        results_path = staging / "results.json"
        cmd = locust_command(config, staging / target, results_path)
        log.debug("load: %s", " ".join(cmd))
        served = ServedWindow(config.url, info, arrays, config.protocol, config.http_client, config.validate != "off",
                              config.batch, config.input_data)
        scraper = MetricsScraper(config.metrics_url or "", config.model).start()
        if watch is not None:
            watch.start()
        runs = []
        for k in range(config.repeats):
            results_path.unlink(missing_ok=True)
            returncode, stderr_tail = _run_locust(cmd, config.duration_s + 60.0 + (600.0 if config.ramp else 0.0))
            if not results_path.exists():
                scraper.stop()
                if watch is not None:
                    watch.stop()
                raise UserError(f"Locust stopped before measuring anything (exit code {returncode}): "
                                f"{stderr_tail or 'no output'}")
            runs.append(json.loads(results_path.read_text()))
            if k + 1 < config.repeats:
                log.info("repeat %d of %d done", k + 1, config.repeats)
        scraper.stop()
        served.stop()
        watched = watch.stop() if watch is not None else None
        results = pool_repeats(runs)
        record, parts = build_record(config, info, target, results, scraper.summary(figure_wall_window(results)),
                                     returncode)
        served.annotate(record, parts, results, instances_of(info.config.get("instance_group")), watched)
        parts.write(record)
        for f in [*staging.glob(f"{target}_*.csv"), *staging.glob(f"{target}.html")]:
            os.replace(f, out_dir / f.name)
        path = out_dir / f"{target}.json"
        record.save(path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if record.validity.partial:
        first = results["errors"][0]["error"] if results["errors"] else "none recorded"
        reason = results.get("aborted") or f"{results['failures']} of {results['requests']} requests failed"
        raise UserError(f"the load test did not complete cleanly ({reason}; first error: {first}); "
                        f"partial results written to {path}")
    return path, record


def figure_wall_window(results: dict[str, Any]) -> tuple[float, float] | None:
    """A capacity search's figure's windows (wall clock), so its server figures cover that rate alone and not
    the other rates the search tried; None for a plain load."""
    figure = (results.get("search") or {}).get("figure") or {}
    start, end = figure.get("wall_start"), figure.get("wall_end")
    return (start, end) if start is not None and end is not None else None


def _run_locust(cmd: list[str], timeout_s: float) -> tuple[int, str]:
    """Run Locust in its own process group and make sure every process of it is gone afterwards."""
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=child_env(), start_new_session=True,
                                preexec_fn=functools.partial(die_with_parent, signal.SIGKILL))
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.error("Locust ran past %.0f s; stopping it", timeout_s)
        finally:
            # SIGINT lets Locust write its results (also on Ctrl+C); then its group goes, with any
            # forked workers the master left behind
            stop_group(proc, "Locust", signal.SIGINT, grace_s=10)
        err.seek(0)
        lines = [ln for ln in err.read().splitlines() if ln.strip()]
    problems = [ln for ln in lines if "Error" in ln or "error" in ln]
    return proc.returncode, (problems or lines or [""])[-1][-300:]


def build_record(config: LoadConfig, info: ModelInfo, target: str, results: dict[str, Any],
                 server: dict[str, Any], returncode: int) -> tuple[ProfileRecord, LoadParts]:
    """The profile record of one load test and its served parts, from the locustfile's results and the scraped
    metrics (the parts go into the record with LoadParts.write, once annotated)."""
    parts = LoadParts(settings=_settings(config, returncode),
                      server=ServerInfo(name=info.server_label, version=info.server_version, metrics=server,
                                        instance_group=info.config.get("instance_group"),
                                        max_batch_size=info.max_batch_size, frontends=info.frontends),
                      search=from_json(ServerSearch | None, results.get("search")),
                      ramp=from_json(list[RampStep], results.get("ramp") or []),
                      saturation=from_json(Saturation | None, results.get("saturation")))
    figure = _Figure.of(config, results, parts.search)
    parts.percentiles_short = figure.percentiles_short
    parts.repeats = from_json(list[Repeat], results.get("repeats") or [])
    record = ProfileRecord(
        phase="infer", model=config.model, backend=info.backend, device=info.device,  # type: ignore[arg-type]
        precision="fp16" if any(t.datatype == "FP16" for t in info.inputs) else "fp32",
        batch_size=config.batch, concurrency=None if config.rate is not None else config.users or 1,
        target=target,
    )
    requests_s = figure.count / figure.window_s if figure.window_s else None
    record.speed.requests_s = round(requests_s, 3) if requests_s is not None else None
    record.speed.throughput_samples_s = round(requests_s * config.batch, 3) if requests_s is not None else None
    record.speed.latency = figure.latency
    v = record.validity
    v.window_s, v.samples = figure.window_s, figure.count * config.batch
    _apply_server_metrics(record, server, figure.count * config.batch)
    v.warmup_excluded = int(results.get("warmup_excluded") or 0)
    v.stability = None if config.ramp else figure.stability
    # the client's own saturation (record.served.client, set by ServedWindow.annotate) is added there;
    # a search that could not send its rate is the client's limit too
    v.client_saturated = parts.search is not None and parts.search.client_limited
    v.warnings += _warnings(config, results, server, parts.search)
    v.partial = bool(figure.failures or results.get("aborted") or returncode not in (0, 1)
                     or (config.search and parts.search is None))
    record.extra = _extra(target, results, figure, server)
    if config.shared_rate_basis is not None:
        base = config.model.removesuffix(NOBATCH_SUFFIX)
        record.extra["shared_rate"] = {"rate_req_s": config.rate, "pair": [base, base + NOBATCH_SUFFIX],
                                       "basis": config.shared_rate_basis}
    record.versions = package_versions("locust", "tritonclient", "gevent", "numpy")
    record.host = host_info()
    return record, parts


@dataclass
class _Figure:
    """The figure a record states: a plain load's whole measured span, or a Server search's capacity rate."""

    latency: LatencyStats
    count: int  # requests answered in the window
    failures: int  # failed requests that count against the figure (a search's failed rates are what it measures)
    window_s: float | None
    stability: dict[str, Any] | None
    percentiles_short: list[str]

    @classmethod
    def of(cls, config: LoadConfig, results: dict[str, Any], search: ServerSearch | None) -> _Figure:
        # without a warm-up, from the first to the last request (which excludes the time workers take to connect
        # and start users)
        whole_s = results.get("requests_window_s") or results.get("window_s") or config.duration_s
        if search is None:
            lat = results["latency"]
            count = lat["count"] or 0
            # after the warm-up, to the end
            window = (results.get("measured_window_s") if results.get("warmup_s") else None) or whole_s
            return cls(LatencyStats(count=count, **{k: lat.get(k) for k in _LATENCY}), count,
                       results.get("failures") or 0, window, results.get("stability"),
                       results.get("percentiles_short", []))
        # the Server scenario: the figure is the highest rate that met the SLO (none: nothing to state)
        f = search.figure
        if f is None:
            return cls(LatencyStats(), 0, 0, whole_s, search.stability, [])
        count = f.requests - f.failures
        return cls(LatencyStats(count=count, **{k: getattr(f, k) for k in _LATENCY}), count, f.failures,
                   f.window_s or whole_s, search.stability, search.percentiles_short or [])


_LATENCY = ("mean_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms", "min_ms")


def _settings(config: LoadConfig, returncode: int) -> LoadSettings:
    return LoadSettings(protocol=config.protocol, mode=config.mode, users=config.users, rate=config.rate,
                        duration_s=config.duration_s or 0.0, processes=config.processes,
                        input_data=config.input_data, validate=config.validate, http_client=config.http_client,
                        url=config.url, metrics_url=config.metrics_url, locust_exit_code=returncode,
                        scenario=config.scenario, warmup_s=0.0 if config.ramp else config.warmup_s,
                        window_s=config.window_s, slo_p99_ms=config.p99_limit_ms, repeats=config.repeats,
                        server_pid=config.server_pid)


def _warnings(config: LoadConfig, results: dict[str, Any], server: dict[str, Any],
              search: ServerSearch | None) -> list[str]:
    out = []
    if results.get("failures"):
        out.append(f"{results['failures']} of {results['requests']} requests failed")
    if results.get("aborted"):
        out.append(results["aborted"])
    if config.search and search is None:
        out.append("the capacity search did not report a result (Locust stopped it first)")
    if server.get("scrapes", 0) == 0:
        out.append(f"no server metrics from {config.metrics_url} ({server.get('error')}); pass --metrics-url")
    return out


def _extra(target: str, results: dict[str, Any], figure: _Figure, server: dict[str, Any]) -> dict[str, Any]:
    """What a load record keeps beside its figures (the typed parts are added by LoadParts.write)."""
    gen = results.get("load_generator") or {}
    cpu = gen.get("cpu_s")
    return {
        "load_generator": {**gen, "requests_per_cpu_s": round(figure.count / cpu, 1) if cpu else None},
        "latency_histogram": results.get("histogram"),
        "errors": results.get("errors", []),
        "requests": results.get("requests"), "failures": results.get("failures"),
        "locust_csv": sorted(f"{target}_{k}.csv" for k in ("stats", "stats_history", "failures", "exceptions")),
        "locust_html": f"{target}.html",
        "windows": results.get("windows"),
    }


# the meter of a figure read off the server's metrics page (Triton's names; NVML underneath)
SERVER_NVML_METER = "NVML via the server's /metrics"


def _apply_server_metrics(record: ProfileRecord, server: dict[str, Any], samples: int) -> None:
    """The record's utilization and energy from the server's metrics, each only from its own device's meter.

    A server exposes its host's GPU gauges whatever device the model runs on (Triton does the same), so a
    CPU record takes none of them: they would be the idle GPU's. Its energy is left to a CPU meter (the server
    process's sample, servedrecord.add_cpu_energy: RAPL or the labelled estimate). The energy covers the record's
    measured window: the mean power over the scrapes times that window."""
    u = record.utilization
    cuda = record.device == "cuda"
    gpu = server.get("nv_gpu_utilization") if cuda else None
    if gpu:
        u.gpu_util_mean_percent = round(gpu["mean"] * 100, 2)
        u.gpu_util_max_percent = round(gpu["max"] * 100, 2)
    mem = server.get("nv_gpu_memory_used_bytes") if cuda else None
    if mem:
        u.gpu_mem_used_max_bytes = int(mem["max"])
    if gpu or mem:
        u.gpu_meter = SERVER_NVML_METER
    cpu = server.get("nv_cpu_utilization")
    if cpu:
        u.cpu_system_mean_percent = round(cpu["mean"] * 100, 2)
    gt, ct = (gpu or {}).get("timeline") or [], (cpu or {}).get("timeline") or []
    u.timeline = [{"t_s": float(i),  # one scrape per second
                   **({"gpu_util_percent": round(gt[i] * 100, 2) if i < len(gt) else None} if cuda else {}),
                   "cpu_system_percent": round(ct[i] * 100, 2) if i < len(ct) else None}
                  for i in range(max(len(gt), len(ct)))]
    if cuda:
        fill_energy(record, _server_energy(server), samples, record.validity.window_s)


def _server_energy(server: dict[str, Any]) -> EnergyReading | None:
    """The GPU's energy over the scraped window: NVML's counter, else its power gauge's mean × the window."""
    span = server.get("window_s") or 0.0
    if span <= 0:
        return None
    energy, power = server.get("nv_energy_consumption"), server.get("nv_gpu_power_usage")
    if energy is not None and server.get("nv_gpu_utilization"):
        return EnergyReading(energy, span, meters.NVML, f"{SERVER_NVML_METER} (nv_energy_consumption)", "cuda")
    if power:
        return EnergyReading(power["mean"] * span, span, meters.NVML_POWER,
                             f"{SERVER_NVML_METER} (nv_gpu_power_usage)", "cuda")
    return None


def repeat_row(results: dict[str, Any]) -> dict[str, Any]:
    """One repeat's figures, for the report's mean and 95% CI."""
    search = results.get("search")
    if search is not None:
        lat = search.get("figure") or {}
        count, window = lat.get("requests", 0) - lat.get("failures", 0), lat.get("window_s")
        stability = search.get("stability") or {}
    else:
        lat = results["latency"]
        count = lat.get("count")
        window = results.get("measured_window_s") if results.get("warmup_s") else results.get("requests_window_s")
        stability = results.get("stability") or {}
    return {"requests_s": round(count / window, 3) if count and window else None,
            "capacity_req_s": (search or {}).get("capacity_req_s"),
            **{k: lat.get(k) for k in ("p50_ms", "p95_ms", "p99_ms", "p999_ms")},
            "stable": stability.get("stable")}


def pool_repeats(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One results dict from several repeats of one measurement (each repeat's own figures under "repeats").

    Plain loads pool their latencies (merged histograms) and windows; a search keeps the repeat whose
    capacity is the median as its figure. An unstable repeat makes the pooled figure unstable."""
    if len(runs) == 1:
        return runs[0]
    rows = [repeat_row(r) for r in runs]
    if runs[0].get("search") is not None:
        ranked = sorted(range(len(runs)), key=lambda i: runs[i]["search"].get("capacity_req_s") or 0.0)
        return {**runs[ranked[len(ranked) // 2]], "repeats": rows}
    hist = Histogram()
    for r in runs:
        hist.merge(Histogram.from_dict(r["histogram"]))
    unstable = [r["stability"] for r in runs if r.get("stability") and not r["stability"].get("stable")]
    out = {**runs[-1], "latency": hist.summary(), "histogram": hist.to_dict(), "repeats": rows,
           "requests": sum(r["requests"] for r in runs), "failures": sum(r["failures"] for r in runs),
           "errors": [e for r in runs for e in r.get("errors", [])],
           "warmup_excluded": sum(r.get("warmup_excluded") or 0 for r in runs),
           "stability": unstable[0] if unstable else runs[-1].get("stability"),
           "percentiles_short": percentiles_short(hist.count),
           "aborted": next((r["aborted"] for r in runs if r.get("aborted")), None)}
    for key in ("measured_window_s", "requests_window_s", "window_s"):
        if all(r.get(key) for r in runs):
            out[key] = round(sum(r[key] for r in runs), 3)
    return out
