"""The report as one self-contained HTML page (inline CSS, plots as data: URIs) and as Markdown.

Both read only the typed Report from analysis.py (report/common/sections.py) and the PNG bytes from model_plots.py,
so they show the same numbers. The HTML loads nothing from the network: it opens from disk, offline, anywhere.
"""

from __future__ import annotations

import base64
import re
from html import escape
from typing import Any

from trainserve.report.answers import answers_render

from trainserve.report.serving import attribution_render

from trainserve.report.cost import cost_render

from trainserve.report.serving import scenarios

from trainserve.core.servedparts import RampStep
from trainserve.core.telemetry import NOT_SAMPLED
from trainserve.report.common import units as u
from trainserve.report.common.plot_canvas import alt_text, safe_name
from trainserve.report.common.sections import ModelSection, Notice, RecordRow, Report
from trainserve.report.memory import memory_frontier as frontier_view
from trainserve.report.page.analysis import DEVICE_LABEL, columns
from trainserve.report.page.rows import GROUPS, SPEEDUPS, speedup_detail
from trainserve.report.serving import limits_section as lim
from trainserve.report.verdict import withheld

NOT_MEASURED = "not measured"
NOT_TRAINED_HERE = "not trained here"  # trainserve run --onnx: a model trained elsewhere
FIGURE_ORDER = ("throughput", "latency", "memory", "ramp", "frontier", "maxbatch", "sweep")


def _absent(model: ModelSection, label: str) -> str:
    """What an empty column says: training columns of a model trained elsewhere say so."""
    return NOT_TRAINED_HERE if label.startswith("Train") and not model.trained_here else NOT_MEASURED


def figures_of(model: str, figures: dict[str, bytes]) -> list[str]:
    names = [f"{kind}-{safe_name(model)}.png" for kind in FIGURE_ORDER]
    return [n for n in names if n in figures]


# --- HTML -----------------------------------------------------------------------------------

