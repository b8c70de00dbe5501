"""onnxruntime's intra-op spinning for a served CPU model, in process: off, on, and on only during a run.

    python benchmarks/ort_spin.py MODEL.onnx [--threads N[,N...]] [--runs 300] [--rounds 2] [--gaps-ms 0,2]

Batch-1 runs back to back (gap 0: a busy server) and with a pause between them (a lone user's think time, when
spinning pool threads burn cores the server's event loop needs). Per variant: p50 and mean run time, and the
process's CPU per run. Variants: `off` (the server's default: allow_spinning 0), `spin` (onnxruntime's default:
threads spin between and after runs), `spin+stop` (allow_spinning 1 with session.force_spinning_stop 1: threads
spin inside a run and stop when it returns). `--pin` adds each variant with its worker threads pinned one
per usable core (onnxruntime's session.intra_op_thread_affinities; the calling thread unpinned). Several
thread counts (--threads 4,10) are each a variant of their own.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

VARIANTS = {"off": ("0", None), "spin": ("1", None), "spin+stop": ("1", "1")}


def session(path: str, threads: int, spin: str, stop: str | None, pin: bool = False):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", spin)
    if stop is not None:
        so.add_session_config_entry("session.force_spinning_stop", stop)
    cpus = sorted(os.sched_getaffinity(0))
    if pin and 1 < threads <= len(cpus):
        so.add_session_config_entry("session.intra_op_thread_affinities", ";".join(str(c + 1) for c in cpus[1:threads]))
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--threads", default="2", help="intra-op threads; a comma list measures each")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--gaps-ms", default="0,2")
    ap.add_argument("--pin", action="store_true", help="also each variant with pinned worker threads")
    a = ap.parse_args()
    try:
        counts = [int(t) for t in a.threads.split(",")]
    except ValueError:
        ap.error(f"--threads {a.threads!r} is not a comma list of whole numbers; write e.g. 4,10")
    variants = [(label, spin, stop, False) for label, (spin, stop) in VARIANTS.items()]
    if a.pin:
        variants += [(label + "+pin", spin, stop, True) for label, (spin, stop) in VARIANTS.items()]
    gaps = [float(g) for g in a.gaps_ms.split(",")]
    print(f"| round | threads | variant | gap ms | p50 ms | mean ms | CPU ms/run |\n|---|---:|---|---:|---:|---:|---:|")
    for rnd in range(1, a.rounds + 1):
        for threads, (label, spin, stop, pin) in ((t, v) for t in counts for v in variants):
            s = session(a.model, threads, spin, stop, pin)
            inp = s.get_inputs()[0]
            x = np.random.default_rng(0).random((1, *inp.shape[1:])).astype(np.float32)
            for _ in range(30):
                s.run(None, {inp.name: x})
            for gap in gaps:
                times = []
                c0 = time.process_time()
                for _ in range(a.runs):
                    t = time.perf_counter()
                    s.run(None, {inp.name: x})
                    times.append(time.perf_counter() - t)
                    if gap:
                        time.sleep(gap / 1000)
                cpu = (time.process_time() - c0) / a.runs
                print(f"| {rnd} | {threads} | {label} | {gap:g} | {np.median(times) * 1e3:.3f} | {np.mean(times) * 1e3:.3f} | "
                      f"{cpu * 1e3:.2f} |", flush=True)


if __name__ == "__main__":
    main()
