"""The attribution figure: one stacked horizontal bar per served operating point, its bound beside it."""

from __future__ import annotations

from typing import Any

from trainserve.core.speedup import DEVICE_LABEL
from trainserve.report.common.plot_canvas import house_style, new_figure, png_bytes, safe_name
from trainserve.report.common.sections import AttributionPoint, ModelSection
from trainserve.report.serving.attribution_section import PART_LABELS

PART_COLORS = {"client": "#a3a8b3", "network": "#d8dee9", "frontend": "#d08770", "queue": "#ebcb8b",
               "compute": "#5e81ac"}


def figure_name(model: str) -> str:
    return f"attribution-{safe_name(model)}.png"


def attribution_figures(section: ModelSection) -> dict[str, bytes]:
    png = attribution_chart(section.model, section.attribution)
    return {figure_name(section.model): png} if png is not None else {}


def attribution_chart(model: str, attribution: list[AttributionPoint]) -> bytes | None:
    """Mean latency of each point split into its parts (ms), one panel per device (their scales differ
    tenfold); the bound's kind written at the bar's end."""
    points = [p for p in attribution if p.attribution]
    if not points:
        return None
    devices = [d for d in ("cpu", "cuda") if any(p.device == d for p in points)]
    counts = [sum(p.device == d for p in points) for d in devices]
    fig = new_figure(9.0, 1.4 + 0.34 * len(points) + 0.5 * len(devices))
    axes = fig.subplots(len(devices), 1, squeeze=False, height_ratios=[c + 1 for c in counts])[:, 0]
    for ax, d in zip(axes, devices):
        _panel(ax, [p for p in points if p.device == d])
        house_style(ax, f"{model} on the {DEVICE_LABEL[d]}: where each request's time goes, and its bound")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(PART_LABELS), fontsize=8, frameon=False)
    return png_bytes(fig)


def _panel(ax: Any, points: list[AttributionPoint]) -> None:
    y = list(range(len(points)))[::-1]  # first point on top
    left = [0.0] * len(points)
    for part, name in PART_LABELS.items():
        widths = [getattr(p.attribution, part) or 0.0 for p in points]
        ax.barh(y, widths, left=left, color=PART_COLORS[part], label=name, height=0.7)
        left = [a + b for a, b in zip(left, widths)]
    top = max(left) or 1.0
    for yi, total, p in zip(y, left, points):
        b = p.bound or {}
        mark = " (inconsistent)" if p.attribution and not p.attribution.consistent else ""
        ax.text(total + top * 0.01, yi, f"{b.get('kind', 'bound not measured')}{mark}", va="center", fontsize=8,
                color="#333")
    ax.set_yticks(y, [p.label for p in points], fontsize=8)
    ax.set_xlim(0, top * 1.2)
    ax.set_xlabel("mean latency per request (ms)", fontsize=8.5)
