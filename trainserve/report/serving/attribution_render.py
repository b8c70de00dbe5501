"""The attribution part of a model's section, as HTML and as Markdown: the stacked bars, a table, the bounds."""

from __future__ import annotations

import base64
from html import escape
from typing import Any

from trainserve.report.common import sentences
from trainserve.report.common import units as u
from trainserve.report.common.sections import AttributionPoint, ModelSection
from trainserve.report.serving.attribution_plot import figure_name
from trainserve.report.serving.attribution_section import PART_LABELS

INTRO = ("Each served point's mean latency, split: the client's own time (its calls, timed against a null endpoint "
         "that answers at once, less that endpoint's own CPU), the server's front end, queue and compute (the "
         "server's own statistics over the same window), and network and the rest (what is left). Beside each "
         "point, what bounded it.")
HEADER = ["point", "mean latency", *PART_LABELS.values(), "server total", "mean batch", "bound"]


def _rows(model: ModelSection) -> list[tuple[AttributionPoint, list[str]]]:
    out = []
    for p in model.attribution:
        a = p.attribution
        cells = [p.label, u.ms(a and a.latency_ms), *(u.ms(a and getattr(a, k)) for k in PART_LABELS),
                 u.ms(a and a.server_ms), u.MISSING if a is None or a.mean_batch is None else f"{a.mean_batch:.2f}",
                 (p.bound or {}).get("kind", u.MISSING)]
        out.append((p, cells))
    return out


def html_section(model: ModelSection, figures: dict[str, bytes]) -> str:
    rows = _rows(model)
    if not rows:
        return ""
    name = figure_name(model.model)
    img = (f"<div class='figs'><img alt='{escape(name)}' src='data:image/png;base64,"
           f"{base64.b64encode(figures[name]).decode()}'></div>") if name in figures else ""
    head = "".join(f"<th>{escape(h)}</th>" for h in HEADER)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>" for _, cells in rows)
    bounds = "".join(f"<li>{escape(s)}</li>" for s in
                     sentences.capacities(model) + [sentences.bound(p) for p, _ in rows])
    return (f"<h3>Where the time goes, and what bounded each figure</h3><p class='muted'>{escape(INTRO)}</p>{img}"
            f"<div class='tablewrap'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
            f"<ul class='conclusions'>{bounds}</ul>")


def md_section(model: ModelSection, figures: dict[str, bytes], md_table: Any) -> list[str]:
    rows = _rows(model)
    if not rows:
        return []
    name = figure_name(model.model)
    md = ["### Where the time goes, and what bounded each figure", "", INTRO, ""]
    md += [f"![{name}]({name})", ""] if name in figures else []
    md += md_table(HEADER, [cells for _, cells in rows])
    md += [f"- {s}" for s in sentences.capacities(model) + [sentences.bound(p) for p, _ in rows]] + [""]
    return md