CSS = """
:root { --fg:#1d2330; --muted:#6b7280; --line:#e3e6ea; --bg:#f6f7f9; --cpu:#3b6ea5; --gpu:#76b900;
        --warn-bg:#fff7e6; --warn:#9a6400; }
* { box-sizing: border-box; }
body { margin:0; font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif;
       color:var(--fg); background:var(--bg); }
header { background:#161b26; color:#e8ebf0; padding:22px 32px 18px; }
header h1 { margin:0 0 4px; font-size:22px; font-weight:650; letter-spacing:.2px; }
header h1 code, h2 code { font-size:inherit; }
header .sub { color:#aab2c0; font-size:13px; }
header dl { display:grid; grid-template-columns:max-content 1fr; gap:2px 14px; margin:12px 0 0; font-size:12.5px; }
header dt { color:#8a93a3; } header dd { margin:0; color:#dfe3ea; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }
main { max-width:1280px; margin:0 auto; padding:20px 32px 48px; }
section { background:#fff; border:1px solid var(--line); border-radius:10px; padding:18px 22px; margin:18px 0; }
h2 { font-size:18px; margin:0 0 12px; } h3 { font-size:15px; margin:18px 0 8px; color:#333; }
.tiles { display:grid; grid-template-columns:repeat(3, 1fr); gap:12px; margin:4px 0 14px; }
.tile { border:1px solid var(--line); border-radius:8px; padding:12px 14px; background:#fbfcfd; }
.tile .k { font-size:12px; color:var(--muted); text-transform:uppercase; letter-spacing:.5px; }
.tile .v { font-size:30px; font-weight:700; color:#0f5132; font-variant-numeric: tabular-nums; }
.tile .v.small { font-size:22px; color:var(--fg); }
.tile.cpu { border-left:4px solid var(--cpu); } .tile.cuda { border-left:4px solid var(--gpu); }
.tile .v.nm { font-size:18px; color:var(--muted); font-weight:500; font-style:italic; padding:8px 0; }
.tile .d { font-size:12px; color:var(--muted); }
ul.conclusions { margin:6px 0 0; padding-left:20px; } ul.conclusions li { margin:4px 0; }
ul.headline { margin:0 0 12px; padding-left:20px; font-weight:600; } ul.headline li { margin:3px 0; }
ul.answers { margin:6px 0 0; padding-left:20px; } ul.answers li { margin:5px 0; } ul.answers li.nm { color:var(--muted); }
.tablewrap { overflow-x:auto; }
table { border-collapse:collapse; width:100%; font-size:13px; }
th, td { padding:5px 9px; border-bottom:1px solid var(--line); text-align:right; white-space:nowrap; }
th:first-child, td:first-child { text-align:left; }
/* the scenarios table has twelve columns, a record path and verdict words among them: they wrap */
#scenarios th, #scenarios td { white-space:normal; overflow-wrap:anywhere; padding:5px 6px; }
thead th { background:#f0f2f5; font-weight:600; vertical-align:bottom; border-bottom:2px solid #cfd5dd;
           white-space:normal; min-width:92px; line-height:1.3; }
thead th .dev { display:block; font-weight:500; color:var(--muted); font-size:12px; }
thead th.cpu { border-top:3px solid var(--cpu); } thead th.cuda { border-top:3px solid var(--gpu); }
thead th .nm { display:block; font-weight:400; font-style:italic; color:var(--muted); font-size:11.5px; }
tr.group td { background:#fafbfc; font-weight:600; color:#444; text-transform:uppercase; font-size:11px;
              letter-spacing:.6px; text-align:left; }
td { font-variant-numeric: tabular-nums; } td.nm { color:#b0b6bf; }
td.src { white-space:normal; word-break:break-all; } td.src code { font-size:11px; color:var(--muted); }
td.txt { white-space:normal; overflow-wrap:anywhere; min-width:7em; }
/* a long row label wraps rather than widen every table past its box */
section[id^=model-] .tablewrap tbody td:first-child { white-space:normal; min-width:12em; }
tbody tr:hover td { background:#f7fafc; }
.figs { display:grid; grid-template-columns:repeat(auto-fit, minmax(520px, 1fr)); gap:14px; margin-top:14px; }
.figs img { width:100%; border:1px solid var(--line); border-radius:6px; background:#fff; }
.warn { background:var(--warn-bg); border-left:4px solid #f0a020; padding:6px 10px; margin:6px 0; border-radius:4px; }
.warn code { color:var(--warn); }
.ok { color:#0f5132; } .muted { color:var(--muted); }
details summary { cursor:pointer; color:#334; font-weight:600; margin:8px 0; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size:12px; }
footer { color:var(--muted); font-size:12px; text-align:center; padding:12px; }
/* narrow screens: nothing wider than the screen; tables scroll inside their box, row labels stay */
header dd, .warn, td.src { overflow-wrap:anywhere; min-width:0; }
td.src, td.path { white-space:normal; word-break:normal; }
td.path code { overflow-wrap:anywhere; }
.figs { grid-template-columns:repeat(auto-fit, minmax(min(520px, 100%), 1fr)); }
@media (max-width: 720px) {
  header { padding:16px 14px 14px; } main { padding:10px 8px 32px; } section { padding:14px 10px; }
  header dl { grid-template-columns:1fr; } header dt { margin-top:4px; }
  .tiles { grid-template-columns:1fr 1fr; } .tile .v { font-size:24px; }
  thead th { min-width:76px; }
  .tablewrap th:first-child, .tablewrap td:first-child { position:sticky; left:0; z-index:1; background:#fff;
    white-space:normal; min-width:8em; max-width:10em; }
  .tablewrap thead th:first-child { background:#f0f2f5; }
  .tablewrap tr.group td:first-child { background:#fafbfc; max-width:none; }
}
@media (max-width: 420px) { .tiles { grid-template-columns:1fr; } }
.scrollhint { display:none; }
@media (max-width: 720px) {
  /* a phone: charts keep a legible size (their text is drawn for ~640 px) and the row scrolls sideways */
  .figs.scrollbox { display:flex; overflow-x:auto; gap:10px; scroll-snap-type:x mandatory; }
  .figs.scrollbox img { flex:0 0 auto; width:640px; max-width:none; scroll-snap-align:start; }
  .scrollhint { display:block; color:var(--muted); font-size:13px; margin:6px 0 4px; }
}
"""


