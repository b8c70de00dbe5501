"""Bad input and faults: one clear sentence and exit 1; partial results marked as such."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import free_port, stop_process
from tests.loadtest.conftest import start_stub
from tests.loadtest.test_runner import run_load


def test_unreachable_server(tmp_path: Path) -> None:
    p = run_load(tmp_path, "--url", f"127.0.0.1:{free_port()}", "--model", "m", "--duration", "1s")
    assert p.returncode == 1
    assert "no HTTP inference server answers at" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "r" / "load").exists()


def test_unknown_model(tmp_path: Path, stub_server: str) -> None:
    p = run_load(tmp_path, "--url", stub_server, "--model", "nope", "--duration", "1s")
    assert p.returncode == 1
    assert "model 'nope' is not ready" in p.stderr and "Traceback" not in p.stderr


def test_bad_options(tmp_path: Path) -> None:
    p = run_load(tmp_path, "--url", "127.0.0.1:1", "--model", "m", "--users", "2", "--rate", "5")
    assert p.returncode == 1 and "exclude each other" in p.stderr
    p = run_load(tmp_path, "--url", "nohost", "--model", "m")
    assert p.returncode == 1 and "is not HOST:PORT" in p.stderr


def test_server_errors_mid_run_write_partial_results(tmp_path: Path) -> None:
    proc, url = start_stub("--fail-after", "30")
    try:
        # no warm-up: the 30 answers come in the first milliseconds, which a warm-up would leave out
        p = run_load(tmp_path, "--url", url, "--model", "stub", "--users", "1", "--duration", "10s", "--target", "f",
                     "--warmup-s", "0")
    finally:
        stop_process(proc)
    assert p.returncode == 1
    assert "did not complete cleanly" in p.stderr and "stub server failing on purpose" in p.stderr
    rec = json.loads((tmp_path / "r" / "load" / "f.json").read_text())
    assert rec["validity"]["partial"] is True
    assert rec["speed"]["latency"]["count"] == 30
    assert rec["extra"]["failures"] > 0
    assert any("failures only" in w for w in rec["validity"]["warnings"])  # stopped early, not after 10 s
    assert rec["validity"]["window_s"] < 8


def test_a_shared_setting_out_of_its_choices_is_refused_by_both_readers() -> None:
    """`trainserve load` (LoadConfig) and Locust (LoadOptions) check the settings they share in one place."""
    import pytest

    from trainserve.core.errors import UserError
    from trainserve.loadtest.options import LoadOptions, OptionError
    from trainserve.loadtest.runner import LoadConfig

    for field, bad in (("protocol", "ftp"), ("validate", "maybe"), ("http_client", "curl")):
        with pytest.raises(UserError, match=f"--{field.replace('_', '-')} '{bad}' is invalid; allowed: "):
            LoadConfig(url="127.0.0.1:8000", model="m", **{field: bad})
        with pytest.raises(OptionError, match=f"load option {field}='{bad}' is invalid"):
            LoadOptions(model_name="m", **{field: bad})
