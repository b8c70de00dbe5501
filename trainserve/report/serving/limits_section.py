"""The in-process limits (`trainserve limits`, runs/<run>/limits/) beside the served figures.

A limit record is phase "infer", backend "onnxruntime", target "in-process/<model>" and
extra["limit"] = True; it measures onnxruntime with no server, so it is never a served measurement:
analysis.py leaves it out of the served tables and headline, and this module adds, per model:

- limits.<device>: {batch1_p50_ms, batch1_threads, best_batch, best_throughput_samples_s}
- server_vs_limit.<device>: {batch1_overhead_ms, saturated_efficiency}: served batch-1 p50 minus the
  in-process one (ms the server adds), and served saturated samples/s over the best in-process samples/s
- limit_points.<device>: every point, for the tables and the frontier plot
- limit_speedups: the GPU-vs-CPU ratios in process, beside the served ones
and a `limit` entry on each served batch-1 / saturated view, so every served figure has its limit beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainserve.core.bounds import is_limit
from trainserve.core.speedup import DEVICE_LABEL, DEVICES
from trainserve.report.common import units as u
from trainserve.report.common.collect import Entry
from trainserve.report.common.sections import (
    Batch1Limit,
    Column,
    DeviceLimit,
    LimitPoint,
    Limits,
    LimitSpeedups,
    ModelSection,
    SaturatedLimit,
    Served,
    ServerVsLimit,
)


def limits_section(entries: list[Entry], section: ModelSection) -> Limits:
    """The fields this module adds to a model's section (see the module docstring); attaches `limit` to served
    columns."""
    mine = [e for e in entries if e.record.phase == "infer" and is_limit(e.record)]
    limits: dict[str, DeviceLimit] = {}
    points: dict[str, list[LimitPoint]] = {}
    for d in DEVICES:
        device = [e for e in mine if e.record.device == d]
        lim = _device_limit(device)
        if lim is None:
            continue
        limits[d] = lim
        points[d] = sorted((_point(e) for e in device),
                           key=lambda p: (p.sweep != "threads", p.batch_size, p.threads or 0, p.spinning))
    server_vs_limit: dict[str, ServerVsLimit] = {}
    for d, lim in limits.items():
        for per_device in section.infer.values():
            served = per_device.get(d)
            if served:
                # the first served backend (analysis.BACKEND_PREFERENCE order) sets the device's overhead/efficiency
                server_vs_limit.setdefault(d, _attach_limit(served, lim))
    cpu, gpu = limits.get("cpu"), limits.get("cuda")
    speedups = LimitSpeedups(
        infer_batch1=_div(cpu and cpu.batch1_p50_ms, gpu and gpu.batch1_p50_ms),
        infer_saturated=_div(gpu and gpu.best_throughput_samples_s, cpu and cpu.best_throughput_samples_s),
    )
    return Limits(limits=limits, server_vs_limit=server_vs_limit, limit_points=points, limit_speedups=speedups)


def _device_limit(device: list[Entry]) -> DeviceLimit | None:
    """One device's limit: its fastest batch-1 p50 and its best samples/s (None: no limit record measured either)."""
    b1 = [e for e in device if e.record.batch_size == 1 and e.record.speed.latency.p50_ms is not None]
    rated = [e for e in device if e.record.speed.throughput_samples_s is not None]
    if not b1 and not rated:
        return None
    fast = min(b1, key=lambda e: e.record.speed.latency.p50_ms) if b1 else None
    best = max(rated, key=lambda e: e.record.speed.throughput_samples_s) if rated else None
    return DeviceLimit(
        batch1_p50_ms=fast and fast.record.speed.latency.p50_ms,
        batch1_threads=fast and fast.record.settings.get("intra_op_threads"),
        best_batch=best and best.record.batch_size,
        best_throughput_samples_s=best and best.record.speed.throughput_samples_s,
    )


def _attach_limit(served: Served, lim: DeviceLimit) -> ServerVsLimit:
    """Sets the limit beside a served column's batch-1 and saturated views; returns what the server adds to it."""
    b1v, satv = served.batch1, served.saturated
    overhead = _sub(b1v and b1v.p50_ms, lim.batch1_p50_ms)
    efficiency = _div(satv and satv.throughput_samples_s, lim.best_throughput_samples_s)
    if b1v:
        b1v.limit = Batch1Limit(p50_ms=lim.batch1_p50_ms, threads=lim.batch1_threads, overhead_ms=overhead)
    if satv:
        satv.limit = SaturatedLimit(throughput_samples_s=lim.best_throughput_samples_s, batch=lim.best_batch,
                                    efficiency=efficiency)
    return ServerVsLimit(batch1_overhead_ms=overhead, saturated_efficiency=efficiency)


