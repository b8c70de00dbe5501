"""Shared test helpers: the repository root, and an environment for subprocesses that sees this tree."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from trainserve.core.procs import child_env

REPO_ROOT = Path(__file__).resolve().parents[1]


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a child `python -m trainserve ...`: this checkout first on sys.path."""
    return child_env(PYTHONUNBUFFERED="1", **extra)


def trainserve_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "trainserve", *args]


def stop_process(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """SIGTERM, wait up to `timeout_s`, then SIGKILL: every process a test starts ends here."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def free_port() -> int:
    """A loopback port free right now, for programs that cannot report the port they bound (a tiny race)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT
