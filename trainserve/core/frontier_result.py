"""The memory frontier's result record: how large a model one device can train and serve.

`trainserve frontier` writes one `FrontierResult` per device to runs/<run>/frontier/<device>.json; the
report reads it back through `FrontierResult.load`. Encoded and decoded here only, with a schema version.
No torch: the report imports this.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainserve.core.errors import UserError
from trainserve.core.fsutil import write_json_atomic

FRONTIER_SCHEMA_VERSION = 1
FRONTIER_DIR = "frontier"  # runs/<run>/frontier/<device>.json
MODES = ("train", "infer")
STATUSES = ("fits", "does_not_fit", "error", "skipped")


# A fit of a few points is trusted this far past the largest size it saw, no further: the activations'
# share, the allocator's rounding and the runtime's workspace change with size, so an edge a thousand times
# past the measured points is a guess, not a consequence of the measurements.
MAX_EXTRAPOLATION = 4.0  # x the largest measured parameter count


@dataclass
class FrontierPoint:
    """One model size in one configuration (a series), measured or predicted."""

    series: str  # "train fp32", "train bf16 ckpt", "infer int8", ...: mode, precision and checkpointing
    mode: str  # "train" | "infer"
    precision: str  # fp32 | bf16 (training, autocast) ; fp32 | fp16 | int8 (the exported ONNX model)
    checkpointing: bool  # training: torch.utils.checkpoint around each block
    size: int  # the scaled argument: the transformer's d_model, or the value of --size-arg
    params: int  # parameters of the model at this size
    batch_size: int
    status: str  # fits | does_not_fit (past the capacity, or a real out-of-memory) | error | skipped
    # "measured" (the walk up the sizes), "edge_check" (the search at the fit's edge), or "modelled": a sharded
    # series' per-rank figures computed from the unsharded point at that size (sharded_point), not measured
    source: str = "measured"
    ranks: int = 1  # >1: per-rank figures of FSDP2 sharding over this many ranks
    peak_bytes: int | None = None  # training: weights + optimizer + the step's peak; inference: the working set
    weights_bytes: int | None = None
    gradients_bytes: int | None = None
    optimizer_bytes: int | None = None
    activations_bytes: int | None = None  # activations and temporaries: forward/backward's peak less the parts above
    step_temporaries_bytes: int | None = None  # the optimizer step's peak less weights, gradients and state
    peak_phase: str = ""  # training: the phase that set the peak, "forward/backward" or "optimizer step"
    predicted_bytes: int | None = None  # the fit's figure at this size (edge checks)
    seconds: float = 0.0
    note: str = ""  # why it does not fit, the error's first line, why it was skipped

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode={self.mode!r} is invalid; allowed: {', '.join(MODES)}")
        if self.status not in STATUSES:
            raise ValueError(f"status={self.status!r} is invalid; allowed: {', '.join(STATUSES)}")

    @property
    def parts_bytes(self) -> int | None:
        parts = (self.weights_bytes, self.gradients_bytes, self.optimizer_bytes, self.activations_bytes)
        if any(p is None for p in parts):
            return None
        # the peak is one phase's: activations at forward/backward's, or the step's temporaries at the step's
        return sum(parts[:3]) + max(parts[3], self.step_temporaries_bytes or 0)  # type: ignore[arg-type]


@dataclass
class SeriesFit:
    """bytes ≈ a·params + b·batch·activations_per_sample + c, fitted to one series' measured points."""

    series: str
    a: float  # bytes per parameter
    b: float  # bytes per activation element of one sample, per sample of the batch
    c: float  # bytes, fixed (runtime, workspace)
    points: int  # measured points the fit saw
    max_rel_error: float  # worst |fit - measured| / measured over those points
    edge_size: int | None = None  # the largest size predicted to fit the capacity
    edge_params: int | None = None
    edge_predicted_bytes: int | None = None
    edge_checked: str = ""  # "fits" | "does_not_fit" | "" (not checked): the measurement at edge_size
    edge_measured_bytes: int | None = None
    edge_error: float | None = None  # (measured - predicted) / predicted at edge_size, the prediction made before it
    edge_above_size: int | None = None  # the next size past the edge, measured: it must not fit
    edge_above_checked: str = ""  # "does_not_fit" (the edge is bracketed) | "fits" | "error" | "" (not measured)
    note: str = ""  # why no edge
    beyond: bool = False  # the edge lies past MAX_EXTRAPOLATION x the largest measured size: edge_* is a lower bound


