"""How long an onnxruntime run on a thread takes while another thread runs Python, by GIL switch interval.

    python benchmarks/gil_wait.py [--intervals-us 5000,1000,500,200,100,50] [--runs 400]

A small MLP (256 -> 1024 -> 1024 -> 10, batch 16, one intra-op thread) runs on a worker thread, as the server's
instance threads run their sessions, while the main thread spins in pure Python, as a busy event loop does.
onnxruntime runs without the GIL; what the run waits for afterwards is the GIL, up to the switch interval.
Prints, per interval: the run's median and mean, runs/s, and the busy thread's pace (what it gives up).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np


def _model(path: Path) -> None:
    import torch

    m = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                            torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    torch.onnx.export(m, torch.zeros(1, 256), str(path), input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "b"}}, dynamo=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--intervals-us", default="5000,1000,500,200,100,50")
    ap.add_argument("--runs", type=int, default=400)
    a = ap.parse_args()
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mlp.onnx"
        _model(path)
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    x = np.zeros((16, 256), np.float32)

    def runs() -> tuple[float, float]:
        times = []
        for _ in range(a.runs):
            t = time.perf_counter()
            session.run(["y"], {"x": x})
            times.append(time.perf_counter() - t)
        return float(np.median(times)) * 1e3, float(np.mean(times)) * 1e3

    alone = runs()
    print(f"alone: run median {alone[0]:.3f} ms, mean {alone[1]:.3f} ms")
    print("| switch interval µs | run median ms | run mean ms | runs/s | busy thread's loops/s |\n|---:|---:|---:|---:|---:|")
    old = sys.getswitchinterval()
    try:
        for us in (int(v) for v in a.intervals_us.split(",")):
            sys.setswitchinterval(us / 1e6)
            stop, loops, out = False, [0], []

            def busy() -> None:
                total = 0
                while not stop:
                    for i in range(1000):
                        total += i
                    loops[0] += 1

            spinner = threading.Thread(target=busy)
            spinner.start()
            t0 = time.perf_counter()
            worker = threading.Thread(target=lambda: out.append(runs()))
            worker.start()
            worker.join()
            elapsed = time.perf_counter() - t0
            stop = True
            spinner.join()
            median, mean = out[0]
            print(f"| {us} | {median:.3f} | {mean:.3f} | {a.runs / elapsed:.0f} | {loops[0] / elapsed:.0f} |")
    finally:
        sys.setswitchinterval(old)


if __name__ == "__main__":
    main()
