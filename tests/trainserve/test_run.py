"""`trainserve run` for real: every stage end to end (slow), and Ctrl-C in the middle of training."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time

import psutil
import pytest

from tests.conftest import REPO_ROOT, subprocess_env, trainserve_cmd


def _ours(marker: str) -> list[psutil.Process]:
    """Processes still running whose command line names this test's folder."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(p.info["cmdline"] or []):
                found.append(p)
        except psutil.Error:
            continue
    return found


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_run_quick_end_to_end(tmp_path):
    runs = tmp_path / "runs"
    t0 = time.monotonic()
    proc = subprocess.run(trainserve_cmd("run", "--quick", "--device", "cpu", "--run", "e2e", "--runs-dir", str(runs)),
                          cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=400)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = runs / "e2e" / "report"
    assert f"report: {report / 'report.html'}" in proc.stdout.splitlines()
    assert "✓ load-cpu-saturated: saturated on cnn_cpu" in proc.stdout  # one line per stage in a pipe
    assert not _ours(str(tmp_path)), "a process of the run outlived it"

    s = json.loads((report / "summary.json").read_text())
    cnn = s["models"]["cnn"]
    assert cnn["devices_measured"] == ["cpu"]
    train = cnn["train"]["cpu"]
    assert train["throughput_samples_s"] > 0 and train["latency"]["p50_ms"] > 0
    assert train["memory"]["peak_bytes"] > 0
    cpu = cnn["infer"]["onnxruntime"]["cpu"]
    assert cpu["batch1"]["source"] == "load/embedded-cpu-batch1.json"
    assert cpu["batch1"]["batch_size"] == 1 and 0 < cpu["batch1"]["latency"]["p50_ms"] < 1000
    sat = cpu["saturated"]
    if sat["throughput_samples_s"] is None:
        # withheld only beyond the two measurements' spread, with the limit's point and both spreads named
        error = sat["errors"]["throughput_samples_s"]["error"]
        assert "beyond the two measurements' spread" in error and "in process ±" in error, error
        assert s["verdict"]["result"] == "INVALID"
    else:
        assert sat["throughput_samples_s"] > cpu["batch1"]["throughput_samples_s"]
    assert cpu["batch1"]["memory"]["peak_bytes"] > 0  # the server's RSS, sampled by the run
    assert cnn["ramps"] and cnn["ramps"][0]["points"][0]["users"] == 1
    assert cnn["speedups"]["train"]["value"] is None
    limit = cnn["limits"]["cpu"]  # trainserve limits ran in process before the server
    assert 0 < limit["batch1_p50_ms"] and limit["best_throughput_samples_s"] > 0 and limit["best_batch"] >= 1
    assert cpu["saturated"]["source"].startswith("load/")  # never the in-process record
    # the server's CPU, sampled by the run, per record and per rate its Server search tried (for the bounds)
    search = json.loads((runs / "e2e" / "load" / "embedded-cpu-server.json").read_text())
    assert search["served"]["server_cpu_cores"] > 0
    assert search["extra"]["search"]["probes"]
    assert all(p["server_cpu_cores"] > 0 and p["frontend_cpu_cores"] > 0 for p in search["extra"]["search"]["probes"])
    assert any("GPU not measured" in c for c in s["conclusions"])
    # the README's questions, answered at the top of the report; batching off served and measured on the CPU
    answers = {a["id"]: a for a in s["answers"]}
    assert answers["dynamic_batching"]["measured"], answers["dynamic_batching"]
    off = cnn["batching"]["cpu"]["off"]
    assert off["model"] == "cnn_cpu_nobatch" and off["source"] == "load/embedded-cpu-server-nobatch.json"
    assert off["capacity_req_s"] > 0 and cnn["batching"]["cpu"]["on"]["capacity_req_s"] > 0
    assert not answers["gpu_release"]["measured"] and answers["gpu_release"]["command"]
    data = answers["data_path"]["text"]
    assert answers["data_path"]["measured"] and "the host is the device" in data and "no GPU in this run" in data
    md = (report / "report.md").read_text()
    assert md.index("## Answers") < md.index("## Summary")
    ratio = cnn["train_vs_infer"]["cpu"]["throughput_ratio"]
    if sat["throughput_samples_s"] is not None:
        assert ratio == pytest.approx(sat["throughput_samples_s"] / train["throughput_samples_s"])
        assert any(f"{ratio:.1f}x the training throughput" in c or f"{ratio:,.0f}x the training throughput" in c
                   for c in s["conclusions"])
    # the quick run's limits are the points the served figures are set beside, each measured in windows
    lim = json.loads((runs / "e2e" / "limits" / "cpu" / "cnn_cpu" / "summary.json").read_text())
    assert lim["skipped"] and lim["best_spread"] is not None

    html = (report / "report.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*['"]?(https?:)?//""", html, re.I)
    assert html.count("src='data:image/png;base64,") >= 4
    md = (report / "report.md").read_text()
    assert "| cnn | Training, same configuration | not measured |" in md
    for stage in ("train", "sweep-cpu", "export", "limits-cpu", "serve-cpu", "load-cpu-ramp", "load-cpu-batch1",
                  "load-cpu-saturated"):
        assert (runs / "e2e" / "logs" / f"{stage}.log").stat().st_size > 0
    print(f"trainserve run --quick took {elapsed:.0f} s")


@pytest.mark.timeout(120)
def test_ctrl_c_during_training_stops_everything(tmp_path):
    runs = tmp_path / "runs"
    # enough training that Ctrl-C lands while it runs
    proc = subprocess.Popen(trainserve_cmd("run", "--device", "cpu", "--run", "int", "--runs-dir", str(runs)),
                            cwd=REPO_ROOT, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        train_log = runs / "int" / "logs" / "train.log"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (train_log.exists() and _children_named(proc.pid, "train")):
            time.sleep(0.1)
        assert _children_named(proc.pid, "train"), "training never started"
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted; every process this run started was stopped" in err
    assert "Traceback" not in err
    assert not _ours(str(tmp_path))
    assert not (runs / "int" / "report").exists()


def _children_named(pid: int, word: str) -> list[psutil.Process]:
    try:
        return [c for c in psutil.Process(pid).children(recursive=True) if word in " ".join(c.cmdline())]
    except psutil.Error:
        return []