@dataclass
class FrontierResult:
    """One device's frontier: every point, the fits, and the capacity they are held against."""

    device: str  # cpu | cuda
    device_name: str  # "NVIDIA H100 80GB HBM3", the CPU model
    model: str  # "transformer", or the user model's reference
    batch_size: int
    capacity_bytes: int | None  # what fits: the card's memory or --memory-cap-gib; None: no edge on a CPU
    capacity_source: str  # "cuda total memory", "--memory-cap-gib", or why there is none
    seq_len: int | None = None  # transformer: tokens per sample
    points: list[FrontierPoint] = field(default_factory=list)
    fits: list[SeriesFit] = field(default_factory=list)
    budget_s: float = 0.0
    seconds: float = 0.0
    stopped: str = ""  # why the sweep stopped early (the time budget), else ""
    notes: list[str] = field(default_factory=list)  # series left out, and why
    versions: dict[str, str] = field(default_factory=dict)
    schema_version: int = FRONTIER_SCHEMA_VERSION

    def save(self, folder: Path) -> Path:
        path = Path(folder) / f"{self.device}.json"
        write_json_atomic(path, asdict(self))
        return path

    @classmethod
    def load(cls, path: Path) -> FrontierResult:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise UserError(f"frontier result {path} cannot be read ({type(e).__name__}); run `trainserve frontier` "
                            "again") from None
        if not isinstance(data, dict) or data.get("schema_version") != FRONTIER_SCHEMA_VERSION:
            raise UserError(f"frontier result {path} has schema version {data.get('schema_version')!r}, not "
                            f"{FRONTIER_SCHEMA_VERSION}; run `trainserve frontier` again")
        data["points"] = [FrontierPoint(**_known(FrontierPoint, p)) for p in data.get("points", [])]
        data["fits"] = [SeriesFit(**_known(SeriesFit, f)) for f in data.get("fits", [])]
        return cls(**_known(cls, data))

    def series(self) -> list[str]:
        return list(dict.fromkeys(p.series for p in self.points))


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def series_name(mode: str, precision: str, checkpointing: bool = False, ranks: int = 1) -> str:
    return f"{mode} {precision}" + (" ckpt" if checkpointing else "") + (f" shard/{ranks}" if ranks > 1 else "")


def sharded_point(p: FrontierPoint, ranks: int, capacity: int | None) -> FrontierPoint:
    """One rank's memory were the unsharded training point `p` sharded over `ranks` (FSDP2): weights, gradients
    and optimizer state divided by the ranks, activations whole (each rank runs its own batch). Modelled, not
    measured: it leaves out the one unit's parameters gathered at a time, which tests/train/test_sharding.py
    shows is small beside the state at two ranks."""
    w, g, o = (None if b is None else b // ranks for b in (p.weights_bytes, p.gradients_bytes, p.optimizer_bytes))
    temps = None if p.step_temporaries_bytes is None else p.step_temporaries_bytes // ranks
    peak = None if None in (w, g, o, p.activations_bytes) else w + g + o + max(p.activations_bytes, temps or 0)
    fits = peak is not None and (capacity is None or peak <= capacity)
    return dataclasses.replace(
        p, series=series_name(p.mode, p.precision, p.checkpointing, ranks), source="modelled", ranks=ranks,
        peak_bytes=peak, weights_bytes=w, gradients_bytes=g, optimizer_bytes=o, step_temporaries_bytes=temps,
        status="fits" if fits else "does_not_fit", predicted_bytes=None, seconds=0.0,
        note=f"modelled from the unsharded point: state / {ranks} + activations", peak_phase="")


def load_all(run_dir: Path) -> list[FrontierResult]:
    """Every device's result of a run, CPU first; [] when the run has none."""
    folder = Path(run_dir) / FRONTIER_DIR
    if not folder.is_dir():
        return []
    return [FrontierResult.load(p) for p in sorted(folder.glob("*.json"), key=lambda p: p.stem != "cpu")]
