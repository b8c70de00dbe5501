"""What the hardware could do: onnxruntime in process, no server, on one device; the bound every served
figure is set beside, so a gap between the two is the server's cost and not the model's.

For a model of a repository as `trainserve export` writes it, the sessions are built as the server
builds them (serve.model's session factory, so the same provider options, thread pinning and the
same refusal of a silent CPU fallback) and timed directly:

1. batch 1 at each intra-op thread count 1, 2, 4, ... up to the usable cores, with the pool threads
   sleeping between runs as the server runs them (spinning off), and again with spinning on;
2. the largest batch at each thread count, to choose the layout with the most samples/s;
3. every power-of-two batch up to max_batch_size at that layout;
4. for a model with several instances (instance_group count N > 1), the largest batch on N sessions
   run at once, one thread each, with cores / N intra-op threads each: what the served layout can do
   at most (two GPU instances overlap one's copies with the other's compute).

Each point is warm-up runs (not counted) and then timed runs until its share of the budget is spent
or MAX_RUNS runs are done; the budget bounds the whole device's measurement, session builds included.
Inputs are random arrays of the declared shapes and dtypes. On CUDA `session.run` takes and returns
host numpy arrays, so it returns only after the device's work and copies are done: wall-clock timing
is exact and covers the host<->device copies a served request pays too.

This module imports onnxruntime (through serve.model) but never torch.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trainserve.core.errors import UserError
from trainserve.core.fsutil import staged_dir, write_json_atomic
from trainserve.core.options.serve import LimitsJob
from trainserve.core.procs import usable_cpus
from trainserve.core.profile import (
    LatencyStats,
    ProfileRecord,
    host_info,
    package_versions,
)
from trainserve.core.telemetry import gpu_name
from trainserve.serve import repository
from trainserve.serve.datatypes import config_to_kserve
from trainserve.serve.model import (
    CUDNN_SEARCH,
    DEVICES,
    TensorSpec,
    _make_session,  # the server's own session factory: same options, same CUDA check
    config_param,
)
from trainserve.serve.tuning import random_feed
from trainserve.serve.working_set import HOW as WORKING_SET_HOW
from trainserve.serve.working_set import working_set_by_batch

log = logging.getLogger(__name__)

MAX_RUNS = 1000  # timed runs per point at most (a fast model stops here, well inside its share of the budget)
MIN_RUNS = 3  # timed runs per point at least, even past the point's share (never past the device's budget)
WARMUP_RUNS = 3  # untimed runs per point at least: the first runs of a new shape allocate (and on CUDA pick kernels)
WARMUP_SHARE = 0.1  # ... and warm-up goes on for this share of the point's time
DYNAMIC_DIM = 16  # size of a variable non-batch dimension: loadtest.model_info's, so served and in-process agree
SUFFIX = {"cpu": "_cpu", "cuda": "_gpu"}  # `trainserve export` names the model each device serves


@dataclass(frozen=True)
class LimitsConfig:
    """How the in-process limits of one device are measured."""

    device: str = LimitsJob.device  # "cpu" or "cuda"
    budget_s: float = LimitsJob.budget_s  # wall-clock seconds for the whole device (all its models), session builds included
    max_threads: int = 0  # largest intra-op thread count tried; 0 = the cores this process may use
    seed: int = 0  # of the random inputs

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise UserError(f"--device {self.device!r} is invalid; choose one of {', '.join(DEVICES)}")
        if not (self.budget_s > 0 and math.isfinite(self.budget_s)):
            raise UserError(f"--budget-s {self.budget_s} is invalid; give a positive number of seconds, e.g. 10")
        if self.max_threads < 0:
            raise UserError(f"max_threads={self.max_threads} is invalid; allowed: 0 (all cores) or more")

    def thread_counts(self) -> list[int]:
        """1, 2, 4, ... and the core count itself when it is not a power of two."""
        cores = self.max_threads or usable_cpus()
        counts = [1 << i for i in range(cores.bit_length()) if 1 << i <= cores]
        return counts + ([cores] if counts[-1] != cores else [])


@dataclass
class Point:
    """One measured configuration: a batch size on a session with `threads` intra-op threads."""

    sweep: str  # "threads" (batch 1 per thread count), "layout" (largest batch per thread count), "batch", "instances"
    batch: int  # rows per run
    threads: int  # intra-op threads
    spinning: bool  # pool threads busy-wait between runs
    latencies_ms: list[float]  # one per timed run
    warmup_runs: int
    window_s: float  # summed duration of the timed runs (wall-clock time when several sessions run at once)
    instances: int = 1  # sessions run at once, each on its own thread

    @property
    def p50_ms(self) -> float:
        return float(np.percentile(self.latencies_ms, 50))

    @property
    def throughput_samples_s(self) -> float:
        return self.batch * len(self.latencies_ms) / self.window_s  # every instance's runs over the window


@dataclass
class ModelLimits:
    """The points of one model on one device, and what they say."""

    model: str  # served model name, e.g. "cnn_cpu"
    device: str
    max_batch_size: int
    precision: str  # "fp32", "fp16" or "int8", read from the ONNX weights
    providers: list[str]
    device_id: int
    budget_s: float
    points: list[Point] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    working_set: dict[int, int] = field(default_factory=dict)  # batch -> bytes one session adds (working_set.py)

    def summary(self) -> dict:
        """{batch1_p50_ms, batch1_threads, best_batch, best_throughput_samples_s} and how they were found."""
        b1 = min((p for p in self.points if p.batch == 1), key=lambda p: p.p50_ms)
        best = max(self.points, key=lambda p: p.throughput_samples_s)
        return {"model": self.model, "device": self.device,
                "batch1_p50_ms": round(b1.p50_ms, 4), "batch1_threads": b1.threads,
                "best_batch": best.batch, "best_throughput_samples_s": round(best.throughput_samples_s, 2),
                "batch1_spinning": b1.spinning, "best_threads": best.threads, "best_instances": best.instances,
                "precision": self.precision, "providers": self.providers, "points": len(self.points), "budget_s": self.budget_s,
                "elapsed_s": round(self.elapsed_s, 3), "warnings": self.warnings,
                "working_set_bytes": {str(b): v for b, v in sorted(self.working_set.items())}}


def models_for(repo: Path, device: str, only: str | None = None) -> list[repository.ModelEntry]:
    """The repository's models that `device` serves: `<m>_cpu` on the CPU, `<m>_gpu` on CUDA, and any model
    whose name says neither; or just `only`."""
    entries = repository.list_models(repo)
    if only is not None:
        chosen = [e for e in entries if e.name == only]
        if not chosen:
            raise UserError(f"model {only!r} is not in {repo} (it has {', '.join(e.name for e in entries) or 'none'}); "
                            "pass one of those to --model")
        return chosen
    other = SUFFIX["cuda" if device == "cpu" else "cpu"]
    chosen = [e for e in entries if not e.name.endswith(other)]
    if not chosen:
        raise UserError(f"{repo} has no model for the {device} (looked for *{SUFFIX[device]}); "
                        "run trainserve export for this run first")
    return chosen


def check_device(device: str) -> None:
    """Refuse CUDA up front, in one sentence, when there is no GPU or no CUDA provider (before onnxruntime's own
    log lines about missing libraries); the session builds still refuse a CPU fallback."""
    if device != "cuda":
        return
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise UserError(f"--device cuda needs onnxruntime's CUDA execution provider, which this onnxruntime "
                        f"({ort.__version__}, providers {', '.join(ort.get_available_providers())}) lacks; install "
                        "onnxruntime-gpu on a machine with an NVIDIA GPU, or use --device cpu")
    gpus = cuda_device_count()
    if gpus == 0:
        raise UserError("--device cuda needs an NVIDIA GPU, and the CUDA driver sees none on this machine "
                        "(no driver, or CUDA_VISIBLE_DEVICES hides them); use --device cpu")
    ort.set_default_logger_severity(3)  # errors only, as the server's sessions log


def cuda_device_count() -> int | None:
    """GPUs the CUDA driver sees (0 without a driver); None when the driver cannot say (then the session decides)."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    try:
        if cuda.cuInit(0) != 0:
            return 0
        return count.value if cuda.cuDeviceGetCount(ctypes.byref(count)) == 0 else None
    except AttributeError:
        return None


