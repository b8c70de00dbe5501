"""A model's figures as PNG bytes: its side-by-side charts (throughput, latency, largest batch, batch sweep) here,
the memory and serving figures from their sections.

Each function returns None when there is nothing measured to draw, so a CPU-only run simply has
fewer figures instead of empty axes.
"""

from __future__ import annotations

from typing import Any

from trainserve.report.common import units as u
from trainserve.report.common.plot_canvas import COLORS, house_style, new_figure, plain_log_ticks, png_bytes, safe_name
from trainserve.report.common.sections import ModelSection
from trainserve.report.common.typed import to_json
from trainserve.report.memory.memory_plot import memory
from trainserve.report.page.analysis import DEVICE_LABEL, columns
from trainserve.report.serving.serving_plots import frontier, ramp

PCTS = (("p50_ms", "p50"), ("p95_ms", "p95"), ("p99_ms", "p99"), ("p999_ms", "p99.9"))  # as perf_analyzer and k6 report


def model_figures(section: ModelSection) -> dict[str, bytes]:
    """All figures of one model, keyed by file name."""
    name = section.model
    out: dict[str, bytes] = {}
    for kind, fn in (("throughput", throughput), ("latency", latency), ("memory", memory),
                     ("ramp", ramp), ("frontier", frontier), ("maxbatch", max_batch), ("sweep", sweep)):
        png = fn(section)
        if png is not None:
            out[f"{kind}-{safe_name(name)}.png"] = png
    return out
















def throughput(section: ModelSection) -> bytes | None:
    cols = [(label, v) for label, v in columns(section) if v and v.throughput_samples_s]
    if not cols:
        return None
    fig = new_figure(7.2, 0.45 * len(cols) + 1.0)
    ax = fig.add_subplot()
    labels = [label for label, _ in cols][::-1]
    values = [v.throughput_samples_s for _, v in cols][::-1]
    colors = [COLORS[v.device] for _, v in cols][::-1]
    hatches = ["//" if v.phase == "train" else "" for _, v in cols][::-1]
    bars = ax.barh(labels, values, color=colors, edgecolor="white", hatch=hatches)
    ax.set_xscale("log")
    ax.set_xlabel("samples/s (log scale)", fontsize=9)
    for bar, value in zip(bars, values):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {u.num(value)}", va="center", fontsize=8)
    ax.set_xlim(right=max(values) * 6)
    plain_log_ticks(ax.xaxis)
    house_style(ax, f"{section.model}: throughput, training (hatched) vs inference")
    return png_bytes(fig)


def latency(section: ModelSection) -> bytes | None:
    cols = [(label, v) for label, v in columns(section) if v and v.p50_ms is not None]
    if not cols:
        return None
    import numpy as np

    fig = new_figure(7.2, 0.6 * len(cols) + 1.2)
    ax = fig.add_subplot()
    y = np.arange(len(cols))[::-1]
    height = 0.8 / len(PCTS)
    shades = ("#1f3b57", "#3b6ea5", "#7fa7d1", "#c3d6ea")
    for i, ((key, title), shade) in enumerate(zip(PCTS, shades)):
        vals = [v.latency.get(key) or 0 for _, v in cols]
        ax.barh(y + (1.5 - i) * height, vals, height=height, color=shade, label=title)
    ax.set_yticks(y, [label for label, _ in cols])
    ax.set_xscale("log")
    plain_log_ticks(ax.xaxis)
    ax.set_xlabel("ms per training step / per request (log scale)", fontsize=9)
    ax.legend(fontsize=8, ncols=4, loc="lower left", bbox_to_anchor=(0, 1.0), frameon=False)
    house_style(ax, f"{section.model}: step time and latency percentiles\n")
    return png_bytes(fig)








def max_batch(section: ModelSection) -> bytes | None:
    mb = {d: v for d, v in section.max_batch.items() if v.train or v.infer}
    if not mb:
        return None
    rows = [(f"{phase} · {DEVICE_LABEL[d]} ({v.precision})", getattr(v, key) or 0, color)
            for d, v in mb.items()
            for phase, key, color in (("training", "train", "#d08770"), ("inference", "infer", "#5e81ac"))]
    fig = new_figure(7.2, 0.9 + 0.42 * len(rows))
    ax = fig.add_subplot()
    labels = [r[0] for r in rows][::-1]
    values = [r[1] for r in rows][::-1]
    bars = ax.barh(labels, values, height=0.6, color=[r[2] for r in rows][::-1])
    for bar, value in zip(bars, values):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {u.num(value)}", va="center", fontsize=8)
    ax.set_xlabel("largest batch that fits, samples", fontsize=9)
    ax.margins(x=0.15)
    house_style(ax, f"{section.model}: largest batch, training vs inference")
    return png_bytes(fig)


