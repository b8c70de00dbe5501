"""The training checkpoint: weights, optimizer, scaler, progress, model card and RNG states.

One `torch.save` of plain containers and tensors, so `torch.load(weights_only=True)` reads it
(no pickled classes). Written to a temporary name and renamed: a crash never leaves half a file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

from trainserve.core.errors import UserError
from trainserve.core.fsutil import FILE_MODE

REQUIRED = ("model", "optimizer", "scaler", "epoch", "step", "card", "rng", "train_config", "history")


def save(path: Path, state: dict[str, Any]) -> None:
    """Atomically write `state` (keys REQUIRED) to `path`."""
    import torch

    missing = [k for k in REQUIRED if k not in state]
    if missing:
        raise ValueError(f"checkpoint state lacks {missing}")
    path.parent.mkdir(parents=True, exist_ok=True)
    # a write killed midway (kill -9, power loss) leaves its temporary file; one run has one writer, so any
    # such file is stale: remove it rather than let them pile up beside every checkpoint
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, FILE_MODE)  # the umask's mode, not mkstemp's 0600
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def load(path: Path) -> dict[str, Any]:
    """Read a checkpoint with weights_only=True; any unreadable or incomplete file is a UserError."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise UserError(f"no checkpoint at {path}; train without --resume first")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises a zoo of types for bad files (UnpicklingError, RuntimeError, EOFError)
        raise UserError(f"checkpoint {path} is corrupt or not a trainserve checkpoint ({type(e).__name__}); "
                        "delete it and train without --resume") from None
    if not isinstance(state, dict) or any(k not in state for k in REQUIRED):
        raise UserError(f"checkpoint {path} lacks trainserve fields; delete it and train without --resume")
    return state


def rng_state() -> dict[str, Any]:
    """Torch RNG states (CPU and every CUDA device): dropout and any random op continue exactly."""
    import torch

    out: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def set_rng_state(state: dict[str, Any]) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