def html_report(summary: Report, figures: dict[str, bytes], baseline: str = "") -> str:
    """The report page; `baseline`: the section that sets it against a baseline run (report/diff/diff_render.py)."""
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>trainserve report — {escape(summary.run)}</title><style>{CSS}{withheld.CSS}{cost_render.CSS}"
        "</style></head><body>",
        _html_header(summary), "<main>", scenarios.verdict_html(summary), answers_render.html_section(summary),
        _html_summary(summary), baseline,
        scenarios.html_section(summary), cost_render.html_section(summary, figures),
        frontier_view.html_section(summary.frontier, figures, _html_table, lambda n: _html_img(n, figures)),
        withheld.html_section(summary),
    ]
    for model in summary.models.values():
        parts.append(_html_model(model, figures))
    parts += [_html_warnings(summary), _html_records(summary), "</main>",
              "<footer>Made by <code>trainserve report</code>. Every number is read from the run's profile "
              "records; a dash or “not measured” means no record measured it.</footer></body></html>"]
    return "\n".join(parts)


def _html_header(s: Report) -> str:
    rows = []
    for m in s.machines:
        desc = [m.cpu_model or "CPU", f"{m.logical_cpus} logical CPUs" if m.logical_cpus else None,
                u.nbytes(m.memory_bytes) + " RAM" if m.memory_bytes else None,
                ", ".join(m.gpus) if m.gpus else "no GPU measured"]
        rows.append(("host " + m.hostname, " · ".join(x for x in desc if x)))
        if m.platform:
            rows.append(("platform", f"{m.platform} · Python {m.python or '?'}"))
    if s.versions:
        rows.append(("versions", "  ".join(f"{k} {v}" for k, v in s.versions.items())))
    card = s.card
    if card:
        rows.append(("model card", f"{card.get('family')} / {card.get('preset') or 'custom'} · "
                     f"{u.num(card.get('parameters'))} parameters · {card.get('dataset') or 'dataset ?'}"))
        if card.get("reference"):  # a model of the user's own, or an ONNX file trained elsewhere
            rows.append(("model", f"{card.get('name')}: {card['reference']} · sha256 {card.get('sha256')}"))
    dl = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in rows)
    return (f"<header><h1>Training vs serving — run <code>{escape(s.run)}</code></h1>"
            f"<div class='sub'>{len(s.records)} profile records · generated {escape(s.generated)}</div>"
            f"<dl>{dl}</dl></header>")


def _html_summary(s: Report) -> str:
    out = ["<section id='summary'><h2>Summary</h2>",
           "<ul class='headline'>" + "".join(f"<li>{escape(h.text)}</li>" for h in s.headline) + "</ul>"]
    for model in s.models.values():
        if len(s.models) > 1:
            out.append(f"<h3>{escape(model.model)}</h3>")
        tiles = ["<div class='tiles speedups'>"]
        for key, title, metric in SPEEDUPS:
            sp = getattr(model.speedups, key)
            value = (f"<div class='v'>{u.ratio(sp.value)}</div>" if sp.value is not None
                     else "<div class='v small err'>error: withheld</div>" if sp.error
                     else f"<div class='v nm'>{NOT_MEASURED}</div>")
            tiles.append(f"<div class='tile'><div class='k'>GPU vs CPU · {escape(title)}</div>{value}"
                         f"<div class='d'>{escape(metric)}<br>{escape(speedup_detail(sp))}"
                         f"{escape(lim.speedup_note(model, key))}</div></div>")
        tiles.append("</div>")
        # a run without a GPU side leads with what it measured; the GPU-vs-CPU tiles (all "not measured") follow
        compared = any(sp.value is not None or sp.error
                       for sp in (getattr(model.speedups, key) for key, _, _ in SPEEDUPS))
        out += [*tiles, _html_measured_tiles(model)] if compared else [_html_measured_tiles(model), *tiles]
    out.append("<ul class='conclusions'>" + "".join(f"<li>{escape(c)}</li>" for c in _after_headline(s)) + "</ul>")
    if s.errors:
        out.append(f"<p class='errbox'>{len(s.errors)} figure(s) beyond a physical bound withheld — "
                   "see <a href='#errors'>Errors</a>.</p>")
    n = len(s.warnings)
    if n:
        out.append(f"<p class='warn'>{n} warning{'s' if n != 1 else ''} — see <a href='#warnings'>Warnings</a>.</p>")
    out.append("</section>")
    return "".join(out)


