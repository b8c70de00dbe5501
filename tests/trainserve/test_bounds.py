"""Figures beyond a physical bound: the checks on crafted numbers, and what record, summary and report show."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trainserve.test_report import _infer, _train, make_run
from trainserve.core import bounds
from trainserve.core.profile import ProfileRecord
from trainserve.report import build_report

# --- the checks, on plain numbers ---------------------------------------------------------------


def test_mfu_above_one_is_an_error_and_at_one_is_not():
    v = bounds.check_mfu(1.2, "fp32", "NVIDIA H100 80GB HBM3", 67.0)
    assert v is not None and v.fields == ("mfu",)
    assert "fp32 peak of 67 TFLOP/s" in v.message and "120" not in v.message
    assert bounds.check_mfu(1.0) is None and bounds.check_mfu(None) is None


def test_served_p50_below_the_in_process_limit_is_an_error():
    v = bounds.check_latency(0.40, 0.50, "cuda", 1)
    assert v is not None and "p50_ms" in v.fields and "in-process p50 of 0.5 ms" in v.message
    assert bounds.check_latency(0.49, 0.50, "cuda", 1) is None  # within run-to-run noise
    assert bounds.check_latency(0.40, None, "cuda", 1) is None  # no limit measured: nothing to check


def test_served_throughput_above_the_in_process_best_is_an_error():
    v = bounds.check_throughput(150_000.0, 100_000.0, "cuda")
    assert v is not None and v.fields == ("throughput_samples_s", "requests_s")
    assert bounds.check_throughput(104_000.0, 100_000.0, "cuda") is None


def test_above_the_limit_within_the_two_spreads_is_noise_and_said_beyond_them_is_withheld():
    limit = bounds.Limit({1: 0.5}, 10_000.0, best_spread=0.15, best_point="batch 32 on 1 thread(s)")
    # +20%: beyond the 10% floor, within ±15% in process + ±8% served
    assert bounds.check_throughput(12_000.0, 10_000.0, "cpu", 0.08, limit) is None
    note = bounds.note_throughput(12_000.0, limit, "cpu", 0.08)
    assert note is not None and "within the two measurements' spread (in process ±15%, served ±8%; 23% allowed)" \
        in note.message and "at least 12,000 samples/s" in note.message
    v = bounds.check_throughput(13_411.0, 10_000.0, "cpu", 0.08, limit)  # +34%: beyond them
    assert v is not None and "batch 32 on 1 thread(s)" in v.message and "in process ±15%, served ±8%" in v.message
    assert "13,411" not in v.message  # the withheld figure is not printed
    assert bounds.note_throughput(13_411.0, limit, "cpu", 0.08) is None  # withheld, not noted
    assert bounds.note_throughput(9_000.0, limit, "cpu", 0.08) is None  # below the limit: nothing to say
    assert bounds.allowance(None, None) == bounds.NOISE  # spreads unknown: the floor


def test_a_served_figure_s_spread_comes_from_the_windows_it_was_taken_from():
    r = _infer("cpu", 64, 4, 10_000.0, 15.0)
    r.extra["windows"] = [{"index": i, "requests_s": x, "requests": 100} for i, x in enumerate([50.0, 90.0, 100.0, 110.0])]
    r.validity.stability = {"stable": True, "rule": "windows", "windows_used": [1, 2, 3]}
    assert bounds.served_spread(r) == pytest.approx(0.1)
    r.validity.stability = None  # no windows named: all of them
    assert bounds.served_spread(r) == pytest.approx(30 / 87.5)
    assert bounds.served_spread(_infer("cpu", 64, 4, 10_000.0, 15.0)) is None


def test_a_saturated_load_generator_voids_throughput_and_latency():
    v = bounds.check_client(0.99)
    assert v is not None and {"throughput_samples_s", "p50_ms", "p99_ms"} <= set(v.fields)
    assert bounds.check_client(0.9) is None  # loadtest's warning, not yet an error


def _limit(device: str, batch: int, p50: float, throughput: float) -> ProfileRecord:
    r = ProfileRecord(phase="infer", model="cnn", backend="onnxruntime", device=device, batch_size=batch,
                      target=f"in-process-{device}/cnn")
    r.extra["limit"] = True
    r.speed.latency.p50_ms, r.speed.throughput_samples_s = p50, throughput
    return r


def test_limits_are_read_per_model_device_and_batch():
    recs = [("limits/a.json", _limit("cuda", 1, 0.6, 2000.0)), ("limits/b.json", _limit("cuda", 1, 0.5, 1900.0)),
            ("limits/c.json", _limit("cuda", 512, 9.0, 100_000.0)), ("load/x.json", _infer("cuda", 1, 1, 9e9, 0.01))]
    limits = bounds.limits_of(recs)
    assert limits == {("cnn", "cuda"): bounds.Limit({1: 0.5, 512: 9.0}, 100_000.0)}
    unflagged = _infer("cpu", 1, 1, 900.0, 0.7)  # under limits/ without the flag: still a limit
    assert bounds.limits_of([("limits/cpu.json", unflagged)])[("cnn", "cpu")] == bounds.Limit({1: 0.7}, 900.0)


def test_withhold_moves_the_figure_out_and_is_idempotent():
    r = _train("cuda", 98010.0, 5.22, 512)
    r.speed.mfu = 1.2
    for _ in range(2):
        bounds.withhold(r, bounds.check_record(r))
    assert r.speed.mfu is None and len(r.validity.errors) == 1
    assert r.extra["out_of_bounds"]["mfu"]["value"] == 1.2
    again = ProfileRecord.from_dict(json.loads(json.dumps(r.to_dict())))  # same schema, errors round-trip
    assert again.validity.errors == r.validity.errors


# --- the report -----------------------------------------------------------------------------------


def _broken_run(runs: Path) -> Path:
    """make_run's records, with one figure beyond each bound, and in-process limits under limits/."""
    run = make_run(runs, "broken")
    gpu_train = _train("cuda", 98010.0, 5.22, 512)
    gpu_train.speed.mfu = 1.2  # written before the math mode was known: fp32 peak, TF32 ran
    gpu_train.save(run / "compare" / "profile-cuda.json")
    saturated = _infer("cpu", 64, 4, 16600.0, 15.4)
    saturated.extra["load_generator"] = {"cpu_s": 40.0, "max_process_core_fraction": 0.99}
    saturated.save(run / "load" / "embedded-cpu-b64.json")
    # the GPU server's batch-1 p50 is 0.40 ms, its batch-512 throughput 150,000 samples/s
    _limit("cuda", 1, 0.50, 2600.0).save(run / "limits" / "cuda-b1.json")
    _limit("cuda", 512, 12.0, 100_000.0).save(run / "limits" / "cuda-b512.json")
    return run


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> Path:
    return build_report(_broken_run(tmp_path_factory.mktemp("runs"))).parent


def test_summary_carries_the_error_and_null_instead_of_the_value(broken):
    s = json.loads((broken / "summary.json").read_text())
    cnn = s["models"]["cnn"]
    gpu_train = cnn["train"]["cuda"]
    assert gpu_train["mfu"] is None and "MFU above 100%" in gpu_train["errors"]["mfu"]["error"]
    b1 = cnn["infer"]["onnxruntime"]["cuda"]["batch1"]
    assert b1["latency"]["p50_ms"] is None and "below the in-process p50" in b1["errors"]["p50_ms"]["error"]
    # the best throughput measured is the one withheld: its column shows the error, not the next best
    sat = cnn["infer"]["onnxruntime"]["cuda"]["saturated"]
    assert sat["source"] == "load/embedded-gpu-b512.json" and sat["throughput_samples_s"] is None
    assert "above the in-process best" in sat["errors"]["throughput_samples_s"]["error"]
    cpu_sat = cnn["infer"]["onnxruntime"]["cpu"]["saturated"]
    assert cpu_sat["source"] == "load/embedded-cpu-b64.json" and cpu_sat["throughput_samples_s"] is None
    assert cpu_sat["errors"]["p50_ms"]["short"] == "client saturated"
    assert cnn["speedups"]["infer_saturated"]["value"] is None
    messages = {e["source"]: e["message"] for e in s["errors"]}
    assert "MFU above 100%" in messages["compare/profile-cuda.json"]
    assert "below the in-process p50" in messages["load/embedded-gpu.json"]
    assert "above the in-process best" in messages["load/embedded-gpu-b512.json"]
    assert "load-generator process used 99% of a core" in messages["load/embedded-cpu-b64.json"]
    rows = {r["source"]: r for r in s["records"]}
    assert rows["load/embedded-gpu-b512.json"]["throughput_samples_s"] is None
    assert rows["load/embedded-cpu-b64.json"]["p50_ms"] is None
    assert s["models"]["cnn"]["speedups"]["infer_batch1"]["value"] is None
    assert s["models"]["cnn"]["speedups"]["infer_batch1"]["note"].startswith("withheld:")
    text = json.dumps(s)
    assert "1.2," not in text and "150000" not in text and "0.4," not in text


