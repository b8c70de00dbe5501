"""`trainserve compare --sweep`: sweep each device, print one line per point, write runs/<run>/sweep/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from trainserve.core.errors import UserError
from trainserve.core.speedup import speedups_of_records
from trainserve.core.telemetry import NOT_SAMPLED
from trainserve.report.common import units as u
from trainserve.report.common.sections import TrainSpeedup
from trainserve.report.common.sentences import train_speedup_text
from trainserve.train.sweep import SweepConfig, file_name, sweep, write_sweep

POINT_PREFIX = "sweep point:"  # `trainserve run` shows the lines that start with this, as they come


def check_budget(budget_s: float) -> None:
    if not budget_s > 0:
        raise UserError(f"--sweep-budget-s {budget_s:g} is invalid; give the seconds each device's sweep may take "
                        "(a number > 0), or pass --no-sweep")


def devices_of(device: str) -> list[str]:
    """auto: the CPU, plus the GPU when PyTorch sees one; else the devices named."""
    import torch

    if device == "auto":
        return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    names = [d.strip() for d in device.split(",")]
    if not names or any(d not in ("cpu", "cuda") for d in names) or len(set(names)) != len(names):
        raise UserError(f"--device {device!r} is invalid; give auto, cpu, cuda or 'cpu,cuda'")
    return names


def point_line(p: Any) -> str:
    """One line per sweep point: device, precision, batch, samples/s, step p50, peak memory."""
    head = f"{POINT_PREFIX} {p.device:<4} {p.precision:<4} batch {p.batch_size:>6}"
    if p.status != "measured":
        return f"{head}  {p.status}: {p.reason}"
    r = p.record
    util = r.utilization.gpu_util_mean_percent
    tail = f"  GPU util {util:.0f}%" if util is not None else f"  GPU util {NOT_SAMPLED}" if p.device == "cuda" else ""
    cut = "  (cut short at the budget)" if r.validity.partial else ""
    return (f"{head}  {u.num(r.speed.throughput_samples_s):>9} samples/s  step p50 {u.ms(r.speed.latency.p50_ms):>9}"
            f"  peak {u.nbytes(r.memory.peak_bytes):>9}{tail}{cut}")


def data_path_line(device: str, dp: dict[str, Any] | None) -> str | None:
    """The data path at the best point (train/datapath.py): host DataLoader and resident samples/s, their ratio."""
    if not dp:
        return None
    head = f"{POINT_PREFIX} {device:<4} data path at batch {dp['batch_size']} {dp['precision']}:"
    if dp.get("skipped"):
        return f"{head} skipped: {dp['skipped']}"
    by = {r["placement"]: r for r in dp["runs"]}
    host, dev = by.get("host") or {}, by.get("device") or {}
    return (f"{head} host DataLoader {u.num(host.get('samples_s'))} samples/s ({host.get('workers')} workers, "
            f"{u.ms(host.get('data_wait_ms'))} host data time per step), resident {u.num(dev.get('samples_s'))} "
            f"samples/s: host at {u.ratio(dp.get('host_over_device'))}")


def run_sweeps(cfg: Any, device: str, budget_s: float, root: Path) -> dict[str, Any]:
    """Sweep each device in turn; write sweep/<device>/; print both training speedups when both ran."""
    check_budget(budget_s)
    devices = devices_of(device)
    config = SweepConfig(budget_s=budget_s)
    records: list[tuple[str, Any]] = []
    for d in devices:
        result = sweep(cfg, d, config, on_point=lambda p: typer.echo(point_line(p)))
        write_sweep(result, root / "sweep" / d, {"model": cfg.model, "preset": cfg.preset})
        best = result.best
        line = data_path_line(d, result.data_path)
        if line:
            typer.echo(line)
        typer.echo(f"sweep {d}: best {u.num(best.record.speed.throughput_samples_s)} samples/s at batch "
                   f"{best.batch_size} {best.precision}; {len(result.measured)} points in {result.elapsed_s:.1f} s "
                   f"of {budget_s:g} s; written to {root / 'sweep' / d}")
        records += [(f"sweep/{d}/{file_name(p)}", p.record) for p in result.measured]
    speedups = speedups_of_records(records)
    if len(devices) > 1:
        for key in ("train", "train_best"):
            typer.echo(f"GPU vs CPU {train_speedup_text(TrainSpeedup.of(speedups[key]))}")
    return speedups