def _after_headline(s: Report) -> list[str]:
    """The conclusions the headline does not state: each model's first is the headline's own (screened by the
    verdict there, so an INVALID figure's sentence is not repeated here)."""
    return [c for m in s.models.values() for c in m.conclusions[1:]]


def _html_measured_tiles(model: ModelSection) -> str:
    """What each device did, in three numbers: training speed, batch-1 latency, peak serving speed."""
    tiles = []
    for d in model.devices_measured:
        t = model.train[d]
        served = model.served(d)
        b1 = served and served.batch1
        sat = served and served.saturated
        for title, value, detail in (
                ("training", withheld.figure(t, "throughput_samples_s", lambda v: u.num(v.throughput_samples_s)),
                 "samples/s" + (f", batch {t.batch_size}" if t else "")),
                ("batch-1 latency", withheld.figure(b1, "p50_ms", lambda v: u.ms(v.p50_ms)),
                 "p50 per request" + lim.tile_note(model, d, "batch1")),
                ("serving, saturated", withheld.figure(sat, "throughput_samples_s",
                                                       lambda v: u.num(v.throughput_samples_s)),
                 "samples/s" + (f", batch {sat.batch_size} × {sat.concurrency} users" if sat else "")
                 + lim.tile_note(model, d, "saturated"))):
            shown = withheld.html_tile_value(value) or (f"<div class='v small'>{escape(value)}</div>"
                                                        if value and value != u.MISSING
                     else f"<div class='v nm'>{_absent(model, 'Train' if title == 'training' else '')}</div>")
            tiles.append(f"<div class='tile {d}'><div class='k'>{DEVICE_LABEL[d]} · {escape(title)}</div>{shown}"
                         f"<div class='d'>{escape(detail)}</div></div>")
    return f"<div class='tiles'>{''.join(tiles)}</div>" if tiles else ""


TXT_CHARS = 16  # a cell longer than this is words beside a figure (a meter's name, "(estimated)"): it may wrap


def _html_model(model: ModelSection, figures: dict[str, bytes]) -> str:
    name = escape(model.model)
    cols = columns(model)
    head = "".join(
        f"<th class='{v.device if v else _col_device(label)}'>{_two_lines(label)}"
        + ("" if v else f"<span class='nm'>{_absent(model, label)}</span>") + "</th>"
        for label, v in cols)
    body = []
    for group, rows in GROUPS:
        body.append(f"<tr class='group'><td colspan='{len(cols) + 1}'>{escape(group)}</td></tr>")
        for label, cell in rows:
            tds = []
            for _, v in cols:
                text = cell(v) if v else u.MISSING
                # a figure stays on one line; a sentence (a meter's name, what was held) wraps in its column
                cls = " class='nm'" if text in (u.MISSING, "") else " class='txt'" if len(text) > TXT_CHARS else ""
                tds.append(withheld.html_td(text) or f"<td{cls}>{escape(text)}</td>")
            body.append(f"<tr><td>{escape(label)}</td>{''.join(tds)}</tr>")
    sources = "".join(f"<td class='src'><code>{_path(v.source)}</code></td>" if v else "<td class='nm'>—</td>"
                      for _, v in cols)
    body.append(f"<tr><td>record</td>{sources}</tr>")
    missing = [DEVICE_LABEL[d] for d in ("cpu", "cuda") if d not in model.devices_measured]
    note = (f"<p class='muted'>{' and '.join(missing)}: {NOT_MEASURED} — this run has no records for it, "
            "so it has no column here.</p>") if missing else ""
    figs = "".join(
        f"<img alt='{escape(alt_text(n, model.model))}' src='data:image/png;base64,{base64.b64encode(figures[n]).decode()}'>"
        for n in figures_of(model.model, figures))
    return (f"<section id='model-{name}'><h2>Model <code>{name}</code>: training beside inference</h2>{note}"
            "<p class='scrollhint'>Swipe the table sideways for the other columns →</p>"
            f"<div class='tablewrap'><table><thead><tr><th></th>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>"
            + _html_limits(model) + _html_max_batch(model) + _html_time_to_accuracy(model)
            + _html_operating_points(model)
            + ("<p class='scrollhint'>Charts at a readable size: swipe sideways for the next →</p>"
               f"<div class='figs scrollbox'>{figs}</div>" if figs else "")
            + answers_render.html_tables(model)
            + _html_ramps(model) + attribution_render.html_section(model, figures) + "</section>")


