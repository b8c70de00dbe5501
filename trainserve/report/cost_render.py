"""The report's "What it costs" section (HTML and Markdown) and the short cost lines the CLI prints.

Reads only the Report's costs and plan (cost.py's and plan.py's dicts, as summary.json has them); the assumptions (prices, what each measurement held,
the SLO) are printed beside the results they produced.
"""

from __future__ import annotations

import base64
import json
from html import escape
from typing import Any

from trainserve.core.speedup import DEVICE_LABEL
from trainserve.report import units as u
from trainserve.report.breakeven import sentence
from trainserve.report.cost import SERVER
from trainserve.report.plots import alt_text, safe_name
from trainserve.report.sections import Report

BASIS = {"batch1": "batch 1, one user", "saturated": "saturation (most samples/s)", "slo": "highest load within SLO",
         "best": "best operating point", "as_trained": "as trained (the run's record)"}


# --- rows shared by both renderers ------------------------------------------------------------

INFER_HEADER = ["device", "where", "load", "p99", "held", "hardware $/M", "energy kWh/M", "energy $/M", "total $/M"]
TRAIN_HEADER = ["device", "where", "batch", "samples/s", "held", "hardware $/M", "energy kWh/M", "total $/M",
                "per run: hardware-hours", "per run: USD", "per run: kWh"]


def infer_rows(c: dict[str, Any]) -> list[list[str]]:
    rows = []
    for d, dev in c["infer"].items():
        for r in dev["rows"]:
            users = ("Poisson arrivals" if r["kind"] == SERVER else "? users" if r["users"] is None
                     else f"{r['users']} user" + ("" if r["users"] == 1 else "s"))
            load = f"{u.num(r['throughput_samples_s'])} samples/s, batch {r['batch_size']} × {users} ({r['kind']})"
            rows.append([DEVICE_LABEL[d], BASIS[r["basis"]], load, u.ms(r["p99_ms"]), _held(dev),
                         u.usd(r["hardware_usd_per_million_inferences"]),
                         u.kwh(r["kwh_per_million_inferences"]) if r["kwh_per_million_inferences"] is not None
                         else r["energy_note"], u.usd(r["energy_usd_per_million_inferences"]),
                         u.usd(r["usd_per_million_inferences"])])
    return rows


def train_rows(c: dict[str, Any]) -> list[list[str]]:
    rows = []
    for d, rs in c["train"].items():
        for r in rs:
            run = r["run"]
            hours = (f"{u.num(run['hardware_hours'])} {r['unit']}-hours" if run.get("hardware_hours") is not None
                     else run.get("note", u.MISSING))
            rows.append([DEVICE_LABEL[d], BASIS[r["basis"]], f"{r['batch_size']} {r['precision']}",
                         u.num(r["throughput_samples_s"]), _held(r), u.usd(r["hardware_usd_per_million_samples"]),
                         u.kwh(r["kwh_per_million_samples"]) if r["kwh_per_million_samples"] is not None
                         else r["energy_note"], u.usd(r["usd_per_million_samples"]), hours, u.usd(run.get("usd")),
                         u.kwh(run.get("kwh")) if run.get("kwh") is not None else ("not measured" if run.get("samples")
                                                                                  else u.MISSING)])
    return rows


def _held(x: dict[str, Any]) -> str:
    if x.get("units") is None:
        return "not known"
    if x.get("usd_per_hour") is None:
        return f"{x['units']} {x['unit']}{'s' if x['units'] != 1 else ''}, no price"
    return f"{x['units']} {x['unit']}{'s' if x['units'] != 1 else ''}, {u.usd(x['usd_per_hour'])}/h"


def assumptions(c: dict[str, Any]) -> list[str]:
    p = c["prices"]
    return [
        f"CPU: {u.price(p['cpu_core_hour_usd'])} per logical-CPU-hour — {p['cpu_offer']}.",
        *gpu_price_lines(c),
        f"Electricity: {u.price(p['kwh_usd'])} per kWh — {p['kwh_offer']}.",
        f"Source: {p['source']}; date: {p['date']}.",
        "Held: a training run holds its torch threads' cores or its GPUs; a CPU server every logical CPU of its "
        "host (it was not pinned); a GPU server its GPU. Hardware $ = held × price per hour ÷ throughput.",
        f"SLO: p99 ≤ {c['slo_p99_ms']:g} ms, over one-row requests with no failed request.",
        "Energy: the device's own measured energy (NVML for a GPU, RAPL for a CPU) × the kWh price; cloud prices "
        "already include power, so it is what electricity adds on owned hardware. Elsewhere: not measured.",
    ]


def gpu_price_lines(c: dict[str, Any]) -> list[str]:
    """One line per GPU the models ran on: its price per GPU-hour and where that price comes from."""
    lines = []
    for gp in {json.dumps(m["gpu_price"], sort_keys=True): m["gpu_price"] for m in c["models"].values()
               if m.get("gpu_price")}.values():
        gpu = gp["device_name"] or "name not recorded"
        if gp["usd_per_gpu_hour"] is None:
            lines.append(f"GPU ({gpu}): {gp['note']}.")
        elif gp["origin"] == "user":
            lines.append(f"GPU ({gpu}): {u.price(gp['usd_per_gpu_hour'])} per GPU-hour — {gp['offer']}.")
        else:
            lines.append(f"GPU ({gpu}): {u.price(gp['usd_per_gpu_hour'], 4)} per GPU-hour (the host's share included) — "
                         f"{gp['offer']}; source: {gp['source']}; date: {gp['date']}.")
    return lines


def price_break_even_line(name: str, m: dict[str, Any]) -> str | None:
    be = m.get("gpu_price_break_even")
    if not be:
        return None
    return sentence(name, be, (m.get("gpu_price") or {}).get("device_name") or "GPU")


def break_even_line(name: str, c: dict[str, Any]) -> str:
    be = c["break_even"]
    caps = c["capacity_at_slo_req_s"]
    if be.get("break_even_req_s") is not None:
        beyond = [DEVICE_LABEL[d] for d, cap in caps.items() if be["break_even_req_s"] > cap]
        note = (f" (beyond one {' and one '.join(beyond)} server's measured capacity: more servers assume linear "
                "scaling)") if beyond else ""
        return (f"{name}: serving on the GPU costs less than on CPU servers from {u.num(be['break_even_req_s'])} "
                f"req/s up{note}.")
    return f"{name}: break-even — {be['note']}."


def cost_lines(c: dict[str, Any] | None, plan: dict[str, Any] | None) -> list[str]:
    """A few lines for the terminal: the cheapest unit costs and the break-even, per model; then the plan."""
    if not c:
        return []
    lines = []
    for name, m in c["models"].items():
        for d, dev in m["infer"].items():
            parts = [f"{u.usd(r['usd_per_million_inferences'])}/M inferences at {BASIS[r['basis']]} "
                     f"({u.num(r['throughput_samples_s'])}/s)" for r in dev["rows"] if r["basis"] != "batch1"]
            lines.append(f"cost {name} · {DEVICE_LABEL[d]} serving ({_held(dev)}): " + "; ".join(parts))
        for d, rows in m["train"].items():
            r = rows[0]
            run = r["run"]
            per_run = (f"; the run ({u.num(run['samples'])} samples): {u.usd(run['usd'])}, "
                       f"{u.num(run['hardware_hours'])} {r['unit']}-hours" if run.get("usd") is not None else "")
            lines.append(f"cost {name} · {DEVICE_LABEL[d]} training at {BASIS[r['basis']]} (batch "
                         f"{r['batch_size']} {r['precision']}): {u.usd(r['usd_per_million_samples'])}/M samples"
                         f"{per_run}")
        if m["infer"]:
            lines.append("cost " + break_even_line(name, m))
            if price_break_even_line(name, m):
                lines.append("cost " + price_break_even_line(name, m))
    if plan:
        for name, m in plan["models"].items():
            lines += [f"plan {name}: {line}" for line in m["lines"]]
    return lines


# --- HTML -------------------------------------------------------------------------------------

def html_section(report: Report, figures: dict[str, bytes]) -> str:
    c, plan = report.costs, report.plan
    if not c:
        return ""
    out = ["<section id='cost'><h2>What it costs</h2><div class='assume'><b>Assumptions</b><ul>",
           "".join(f"<li>{escape(a)}</li>" for a in assumptions(c)), "</ul></div>"]
    for name, m in c["models"].items():
        if len(c["models"]) > 1:
            out.append(f"<h3>{escape(name)}</h3>")
        if m["infer"]:
            out.append("<h3>Serving: USD per million inferences</h3>" + _table(INFER_HEADER, infer_rows(m)))
            notes = [dev["slo_note"] for dev in m["infer"].values() if dev["slo_note"]]
            out += [f"<p class='warn'>{escape(n)}</p>" for n in notes]
            out.append(f"<p>{escape(break_even_line(name, m))}</p>")
            if price_break_even_line(name, m):
                out.append(f"<p>{escape(price_break_even_line(name, m))}</p>")
        else:
            out.append("<p class='muted'>Serving cost: not measured (no served load in this run).</p>")
        if m["train"]:
            out.append("<h3>Training: USD per million samples, and per run</h3>" + _table(TRAIN_HEADER, train_rows(m)))
            if m["run_samples"]:
                out.append(f"<p class='muted'>Per run: the run's own {u.num(m['run_samples'])} samples (epochs × rows "
                           "per epoch) at that point's speed.</p>")
        else:
            out.append("<p class='muted'>Training cost: not measured.</p>")
        png = figures.get(f"cost-{safe_name(name)}.png")
        if png:
            out.append(f"<div class='figs'><img alt='{escape(alt_text('cost-', name))}' "
                       f"src='data:image/png;base64,{base64.b64encode(png).decode()}'></div>")
    if plan:
        out.append("<h3>Capacity plan</h3>")
        for name, m in plan["models"].items():
            out.append("<ul class='conclusions'>" + "".join(f"<li>{escape(x)}</li>" for x in m["lines"]) + "</ul>")
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
    md = ["## What it costs", "", "**Assumptions**", ""] + [f"- {a}" for a in assumptions(c)] + [""]
    for name, m in c["models"].items():
        if m["infer"]:
            md += [f"### {name}: serving, USD per million inferences", ""] + table(INFER_HEADER, infer_rows(m))
            md += [f"- ⚠ {dev['slo_note']}" for dev in m["infer"].values() if dev["slo_note"]]
            md += [break_even_line(name, m), ""]
            if price_break_even_line(name, m):
                md += [price_break_even_line(name, m), ""]
        else:
            md += ["Serving cost: not measured (no served load in this run).", ""]
        if m["train"]:
            md += [f"### {name}: training, USD per million samples and per run", ""] + table(TRAIN_HEADER,
                                                                                          train_rows(m))
            if m["run_samples"]:
                md += [f"Per run: the run's own {u.num(m['run_samples'])} samples (epochs × rows per epoch) at that "
                       "point's speed.", ""]
        else:
            md += ["Training cost: not measured.", ""]
        n = f"cost-{safe_name(name)}.png"
        if n in figures:
            md += [f"![{alt_text(n, name)}]({n})", ""]
    if plan:
        md += ["### Capacity plan", ""]
        for m in plan["models"].values():
            md += [f"- {x}" for x in m["lines"]] + [""]
    return md