def measure_repository(repo: Path, cfg: LimitsConfig, only: str | None = None,
                       progress: Callable[[ModelLimits, Point], None] = lambda m, p: None) -> list[ModelLimits]:
    """Measure every model `cfg.device` serves, sharing the device's budget equally."""
    check_device(cfg.device)
    entries = models_for(repo, cfg.device, only)
    t0 = time.perf_counter()
    out = []
    for i, entry in enumerate(entries):
        share = (cfg.budget_s - (time.perf_counter() - t0)) / (len(entries) - i)
        out.append(measure_model(entry, cfg, max(share, 0.0), progress))
    return out


def measure_model(entry: repository.ModelEntry, cfg: LimitsConfig, budget_s: float,
                  progress: Callable[[ModelLimits, Point], None] = lambda m, p: None) -> ModelLimits:
    """The three sweeps of the module docstring on one model, within `budget_s` seconds."""

    t0 = time.perf_counter()
    deadline = t0 + budget_s
    config = repository.read_model_config(entry.model_dir)
    if not entry.versions:
        raise UserError(f"model {entry.name!r} has no version folder with a model in {entry.model_dir}; "
                        "run trainserve export again")
    path = repository.model_path(entry.model_dir, entry.versions[-1], config)
    search = config_param(config, "cudnn_conv_algo_search") or "1"
    gpus = [g for grp in config.instance_group for g in grp.gpus]
    device_id = gpus[0] if gpus else 0
    specs = _input_specs(config)
    mbs = config.max_batch_size
    batches = _batches(mbs)
    threads = cfg.thread_counts()
    result = ModelLimits(entry.name, cfg.device, mbs, _precision(path), [], device_id, round(budget_s, 3))
    rng = np.random.default_rng(cfg.seed)
    try:
        feeds = {b: random_feed(specs, b, rng, batched=mbs > 0, dynamic_dim=DYNAMIC_DIM) for b in batches}
    except ValueError as e:
        raise UserError(f"model {entry.name!r}: {e}; limits measure numeric inputs only") from None
    instances = sum(g.count or 1 for g in config.instance_group) or 1
    # points still to measure: batch 1 (spinning off and on) and the largest batch per thread count, then the
    # middle batches, then the model's instances at once (its share of the budget is kept for it: without
    # it a server with several instances outruns the limit it is checked against)
    remaining = len(threads) + sum(t > 1 for t in threads) + (len(threads) if len(batches) > 1 else 0) \
        + max(0, len(batches) - 2) + (1 if instances > 1 and len(batches) > 1 else 0)

    def session(t: int, spin: bool):
        if time.perf_counter() >= deadline and result.points:
            return None  # no time left to use it: its points are skipped (and named) below
        try:
            sess = _make_session(path, cfg.device, t, 1, device_id, spin, CUDNN_SEARCH.get(search, "HEURISTIC"))
        except Exception as e:  # LoadError / CudaUnavailable carry one readable sentence
            raise UserError(f"model {entry.name!r}: {e}") from None
        result.providers = sess.get_providers()
        if cfg.device == "cuda" and result.providers[0] != "CUDAExecutionProvider":  # the factory checks too
            raise UserError(f"model {entry.name!r}: CUDA was requested but onnxruntime runs on {result.providers}")
        return sess

    def point(sess, sweep: str, batch: int, t: int, spin: bool) -> None:
        nonlocal remaining
        now = time.perf_counter()
        if sess is None or (now >= deadline and result.points):
            result.warnings.append(f"the {budget_s:.1f} s budget ran out before {sweep} point batch {batch} at "
                                   f"{t} thread(s); raise --budget-s to measure it")
            remaining -= 1
            return
        share = max(deadline - now, 0.0) / max(remaining, 1)
        remaining -= 1
        outputs = [o.name for o in sess.get_outputs()]
        lat, warm, window = _time_runs(sess, outputs, feeds[batch], share, deadline)
        p = Point(sweep, batch, t, spin, lat, warm, window)
        result.points.append(p)
        progress(result, p)

    def probe() -> dict[int, int]:  # the working set at each batch (serve/working_set.py)
        return working_set_by_batch(
            lambda: _make_session(path, cfg.device, 1, 1, device_id, False, CUDNN_SEARCH.get(search, "HEURISTIC")),
            feeds, cfg.device, device_id)

    if cfg.device == "cpu":  # first, before the timed points share the budget; its own seconds are not theirs
        probe_t0 = time.perf_counter()
        result.working_set = probe()
        spent = time.perf_counter() - probe_t0
        deadline += spent
        t0 += spent
    for t in threads:
        sess = session(t, False)  # as the server runs its sessions (serve.model.SessionOptions.allow_spinning)
        point(sess, "threads", 1, t, False)
        if len(batches) > 1:
            point(sess, "layout", batches[-1], t, False)
        del sess
        if t > 1:
            point(session(t, True), "threads", 1, t, True)
    layouts = [p for p in result.points if p.sweep == "layout"]
    if batches[1:-1]:
        best_t = max(layouts, key=lambda p: p.throughput_samples_s).threads if layouts else threads[-1]
        sess = session(best_t, False)
        for b in batches[1:-1]:
            point(sess, "batch", b, best_t, False)
        del sess
    if instances > 1 and len(batches) > 1:
        per = max(1, (cfg.max_threads or usable_cpus()) // instances) if cfg.device == "cpu" else threads[0]
        sessions = [session(per, False) for _ in range(instances)]
        if None in sessions or time.perf_counter() >= deadline:
            result.warnings.append(f"the {budget_s:.1f} s budget ran out before {instances} instances at once; "
                                   "raise --budget-s to measure them")
        else:
            outputs = [o.name for o in sessions[0].get_outputs()]
            lat, warm, wall = _time_concurrent(sessions, outputs, feeds[batches[-1]], deadline - time.perf_counter())
            p = Point("instances", batches[-1], per, False, lat, warm, wall, instances)
            result.points.append(p)
            progress(result, p)
        del sessions
    if cfg.device == "cuda":  # last, so the CUDA context exists and is not counted as the session's
        result.working_set = probe()
    result.elapsed_s = time.perf_counter() - t0
    log.info("%s on %s: %d points in %.2f s (budget %.2f s)", entry.name, cfg.device, len(result.points),
             result.elapsed_s, budget_s)
    return result


def _time_runs(sess, outputs: list[str], feed: dict[str, np.ndarray], share_s: float,
               deadline: float) -> tuple[list[float], int, float]:
    """(timed latencies in ms, warm-up runs, summed timed seconds) of `sess.run` on one feed."""
    start = time.perf_counter()
    warm_until = start + WARMUP_SHARE * share_s
    warm = 0
    while warm < WARMUP_RUNS or (time.perf_counter() < warm_until and warm < MAX_RUNS // 10):
        sess.run(outputs, feed)
        warm += 1
    end = start + share_s
    lat_ns: list[int] = []
    while len(lat_ns) < MAX_RUNS:
        t = time.perf_counter_ns()
        sess.run(outputs, feed)
        lat_ns.append(time.perf_counter_ns() - t)
        now = time.perf_counter()
        if (now >= end and len(lat_ns) >= MIN_RUNS) or now >= deadline:
            break
    return [x / 1e6 for x in lat_ns], warm, sum(lat_ns) / 1e9


def _time_concurrent(sessions: list, outputs: list[str], feed: dict[str, np.ndarray],
                     share_s: float) -> tuple[list[float], int, float]:
    """(latencies in ms of every run, warm-up runs, wall-clock seconds) of the sessions run at once, one
    thread each (session.run releases the GIL), for `share_s` seconds and at least MIN_RUNS runs each."""
    import threading

    for sess in sessions:
        for _ in range(WARMUP_RUNS):
            sess.run(outputs, feed)
    lat_ns: list[list[int]] = [[] for _ in sessions]
    start = time.perf_counter()
    end = start + max(share_s, 0.0)

    def worker(i: int) -> None:
        while len(lat_ns[i]) < MAX_RUNS and (len(lat_ns[i]) < MIN_RUNS or time.perf_counter() < end):
            t = time.perf_counter_ns()
            sessions[i].run(outputs, feed)
            lat_ns[i].append(time.perf_counter_ns() - t)

    workers = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(len(sessions))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return [x / 1e6 for runs in lat_ns for x in runs], WARMUP_RUNS * len(sessions), time.perf_counter() - start


def _batches(max_batch_size: int) -> list[int]:
    """1, 2, 4, ... up to max_batch_size (and it, when not a power of two); [1] for a model that cannot batch."""
    if max_batch_size <= 1:
        return [1]
    out = [1 << i for i in range(max_batch_size.bit_length()) if 1 << i <= max_batch_size]
    return out + ([max_batch_size] if out[-1] != max_batch_size else [])


def _input_specs(config) -> list[TensorSpec]:
    from tritonclient.grpc import model_config_pb2

    prefix = (-1,) if config.max_batch_size > 0 else ()
    # a `reshape` is the shape the model sees (e.g. dims [1] reshaped to [] for a scalar per sample)
    return [TensorSpec(i.name, config_to_kserve(model_config_pb2.DataType.Name(i.data_type)),
                       prefix + tuple(i.reshape.shape if i.HasField("reshape") else i.dims))
            for i in config.input]


def _precision(path: Path) -> str:
    """fp16 or int8 when the weights are stored so (the exported variants), else fp32."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # the session build reports a bad file in its own words
        return "fp32"
    kinds = {t.data_type for t in model.graph.initializer}
    if onnx.TensorProto.FLOAT16 in kinds:
        return "fp16"
    if kinds & {onnx.TensorProto.INT8, onnx.TensorProto.UINT8}:
        return "int8"
    return "fp32"


# --- records: runs/<run>/limits/<device>/<model>/{b<batch>-t<threads>[-spin].json, summary.json} ------------

def records(result: ModelLimits) -> list[tuple[str, object]]:
    """(file name, trainserve.core.profile.ProfileRecord) per point, marked extra["limit"] = True so the report
    never takes them for served measurements."""

    host = host_info()
    name = host.get("cpu_model") or "CPU"
    if result.device == "cuda":

        name = gpu_name(result.device_id) or "GPU"
    versions = package_versions("onnxruntime", "onnxruntime-gpu", "numpy")
    out = []
    for p in result.points:
        r = ProfileRecord(phase="infer", model=result.model, backend="onnxruntime", device=result.device,
                          device_name=name, precision=result.precision, batch_size=p.batch, concurrency=p.instances,
                          target=f"in-process/{result.model}", host=host, versions=versions)
        r.speed.latency = LatencyStats.from_samples_ms(p.latencies_ms)
        r.speed.throughput_samples_s = round(p.throughput_samples_s, 2)
        r.speed.requests_s = round(len(p.latencies_ms) / p.window_s, 2)
        r.validity.warmup_excluded = p.warmup_runs
        r.validity.window_s = round(p.window_s, 4)
        r.validity.samples = p.batch * len(p.latencies_ms)
        r.settings = {"intra_op_threads": p.threads, "inter_op_threads": 1, "allow_spinning": p.spinning,
                      "instances": p.instances, "providers": result.providers}
        r.extra = {"limit": True, "sweep": p.sweep, "runs": len(p.latencies_ms), "budget_s": result.budget_s,
                   "max_batch_size": result.max_batch_size}
        if p.batch in result.working_set:  # the model's working set at this batch, as training's is counted
            r.memory.peak_bytes = result.working_set[p.batch]
            r.extra["working_set"] = {"bytes": result.working_set[p.batch], "how": WORKING_SET_HOW[result.device]}
        if not out:  # the run's warnings (budget ran out) once, on its first record
            r.validity.warnings = list(result.warnings)
        out.append((f"b{p.batch}-t{p.threads}{'-spin' if p.spinning else ''}"
                    f"{f'-x{p.instances}' if p.instances > 1 else ''}.json", r))
    return out


def save(result: ModelLimits, limits_dir: Path) -> Path:
    """Replace `limits_dir/<device>/<model>/` with this measurement's records and summary.json (all or nothing)."""
    final = Path(limits_dir) / result.device / result.model
    with staged_dir(final) as tmp:
        for file_name, record in records(result):
            record.save(tmp / file_name)
        write_json_atomic(tmp / "summary.json", result.summary())
    return final
