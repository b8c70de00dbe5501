"""The serving figures of a model: latency against throughput as a load ramps up, and the served frontier under
the in-process limits. Each returns None when there is nothing measured to draw."""

from __future__ import annotations

from trainserve.core.speedup import DEVICE_LABEL
from trainserve.report.common import units as u
from trainserve.report.common.plot_canvas import COLORS, house_style, new_figure, plain_log_ticks, png_bytes
from trainserve.report.common.sections import ModelSection, Ramp


def ramp(section: ModelSection) -> bytes | None:
    ramps = section.ramps
    if not ramps:
        return None
    fig = new_figure(7.2, 3.6)
    ax = fig.add_subplot()
    palette = ("#3b6ea5", "#76b900", "#d08770", "#b48ead", "#5e81ac", "#a3be8c")
    for i, r in enumerate(ramps):
        color = COLORS.get(r.device) if len({x.device for x in ramps}) == len(ramps) else palette[i % 6]
        _draw_ramp(ax, r, color)
    _log_where_wide(ax.xaxis, ax.set_xscale, [p.throughput_samples_s for r in ramps for p in r.points])
    _log_where_wide(ax.yaxis, ax.set_yscale,
                    [y for r in ramps for p in r.points for y in (p.p50_ms, p.p99_ms) if y])
    ax.set_xlabel("throughput, samples/s", fontsize=9)
    ax.set_ylabel("latency, ms", fontsize=9)
    ax.legend(fontsize=7.5, frameon=False, loc="upper left")
    house_style(ax, f"{section.model}: latency vs throughput as load ramps up")
    return png_bytes(fig)


def _draw_ramp(ax, r: Ramp, color: str) -> None:
    """One ramp's p50 and p99 lines against its throughput, its last step's users named."""
    xs = [p.throughput_samples_s for p in r.points]
    for key, style, tag in (("p50_ms", "-", "p50"), ("p99_ms", "--", "p99")):
        pts = [(x, getattr(p, key)) for x, p in zip(xs, r.points) if getattr(p, key) is not None]
        if pts:
            ax.plot([a for a, _ in pts], [b for _, b in pts], style, marker="o", markersize=3.5,
                    color=color, label=f"{r.label} {tag}")
    last = r.points[-1]
    if last.p50_ms is not None:
        ax.annotate(f"{last.users} users", (xs[-1], last.p50_ms), fontsize=7, color="#555",
                    textcoords="offset points", xytext=(4, -10))


def _log_where_wide(axis, set_scale, values: list[float]) -> None:
    """A log axis only where the values span a decade; a short ramp reads better on a linear one."""
    positive = [v for v in values if v and v > 0]
    if positive and max(positive) / min(positive) >= 10:
        set_scale("log")
        plain_log_ticks(axis)


def frontier(section: ModelSection) -> bytes | None:
    """Per device, the server's latency-throughput frontier (its load ramp, batch-1 and saturated measurements)
    under the in-process limit: the batch-1 p50 floor and the best samples/s ceiling (trainserve limits)."""
    devices = [d for d in section.devices_measured if d in section.limits]
    if not devices:
        return None
    fig = new_figure(7.2 if len(devices) == 1 else 10.5, 4.6)
    axes = fig.subplots(1, len(devices), squeeze=False)[0]
    for ax, d in zip(axes, devices):
        xs, ys = _draw_served(ax, section, d)
        lx, ly = _draw_limit(ax, section, d)
        _log_where_wide(ax.xaxis, ax.set_xscale, xs + lx)
        _log_where_wide(ax.yaxis, ax.set_yscale, ys + ly)
        ax.set_xlabel("throughput, samples/s", fontsize=9)
        ax.set_ylabel("p50 latency per request, ms", fontsize=9)
        ax.legend(fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncols=2)
        house_style(ax, f"{section.model} · {DEVICE_LABEL[d]}: served vs in-process limit")
    return png_bytes(fig)


def _draw_served(ax, section: ModelSection, d: str) -> tuple[list[float], list[float]]:
    """The device's served points: its ramps' p50 and its batch-1 and saturated figures; returns their x and y."""
    color = COLORS[d]
    xs: list[float] = []
    ys: list[float] = []
    for r in (r for r in section.ramps if r.device == d):
        pts = [(p.throughput_samples_s, p.p50_ms) for p in r.points if p.p50_ms is not None]
        if pts:
            ax.plot(*zip(*pts), "-", marker="o", markersize=3.5, color=color, label=f"served ramp p50 ({r.backend})")
            xs += [a for a, _ in pts]
            ys += [b for _, b in pts]
    served = section.served(d)
    for kind, marker in (("batch1", "s"), ("saturated", "D")):
        v = getattr(served, kind) if served else None
        if v and v.throughput_samples_s and v.p50_ms is not None:
            ax.plot(v.throughput_samples_s, v.p50_ms, marker, color=color, markersize=6,
                    markeredgecolor="#222", linestyle="none", label=f"served {kind} (batch {v.batch_size})")
            xs.append(v.throughput_samples_s)
            ys.append(v.p50_ms)
    return xs, ys


def _draw_limit(ax, section: ModelSection, d: str) -> tuple[list[float], list[float]]:
    """The device's in-process points, its batch-1 floor and its ceiling; returns their x and y."""
    lim = section.limits[d]
    xs: list[float] = []
    ys: list[float] = []
    pts = [(p.throughput_samples_s, p.p50_ms) for p in section.limit_points.get(d, [])
           if p.throughput_samples_s and p.p50_ms]
    if pts:
        ax.plot(*zip(*pts), ".", color="#888", markersize=5, label="in process, each point")
        xs += [a for a, _ in pts]
        ys += [b for _, b in pts]
    if lim.batch1_p50_ms:
        ax.axhline(lim.batch1_p50_ms, color="#c0392b", linestyle="--", linewidth=1,
                   label=f"in-process batch-1 floor {u.ms(lim.batch1_p50_ms)}")
        ys.append(lim.batch1_p50_ms)
    if lim.best_throughput_samples_s:
        ax.axvline(lim.best_throughput_samples_s, color="#8e44ad", linestyle=":", linewidth=1.2,
                   label=f"in-process ceiling {u.num(lim.best_throughput_samples_s)}/s (b{lim.best_batch})")
        xs.append(lim.best_throughput_samples_s)
    return xs, ys