def _point(e: Entry) -> LimitPoint:
    r = e.record
    return LimitPoint(source=e.source, sweep=r.extra.get("sweep"), batch_size=r.batch_size,
                      threads=r.settings.get("intra_op_threads"), spinning=bool(r.settings.get("allow_spinning")),
                      p50_ms=r.speed.latency.p50_ms, p99_ms=r.speed.latency.p99_ms,
                      throughput_samples_s=r.speed.throughput_samples_s, runs=r.speed.latency.count)


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 4)


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


# --- words -----------------------------------------------------------------------------------

def tile_note(section: ModelSection, device: str, kind: str) -> str:
    """The limit under a summary tile: kind "batch1" or "saturated"."""
    lim = section.limits.get(device)
    if not lim:
        return ""
    if kind == "batch1":
        return f" · in process {u.ms(lim.batch1_p50_ms)}"
    return f" · in process {u.num(lim.best_throughput_samples_s)}"


def ramp_note(section: ModelSection, device: str) -> str:
    """Beside a load ramp: the in-process floor and ceiling its points approach."""
    lim = section.limits.get(device)
    if not lim:
        return ""
    return (f"in-process limit: batch-1 p50 {u.ms(lim.batch1_p50_ms)}, "
            f"best {u.num(lim.best_throughput_samples_s)} samples/s at batch {lim.best_batch}")


def table(section: ModelSection) -> tuple[list[str], list[list[str]]]:
    """Served beside in-process, one row per device: header and rows of formatted cells."""
    header = ["device", "batch-1 p50, in process", "batch-1 p50, served", "server overhead",
              "samples/s, in process (best)", "samples/s, served saturated", "efficiency"]
    rows = []
    for d, lim in section.limits.items():
        served = section.served(d)
        b1, sat = (served.batch1, served.saturated) if served else (None, None)
        svl = section.server_vs_limit.get(d) or ServerVsLimit(None, None)
        rows.append([DEVICE_LABEL[d], f"{u.ms(lim.batch1_p50_ms)} ({lim.batch1_threads} thr)",
                     u.ms(b1 and b1.p50_ms), _plus_ms(svl.batch1_overhead_ms),
                     f"{u.num(lim.best_throughput_samples_s)} (batch {lim.best_batch})",
                     u.num(sat and sat.throughput_samples_s), u.fraction(svl.saturated_efficiency)])
    return header, rows


def points_table(section: ModelSection, device: str) -> tuple[list[str], list[list[str]]]:
    header = ["sweep", "batch", "threads", "spinning", "p50", "p99", "samples/s", "runs"]
    rows = [[str(p.sweep), str(p.batch_size), str(p.threads), "yes" if p.spinning else "no",
             u.ms(p.p50_ms), u.ms(p.p99_ms), u.num(p.throughput_samples_s), str(p.runs)]
            for p in section.limit_points.get(device, [])]
    return header, rows


def _plus_ms(x: float | None) -> str:
    return u.MISSING if x is None else f"{'+' if x >= 0 else '−'}{u.ms(abs(x))}"


def _limit_cell(v: Column, batch1: Callable[[Any], str], saturated: Callable[[Any], str]) -> str:
    """A served column's limit cell: blank for training, missing without a limit, else by the limit's kind."""
    if v.phase == "train":
        return ""
    if not v.limit:
        return u.MISSING
    return batch1(v.limit) if isinstance(v.limit, Batch1Limit) else saturated(v.limit)


def row_limit(v: Column) -> str:
    """Table row "in-process limit": the limit of a served column."""
    return _limit_cell(v, lambda lim: f"{u.ms(lim.p50_ms)} ({lim.threads} thr)",
                       lambda lim: f"{u.num(lim.throughput_samples_s)} (b{lim.batch})")


def row_vs_limit(v: Column) -> str:
    """Table row "server vs limit": ms added at batch 1, share of the in-process peak when saturated."""
    return _limit_cell(v, lambda lim: _plus_ms(lim.overhead_ms), lambda lim: u.fraction(lim.efficiency))


def speedup_note(section: ModelSection, key: str) -> str:
    """The in-process GPU-vs-CPU ratio beside a served speedup tile ("infer_batch1" / "infer_saturated")."""
    value = getattr(section.limit_speedups, key, None)
    return "" if value is None else f"; in process {u.ratio(value)}"
