"""The attribution figure: one stacked horizontal bar per served operating point, its bound beside it."""

from __future__ import annotations

from typing import Any

from trainserve.report.attribution import PART_LABELS
from trainserve.report.plots import _figure, _png, _style, safe_name

PART_COLORS = {"client": "#a3a8b3", "network": "#d8dee9", "frontend": "#d08770", "queue": "#ebcb8b",
               "compute": "#5e81ac"}


def figure_name(model: str) -> str:
    return f"attribution-{safe_name(model)}.png"


def attribution_figures(section: dict[str, Any]) -> dict[str, bytes]:
    png = attribution_chart(section)
    return {figure_name(section["model"]): png} if png is not None else {}


def attribution_chart(section: dict[str, Any]) -> bytes | None:
    """Mean latency of each point split into its parts (ms); the bound's kind written at the bar's end."""
    points = [p for p in section.get("attribution", []) if p.get("attribution")]
    if not points:
        return None
    fig = _figure(9.0, 1.2 + 0.32 * len(points))
    ax = fig.add_subplot(1, 1, 1)
    labels = [p["label"] for p in points]
    y = list(range(len(points)))[::-1]  # first point on top
    left = [0.0] * len(points)
    for part, name in PART_LABELS.items():
        widths = [p["attribution"].get(part) or 0.0 for p in points]
        ax.barh(y, widths, left=left, color=PART_COLORS[part], label=name, height=0.7)
        left = [a + b for a, b in zip(left, widths)]
    top = max(left) or 1.0
    for yi, total, p in zip(y, left, points):
        b = p.get("bound") or {}
        mark = "" if p["attribution"].get("consistent", True) else " (inconsistent)"
        ax.text(total + top * 0.01, yi, f"{b.get('kind', '?')}{mark}", va="center", fontsize=8, color="#333")
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlim(0, top * 1.18)
    ax.set_xlabel("mean latency per request (ms)")
    ax.legend(fontsize=8, loc="lower right", ncols=3)
    _style(ax, f"{section['model']}: where each request's time goes, and what bounded each point")
    return _png(fig)
