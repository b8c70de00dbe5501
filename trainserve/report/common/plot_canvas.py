"""What every figure of the report shares: the matplotlib Agg canvas (no display, no pyplot state), PNG bytes,
the house style, the device colours, figure file names and their alt text."""

from __future__ import annotations

import io

from trainserve.report.common import units as u

COLORS = {"cpu": "#3b6ea5", "cuda": "#76b900"}  # GPU in NVIDIA green, CPU in steel blue


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


def new_figure(width: float, height: float):
    """A figure on matplotlib's Agg canvas (inches), laid out to fit its labels."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    return fig


def png_bytes(fig) -> bytes:
    """The figure as PNG bytes on white, as the page embeds and the report folder keeps it."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", facecolor="white")
    return buf.getvalue()


def plain_log_ticks(axis) -> None:
    """Log axes labelled 0.4, 1, 2,000 rather than 4x10^-1: readers compare numbers, not exponents."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    lo, hi = axis.get_view_interval()
    wide = lo > 0 and hi / lo > 300  # more than ~2.5 decades: 1-2-5 labels would collide
    axis.set_major_locator(LogLocator(base=10, subs=(1.0,) if wide else (1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda x, _: u.num(x, 2)))
    axis.set_minor_formatter(NullFormatter())


def house_style(ax, title: str) -> None:
    """The report's look: a bold left title, no top or right spine, a light grid behind the data."""
    ax.set_title(title, loc="left", fontsize=11, fontweight="bold", color="#222")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.grid(color="#e5e5e5", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.tick_params(labelsize=8.5)