def _html_img(name: str, figures: dict[str, bytes]) -> str:
    """A figure that belongs to no model (the memory frontier's), inline, with its alt text."""
    alt = "Model size against peak memory: training and inference per precision, the capacity a line"
    return (f"<div class='figs'><img alt='{escape(alt)}' "
            f"src='data:image/png;base64,{base64.b64encode(figures[name]).decode()}'></div>")


def _path(path: str) -> str:
    """A file path that may wrap after each '/' (never inside a name)."""
    return escape(path).replace("/", "/<wbr>")


def _two_lines(label: str) -> str:
    """"Infer batch 1 · GPU · triton" -> the kind on one line, device and backend under it."""
    kind, _, rest = label.partition(" · ")
    return f"{escape(kind)}<span class='dev'>{escape(rest)}</span>"


def _col_device(label: str) -> str:
    return "cuda" if "· GPU" in label else "cpu"


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<div class='tablewrap'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _html_limits(model: ModelSection) -> str:
    """Served beside onnxruntime in process (trainserve limits), and the points measured."""
    header, rows = lim.table(model)
    if not rows:
        return "<p class='muted'>In-process limits: not measured in this run (trainserve limits).</p>"
    out = ["<h3>Served vs onnxruntime in process (the limit)</h3>", _html_table(header, rows),
           ("<p class='muted'>Overhead: served batch-1 p50 minus in-process batch-1 p50. Efficiency: served "
            "saturated samples/s ÷ the best in-process samples/s.</p>")]
    for d in model.limits:
        h, r = lim.points_table(model, d)
        out.append(f"<details><summary>In-process points · {DEVICE_LABEL[d]}</summary>{_html_table(h, r)}</details>")
    return "".join(out)


def _html_max_batch(model: ModelSection) -> str:
    if not model.max_batch:
        return "<p class='muted'>Largest batch that fits: not measured in this run.</p>"
    rows = "".join(
        f"<tr><td>{DEVICE_LABEL[d]} ({escape(str(v.precision))})</td><td>{u.num(v.train)}</td>"
        f"<td>{u.num(v.infer)}</td><td>{u.ratio(v.ratio)}</td></tr>" for d, v in model.max_batch.items())
    return (f"<h3 id='max-batch-{escape(model.model)}'>Largest batch that fits</h3><div class='tablewrap'><table><thead><tr><th>device</th>"
            f"<th>training</th><th>inference</th><th>inference ÷ training</th></tr></thead><tbody>{rows}</tbody>"
            "</table></div>")


TTA_HEADER = ["device", "target", "reached", "time", "epochs", "energy", "test accuracy", "served batch-1 p50",
              "energy / inference"]
TTA_NOTE = ("Time and energy run from the first training step to the end of the evaluation that reached the "
            "target (trainserve train --target-accuracy); with several seeds, the mean ± sample sd over the seeds that "
            "reached it; energy is null where the device has no energy counter.")


def _tta_rows(model: ModelSection) -> list[list[str]]:
    rows = []
    for d, t in model.time_to_accuracy.items():
        reached = "yes" if t.reached else f"no, within {t.epochs_run} epochs"
        seconds = f"{u.num(t.time_to_accuracy_s)} s" if t.reached else u.MISSING
        seconds = _over_seeds(t.seeds) or seconds
        rows.append([f"{DEVICE_LABEL[d]} ({t.precision}, batch {t.batch_size})",
                     u.fraction(t.target_accuracy), reached, seconds, u.num(t.epochs_to_accuracy),
                     u.joules(t.energy_to_accuracy_j), u.fraction(t.test_accuracy),
                     u.ms(t.infer_batch1_p50_ms), u.joules(t.infer_energy_per_sample_j)])
    return rows


def _over_seeds(sd: dict[str, Any] | None) -> str | None:
    """"12.3 ± 1.2 s (3 seeds)": mean ± sample sd over the seeds that reached the target (train/seeds.py)."""
    if not sd or sd["n"] < 2:
        return None
    if sd["mean_seconds"] is None:
        return f"not reached by any of {sd['n']} seeds"
    spread = f" ± {u.num(sd['sd_seconds'])}" if sd["sd_seconds"] is not None else ""
    missed = f", {sd['n'] - sd['reached']} not reached" if sd["reached"] < sd["n"] else ""
    return f"{u.num(sd['mean_seconds'])}{spread} s ({sd['n']} seeds{missed})"


