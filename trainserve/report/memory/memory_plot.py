"""The memory figure of a model: training beside inference per device, like with like (memory/memory_compare.py).
None when there is nothing measured to draw."""

from __future__ import annotations

from trainserve.core.speedup import DEVICE_LABEL
from trainserve.report.common import units as u
from trainserve.report.common.plot_canvas import COLORS, house_style, new_figure, png_bytes
from trainserve.report.common.sections import MemoryFigure, ModelSection

PARTS = (("weights", "#4c566a"), ("gradients", "#d08770"), ("optimizer", "#b48ead"), ("activations", "#ebcb8b"))


def memory(section: ModelSection) -> bytes | None:
    """Training beside inference per device, one pair of bars per kind of figure (report/memory/memory_compare.py):
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
    fig = new_figure(max(7.2, 1.2 * len(bars)), 3.4)
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
    house_style(ax, f"{section.model}: memory, like with like (working sets at one batch; process totals)")
    return png_bytes(fig)

