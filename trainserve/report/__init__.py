"""The side-by-side report of a run: collect its profile records, line them up, draw, write.

`build_report(run_dir)` writes `<run>/report/{report.html, report.md, summary.json, *.png,
perf_analyzer/*.csv}` in one step (a staged folder renamed into place), so a failed report never
replaces a good one; `write_report` does the same and also gives the cost and plan lines the CLI prints.
"""

from __future__ import annotations

import logging
from pathlib import Path

from trainserve.core.errors import UserError
from trainserve.core.fsutil import staged_dir, write_json_atomic, write_text_atomic
from trainserve.report import perf_csv
from trainserve.report.analysis import analyse
from trainserve.report.attribution_plot import attribution_figures
from trainserve.report.collect import collect
from trainserve.report.cost import CostOptions, cost_section
from trainserve.report.cost_plot import cost_figures
from trainserve.report.sentences import cost_lines
from trainserve.report.plan import capacity_plan
from trainserve.report.plots import model_figures
from trainserve.report.render import html_report, markdown_report
from trainserve.report.typed import to_json

log = logging.getLogger(__name__)


def build_report(run_dir: Path, cost: CostOptions | None = None) -> Path:
    """Write the report folder of the run at `run_dir` and return the path of report.html.

    `cost`: the prices, SLO and (optional) target load of the "What it costs" section; None: the defaults.
    """
    return write_report(run_dir, cost)[0]


def write_report(run_dir: Path, cost: CostOptions | None = None) -> tuple[Path, list[str]]:
    """`build_report`, and the cost and plan lines for the CLI to print (from the sections just computed)."""

    collection = collect(run_dir)
    if not collection.entries:
        extra = ""
        if collection.problems:
            rel, why = collection.problems[0]
            extra = f" ({len(collection.problems)} unreadable, e.g. {rel}: {why})"
        raise UserError(f"run {collection.run!r} has no profile records under {run_dir}/{{train,compare,load,limits}}"
                        f"{extra}; run `trainserve train` or `trainserve load` for it first")
    report = analyse(collection)
    cost = cost or CostOptions()
    report.costs = cost_section(report, cost)
    report.plan = capacity_plan(report, cost) if cost.qps is not None else None
    figures: dict[str, bytes] = cost_figures(report)
    for section in report.models.values():
        figures.update(model_figures(section))
        figures.update(attribution_figures(section))
    final = run_dir / "report"
    with staged_dir(final) as tmp:
        for name, png in figures.items():
            (tmp / name).write_bytes(png)
        write_json_atomic(tmp / "summary.json", to_json(report))
        perf_csv.write_all(collection, tmp)  # perf_analyzer/<record>.csv: perf_analyzer's -f columns
        write_text_atomic(tmp / "report.md", markdown_report(report, figures))
        write_text_atomic(tmp / "report.html", html_report(report, figures))
    log.debug("report of %d records written to %s", len(collection.entries), final)
    return final / "report.html", cost_lines(report.costs, report.plan)

