"""Options several commands share, and the fixed choices of the CLI's options as enums: typer lists
them in --help and refuses other values.

Each enum is built from the tuple the library itself checks against, so the CLI and the library
cannot disagree about what is allowed; the commands pass `.value` on, a plain string.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from trainserve.core.runs import RUNS_ENV
from trainserve.loadtest.options import PROTOCOLS, VALIDATIONS
from trainserve.pipeline import DEVICES as RUN_DEVICES
from trainserve.serve.model import DEVICES as SERVE_DEVICES
from trainserve.serve.repository import CPU_VARIANTS, GPU_VARIANTS
from trainserve.train.config import DEVICES as TRAIN_DEVICES
from trainserve.train.config import LR_SCALES, PLACEMENTS, PRECISIONS
from trainserve.train.models import PRESETS

# None: trainserve.core.runs.default_runs_dir(), the one default every command shares
RunsDirOpt = Annotated[Path | None, typer.Option("--runs-dir", help=f"Folder of runs (default: ${RUNS_ENV}, else ./runs).")]


def _choices(name: str, values: tuple[str, ...] | list[str]) -> type[StrEnum]:
    return StrEnum(name, {v: v for v in values})  # type: ignore[return-value]


Preset = _choices("Preset", list(dict.fromkeys(p for presets in PRESETS.values() for p in presets)))
Precision = _choices("Precision", PRECISIONS)
LrScale = _choices("LrScale", LR_SCALES)
Placement = _choices("Placement", PLACEMENTS)
# train: one device, or both to compare them
TrainDevice = _choices("TrainDevice", [*TRAIN_DEVICES, "cpu,cuda"])
# compare --sweep: auto (the CPU, plus the GPU when there is one) or the devices named
SweepDevice = _choices("SweepDevice", ["auto", "cpu", "cuda", "cpu,cuda"])
RunDevice = _choices("RunDevice", RUN_DEVICES)
ServeDevice = _choices("ServeDevice", SERVE_DEVICES)
CpuVariant = _choices("CpuVariant", CPU_VARIANTS)
GpuVariant = _choices("GpuVariant", GPU_VARIANTS)
Protocol = _choices("Protocol", PROTOCOLS)
Validation = _choices("Validation", VALIDATIONS)
