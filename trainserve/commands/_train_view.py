"""What `trainserve train` and `compare` print: a live progress bar and a final summary table."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table


def _gib(b: int | None) -> str:
    if b is None:
        return "-"
    return f"{b / 2**30:.2f} GiB" if b >= 2**28 else f"{b / 2**20:.1f} MiB" if b >= 2**20 else f"{b / 2**10:.1f} KiB"


@contextlib.contextmanager
def live_progress() -> Iterator[Callable[[Any], None]]:
    """A rich progress bar on stderr; yields the callback train.loop.fit calls with a Progress.

    The bar appears with the first update, so a mistake caught before training prints only its error.
    """
    console = Console(stderr=True)
    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} steps"),
                   TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[speed]} samples/s"),
                   TextColumn("mem {task.fields[mem]}"), TimeElapsedColumn(), console=console, transient=False)
    task = bar.add_task("train", total=None, loss="-", speed="-", mem="-")
    started = False

    def update(p: Any) -> None:
        nonlocal started
        if not started:
            bar.start()
            started = True
        fields = {"loss": f"{p.loss:.4f}" if p.loss is not None else "-", "mem": _gib(p.memory_bytes)}
        if p.samples_s is not None:
            fields["speed"] = f"{p.samples_s:,.0f}"
        desc = f"{'eval' if p.phase == 'eval' else 'train'} epoch {p.epoch}/{p.epochs}"
        bar.update(task, description=desc, completed=p.step, total=p.total_steps, **fields)

    try:
        yield update
    finally:
        if started:
            bar.stop()


def print_summary(result: Any) -> None:
    rec, last = result.record, (result.history[-1] if result.history else {})
    name = rec.model + (f"/{rec.preset}" if rec.preset else "")  # a model of your own has no preset
    t = Table(title=f"trained {name} on {rec.device} ({rec.device_name}), {rec.precision}",
              show_header=False)
    t.add_column(style="bold")
    t.add_column()
    lat = rec.speed.latency
    rows = [
        ("test accuracy", _fmt(last.get("test_accuracy"), "{:.2%}")),
        ("test loss", _fmt(last.get("test_loss"), "{:.4f}")),
        ("throughput", _fmt(rec.speed.throughput_samples_s, "{:,.1f} samples/s")),
        ("step time p50 / p90 / p99", f"{lat.p50_ms} / {lat.p90_ms} / {lat.p99_ms} ms ({lat.count} steps)"),
        ("data wait", _fmt(rec.extra.get("data_wait_share"), "{:.1%} of step time")),
        ("peak memory", _gib(rec.memory.peak_bytes) + (" (CUDA allocated)" if rec.device == "cuda" else
                                                        " (CPU allocator, profiled step)" if _profiled(rec)
                                                        else " (RSS growth)")),
        ("weights / grads / optimizer / activations", " / ".join(_gib(b) for b in (
            rec.memory.weights_bytes, rec.memory.gradients_bytes, rec.memory.optimizer_bytes, rec.memory.activations_bytes))),
    ]
    if rec.speed.achieved_tflops is not None:
        math = rec.settings.get("math_mode")
        rows.append(("achieved", f"{rec.speed.achieved_tflops} TFLOP/s"
                     + (f", MFU {rec.speed.mfu:.1%}" if rec.speed.mfu else "")
                     + (f" ({math} math, peak {rec.speed.peak_tflops} TFLOP/s)" if math and rec.speed.peak_tflops
                        else "")))
    mb = rec.memory.max_batch
    if mb:
        rows.append(("max batch train / infer", f"{mb['train']:,} / {mb['infer']:,} (x{mb['ratio']})"))
    rows.append(("artifacts", str(result.out_dir)))
    for k, v in rows:
        t.add_row(k, v)
    console = Console()
    console.print(t)
    for e in rec.validity.errors:  # a figure beyond its physical bound: withheld above, named here
        console.print(f"[bold red]error:[/] {e}")
    for w in rec.validity.warnings:
        console.print(f"[yellow]warning:[/] {w}")
    if rec.time_to_accuracy is not None:
        console.print(target_line(rec))


def target_line(rec: Any) -> str:
    """One line on --target-accuracy: reached (time, epochs, energy) or the budget ended first."""
    t = rec.time_to_accuracy
    where = f"on {rec.device}"
    if not t.reached:
        best = "" if t.test_accuracy is None else f"; the last eval gave {t.test_accuracy:.2%}"
        return (f"target accuracy {t.target_accuracy:.2%} not reached {where} within {_epochs(t.epochs_run)}{best}; "
                "raise --epochs (or --lr) to train further")
    energy = ("energy not measured" if t.energy_to_accuracy_j is None
              else f"{t.energy_to_accuracy_j:,.1f} J ({t.energy_source})")
    return (f"target accuracy {t.target_accuracy:.2%} reached {where} after {_epochs(t.epochs_to_accuracy)} "
            f"({t.steps_to_accuracy} steps) in {t.time_to_accuracy_s:.2f} s, {energy}; test accuracy "
            f"{t.test_accuracy:.2%}")


def print_compare(records: dict[str, Any], speedups: dict[str, Any], out_dir: Path) -> None:
    c, g = records["cpu"], records["cuda"]
    t = Table(title=f"{c.model}{'/' + c.preset if c.preset else ''}, batch {c.batch_size}, {c.precision}")
    for col in ("", "cpu", "cuda"):
        t.add_column(col)
    t.add_row("device", c.device_name, g.device_name)
    t.add_row("samples/s", _fmt(c.speed.throughput_samples_s, "{:,.1f}"), _fmt(g.speed.throughput_samples_s, "{:,.1f}"))
    t.add_row("step p50 (ms)", str(c.speed.latency.p50_ms), str(g.speed.latency.p50_ms))
    t.add_row("peak memory", _gib(c.memory.peak_bytes), _gib(g.memory.peak_bytes))
    console = Console()
    console.print(t)
    value = speedups["train"]["value"]
    console.print(f"GPU speed-up at the same configuration: [bold]{_fmt(value, '{:.3g}x')}[/] samples/s; "
                  f"written to {out_dir}")
    for rec in (c, g):
        if rec.time_to_accuracy is not None:
            console.print(target_line(rec))


def _epochs(n: int | None) -> str:
    return f"{n} epoch" if n == 1 else f"{n} epochs"


def _fmt(v: Any, pattern: str) -> str:
    return "-" if v is None else pattern.format(v)


def _profiled(rec) -> bool:
    """CPU training memory counted by torch's CPU allocator over a profiled step (train/memory.py)."""
    breakdown = rec.extra.get("memory_breakdown") if isinstance(rec.extra, dict) else None
    return isinstance(breakdown, dict) and breakdown.get("source") == "torch_profiler_cpu_memory_and_tensor_sizes"
