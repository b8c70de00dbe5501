"""What it costs: unit costs from crafted records at known prices, the break-even, the capacity plan,
bad inputs through the real CLI, and the report's cost section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainserve.cli import app
from trainserve.core.errors import UserError
from trainserve.core.profile import LatencyStats, ProfileRecord
from trainserve.report import build_report
from trainserve.report.common.collect import collect
from trainserve.report.common.cost_sections import InferCost, TrainCost
from trainserve.report.common.prices import Prices, load_prices, resolve_prices
from trainserve.report.common.sections import Report
from trainserve.report.common.typed import to_json
from trainserve.report.cost.capacity_plan import capacity_plan, require_feasible
from trainserve.report.cost.cost_per_million import CostOptions, break_even, cost_section
from trainserve.report.page.analysis import analyse

HOST = {"hostname": "bench", "logical_cpus": 4}
# round prices, so every expected figure below is worked out by hand
PRICES = Prices(cpu_core_hour_usd=0.09, gpu_hour_usd=3.6, kwh_usd=0.1)  # CPU server: 4 x 0.09 = $0.36/h


def _infer(device: str, batch: int, users: int, throughput: float, p99: float,
           ramp: list[tuple[int, float, float]] | None = None, energy_per_sample_j: float | None = None,
           source: str | None = None) -> ProfileRecord:
    served = "cnn_gpu" if device == "cuda" else "cnn_cpu"
    r = ProfileRecord(phase="infer", model=served, backend="onnxruntime", device=device, batch_size=batch,
                      concurrency=users, host=HOST)
    r.speed.throughput_samples_s = throughput
    r.speed.requests_s = throughput / batch
    r.speed.latency = LatencyStats(count=1000, p50_ms=p99 / 2, p90_ms=p99 * 0.8, p99_ms=p99, max_ms=p99 * 2)
    r.energy.energy_per_sample_j = energy_per_sample_j
    r.energy.source = source
    if ramp:
        r.extra["ramp"] = [{"users": u_, "rate": None, "requests_s": x, "throughput_samples_s": x,
                            "p50_ms": p / 2, "p99_ms": p, "failures": 0} for u_, x, p in ramp]
    return r


def _sweep(device: str, batch: int, throughput: float, energy_per_sample_j: float | None, source: str | None,
           threads: int | None = None) -> ProfileRecord:
    r = ProfileRecord(phase="train", model="cnn", backend="torch", device=device, batch_size=batch, host=HOST,
                      precision="fp32")
    r.speed.throughput_samples_s = throughput
    r.speed.latency = LatencyStats(count=10, p50_ms=1.0, p99_ms=1.0)
    r.energy.energy_per_sample_j = energy_per_sample_j
    r.energy.source = source
    r.settings = {"epochs": 2} | ({"torch_threads": threads} if threads else {})
    r.extra["sweep"] = True
    return r


def make_run(runs: Path, name: str = "c1") -> Path:
    run = runs / name
    # CPU server: 100/s at batch 1 alone; a ramp of one-row requests; energy on this host is the idle GPU's (NVML)
    _infer("cpu", 1, 1, 100.0, 5.0, energy_per_sample_j=0.5, source="nvml").save(run / "load" / "cpu-batch1.json")
    _infer("cpu", 1, 1, 100.0, 5.0, ramp=[(1, 100.0, 5.0), (2, 180.0, 8.0), (3, 240.0, 15.0), (4, 250.0, 40.0)]) \
        .save(run / "load" / "cpu-ramp.json")
    # GPU server: 1,000/s at batch 1 with its own NVML energy; a ramp; client-batched saturation
    _infer("cuda", 1, 1, 1000.0, 3.0, energy_per_sample_j=0.0036, source="nvml").save(run / "load" / "gpu-batch1.json")
    _infer("cuda", 1, 1, 1000.0, 3.0, ramp=[(1, 1000.0, 3.0), (2, 1800.0, 6.0)]).save(run / "load" / "gpu-ramp.json")
    _infer("cuda", 64, 8, 36000.0, 30.0, energy_per_sample_j=0.0001, source="nvml").save(run / "load" / "gpu-sat.json")
    # training sweeps: GPU best 10,000/s (0.036 J/sample); CPU best 90/s on 2 torch threads, no RAPL
    _sweep("cuda", 256, 10_000.0, 0.036, "nvml").save(run / "sweep" / "cuda" / "b256.json")
    _sweep("cuda", 8, 2_000.0, 0.1, "nvml").save(run / "sweep" / "cuda" / "b8.json")
    _sweep("cpu", 32, 90.0, None, None, threads=2).save(run / "sweep" / "cpu" / "b32.json")
    (run / "train").mkdir(parents=True, exist_ok=True)
    (run / "train" / "model.json").write_text(json.dumps({"family": "cnn", "data": {"samples": 50_000}}))
    return run


@pytest.fixture
def summary(tmp_path) -> Report:
    return analyse(collect(make_run(tmp_path)))


def _row(rows: list[InferCost] | list[TrainCost], basis: str) -> InferCost | TrainCost:
    return next(r for r in rows if r.basis == basis)


def test_inference_cost_per_million_at_known_prices(summary):
    c = cost_section(summary, CostOptions(prices=PRICES, slo_p99_ms=20.0)).models["cnn"]
    gpu = c.infer["cuda"]
    assert (gpu.units, gpu.usd_per_hour) == (1, 3.6)
    b1 = _row(gpu.rows, "batch1")
    # $3.6/h at 1,000/s: 3.6 / 3,600,000 inferences = $1.00 per million; 0.0036 J each = 0.001 kWh = $0.0001
    assert b1.hardware_usd_per_million_inferences == pytest.approx(1.0, rel=1e-12)
    assert b1.kwh_per_million_inferences == pytest.approx(0.001, rel=1e-12)
    assert b1.energy_usd_per_million_inferences == pytest.approx(0.0001, rel=1e-12)
    assert b1.usd_per_million_inferences == pytest.approx(1.0001, rel=1e-12)
    sat = _row(gpu.rows, "saturated")
    assert sat.batch_size == 64 and sat.hardware_usd_per_million_inferences == pytest.approx(1 / 36, rel=1e-12)
    # within p99 <= 20 ms the most one-row load is the ramp's 1,800/s; one ramp step has no energy of its own
    slo = _row(gpu.rows, "slo")
    assert slo.throughput_samples_s == 1800.0 and slo.kwh_per_million_inferences is None
    assert "ramp" in slo.energy_note

    cpu = c.infer["cpu"]
    assert (cpu.units, cpu.usd_per_hour) == (4, pytest.approx(0.36))  # every logical CPU of the host
    cb1 = _row(cpu.rows, "batch1")
    assert cb1.hardware_usd_per_million_inferences == pytest.approx(1.0, rel=1e-12)  # $0.36/h at 100/s
    # the CPU record's energy is the GPU's (NVML): never charged to the CPU
    assert cb1.kwh_per_million_inferences is None and "NVML" in cb1.energy_note
    assert _row(cpu.rows, "slo").throughput_samples_s == 240.0  # 250/s had p99 40 ms


def test_training_cost_per_million_and_per_run(summary):
    c = cost_section(summary, CostOptions(prices=PRICES)).models["cnn"]
    assert c.run_samples == 100_000  # 2 epochs x 50,000 rows
    best = _row(c.train["cuda"], "best")
    assert best.batch_size == 256
    assert best.hardware_usd_per_million_samples == pytest.approx(0.1, rel=1e-12)  # $3.6/h at 10,000/s
    assert best.kwh_per_million_samples == pytest.approx(0.01, rel=1e-12)  # 0.036 J x 1e6 / 3.6e6
    run = best.run
    assert run.wall_hours == pytest.approx(10 / 3600, rel=1e-12)  # 100,000 samples at 10,000/s
    assert run.hardware_hours == pytest.approx(10 / 3600, rel=1e-12)
    assert run.hardware_usd == pytest.approx(0.01, rel=1e-12)
    assert run.kwh == pytest.approx(0.001, rel=1e-12) and run.energy_usd == pytest.approx(0.0001, rel=1e-12)
    cpu = _row(c.train["cpu"], "best")
    assert (cpu.units, cpu.usd_per_hour) == (2, pytest.approx(0.18))  # its 2 torch threads
    assert cpu.hardware_usd_per_million_samples == pytest.approx(0.18 / (90 * 3600) * 1e6, rel=1e-12)
    assert cpu.kwh_per_million_samples is None and cpu.energy_note.startswith("not measured")
    assert cpu.run.kwh is None


def test_break_even_is_where_gpus_start_and_stay_cheaper():
    # CPU: 100 req/s per $1/h server; GPU: 1,000 req/s per $5/h. Above 500 req/s six CPU servers ($6) cost more than
    # one GPU ($5); above 1,000, 11 CPU servers vs 2 GPUs; per request at scale $0.01 vs $0.005
    be = break_even((100.0, 1.0), (1000.0, 5.0), 3000.0)
    assert be.break_even_req_s == pytest.approx(500.0) and be.first_gpu_cheaper_req_s == pytest.approx(500.0)
    never = break_even((100.0, 1.0), (1000.0, 20.0), 3000.0)  # $0.02 per request-hour on the GPU: never cheaper
    assert never.break_even_req_s is None and "never" in never.note
    assert never.cheaper_at_scale == "the CPU"


def test_capacity_plan_on_a_crafted_frontier(summary):
    opts = CostOptions(prices=PRICES, slo_p99_ms=20.0, qps=1000.0, headroom=0.2)
    plan = capacity_plan(summary, opts).models["cnn"]
    cpu, gpu = plan.devices["cpu"], plan.devices["cuda"]
    # 1,200 req/s over 240 per CPU server (its last ramp step within 20 ms) = exactly 5 servers, not 6
    assert (cpu.capacity_req_s, cpu.servers, cpu.units) == (240.0, 5, 20)
    assert cpu.usd_per_hour == pytest.approx(1.8) and cpu.extrapolated and cpu.extrapolation_factor == 5.0
    assert (gpu.capacity_req_s, gpu.servers, gpu.usd_per_hour, gpu.extrapolated) == (1800.0, 1, 3.6, False)
    assert plan.cheaper == "cpu"
    text = "\n".join(plan.lines)
    assert "CPU: one server sustains 240 req/s" in text and "Extrapolated: the target is 5.0x" in text
    assert "linearly (not measured)" in text
    gpu_line = next(line for line in plan.lines if line.startswith("GPU: "))
    assert "Extrapolated" not in gpu_line
    # the CPU ramp went past the SLO (250/s at 40 ms); the GPU's heaviest load (1,800/s at 6 ms) still met it
    assert not cpu.capacity_lower_bound and gpu.capacity_lower_bound
    assert "A lower bound: the heaviest load offered still met the SLO and still gained" in gpu_line
    assert "lower bound" not in next(line for line in plan.lines if line.startswith("CPU: "))
    assert "Cheaper: the CPU, $1.80/h vs $3.60/h on the GPU" in text
    # the client-batched saturation (64 rows, p99 30 ms) is above this SLO: no batched line
    assert not any("rows per request" in line for line in plan.lines)


@pytest.mark.parametrize("last", [(3, 1200.0, 9.0), (3, 1790.0, 9.0), (3, 1850.0, 9.0)])
def test_a_ramp_that_stopped_gaining_found_its_limit(tmp_path, last):
    run = make_run(tmp_path)
    # the GPU ramp's heaviest step met the SLO but answered less than, about as much as, or barely more than the
    # step before: saturated, not a lower bound
    _infer("cuda", 1, 1, 1000.0, 3.0, ramp=[(1, 1000.0, 3.0), (2, 1800.0, 6.0), last]) \
        .save(run / "load" / "gpu-ramp.json")
    plan = capacity_plan(analyse(collect(run)), CostOptions(prices=PRICES, slo_p99_ms=20.0, qps=1000.0))
    gpu = plan.models["cnn"].devices["cuda"]
    assert gpu.capacity_req_s == max(1800.0, last[1]) and not gpu.capacity_lower_bound


def test_an_slo_below_every_measured_p99_is_an_error_for_plan_and_a_line_in_the_report(summary):
    plan = capacity_plan(summary, CostOptions(prices=PRICES, slo_p99_ms=2.0, qps=100.0))
    with pytest.raises(UserError, match=r"below every measured p99 \(the lowest is 3.00 ms\)"):
        require_feasible(plan)
    assert any("cannot meet p99 ≤ 2 ms" in line for line in plan.models["cnn"].lines)


def test_prices_validation_and_file(tmp_path):
    for bad in (-1.0, 0.0, float("nan"), float("inf")):
        with pytest.raises(UserError, match="--price-gpu-hour"):
            Prices(gpu_hour_usd=bad)
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"gpu_hour_usd": 2.5, "date": "2026-01"}))
    p = load_prices(f)
    assert (p.gpu_hour_usd, p.date, p.gpu_offer) == (2.5, "2026-01", "from p.json")
    assert p.cpu_core_hour_usd == Prices().cpu_core_hour_usd
    p = resolve_prices(f, gpu_hour=4.0)  # an option wins over the file
    assert (p.gpu_hour_usd, p.gpu_offer) == (4.0, "given with --price-gpu-hour")
    f.write_text('{"gpu_hour_usd": "cheap"}')
    with pytest.raises(UserError, match="gpu_hour_usd"):
        load_prices(f)


@pytest.mark.parametrize("args, says", [
    (["--qps", "0", "--slo-p99-ms", "20"], "--qps 0 is invalid"),
    (["--qps", "100", "--slo-p99-ms", "-5"], "--slo-p99-ms -5 is invalid"),
    (["--qps", "100", "--slo-p99-ms", "1"], "below every measured p99"),
    (["--qps", "100", "--slo-p99-ms", "20", "--price-cpu-core-hour", "-0.1"], "--price-cpu-core-hour"),
    (["--qps", "100", "--slo-p99-ms", "20", "--headroom", "-1"], "--headroom -1 is invalid"),
    (["--qps", "100", "--slo-p99-ms", "20", "--prices", "MISSING"], "does not exist"),
])
def test_plan_cli_bad_input_is_one_sentence_and_exit_1(tmp_path, args, says):
    make_run(tmp_path)
    args = [a.replace("MISSING", str(tmp_path / "none.json")) for a in args]
    result = CliRunner().invoke(app, ["plan", "--run", "c1", "--runs-dir", str(tmp_path), *args])
    assert result.exit_code == 1, result.output
    assert says in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_plan_cli_unknown_run_and_good_plan(tmp_path):
    make_run(tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["plan", "--run", "nope", "--runs-dir", str(tmp_path), "--qps", "10",
                                 "--slo-p99-ms", "20"])
    assert result.exit_code == 1 and "not found" in result.output
    result = runner.invoke(app, ["plan", "--run", "c1", "--runs-dir", str(tmp_path), "--qps", "1000",
                                 "--slo-p99-ms", "20", "--price-cpu-core-hour", "0.09", "--price-gpu-hour", "3.6"])
    assert result.exit_code == 0, result.output
    assert "5 servers (20 logical CPUs), $1.80/h" in result.output and "Cheaper: the CPU" in result.output


def test_report_has_the_cost_section_plan_and_chart(tmp_path):
    run = make_run(tmp_path)
    result = CliRunner().invoke(app, ["report", "--run", "c1", "--runs-dir", str(tmp_path), "--qps", "1000",
                                      "--slo-p99-ms", "20", "--price-cpu-core-hour", "0.09",
                                      "--price-gpu-hour", "3.6", "--price-kwh", "0.1"])
    assert result.exit_code == 0, result.output
    assert "cost cnn · GPU serving (1 GPU, $3.60/h)" in result.output and "plan cnn:" in result.output
    out = run / "report"
    s = json.loads((out / "summary.json").read_text())
    assert s["costs"]["prices"]["gpu_hour_usd"] == 3.6 and s["costs"]["prices"]["gpu_offer"] == "given with --price-gpu-hour"
    b1 = next(r for r in s["costs"]["models"]["cnn"]["infer"]["cuda"]["rows"] if r["basis"] == "batch1")
    assert b1["usd_per_million_inferences"] == pytest.approx(1.0001)
    assert s["plan"]["models"]["cnn"]["devices"]["cpu"]["servers"] == 5
    md = (out / "report.md").read_text()
    assert "## What it costs" in md and "given with --price-gpu-hour" in md and "](cost-cnn.png)" in md and "![cost-cnn.png]" not in md
    assert md.index("## What it costs") < md.index("## Model `cnn`")  # near the top
    assert "### Capacity plan" in md and "Extrapolated" in md
    assert (out / "cost-cnn.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "report.html").read_text()
    assert "What it costs" in html and "Assumptions" in html and "cost per million one-row inferences of model cnn" in html


def test_report_without_qps_has_no_plan_and_default_prices(tmp_path):
    run = make_run(tmp_path)
    build_report(run)
    s = json.loads((run / "report" / "summary.json").read_text())
    assert s["plan"] is None and s["costs"]["prices"] == to_json(Prices())


def _metered_run(tmp_path: Path) -> Path:
    """The verdict test's run with energies: NVML on every GPU record (the Server search's too), the CPU
    estimate on the CPU's SingleStream and Server records, and an older CPU record carrying the idle GPU's NVML."""
    from tests.trainserve import test_report_verdict as v

    records = v._records()
    for name, r in records.items():
        e = r.energy
        if r.device == "cuda":
            e.source, e.meter, e.device, e.mean_power_w, e.energy_per_sample_j = "nvml", "NVML device 0", "cuda:0", \
                300.0, 0.036
        elif name in ("embedded-cpu-batch1", "embedded-cpu-server"):
            e.source, e.meter, e.device, e.mean_power_w, e.energy_per_sample_j = \
                "estimate", "estimate: TDP 350 W × process CPU utilisation 25.0%", "cpu", 87.5, 0.36
        elif name == "embedded-cpu-saturated":
            e.source, e.mean_power_w, e.energy_per_sample_j = "nvml", 72.0, 0.10546
            r.utilization.gpu_mem_used_max_bytes = 483 * 2**20
    return v._run(tmp_path, records)


def test_every_table_says_the_same_of_each_records_energy(tmp_path):
    html = build_report(_metered_run(tmp_path), CostOptions(slo_p99_ms=50.0, qps=1000.0))
    s = json.loads((html.parent / "summary.json").read_text())
    served = s["models"]["cnn"]["infer"]["onnxruntime"]
    costs = s["costs"]["models"]["cnn"]["infer"]
    cost_rows = {(d, r["kind"]): r for d, dev in costs.items() for r in dev["rows"]}
    # the GPU's Server capacity row carries the search record's own NVML energy, like the GPU's other rows
    gpu_server = cost_rows[("cuda", "Server scenario")]
    assert gpu_server["kwh_per_million_inferences"] == pytest.approx(0.01) and gpu_server["energy_status"] == "measured"
    assert s["scenarios"]["models"]["cnn"]["cuda"]["Server"]["energy_status"] == "measured"
    # the CPU estimate: "estimated" in the side-by-side column, the scenario row and the cost row alike
    cpu_b1 = served["cpu"]["batch1"]
    assert cpu_b1["energy_status"] == "estimated" and cpu_b1["energy_meter"].startswith("estimate: TDP 350 W")
    assert cost_rows[("cpu", "batch1")]["energy_status"] == "estimated"
    assert s["scenarios"]["models"]["cnn"]["cpu"]["SingleStream"]["energy_status"] == "estimated"
    # the CPU record carrying the GPU's NVML reading: not measured everywhere, and no GPU figure shown
    cpu_sat = served["cpu"]["saturated"]
    assert cpu_sat["energy_status"] == "not measured" and cpu_sat["mean_power_w"] is None
    assert cpu_sat["energy_per_sample_j"] is None and cpu_sat["memory"]["gpu_mem_used_max_bytes"] is None
    assert s["scenarios"]["models"]["cnn"]["cpu"]["Offline"]["energy_status"] == "not measured"
    assert cost_rows[("cpu", "saturated")]["energy_status"] == "not measured"
    md = (html.parent / "report.md").read_text()
    assert "| ≈ 88 W (estimated) |" in md and "| ≈ 360.00 mJ (estimated) |" in md
    assert "| ≈ 0.100 kWh (estimated) |" in md
    assert "72 W" not in md and "105.46 mJ" not in md and "483 MiB" not in md
