"""The CPU-vs-GPU training speed-up: one computation for the report and for `trainserve compare`.

Pure arithmetic over training profile records, given as (source, record) pairs where `source` is the
record's path inside the run folder. The report (trainserve.report.page.analysis) and the command line
(`trainserve compare`, its sweeps) both call `speedups_of_records`, so they print the same figure.

Two bases, always both: "train" compares the devices at the same configuration (batch size and
precision), "train_best" each device at its own best sweep point. A side that was not measured
gives value None and a note saying why; nothing is guessed.
"""

from __future__ import annotations

from typing import Any

from trainserve.core.profile import ProfileRecord

DEVICES = ("cpu", "cuda")
DEVICE_LABEL = {"cpu": "CPU", "cuda": "GPU"}

Pair = tuple[str, ProfileRecord]  # (source path inside the run folder, record)


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is 0."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def is_sweep(record: ProfileRecord) -> bool:
    """A point of a training sweep (train/sweep.py), not a training run."""
    return isinstance(record.extra, dict) and record.extra.get("sweep") is True


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def train_point(source: str, r: ProfileRecord) -> dict[str, Any]:
    """One training operating point: summary.json's models.<m>.operating_points.<device>.train[i]."""
    return {"batch_size": r.batch_size, "precision": r.precision,
            "throughput_samples_s": r.speed.throughput_samples_s, "p50_ms": r.speed.latency.p50_ms,
            "p99_ms": r.speed.latency.p99_ms, "peak_bytes": _first(r.memory.peak_bytes, r.memory.rss_peak_bytes),
            "gpu_util_mean_percent": r.utilization.gpu_util_mean_percent, "partial": r.validity.partial,
            "energy_per_sample_j": r.energy.energy_per_sample_j, "energy_source": r.energy.source,
            "host_logical_cpus": (r.host or {}).get("logical_cpus"), "torch_threads": r.settings.get("torch_threads"),
            "source": source}


