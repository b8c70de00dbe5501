"""The side-by-side report of a run: collect its profile records, line them up, draw, write.

`build_report(run_dir)` writes `<run>/report/{report.html, report.md, summary.json, *.png,
perf_analyzer/*.csv}` in one step (a staged folder renamed into place), so a failed report never
replaces a good one; `write_report` does the same and also gives the cost and plan lines the CLI prints.
"""

from __future__ import annotations

import logging
from html import escape
from pathlib import Path

from trainserve.core.errors import UserError
from trainserve.core.fsutil import staged_dir, write_json_atomic, write_text_atomic
from trainserve.report.common.collect import collect
from trainserve.report.common.sections import Report
from trainserve.report.common.sentences import cost_lines
from trainserve.report.common.typed import to_json
from trainserve.report.cost.capacity_plan import capacity_plan
from trainserve.report.cost.cost_per_million import CostOptions, cost_section
from trainserve.report.cost.cost_plot import cost_figures
from trainserve.report.diff import diff_plot
from trainserve.report.diff import diff_render
from trainserve.report.diff.run_diff import diff_runs, load_run, run_info, run_options
from trainserve.report.memory.frontier_plot import frontier_figures
from trainserve.report.memory.memory_frontier import frontier_sections
from trainserve.report.page.analysis import analyse
from trainserve.report.page.model_plots import model_figures
from trainserve.report.page.render import html_report, markdown_report
from trainserve.report.serving import perf_csv
from trainserve.report.serving.attribution_plot import attribution_figures

log = logging.getLogger(__name__)


def build_report(run_dir: Path, cost: CostOptions | None = None) -> Path:
    """Write the report folder of the run at `run_dir` and return the path of report.html.

    `cost`: the prices, SLO and (optional) target load of the "What it costs" section; None: the defaults.
    """
    return write_report(run_dir, cost)[0]


def write_report(run_dir: Path, cost: CostOptions | None = None, baseline: str | None = None,
                 runs_dir: Path | None = None) -> tuple[Path, list[str]]:
    """`build_report`, and the cost and plan lines for the CLI to print (from the sections just computed).

    `baseline`: a run (as `trainserve diff` names one, in `runs_dir`) whose figures and the change from them
    the report shows after its summary."""

    collection = collect(run_dir)
    if not collection.entries:
        extra = ""
        if collection.problems:
            rel, why = collection.problems[0]
            extra = f" ({len(collection.problems)} unreadable, e.g. {rel}: {why})"
        raise UserError(f"run {collection.run!r} has no profile records under {run_dir}/{{train,compare,load,limits}}"
                        f"{extra}; run `trainserve train` or `trainserve load` for it first")
    report = analyse(collection)
    cost = (cost or CostOptions()).with_searched_slo(report)
    report.costs = cost_section(report, cost)
    report.plan = capacity_plan(report, cost) if cost.qps is not None else None
    report.frontier = frontier_sections(run_dir)
    figures: dict[str, bytes] = cost_figures(report)
    figures.update(frontier_figures(run_dir, report.frontier))
    for section in report.models.values():
        figures.update(model_figures(section))
        figures.update(attribution_figures(section))
    final = run_dir / "report"
    base_html, base_md = "", []
    if baseline is not None:
        base_html, base_md, charts = baseline_section(baseline, runs_dir, report, final / "summary.json", run_dir)
        figures.update(charts)
    with staged_dir(final) as tmp:
        for name, png in figures.items():
            (tmp / name).write_bytes(png)
        write_json_atomic(tmp / "summary.json", to_json(report))
        perf_csv.write_all(collection, tmp)  # perf_analyzer/<record>.csv: perf_analyzer's -f columns
        write_text_atomic(tmp / "report.md", markdown_report(report, figures, base_md))
        write_text_atomic(tmp / "report.html", html_report(report, figures, base_html))
    log.debug("report of %d records written to %s", len(collection.entries), final)
    return final / "report.html", cost_lines(report.costs, report.plan)



def baseline_section(baseline: str, runs_dir: Path | None, report: Report, summary: Path,
                     run_dir: Path) -> tuple[str, list[str], dict[str, bytes]]:
    """The report's "Against the baseline" section as HTML and Markdown, and its charts by file name."""
    base_info, base = load_run(baseline, runs_dir)
    d = diff_runs(base_info, base, run_info(report, summary, run_options(run_dir / "report" / "summary.json")), report)
    charts = diff_plot.charts(d)
    title = f"Against the baseline {base_info.name}"
    html = (f"<section id='baseline'><style>{diff_render.SECTION_CSS}</style><h2>{escape(title)}</h2><p>A is the baseline "
            f"<code>{escape(base_info.summary_path)}</code>, B this run.</p>{diff_render.html_body(d, charts, 3)}"
            "</section>")
    md = [f"## {title}", "", f"A is the baseline `{base_info.summary_path}`, B this run.", "",
          *diff_render.md_body(d, charts, ".", 3), ""]
    return html, md, {diff_render.chart_file(t): png for t, png in charts.items()}
