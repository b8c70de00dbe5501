"""One /metrics scrape's rendering: prometheus_client's collector and `generate_latest` (what
serve/protocol/prometheus.py serves) against the hand-written text writer it replaced, in one process.

    python benchmarks/metrics_exposition.py [--models 4] [--gpus 1] [--scrapes 2000] [--rounds 15] [--out FILE]

Both render the same page from the same inputs: per-model statistics of `--models` model versions, the
resource gauges of `--gpus` GPUs and the CPU, and the twelve trainserve_refused_total series. Reading
the sources (the core's statistics, psutil, NVML) costs the same on either side and is left out. Rounds
alternate between the two writers, so load from other processes falls on both alike; each round's figure
is its mean per scrape, and the result gives the best and the median round of each. Writes one JSON
(machine, command, date, figures) to --out, or to stdout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import generate_latest  # noqa: E402

from trainserve.loadtest.metrics import parse_prometheus  # noqa: E402

from trainserve.serve.protocol import prometheus, refusals  # noqa: E402
from trainserve.serve.protocol.prometheus import GpuGauges, Resources, TritonCollector, registry_of  # noqa: E402


# ------------------------------------------------------------------ the hand-written writer it replaced
# Kept here only, as the baseline: the text serve/protocol/prometheus.py and refusals.py wrote by hand,
# every family typed as Triton types it.
_HAND_DURATION_KEYS = {
    "nv_inference_request_duration_us": "success",
    "nv_inference_queue_duration_us": "queue",
    "nv_inference_compute_input_duration_us": "compute_input",
    "nv_inference_compute_infer_duration_us": "compute_infer",
    "nv_inference_compute_output_duration_us": "compute_output",
}
_HAND_GPU = [(name, "counter" if name == "nv_energy_consumption" else "gauge", help_text, attr)
             for name, _, help_text, attr in prometheus._GPU_METRICS]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _hand_model_value(name: str, s: Mapping[str, Any]) -> float:
    infer = s.get("inference_stats", {})
    if name == "nv_inference_request_success":
        return infer.get("success", {}).get("count", 0)
    if name == "nv_inference_request_failure":
        return infer.get("fail", {}).get("count", 0)
    if name == "nv_inference_count":
        return s.get("inference_count", 0)
    if name == "nv_inference_exec_count":
        return s.get("execution_count", 0)
    return int(infer.get(_HAND_DURATION_KEYS[name], {}).get("ns", 0)) // 1000


def hand_written_render(model_stats: Iterable[Mapping[str, Any]], resources: Resources | None,
                        extra: Iterable[str] = ()) -> str:
    """The replaced writer: the text exposition (format 0.0.4) built line by line."""
    stats = list(model_stats)
    lines: list[str] = []
    for name, help_text, _ in prometheus._MODEL_METRICS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter"]
        for s in stats:
            labels = _labels(model=s["name"], version=s.get("version", ""))
            lines.append(f"{name}{labels} {_number(_hand_model_value(name, s))}")
    if resources is not None:
        for name, kind, help_text, attr in _HAND_GPU:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            for gpu in resources.gpus:
                lines.append(f"{name}{_labels(gpu_uuid=gpu.uuid)} {_number(getattr(gpu, attr))}")
        for name, help_text, attr in prometheus._CPU_METRICS:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge",
                      f"{name} {_number(getattr(resources, attr))}"]
    lines += extra
    return "\n".join(lines) + "\n"


def hand_written_refusals(r: refusals.Refusals) -> list[str]:
    m = refusals.METRIC
    lines = [f"# HELP {m} {refusals.HELP}", f"# TYPE {m} counter"]
    return lines + [f'{m}{{frontend="{f}",reason="{why}"}} {n}' for (f, why), n in sorted(r.counts.items())]


# ------------------------------------------------------------------ inputs and measure
def model_stats(models: int) -> list[dict]:
    """Statistics-extension dicts of `models` model versions, counters well into the millions."""
    d = lambda count, ns: {"count": count, "ns": ns}  # noqa: E731
    return [{"name": f"model_{i}", "version": "1", "inference_count": 4_000_000 + i, "execution_count": 90_000 + i,
             "inference_stats": {"success": d(1_500_000 + i, 912_345_678_901), "fail": d(12 + i, 5_000_000),
                                 "queue": d(1_500_000, 123_456_789_012), "compute_input": d(90_000, 2_345_678_901),
                                 "compute_infer": d(90_000, 345_678_901_234),
                                 "compute_output": d(90_000, 1_234_567_890)}}
            for i in range(models)]


def resources(gpus: int) -> Resources:
    return Resources(cpu_utilization=0.4375, cpu_memory_total_bytes=128 << 30, cpu_memory_used_bytes=37_123_456_789,
                     gpus=[GpuGauges(uuid=f"GPU-{i:08x}-1c2d-3e4f-5a6b-7c8d9e0f1a2b", utilization=0.83,
                                     memory_total_bytes=80 << 30, memory_used_bytes=12_345_678_912, power_w=412.25,
                                     power_limit_w=700.0, energy_j=1_234_567.5) for i in range(gpus)])


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The page as the load test reads it (loadtest/metrics.py): {metric name: [(labels, value), ...]}, sorted."""
    return {name: sorted(rows, key=lambda row: sorted(row[0].items())) for name, rows in parse_prometheus(text).items()}