def best_point(points: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The most samples/s (ties: the smaller batch, which needs less memory)."""
    ok = [p for p in points if p["throughput_samples_s"]]
    return max(ok, key=lambda p: (p["throughput_samples_s"], -p["batch_size"])) if ok else None


def operating_points(train: list[Pair]) -> dict[str, dict[str, Any]]:
    """Per device with sweep points: {"train": [points by precision, batch], "train_best": the best}."""
    out: dict[str, dict[str, Any]] = {}
    for d in DEVICES:
        # a re-run sweep replaces its folder, so each (precision, batch) appears once; keep the newest anyway
        newest: dict[tuple[str, int], Pair] = {}
        for source, r in sorted((p for p in train if is_sweep(p[1]) and p[1].device == d),
                                key=lambda p: p[1].created):
            newest[(r.precision, r.batch_size)] = (source, r)
        if newest:
            points = [train_point(*newest[k]) for k in sorted(newest)]
            out[d] = {"train": points, "train_best": best_point(points)}
    return out


def pick_train(pairs: list[Pair]) -> Pair | None:
    """The training record that stands for one device: the compare/ record first (made for the CPU-vs-GPU
    comparison), else the newest; sweep points only when the device has nothing else, and then its best."""
    if not pairs:
        return None
    plain = [p for p in pairs if not is_sweep(p[1])]
    if not plain:
        return max(pairs, key=lambda p: p[1].speed.throughput_samples_s or 0.0)
    return max(plain, key=lambda p: (p[0].startswith("compare/"), p[1].created, p[0]))


def run_point(source: str, r: ProfileRecord) -> dict[str, Any]:
    """A training run's configuration and figures, as the same-configuration basis uses them."""
    m = r.memory
    return {"batch_size": r.batch_size, "precision": r.precision, "throughput_samples_s": r.speed.throughput_samples_s,
            "p50_ms": r.speed.latency.p50_ms, "peak_bytes": _first(m.peak_bytes, m.cuda_allocated_peak_bytes,
                                                                   m.rss_peak_bytes), "source": source}


def speedups_of_records(records: list[Pair]) -> dict[str, Any]:
    """{"train": same configuration, "train_best": each at its best} from a run's training records.

    The same configuration comes from the sweeps when both devices measured one in common (the
    CPU's best configuration when the GPU has it, else the largest common batch, fp32 first), else
    from the training records (the compare/ pair) when their batch and precision agree.
    """
    train = [p for p in records if p[1].phase == "train"]
    points = operating_points(train)
    picked = {d: pick_train([p for p in train if p[1].device == d]) for d in DEVICES}
    runs = {d: None if p is None else run_point(*p) for d, p in picked.items()}
    same = _same_in_sweeps(points)
    note = None
    if same is None:
        same, note = _same_in_runs(runs, points)
    best = tuple(points.get(d, {}).get("train_best") for d in DEVICES)
    return {"train": _train_speedup("same_config", *(same or (None, None)), note),
            "train_best": _train_speedup("best_vs_best", *best, None)}


def _same_in_sweeps(points: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The CPU's and the GPU's sweep points at one configuration both measured: the CPU's best when the GPU has
    it, else the largest common batch, fp32 first (None: no configuration in common)."""
    cpu_pts = [p for p in points.get("cpu", {}).get("train", []) if not p["partial"]]
    gpu_pts = [p for p in points.get("cuda", {}).get("train", []) if not p["partial"]]
    gpu_by_config = {(p["batch_size"], p["precision"]): p for p in gpu_pts}
    common = [p for p in cpu_pts if (p["batch_size"], p["precision"]) in gpu_by_config]
    if not common:
        return None
    cpu_best = best_point(cpu_pts)
    chosen = (cpu_best if cpu_best in common
              else max(common, key=lambda p: (p["precision"] == "fp32", p["batch_size"])))
    return chosen, gpu_by_config[(chosen["batch_size"], chosen["precision"])]


def _same_in_runs(runs: dict[str, dict[str, Any] | None], points: dict[str, Any]
                  ) -> tuple[tuple[dict[str, Any], dict[str, Any]] | None, str | None]:
    """The training runs themselves when their batch and precision agree, else None and why not."""
    c, g = runs["cpu"], runs["cuda"]
    if c and g and (c["batch_size"], c["precision"]) == (g["batch_size"], g["precision"]):
        return (c, g), None
    if c and g:
        return None, (f"not measured: the CPU trained at batch {c['batch_size']} {c['precision']} and the GPU at "
                      f"batch {g['batch_size']} {g['precision']}, and no sweep measured a configuration on both")
    missing = [DEVICE_LABEL[d] for d in DEVICES if not points.get(d) and not runs[d]]
    return None, (f"not measured: no {' or '.join(missing)} training measurement" if missing
                  else "not measured: the CPU and GPU sweeps share no batch size and precision")


def _train_speedup(basis: str, cpu: dict[str, Any] | None, gpu: dict[str, Any] | None,
                   note: str | None) -> dict[str, Any]:
    c = cpu and cpu["throughput_samples_s"]
    g = gpu and gpu["throughput_samples_s"]
    value = ratio(g, c)
    if value is None and note is None:
        missing = [DEVICE_LABEL[d] for d, v in (("cpu", c), ("cuda", g)) if v is None]
        what = "training sweep" if basis == "best_vs_best" else "training measurement at a configuration both share"
        note = f"not measured: no {' or '.join(missing) or 'usable'} {what}"

    def config(p: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if p is None else {k: p.get(k) for k in ("batch_size", "precision", "throughput_samples_s",
                                                              "p50_ms", "peak_bytes", "source")}

    return {"basis": basis, "value": value, "cpu": c, "gpu": g, "metric": "throughput_samples_s", "note": note,
            "cpu_point": config(cpu), "gpu_point": config(gpu)}
