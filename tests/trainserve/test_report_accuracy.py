"""Time to accuracy in the report: per device, beside the served model's batch-1 latency and energy."""

from __future__ import annotations

import json

import pytest

from tests.trainserve.test_report import make_run
from trainserve.core.profile import ProfileRecord, TimeToAccuracy
from trainserve.report import build_report


def _add_target(path, **fields):
    rec = ProfileRecord.load(path)
    rec.time_to_accuracy = TimeToAccuracy(**{"target_accuracy": 0.9, **fields})
    rec.save(path)


def test_time_to_accuracy_per_device(tmp_path):
    run = make_run(tmp_path)
    _add_target(run / "compare" / "profile-cpu.json", reached=True, time_to_accuracy_s=42.5, epochs_to_accuracy=3,
                steps_to_accuracy=90, energy_to_accuracy_j=None, test_accuracy=0.91, epochs_run=3)
    _add_target(run / "compare" / "profile-cuda.json", reached=False, test_accuracy=0.88, epochs_run=5)
    html = build_report(run)
    s = json.loads((html.parent / "summary.json").read_text())
    tta = s["models"]["cnn"]["time_to_accuracy"]
    assert tta["cpu"]["reached"] is True and tta["cpu"]["time_to_accuracy_s"] == 42.5
    assert tta["cpu"]["energy_to_accuracy_j"] is None  # not measured stays null
    assert tta["cpu"]["source"] == "compare/profile-cpu.json"
    assert tta["cpu"]["infer_batch1_p50_ms"] == pytest.approx(0.92)  # the served model beside it
    assert tta["cuda"]["reached"] is False and tta["cuda"]["time_to_accuracy_s"] is None
    md = (html.parent / "report.md").read_text()
    assert "### Time to accuracy" in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| CPU (fp32, batch 512)") and "42.5 s" in ln)
    assert "90.0%" in row and "91.0%" in row
    assert "no, within 5 epochs" in md
    assert "Time to accuracy" in html.read_text()


def test_no_target_no_section(tmp_path):
    html = build_report(make_run(tmp_path))
    s = json.loads((html.parent / "summary.json").read_text())
    assert s["models"]["cnn"]["time_to_accuracy"] == {}
    assert "Time to accuracy" not in (html.parent / "report.md").read_text()
