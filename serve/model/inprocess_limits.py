"""What the hardware could do: onnxruntime in process, no server, on one device; the bound every served
figure is set beside, so a gap between the two is the server's cost and not the model's.

For a model of a repository as `trainserve export` writes it, the sessions are built as the server
builds them (serve.model.sessions's session factory, so the same provider options, thread pinning and the
same refusal of a silent CPU fallback) and timed directly:

1. batch 1 at each intra-op thread count 1, 2, 4, ... up to the usable cores, with the pool threads
   sleeping between runs as the server runs them (spinning off), and again with spinning on;
2. the largest batch at each thread count, to choose the layout with the most samples/s;
3. every power-of-two batch up to max_batch_size at that layout;
4. for a model with several instances (instance_group count N > 1), the largest batch on N sessions
   run at once, one thread each, with cores / N intra-op threads each: what the served layout can do
   at most (two GPU instances overlap one's copies with the other's compute).

`--points served` measures only what the served figures are set beside (batch 1 at the server's intra-op
threads and on one thread, the largest batch at the server's threads and instances), so a short budget
is spent on those; the others are listed as skipped, with why.

Each point is warm-up runs (not counted) and then timed runs in windows, until the last CONSECUTIVE
windows' samples/s agree within TOLERANCE (the load figures' rule) or its share of the budget is spent;
a point records its windows and their spread, which the bound checks (trainserve/core/bounds.py) allow
for. The budget bounds the whole device's measurement, session builds included.
Inputs are random arrays of the declared shapes and dtypes. On CUDA `session.run` takes and returns
host numpy arrays, so it returns only after the device's work and copies are done: wall-clock timing
is exact and covers the host<->device copies a served request pays too.

This module imports onnxruntime (through serve.model.sessions) but never torch.
"""

from __future__ import annotations

import logging
import math
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trainserve.core.bounds import spread_of
from trainserve.core.errors import UserError
from trainserve.core.fsutil import staged_dir, write_json_atomic
from trainserve.core.options.serve import LimitsJob
from trainserve.core.percentiles import percentile
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
from trainserve.serve.model.sessions import (
    CUDNN_SEARCH,
    DEVICES,
    TensorSpec,
    _make_session,  # the server's own session factory: same options, same CUDA check
    config_param,
)
from trainserve.serve.model.tuning import random_feed
from trainserve.serve.model.working_set import HOW as WORKING_SET_HOW
from trainserve.serve.model.working_set import measure_working_set

log = logging.getLogger(__name__)

MAX_RUNS = 1_000_000  # timed runs per point at most: a bound on memory (8 MB), not the rule that ends a point
MIN_RUNS = 3  # timed runs per point at least, even past the point's share (never past the device's budget)
WARMUP_RUNS = 3  # untimed runs per point at least: the first runs of a new shape allocate (and on CUDA pick kernels)
MAX_WARMUP_RUNS = 100  # ... and at most, however fast the model
WARMUP_SHARE = 0.1  # ... and warm-up goes on for this share of the point's time
# A point ends once its last CONSECUTIVE windows' samples/s agree within TOLERANCE of their mean (the load
# figures' rule, loadtest/windows.py), or when its share of the budget is spent: then it says so, with its spread.
CONSECUTIVE = 3
TOLERANCE = 0.10
MIN_WINDOW_S = 0.1  # shorter windows would agree by chance on a machine whose other work comes in bursts
MAX_WINDOW_S = 1.0
DYNAMIC_DIM = 16  # size of a variable non-batch dimension: loadtest.model_info's, so served and in-process agree
POINTS = ("all", "served")
SUFFIX = {"cpu": "_cpu", "cuda": "_gpu"}  # `trainserve export` names the model each device serves


@dataclass(frozen=True)
class LimitsConfig:
    """How the in-process limits of one device are measured."""

    device: str = LimitsJob.device  # "cpu" or "cuda"
    budget_s: float = LimitsJob.budget_s  # wall-clock seconds for the whole device (all its models), session builds included
    max_threads: int = 0  # largest intra-op thread count tried; 0 = the cores this process may use
    seed: int = 0  # of the random inputs
    points: str = LimitsJob.points  # "all": every sweep; "served": only the points served figures are set beside
    working_set_batch: int | None = None  # also probe the working set at this batch (the training batch)

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise UserError(f"--device {self.device!r} is invalid; choose one of {', '.join(DEVICES)}")
        if not (self.budget_s > 0 and math.isfinite(self.budget_s)):
            raise UserError(f"--budget-s {self.budget_s} is invalid; give a positive number of seconds, e.g. 10")
        if self.working_set_batch is not None and self.working_set_batch < 1:
            raise UserError(f"--working-set-batch {self.working_set_batch} is invalid; give a batch size >= 1")
        if self.points not in POINTS:
            raise UserError(f"--points {self.points!r} is invalid; choose one of {', '.join(POINTS)}")
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
    windows_samples_s: list[float] = field(default_factory=list)  # samples/s of each timing window
    stable: bool = False  # its last CONSECUTIVE windows agreed within TOLERANCE

    @property
    def spread(self) -> float | None:
        """Half the range of the last CONSECUTIVE windows' samples/s, as a share of their mean: how far a second
        measurement of this point may land from this one (None with fewer than two windows)."""
        return spread_of(self.windows_samples_s[-CONSECUTIVE:])

    @property
    def p50_ms(self) -> float:
        return float(percentile(sorted(self.latencies_ms), 50))

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
    skipped: list[str] = field(default_factory=list)  # points not measured (--points served), each with why
    working_set_how: str = ""  # the meter of working_set (serve/model/working_set.py)

    def summary(self) -> dict:
        """{batch1_p50_ms, batch1_threads, best_batch, best_throughput_samples_s} and how they were found."""
        b1 = min((p for p in self.points if p.batch == 1), key=lambda p: p.p50_ms)
        best = max(self.points, key=lambda p: p.throughput_samples_s)
        return {"model": self.model, "device": self.device,
                "batch1_p50_ms": round(b1.p50_ms, 4), "batch1_threads": b1.threads,
                "best_batch": best.batch, "best_throughput_samples_s": round(best.throughput_samples_s, 2),
                "batch1_spinning": b1.spinning, "best_threads": best.threads, "best_instances": best.instances,
                "best_spread": None if best.spread is None else round(best.spread, 4), "best_stable": best.stable,
                "skipped": self.skipped,
                "precision": self.precision, "providers": self.providers, "points": len(self.points), "budget_s": self.budget_s,
                "elapsed_s": round(self.elapsed_s, 3), "warnings": self.warnings,
                "working_set_bytes": {str(b): v for b, v in sorted(self.working_set.items())},
                "working_set_how": self.working_set_how}


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
    """The sweeps of the module docstring on one model (`cfg.points` says which), within `budget_s` seconds."""
    m = _Measurement(entry, cfg, budget_s, progress)
    if cfg.device == "cpu":  # first, before the timed points share the budget; its own seconds are not theirs
        m.probe_working_set()
    if cfg.points == "served":
        _sweep_served(m)
    else:
        _sweep_all(m)
    if cfg.device == "cuda":  # last, so the CUDA context exists and is not counted as the session's
        m.probe_working_set()
    return m.finish()