@pytest.mark.parametrize("name", ["report.md", "report.html"])
def test_report_shows_the_error_and_not_the_number(broken, name):
    text = (broken / name).read_text()
    assert "MFU above 100%" in text and "120.0%" not in text
    assert "error: MFU &gt; 100%" in text if name.endswith("html") else "🔴 **error: MFU > 100%**" in text
    assert "error: p50 below in-process limit" in text and "0.40 ms" not in text
    assert "error: above in-process limit" in text and "150,000" not in text
    assert "error: client saturated" in text and "16,600" not in text


def test_html_shows_errors_in_red(broken):
    html = (broken / "report.html").read_text()
    assert "<td class='err' title='MFU above 100%" in html
    assert "<section id='errors'>" in html and ".err { color:#b42318" in html


def test_a_clean_run_has_no_errors_and_no_limits_needed(tmp_path):
    s = json.loads((build_report(make_run(tmp_path)).parent / "summary.json").read_text())
    assert s["errors"] == []
    assert s["models"]["cnn"]["train"]["cuda"]["mfu"] == 0.1836
    assert all(not v["errors"] for v in [s["models"]["cnn"]["train"]["cuda"]])


def test_math_mode_is_shown_next_to_precision(tmp_path):
    run = make_run(tmp_path)
    r = _train("cuda", 98010.0, 5.22, 512)
    r.precision, r.settings["math_mode"], r.speed.peak_tflops = "fp32", "tf32", 494.5
    r.save(run / "compare" / "profile-cuda.json")
    report = build_report(run).parent
    s = json.loads((report / "summary.json").read_text())
    assert s["models"]["cnn"]["train"]["cuda"]["math_mode"] == "tf32"
    assert "fp32, tf32 math, NVIDIA H200)" in " ".join(s["conclusions"])
    md = (report / "report.md").read_text()
    assert "| math mode (MFU's peak) | — | tf32 |" in md and "| peak for MFU | — | 494 TFLOP/s |" in md


# --- a disturbed in-process measurement, end to end -----------------------------------------------

def _burst(seconds: float) -> None:
    """Busy for 150 ms, idle for 150 ms, until `seconds` pass: a neighbour whose load comes and goes."""
    import time
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.monotonic() + 0.15
        while time.monotonic() < t:
            pass
        time.sleep(0.15)


def _served(throughput: float, spread: float) -> ProfileRecord:
    r = _infer("cpu", 16, 4, throughput, 2.0)
    r.extra["windows"] = [{"index": i, "requests_s": throughput / 16 * (1 + d), "requests": 500}
                          for i, d in enumerate((-spread, 0.0, spread))]
    r.validity.stability = {"stable": True, "rule": "windows", "reason": "agree", "windows_used": [0, 1, 2]}
    return r


