"""A diff as a reader sees it: the terminal's tables (rich), Markdown and HTML with one chart per section.

Every view says the same things in the same order: what differs between the runs (why), then each figure's
A, B, change and whether it is beyond the noise (how much), then the figures that could not be compared.
"""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path
from typing import Any

from trainserve.report.common import units as u
from trainserve.report.diff.diff_plot import charts, sections
from trainserve.report.diff.run_diff import Apart, Change, Diff, Spread

_REASON = {"only_a": "only in A", "only_b": "only in B", "operating_point": "measured at other operating points"}
NOISE_RULE = ("A change is beyond the noise by Welch's t-test (p < 0.05) where both runs have repeats; where one "
              "has, when the other's value is outside its 95% CI and past the noise band of ±{band}%; where neither "
              "has, past that band.")


def value(x: float | None, spread: Spread | None = None) -> str:
    if x is None:
        return "—"
    return f"{u.num(x)} ± {u.num(spread.half_width)}" if spread is not None else u.num(x)


def change_text(c: Change) -> str:
    return "—" if c.change_pct is None else f"{c.change_pct:+.1f}%"


def verdict(c: Change, noise_pct: float) -> str:
    """'worse (Welch p 0.003)', 'better (CI)', 'noise (±5%)': the direction and how the noise was judged."""
    how = {"welch": f"Welch p {c.p_value:.2g}" if c.p_value is not None else "Welch", "ci": "CI",
           "band": f"±{noise_pct:g}%"}[c.method]
    return f"{c.direction if c.beyond_noise else 'noise'} ({how})"


def point_text(point: dict[str, Any] | None) -> str:
    if not point:
        return "—"
    return ", ".join(f"{k} {v}" for k, v in point.items())


def apart_text(x: Apart) -> str:
    if x.reason == "operating_point":
        return f"A at {point_text(x.a_point)}: {value(x.a)}; B at {point_text(x.b_point)}: {value(x.b)}"
    side, v, point = ("A", x.a, x.a_point) if x.reason == "only_a" else ("B", x.b, x.b_point)
    return f"{side}: {value(v)} at {point_text(point)}"


def _shown(v: Any) -> str:
    return "—" if v is None else str(v)


def headline(diff: Diff) -> str:
    moved = [c for c in diff.changes if c.beyond_noise]
    better = sum(c.direction == "better" for c in moved)
    return (f"{len(diff.changes)} figures compared: {len(moved)} beyond the noise ({better} better, "
            f"{len(moved) - better} worse); {len(diff.apart)} apart; {len(diff.differences)} differences between "
            "the runs")


# --- terminal --------------------------------------------------------------------------------------

def print_terminal(diff: Diff, console: Any = None) -> None:
    """The diff as rich tables on `console` (default: stdout)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    console.print(f"[bold]A[/bold] {diff.a.name} ({diff.a.summary_path})")
    console.print(f"[bold]B[/bold] {diff.b.name} ({diff.b.summary_path})")
    t = Table(title="What differs between the runs", title_justify="left")
    for col in ("section", "name", "A", "B"):
        t.add_column(col, overflow="fold")
    for d in diff.differences:
        t.add_row(d.section, d.name, _shown(d.a), _shown(d.b))
    console.print(t if diff.differences else "Nothing differs between the runs' hosts, versions, cards and options.")
    for title, changes in sections(diff).items():
        t = Table(title=title, title_justify="left")
        for col, just in (("figure", "left"), ("at", "left"), ("A", "right"), ("B", "right"), ("change", "right"),
                          ("", "left")):
            t.add_column(col, justify=just, overflow="fold")  # type: ignore[arg-type]
        for c in changes:
            style = None if not c.beyond_noise else "green" if c.direction == "better" else "red"
            t.add_row(f"{c.scenario} {c.name} ({c.unit})", point_text(c.point), value(c.a, c.a_spread),
                      value(c.b, c.b_spread), change_text(c), verdict(c, diff.noise_pct), style=style)
        console.print(t)
    if diff.apart:
        t = Table(title="Figures apart (not compared)", title_justify="left")
        for col in ("figure", "why", "values"):
            t.add_column(col, overflow="fold")
        for x in diff.apart:
            t.add_row(f"{x.model} {x.device} {x.scenario} {x.name}", _REASON[x.reason], apart_text(x))
        console.print(t)
    console.print(headline(diff))
    console.print(NOISE_RULE.format(band=f"{diff.noise_pct:g}"))


# --- Markdown and HTML -----------------------------------------------------------------------------

def _md_cell(s: str) -> str:
    return s.replace("|", "\\|")


def markdown(diff: Diff, figures: dict[str, bytes] | None = None, image_dir: str | None = None) -> str:
    """The diff as Markdown; with `image_dir`, each section's chart is linked as `<image_dir>/<file>.png`
    (the caller writes them), else embedded as a data URI."""
    figures = charts(diff) if figures is None else figures
    out = [f"# trainserve diff: {diff.b.name} against {diff.a.name}", "",
           f"A: `{diff.a.summary_path}`  ", f"B: `{diff.b.summary_path}`", ""]
    return "\n".join(out + md_body(diff, figures, image_dir)) + "\n"


def md_body(diff: Diff, figures: dict[str, bytes], image_dir: str | None, level: int = 2) -> list[str]:
    """The diff's Markdown below its title, its headings at `level` (the report nests it one deeper)."""
    h = "#" * level
    out = [headline(diff), "", NOISE_RULE.format(band=f"{diff.noise_pct:g}"), "",
           f"{h} What differs between the runs", ""]
    if diff.differences:
        out += ["| section | name | A | B |", "| --- | --- | --- | --- |"]
        out += [f"| {d.section} | {_md_cell(d.name)} | {_md_cell(_shown(d.a))} | {_md_cell(_shown(d.b))} |"
                for d in diff.differences]
    else:
        out.append("Nothing differs between the runs' hosts, versions, model cards and options.")
    for title, changes in sections(diff).items():
        out += ["", f"{h} {title}", ""]
        if title in figures:
            src = f"{image_dir}/{chart_file(title)}" if image_dir else \
                f"data:image/png;base64,{base64.b64encode(figures[title]).decode()}"
            out += [f"![{title}: B against A, as a percentage of A, with 95% CIs]({src})", ""]
        out += ["| figure | at | A | B | change | |", "| --- | --- | ---: | ---: | ---: | --- |"]
        out += [f"| {c.scenario} {c.name} ({c.unit}) | {_md_cell(point_text(c.point))} | {value(c.a, c.a_spread)} | "
                f"{value(c.b, c.b_spread)} | {change_text(c)} | {verdict(c, diff.noise_pct)} |" for c in changes]
    if diff.apart:
        out += ["", f"{h} Figures apart (not compared)", "", "| figure | why | values |", "| --- | --- | --- |"]
        out += [f"| {x.model} {x.device} {x.scenario} {x.name} | {_REASON[x.reason]} | {_md_cell(apart_text(x))} |"
                for x in diff.apart]
    return out


def chart_file(title: str) -> str:
    return "diff-" + "".join(ch if ch.isalnum() else "-" for ch in title) + ".png"


SECTION_CSS = "td.n { text-align:right; white-space:nowrap; } tr.better td { background:#eef8e6; } " \
              "tr.worse td { background:#fdecec; }"  # what a diff inside the report page needs beyond its CSS
CSS = """
body { margin:0 auto; max-width:1100px; padding:20px 32px 48px; color:#1d2330;
       font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; }
table { border-collapse:collapse; margin:8px 0 18px; font-size:13px; }
th, td { border-bottom:1px solid #e3e6ea; padding:4px 10px; text-align:left; vertical-align:top; }
td.n { text-align:right; font-variant-numeric: tabular-nums; white-space:nowrap; }
tr.better td { background:#eef8e6; } tr.worse td { background:#fdecec; }
img { max-width:100%; } .muted { color:#6b7280; } code { font-size:12.5px; }
"""


