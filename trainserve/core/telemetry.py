"""A background sampler of GPU and CPU resources (utilization, memory, power, energy) at 10 Hz.

GPU fields come from NVML (nvidia-ml-py), CPU fields from psutil, CPU package energy from RAPL
(`/sys/class/powercap`). Anything that cannot be read is None: a machine without a GPU, without
NVML or without readable RAPL gives nulls, never an error.

    with Sampler() as s:
        train()
    s.apply(record, samples=n)   # fills record.utilization and record.energy

Cost: one tick makes three NVML calls (utilization, memory, power) and reads the CPU times
(os.times for this process, /proc/stat, statm). Two reads that can cost milliseconds each are kept
off most ticks: the NVML energy counter is read at a window's ends and every ENERGY_EVERY_S (10 s),
and the child-process list is refreshed every CHILDREN_REFRESH_S (5 s). `read_costs()` times each
call separately (benchmarks/telemetry_check.py records it; the per-call figures are in
docs/BENCHMARKS.md, "Training resource profile"). The sampler measures its own CPU time
(`overhead_*` in summary()), so every profile says what measuring cost.
"""

from __future__ import annotations

import glob
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from trainserve.core import meters
from trainserve.core.errors import UserError

if TYPE_CHECKING:
    from trainserve.core.profile import ProfileRecord

log = logging.getLogger(__name__)

# Below this mean GPU utilization, with device memory in use, a training window is likely input-bound.
LOW_GPU_UTIL_PERCENT = 50.0
# Memory counted as "in use" for that warning: more than a bare CUDA context (bytes).
GPU_MEM_IN_USE_BYTES = 1 << 30
# How often the list of child processes (data-loader workers) is refreshed, seconds.
CHILDREN_REFRESH_S = 5.0
# Seconds between reads of the NVML energy counter besides window ends (start, mark, stop), which
# alone give a window's joules. On virtualised GPUs one read can cost milliseconds of CPU, a hundred
# times the rest of a tick (docs/BENCHMARKS.md, "Training resource profile"), so it is read rarely.
ENERGY_EVERY_S = 10.0


@dataclass(frozen=True)
class Sample:
    """One reading. GPU fields are None without NVML; energy fields are cumulative counters."""

    t_s: float  # seconds since the sampler started
    gpu_util_percent: float | None = None  # 0..100, share of time a kernel ran
    gpu_mem_used_bytes: int | None = None  # whole device, all processes
    gpu_power_w: float | None = None
    gpu_energy_j: float | None = None  # NVML total-energy counter (since driver load), joules
    cpu_process_percent: float | None = None  # 100 = one core
    cpu_system_percent: float | None = None  # 0..100 over all cores
    rss_bytes: int | None = None
    cpu_energy_j: float | None = None  # RAPL packages, joules since the sampler started


# ---------------------------------------------------------------- GPU (NVML)