def sweep(section: ModelSection) -> bytes | None:
    """Throughput and peak memory against batch size: training (one line per device and precision) beside
    inference (onnxruntime in process per batch size; memory: the served records' peak)."""
    return operating_points_chart(train_series(section) + infer_series(section),
                                  f"{section.model}: training and inference by batch size")


def infer_series(section: ModelSection) -> list[dict[str, Any]]:
    """Inference operating points per device: the in-process limit's samples/s at each batch size (one session,
    the layout the batch sweep used) and the served records' peak memory at their batch sizes."""
    series = []
    for d, points in section.limit_points.items():
        batch = [p for p in points if p.sweep == "batch"]
        threads = batch[0].threads if batch else None
        pts = [p for p in points if p.threads == threads and not p.spinning
               and p.sweep in ("threads", "layout", "batch")] if threads else []
        served = []
        for by_device in section.infer.values():
            s = by_device.get(d)
            for v in (s.batch1, s.saturated) if s else ():
                if v and v.memory.peak_bytes:
                    served.append({"batch_size": v.batch_size, "peak_bytes": v.memory.peak_bytes})
        if pts or served:
            series.append({"label": f"infer · {DEVICE_LABEL[d]}", "device": d, "phase": "infer", "best": None,
                           "points": [{"batch_size": p.batch_size, "throughput_samples_s": p.throughput_samples_s}
                                      for p in pts] + served})
    return series


def train_series(section: ModelSection) -> list[dict[str, Any]]:
    """The training operating points as chart series (see operating_points_chart)."""
    series = []
    for d, op in section.operating_points.items():
        for precision in sorted({p.precision for p in op.train}):
            pts = [to_json(p) for p in op.train if p.precision == precision]  # the chart's points are plain dicts
            series.append({"label": f"train · {DEVICE_LABEL[d]} · {precision}", "device": d, "phase": "train",
                           "best": to_json(op.train_best), "points": pts})
    return series


def operating_points_chart(series: list[dict[str, Any]], title: str) -> bytes | None:
    """Samples/s (left) and peak memory (right) against batch size, for any list of series.

    A series is {"label", "device" ("cpu" | "cuda"), "phase" ("train" | "infer"), "points": [{"batch_size",
    "throughput_samples_s", "peak_bytes"}], "best": a point to ring, or None}: training solid,
    inference dashed, so inference points can join the same chart.
    """
    series = [s for s in series if any(p.get("throughput_samples_s") for p in s["points"])]
    if not series:
        return None
    fig = new_figure(9.0, 3.6)
    ax_t, ax_m = fig.subplots(1, 2)
    markers = ("o", "s", "^", "D", "v", "P")
    peaks = [p["peak_bytes"] for s in series for p in s["points"] if p.get("peak_bytes")]
    gib = 1024**3
    scale, unit = (gib, "GiB") if peaks and max(peaks) >= gib / 4 else (1024**2, "MiB")
    for i, s in enumerate(series):
        color = COLORS.get(s["device"], "#555")
        style = "-" if s.get("phase", "train") == "train" else "--"
        pts = sorted((p for p in s["points"] if p.get("throughput_samples_s")), key=lambda p: p["batch_size"])
        xs = [p["batch_size"] for p in pts]
        ax_t.plot(xs, [p["throughput_samples_s"] for p in pts], style, marker=markers[i % 6], markersize=4,
                  color=color, label=s["label"])
        best = s.get("best")
        if best and best in pts:
            ax_t.plot([best["batch_size"]], [best["throughput_samples_s"]], "o", markersize=11, markerfacecolor="none",
                      markeredgecolor=color)
        mem = sorted((p["batch_size"], p["peak_bytes"] / scale) for p in s["points"] if p.get("peak_bytes"))
        if mem:
            ax_m.plot([a for a, _ in mem], [b for _, b in mem], style, marker=markers[i % 6], markersize=4,
                      color=color, label=s["label"])
    from matplotlib.ticker import FuncFormatter

    for ax in (ax_t, ax_m):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
        ax.set_xlabel("batch size (samples per step)", fontsize=9)
    ax_t.set_yscale("log")
    plain_log_ticks(ax_t.yaxis)
    ax_t.set_ylabel("samples/s (log scale)", fontsize=9)
    ax_m.set_ylabel(f"peak memory, {unit}", fontsize=9)
    ax_t.legend(fontsize=7.5, frameon=False, loc="best")
    house_style(ax_t, "throughput (best ringed)")
    house_style(ax_m, "peak memory (inference: the server's)")
    fig.suptitle(title, fontsize=10, fontweight="bold")
    return png_bytes(fig)
