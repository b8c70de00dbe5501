"""One chart per section of a diff (a model on a device): A and B side by side for each figure, with CIs.

Figures of one section have different units (requests/s, ms, s), so each bar is drawn as a percentage of A's
value (A = 100) and labelled with its own value: one axis, every figure readable, the CI scaled the same way.
"""

from __future__ import annotations

from trainserve.report.common import units as u
from trainserve.report.common.plot_canvas import house_style, new_figure, png_bytes
from trainserve.report.diff.run_diff import Change, Diff

COLOR_A, COLOR_B = "#8a93a3", "#3b6ea5"


def sections(diff: Diff) -> dict[str, list[Change]]:
    """The diff's changes by section title ("cnn on cpu"), in the diff's order."""
    out: dict[str, list[Change]] = {}
    for c in diff.changes:
        out.setdefault(f"{c.model} on {c.device}", []).append(c)
    return out


def section_chart(title: str, changes: list[Change], a_name: str, b_name: str) -> bytes | None:
    """Horizontal bars, B beside A (= 100) per figure, with 95% CIs where the runs have repeats."""
    rows = [c for c in changes if c.a != 0]
    if not rows:
        return None
    fig = new_figure(7.6, 0.55 * len(rows) + 1.3)
    ax = fig.add_subplot()
    labels = [f"{c.scenario} {c.name}" for c in rows][::-1]
    ys = list(range(len(rows)))
    h = 0.38
    a_vals = [100.0] * len(rows)
    b_vals = [c.b / c.a * 100 for c in rows][::-1]
    a_err = [(c.a_spread.half_width / c.a * 100) if c.a_spread else 0.0 for c in rows][::-1]
    b_err = [(c.b_spread.half_width / c.a * 100) if c.b_spread else 0.0 for c in rows][::-1]
    ax.barh([y + h / 2 for y in ys], a_vals, h, xerr=a_err, color=COLOR_A, label=f"A: {a_name}",
            error_kw={"elinewidth": 0.8, "capsize": 2})
    ax.barh([y - h / 2 for y in ys], b_vals, h, xerr=b_err, color=COLOR_B, label=f"B: {b_name}",
            error_kw={"elinewidth": 0.8, "capsize": 2})
    for y, c in zip(ys, rows[::-1]):
        mark = "" if not c.beyond_noise else (" ▲ better" if c.direction == "better" else " ▼ worse")
        ax.text(max(100.0, c.b / c.a * 100), y, f"  {u.num(c.a)} → {u.num(c.b)} {c.unit}{mark}", va="center",
                fontsize=7.5)
    ax.set_yticks(ys, labels)
    ax.axvline(100, color="#444", linewidth=0.7)
    top = max(max(b_vals) + max(b_err), 100 + max(a_err))
    ax.set_xlim(0, top * 1.9)
    ax.set_xlabel("% of A's value (A = 100)", fontsize=9)
    ax.legend(fontsize=8, loc="lower right", frameon=False)
    house_style(ax, f"{title}: B against A")
    return png_bytes(fig)


def charts(diff: Diff) -> dict[str, bytes]:
    """Each section's chart, keyed by its title."""
    out = {}
    for title, changes in sections(diff).items():
        png = section_chart(title, changes, diff.a.name, diff.b.name)
        if png is not None:
            out[title] = png
    return out
