"""Runs for the diff tests: the example report's summary.json, changed figure by figure."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT

EXAMPLE = REPO_ROOT / "docs" / "example-report" / "summary.json"


@pytest.fixture
def example() -> dict[str, Any]:
    return json.loads(EXAMPLE.read_text())


@pytest.fixture
def make_run(tmp_path: Path, example: dict[str, Any]) -> Callable[..., Path]:
    """make_run(name, change) writes runs/<name>/report/summary.json from the example, after change(summary)."""

    def make(name: str, change: Callable[[dict[str, Any]], None] | None = None) -> Path:
        summary = copy.deepcopy(example)
        summary["run"] = name
        if change is not None:
            change(summary)
        folder = tmp_path / "runs" / name
        (folder / "report").mkdir(parents=True, exist_ok=True)
        (folder / "report" / "summary.json").write_text(json.dumps(summary))
        return folder

    return make


def scale(summary: dict[str, Any], device: str, scenario: str, field: str, factor: float) -> None:
    """Multiply one served figure (its value and its repeats' mean, CI bounds) by `factor`, its spread kept."""
    row = summary["scenarios"]["models"]["cnn"][device][scenario]
    row[field] *= factor
    ci = row["ci95"].get(field)
    if ci is not None:
        shift = ci["mean"] * (factor - 1)
        for k in ("mean", "low", "high"):
            ci[k] += shift
