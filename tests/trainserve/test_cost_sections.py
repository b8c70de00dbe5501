"""The cost and plan sections survive summary.json: to_json then from_json gives equal sections, for runs that
fill every shape (a run of unknown size, a client-batched plan, an INVALID Server capacity, no GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trainserve import test_cost, test_report, test_report_verdict
from trainserve.report import write_report
from trainserve.report.common.collect import collect
from trainserve.report.common.cost_sections import Costs, Plan, RunCost, RunNotKnown
from trainserve.report.common.sentences import cost_lines
from trainserve.report.common.typed import from_json, to_json
from trainserve.report.cost.capacity_plan import capacity_plan
from trainserve.report.cost.cost_per_million import CostOptions, cost_section
from trainserve.report.page.analysis import analyse


def _invalid_server_run(tmp_path: Path) -> Path:
    records = test_report_verdict._records()
    server = records["embedded-cuda-server"]
    server.speed.latency.count = 300  # too few for a p99: the verdict finds the GPU's Server capacity INVALID
    server.extra["percentiles_short"] = ["p99_ms", "p999_ms"]
    return test_report_verdict._run(tmp_path, records)


RUNS = {
    "priced, client-batched": (test_cost.make_run, CostOptions(prices=test_cost.PRICES, slo_p99_ms=40.0, qps=100.0)),
    "run size not known": (test_report.make_run, CostOptions(slo_p99_ms=20.0, qps=3000.0)),
    "no GPU": (lambda p: test_report.make_run(p, gpu=False), CostOptions(slo_p99_ms=20.0, qps=3000.0)),
    "INVALID Server capacity": (_invalid_server_run, CostOptions(slo_p99_ms=50.0, qps=1000.0)),
}


@pytest.mark.parametrize("case", RUNS)
def test_costs_and_plan_round_trip_through_json(tmp_path, case):
    make, opts = RUNS[case]
    report = analyse(collect(make(tmp_path)))
    costs, plan = cost_section(report, opts), capacity_plan(report, opts)
    for section, kind in ((costs, Costs), (plan, Plan)):
        written = json.dumps(to_json(section), indent=2)
        assert from_json(kind, json.loads(written)) == section


def test_the_cases_cover_every_optional_shape(tmp_path):
    shapes = set()
    for case, (make, opts) in RUNS.items():
        report = analyse(collect(make(tmp_path / case.replace(" ", "_").replace(",", ""))))
        costs, plan = cost_section(report, opts), capacity_plan(report, opts)
        for m in costs.models.values():
            shapes |= {type(r.run) for rows in m.train.values() for r in rows}
            shapes |= {"no GPU measured"} if m.gpu_price is None else set()
            shapes |= {"break-even scanned"} if m.break_even.cheaper_at_scale else {"break-even not computed"}
        for m in plan.models.values():
            for d in m.devices.values():
                shapes |= {"client batched"} if d.client_batched else set()
                shapes |= {"INVALID capacity"} if d.capacity_valid is False else set()
    assert shapes >= {RunCost, RunNotKnown, "no GPU measured", "break-even scanned", "break-even not computed",
                      "client batched", "INVALID capacity"}


def test_the_cli_prints_the_cost_lines_of_the_sections_the_report_wrote(tmp_path):
    make, opts = RUNS["INVALID Server capacity"]
    run = make(tmp_path)
    report = analyse(collect(run))
    direct = cost_lines(cost_section(report, opts), capacity_plan(report, opts))
    assert any(line.startswith("plan ") for line in direct) and any("INVALID" in line for line in direct)
    html, lines = write_report(run, opts)
    assert lines == direct
    summary = json.loads((html.parent / "summary.json").read_text())
    assert cost_lines(from_json(Costs, summary["costs"]), from_json(Plan, summary["plan"])) == direct
