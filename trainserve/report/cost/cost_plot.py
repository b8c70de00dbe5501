"""The cost chart: USD per million inferences against load, CPU servers against GPUs, break-even marked."""

from __future__ import annotations

from trainserve.core.speedup import DEVICE_LABEL
from trainserve.report.common import units as u
from trainserve.report.common.cost_sections import ModelCosts
from trainserve.report.common.plot_canvas import COLORS, house_style, new_figure, plain_log_ticks, png_bytes, safe_name
from trainserve.report.common.sections import ModelSection, Report
from trainserve.report.cost.breakeven import servers_needed
from trainserve.report.cost.cost_per_million import frontier, hardware_usd_per_million


def cost_figures(report: Report) -> dict[str, bytes]:
    """cost-<model>.png for each model with a served load, keyed by file name."""
    out = {}
    if report.costs is None:
        return out
    for name, c in report.costs.models.items():
        png = cost_chart(name, report.models[name], c, report.costs.slo_p99_ms)
        if png is not None:
            out[f"cost-{safe_name(name)}.png"] = png
    return out


def cost_chart(name: str, section: ModelSection, costs: ModelCosts, slo_p99_ms: float) -> bytes | None:
    """Each device's cost per million one-row inferences as load grows, buying whole servers that each carry
    their capacity within the SLO: solid up to what one server was measured to carry, dashed beyond (linear
    scaling assumed). Dots: the measured load points, one server each (hollow: p99 above the SLO)."""
    import numpy as np

    caps = costs.capacity_at_slo_req_s
    infer = costs.infer
    devices = [d for d in ("cpu", "cuda") if d in infer and infer[d].usd_per_hour]
    if not devices:
        return None
    be = costs.break_even
    points = {d: [p for p in frontier(section, d) if p.batch_size == 1] for d in devices}
    loads = [p.throughput_samples_s for d in devices for p in points[d]]
    if not loads:
        return None
    lo = max(min(loads) / 2, 1e-3)
    hi = max(be.max_load_req_s, max(loads) * 2)
    fig = new_figure(7.6, 4.2)
    ax = fig.add_subplot()
    xs = np.geomspace(lo, hi, 600)
    for d in devices:
        color, per_hour = COLORS[d], infer[d].usd_per_hour
        for p in points[d]:
            ok = p.meets(slo_p99_ms)
            ax.plot(p.throughput_samples_s, hardware_usd_per_million(per_hour, p.throughput_samples_s), "o",
                    color=color, markerfacecolor=color if ok else "white", markersize=5, zorder=3)
        cap = caps.get(d)
        if not cap:
            continue
        ys = [hardware_usd_per_million(servers_needed(x, cap) * per_hour, x) for x in xs]
        inside = xs <= cap
        unit = "server" if d == "cpu" else "GPU"
        ax.plot(xs[inside], np.array(ys)[inside], "-", color=color, linewidth=1.6,
                label=f"{DEVICE_LABEL[d]}: one {unit} ({u.usd(per_hour)}/h, {u.num(cap)} req/s within SLO)")
        ax.plot(xs[~inside], np.array(ys)[~inside], "--", color=color, linewidth=1.2,
                label=f"{DEVICE_LABEL[d]}: more {unit}s (linear scaling assumed)")
    if be.break_even_req_s is not None:
        x = max(be.break_even_req_s, lo)
        ax.axvline(x, color="#c0392b", linestyle=":", linewidth=1.3,
                   label=f"break-even: GPU cheaper above {u.num(be.break_even_req_s)} req/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    plain_log_ticks(ax.xaxis)
    plain_log_ticks(ax.yaxis)
    # no break-even: say why under the axis, where it cannot hide a curve
    note = "" if be.break_even_req_s is not None or not be.note else f"\n{be.note}"
    ax.set_xlabel(f"load, requests/s (one row each){note}", fontsize=9)
    ax.set_ylabel("USD per million inferences (hardware)", fontsize=9)
    ax.legend(fontsize=7.5, frameon=False, loc="upper right")
    house_style(ax, f"{name}: cost per million inferences vs load, p99 ≤ {slo_p99_ms:g} ms")
    return png_bytes(fig)
