"""Prices keyed by the measured hardware: the table's entry for a known GPU, no price for an unknown one
unless the user gives it, and the GPU price at which the GPU becomes the cheaper way to serve."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.trainserve.test_cost import make_run
from trainserve.cli import app
from trainserve.report.common.collect import collect
from trainserve.report.common.price_table import CPU_PRICE, GPU_PRICES, gpu_entry
from trainserve.report.common.prices import Prices
from trainserve.report.cost.breakeven import gpu_price_break_even
from trainserve.report.cost.capacity_plan import capacity_plan
from trainserve.report.cost.cost_per_million import CostOptions, cost_section
from trainserve.report.page.analysis import analyse

CPU_ONLY = Prices(cpu_core_hour_usd=0.09, kwh_usd=0.1)  # CPU server: 4 x 0.09 = $0.36/h; GPU from the table


def _run_on(tmp_path: Path, gpu_name: str) -> Path:
    """The cost test's run, its GPU records renamed to `gpu_name` (the device name torch/NVML report)."""
    run = make_run(tmp_path)
    for f in run.rglob("*.json"):
        data = json.loads(f.read_text())
        if data.get("device") == "cuda":
            f.write_text(json.dumps(data | {"device_name": gpu_name}))
    return run


@pytest.mark.parametrize(("name", "key"), [("NVIDIA H200", "H200"), ("NVIDIA H100 80GB HBM3", "H100"),
                                           ("NVIDIA A100-SXM4-80GB", "A100 80GB"), ("NVIDIA A100-SXM4-40GB", "A100"),
                                           ("NVIDIA GH200 480GB", None), ("NVIDIA L4", None),
                                           ("Tesla T4", None), (None, None)])
def test_table_entry_by_device_name(name, key):
    entry = gpu_entry(name)
    assert (entry.key if entry else None) == key


def test_every_entry_cites_a_source_and_a_date():
    for e in (*GPU_PRICES, CPU_PRICE):
        assert e.usd_per_hour > 0 and e.source and e.date and e.offer, e


def test_known_gpu_is_priced_from_the_table(tmp_path):
    s = analyse(collect(_run_on(tmp_path, "NVIDIA H200")))
    c = cost_section(s, CostOptions(prices=CPU_ONLY, slo_p99_ms=20.0)).models["cnn"]
    h200 = gpu_entry("NVIDIA H200")
    assert c.gpu_price.origin == "table" and c.gpu_price.usd_per_gpu_hour == h200.usd_per_hour
    assert c.infer["cuda"].usd_per_hour == pytest.approx(h200.usd_per_hour)
    assert "p5en" in c.gpu_price.offer and c.gpu_price.date == h200.date and c.gpu_price.source == h200.source


def test_unknown_gpu_gets_no_price(tmp_path):
    run = _run_on(tmp_path, "NVIDIA L4")
    s = analyse(collect(run))
    c = cost_section(s, CostOptions(prices=CPU_ONLY, slo_p99_ms=20.0)).models["cnn"]
    assert c.gpu_price.origin == "none" and c.gpu_price.usd_per_gpu_hour is None
    assert "no price" in c.gpu_price.note
    gpu = c.infer["cuda"]
    assert gpu.usd_per_hour is None and all(r.usd_per_million_inferences is None for r in gpu.rows)
    assert all(r.usd_per_million_samples is None for r in c.train["cuda"])
    assert c.infer["cpu"].usd_per_hour == pytest.approx(0.36)  # the CPU keeps its price
    assert "no price" in c.break_even.note
    # the price the L4 would have to beat is still shown: it needs no GPU price
    assert c.gpu_price_break_even.break_even_usd_per_gpu_hour is not None
    plan = capacity_plan(s, CostOptions(prices=CPU_ONLY, slo_p99_ms=20.0, qps=100))
    assert plan.models["cnn"].devices["cuda"].usd_per_hour is None
    assert any("no price" in line for line in plan.models["cnn"].lines)

    # the report says so in words; the user's price then prices it
    result = CliRunner().invoke(app, ["report", "--run", "c1", "--runs-dir", str(tmp_path), "--slo-p99-ms", "20"])
    assert result.exit_code == 0, result.output
    md = (run / "report" / "report.md").read_text()
    assert "GPU (NVIDIA L4): no price" in md and "1 GPU, no price" in md
    result = CliRunner().invoke(app, ["report", "--run", "c1", "--runs-dir", str(tmp_path), "--slo-p99-ms", "20",
                                      "--price-gpu-hour", "0.8"])
    assert result.exit_code == 0, result.output
    c = json.loads((run / "report" / "summary.json").read_text())["costs"]["models"]["cnn"]
    assert c["gpu_price"]["origin"] == "user" and c["infer"]["cuda"]["usd_per_hour"] == 0.8


def test_break_even_gpu_price_at_the_planned_load():
    # 1,000 req/s: 5 CPU servers of 240/s at $0.36/h = $1.80/h; 1 GPU of 1,800/s: break-even $1.80 per GPU-hour
    be = gpu_price_break_even(240.0, 0.36, 1800.0, 6.88, 1000.0)
    assert (be.cpu_servers, be.gpus) == (5, 1)
    assert be.break_even_usd_per_gpu_hour == pytest.approx(1.80)
    assert be.gpu_cheaper is False and be.load_basis == "plan"
    assert gpu_price_break_even(240.0, 0.36, 1800.0, 1.0, 1000.0).gpu_cheaper is True
    # no plan: the load one GPU carries, 1,800/s = 8 CPU servers = $2.88/h
    assert gpu_price_break_even(240.0, 0.36, 1800.0, None, None).break_even_usd_per_gpu_hour == pytest.approx(2.88)
    assert "not computed" in gpu_price_break_even(None, 0.36, 1800.0, None, None).note