class Nvml:
    """NVML handle for one device; every read degrades to None instead of raising.

    The one wrapper of NVML: the sampler reads through it, and so does the server's /metrics page.
    """

    def __init__(self, index: int) -> None:
        self.handle: Any = None
        self.name: str | None = None
        self._energy_ok = True
        self._power_ok = True
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as e:  # no library, no driver, no device: all mean "no GPU here"
            log.debug("NVML unavailable: %s", e)
            return
        self._nv = pynvml
        try:
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(self.handle)
            self.name = name.decode() if isinstance(name, bytes) else str(name)
        except Exception as e:
            log.debug("NVML device %d unavailable: %s", index, e)
            self.handle = None
            self.close()

    @property
    def ok(self) -> bool:
        return self.handle is not None

    def read(self, energy_due: bool = True) -> tuple[float | None, int | None, float | None, float | None]:
        """(utilization %, memory used bytes, power W, energy counter J or None when not read).

        The energy counter is read only when `energy_due`: on some virtualised GPUs one read costs
        milliseconds of CPU, against microseconds for the other NVML reads, so the sampler reads it
        at the window's ends and every ENERGY_EVERY_S, not at every tick.
        """
        if self.handle is None:
            return None, None, None, None
        nv, h = self._nv, self.handle
        util = mem = power = energy = None
        try:
            util = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
        except Exception:
            pass
        try:
            mem = int(nv.nvmlDeviceGetMemoryInfo(h).used)
        except Exception:
            pass
        if self._power_ok:
            try:
                power = nv.nvmlDeviceGetPowerUsage(h) / 1000.0  # mW -> W
            except Exception:
                self._power_ok = False
        if self._energy_ok and energy_due:
            try:
                energy = nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0  # mJ -> J (Volta and newer)
            except Exception:
                self._energy_ok = False
        return util, mem, power, energy

    def _call(self, fn: str) -> Any:
        if self.handle is None:
            return None
        try:
            return getattr(self._nv, fn)(self.handle)
        except Exception:
            return None

    def memory_bytes(self) -> tuple[int | None, int | None]:
        """(total, used) device memory in bytes; None where unknown."""
        info = self._call("nvmlDeviceGetMemoryInfo")
        return (None, None) if info is None else (int(info.total), int(info.used))

    def power_limit_w(self) -> float | None:
        limit = self._call("nvmlDeviceGetPowerManagementLimit")
        return None if limit is None else limit / 1000.0  # mW -> W

    def energy_j(self) -> float | None:
        """The total-energy counter in joules since the driver loaded (Volta and newer), or None."""
        energy = self._call("nvmlDeviceGetTotalEnergyConsumption")
        return None if energy is None else energy / 1000.0  # mJ -> J

    def uuid(self) -> str | None:
        uuid = self._call("nvmlDeviceGetUUID")
        return uuid.decode() if isinstance(uuid, bytes) else uuid

    def close(self) -> None:
        try:
            self._nv.nvmlShutdown()
        except Exception:
            pass


def gpu_memory_used_bytes(index: int = 0) -> int | None:
    """Device memory in use by all processes (NVML), or None without NVML/GPU."""
    nv = Nvml(index)
    try:
        return nv.read()[1]
    finally:
        if nv.ok:
            nv.close()


def gpu_process_memory_bytes(index: int = 0, pid: int | None = None) -> int | None:
    """Device memory held by one process (NVML's per-process accounting), or None if unknown."""
    nv = Nvml(index)
    if not nv.ok:
        return None
    pid = os.getpid() if pid is None else pid
    try:
        procs = nv._nv.nvmlDeviceGetComputeRunningProcesses(nv.handle)
        used = [p.usedGpuMemory for p in procs if p.pid == pid]
        if not used:
            return 0
        return None if used[0] is None else int(used[0])
    except Exception:
        return None
    finally:
        nv.close()


def gpu_name(index: int = 0) -> str | None:
    """The device's marketing name as NVML reports it (e.g. "NVIDIA H200"), or None."""
    nv = Nvml(index)
    if nv.ok:
        nv.close()
    return nv.name


# ---------------------------------------------------------------- CPU energy (RAPL)


class _Rapl:
    """Sum of the RAPL package domains, corrected for counter wraparound; None if unreadable."""

    def __init__(self, root: str = "/sys/class/powercap") -> None:
        self.zones: list[tuple[str, int]] = []  # (energy_uj path, max_energy_range_uj)
        # Top-level packages only ("intel-rapl:0"); sub-zones ("intel-rapl:0:0") are parts of them.
        for zone in sorted(glob.glob(os.path.join(root, "intel-rapl:*"))):
            if os.path.basename(zone).count(":") != 1:
                continue
            try:
                with open(os.path.join(zone, "max_energy_range_uj")) as f:
                    max_uj = int(f.read())
                with open(os.path.join(zone, "energy_uj")) as f:  # often root-only (0400)
                    int(f.read())
            except (OSError, ValueError):
                continue
            self.zones.append((os.path.join(zone, "energy_uj"), max_uj))
        self._last: list[int] | None = None
        self.total_j = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.zones)

    def read(self) -> float | None:
        """Joules since the first read."""
        if not self.zones:
            return None
        try:
            now = []
            for path, _ in self.zones:
                with open(path) as f:
                    now.append(int(f.read()))
        except (OSError, ValueError):
            return None
        if self._last is not None:
            for (_, max_uj), prev, cur in zip(self.zones, self._last, now, strict=True):
                delta = cur - prev if cur >= prev else cur + max_uj - prev  # wrapped once
                self.total_j += delta / 1e6
        self._last = now
        return self.total_j


