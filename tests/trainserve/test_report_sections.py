"""The typed sections and summary.json: to_json writes every field in order, leaving out only the optional ones
that do not apply, and summary.json is exactly the analysed Report."""

from __future__ import annotations

import json

from tests.trainserve.test_report import make_run
from trainserve.report import build_report
from trainserve.report.common.collect import collect
from trainserve.report.common.sections import MemoryFigure, MemoryRatios, MemorySide
from trainserve.report.common.typed import to_json
from trainserve.report.page.analysis import analyse


def test_to_json_keeps_field_order_and_nulls_and_leaves_out_only_optional_nones() -> None:
    fig = MemoryFigure(bytes=1024, kind="working_set", how="session delta", batch_size=None, source=None)
    assert list(to_json(fig).items()) == [("bytes", 1024), ("kind", "working_set"), ("how", "session delta"),
                                          ("batch_size", None), ("source", None)]  # parts: optional, left out
    fig.parts = {"weights": 512, "activations": None}
    side = MemorySide(working_set=fig, process_total=None)
    assert to_json({"cpu": [side, MemoryRatios(working_set=2.0, process_total=None)]}) == {"cpu": [
        {"working_set": {"bytes": 1024, "kind": "working_set", "how": "session delta", "batch_size": None,
                         "source": None, "parts": {"weights": 512, "activations": None}},
         "process_total": None},
        {"working_set": 2.0, "process_total": None}]}


def test_summary_json_is_the_analysed_report(tmp_path) -> None:
    run = make_run(tmp_path)
    written = json.loads((build_report(run).parent / "summary.json").read_text())
    analysed = to_json(analyse(collect(run)))
    for key in ("generated", "costs", "plan"):  # the time it was made; build_report adds the costs and plan
        written.pop(key), analysed.pop(key)
    assert written == analysed
    assert written["models"]["cnn"]["speedups"]["train"]["cpu_point"]["source"] == "compare/profile-cpu.json"
