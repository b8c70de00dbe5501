"""The report's figures as PNG bytes (matplotlib's Agg canvas; no display, no pyplot state).

Each function returns None when there is nothing measured to draw, so a CPU-only run simply has
fewer figures instead of empty axes.
"""

from __future__ import annotations

import io
from typing import Any

from trainserve.report import units as u
from trainserve.report.analysis import DEVICE_LABEL, columns
from trainserve.report.sections import MemoryFigure, ModelSection
from trainserve.report.typed import to_json

COLORS = {"cpu": "#3b6ea5", "cuda": "#76b900"}  # GPU in NVIDIA green, CPU in steel blue
PARTS = (("weights", "#4c566a"), ("gradients", "#d08770"), ("optimizer", "#b48ead"), ("activations", "#ebcb8b"))
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


# What each figure shows, for its alt text: a reader without the image, or with a screen
# reader, learns what the chart holds instead of its file name
ALT_TEXT = {
    "throughput": "Bar chart of samples per second for model {m}: training and inference, CPU beside GPU",
    "latency": "Bar chart of latency percentiles (p50, p90, p99, p99.9, in ms) for model {m}: training step and "
               "served request, CPU beside GPU",
    "memory": "Stacked bar chart of peak memory for model {m}: training split into weights, gradients, optimizer "
              "state and activations, beside inference",
    "ramp": "Line charts of model {m} under a rising served load: samples per second and latency percentiles "
            "against users or offered requests per second",
    "frontier": "Latency against throughput for model {m} as served, per device, under the in-process limits "
                "(the batch-1 latency floor and the best samples per second)",
    "maxbatch": "Bar chart of the largest batch of model {m} that fits in memory, training and inference, per device",
    "sweep": "Line charts against batch size for model {m}: samples per second and peak memory, training per "
             "device and precision beside inference in process",
    "cost": "Line chart of the cost per million one-row inferences of model {m} as the load grows, per device, "
            "measured points marked",
}


def alt_text(file_name: str, model: str) -> str:
    """The alt text of a figure file `<kind>-<model>.png`."""
    kind = file_name.split("-", 1)[0]
    template = ALT_TEXT.get(kind)
    return template.format(m=model) if template else f"Figure {file_name} for model {model}"


