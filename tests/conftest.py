"""Shared test helpers: the repository root, and an environment for subprocesses that sees this tree."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a child `python -m trainserve ...`: this checkout first on sys.path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def trainserve_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "trainserve", *args]


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT
