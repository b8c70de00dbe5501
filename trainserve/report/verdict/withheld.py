"""Figures the report withholds because they broke a physical bound (trainserve.core.bounds).

analysis.py screens a run's records through `screened` before lining them up, so a withheld
figure is null in summary.json with its error beside it (a view's "errors", the summary's
"errors"), and the renderers show the error, in red, where the number would have been.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Any, Self

from trainserve.core import bounds
from trainserve.core.servedparts import RampStep
from trainserve.report.common.collect import Collection, Entry
from trainserve.report.common.sections import Column, RecordRow, Report

RED = "#b42318"


def screened(collection: Collection) -> list[Entry]:
    """The collection's entries with out-of-bound figures withheld, checked against the in-process limits
    among them (collect reads `<run>/limits/`; without it, no limit checks)."""
    pairs = [(e.source, e.record) for e in collection.entries]
    return [Entry(e.source, r) for e, r in zip(collection.entries, bounds.screen(pairs))]


def summary_errors(entries: list[Entry]) -> list[dict[str, Any]]:
    """Every record's errors, one row each, shaped like the summary's warnings."""
    return [{"source": e.source, "model": bounds.model_key(e.record.model), "device": e.record.device,
             "phase": e.record.phase, "message": msg}
            for e in entries for msg in dict.fromkeys(e.record.validity.errors)]


def metric_error(column: Column | None, metric: str) -> str | None:
    """The error that withheld `metric` ("throughput_samples_s", "p50_ms", ...) from a column, if any."""
    err = column.errors.get(metric) if column else None
    return err["error"] if err else None


def ranking_throughput(record: Any) -> float | None:
    """A screened record's throughput, or the value withheld from it, for picking the saturated column.

    Picking by the withheld value puts the error where the best throughput measured would be,
    instead of quietly showing the next best record as the saturation point.
    """
    if record.speed.throughput_samples_s is not None:
        return record.speed.throughput_samples_s
    held = record.extra.get(bounds.OUT_OF_BOUNDS) if isinstance(record.extra, dict) else None
    value = (held or {}).get("throughput_samples_s", {}).get("value")
    return float(value) if isinstance(value, (int, float)) else None


# --- table cells ------------------------------------------------------------------------------

class Withheld(str):
    """A table cell whose figure was withheld: the text is the short error, `error` the whole sentence."""

    error: str

    def __new__(cls, short: str, error: str) -> Self:
        cell = super().__new__(cls, f"error: {short}")
        cell.error = error
        return cell


def guard(field: str, cell: Callable[[Any], str]) -> Callable[[Column | RecordRow], str]:
    """A row's cell function that shows the error instead of `field` when the figure was withheld."""
    def guarded(v: Column | RecordRow) -> str:
        err = v.errors.get(field)
        return Withheld(err["short"], err["error"]) if err else cell(v)
    return guarded


def html_td(text: str) -> str | None:
    """The <td> of a withheld cell (red, the error as its tooltip); None for an ordinary one."""
    if not isinstance(text, Withheld):
        return None
    return f"<td class='err' title='{escape(text.error, quote=True)}'>{escape(text)}</td>"


def md_text(text: str) -> str:
    """Markdown cannot colour text: a red mark and bold say it is an error, not a figure."""
    return f"🔴 **{text}**" if isinstance(text, Withheld) else text


CSS = (f".err {{ color:{RED}; font-weight:600; }} td.err {{ cursor:help; }} "
       f".errbox {{ background:#fef3f2; border-left:4px solid {RED}; padding:6px 10px; margin:6px 0; "
       f"border-radius:4px; color:{RED}; }} .errbox code {{ color:{RED}; }}")


def html_section(report: Report) -> str:
    """The Errors section: every withheld figure's reason, in red; empty when there is none."""
    errs = report.errors
    if not errs:
        return ""
    items = "".join(f"<div class='errbox'><code>{escape(e.source)}</code> — {escape(e.message)}</div>"
                    for e in errs)
    return (f"<section id='errors'><h2 class='err'>Errors ({len(errs)}): figures beyond a physical bound, "
            f"withheld</h2>{items}</section>")


def md_section(report: Report) -> list[str]:
    errs = report.errors
    if not errs:
        return []
    return (["## Errors: figures beyond a physical bound, withheld", ""]
            + [f"- 🔴 **error** `{e.source}`: {e.message}" for e in errs] + [""])


def figure(column: Column | None, field: str, fmt: Callable[[Column], str]) -> str | None:
    """`fmt(column)`, or the Withheld error when `field` was withheld from the column; None without one."""
    return guard(field, fmt)(column) if column else None


def html_tile_value(text: str | None) -> str | None:
    """A summary tile's value div for a withheld figure; None for an ordinary one."""
    if not isinstance(text, Withheld):
        return None
    return f"<div class='v small err' title='{escape(text.error, quote=True)}'>{escape(text)}</div>"


def point_text(point: RampStep, key: str, fmt: Callable[[Any], str]) -> str:
    """A ramp point's figure formatted, or its Withheld error."""
    held = (point.out_of_bounds or {}).get(key)
    return Withheld(held.short, held.error) if held else fmt(getattr(point, key))


def held_out(point: RampStep) -> dict[str, dict[str, str]]:
    """{field: {"short", "error"}} of the figures the screen withheld from a ramp step (as bounds.errors_of)."""
    return {f: {"short": h.short, "error": h.error} for f, h in (point.out_of_bounds or {}).items()}
