"""The memory frontier's chart: model size against peak memory, one chart per device, its capacity a line."""

from __future__ import annotations

from pathlib import Path

from trainserve.core.frontier_result import FrontierResult, load_all
from trainserve.report.common.plot_canvas import house_style, new_figure, png_bytes
from trainserve.report.memory.memory_frontier import DeviceFrontier, figure_name

_COLORS = {"fp32": "#3b6ea5", "bf16": "#d08770", "fp16": "#76b900", "int8": "#b48ead"}


def frontier_figures(run_dir: Path, sections: list[DeviceFrontier]) -> dict[str, bytes]:
    """modelsize-<device>.png for each device with a frontier result."""
    by_device = {s.device: s for s in sections}
    return {figure_name(r.device): chart(r, by_device.get(r.device)) for r in load_all(run_dir)
            if any(p.peak_bytes for p in r.points)}


def chart(r: FrontierResult, section: DeviceFrontier | None) -> bytes:
    """Training (solid; dashed with checkpointing; dash-dot: one rank of FSDP2 sharding, modelled) and inference
    (dotted) peaks against parameters, log-log; crosses: sizes that did not fit; stars: each series' largest that
    fits (hollow when only predicted)."""
    fig = new_figure(7.2, 4.4)
    ax = fig.add_subplot()
    for name in r.series():
        pts = sorted((p for p in r.points if p.series == name and p.peak_bytes), key=lambda p: p.params)
        if not pts:
            continue
        first = pts[0]
        style = ":" if first.mode == "infer" else "-." if first.ranks > 1 else "--" if first.checkpointing else "-"
        color = _COLORS.get(first.precision, "#555")
        ok = [p for p in pts if p.status == "fits"]
        ax.plot([p.params for p in ok], [p.peak_bytes / 2**30 for p in ok], style, marker="o", markersize=3,
                color=color, label=name + (" per rank (modelled)" if first.source == "modelled" else ""))
        bad = [p for p in pts if p.status == "does_not_fit"]
        ax.plot([p.params for p in bad], [p.peak_bytes / 2**30 for p in bad], "x", color=color, markersize=7)
    if section is not None:
        for s in section.series:
            if s.edge_params and s.edge_bytes:
                hollow = s.edge_source == "predicted"
                ax.plot([s.edge_params], [s.edge_bytes / 2**30], "*", markersize=11,
                        color=_COLORS.get(s.precision, "#555"), markerfacecolor="none" if hollow else None)
    if r.capacity_bytes:
        ax.axhline(r.capacity_bytes / 2**30, color="#bf616a", linewidth=1.2)
        ax.annotate(f"capacity {r.capacity_bytes / 2**30:.3g} GiB", (0.01, r.capacity_bytes / 2**30),
                    xycoords=("axes fraction", "data"), fontsize=8, color="#bf616a", va="bottom")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("parameters", fontsize=9)
    ax.set_ylabel("peak memory (GiB)", fontsize=9)
    ax.legend(fontsize=7.5, frameon=False, ncol=2)
    house_style(ax, f"Model size against peak memory, batch {r.batch_size}: {r.device_name}")
    return png_bytes(fig)
