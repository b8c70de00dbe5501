"""`trainserve load` end to end: real Locust, headless, against the real embedded server."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.docpaths import assert_documented_artifacts
from tests.conftest import REPO_ROOT, subprocess_env, trainserve_cmd
from tests.loadtest.tiny_repo import MODEL
from trainserve.core.profile import ProfileRecord
from trainserve.core.served import BoundKind
from trainserve.core.servedparts import LoadParts, RampStop


def run_load(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    cmd = trainserve_cmd("load", "--runs-dir", str(tmp_path), "--run", "r", *args)
    return subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(), cwd=REPO_ROOT, timeout=timeout)


def load_record(tmp_path: Path, target: str) -> dict:
    return json.loads((tmp_path / "r" / "load" / f"{target}.json").read_text())


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_closed_loop_writes_a_profile_record(tmp_path: Path, embedded_server: dict[str, str], protocol: str) -> None:
    p = run_load(tmp_path, "--url", embedded_server[protocol], "--protocol", protocol, "--model", MODEL,
                 "--users", "2", "--duration", "2s", "--batch", "2", "--target", "t",
                 "--metrics-url", f"http://{embedded_server['metrics']}/metrics", "--validate", "shape",
                 "--server-pid", embedded_server["pid"])
    assert p.returncode == 0, p.stderr
    rec = load_record(tmp_path, "t")
    # the server's own process, sampled by the load stage itself: its record is written once, with it
    typed = ProfileRecord.from_dict(rec)
    sample = typed.served.server_process
    assert sample is not None and sample.pid == int(embedded_server["pid"]) and sample.ticks >= 1
    assert typed.memory.rss_peak_bytes == sample.rss_max_bytes > 10 * 1024**2
    assert typed.served.server_cpu_cores is not None and typed.served.bound is not None
    parts = LoadParts.of(typed)
    assert parts.settings.server_pid == int(embedded_server["pid"]) and parts.settings.users == 2
    assert parts.server.metrics["scrapes"] >= 2 and parts.search is None and parts.ramp == []
    assert rec["phase"] == "infer" and rec["backend"] == "onnxruntime" and rec["device"] == "cpu"
    assert rec["model"] == MODEL and rec["batch_size"] == 2 and rec["concurrency"] == 2
    lat = rec["speed"]["latency"]
    assert lat["count"] > 20
    assert 0 < lat["min_ms"] <= lat["p50_ms"] <= lat["p90_ms"] <= lat["p99_ms"] <= lat["p999_ms"] <= lat["max_ms"]
    assert rec["speed"]["throughput_samples_s"] == pytest.approx(2 * rec["speed"]["requests_s"], rel=1e-3)
    assert rec["validity"]["partial"] is False and rec["extra"]["failures"] == 0
    server = rec["extra"]["server"]["metrics"]
    assert server["scrapes"] >= 2
    assert server["nv_inference_request_success"] >= 0.5 * lat["count"]  # counters moved during the run
    assert rec["extra"]["load_generator"]["cpu_s"] > 0
    for name in rec["extra"]["locust_csv"]:
        assert (tmp_path / "r" / "load" / name).exists()
    assert_documented_artifacts("load", tmp_path / "r")
    stats = (tmp_path / "r" / "load" / "t_stats.csv").read_text()
    assert f"{MODEL} b2" in stats
    # Locust's own HTML report of the run, as `locust --html` writes it
    html = (tmp_path / "r" / "load" / rec["extra"]["locust_html"]).read_text()
    assert html.lstrip().lower().startswith("<!doctype html") and "locust" in html.lower() and f"{MODEL} b2" in html


def test_without_runs_dir_the_record_goes_where_trainserve_runs_says(tmp_path: Path,
                                                                     embedded_server: dict[str, str]) -> None:
    runs = tmp_path / "elsewhere"  # $TRAINSERVE_RUNS, as `train` and `report` read it; no --runs-dir
    cmd = trainserve_cmd("load", "--run", "r", "--url", embedded_server["http"], "--model", MODEL, "--users", "1",
                         "--duration", "1s", "--target", "env", "--metrics-url",
                         f"http://{embedded_server['metrics']}/metrics")
    p = subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(TRAINSERVE_RUNS=str(runs)),
                       cwd=tmp_path, timeout=60)
    assert p.returncode == 0, p.stderr
    assert (runs / "r" / "load" / "env.json").is_file()
    assert not (tmp_path / "runs").exists()  # not the ./runs of the working directory


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_open_loop_keeps_its_rate(tmp_path: Path, embedded_server: dict[str, str], protocol: str) -> None:
    p = run_load(tmp_path, "--url", embedded_server[protocol], "--protocol", protocol, "--model", MODEL,
                 "--rate", "150", "--duration", "3s", "--target", "o",
                 "--metrics-url", f"http://{embedded_server['metrics']}/metrics")
    assert p.returncode == 0, p.stderr
    rec = load_record(tmp_path, "o")
    assert rec["concurrency"] is None and rec["settings"]["rate"] == 150
    assert rec["speed"]["requests_s"] == pytest.approx(150, rel=0.3)  # Poisson: ~450 arrivals, sd ~21


def test_ramp_records_steps_and_a_saturation_point(tmp_path: Path, stub_server: str) -> None:
    p = run_load(tmp_path, "--url", stub_server, "--model", "stub", "--ramp", "--ramp-step-s", "1",
                 "--ramp-max-users", "3", "--duration", "20s", "--target", "ramp")
    assert p.returncode == 0, p.stderr
    rec = load_record(tmp_path, "ramp")
    steps = rec["extra"]["ramp"]
    assert len(steps) >= 2 and steps[0]["users"] == 1
    for s in steps:  # the JSON the report reads
        assert set(s) >= {"users", "rate", "requests_s", "throughput_samples_s", "p50_ms", "p90_ms", "p99_ms"}
        assert s["rate"] is None and s["requests_s"] > 0
    assert rec["extra"]["saturation"]["reason"]
    parts = LoadParts.of(ProfileRecord.from_dict(rec))
    assert parts.saturation is not None and isinstance(parts.saturation.stop, RampStop)
    assert all(isinstance(s.bound.kind, BoundKind) for s in parts.ramp)
    assert parts.settings.mode == "ramp" and parts.settings.server_pid is None