def html(diff: Diff, figures: dict[str, bytes] | None = None) -> str:
    """The diff as one self-contained HTML page (charts embedded)."""
    figures = charts(diff) if figures is None else figures
    e = escape
    out = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>",
           "<meta name='viewport' content='width=device-width, initial-scale=1'>",
           f"<title>trainserve diff — {e(diff.b.name)} against {e(diff.a.name)}</title><style>{CSS}</style></head>"
           "<body>", f"<h1>{e(diff.b.name)} (B) against {e(diff.a.name)} (A)</h1>",
           f"<p class='muted'>A: <code>{e(diff.a.summary_path)}</code><br>B: <code>{e(diff.b.summary_path)}</code>"
           "</p>", html_body(diff, figures),
           "<footer class='muted'>Made by <code>trainserve diff</code>.</footer></body></html>"]
    return "\n".join(out)


def html_body(diff: Diff, figures: dict[str, bytes], level: int = 2) -> str:
    """The diff's HTML below its title, its headings at `level`."""
    e, h = escape, f"h{level}"
    out = [f"<p>{e(headline(diff))}</p><p class='muted'>{e(NOISE_RULE.format(band=f'{diff.noise_pct:g}'))}</p>",
           f"<{h}>What differs between the runs</{h}>"]
    if diff.differences:
        out.append("<table><tr><th>section</th><th>name</th><th>A</th><th>B</th></tr>")
        out += [f"<tr><td>{e(d.section)}</td><td>{e(d.name)}</td><td>{e(_shown(d.a))}</td><td>{e(_shown(d.b))}</td>"
                "</tr>" for d in diff.differences]
        out.append("</table>")
    else:
        out.append("<p>Nothing differs between the runs' hosts, versions, model cards and options.</p>")
    for title, changes in sections(diff).items():
        out.append(f"<{h}>{e(title)}</{h}>")
        if title in figures:
            out.append(f"<img alt='{e(title)}: each figure of B as a percentage of A, with 95% CIs' "
                       f"src='data:image/png;base64,{base64.b64encode(figures[title]).decode()}'>")
        out.append("<table><tr><th>figure</th><th>at</th><th>A</th><th>B</th><th>change</th><th></th></tr>")
        for c in changes:
            cls = f" class='{c.direction}'" if c.beyond_noise else ""
            out.append(f"<tr{cls}><td>{e(c.scenario)} {e(c.name)} ({e(c.unit)})</td><td>{e(point_text(c.point))}</td>"
                       f"<td class='n'>{e(value(c.a, c.a_spread))}</td><td class='n'>{e(value(c.b, c.b_spread))}</td>"
                       f"<td class='n'>{e(change_text(c))}</td><td>{e(verdict(c, diff.noise_pct))}</td></tr>")
        out.append("</table>")
    if diff.apart:
        out.append(f"<{h}>Figures apart (not compared)</{h}><table><tr><th>figure</th><th>why</th><th>values</th></tr>")
        out += [f"<tr><td>{e(f'{x.model} {x.device} {x.scenario} {x.name}')}</td><td>{e(_REASON[x.reason])}</td>"
                f"<td>{e(apart_text(x))}</td></tr>" for x in diff.apart]
        out.append("</table>")
    return "\n".join(out)


# --- files -----------------------------------------------------------------------------------------

def as_json(diffs: list[Diff], breaches: list[str]) -> dict[str, Any]:
    """The diffs for machines: each Diff's fields as report/common/typed.py writes sections, and the gate's breaches."""
    from trainserve.report.common.typed import to_json

    return {"schema_version": 1, "diffs": to_json(diffs), "breaches": breaches}


def write_files(diff: Diff, html_path: Path | None, md_path: Path | None) -> list[Path]:
    """Write the HTML page and the Markdown (its charts as PNGs beside it), each atomically; the paths written."""
    from trainserve.core.fsutil import write_bytes_atomic, write_text_atomic

    written: list[Path] = []
    figures = charts(diff) if html_path or md_path else {}
    if html_path is not None:
        write_text_atomic(html_path, html(diff, figures))
        written.append(html_path)
    if md_path is not None:
        for title, png in figures.items():
            write_bytes_atomic(md_path.parent / chart_file(title), png)
        write_text_atomic(md_path, markdown(diff, figures, image_dir="."))
        written.append(md_path)
    return written
