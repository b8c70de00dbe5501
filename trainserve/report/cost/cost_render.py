"""The report's "What it costs" section (HTML and Markdown) and the short cost lines the CLI prints.

Reads only the Report's costs and plan (report/common/cost_sections.py); the assumptions (prices, what each measurement
held, the SLO) are printed beside the results they produced.
"""

from __future__ import annotations

import base64
from html import escape

from trainserve.core.speedup import DEVICE_LABEL
from trainserve.report.common import sentences
from trainserve.report.common import units as u
from trainserve.report.common.cost_sections import BASIS, SERVER, ModelCosts, RunCost
from trainserve.report.common.energy import marked
from trainserve.report.common.plot_canvas import alt_text, safe_name
from trainserve.report.common.sections import Report

# --- rows shared by both renderers ------------------------------------------------------------

INFER_HEADER = ["device", "where", "load", "p99", "held", "hardware $/M", "energy kWh/M", "energy $/M", "total $/M"]
TRAIN_HEADER = ["device", "where", "batch", "samples/s", "held", "hardware $/M", "energy kWh/M", "total $/M",
                "per run: hardware-hours", "per run: USD", "per run: kWh"]


def infer_rows(c: ModelCosts) -> list[list[str]]:
    rows = []
    for d, dev in c.infer.items():
        for r in dev.rows:
            users = "Poisson arrivals" if r.kind == SERVER else sentences.users(r.users)
            load = f"{u.num(r.throughput_samples_s)} samples/s, batch {r.batch_size} × {users} ({r.kind})"
            rows.append([DEVICE_LABEL[d], BASIS[r.basis], load, u.ms(r.p99_ms), sentences.held(dev),
                         u.usd(r.hardware_usd_per_million_inferences),
                         marked(u.kwh(r.kwh_per_million_inferences), r.energy_status)
                         if r.kwh_per_million_inferences is not None else r.energy_note,
                         marked(u.usd(r.energy_usd_per_million_inferences), r.energy_status)
                         if r.energy_usd_per_million_inferences is not None else u.MISSING,
                         u.usd(r.usd_per_million_inferences)])
    return rows


def train_rows(c: ModelCosts) -> list[list[str]]:
    rows = []
    for d, rs in c.train.items():
        for r in rs:
            run = r.run
            if isinstance(run, RunCost):
                hours = (f"{u.num(run.hardware_hours)} {r.unit}-hours" if run.hardware_hours is not None
                         else u.MISSING)
                usd = u.usd(run.usd)
                kwh = marked(u.kwh(run.kwh), r.energy_status) if run.kwh is not None else "not measured"
            else:  # the run's size is not known
                hours, usd, kwh = run.note, u.usd(None), u.MISSING
            rows.append([DEVICE_LABEL[d], BASIS[r.basis], f"{r.batch_size} {r.precision}",
                         u.num(r.throughput_samples_s), sentences.held(r), u.usd(r.hardware_usd_per_million_samples),
                         marked(u.kwh(r.kwh_per_million_samples), r.energy_status)
                         if r.kwh_per_million_samples is not None else r.energy_note,
                         u.usd(r.usd_per_million_samples), hours, usd, kwh])
    return rows


# --- HTML -------------------------------------------------------------------------------------

def html_section(report: Report, figures: dict[str, bytes]) -> str:
    c, plan = report.costs, report.plan
    if not c:
        return ""
    out = ["<section id='cost'><h2>What it costs</h2><div class='assume'><b>Assumptions</b><ul>",
           "".join(f"<li>{escape(a)}</li>" for a in sentences.assumptions(c)), "</ul></div>"]
    for name, m in c.models.items():
        if len(c.models) > 1:
            out.append(f"<h3>{escape(name)}</h3>")
        if m.infer:
            out.append("<h3>Serving: USD per million inferences</h3>" + _table(INFER_HEADER, infer_rows(m)))
            notes = [dev.slo_note for dev in m.infer.values() if dev.slo_note]
            out += [f"<p class='warn'>{escape(n)}</p>" for n in notes]
            out.append(f"<p>{escape(sentences.break_even_line(name, m))}</p>")
            out.append(f"<p>{escape(sentences.price_break_even_line(name, m))}</p>")
        else:
            out.append("<p class='muted'>Serving cost: not measured (no served load in this run).</p>")
        if m.train:
            out.append("<h3>Training: USD per million samples, and per run</h3>" + _table(TRAIN_HEADER, train_rows(m)))
            if m.run_samples:
                out.append(f"<p class='muted'>Per run: the run's own {u.num(m.run_samples)} samples (epochs × rows "
                           "per epoch) at that point's speed.</p>")
        else:
            out.append("<p class='muted'>Training cost: not measured.</p>")
        png = figures.get(f"cost-{safe_name(name)}.png")
        if png:
            out.append(f"<div class='figs'><img alt='{escape(alt_text('cost-', name))}' "
                       f"src='data:image/png;base64,{base64.b64encode(png).decode()}'></div>")
    if plan:
        out.append("<h3>Capacity plan</h3>")
        for mp in plan.models.values():
            out.append("<ul class='conclusions'>" + "".join(f"<li>{escape(x)}</li>" for x in mp.lines) + "</ul>")
    out.append("</section>")
    return "".join(out)


CSS = """
.assume { background:#f4f7fb; border-left:4px solid #3b6ea5; padding:6px 12px; margin:6px 0 12px; border-radius:4px;
          font-size:13px; overflow-wrap:anywhere; }
.assume ul { margin:4px 0; padding-left:18px; }
/* cost tables carry sentences (what was held, why energy is missing): they wrap instead of widening the page */
#cost td, #cost th { white-space:normal; min-width:0; }
#cost td:first-child { white-space:nowrap; }
"""


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<div class='tablewrap'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


# --- Markdown ---------------------------------------------------------------------------------

def md_section(report: Report, figures: dict[str, bytes], table) -> list[str]:
    """`table(header, rows)` is the Markdown table writer of render.py."""
    c, plan = report.costs, report.plan
    if not c:
        return []
    md = ["## What it costs", "", "**Assumptions**", ""] + [f"- {a}" for a in sentences.assumptions(c)] + [""]
    for name, m in c.models.items():
        if m.infer:
            md += [f"### {name}: serving, USD per million inferences", ""] + table(INFER_HEADER, infer_rows(m))
            md += [f"- ⚠ {dev.slo_note}" for dev in m.infer.values() if dev.slo_note]
            md += [sentences.break_even_line(name, m), "", sentences.price_break_even_line(name, m), ""]
        else:
            md += ["Serving cost: not measured (no served load in this run).", ""]
        if m.train:
            md += [f"### {name}: training, USD per million samples and per run", ""] + table(TRAIN_HEADER,
                                                                                          train_rows(m))
            if m.run_samples:
                md += [f"Per run: the run's own {u.num(m.run_samples)} samples (epochs × rows per epoch) at that "
                       "point's speed.", ""]
        else:
            md += ["Training cost: not measured.", ""]
        n = f"cost-{safe_name(name)}.png"
        if n in figures:
            md += [f"![{alt_text(n, name)}]({n})", ""]
    if plan:
        md += ["### Capacity plan", ""]
        for mp in plan.models.values():
            md += [f"- {x}" for x in mp.lines] + [""]
    return md