class _Measurement:
    """One model's points on one device: the sessions, the shared deadline and each point's share of it."""

    def __init__(self, entry: repository.ModelEntry, cfg: LimitsConfig, budget_s: float,
                 progress: Callable[[ModelLimits, Point], None]) -> None:
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + budget_s
        self.cfg, self.budget_s, self.progress = cfg, budget_s, progress
        config = repository.read_model_config(entry.model_dir)
        if not entry.versions:
            raise UserError(f"model {entry.name!r} has no version folder with a model in {entry.model_dir}; "
                            "run trainserve export again")
        self.name = entry.name
        self.path = repository.model_path(entry.model_dir, entry.versions[-1], config)
        self.search = CUDNN_SEARCH.get(config_param(config, "cudnn_conv_algo_search") or "1", "HEURISTIC")
        gpus = [g for grp in config.instance_group for g in grp.gpus]
        self.device_id = gpus[0] if gpus else 0
        self.batches = _batches(config.max_batch_size)
        self.threads = cfg.thread_counts()
        self.instances = sum(g.count or 1 for g in config.instance_group) or 1
        cores = cfg.max_threads or usable_cpus()
        try:  # the server's intra-op threads per instance, as serve.model.sessions's session recipe sets them
            self.server_threads = int(config_param(config, "intra_op_thread_count") or 0) or max(1, cores // self.instances)
        except ValueError:
            raise UserError(f"model {entry.name!r}: parameter intra_op_thread_count must be an integer") from None
        self.result = ModelLimits(entry.name, cfg.device, config.max_batch_size, _precision(self.path), [],
                                  self.device_id, round(budget_s, 3))
        rng = np.random.default_rng(cfg.seed)
        self.specs = _input_specs(config)
        try:
            self.feeds = {b: random_feed(self.specs, b, rng, batched=config.max_batch_size > 0,
                                         dynamic_dim=DYNAMIC_DIM) for b in self.batches}
        except ValueError as e:
            raise UserError(f"model {entry.name!r}: {e}; limits measure numeric inputs only") from None
        self.remaining = 0  # points still to measure; each takes an equal share of what is left of the budget
        self.unstable: list[Point] = []

    def probe_working_set(self) -> None:
        """The working set at each batch (serve/model/working_set.py), outside the timed points' budget."""
        t = time.perf_counter()
        feeds = dict(self.feeds)
        extra = self.cfg.working_set_batch
        if extra is not None and extra not in feeds and self.result.max_batch_size > 0:
            # the model's batch dimension is dynamic in the ONNX file: the served max_batch_size does not bound it
            feeds[extra] = random_feed(self.specs, extra, np.random.default_rng(self.cfg.seed), batched=True,
                                       dynamic_dim=DYNAMIC_DIM)
        self.result.working_set, self.result.working_set_how = measure_working_set(
            lambda: _make_session(self.path, self.cfg.device, 1, 1, self.device_id, False, self.search),
            feeds, self.cfg.device, self.device_id)
        if self.cfg.device == "cpu":
            spent = time.perf_counter() - t
            self.deadline += spent
            self.t0 += spent

    def out_of_time(self) -> bool:
        return time.perf_counter() >= self.deadline and bool(self.result.points)

    def session(self, threads: int, spin: bool):
        """A session as the server builds it, or None when no time is left to use it."""
        if self.out_of_time():
            return None  # its points are skipped (and named) by point()
        try:
            sess = _make_session(self.path, self.cfg.device, threads, 1, self.device_id, spin, self.search)
        except Exception as e:  # LoadError / CudaUnavailable carry one readable sentence
            raise UserError(f"model {self.name!r}: {e}") from None
        self.result.providers = sess.get_providers()
        if self.cfg.device == "cuda" and self.result.providers[0] != "CUDAExecutionProvider":  # the factory checks too
            raise UserError(f"model {self.name!r}: CUDA was requested but onnxruntime runs on {self.result.providers}")
        return sess

    def point(self, sess, sweep: str, batch: int, threads: int, spin: bool) -> None:
        now = time.perf_counter()
        if sess is None or self.out_of_time():
            self.result.warnings.append(f"the {self.budget_s:.1f} s budget ran out before {sweep} point batch {batch} "
                                        f"at {threads} thread(s); raise --budget-s to measure it")
            self.remaining -= 1
            return
        share = max(self.deadline - now, 0.0) / max(self.remaining, 1)
        self.remaining -= 1
        outputs = [o.name for o in sess.get_outputs()]
        timed = _time_runs(sess, outputs, self.feeds[batch], batch, share, self.deadline)
        self._add(Point(sweep, batch, threads, spin, timed.latencies_ms, timed.warmup_runs, timed.window_s,
                        windows_samples_s=timed.windows, stable=timed.stable))

    def instances_point(self, per: int) -> None:
        """The largest batch on every instance at once, `per` intra-op threads each."""
        sessions = [self.session(per, False) for _ in range(self.instances)]
        self.remaining -= 1
        if None in sessions or time.perf_counter() >= self.deadline:
            self.result.warnings.append(f"the {self.budget_s:.1f} s budget ran out before {self.instances} instances "
                                        "at once; raise --budget-s to measure them")
            return
        b = self.batches[-1]
        outputs = [o.name for o in sessions[0].get_outputs()]
        timed = _time_concurrent(sessions, outputs, self.feeds[b], b, self.deadline - time.perf_counter())
        self._add(Point("instances", b, per, False, timed.latencies_ms, timed.warmup_runs, timed.window_s,
                        self.instances, timed.windows, timed.stable))

    def _add(self, p: Point) -> None:
        self.result.points.append(p)
        if not p.stable:
            self.unstable.append(p)
        self.progress(self.result, p)

    def finish(self) -> ModelLimits:
        r = self.result
        if self.unstable:
            spreads = [p.spread for p in self.unstable if p.spread is not None]
            how = (f"their windows' samples/s varied up to ±{max(spreads):.0%}" if spreads
                   else f"too short for {CONSECUTIVE} timing windows of {MIN_WINDOW_S:g} s")
            r.warnings.append(f"{len(self.unstable)} of {len(r.points)} point(s) did not stabilise within their share "
                              f"of the {self.budget_s:.1f} s budget ({how}); raise --budget-s, or measure only the "
                              "served points with --points served")
        r.elapsed_s = time.perf_counter() - self.t0
        log.info("%s on %s: %d points in %.2f s (budget %.2f s)", r.model, r.device, len(r.points), r.elapsed_s,
                 self.budget_s)
        return r


def _sweep_all(m: _Measurement) -> None:
    """Batch 1 (spinning off and on) and the largest batch per thread count, then the middle batches at the best
    layout, then the model's instances at once (its share of the budget is kept for it: without it a server with
    several instances outruns the limit it is checked against)."""
    threads, batches = m.threads, m.batches
    m.remaining = len(threads) + sum(t > 1 for t in threads) + (len(threads) if len(batches) > 1 else 0) \
        + max(0, len(batches) - 2) + (1 if m.instances > 1 and len(batches) > 1 else 0)
    for t in threads:
        sess = m.session(t, False)  # as the server runs its sessions (serve.model.sessions.SessionOptions.allow_spinning)
        m.point(sess, "threads", 1, t, False)
        if len(batches) > 1:
            m.point(sess, "layout", batches[-1], t, False)
        del sess
        if t > 1:
            m.point(m.session(t, True), "threads", 1, t, True)
    layouts = [p for p in m.result.points if p.sweep == "layout"]
    if batches[1:-1]:
        best_t = max(layouts, key=lambda p: p.throughput_samples_s).threads if layouts else threads[-1]
        sess = m.session(best_t, False)
        for b in batches[1:-1]:
            m.point(sess, "batch", b, best_t, False)
        del sess
    if m.instances > 1 and len(batches) > 1:
        m.instances_point(max(1, (m.cfg.max_threads or usable_cpus()) // m.instances) if m.cfg.device == "cpu"
                          else threads[0])


def _sweep_served(m: _Measurement) -> None:
    """Only the points a served figure is set beside, so a short budget measures them long enough to believe:
    batch 1 at the server's intra-op threads (and on 1 thread, where the server runs small batches), and the
    largest batch as the server runs it (its instances at once, or its one session)."""
    t, batches = m.server_threads, m.batches
    big = len(batches) > 1
    m.remaining = 1 + (t > 1) + big
    sess = m.session(t, False)
    m.point(sess, "threads", 1, t, False)
    if big and m.instances == 1:
        m.point(sess, "layout", batches[-1], t, False)
    del sess
    if t > 1:
        m.point(m.session(1, False), "threads", 1, 1, False)
    if big and m.instances > 1:
        m.instances_point(t)
    others = [f"batch 1 at {', '.join(str(x) for x in m.threads if x not in (1, t)) or 'no other'} thread count(s)",
              "spinning pools"] + ([f"batches {', '.join(str(b) for b in batches[1:-1])}"] if batches[1:-1] else [])
    m.result.skipped = [f"{o}: --points served measures only the points served figures are set beside; "
                        "--points all measures them" for o in others]


@dataclass
class _Timed:
    latencies_ms: list[float]  # one per timed run
    warmup_runs: int
    window_s: float  # summed timed seconds (one session) or the wall-clock window (several at once)
    windows: list[float]  # samples/s of each closed timing window
    stable: bool  # the last CONSECUTIVE windows agreed within TOLERANCE


def _window_len(share_s: float) -> float:
    """Timing windows of a point: CONSECUTIVE of them fit twice into its share, within [0.1 s, 1 s]."""
    return min(MAX_WINDOW_S, max(MIN_WINDOW_S, share_s / (2 * CONSECUTIVE)))


def agree(windows: list[float]) -> bool:
    """The last CONSECUTIVE windows' samples/s each lie within TOLERANCE of their mean (loadtest's rule)."""
    last = windows[-CONSECUTIVE:]
    if len(last) < CONSECUTIVE:
        return False
    mean = sum(last) / len(last)
    return mean > 0 and all(abs(x - mean) <= TOLERANCE * mean for x in last)


def _time_runs(sess, outputs: list[str], feed: dict[str, np.ndarray], batch: int, share_s: float,
               deadline: float) -> _Timed:
    """Warm-up, then timed `sess.run` calls in windows until the last CONSECUTIVE windows agree (at least
    MIN_RUNS runs) or the point's share is spent."""
    start = time.perf_counter()
    warm_until = start + WARMUP_SHARE * share_s
    warm = 0
    while warm < WARMUP_RUNS or (time.perf_counter() < warm_until and warm < MAX_WARMUP_RUNS):
        sess.run(outputs, feed)
        warm += 1
    now = time.perf_counter()
    end = now + share_s * (1 - WARMUP_SHARE)
    window = _window_len(share_s)
    lat_ns = array("q")  # ns; a micro-model's windows hold 10^5 runs each
    windows: list[float] = []
    w_start, w_ns, w_runs = now, 0, 0
    stable = False
    while len(lat_ns) < MAX_RUNS:
        t = time.perf_counter_ns()
        sess.run(outputs, feed)
        d = time.perf_counter_ns() - t
        lat_ns.append(d)
        w_ns += d
        w_runs += 1
        now = time.perf_counter()
        if now - w_start >= window:
            windows.append(batch * w_runs / (w_ns / 1e9))
            w_start, w_ns, w_runs = now, 0, 0
            if agree(windows) and len(lat_ns) >= MIN_RUNS:
                stable = True
                break
        if (now >= end and len(lat_ns) >= MIN_RUNS) or now >= deadline:
            break
    return _Timed([x / 1e6 for x in lat_ns], warm, sum(lat_ns) / 1e9, windows, stable)


def _time_concurrent(sessions: list, outputs: list[str], feed: dict[str, np.ndarray], batch: int,
                     share_s: float) -> _Timed:
    """Every run of the sessions run at once, one thread each (session.run releases the GIL), for `share_s`
    seconds and at least MIN_RUNS runs each, or until CONSECUTIVE windows of all sessions' runs agree."""
    import threading

    for sess in sessions:
        for _ in range(WARMUP_RUNS):
            sess.run(outputs, feed)
    lat_ns: list[list[int]] = [[] for _ in sessions]
    done_at: list[list[float]] = [[] for _ in sessions]  # perf_counter when each run ended
    window = _window_len(share_s)
    start = time.perf_counter()
    end = start + max(share_s, 0.0)
    stop = threading.Event()

    def worker(i: int) -> None:
        while len(lat_ns[i]) < MAX_RUNS and (len(lat_ns[i]) < MIN_RUNS or (time.perf_counter() < end
                                                                            and not stop.is_set())):
            t = time.perf_counter_ns()
            sessions[i].run(outputs, feed)
            lat_ns[i].append(time.perf_counter_ns() - t)
            done_at[i].append(time.perf_counter())

    workers = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(len(sessions))]
    for w in workers:
        w.start()
    windows: list[float] = []
    seen = [0] * len(sessions)  # runs of each session already counted in a closed window
    while any(w.is_alive() for w in workers):  # close a window of every session's finished runs as time passes
        time.sleep(max(0.0, start + (len(windows) + 1) * window - time.perf_counter()))
        hi = start + (len(windows) + 1) * window
        runs = 0
        for i, ends in enumerate(done_at):
            n = len(ends)  # appended by its worker only: a snapshot of the length is safe to read up to
            while seen[i] < n and ends[seen[i]] < hi:
                seen[i] += 1
                runs += 1
        windows.append(batch * runs / window)
        if agree(windows):
            stop.set()
    for w in workers:
        w.join()
    return _Timed([x / 1e6 for runs in lat_ns for x in runs], WARMUP_RUNS * len(sessions),
                  time.perf_counter() - start, windows, agree(windows))


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
                   "max_batch_size": result.max_batch_size, "stable": p.stable,
                   "spread": None if p.spread is None else round(p.spread, 4),
                   "windows_samples_s": [round(x, 2) for x in p.windows_samples_s]}
        how = result.working_set_how or WORKING_SET_HOW[result.device]
        if p.batch in result.working_set:  # the model's working set at this batch, as training's is counted
            r.memory.peak_bytes = result.working_set[p.batch]
            r.extra["working_set"] = {"bytes": result.working_set[p.batch], "how": how}
        if not out:  # the run's warnings (budget ran out) once, on its first record; every batch probed, too
            r.validity.warnings = list(result.warnings)
            r.extra["working_sets"] = {"how": how, "bytes": {str(b): v for b, v in sorted(result.working_set.items())}}
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
