"""The memory frontier in the report: how large a model each device can train and serve (`trainserve frontier`,
runs/<run>/frontier/<device>.json).

Per device: each series' largest size that fits (measured, or predicted by the fitted memory model, and
whether the prediction was checked), and one sentence, "on this NVIDIA H100 80GB you can train up to X M
parameters (bf16, batch B; Y M with activation checkpointing) and serve up to Z M (fp16, batch B)". The
sentences are written here, from the typed sections, and nowhere else.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from trainserve.core.frontier_result import MAX_EXTRAPOLATION, FrontierResult, SeriesFit, load_all
from trainserve.report.common import units as u
from trainserve.report.common.frontier_sections import DeviceFrontier, SeriesEdge


def frontier_sections(run_dir: Path) -> list[DeviceFrontier]:
    """Every device's frontier of the run ([] when `trainserve frontier` did not run)."""
    return [device_section(r, f"frontier/{r.device}.json") for r in load_all(run_dir)]


CHECKED_AT_LEAST = "checked, at least"  # measured to fit at a predicted size; no larger size failed yet


def device_section(r: FrontierResult, source: str = "") -> DeviceFrontier:
    out = DeviceFrontier(device=r.device, device_name=r.device_name, capacity_bytes=r.capacity_bytes,
                         capacity_source=r.capacity_source, batch_size=r.batch_size, source=source,
                         notes=list(r.notes) + ([f"stopped early: {r.stopped}"] if r.stopped else []))
    out.notes += _phase_notes(r) + _fit_notes(r)
    fits = {f.series: f for f in r.fits}
    for name in r.series():
        pts = [p for p in r.points if p.series == name]
        if pts[0].source != "modelled":  # a modelled series is drawn in the chart; edges stand on measurements
            out.series.append(_series_edge(r, name, pts, fits.get(name)))
    out.sentence = sentence(out)
    return out


def _series_edge(r: FrontierResult, name: str, pts: list, fit: SeriesFit | None) -> SeriesEdge:
    """One series' largest size that fits: measured, checked at the fit's edge, or only predicted."""
    first = pts[0]
    ok = [p for p in pts if p.status == "fits"]
    measured = max(ok, key=lambda p: p.params, default=None)
    failed = [p for p in pts if p.status == "does_not_fit" and p.source == "measured"]
    edge, edge_bytes, src = (measured.params, measured.peak_bytes, "measured") if measured else (None, None, "")
    if fit is not None and fit.edge_params is not None and r.capacity_bytes is not None:
        if fit.edge_checked == "fits":
            # the edge is known only once the next size up failed; a search the budget (or a file format) ended
            # before that measured a size that fits, and the edge lies at or above it
            bracketed = fit.edge_above_checked == "does_not_fit"
            src = ("predicted, checked" if bracketed else CHECKED_AT_LEAST) + _edge_check_detail(fit)
            edge, edge_bytes = fit.edge_params, fit.edge_measured_bytes
        elif fit.edge_checked == "does_not_fit":
            src = "predicted, did not fit when measured"  # the largest measured point stands
        elif measured is None or fit.edge_params > measured.params:
            edge, edge_bytes = fit.edge_params, fit.edge_predicted_bytes
            src = "predicted, at least" if fit.beyond else "predicted"
            if measured is not None and edge > MAX_EXTRAPOLATION * measured.params:
                # a result from before the fit was bounded: not read further than the bound either
                edge, edge_bytes, src = int(MAX_EXTRAPOLATION * measured.params), None, "predicted, at least"
    return SeriesEdge(
        series=name, mode=first.mode, precision=first.precision, checkpointing=first.checkpointing,
        measured_params=measured.params if measured else None, edge_params=edge, edge_source=src,
        edge_bytes=edge_bytes, stopped_at_params=min((p.params for p in failed), default=None),
        fit_max_rel_error=fit.max_rel_error if fit else None)


def _fit_notes(r: FrontierResult) -> list[str]:
    """Why a series' edge search ended where it did, one line per reason with the series it holds for."""
    by_note: dict[str, list[str]] = {}
    for f in r.fits:
        if f.note:
            by_note.setdefault(f.note, []).append(f.series)
    more = (f" (`trainserve frontier --device {r.device} --budget-s N` with a larger N runs each series to its edge)"
            if any("budget" in n for n in by_note) else "")
    return [f"{', '.join(series)}: {note}" + (more if "budget" in note else "") for note, series in by_note.items()]


def _phase_notes(r: FrontierResult) -> list[str]:
    """Which phase set the training peaks: where it is the optimizer step, precision and checkpointing leave the
    peak alone and only the activations part shows them."""
    train = [p for p in r.points if p.mode == "train" and p.peak_phase]
    step = [p for p in train if p.peak_phase == "optimizer step"]
    if not step:
        return []
    return [f"{len(step)} of {len(train)} training points peak in the optimizer step (weights, gradients, AdamW's "
            "state and its temporaries), not in forward/backward: there neither bf16 nor checkpointing lowers the "
            "peak; the record's activations part (forward/backward's peak less the rest) shows what they save"]


def _edge_check_detail(fit: SeriesFit) -> str:
    """How far the measurement at the edge was from the prediction, and whether the size above failed."""
    parts = [] if fit.edge_error is None else [f"{fit.edge_error:+.1%} off the prediction"]
    if fit.edge_above_checked == "does_not_fit":
        parts.append("the next size did not fit")
    return f" ({'; '.join(parts)})" if parts else ""


