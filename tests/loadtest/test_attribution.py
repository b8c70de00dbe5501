"""Latency attribution on the real embedded server over loopback: the parts, the server's counts, the null endpoint."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from tests.loadtest.test_runner import load_record, run_load
from tests.loadtest.tiny_repo import MODEL
from trainserve.loadtest.attribution import TOLERANCE_FRACTION, TOLERANCE_MS, attribute, calibrate_client
from trainserve.loadtest.model_info import build_arrays, fetch_model_info
from trainserve.loadtest.serverstats import StatsReader, window


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_parts_sum_to_the_client_latency_from_the_servers_own_counts(tmp_path: Path,
                                                                      embedded_server: dict[str, str],
                                                                      protocol: str) -> None:
    p = run_load(tmp_path, "--url", embedded_server[protocol], "--protocol", protocol, "--model", MODEL,
                 "--users", "2", "--duration", "2s", "--target", "a", "--warmup-s", "0",  # the server's window spans the warm-up too
                 "--metrics-url", f"http://{embedded_server['metrics']}/metrics")
    assert p.returncode == 0, p.stderr
    rec = load_record(tmp_path, "a")
    a = rec["served"]["attribution"]
    lat = rec["speed"]["latency"]
    # the server counted the requests Locust timed, and at most one more per user: those in flight when the
    # users were stopped, which Locust does not time; nothing else fell into the window
    # (a few more: a request answered after the last window closed is the server's, not a window's)
    assert lat["count"] <= a["requests"] <= lat["count"] + 10
    assert a["latency_ms"] == pytest.approx(lat["mean_ms"], abs=1e-3)
    # every part measured, none negative; queue and compute inside the server's own request time
    for part in ("client_ms", "server_ms", "queue_ms", "compute_ms", "frontend_ms", "network_ms"):
        assert a[part] is not None and a[part] >= 0, part
    assert a["client_ms"] > 0 and a["compute_ms"] > 0
    assert a["queue_ms"] + a["compute_ms"] <= a["server_ms"] + 1e-4
    # the measured parts fit inside what the client saw, and the stacked parts add up to it
    assert a["consistent"], a["note"]
    assert a["client_ms"] + a["server_ms"] <= a["latency_ms"] + TOLERANCE_MS + TOLERANCE_FRACTION * a["latency_ms"]
    total = a["client_ms"] + a["network_ms"] + a["frontend_ms"] + a["queue_ms"] + a["compute_ms"]
    assert total == pytest.approx(a["latency_ms"], abs=TOLERANCE_MS + TOLERANCE_FRACTION * a["latency_ms"])
    cal = rec["extra"]["attribution"]["calibration"]
    assert cal["protocol"] == protocol and 0 < cal["client_cpu_ms"] <= a["client_ms"] == cal["client_ms"]
    assert rec["served"]["bound"]["kind"] in ("load", "device", "frontend", "client")
    assert rec["served"]["client"]["cores"] == 1 and rec["settings"]["processes"] == 1  # 2 users: one process
    assert f"(the server adds {a['server_ms']:.2f} ms by its own statistics)" in p.stdout  # the CLI says it too
    assert "bounded by " in p.stdout


def test_the_null_endpoint_calibrates_and_leaves_no_process(embedded_server: dict[str, str]) -> None:
    info = fetch_model_info(embedded_server["http"], MODEL, "http")
    arrays = build_arrays(info, 1, "random")
    before = {c.pid for c in psutil.Process().children(recursive=True)}
    reader = StatsReader(embedded_server["http"], MODEL, "http")
    s0 = reader.snapshot()
    cal = calibrate_client(embedded_server["http"], info, arrays, "http", "prepared", want_outputs=True, batch=1,
                           input_data="random", calls=50)
    s1 = reader.snapshot()
    assert 0 < cal["client_cpu_ms"] <= cal["client_ms"] and cal["calls"] == 50
    # the null endpoint's own work is measured (and left out of the client's): it answered every call
    assert 0 < cal["null_cpu_ms"] and cal["client_ms"] >= cal["null_rtt_ms"] - cal["null_cpu_ms"] - 1e-4
    # one real request captured the canned answer; the calibration calls never reached the server
    assert window(s0, s1, 1.0)["requests"] == 1
    assert {c.pid for c in psutil.Process().children(recursive=True)} == before


def test_measured_parts_beyond_the_latency_are_marked_not_drawn_negative() -> None:
    server = {"requests": 10, "success_ms": 1.0, "queue_ms": 0.2, "compute_input_ms": 0.1, "compute_infer_ms": 0.5,
              "compute_output_ms": 0.1, "mean_batch": 1.0}
    ok = attribute(2.0, 0.3, server)
    assert ok is not None and ok.consistent and ok.network_ms == pytest.approx(0.7)
    assert ok.frontend_ms == pytest.approx(0.1) and sum(v for v in ok.parts().values()) == pytest.approx(2.0)
    bad = attribute(1.0, 0.5, server)  # client 0.5 + server 1.0 > 1.0 ms: a clock or a window is wrong
    assert bad is not None and not bad.consistent and bad.network_ms == 0 and "exceed" in bad.note
    assert attribute(1.0, 0.1, None) is None  # a server without the statistics extension: no split


def test_the_ramp_splits_each_step(tmp_path: Path, embedded_server: dict[str, str]) -> None:
    p = run_load(tmp_path, "--url", embedded_server["http"], "--model", MODEL, "--ramp", "--ramp-step-s", "1",
                 "--ramp-max-users", "2", "--duration", "20s", "--target", "ramp",
                 "--metrics-url", f"http://{embedded_server['metrics']}/metrics")
    assert p.returncode == 0, p.stderr
    rec = load_record(tmp_path, "ramp")
    for step in rec["extra"]["ramp"]:
        a = step["attribution"]
        assert a["requests"] > 0 and a["consistent"], json.dumps(step)
        assert a["latency_ms"] == step["mean_ms"] and step["client_cpu"]["total_cpu_s"] > 0
        assert step["bound"]["kind"] in ("load", "device", "frontend", "client", "slo")
    assert rec["served"]["bound"]["kind"] in ("load", "plateau", "device", "frontend", "client", "slo")


def test_the_server_search_splits_its_figure_from_that_rates_server_window(tmp_path: Path,
                                                                             embedded_server: dict[str, str]) -> None:
    # the server's statistics are read around the figure's own rate, after its warm-up: over the whole search
    # (every rate tried, the failing ones too) the split and the device-busy figure would be another load's
    p = run_load(tmp_path, "--url", embedded_server["http"], "--model", MODEL, "--search", "--rate", "40",
                 "--slo-p99-ms", "200", "--duration", "6s", "--warmup-s", "0.5", "--window-s", "0.5",
                 "--search-probe-s", "2", "--target", "search",
                 "--metrics-url", f"http://{embedded_server['metrics']}/metrics")
    assert p.returncode == 0, p.stderr
    rec = load_record(tmp_path, "search")
    search = rec["extra"]["search"]
    figure = search["figure"]
    # a search that found no failing rate, or stopped at the client's, reports a lower bound as one
    first = next(line for line in p.stdout.splitlines() if line.startswith("Server scenario:"))
    assert first.startswith("Server scenario: at least") == bool(search["lower_bound"]), (first, search["lower_bound"])
    assert len(search["probes"]) >= 2 and all(pr["server"] for pr in search["probes"]), search["probes"]
    a = rec["served"]["attribution"]
    assert a is not None and a["consistent"], rec["served"]
    # the split counts that rate's requests (every counted window of it, of which the figure keeps those that
    # agreed, and the grace after the last one), not the search's total
    total = sum(pr["requests"] for pr in search["probes"])
    assert figure["requests"] <= a["requests"] < total, (figure, a, total)
    assert a["requests"] == figure["server"]["requests"]
