"""The report's "Answers" section, and the tables its answers link to that no other section draws:
dynamic batching on beside off, and the training data path (HTML and Markdown)."""

from __future__ import annotations

from collections.abc import Callable
from html import escape

from trainserve.core.speedup import DEVICE_LABEL
from trainserve.report.common import units as u
from trainserve.report.common.sections import DataPathPoint, ModelSection, Report, SharedRate

Table = Callable[[list[str], list[list[str]]], list[str]]

BATCHING_HEADER = ["device", "batching", "served model", "capacity, req/s within the SLO", "p99 there",
                   "mean batch", "p50 / p99 at the shared rate", "record"]
DATA_HEADER = ["device", "placement", "batch", "precision", "samples/s", "waiting for data",
               "host data time per step", "record"]


def anchor(name: str, model: str) -> str:
    return f"{name}-{model}"


def html_section(s: Report) -> str:
    items = []
    for a in s.answers:
        link = f" <a href='{escape(a.link)}'>→ figures</a>" if a.link and a.measured else ""
        how = f" Measured by: <code>{escape(a.command)}</code>." if a.command else ""
        cls = "" if a.measured else " class='nm'"
        items.append(f"<li{cls}><b>{escape(_capital(a.question))}?</b> {escape(_sentence(a.text))}{how}{link}</li>")
    return f"<section id='answers'><h2>Answers</h2><ul class='answers'>{''.join(items)}</ul></section>"


def md_section(s: Report) -> list[str]:
    md = ["<a id='answers'></a>", "## Answers", ""]
    for a in s.answers:
        link = f" ([figures]({a.link}))" if a.link and a.measured else ""
        how = f" Measured by: `{a.command}`." if a.command else ""
        md.append(f"- **{_capital(a.question)}?** {_sentence(a.text)}{how}{link}")
    return md + [""]


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _batching_rows(m: ModelSection) -> list[list[str]]:
    rows = []
    for d, b in m.batching.items():
        for label, side in (("dynamic, as exported", b.on), ("off (max batch 1)", b.off)):
            if side is None:
                rows.append([DEVICE_LABEL[d], label, u.MISSING, "not measured", "", "", "", ""])
                continue
            capacity = u.num(side.capacity_req_s) + (" (at least)" if side.lower_bound else "")
            mean = f"{side.mean_batch:.1f}" if side.mean_batch is not None else u.MISSING
            rows.append([DEVICE_LABEL[d], label, side.model, capacity, u.ms(side.p99_ms), mean,
                         _shared(b.shared_rate, side is b.on), side.source])
    return rows


def _shared(sr: SharedRate | None, on: bool) -> str:
    if sr is None:
        return "not measured"
    p50, p99 = (sr.on_p50_ms, sr.on_p99_ms) if on else (sr.off_p50_ms, sr.off_p99_ms)
    return f"{u.ms(p50)} / {u.ms(p99)} at {u.num(sr.rate_req_s)} req/s"


def _data_rows(m: ModelSection) -> list[list[str]]:
    return [[DEVICE_LABEL[d], _placement(p), str(p.batch_size), p.precision, u.num(p.throughput_samples_s),
             u.MISSING if p.data_wait_share is None else f"{100 * p.data_wait_share:.1f}% of step time",
             u.ms(p.host_data_ms), p.source]
            for d, dp in m.data_path.items() for p in dp.points]


def _placement(p: DataPathPoint) -> str:
    if not p.compared:
        return p.placement
    if p.placement == "device":
        return "device (sweep's best point)"
    workers = "" if p.workers is None else f", {p.workers} workers"
    return f"host DataLoader (sweep's best point{workers})"


BATCHING_NOTE = ("The Server scenario (the highest Poisson rate whose p99 meets the SLO) on the model as exported "
                 "beside the same model with batching off; each p99 is at its own capacity. At the shared rate both "
                 "are offered one open-loop Poisson rate, a share of the lower capacity, so their latencies "
                 "compare at the same load.")
DATA_NOTE = ("Host placement: a DataLoader with pinned memory and asynchronous copies; device: the data resident on "
             "the device. On a CPU both are the same memory. The sweep's best point is trained both ways, back to "
             "back on one split; host data time is what each step spent on the host getting its batch. On a GPU that "
             "time also covers compute queued ahead whenever getting a batch synchronises, so the two samples/s, "
             "not this time, say whether the data path limits training.")


def html_tables(m: ModelSection) -> str:
    out = []
    for name, title, note, rows, header in (
            ("batching", "Dynamic batching on and off", BATCHING_NOTE, _batching_rows(m), BATCHING_HEADER),
            ("data-path", "Training data path", DATA_NOTE, _data_rows(m), DATA_HEADER)):
        if not rows:
            out.append(f"<p class='muted' id='{escape(anchor(name, m.model))}'>{title}: not measured in this run.</p>")
            continue
        head = "".join(f"<th>{escape(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
        out.append(f"<h3 id='{escape(anchor(name, m.model))}'>{title}</h3><p class='muted'>{note}</p>"
                   f"<div class='tablewrap'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")
    return "".join(out)


def md_tables(m: ModelSection, table: Table) -> list[str]:
    md: list[str] = []
    for name, title, note, rows, header in (
            ("batching", "Dynamic batching on and off", BATCHING_NOTE, _batching_rows(m), BATCHING_HEADER),
            ("data-path", "Training data path", DATA_NOTE, _data_rows(m), DATA_HEADER)):
        md += [f"<a id='{anchor(name, m.model)}'></a>", ""]
        if not rows:
            md += [f"{title}: not measured in this run.", ""]
            continue
        md += [f"### {title}", "", note, ""] + table(header, [r[:-1] + [f"`{r[-1]}`"] for r in rows])
    return md


def _sentence(text: str) -> str:
    """The answer closed with a full stop, so the command that measures it reads as its own sentence."""
    return text if text.endswith((".", "!", "?")) else text + "."