def _html_time_to_accuracy(model: ModelSection) -> str:
    rows = _tta_rows(model)
    if not rows:
        return ""
    return ("<h3>Time to accuracy</h3>" + _html_table(TTA_HEADER, rows)
            + f"<p class='muted'>{escape(TTA_NOTE)}</p>")


def _md_time_to_accuracy(model: ModelSection) -> list[str]:
    rows = _tta_rows(model)
    return ["### Time to accuracy", ""] + _md_table(TTA_HEADER, rows) + [TTA_NOTE, ""] if rows else []


OP_HEADER = ["device", "precision", "batch", "samples/s", "step p50", "step p99", "peak memory", "GPU util"]


def _op_util(device: str, util: float | None) -> str:
    """A GPU point's utilization, or that it was not sampled (never 0% for a point too short to read)."""
    if util is None:
        return NOT_SAMPLED if device == "cuda" else ""
    return f"{util:.0f}%"


def _op_rows(model: ModelSection) -> list[list[str]]:
    """The training sweep's points, one row each; the device's best marked."""
    rows = []
    for d, op in model.operating_points.items():
        for p in op.train:
            mark = " (best)" if p == op.train_best else ""
            rows.append([DEVICE_LABEL[d] + mark, p.precision, str(p.batch_size), u.num(p.throughput_samples_s),
                         u.ms(p.p50_ms), u.ms(p.p99_ms), u.nbytes(p.peak_bytes),
                         _op_util(d, p.gpu_util_mean_percent)])
    return rows


def _html_operating_points(model: ModelSection) -> str:
    rows = _op_rows(model)
    if not rows:
        return ""
    head = "".join(f"<th>{h}</th>" for h in OP_HEADER)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return (f"<h3 id='sweep-{escape(model.model)}'>Training sweep: operating points</h3><p class='muted'>Short runs per batch size and precision "
            "(warm-up left out); the best point is the one with the most samples/s.</p><div class='tablewrap'>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")


def _html_ramps(model: ModelSection) -> str:
    out = []
    for r in model.ramps:
        rows = "".join(
            f"<tr><td>{escape(_users_or_rate(p))}</td>" + "".join(
                withheld.html_td(t) or f"<td>{escape(t)}</td>" for t in _ramp_cells(p)) + "</tr>"
            for p in r.points)
        note = lim.ramp_note(model, r.device)
        out.append(f"<details><summary>Load ramp: {escape(r.label)} <span class='muted'>"
                   f"({escape(r.source)}){escape(' · ' + note if note else '')}</span></summary><div class='tablewrap'><table><thead><tr>"
                   "<th>users / rate</th><th>requests/s</th><th>samples/s</th><th>p50</th><th>p90</th><th>p99</th>"
                   f"</tr></thead><tbody>{rows}</tbody></table></div></details>")
    return "".join(out)


def _ramp_cells(p: RampStep) -> list[str]:
    """requests/s, samples/s, p50, p90, p99 of a ramp point; a withheld one is its error."""
    return [withheld.point_text(p, k, f) for k, f in (("requests_s", u.num), ("throughput_samples_s", u.num),
                                                      ("p50_ms", u.ms), ("p90_ms", u.ms), ("p99_ms", u.ms))]


def _users_or_rate(p: RampStep) -> str:
    if p.rate is not None:
        return f"{u.num(p.rate)} req/s offered"
    users = "?" if p.users is None else p.users
    return f"{users} user" if users == 1 else f"{users} users"


_FIGURES = re.compile(r"\d[\d.,]*")


def group_warnings(warnings: list[Notice]) -> list[tuple[str, list[Notice]]]:
    """Warnings that say the same thing but for their figures (one per sweep point, say), grouped:
    [(the first one's message, every warning of the group)], in order of first appearance."""
    groups: dict[str, list[Notice]] = {}
    for w in warnings:
        groups.setdefault(_FIGURES.sub("#", w.message), []).append(w)
    return [(ws[0].message, ws) for ws in groups.values()]


def _html_warnings(s: Report) -> str:
    if not s.warnings:
        return "<section id='warnings'><h2>Warnings</h2><p class='ok'>No record carries a warning.</p></section>"
    items = []
    for message, ws in group_warnings(s.warnings):
        if len(ws) == 1:
            items.append(f"<div class='warn'><code>{escape(ws[0].source)}</code> — {escape(message)}</div>")
            continue
        same = len({w.message for w in ws}) == 1
        rest = "".join(f"<li><code>{escape(w.source)}</code>{'' if same else ' — ' + escape(w.message)}</li>"
                       for w in ws)
        items.append(f"<div class='warn'>{len(ws)} records: {escape(message)}"
                     f"{'' if same else ' (figures of the first; each record has its own)'}"
                     f"<details><summary>which records</summary><ul>{rest}</ul></details></div>")
    groups = len(items)
    return (f"<section id='warnings'><h2>Warnings ({len(s.warnings)}, {groups} kind{'s' if groups != 1 else ''})"
            f"</h2>{''.join(items)}</section>")


def _html_records(s: Report) -> str:
    rows = "".join(
        f"<tr><td class='path'><code>{_path(r.source)}</code></td><td>{escape(r.phase)}</td>"
        f"<td>{escape(r.model)}</td>"
        f"<td>{DEVICE_LABEL[r.device]}</td><td>{escape(r.backend)}</td><td>{escape(r.precision)}</td>"
        f"<td>{r.batch_size}</td><td>{'' if r.concurrency is None else r.concurrency}</td>"
        f"{_html_rec(r, 'throughput_samples_s', u.num)}{_html_rec(r, 'p50_ms', u.ms)}{_html_rec(r, 'p99_ms', u.ms)}"
        f"<td>{u.nbytes(r.peak_bytes)}</td></tr>" for r in s.records)
    return ("<section id='records'><details><summary>All profile records "
            f"({len(s.records)})</summary><div class='tablewrap'><table><thead><tr><th>file</th><th>phase</th>"
            "<th>model</th><th>device</th><th>backend</th><th>precision</th><th>batch</th><th>users</th>"
            "<th>samples/s</th><th>p50</th><th>p99</th><th>peak memory</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></div></details></section>")


def _html_rec(r: RecordRow, key: str, fmt: Any) -> str:
    """A cell of the all-records table: the figure, or its error in red when it was withheld."""
    text = withheld.guard(key, lambda v: fmt(getattr(v, key)))(r)
    return withheld.html_td(text) or f"<td>{escape(text)}</td>"


# --- Markdown -------------------------------------------------------------------------------

def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or " "


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(_md_cell(h) for h in header) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines + [""]


def markdown_report(summary: Report, figures: dict[str, bytes], baseline: list[str] | None = None) -> str:
    s = summary
    md = [f"# Training vs serving — run `{s.run}`", "",
          f"{len(s.records)} profile records · generated {s.generated}", ""]
    for m in s.machines:
        md.append(f"- **host {m.hostname}**: {m.cpu_model or 'CPU'}, {m.logical_cpus or '?'} "
                  f"logical CPUs, {u.nbytes(m.memory_bytes)} RAM; GPU: "
                  f"{', '.join(m.gpus) if m.gpus else 'not measured'}")
    if s.versions:
        md.append("- **versions**: " + ", ".join(f"{k} {v}" for k, v in s.versions.items()))
    card = s.card or {}
    if card.get("reference"):  # a model of the user's own, or an ONNX file trained elsewhere
        md.append(f"- **model**: {card.get('name')}: `{card['reference']}` · sha256 `{card.get('sha256')}` · "
                  f"data: {card.get('dataset')}")
    md += [""] + scenarios.verdict_md(s)
    md += answers_render.md_section(s)
    md += ["## Summary", ""]
    md += [f"- **{h.text}**" for h in s.headline] + [f"- {c}" for c in _after_headline(s)] + [""]
    md += baseline or []
    md += scenarios.md_section(s, _md_table)
    md += withheld.md_section(s)
    rows = []
    for model in s.models.values():
        for key, title, metric in SPEEDUPS:
            sp = getattr(model.speedups, key)
            shown = "🔴 **error: withheld**" if sp.error else NOT_MEASURED
            rows.append([model.model, title, u.ratio(sp.value) if sp.value is not None else shown,
                         f"{metric}; {speedup_detail(sp)}{lim.speedup_note(model, key)}"])
    md += ["### GPU vs CPU speedups", ""] + _md_table(["model", "measurement", "speedup", "how"], rows)
    md += cost_render.md_section(s, figures, _md_table)
    md += frontier_view.md_section(s.frontier, figures, _md_table)
    for model in s.models.values():
        md += _md_model(model, figures)
    md += ["## Warnings", ""]
    md += [f"- `{ws[0].source}`: {m}" if len(ws) == 1 else
           f"- {len(ws)} records ({', '.join('`' + w.source + '`' for w in ws)}): {m}"
           for m, ws in group_warnings(s.warnings)] or ["No record carries a warning."]
    md += ["", "## All profile records", ""]
    md += _md_table(["file", "phase", "model", "device", "backend", "batch", "users", "samples/s", "p50", "p99"],
                    [[f"`{r.source}`", r.phase, r.model, DEVICE_LABEL[r.device], r.backend,
                      str(r.batch_size), "" if r.concurrency is None else str(r.concurrency),
                      *(withheld.md_text(withheld.guard(k, lambda v, k=k, f=f: f(getattr(v, k)))(r))
                        for k, f in (("throughput_samples_s", u.num), ("p50_ms", u.ms), ("p99_ms", u.ms)))]
                     for r in s.records])
    return "\n".join(md)


