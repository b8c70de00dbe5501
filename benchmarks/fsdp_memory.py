"""Per-rank memory of one-GPU sharded training: DDP, FSDP2 `--shard`, and `--shard --offload`.

Reads the profile.json each `trainserve train --nproc 1 [--shard [--offload]]` run left and writes
$OUT/fsdp_memory.json and .md: per run the parallelism, the GPU's peak and its split, the state kept in host
memory under --offload, and throughput.

    python benchmarks/fsdp_memory.py --runs-dir /tmp/gpu-results/runs fsdp-ddp fsdp-shard fsdp-offload
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: this tree's trainserve
from trainserve.core.profile import ProfileRecord  # noqa: E402

MIB = 2**20


def summarize(run_dir: Path) -> dict:
    record = ProfileRecord.load(run_dir / "train" / "profile.json")
    m, ddp = record.memory, record.extra.get("ddp") or {}
    breakdown = record.extra.get("memory_breakdown") or {}
    return {"run": run_dir.name, "device_name": record.device_name, "world_size": ddp.get("world_size"),
            "parallelism": ddp.get("parallelism"), "offload": ddp.get("offload", False),
            "precision": record.precision, "batch_size": record.batch_size,
            "peak_bytes": m.peak_bytes, "weights_bytes": m.weights_bytes, "gradients_bytes": m.gradients_bytes,
            "optimizer_bytes": m.optimizer_bytes, "activations_bytes": m.activations_bytes,
            "cuda_reserved_peak_bytes": m.cuda_reserved_peak_bytes,
            "host_state_bytes": breakdown.get("host_state_bytes"),
            "throughput_samples_s": record.speed.throughput_samples_s,
            "step_p50_ms": record.speed.latency.p50_ms if record.speed.latency else None}


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / MIB:,.1f}"


def markdown(rows: list[dict]) -> str:
    out = ["| run | parallelism | offload | peak MiB | weights | gradients | optimizer | activations | host state MiB "
           "| samples/s |", "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        host = sum((r["host_state_bytes"] or {}).values()) if r["host_state_bytes"] else None
        out.append(f"| {r['run']} | {r['parallelism']} x{r['world_size']} | {r['offload']} | {_mib(r['peak_bytes'])} "
                   f"| {_mib(r['weights_bytes'])} | {_mib(r['gradients_bytes'])} | {_mib(r['optimizer_bytes'])} "
                   f"| {_mib(r['activations_bytes'])} | {_mib(host)} | {r['throughput_samples_s']} |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs-dir", type=Path, required=True)
    ap.add_argument("runs", nargs="+")
    args = ap.parse_args()
    rows = [summarize(args.runs_dir / run) for run in args.runs if (args.runs_dir / run / "train").is_dir()]
    out = Path(os.environ.get("OUT", "."))
    gpu = next((r["device_name"] for r in rows if r.get("device_name")), None)
    result = {"machine": f"{gpu or 'no GPU'}, {platform.node() or 'host'}",
              "command": "python benchmarks/fsdp_memory.py " + " ".join(sys.argv[1:]),
              "date": datetime.date.today().isoformat(), "runs": rows}
    (out / "fsdp_memory.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "fsdp_memory.md").write_text(markdown(rows))
    print(markdown(rows))


if __name__ == "__main__":
    main()