def per_scrape_us(render: Callable[[], object], scrapes: int) -> float:
    t0 = time.perf_counter()
    for _ in range(scrapes):
        render()
    return (time.perf_counter() - t0) / scrapes * 1e6


def machine() -> dict:
    """The host the figures belong to (the result file's `machine`)."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine())
    return {"host": platform.node(), "cpu_model": cpu, "cpu_count": os.cpu_count(),
            "python": platform.python_version(), "prometheus_client": version("prometheus_client")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=4, help="model versions with statistics on the page")
    p.add_argument("--gpus", type=int, default=1, help="GPUs with resource gauges on the page")
    p.add_argument("--scrapes", type=int, default=2000, help="scrapes rendered per round and writer")
    p.add_argument("--rounds", type=int, default=15, help="rounds per writer, alternating")
    p.add_argument("--out", type=Path, help="result JSON (default: stdout)")
    args = p.parse_args()

    stats, res, counts = model_stats(args.models), resources(args.gpus), refusals.Refusals()
    counts.add("grpc", "flood", 7)
    counts.add("http", "connections", 1234)
    registry = registry_of(TritonCollector(lambda: stats, lambda: res), counts)
    hand = lambda: hand_written_render(stats, res, hand_written_refusals(counts))  # noqa: E731
    library = lambda: generate_latest(registry)  # noqa: E731
    hand_text, library_text = hand(), library().decode()
    assert samples(hand_text) == samples(library_text), "the two writers disagree on a sample's name, labels or value"

    hand_us, library_us = [], []
    for _ in range(args.rounds):
        hand_us.append(per_scrape_us(hand, args.scrapes))
        library_us.append(per_scrape_us(library, args.scrapes))
    h, lib = statistics.median(hand_us), statistics.median(library_us)
    result = {
        "machine": machine(), "command": " ".join(["python", *sys.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
        "models": args.models, "gpus": args.gpus, "series": sum(len(rows) for rows in samples(library_text).values()),
        "scrapes_per_round": args.scrapes, "rounds": args.rounds,
        "hand_written_best_us": round(min(hand_us), 1), "hand_written_median_us": round(h, 1),
        "prometheus_client_best_us": round(min(library_us), 1), "prometheus_client_median_us": round(lib, 1),
        "prometheus_client_over_hand_written": round(lib / h, 2),
        "prometheus_client_extra_us_per_scrape": round(lib - h, 1),
        "hand_written_bytes": len(hand_text.encode()), "prometheus_client_bytes": len(library_text.encode()),
        "hand_written_us_by_round": [round(v, 1) for v in hand_us],
        "prometheus_client_us_by_round": [round(v, 1) for v in library_us],
    }
    text = json.dumps(result, indent=1) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
