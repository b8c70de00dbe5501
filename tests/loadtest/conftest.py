"""Fixtures: the real embedded server on ephemeral ports with a tiny model, and the stand-in server."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, stop_process, subprocess_env, trainserve_cmd
from tests.loadtest.tiny_repo import build_repository

READY = re.compile(r"trainserve serve: ready (.*)")


def _read_line(proc: subprocess.Popen, pattern: re.Pattern[str], timeout_s: float) -> re.Match[str]:
    deadline = time.monotonic() + timeout_s
    seen = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        m = pattern.search(line)
        if m:
            return m
    raise RuntimeError(f"server did not become ready: {''.join(seen)[-2000:]}")


def _drain(proc: subprocess.Popen) -> None:
    """Keep reading the server's output: a full pipe would block its logging and then the server."""
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()


@pytest.fixture(scope="session")
def embedded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """{'http': 'H:P', 'grpc': 'H:P', 'metrics': 'H:P', 'pid': its process id} of `trainserve serve` on the tiny
    repository."""
    repo = build_repository(tmp_path_factory.mktemp("repo"))
    cmd = trainserve_cmd("serve", "--model-repository", str(repo), "--http-port", "0", "--grpc-port", "0",
                         "--metrics-port", "0", "--threads", "1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=subprocess_env(),
                            cwd=REPO_ROOT)
    try:
        m = _read_line(proc, READY, 60)
        _drain(proc)
        yield {**dict(part.split("=", 1) for part in m.group(1).split()), "pid": str(proc.pid)}
    finally:
        stop_process(proc)


def start_stub(*args: str) -> tuple[subprocess.Popen, str]:
    """The stand-in server (tests/loadtest/stub_server.py); returns (process, 'H:P')."""
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("stub_server.py")), "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=subprocess_env())
    try:
        m = _read_line(proc, re.compile(r"http_port=(\d+)"), 30)
    except BaseException:
        stop_process(proc)
        raise
    _drain(proc)
    return proc, f"127.0.0.1:{m.group(1)}"


@pytest.fixture
def stub_server() -> Iterator[str]:
    proc, url = start_stub()
    try:
        yield url
    finally:
        stop_process(proc)