@pytest.fixture(scope="module")
def disturbed_limit(tmp_path_factory) -> Path:
    """The tiny model's limits, measured while a neighbour's bursts take the machine's cores, as cnn_cpu's."""
    import multiprocessing

    from tests.loadtest.tiny_repo import build_repository
    from trainserve.serve.model import inprocess_limits as limits

    root = tmp_path_factory.mktemp("limits")
    build_repository(root / "repo")
    neighbours = [multiprocessing.get_context("spawn").Process(target=_burst, args=(30.0,)) for _ in range(2)]
    for n in neighbours:
        n.start()
    try:
        [result] = limits.measure_repository(root / "repo", limits.LimitsConfig(budget_s=3.0, max_threads=2,
                                                                                points="served"))
    finally:
        for n in neighbours:
            n.terminate()
            n.join(10)
    result.model = "cnn_cpu"
    limits.save(result, root / "limits")
    return root / "limits"


@pytest.mark.parametrize("within", [True, False])
def test_a_disturbed_limit_keeps_a_served_figure_within_its_spread_and_withholds_one_beyond(tmp_path, disturbed_limit,
                                                                                           within):
    import shutil

    run = make_run(tmp_path, gpu=False)
    shutil.copytree(disturbed_limit, run / "limits")
    recs = [(f"limits/{p.name}", ProfileRecord.load(p)) for p in (run / "limits").rglob("b*.json")]
    limit = bounds.limits_of(recs)[("cnn", "cpu")]
    assert limit.best_spread is not None and limit.best_point.startswith("batch ")
    allowed = bounds.allowance(0.12, limit.best_spread)  # > NOISE whatever the neighbour did: the old rule withheld
    served = limit.best_throughput_samples_s * ((1 + 0.9 * allowed) if within else 3 * (1 + allowed))
    _served(served, 0.12).save(run / "load" / "embedded-cpu-b64.json")
    s = json.loads((build_report(run).parent / "summary.json").read_text())
    sat = s["models"]["cnn"]["infer"]["onnxruntime"]["cpu"]["saturated"]
    if within:
        assert s["verdict"]["result"] == "VALID", s["verdict"]
        assert sat["throughput_samples_s"] == pytest.approx(served)
        notes = [w["message"] for w in s["warnings"] if w["source"] == "load/embedded-cpu-b64.json"]
        assert any("within the two measurements' spread" in m and "noise" in m for m in notes), notes
    else:
        assert s["verdict"]["result"] == "INVALID"
        assert sat["throughput_samples_s"] is None
        error = sat["errors"]["throughput_samples_s"]["error"]
        assert limit.best_point in error and "beyond the two measurements' spread" in error


def test_a_ramp_step_with_a_saturated_client_is_read_typed_with_its_figures_withheld() -> None:
    from tests.loadtest.parts import parts, step
    from trainserve.core.served import ClientCpu
    from trainserve.core.servedparts import LoadParts
    from trainserve.report.verdict.withheld import Withheld, held_out, point_text

    r = ProfileRecord(phase="infer", model="cnn_cpu", backend="onnxruntime", device="cpu", target="t")
    busy = ClientCpu(per_process_core_fraction={"local": 0.99}, saturated=True)
    parts(ramp=[step(1, 500.0, 2.0, p50_ms=1.0), step(8, 900.0, 9.0, p50_ms=4.0, client_cpu=busy)]).write(r)
    (screened,) = bounds.screen([("load/ramp.json", r)])
    calm, late = LoadParts.of(screened).ramp
    assert not calm.out_of_bounds and point_text(calm, "p50_ms", str) == "1.0"
    assert late.p50_ms is None and late.requests_s is None  # the client's pace, not the server's
    shown = point_text(late, "p50_ms", str)
    assert isinstance(shown, Withheld) and "client" in held_out(late)["p50_ms"]["error"]
    assert LoadParts.of(r).ramp[1].p50_ms == 4.0  # the record itself is left as it was
