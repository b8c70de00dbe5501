"""The run's verdict, as MLPerf LoadGen states one: VALID, or INVALID with every reason.

A load figure is held against five checks, each a reason of its own kind:

- `unstable`: its windows did not agree (loadtest/windows.py) — the figure "did not stabilise";
- `client_saturated`: the record says the load generator, not the server, may have been the limit
  (`validity.client_saturated`, set by the client-CPU check);
- `errors`: more than 0.1% of its requests failed, or the load stopped early;
- `withheld`: a bound check withheld a figure (trainserve/core/bounds.py, report/verdict/withheld.py);
- `too_few_requests`: fewer requests than its p99 needs (loadtest/windows.py: 500), where the figure is
  a latency (SingleStream, Server); an Offline figure is a throughput (as in MLPerf), so its
  percentiles are shown with their request count but do not make it invalid.

Beyond each record's own flags, figures are checked against each other (report/verdict/invariants.py: a peak
at least its parts, a meter on its record's own device, a working set on both sides of a memory
comparison, a client-held ramp said to be the client's, every version known).

The closed-loop ramp is a curve, not a figure: only its client's saturation is checked. In-process
limits are checked for withheld figures only. Each headline entry is written only when no figure it
rests on is INVALID (screen_headline).
"""

from __future__ import annotations

from typing import Any

from trainserve.core.bounds import is_limit
from trainserve.core.servedparts import LoadParts
from trainserve.report.common.collect import Entry
from trainserve.report.common.sections import HeadlineConclusion, HeadlineSpeedup, ModelSection, Report
from trainserve.report.verdict.invariants import KINDS as INVARIANT_KINDS

MAX_ERROR_FRACTION = 0.001
KINDS = ("unstable", "client_saturated", "errors", "withheld", "too_few_requests") + INVARIANT_KINDS


def reasons_of(e: Entry) -> list[dict[str, Any]]:
    """Every reason a load record's figure is not valid (empty: valid)."""
    r = e.record
    if r.phase != "infer" or is_limit(r):
        return []
    out: list[dict[str, Any]] = []

    def add(kind: str, message: str) -> None:
        out.append({"kind": kind, "source": e.source, "message": message})

    v, x = r.validity, r.extra if isinstance(r.extra, dict) else {}
    if v.client_saturated:
        add("client_saturated", "the load generator was saturated: the client, not the server, may have limited "
                                "this figure")
    parts = LoadParts.of(r)
    if parts.ramp:  # a curve of closed-loop steps: no single figure to hold to the checks below
        return out
    if v.stability is not None and not v.stability.get("stable", True):
        add("unstable", v.stability.get("reason") or "did not stabilise")
    search = parts.search
    if search is not None:
        figure = search.figure
        requests = (figure.requests or 0) if figure is not None else 0
        failures = (figure.failures or 0) if figure is not None else 0
    else:
        requests, failures = x.get("requests") or 0, x.get("failures") or 0
    if requests and failures / requests > MAX_ERROR_FRACTION:
        add("errors", f"{failures} of {requests} requests failed (more than {MAX_ERROR_FRACTION:.1%})")
    elif v.partial:
        add("errors", "the measurement stopped early (partial)")
    offline = parts.settings.scenario == "Offline"
    if not offline and "p99_ms" in parts.percentiles_short and r.speed.latency.count:
        add("too_few_requests", f"{r.speed.latency.count} requests are too few for a p99 (500 needed)")
    return out


def verdict(entries: list[Entry], withheld_errors: list[dict[str, Any]],
            cross_checks: list[dict[str, Any]] = ()) -> dict[str, Any]:
    """summary.json's "verdict": {"result", "reasons": [{"kind", "source", "message"}], "invalid_sources"};
    `cross_checks` are the failed checks of figures against each other (report/verdict/invariants.py)."""
    reasons = [reason for e in entries for reason in reasons_of(e)]
    for err in withheld_errors:
        reasons.append({"kind": "withheld", "source": err.get("source"),
                        "message": f"a bound check withheld a figure: {err.get('message') or err.get('error')}"})
    reasons += list(cross_checks)
    return {"result": "INVALID" if reasons else "VALID", "reasons": reasons, "checked": len(entries),
            "invalid_sources": sorted({r["source"] for r in reasons if r["source"]})}


def sources_of(section: ModelSection) -> set[str]:
    """The records a model's headline rests on: its training points and served batch-1 and saturated figures."""
    out: set[str] = set()
    for sp in (section.speedups.train, section.speedups.train_best):
        for point in (sp.cpu_point, sp.gpu_point):
            if point is not None and point.source:
                out.add(point.source)
    for per in section.infer.values():
        for served in per.values():
            for column in (served.batch1, served.saturated) if served else ():
                if column:
                    out.add(column.source)
    return out


def rests_on(h: HeadlineSpeedup | HeadlineConclusion, section: ModelSection) -> set[str]:
    """The records one headline entry rests on: a training speedup its two points; the model's sentence all of
    sources_of (it states the training, batch-1 and saturated ratios)."""
    if isinstance(h, HeadlineSpeedup):
        return {p.source for p in (h.cpu, h.gpu) if p is not None and p.source}
    return sources_of(section)


def screen_headline(report: Report) -> None:
    """Replace each headline entry that rests on an INVALID figure by a sentence that says so."""
    bad = set(report.verdict.invalid_sources)
    if not bad:
        return
    for h in report.headline:
        section = report.models.get(h.model)
        hit = sorted(rests_on(h, section) & bad) if section else []
        if hit:
            h.withheld_by_verdict = hit
            h.text = (f"{h.model}: not stated — the figures it rests on include INVALID ones "
                      f"({', '.join(hit)}); see the verdict")