def safe_name(name: str) -> str:
    """A model name as it appears in figure file names."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", facecolor="white")
    return buf.getvalue()


def _plain_log_ticks(axis) -> None:
    """Log axes labelled 0.4, 1, 2,000 rather than 4x10^-1: readers compare numbers, not exponents."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    lo, hi = axis.get_view_interval()
    wide = lo > 0 and hi / lo > 300  # more than ~2.5 decades: 1-2-5 labels would collide
    axis.set_major_locator(LogLocator(base=10, subs=(1.0,) if wide else (1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda x, _: u.num(x, 2)))
    axis.set_minor_formatter(NullFormatter())


def _style(ax, title: str) -> None:
    ax.set_title(title, loc="left", fontsize=11, fontweight="bold", color="#222")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.grid(color="#e5e5e5", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.tick_params(labelsize=8.5)


def throughput(section: ModelSection) -> bytes | None:
    cols = [(label, v) for label, v in columns(section) if v and v.throughput_samples_s]
    if not cols:
        return None
    fig = _figure(7.2, 0.45 * len(cols) + 1.0)
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
    _plain_log_ticks(ax.xaxis)
    _style(ax, f"{section.model}: throughput, training (hatched) vs inference")
    return _png(fig)


def latency(section: ModelSection) -> bytes | None:
    cols = [(label, v) for label, v in columns(section) if v and v.p50_ms is not None]
    if not cols:
        return None
    import numpy as np

    fig = _figure(7.2, 0.6 * len(cols) + 1.2)
    ax = fig.add_subplot()
    y = np.arange(len(cols))[::-1]
    height = 0.8 / len(PCTS)
    shades = ("#1f3b57", "#3b6ea5", "#7fa7d1", "#c3d6ea")
    for i, ((key, title), shade) in enumerate(zip(PCTS, shades)):
        vals = [v.latency.get(key) or 0 for _, v in cols]
        ax.barh(y + (1.5 - i) * height, vals, height=height, color=shade, label=title)
    ax.set_yticks(y, [label for label, _ in cols])
    ax.set_xscale("log")
    _plain_log_ticks(ax.xaxis)
    ax.set_xlabel("ms per training step / per request (log scale)", fontsize=9)
    ax.legend(fontsize=8, ncols=4, loc="lower left", bbox_to_anchor=(0, 1.0), frameon=False)
    _style(ax, f"{section.model}: step time and latency percentiles\n")
    return _png(fig)


def memory(section: ModelSection) -> bytes | None:
    """Training beside inference per device, one pair of bars per kind of figure (report/memory_compare.py):
    the working sets at the training batch (training's stacked by part), then the process totals."""
    bars: list[tuple[str, str, str, MemoryFigure]] = []  # (label, phase, device, figure)
    for d, c in section.memory_compare.items():
        for kind, short in (("working_set", "working set"), ("process_total", "process")):
            pair = [(phase, getattr(side, kind)) for phase, side in (("train", c.train), ("infer", c.infer))
                    if getattr(side, kind)]
            bars += [(f"{phase.capitalize()} {short}\n{DEVICE_LABEL[d]}"
                      + (f" · b{f.batch_size}" if kind == "working_set" else ""), phase, d, f)
                     for phase, f in pair]
    if not bars:
        return None
    fig = _figure(max(7.2, 1.2 * len(bars)), 3.4)
    ax = fig.add_subplot()
    gib = 1024**3
    scale, unit = (gib, "GiB") if max(f.bytes for *_, f in bars) >= gib / 4 else (1024**2, "MiB")
    for x, (label, phase, device, f) in enumerate(bars):
        parts = [(name, color, (f.parts or {}).get(name)) for name, color in PARTS]
        if phase == "train" and any(p[2] for p in parts):
            bottom = 0.0
            for name, color, value in parts:
                if value:
                    ax.bar(x, value / scale, bottom=bottom, color=color, width=0.6,
                           label=name if name not in ax.get_legend_handles_labels()[1] else None)
                    bottom += value / scale
        else:
            name = f"{f.kind.replace('_', ' ')} ({DEVICE_LABEL[device]})"
            ax.bar(x, f.bytes / scale, color=COLORS[device], width=0.6,
                   alpha=0.85 if f.kind == "working_set" else 0.45,
                   label=name if name not in ax.get_legend_handles_labels()[1] else None)
        ax.text(x, f.bytes / scale, u.nbytes(f.bytes), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=8)
    ax.set_ylabel(unit, fontsize=9)
    ax.margins(y=0.15)
    ax.legend(fontsize=8, frameon=False, loc="upper left")
    _style(ax, f"{section.model}: memory, like with like (working sets at one batch; process totals)")
    return _png(fig)


def ramp(section: ModelSection) -> bytes | None:
    ramps = section.ramps
    if not ramps:
        return None
    fig = _figure(7.2, 3.6)
    ax = fig.add_subplot()
    palette = ("#3b6ea5", "#76b900", "#d08770", "#b48ead", "#5e81ac", "#a3be8c")
    for i, r in enumerate(ramps):
        color = COLORS.get(r.device) if len({x.device for x in ramps}) == len(ramps) else palette[i % 6]
        xs = [p["throughput_samples_s"] for p in r.points]
        for key, style, tag in (("p50_ms", "-", "p50"), ("p99_ms", "--", "p99")):
            pts = [(x, p.get(key)) for x, p in zip(xs, r.points) if p.get(key) is not None]
            if pts:
                ax.plot([a for a, _ in pts], [b for _, b in pts], style, marker="o", markersize=3.5,
                        color=color, label=f"{r.label} {tag}")
        last = r.points[-1]
        if last.get("p50_ms") is not None:
            ax.annotate(f"{last.get('users')} users", (xs[-1], last["p50_ms"]), fontsize=7, color="#555",
                        textcoords="offset points", xytext=(4, -10))
    # log axes only where the values span a decade; a short ramp reads better on linear ones
    for axis, set_scale, values in ((ax.xaxis, ax.set_xscale, [x for r in ramps for x in
                                                                 (p["throughput_samples_s"] for p in r.points)]),
                                    (ax.yaxis, ax.set_yscale, [y for r in ramps for p in r.points
                                                               for y in (p.get("p50_ms"), p.get("p99_ms")) if y])):
        positive = [v for v in values if v and v > 0]
        if positive and max(positive) / min(positive) >= 10:
            set_scale("log")
            _plain_log_ticks(axis)
    ax.set_xlabel("throughput, samples/s", fontsize=9)
    ax.set_ylabel("latency, ms", fontsize=9)
    ax.legend(fontsize=7.5, frameon=False, loc="upper left")
    _style(ax, f"{section.model}: latency vs throughput as load ramps up")
    return _png(fig)


def frontier(section: ModelSection) -> bytes | None:
    """Per device, the server's latency-throughput frontier (its load ramp, batch-1 and saturated measurements)
    under the in-process limit: the batch-1 p50 floor and the best samples/s ceiling (trainserve limits)."""
    limits = section.limits
    devices = [d for d in section.devices_measured if d in limits]
    if not devices:
        return None
    fig = _figure(7.2 if len(devices) == 1 else 10.5, 4.6)
    axes = fig.subplots(1, len(devices), squeeze=False)[0]
    for ax, d in zip(axes, devices):
        color, lim = COLORS[d], limits[d]
        xs, ys = [], []
        for r in (r for r in section.ramps if r.device == d):
            pts = [(p["throughput_samples_s"], p["p50_ms"]) for p in r.points if p.get("p50_ms") is not None]
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
        for axis, set_scale, values in ((ax.xaxis, ax.set_xscale, xs), (ax.yaxis, ax.set_yscale, ys)):
            positive = [v for v in values if v and v > 0]
            if positive and max(positive) / min(positive) >= 10:
                set_scale("log")
                _plain_log_ticks(axis)
        ax.set_xlabel("throughput, samples/s", fontsize=9)
        ax.set_ylabel("p50 latency per request, ms", fontsize=9)
        ax.legend(fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncols=2)
        _style(ax, f"{section.model} · {DEVICE_LABEL[d]}: served vs in-process limit")
    return _png(fig)


def max_batch(section: ModelSection) -> bytes | None:
    mb = {d: v for d, v in section.max_batch.items() if v.train or v.infer}
    if not mb:
        return None
    rows = [(f"{phase} · {DEVICE_LABEL[d]} ({v.precision})", getattr(v, key) or 0, color)
            for d, v in mb.items()
            for phase, key, color in (("training", "train", "#d08770"), ("inference", "infer", "#5e81ac"))]
    fig = _figure(7.2, 0.9 + 0.42 * len(rows))
    ax = fig.add_subplot()
    labels = [r[0] for r in rows][::-1]
    values = [r[1] for r in rows][::-1]
    bars = ax.barh(labels, values, height=0.6, color=[r[2] for r in rows][::-1])
    for bar, value in zip(bars, values):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {u.num(value)}", va="center", fontsize=8)
    ax.set_xlabel("largest batch that fits, samples", fontsize=9)
    ax.margins(x=0.15)
    _style(ax, f"{section.model}: largest batch, training vs inference")
    return _png(fig)


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
    fig = _figure(9.0, 3.6)
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
    _plain_log_ticks(ax_t.yaxis)
    ax_t.set_ylabel("samples/s (log scale)", fontsize=9)
    ax_m.set_ylabel(f"peak memory, {unit}", fontsize=9)
    ax_t.legend(fontsize=7.5, frameon=False, loc="best")
    _style(ax_t, "throughput (best ringed)")
    _style(ax_m, "peak memory (inference: the server's)")
    fig.suptitle(title, fontsize=10, fontweight="bold")
    return _png(fig)