def _best(series: list[SeriesEdge]) -> SeriesEdge | None:
    return max((s for s in series if s.edge_params), key=lambda s: s.edge_params, default=None)


def _size(s: SeriesEdge) -> str:
    """"up to X", or "at least X" where the edge was not bracketed."""
    if s.edge_source == "predicted, at least":  # the fit was not extrapolated further than this
        return f"at least {_millions(s.edge_params)} (predicted; the edge lies beyond what the fit is trusted for)"
    if s.edge_source.startswith(CHECKED_AT_LEAST):
        return f"at least {_millions(s.edge_params)}"
    predicted = s.edge_source == "predicted"
    return f"up to {_millions(s.edge_params)}" + (" (predicted, not measured)" if predicted else "")


def _millions(n: int | None) -> str:
    if n is None:
        return u.MISSING
    if n >= 10**9:
        return f"{n / 1e9:,.3g} B" if n < 10**12 else f"{n / 1e9:,.0f} B"
    m = n / 1e6
    return f"{m:.3g} M" if m >= 1 else f"{m:.2g} M"


def sentence(d: DeviceFrontier) -> str:
    """"on this <device> you can train up to X M parameters (...) and serve up to Z M (...)"."""
    train = _best([s for s in d.series if s.mode == "train" and not s.checkpointing])
    ckpt = _best([s for s in d.series if s.mode == "train" and s.checkpointing])
    serve = _best([s for s in d.series if s.mode == "infer"])
    b = d.batch_size
    if d.capacity_bytes is None:
        parts = []
        if train:
            parts.append(f"trained {_millions(train.measured_params)} parameters ({train.precision}, batch {b})")
        if serve:
            parts.append(f"served {_millions(serve.measured_params)} ({serve.precision}, batch {b})")
        measured = " and ".join(parts) or "nothing"
        return (f"On this {d.device_name} no edge is drawn ({d.capacity_source}); measured up to: {measured}.")
    cap = f" ({u.nbytes(d.capacity_bytes)}, {d.capacity_source})"
    words = []
    if train:
        other = "" if ckpt is None or ckpt.precision == train.precision else f" in {ckpt.precision}"
        extra = f"; {_size(ckpt)} with activation checkpointing{other}" if ckpt else ""
        words.append(f"train {_size(train)} parameters ({train.precision}, batch {b}{extra})")
    if serve:
        words.append(f"serve {_size(serve)} ({serve.precision}, batch {b})")
    if not words:
        return f"On this {d.device_name}{cap} no size was measured to fit."
    lower = any(s.edge_source.startswith(CHECKED_AT_LEAST) for s in (train, ckpt, serve) if s is not None)
    why = (" (at least: measured to fit, and the edge search stopped before a larger size was measured not to; "
           "the notes below say why)") if lower else ""
    return f"On this {d.device_name}{cap} you can " + " and ".join(words) + why + "."


# --- rendering -----------------------------------------------------------------------------------------

def _rows(d: DeviceFrontier) -> list[list[str]]:
    # without a capacity nothing is known to be the largest that fits: the column says why instead of a size
    def fits(s: SeriesEdge) -> str:
        return _millions(s.edge_params) if d.capacity_bytes is not None else "no capacity set"
    return [[s.series, _millions(s.measured_params), fits(s), s.edge_source or u.MISSING,
             u.nbytes(s.edge_bytes), _millions(s.stopped_at_params),
             u.MISSING if s.fit_max_rel_error is None else f"{s.fit_max_rel_error:.1%}"] for s in d.series]


HEADER = ["series", "largest measured", "largest that fits", "how known", "its peak", "first that did not fit",
          "fit's worst error"]


def figure_name(device: str) -> str:
    return f"modelsize-{device}.png"


def html_section(sections: list[DeviceFrontier], figures: dict[str, bytes],
                 table: object, img: object) -> str:
    """The section's HTML; `table(header, rows)` and `img(name)` are the page's own helpers."""
    if not sections:
        return ""
    parts = ["<section id='frontier'><h2>How large a model each device trains and serves</h2>",
             "<p>Peak memory at one batch against the model's size (<code>trainserve frontier</code>): training "
             "split into weights, gradients, optimizer state and activations, beside the served ONNX model's "
             "working set. A size marked predicted comes from the memory model fitted to the measured points "
             "(bytes ≈ a·params + b·batch·activations + c), not from a measurement.</p>"]
    for d in sections:
        parts.append(f"<h3>{escape(d.device_name)} ({escape(d.device)})</h3><p><b>{escape(d.sentence)}</b></p>")
        if figure_name(d.device) in figures:
            parts.append(img(figure_name(d.device)))  # type: ignore[operator]
        parts.append(table(HEADER, _rows(d)))  # type: ignore[operator]
        parts += [f"<p class='muted'>{escape(n)}</p>" for n in d.notes]
    return "".join(parts) + "</section>"


def md_section(sections: list[DeviceFrontier], figures: dict[str, bytes], table: object) -> list[str]:
    if not sections:
        return []
    md = ["## How large a model each device trains and serves", "",
          "Peak memory at one batch against the model's size (`trainserve frontier`). A size marked predicted "
          "comes from the memory model fitted to the measured points, not from a measurement.", ""]
    for d in sections:
        md += [f"### {d.device_name} ({d.device})", "", f"**{d.sentence}**", ""]
        if figure_name(d.device) in figures:
            md += [f"![Model size against peak memory on {d.device_name}]({figure_name(d.device)})", ""]
        md += table(HEADER, _rows(d))  # type: ignore[operator]
        md += [f"- {n}" for n in d.notes] + [""]
    return md
