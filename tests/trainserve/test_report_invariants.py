"""Figures checked against each other (report/verdict/invariants.py): each broken invariant makes the verdict INVALID
with its own reason, and the same run with it mended is VALID again."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.trainserve.test_report import MIB, _infer, _train, make_run
from trainserve.core.served import Bound, ClientCpu, Served
from trainserve.core.version import UNINSTALLED
from trainserve.report import build_report
from trainserve.report.verdict import invariants


def _verdict(run: Path) -> dict:
    return json.loads((build_report(run).parent / "summary.json").read_text())["verdict"]


def _kinds(run: Path) -> set[str]:
    return {r["kind"] for r in _verdict(run)["reasons"]}


def _cpu_train_parts(peak: int) -> object:
    r = _train("cpu", 363.0, 1410.0, 512)
    r.memory.weights_bytes, r.memory.optimizer_bytes = 15 * MIB, 30 * MIB
    r.memory.gradients_bytes, r.memory.activations_bytes = 15 * MIB, 0
    r.memory.peak_bytes = peak
    return r


def _cpu_load_with_gpu_meter(broken: bool) -> object:
    r = _infer("cpu", 64, 4, 16600.0, 15.4)
    if broken:  # the idle GPU's NVML power and memory, read during a CPU load
        r.energy.mean_power_w, r.energy.source = 72.0, "nvml"
        r.utilization.gpu_mem_used_max_bytes = 483 * MIB
    return r


def _ramp_bounded_by_a_plateau(mean_ms: float) -> object:
    r = _infer("cpu", 1, 1, 1087.0, 0.92, ramp=True)
    r.extra["ramp"] = [{"users": 9, "requests_s": 6960.0, "throughput_samples_s": 6960.0, "mean_ms": 1.3, "p50_ms": 1.2,
                        "p99_ms": 3.0},
                       {"users": 11, "requests_s": 7100.0, "throughput_samples_s": 7100.0, "mean_ms": mean_ms,
                        "p50_ms": 1.2, "p99_ms": 3.5}]
    r.extra["saturation"] = {"users": 9, "requests_s": 6960.0, "reason": "throughput grew less than 5%"}
    r.served = Served(client=ClientCpu(), bound=Bound("plateau", "a plateau: throughput grew less than 5%"))
    return r


CASES = {
    # kind: (where, broken record, mended record)
    "memory_parts": ("compare/profile-cpu.json", lambda: _cpu_train_parts(592 * 1024),
                     lambda: _cpu_train_parts(62 * MIB)),
    "meter_device": ("load/embedded-cpu-b64.json", lambda: _cpu_load_with_gpu_meter(True),
                     lambda: _cpu_load_with_gpu_meter(False)),
    "client_unsaid": ("load/embedded-cpu.json", lambda: _ramp_bounded_by_a_plateau(1.3),
                      lambda: _ramp_bounded_by_a_plateau(1.55)),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_broken_invariant_is_invalid_with_its_reason_and_valid_once_mended(tmp_path, kind):
    where, broken, mended = CASES[kind]
    run = make_run(tmp_path, gpu=False)
    broken().save(run / where)
    v = _verdict(run)
    assert v["result"] == "INVALID" and kind in {r["kind"] for r in v["reasons"]}, v
    assert where in v["invalid_sources"]
    mended().save(run / where)
    assert kind not in _kinds(run)
    assert _verdict(run)["result"] == "VALID"


def test_a_record_of_an_unknown_trainserve_is_invalid(tmp_path):
    run = make_run(tmp_path, gpu=False)
    r = _infer("cpu", 64, 4, 16600.0, 15.4)
    r.versions = {**r.versions, "trainserve": UNINSTALLED}
    r.save(run / "load" / "embedded-cpu-b64.json")
    assert "version_unknown" in _kinds(run)


def test_a_memory_comparison_missing_a_working_set_must_say_why():
    fig = SimpleNamespace(bytes=1)
    both = SimpleNamespace(working_set=fig, process_total=fig)
    no_ws = SimpleNamespace(working_set=None, process_total=fig)
    cmp = SimpleNamespace(train=both, infer=no_ws, notes=[])
    models = {"cnn": SimpleNamespace(memory_compare={"cuda": cmp})}
    [reason] = invariants.reasons([], models)
    assert reason["kind"] == "memory_unpaired" and "no inference working set" in reason["message"]
    cmp.notes = ["inference working set on the GPU at batch 128 not measured: run `trainserve limits`"]
    assert invariants.reasons([], models) == []
    cmp.infer = SimpleNamespace(working_set=None, process_total=None)  # nothing served there: nothing compared
    cmp.notes = []
    assert invariants.reasons([], models) == []
