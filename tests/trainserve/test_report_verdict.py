"""The verdict, the scenarios table with repeats' CIs, and the plan's Server capacity, from written records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainserve.core.profile import LatencyStats, ProfileRecord
from trainserve.report import build_report
from trainserve.report.common.stats import ci95, t95, within_noise
from trainserve.report.cost.cost_per_million import CostOptions

HOST = {"hostname": "bench-01", "cpu_model": "Test CPU", "logical_cpus": 8, "memory_bytes": 2**34}
STABLE = {"stable": True, "rule": "windows", "reason": "3 consecutive 1 s windows agree within 10%",
          "windows_used": [1, 2, 3]}


def _load(device: str, scenario: str, requests_s: float, p99: float, batch: int = 1, users: int = 1,
          repeats: list[float] | None = None) -> ProfileRecord:
    r = ProfileRecord(phase="infer", model=f"cnn_{'gpu' if device == 'cuda' else 'cpu'}", backend="onnxruntime",
                      device=device, batch_size=batch, concurrency=users, host=HOST)
    r.speed.requests_s, r.speed.throughput_samples_s = requests_s, requests_s * batch
    r.speed.latency = LatencyStats(count=4000, mean_ms=p99 / 3, p50_ms=p99 / 4, p90_ms=p99 / 2, p95_ms=p99 / 1.5,
                                   p99_ms=p99, p999_ms=p99 * 1.5, max_ms=p99 * 2, min_ms=0.1)
    r.validity.stability = dict(STABLE)
    r.settings = {"mode": "closed", "scenario": scenario}
    r.extra = {"requests": 4000, "failures": 0, "percentiles_short": ["p999_ms"]}
    if repeats:
        r.extra["repeats"] = [{"requests_s": x, "p99_ms": p99, "capacity_req_s": x if scenario == "Server" else None}
                              for x in repeats]
    if scenario == "Server":
        r.extra["search"] = {"capacity_req_s": requests_s, "lower_bound": False, "stop_reason": "bracketed within 5%",
                             "slo_p99_ms": 50.0, "figure": {"requests": 4000, "failures": 0}}
    return r


def _run(tmp_path: Path, records: dict[str, ProfileRecord]) -> Path:
    run = tmp_path / "r"
    for name, rec in records.items():
        rec.save(run / "load" / f"{name}.json")
    return run


def _records() -> dict[str, ProfileRecord]:
    ramp = _load("cpu", "ramp", 900.0, 30.0, users=4)
    ramp.validity.stability = None
    ramp.extra["ramp"] = [{"users": u, "rate": None, "requests_s": 300.0 * u, "throughput_samples_s": 300.0 * u,
                           "p50_ms": 1.0, "p90_ms": 2.0, "p99_ms": 3.0 * u, "failures": 0} for u in (1, 2, 3)]
    return {
        "embedded-cpu-ramp": ramp,
        "embedded-cpu-server": _load("cpu", "Server", 400.0, 40.0, repeats=[390.0, 400.0, 410.0]),
        "embedded-cpu-batch1": _load("cpu", "SingleStream", 500.0, 3.0),
        "embedded-cpu-saturated": _load("cpu", "Offline", 40.0, 60.0, batch=64, users=4),
        "embedded-cuda-server": _load("cuda", "Server", 405.0, 20.0, repeats=[395.0, 405.0, 415.0]),
        "embedded-cuda-batch1": _load("cuda", "SingleStream", 900.0, 2.0),
        "embedded-cuda-saturated": _load("cuda", "Offline", 300.0, 40.0, batch=64, users=4),
    }


def test_valid_run_uses_the_server_capacity_and_flags_a_difference_within_noise(tmp_path: Path) -> None:
    html = build_report(_run(tmp_path, _records()), CostOptions(slo_p99_ms=50.0, qps=1000.0))
    s = json.loads((html.parent / "summary.json").read_text())
    assert s["verdict"] == {"result": "VALID", "reasons": [], "checked": 7, "invalid_sources": []}
    rows = s["scenarios"]["models"]["cnn"]
    assert rows["cpu"]["Server"]["capacity_req_s"] == 400.0
    ci = rows["cpu"]["Server"]["ci95"]["capacity_req_s"]
    assert ci["n"] == 3 and ci["mean"] == pytest.approx(400.0) and ci["half_width"] == pytest.approx(24.84, abs=0.01)
    assert rows["cpu"]["SingleStream"]["p95_ms"] == 2.0
    # the plan's capacity is the Server figure (400), not the ramp's best step (900 req/s closed loop)
    cpu_plan = s["plan"]["models"]["cnn"]["devices"]["cpu"]
    assert cpu_plan["capacity_req_s"] == 400.0 and cpu_plan["capacity_point"]["kind"] == "Server scenario"
    assert s["costs"]["models"]["cnn"]["capacity_at_slo_req_s"] == {"cpu": 400.0, "cuda": 405.0}
    # 405 vs 400 req/s with ±25 each: no winner
    server = next(n for n in s["scenarios"]["noise"] if n["scenario"] == "Server")
    assert server["within_noise"] is True and server["difference"] == pytest.approx(5.0)
    text = html.read_text()
    assert "Result is: <span class='ok'>VALID</span>" in text and "smaller than its noise" in text
    md = (html.parent / "report.md").read_text()
    assert "**Result is: VALID**" in md and "400 ± 24.8 req/s" in md
    assert "| p95 |" in md  # the scenarios table, and the model table's row


def test_invalid_run_lists_every_reason_and_keeps_the_headline_from_invalid_figures(tmp_path: Path) -> None:
    records = _records()
    b1 = records["embedded-cpu-batch1"]
    b1.validity.stability = {"stable": False, "rule": None, "reason": "did not stabilise: the last 3 windows' "
                             "throughput differ by more than 10% (200-500 req/s)", "windows_used": [0, 1, 2]}
    b1.validity.client_saturated = True
    sat = records["embedded-cuda-saturated"]
    sat.extra.update(requests=1000, failures=5)
    sat.speed.latency.count = 200  # too few for a p99, but Offline's figure is its throughput: not a reason
    sat.extra["percentiles_short"] = ["p99_ms", "p999_ms"]
    server = records["embedded-cuda-server"]
    server.speed.latency.count = 300
    server.extra["percentiles_short"] = ["p99_ms", "p999_ms"]
    html = build_report(_run(tmp_path, records))
    s = json.loads((html.parent / "summary.json").read_text())
    v = s["verdict"]
    assert v["result"] == "INVALID"
    kinds = {(r["kind"], r["source"]) for r in v["reasons"]}
    assert kinds == {("unstable", "load/embedded-cpu-batch1.json"),
                     ("client_saturated", "load/embedded-cpu-batch1.json"),
                     ("errors", "load/embedded-cuda-saturated.json"),
                     ("too_few_requests", "load/embedded-cuda-server.json")}
    conclusion = next(h for h in s["headline"] if h["kind"] == "conclusion")
    assert conclusion["text"].startswith("cnn: not stated") and "embedded-cpu-batch1" in conclusion["text"]
    # each entry is screened by the figures it rests on: the training speedups rest on no INVALID record
    assert all("withheld_by_verdict" not in h for h in s["headline"] if h["kind"] == "train_speedup")
    md = (html.parent / "report.md").read_text()
    assert f"- **{conclusion['text']}**" in md  # the screened headline is what the Summary states
    assert "at batch 1 it answers" not in md  # the sentence that rests on the INVALID batch-1 figure is not
    # every other conclusion that rests on an INVALID record says so, naming it; the others are unmarked
    marked = [c for c in s["conclusions"] if "Not valid: it rests on" in c]
    assert marked and all(c.endswith("(see the verdict).") for c in marked)
    assert all("load/embedded-cpu-batch1.json" in c or "load/embedded-cuda-saturated.json" in c for c in marked)
    assert marked[0].startswith("cnn: at batch 1 it answers")  # the model's sentence, in summary.json
    assert all("Not valid" not in c for c in s["conclusions"] if "closed-loop ramp" in c)  # ramps are valid
    single = s["scenarios"]["models"]["cnn"]["cpu"]["SingleStream"]
    assert not single["valid"] and not single["stable"]
    assert any("did not stabilise" in reason for reason in single["reasons"])
    text = html.read_text()
    assert "Result is: <span class='err'>INVALID</span>" in text and "did not stabilise" in text
    assert "**Result is: INVALID**" in (html.parent / "report.md").read_text()


def test_confidence_interval_arithmetic() -> None:
    assert t95(1) == pytest.approx(12.706, abs=5e-4) and t95(1000) == pytest.approx(1.962, abs=5e-4)
    assert t95(22) == pytest.approx(2.074, abs=5e-4)  # every df its own quantile: 22 is not rounded to 25
    ci = ci95([10.0, 12.0, 14.0])
    assert ci["mean"] == 12.0 and ci["sd"] == 2.0 and ci["half_width"] == pytest.approx(4.303 * 2 / 3 ** 0.5, rel=1e-4)
    assert ci95([5.0]) is None and ci95([None, 5.0]) is None
    assert within_noise(ci, ci95([15.0, 16.0, 17.0])) is True
    assert within_noise(ci, ci95([30.0, 31.0, 32.0])) is False


def test_report_and_plan_take_the_slo_the_capacity_was_searched_under_and_refuse_another(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from trainserve.cli import app
    from trainserve.core.errors import UserError

    run = _run(tmp_path, _records())  # both Server searches ran under p99 <= 50 ms
    s = json.loads((build_report(run, CostOptions(qps=1000.0)).parent / "summary.json").read_text())
    assert s["costs"]["slo_p99_ms"] == 50.0 and s["plan"]["slo_p99_ms"] == 50.0  # none given: the search's
    with pytest.raises(UserError, match=r"--slo-p99-ms 20 is tighter than the p99 ≤ 50 ms the run's Server scenario "
                                        r"was searched under.*pass --slo-p99-ms 50 or more, or search again"):
        build_report(run, CostOptions(slo_p99_ms=20.0, qps=1000.0))
    out = CliRunner().invoke(app, ["plan", "--run", "r", "--runs-dir", str(tmp_path), "--qps", "1000",
                                   "--slo-p99-ms", "20"])
    assert out.exit_code == 1 and "tighter than the p99 ≤ 50 ms" in out.output and "Traceback" not in out.output
    for looser in ("50", "100"):  # a rate within 50 ms is within 100 ms: the capacity is a lower bound there
        ok = CliRunner().invoke(app, ["plan", "--run", "r", "--runs-dir", str(tmp_path), "--qps", "1000",
                                      "--slo-p99-ms", looser])
        assert ok.exit_code == 0, ok.output
