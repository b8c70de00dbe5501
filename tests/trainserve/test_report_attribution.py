"""The report's attribution: a stacked bar per served operating point, the bound of every figure, "the server adds"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trainserve.test_report import make_run
from trainserve.core.profile import ProfileRecord
from trainserve.core.served import Attribution, Bound, ClientCpu, Served, as_dict
from trainserve.report import build_report
from trainserve.report.common.sections import AttributionPoint, Split
from trainserve.report.serving.attribution_plot import attribution_chart


def _split(latency: float, server: float, queue: float, compute: float, client: float) -> Attribution:
    return Attribution(latency_ms=latency, client_ms=client, server_ms=server, queue_ms=queue, compute_ms=compute,
                       frontend_ms=round(server - queue - compute, 4),
                       network_ms=round(latency - client - server, 4), requests=1000, mean_batch=1.0)


def _add_served(run: Path) -> Path:
    """Attribution on make_run's CPU batch-1 ramp and GPU batch-512 record (as a load run writes them)."""
    cpu = ProfileRecord.load(run / "load" / "embedded-cpu.json")
    cpu.served = Served(client=ClientCpu(per_process_core_fraction={"local": 0.4}, cores=1),
                        bound=Bound("slo", "the ramp's stop (--ramp-stop-p99-ms): the next step had p99 31 ms > 20 ms"))
    cpu.settings["slo_p99_ms"] = 20.0
    cpu.extra["ramp"] = [
        {**p, "attribution": as_dict(_split(0.9 + 0.5 * i, 0.5 + 0.4 * i, 0.1 * i, 0.3, 0.05)),
         "bound": as_dict(Bound("load", "the offered load: nothing saturated"))}
        for i, p in enumerate(cpu.extra["ramp"])]
    cpu.extra["saturation"] = {"users": cpu.extra["ramp"][1]["users"], "requests_s": cpu.extra["ramp"][1]["requests_s"],
                               "reason": "p99 31 ms > 20 ms"}
    cpu.save(run / "load" / "embedded-cpu.json")
    gpu = ProfileRecord.load(run / "load" / "embedded-gpu-b512.json")
    gpu.served = Served(client=ClientCpu(per_process_core_fraction={"local": 0.97}, cores=1, saturated=True,
                                         note="process local used 97% of a core"),
                        attribution=_split(13.9, 6.2, 2.0, 4.0, 0.8),
                        bound=Bound("client", "the client: the load generator was saturated (process local used "
                                              "97% of a core)"))
    gpu.save(run / "load" / "embedded-gpu-b512.json")
    return run


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    return build_report(_add_served(make_run(tmp_path_factory.mktemp("runs")))).parent


def test_summary_carries_each_points_split_and_bound(report: Path) -> None:
    cnn = json.loads((report / "summary.json").read_text())["models"]["cnn"]
    points = cnn["attribution"]
    ramp = [p for p in points if p["source"] == "load/embedded-cpu.json"]
    assert len(ramp) >= 2 and all("(ramp)" in p["label"] for p in ramp)
    gpu = next(p for p in points if p["source"] == "load/embedded-gpu-b512.json")
    assert gpu["bound"]["kind"] == "client" and gpu["client_saturated"]
    a = gpu["attribution"]
    assert sum(a[k] for k in ("client", "network", "frontend", "queue", "compute")) == pytest.approx(a["latency_ms"])
    cap = next(c for c in cnn["capacity_bounds"] if c["device"] == "cpu")
    assert cap["bound"]["kind"] == "slo" and cap["slo_p99_ms"] == 20.0
    text = " ".join(cnn["conclusions"])
    # what the server adds is its own figure (6.20 ms: queue + compute + front end), not latency minus in process
    assert "the server adds 6.20 ms by its own statistics (queue 2.00 ms, compute 4.00 ms, front end 0.20 ms)" in text
    assert ("cnn on the CPU: the closed-loop ramp's highest load within its stop condition (p99 ≤ 20 ms) is 1,957 req/s "
            "at 2 users, bounded by the "
            "ramp's stop (--ramp-stop-p99-ms): the next step had p99 31 ms > 20 ms; a closed-loop figure set by its "
            "users, not a capacity (the Server scenario was not measured).") in text


def test_html_and_markdown_show_the_stacked_bars_and_the_bounds(report: Path) -> None:
    html = (report / "report.html").read_text()
    md = (report / "report.md").read_text()
    png = report / "attribution-cnn.png"
    assert png.is_file() and png.read_bytes().startswith(b"\x89PNG")
    assert "Where the time goes, and what bounded each figure" in html and "alt='attribution-cnn.png'" in html
    assert "![attribution-cnn.png](attribution-cnn.png)" in md
    # the main table names each served column's bound: the saturated GPU column is the client's figure
    row = next(line for line in md.splitlines() if line.startswith("| bounded by |"))
    assert "client" in row
    for text in (html, md):
        assert "4 users: 293 req/s — bounded by the client: the load generator was saturated" in text
        assert "1 user (ramp): 1,087 req/s — bounded by the offered load: nothing saturated." in text
        assert "server compute" in text
        assert "client's own time" in text.replace("&#x27;", "'")


def test_the_chart_draws_one_bar_per_point_and_nothing_without_a_split() -> None:
    a = _split(2.0, 1.0, 0.2, 0.6, 0.3)
    split = Split(**a.parts(), latency_ms=a.latency_ms, server_ms=a.server_ms, consistent=a.consistent, note=a.note,
                  mean_batch=a.mean_batch)

    def point(label: str, device: str, split: Split | None, bound: dict | None) -> AttributionPoint:
        return AttributionPoint(source="load/x.json", device=device, backend="onnxruntime", batch_size=1, label=label,
                                requests_s=100.0, p99_ms=3.0, attribution=split, bound=bound, client_saturated=False)

    points = [point("CPU · batch 1 · 1 user", "cpu", split, {"kind": "load"}),
              point("GPU · batch 1 · 1 user", "cuda", split, None),
              point("CPU · batch 1 · 8 users", "cpu", None, None)]
    assert attribution_chart("m", points).startswith(b"\x89PNG")
    assert attribution_chart("m", points[2:]) is None


def test_a_ramp_s_figure_is_named_beside_the_server_scenario_s_capacity():
    from types import SimpleNamespace

    from trainserve.report.common.sentences import _not_capacity

    row = SimpleNamespace(capacity_req_s=55_679.0, lower_bound=False, slo_p99_ms=20.0)
    s = SimpleNamespace(scenarios={"cuda": {"Server": row}})
    assert _not_capacity(s, "cuda") == ("a closed-loop figure set by its users, not a capacity: the Server scenario's "
                                        "capacity, Poisson arrivals within p99 ≤ 20 ms, is 55,679 req/s")
    row.lower_bound = True
    assert "is at least 55,679 req/s" in _not_capacity(s, "cuda")
    assert "the Server scenario was not measured" in _not_capacity(s, "cpu")