# ---------------------------------------------------------------- CPU (psutil)


class _Cpu:
    """Process CPU% (optionally with its children) and system CPU%, from time deltas."""

    def __init__(self, pid: int | None, include_children: bool) -> None:
        import psutil

        self._psutil = psutil
        self.proc = psutil.Process(pid)
        self.include_children = include_children
        self._kids: list[Any] = []
        self._kids_at = -1e9
        # this process itself: os.times() is one system call, psutil.Process.cpu_times parses /proc
        self._self = pid is None or pid == os.getpid()
        self._last = (time.monotonic(), self._proc_cpu_s(), self._sys_times())

    def _proc_cpu_s(self) -> float:
        if self.include_children and time.monotonic() - self._kids_at >= CHILDREN_REFRESH_S:
            # Listing children scans every process on the host (~5 ms with 150 processes), so the
            # list is refreshed every few seconds; cached Process objects are cheap to read.
            self._kids_at = time.monotonic()
            try:
                self._kids = self.proc.children(recursive=True)
            except self._psutil.Error:
                self._kids = []
        total = 0.0
        others = self._kids
        if self._self:
            t = os.times()  # children_* hold the reaped children's time, so finished workers still count
            total += t.user + t.system + t.children_user + t.children_system
        else:
            others = [self.proc, *self._kids]
        for p in others:
            try:
                t = p.cpu_times()
                # children_* hold the reaped children's time, so finished workers still count.
                total += t.user + t.system + t.children_user + t.children_system
            except self._psutil.Error:
                continue
        return total

    def _sys_times(self) -> tuple[float, float]:
        t = self._psutil.cpu_times()
        idle = t.idle + getattr(t, "iowait", 0.0)
        return sum(t) - idle, sum(t)  # (busy, total) in CPU-seconds over all cores

    def read(self) -> tuple[float | None, float | None, int | None]:
        """(process %, system %, RSS bytes)."""
        now, proc_s, (busy, total) = time.monotonic(), self._proc_cpu_s(), self._sys_times()
        t0, proc0, (busy0, total0) = self._last
        self._last = (now, proc_s, (busy, total))
        dt = now - t0
        proc_pct = max(0.0, (proc_s - proc0) / dt * 100.0) if dt > 0 else None
        sys_pct = max(0.0, min(100.0, (busy - busy0) / (total - total0) * 100.0)) if total > total0 else None
        try:
            rss = int(self.proc.memory_info().rss)
        except self._psutil.Error:
            rss = None
        return proc_pct, sys_pct, rss


def read_costs(gpu_index: int = 0, repeats: int = 20, wall: dict[str, float | None] | None = None
               ) -> dict[str, float | None]:
    """CPU milliseconds per call of every reading a tick may make (None: unavailable here); `wall`, when
    given, receives the wall-clock milliseconds per call of the same readings.

    For hosts where a tick costs more than expected: tells which NVML or /proc read is slow. A call
    whose wall time is far above its CPU time waits (on the driver or the GPU's firmware), which the
    CPU figure alone does not show."""
    import psutil

    def cost(name: str, fn: Any) -> float | None:
        try:
            fn()
            c0, w0 = time.thread_time(), time.perf_counter()
            for _ in range(repeats):
                fn()
            if wall is not None:
                wall[name] = round((time.perf_counter() - w0) / repeats * 1e3, 4)
            return round((time.thread_time() - c0) / repeats * 1e3, 4)
        except Exception:
            return None

    proc = psutil.Process()
    out: dict[str, float | None] = {
        "os_times": cost("os_times", os.times),
        "psutil_process_cpu_times": cost("psutil_process_cpu_times", proc.cpu_times),
        "psutil_children_recursive": cost("psutil_children_recursive", lambda: proc.children(recursive=True)),
        "psutil_cpu_times_system": cost("psutil_cpu_times_system", psutil.cpu_times),
        "psutil_memory_info": cost("psutil_memory_info", proc.memory_info),
        "rapl_read": cost("rapl_read", _Rapl().read),
    }
    nv = Nvml(gpu_index)
    if nv.ok:
        m, h = nv._nv, nv.handle
        out |= {"nvml_utilization": cost("nvml_utilization", lambda: m.nvmlDeviceGetUtilizationRates(h)),
                "nvml_memory_info": cost("nvml_memory_info", lambda: m.nvmlDeviceGetMemoryInfo(h)),
                "nvml_power": cost("nvml_power", lambda: m.nvmlDeviceGetPowerUsage(h)),
                "nvml_total_energy": cost("nvml_total_energy", lambda: m.nvmlDeviceGetTotalEnergyConsumption(h)),
                "nvml_compute_processes": cost("nvml_compute_processes", lambda: m.nvmlDeviceGetComputeRunningProcesses(h)),
                "nvml_read_as_ticked": cost("nvml_read_as_ticked", lambda: nv.read(energy_due=False))}
        nv.close()
    cpu = _Cpu(None, include_children=True)
    out["cpu_read_as_ticked"] = cost("cpu_read_as_ticked", cpu.read)
    return out


