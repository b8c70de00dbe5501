"""The GPU paths, end to end on one small run: train on CUDA (bf16 autocast), the GPU memory given back as NVML
sees it, export with the fp16 model checked on the CUDA provider, `trainserve limits --device cuda`, and
`trainserve serve --device cuda` answering the real tritonclient over HTTP and gRPC.

One run feeds every test (module fixtures, in pipeline order), so the tier stays within a few minutes. Every
CUDA user is a child process: the test process never creates a CUDA context, so NVML's reading of the
whole device is the training process's memory plus a constant.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO_ROOT, stop_process, subprocess_env, trainserve_cmd
from trainserve.core.telemetry import Nvml

pytestmark = pytest.mark.gpu

RUN = "gpu"
GiB = 2**30
# cnn small at batch 1024 in bf16 reserves several GiB: far above the CUDA context that stays until exit,
# so "the memory fell back" is told apart from "nothing was held"
TRAIN_ARGS = ("--model", "cnn", "--preset", "small", "--device", "cuda", "--precision", "bf16", "--batch-size", "1024",
              "--steps", "24", "--warmup-steps", "4", "--samples", "8192")
READY = re.compile(r"trainserve serve: ready (.*)")
LOADED = re.compile(r"loaded (\S+) version \S+: \d+ instance\(s\) on (\S+?),")  # in the log, whitespace collapsed


class UsedMemory:
    """NVML's used bytes of GPU 0, sampled on a thread every 10 ms while a child runs: (before, peak)."""

    def __init__(self) -> None:
        self.nv = Nvml(0)
        assert self.nv.ok, "NVML stopped answering"
        self.before = self.read()
        self.peak = self.before
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def read(self) -> int:
        used = self.nv.read(energy_due=False)[1]
        assert used is not None, "NVML gave no memory reading"
        return used

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self.read())

    def __enter__(self) -> UsedMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)