def _md_model(model: ModelSection, figures: dict[str, bytes]) -> list[str]:
    cols = columns(model)
    md = [f"## Model `{model.model}`: training beside inference", ""]
    missing = [DEVICE_LABEL[d] for d in ("cpu", "cuda") if d not in model.devices_measured]
    if missing:
        md += [f"{' and '.join(missing)}: {NOT_MEASURED} — this run has no records for it.", ""]
    rows = []
    for group, group_rows in GROUPS:
        rows.append([f"**{group}**"] + [""] * len(cols))
        for label, cell in group_rows:
            rows.append([label] + [(withheld.md_text(cell(v)) if v else u.MISSING) for _, v in cols])
    rows.append(["record"] + [f"`{v.source}`" if v else _absent(model, label) for label, v in cols])
    md += _md_table([""] + [label for label, _ in cols], rows)
    md += _md_limits(model)
    if model.max_batch:
        md += [f"<a id='max-batch-{model.model}'></a>", "", "### Largest batch that fits", ""]
        md += _md_table(["device", "training", "inference", "inference ÷ training"],
                        [[f"{DEVICE_LABEL[d]} ({v.precision})", u.num(v.train), u.num(v.infer),
                          u.ratio(v.ratio)] for d, v in model.max_batch.items()])
    else:
        md += ["Largest batch that fits: not measured.", ""]
    md += _md_time_to_accuracy(model)
    if _op_rows(model):
        md += [f"<a id='sweep-{model.model}'></a>", "", "### Training sweep: operating points", "",
               "Short runs per batch size and precision (warm-up left out); the best point has the most samples/s.", ""]
        md += _md_table(OP_HEADER, _op_rows(model))
    for r in model.ramps:
        md += [f"### Load ramp: {r.label} (`{r.source}`)", ""]
        note = lim.ramp_note(model, r.device)
        md += [f"{note[0].upper()}{note[1:]}.", ""] if note else []
        md += _md_table(["users / rate", "requests/s", "samples/s", "p50", "p90", "p99"],
                        [[_users_or_rate(p), *map(withheld.md_text, _ramp_cells(p))] for p in r.points])
    md += answers_render.md_tables(model, _md_table)
    md += [f"![{alt_text(n, model.model)}]({n})" for n in figures_of(model.model, figures)] + [""]
    md += attribution_render.md_section(model, figures, _md_table)
    return md


def _md_limits(model: ModelSection) -> list[str]:
    header, rows = lim.table(model)
    if not rows:
        return ["In-process limits: not measured in this run (trainserve limits).", ""]
    md = ["### Served vs onnxruntime in process (the limit)", ""] + _md_table(header, rows)
    md += [("Overhead: served batch-1 p50 minus in-process batch-1 p50. Efficiency: served saturated samples/s ÷ "
            "the best in-process samples/s."), ""]
    for d in model.limits:
        md += [f"#### In-process points · {DEVICE_LABEL[d]}", ""] + _md_table(*lim.points_table(model, d))
    return md