# ---------------------------------------------------------------- the sampler


class _Stat:
    """Running count / sum / max of one field, ignoring None."""

    __slots__ = ("n", "total", "max")

    def __init__(self) -> None:
        self.n, self.total, self.max = 0, 0.0, None

    def add(self, v: float | None) -> None:
        if v is None:
            return
        self.n += 1
        self.total += v
        self.max = v if self.max is None or v > self.max else self.max

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None


# NVML's utilization is the share of "the past sample period" (1/6 s to 1 s, by product) a kernel ran: a reading
# taken sooner than that after a window opened speaks partly for the time before it (an idle gap read as 0%
# on a short sweep point). Only readings a whole period into the window count; a window with none says
# "not sampled", never 0%.
NVML_UTIL_PERIOD_S = 1.0
NOT_SAMPLED = "not sampled"  # how a utilization without a reading of its own reads

_STAT_FIELDS = ("gpu_util_percent", "gpu_mem_used_bytes", "gpu_power_w",
                "cpu_process_percent", "cpu_system_percent", "rss_bytes")


class Sampler:
    """Samples GPU (NVML) and CPU (psutil, RAPL) every `interval_s` on a daemon thread.

    Statistics cover the window from start() (or the last mark()) to stop() or now. Memory is
    bounded: aggregates are running sums, and the timeline for plots keeps at most
    `max_timeline` points by dropping every other point and halving its rate when full.
    """

    def __init__(self, interval_s: float = 0.1, gpu_index: int = 0, pid: int | None = None,
                 include_children: bool = True, max_timeline: int = 600) -> None:
        if not 0.001 <= interval_s <= 60:
            raise UserError(f"sampler interval_s={interval_s!r} is out of range; use 0.001 to 60 seconds")
        if gpu_index < 0:
            raise UserError(f"sampler gpu_index={gpu_index!r} is invalid; use a device index >= 0")
        if max_timeline < 2:
            raise UserError(f"sampler max_timeline={max_timeline!r} is too small; use >= 2 points")
        self.interval_s = interval_s
        self.gpu_index = gpu_index
        self.pid = pid
        self.include_children = include_children
        self.max_timeline = max_timeline
        self._lock = threading.Lock()  # guards the window's statistics (summary() vs ticks)
        self._tick_lock = threading.RLock()  # one reading at a time, so readings stay in counter order
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gpu: Nvml | None = None
        self._cpu: _Cpu | None = None
        self._rapl: _Rapl | None = None
        self._latest: Sample | None = None
        self._energy_read_at = float("-inf")  # monotonic time of the last energy-counter read
        self._t0 = 0.0
        self._overhead_s = 0.0  # sampler thread CPU seconds in the window
        self._ticks_total = 0
        self._reset_window()

    # -- lifecycle

    def start(self) -> Sampler:
        if self._thread is not None:
            raise RuntimeError("Sampler.start() called twice; use a new Sampler")
        self._gpu = Nvml(self.gpu_index)
        self._cpu = _Cpu(self.pid, self.include_children)
        self._rapl = _Rapl()
        self._t0 = time.monotonic()
        self._tick(boundary=True)  # a first reading, so latest() works at once
        with self._lock:
            self._reset_window()
            self._open_window(self._latest)
        self._thread = threading.Thread(target=self._run, name="trainserve-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Sampler:
        """Take a last reading and stop the thread; idempotent."""
        if self._thread is None or self._stop.is_set():
            return self
        self._stop.set()
        self._thread.join()
        self._tick(boundary=True)
        with self._lock:
            self._t_end = time.monotonic()
        if self._gpu is not None and self._gpu.ok:
            self._gpu.close()
        return self

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def mark(self) -> None:
        """Start a fresh window now (e.g. after warm-up): statistics and energy restart from here."""
        with self._tick_lock:
            self._tick(boundary=True)
            with self._lock:
                self._reset_window()
                self._open_window(self._latest)

    # -- readings

    def latest(self) -> Sample:
        if self._latest is None:
            raise RuntimeError("Sampler.latest() before start()")
        return self._latest

    def reading(self) -> Sample:
        """A reading taken now, energy counters included (cumulative), e.g. to meter a span of a run."""
        with self._tick_lock:
            self._tick(boundary=True)
            return self.latest()

    @property
    def gpu_available(self) -> bool:
        return self._gpu is not None and self._gpu.ok

    def summary(self) -> dict[str, Any]:
        """Statistics over the window: means/maxima, energy with its source, overhead, timeline."""
        with self._lock:
            end = self._t_end if self._t_end is not None else time.monotonic()
            window_s = max(0.0, end - self._win_t0)
            last = self._latest
            st = self._stats
            gpu_j, gpu_src = self._gpu_energy(last)
            cpu_j = None
            if last is not None and last.cpu_energy_j is not None and self._win_first is not None \
                    and self._win_first.cpu_energy_j is not None:
                cpu_j = last.cpu_energy_j - self._win_first.cpu_energy_j
            power_mean = st["gpu_power_w"].mean
            span_s = (self._win_energy_last.t_s - self._win_first.t_s) if gpu_src == "nvml" else 0.0
            if span_s > 0:
                power_mean = gpu_j / span_s  # exact mean from the counter, not from samples
            mem_max = st["gpu_mem_used_bytes"].max
            rss_max = st["rss_bytes"].max
            return {
                "interval_s": self.interval_s,
                "window_s": round(window_s, 4),
                "ticks": self._ticks,
                "gpu_available": self.gpu_available,
                "gpu_name": self._gpu.name if self._gpu is not None else None,
                "gpu_util_mean_percent": _round(st["gpu_util_percent"].mean),
                "gpu_util_max_percent": _round(st["gpu_util_percent"].max),
                "gpu_util_sampled": st["gpu_util_percent"].n > 0,  # False: too short for NVML's period
                "gpu_mem_used_max_bytes": None if mem_max is None else int(mem_max),
                "gpu_power_mean_w": _round(power_mean),
                "gpu_power_max_w": _round(st["gpu_power_w"].max),
                "gpu_energy_j": _round(gpu_j),
                "gpu_energy_source": gpu_src,
                "cpu_process_mean_percent": _round(st["cpu_process_percent"].mean),
                "cpu_process_max_percent": _round(st["cpu_process_percent"].max),
                "cpu_system_mean_percent": _round(st["cpu_system_percent"].mean),
                "rss_max_bytes": None if rss_max is None else int(rss_max),
                "cpu_energy_j": _round(cpu_j),
                "cpu_energy_source": "rapl" if cpu_j is not None else None,
                "overhead_cpu_s": round(self._overhead_s, 6),
                "overhead_tick_ms": _round(self._overhead_s / self._ticks * 1e3) if self._ticks else None,
                "overhead_percent_of_core": _round(self._overhead_s / window_s * 100) if window_s > 0 else None,
                "timeline": list(self._timeline),
            }

    def apply(self, record: ProfileRecord, samples: int) -> dict[str, Any]:
        """Fill record.utilization and record.energy from the window; `samples` = rows processed in it.

        A record takes only its own device's meters: a cuda record NVML's utilization, memory and energy;
        a cpu record no GPU reading at all (a CPU run on a GPU host would otherwise carry the idle GPU's),
        and the CPU packages' RAPL energy, else the TDP × utilisation estimate (trainserve/core/meters.py).
        Everything read, and the sampler's own overhead, stays in record.extra["telemetry"].
        Returns the summary it used.
        """
        s = self.summary()
        u = record.utilization
        if record.device == "cuda" and s["gpu_available"]:
            u.gpu_util_mean_percent = s["gpu_util_mean_percent"]
            u.gpu_util_max_percent = s["gpu_util_max_percent"]
            u.gpu_mem_used_max_bytes = s["gpu_mem_used_max_bytes"]
            u.gpu_meter = meters.nvml_meter(self.gpu_index)
        u.cpu_process_mean_percent = s["cpu_process_mean_percent"]
        u.cpu_process_max_percent = s["cpu_process_max_percent"]
        u.cpu_system_mean_percent = s["cpu_system_mean_percent"]
        u.timeline = s["timeline"] if record.device == "cuda" else [_cpu_point(p) for p in s["timeline"]]
        fill_energy(record, self.energy_reading(record.device, s), samples, s["window_s"])
        record.extra["telemetry"] = {k: v for k, v in s.items() if k != "timeline"}
        warning = low_gpu_util_warning(s) if record.device == "cuda" else None
        if warning and warning not in record.validity.warnings:
            record.validity.warnings.append(warning)
        return s

    def energy_reading(self, device: str, summary: dict[str, Any] | None = None) -> EnergyReading | None:
        """The window's energy on `device` by that device's own meter (or the CPU estimate); None: none."""
        s = self.summary() if summary is None else summary
        if device == "cuda":
            if s["gpu_energy_j"] is None:
                return None
            return EnergyReading(s["gpu_energy_j"], s["window_s"], s["gpu_energy_source"],
                                 meters.nvml_meter(self.gpu_index), meters.gpu_device(self.gpu_index))
        if s["cpu_energy_j"] is not None:
            return EnergyReading(s["cpu_energy_j"], s["window_s"], meters.RAPL, meters.RAPL_METER, "cpu")
        est = meters.estimate_cpu_power(s["cpu_process_mean_percent"], os.cpu_count(), meters.host_cpu_model())
        if est is None or s["window_s"] <= 0:
            return None
        return EnergyReading(est.power_w * s["window_s"], s["window_s"], meters.ESTIMATE, est.meter, "cpu")

    # -- internals

    def _reset_window(self) -> None:
        self._stats = {f: _Stat() for f in _STAT_FIELDS}
        self._timeline: list[dict[str, Any]] = []
        self._stride = 1  # keep every stride-th tick in the timeline
        self._ticks = 0
        self._overhead_s = 0.0
        self._win_t0 = time.monotonic()
        self._win_first: Sample | None = None
        self._win_energy_last: Sample | None = None  # the window's latest sample with an energy reading
        self._power_j = 0.0  # integral of GPU power, the fallback without the energy counter
        self._prev: Sample | None = None
        self._t_end: float | None = None

    def _open_window(self, first: Sample | None) -> None:
        self._win_first = first
        self._prev = first
        if first is not None:
            self._add(first)

    def _gpu_energy(self, last: Sample | None) -> tuple[float | None, str | None]:
        first, last = self._win_first, self._win_energy_last
        if first is not None and last is not None and last is not first and first.gpu_energy_j is not None:
            return last.gpu_energy_j - first.gpu_energy_j, "nvml"
        if self._stats["gpu_power_w"].n >= 2:
            return self._power_j, "nvml-power"  # integrated samples: less exact than the counter
        return None, None

    def _run(self) -> None:
        next_t = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            next_t += self.interval_s
            if next_t < time.monotonic():  # fell behind (suspended, overloaded): don't burst
                next_t = time.monotonic() + self.interval_s
            self._tick()

    def _tick(self, boundary: bool = False) -> None:
        """One reading; `boundary` (start, mark, stop) always reads the energy counter."""
        with self._tick_lock:
            c0 = time.thread_time()
            try:
                sample = self._read(boundary)
            except Exception as e:  # a sampler must never take the measured program down
                log.debug("telemetry tick failed: %s", e)
                return
            with self._lock:
                self._latest = sample
                if self._win_first is not None:
                    self._add(sample)
                self._overhead_s += time.thread_time() - c0

    def _read(self, boundary: bool = False) -> Sample:
        assert self._gpu is not None and self._cpu is not None and self._rapl is not None
        now = time.monotonic()
        energy_due = boundary or now - self._energy_read_at >= ENERGY_EVERY_S
        util, mem, power, energy = self._gpu.read(energy_due)
        if energy is not None:
            self._energy_read_at = now
        proc, system, rss = self._cpu.read()
        return Sample(
            t_s=round(time.monotonic() - self._t0, 4),
            gpu_util_percent=util, gpu_mem_used_bytes=mem, gpu_power_w=power, gpu_energy_j=energy,
            cpu_process_percent=None if proc is None else round(proc, 2),
            cpu_system_percent=None if system is None else round(system, 2),
            rss_bytes=rss, cpu_energy_j=self._rapl.read(),
        )

    def _add(self, s: Sample) -> None:
        """Fold one sample into the window (lock held)."""
        if s.gpu_energy_j is not None:
            self._win_energy_last = s
        prev, self._prev = self._prev, s
        if prev is not None and prev is not s and prev.gpu_power_w is not None and s.gpu_power_w is not None:
            self._power_j += (prev.gpu_power_w + s.gpu_power_w) / 2 * max(0.0, s.t_s - prev.t_s)
        for f in _STAT_FIELDS:
            if f == "gpu_util_percent" and (self._win_first is None or s.t_s - self._win_first.t_s < NVML_UTIL_PERIOD_S):
                continue  # its NVML period began before the window
            self._stats[f].add(getattr(s, f))
        if self._ticks % self._stride == 0:
            point = {k: v for k, v in asdict(s).items() if k not in ("gpu_energy_j", "cpu_energy_j")}
            point["t_s"] = round(s.t_s - (self._win_first.t_s if self._win_first else 0.0), 3)
            self._timeline.append(point)
            if len(self._timeline) >= self.max_timeline:
                self._timeline = self._timeline[::2]
                self._stride *= 2
        self._ticks += 1


@dataclass(frozen=True)
class EnergyReading:
    """Energy over a window by one named meter on one device."""

    joules: float
    window_s: float  # the span the joules cover
    source: str  # trainserve.core.meters: NVML, NVML_POWER, RAPL or ESTIMATE
    meter: str  # e.g. "NVML device 0"
    device: str  # "cpu" or "cuda:N"


def fill_energy(record: ProfileRecord, reading: EnergyReading | None, samples: int,
                window_s: float | None = None) -> None:
    """record.energy from one reading: mean power over the reading's span, energy over `window_s` (the
    record's measured window; the reading's own span when None), per sample over `samples` rows."""
    e = record.energy
    if reading is None:
        e.mean_power_w = e.energy_j = e.energy_per_sample_j = e.source = e.meter = e.device = None
        return
    power = reading.joules / reading.window_s if reading.window_s > 0 else None
    span = reading.window_s if window_s is None else window_s
    joules = reading.joules if span == reading.window_s else (power * span if power is not None else None)
    e.mean_power_w = _round(power)
    e.energy_j = _round(joules)
    e.energy_per_sample_j = _round(joules / samples, 9) if joules is not None and samples > 0 else None
    e.source, e.meter, e.device = reading.source, reading.meter, reading.device


def _cpu_point(point: dict[str, Any]) -> dict[str, Any]:
    """A timeline point of a CPU record: the GPU's readings left out (they are not this device's)."""
    return {k: v for k, v in point.items() if not k.startswith("gpu_")}


def low_gpu_util_warning(summary: dict[str, Any]) -> str | None:
    """DESIGN's input-bound hint: GPU mostly idle while its memory is in use."""
    util, mem = summary.get("gpu_util_mean_percent"), summary.get("gpu_mem_used_max_bytes")
    if util is None or mem is None or mem < GPU_MEM_IN_USE_BYTES or util >= LOW_GPU_UTIL_PERCENT:
        return None
    return (f"GPU utilization averaged {util:.1f}% (< {LOW_GPU_UTIL_PERCENT:.0f}%) while "
            f"{mem / 2**30:.1f} GiB of its memory was in use: the run is likely input-bound")


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(float(x), digits)
