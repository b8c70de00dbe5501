"""`trainserve frontier`: how large a model each device can train and serve (train/frontier.py)."""

from __future__ import annotations

import typer

from trainserve.commands._typer import Args, options_of
from trainserve.core.errors import UserError


def _sizes(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise UserError(f"--sizes {text!r} is invalid; give whole numbers separated by commas, e.g. 64,128,256") from None


@options_of("frontier")
def frontier(o: Args) -> None:
    """Peak memory by model size on one device, training and inference, and the largest size that fits.

    Scales the model size by size (training in fp32 and bf16, with and without activation checkpointing;
    the exported fp32, fp16 and int8 models on onnxruntime), stops each series at its first size that does
    not fit, fits a memory model and checks its predicted edge. Writes RUNS_DIR/RUN/frontier/DEVICE.json;
    `trainserve report` draws it.
    """
    from trainserve.core.frontier_result import FRONTIER_DIR
    from trainserve.core.runs import run_dir
    from trainserve.report.memory.memory_frontier import device_section
    from trainserve.serve.model.frontier_probe import session_working_set
    from trainserve.train.frontier import GIB, TRANSFORMER_SIZES, FrontierConfig
    from trainserve.train.frontier_sweep import run_frontier
    from trainserve.train.usermodel import parse_shape

    device = o.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    sizes = _sizes(o.sizes)
    if sizes is None:
        if o.model != "transformer":
            raise UserError("--model of your own needs --sizes, the values of --size-arg to measure")
        sizes = TRANSFORMER_SIZES
    precisions = tuple(p.strip() for p in o.train_precisions.split(",") if p.strip())
    if o.memory_cap_gib is not None and not o.memory_cap_gib > 0:
        raise UserError(f"--memory-cap-gib {o.memory_cap_gib:g} is invalid; give the capacity in GiB, a number > 0")
    cfg = FrontierConfig(
        model=o.model, size_arg=o.size_arg, sizes=sizes, device=device, batch_size=o.batch_size, seq_len=o.seq_len,
        vocab_size=o.vocab_size or 8192, input_shape=parse_shape(o.input_shape) if o.input_shape else None,
        input_dtype=o.input_dtype, num_classes=o.num_classes, train_precisions=precisions,
        checkpointing=(False, True) if o.checkpointing else (False,),
        memory_cap_bytes=None if o.memory_cap_gib is None else int(o.memory_cap_gib * GIB),
        budget_s=o.budget_s, check_edge=o.check_edge)
    root = run_dir(o.run, o.runs_dir, writable=True)

    def show(p) -> None:  # p: FrontierPoint
        peak = "-" if p.peak_bytes is None else f"{p.peak_bytes / 2**20:,.1f} MiB"
        edge = f" (edge check, predicted {p.predicted_bytes / 2**20:,.1f} MiB)" if p.source == "edge_check" else ""
        note = f" · {p.note}" if p.note and p.status != "fits" else ""
        phase = f" · peak in {p.peak_phase}" if p.peak_phase else ""
        typer.echo(f"{p.series:<16} size {p.size:>5} · {p.params / 1e6:9.3f} M params · {p.status:<12} · peak "
                   f"{peak}{edge}{phase} · {p.seconds:.1f} s{note}")

    result = run_frontier(cfg, infer_probe=session_working_set if o.infer else None, on_point=show)
    path = result.save(root / FRONTIER_DIR)
    for f in result.fits:
        typer.echo(_edge_line(f))
    for note in result.notes + ([f"stopped early: {result.stopped}"] if result.stopped else []):
        typer.echo(f"note: {note}")
    typer.echo(device_section(result).sentence)
    typer.echo(f"-> {path}")


def _edge_line(f) -> str:  # f: SeriesFit
    """One series' edge: where, measured against predicted, and the size above it."""
    if f.edge_size is None:
        return f"{f.series:<16} no edge · {f.note}"
    gib = 2**30
    known = (f"measured {f.edge_measured_bytes / gib:.3g} GiB vs predicted {f.edge_predicted_bytes / gib:.3g} GiB "
             f"({f.edge_error:+.1%})" if f.edge_checked == "fits" and f.edge_error is not None
             else f"predicted {(f.edge_predicted_bytes or 0) / gib:.3g} GiB, not measured")
    above = f" · size {f.edge_above_size}: {f.edge_above_checked}" if f.edge_above_size else ""
    note = f" · {f.note}" if f.note else ""
    return f"{f.series:<16} edge size {f.edge_size} ({(f.edge_params or 0) / 1e6:,.1f} M params) · {known}{above}{note}"
