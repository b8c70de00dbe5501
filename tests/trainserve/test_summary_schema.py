"""summary.json's published JSON Schema (docs/summary.schema.json) describes what the report writes: a real
summary validates, the published example validates, and a summary with a wrong type does not."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from tests.trainserve.test_cost import make_run
from trainserve.report import build_report
from trainserve.report.cost.cost_per_million import CostOptions

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "summary.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def _errors(summary: dict) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in VALIDATOR.iter_errors(summary)]


def test_the_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.fixture(scope="module")
def real_summary(tmp_path_factory) -> dict:
    run = make_run(tmp_path_factory.mktemp("schema"))
    html = build_report(run, CostOptions(slo_p99_ms=20.0, qps=500.0))
    return json.loads((html.parent / "summary.json").read_text())


def test_a_real_summary_validates(real_summary):
    assert real_summary["plan"] is not None and real_summary["costs"]["models"]["cnn"]["gpu_price"]
    assert _errors(real_summary) == []


def test_a_summary_with_answers_batching_and_data_path_validates(tmp_path):
    from tests.trainserve.test_report_answers import _answered_run

    s = json.loads((build_report(_answered_run(tmp_path)).parent / "summary.json").read_text())
    assert s["answers"] and s["models"]["cnn"]["batching"] and s["models"]["cnn"]["data_path"]
    assert _errors(s) == []


def test_the_published_example_validates():
    assert _errors(json.loads((ROOT / "docs" / "example-report" / "summary.json").read_text())) == []


def test_other_branches_top_level_keys_are_allowed(real_summary):
    s = real_summary | {"verdict": {"status": "VALID", "reasons": []}, "scenarios": {"cnn": {"cpu": {}}}}
    assert _errors(s) == []


@pytest.mark.parametrize("break_it", [
    lambda s: s.pop("models"),
    lambda s: s["records"][0].update(batch_size="8"),
    lambda s: s["costs"]["models"]["cnn"]["gpu_price"].update(origin="guessed"),
    lambda s: s["costs"]["prices"].update(kwh_usd=-1),
    lambda s: s["models"]["cnn"]["train"]["cuda"]["latency"].update(p99_ms="fast"),
    lambda s: s["answers"][0].update(measured="yes"),
])
def test_a_wrong_summary_does_not_validate(real_summary, break_it):
    s = copy.deepcopy(real_summary)
    break_it(s)
    assert _errors(s)


def test_an_energy_status_outside_the_three_does_not_validate(real_summary):
    s = copy.deepcopy(real_summary)
    view = s["models"]["cnn"]["train"]["cuda"]
    assert view["energy_status"] in ("measured", "estimated", "not measured")
    view["energy_status"] = "guessed"
    assert _errors(s)