def _run(*args: str, timeout_s: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(trainserve_cmd(*args), capture_output=True, text=True, timeout=timeout_s,
                          env=env or subprocess_env(), cwd=REPO_ROOT)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("gpu-runs")


@pytest.fixture(scope="module")
def trained(runs) -> dict:
    """`trainserve train` on CUDA, with NVML sampled around it: the record and the device's memory readings."""
    with UsedMemory() as mem:
        r = _run("train", *TRAIN_ARGS, "--run", RUN, "--runs-dir", str(runs), timeout_s=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    deadline = time.monotonic() + 10  # the driver frees an exited process's memory within moments
    while (after_exit := mem.read()) > mem.before + 256 * 2**20 and time.monotonic() < deadline:
        time.sleep(0.1)
    record = json.loads((runs / RUN / "train" / "profile.json").read_text())
    return {"record": record, "before": mem.before, "peak": mem.peak, "after_exit": after_exit, "name": mem.nv.name}


def test_training_on_cuda_records_the_device_and_mfu_against_its_peak(trained):
    from trainserve.train.flops import peak_lookup

    rec = trained["record"]
    assert (rec["device"], rec["precision"], rec["batch_size"]) == ("cuda", "bf16", 1024)
    assert rec["settings"]["math_mode"] == "bf16"
    speed = rec["speed"]
    assert speed["throughput_samples_s"] > 0 and 0 < speed["latency"]["count"] <= 24 - 4
    # the peak of the GPU as NVML names it, at the math that ran (bf16 tensor cores), not fp32's or another part's
    peak = peak_lookup(trained["name"], "bf16")
    assert peak.tflops is not None, f"no bf16 peak for {trained['name']!r}: {peak.note}"
    assert speed["peak_tflops"] == peak.tflops, f"{rec['device_name']!r} got {speed['peak_tflops']} TFLOP/s"
    assert speed["achieved_tflops"] > 0 and 0 < speed["mfu"] < 1
    assert speed["mfu"] == pytest.approx(speed["achieved_tflops"] / peak.tflops, abs=1e-4)
    assert rec["memory"]["cuda_allocated_peak_bytes"] > 0


def test_the_gpu_memory_falls_back_after_training(trained):
    """NVML saw the training's memory come and go: released before the process exits, all of it after."""
    from trainserve.train.release import PROCESS_OVERHEAD_LIMIT

    rec = trained["record"]
    reserved_peak = rec["memory"]["cuda_reserved_peak_bytes"]
    assert reserved_peak >= 1 * GiB, f"only {reserved_peak / GiB:.2f} GiB reserved: raise the batch so this test means something"
    info = rec["extra"]["gpu_release"]
    assert info["torch_allocated_after_bytes"] == 0 and info["torch_reserved_after_bytes"] == 0
    held = info["nvml_used_after_free_bytes"] - info["nvml_used_before_bytes"]
    assert rec["memory"]["gpu_released"] is True and rec["memory"]["gpu_held_bytes"] == max(0, held)
    assert held <= PROCESS_OVERHEAD_LIMIT
    # while it trained NVML showed the allocator's blocks; once finished, at least half of them were gone again
    rose = trained["peak"] - trained["before"]
    assert rose >= 0.5 * reserved_peak, f"NVML rose {rose / GiB:.2f} GiB for {reserved_peak / GiB:.2f} GiB reserved"
    assert rose - held >= 0.5 * reserved_peak, f"held {held / GiB:.2f} GiB of a {rose / GiB:.2f} GiB rise"
    # and the process's exit gave back the rest (context, kernels)
    assert trained["after_exit"] - trained["before"] <= 256 * 2**20


@pytest.fixture(scope="module")
def exported(trained, runs) -> Path:
    r = _run("export", "--run", RUN, "--runs-dir", str(runs), "--eval-samples", "512", "--seed", "0", timeout_s=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return runs / RUN


def test_export_fp16_runs_on_the_cuda_provider_within_its_tolerance(exported):
    verify = json.loads((exported / "export" / "verify.json").read_text())
    assert verify["passed"] and verify["variants"]["fp16"]["max_rel"] <= verify["variants"]["fp16"]["tolerance_rel"]
    child = subprocess.run([sys.executable, str(Path(__file__).with_name("fp16_on_cuda.py")), str(exported)],
                           capture_output=True, text=True, timeout=120, env=subprocess_env(), cwd=REPO_ROOT)
    assert child.returncode == 0, child.stdout[-2000:] + child.stderr[-3000:]
    got = json.loads(child.stdout.strip().splitlines()[-1])
    assert got["providers"][0] == "CUDAExecutionProvider"
    for batch, outputs in got["max_rel"].items():
        for name, rel in outputs.items():
            assert 0 < rel <= got["tolerance_rel"], f"batch {batch} output {name}: max_rel {rel:g}"


def test_limits_on_cuda_measure_the_gpu_model_on_the_cuda_provider(exported, runs):
    r = _run("limits", "--run", RUN, "--runs-dir", str(runs), "--device", "cuda", "--budget-s", "4", timeout_s=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    folder = exported / "limits" / "cuda" / "cnn_gpu"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["providers"][0] == "CUDAExecutionProvider" and summary["points"] >= 3
    assert summary["batch1_p50_ms"] > 0 and summary["best_throughput_samples_s"] > 0
    records = [json.loads(p.read_text()) for p in folder.glob("*.json") if p.name != "summary.json"]
    assert len(records) == summary["points"] and {r["device"] for r in records} == {"cuda"}
    assert not (exported / "limits" / "cuda" / "cnn_cpu").exists()  # the CPU model is not the GPU's to measure


@pytest.fixture(scope="module")
def cuda_server(exported) -> Iterator[dict]:
    """`trainserve serve --device cuda` on the exported repository: its addresses, every line it printed, and
    how much NVML's used memory rose from before its start to its ready line."""
    nv = UsedMemory()
    cmd = trainserve_cmd("serve", "--model-repository", str(exported / "model_repository"), "--device", "cuda",
                         "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=subprocess_env(),
                            cwd=REPO_ROOT)
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:  # also keeps the pipe drained while the tests run
        for line in proc.stdout:
            lines.append(line)
            if READY.search(line):
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        deadline = time.monotonic() + 150
        while not ready.wait(0.2):
            assert proc.poll() is None and time.monotonic() < deadline, "server did not start:\n" + "".join(lines)[-4000:]
        addresses = dict(part.split("=", 1) for part in READY.search("".join(lines)).group(1).split())
        yield {"addresses": addresses, "lines": lines, "run": exported, "rose": nv.read() - nv.before}
    finally:
        stop_process(proc)


def _reference(run: Path, x: np.ndarray) -> np.ndarray:
    from trainserve.train import verify

    session = verify.cpu_session(run / "export" / "model.onnx")
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def _inputs(run: Path, batch: int) -> tuple[str, np.ndarray]:
    from trainserve.core.card import ModelCard, example_inputs

    card = ModelCard.load(run / "train")
    name = card.inputs[0].name
    return name, example_inputs(card, batch, seed=batch)[name]


def test_the_cuda_server_runs_every_model_on_the_cuda_provider(cuda_server):
    log = re.sub(r"\s+", " ", "".join(cuda_server["lines"]))  # the log wraps long lines
    loaded = dict(LOADED.findall(log))
    assert set(loaded) == {"cnn_cpu", "cnn_gpu"}, log[-3000:]
    assert set(loaded.values()) == {"CUDAExecutionProvider"}
    # and the device agrees: the server's sessions hold GPU memory (a CPU fallback would hold none)
    assert cuda_server["rose"] >= 100 * 2**20, f"NVML rose only {cuda_server['rose'] / 2**20:.0f} MiB"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_tritonclient_gets_fp16_answers_from_the_cuda_server(cuda_server, protocol):
    if protocol == "http":
        import tritonclient.http as client
    else:
        import tritonclient.grpc as client
    run = cuda_server["run"]
    c = client.InferenceServerClient(cuda_server["addresses"][protocol])
    try:
        assert c.is_server_ready() and c.is_model_ready("cnn_gpu")
        for batch in (1, 5, 64):
            name, x = _inputs(run, batch)
            inp = client.InferInput(name, list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            got = c.infer("cnn_gpu", [inp]).as_numpy("logits")
            want = _reference(run, x)
            assert got.shape == want.shape == (batch, 10)
            rel = float(np.abs(got - want).max() / np.abs(want).max())
            assert rel <= 1e-2, f"{protocol} batch {batch}: max_rel {rel:g} against fp32 on the CPU"
    finally:
        c.close()


def test_the_server_refuses_to_start_when_cuda_is_not_there(exported):
    """--device cuda with no visible GPU: onnxruntime would run the models on the CPU; the server must say so
    and exit instead of serving them there."""
    env = subprocess_env(CUDA_VISIBLE_DEVICES="")
    r = _run("serve", "--model-repository", str(exported / "model_repository"), "--device", "cuda",
             "--http-port", "0", "--grpc-port", "-1", "--metrics-port", "-1", timeout_s=120, env=env)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and not READY.search(out), out[-3000:]
    assert "cuda" in out.lower() and "Traceback" not in out, out[-3000:]
