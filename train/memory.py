"""Training memory: an analytic estimate from the parameter count, and the measured breakdown.

The measured breakdown comes from torch.cuda.memory_allocated read at fixed moments of the first
training steps (after moving the model, after the first backward, after the first optimizer step)
and the steady-state peak; activations and temporaries are what the peak holds beyond the rest.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trainserve.core.profile import Memory

# Bytes per element of the optimizer state per parameter (fp32 moments).
_OPTIMIZER_STATE = {
    "adamw": 8,  # exp_avg + exp_avg_sq, fp32
    "adam": 8,
    "sgd": 4,  # momentum buffer, fp32 (plain SGD without momentum keeps none: use "none")
    "none": 0,
}
_PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


def analytic_estimate(n_params: int, precision: str, optimizer: str = "adamw",
                      autocast: bool = True) -> dict[str, Any]:
    """Bytes for weights, gradients, optimizer state and master weights, from the parameter count.

    With autocast (torch.autocast, what the training loop uses) parameters and gradients stay
    fp32 at every precision; the low-precision weight copies are per-op temporaries. Without it
    (a model cast to bf16/fp16) weights and gradients take 2 bytes and the optimizer keeps a
    4-byte fp32 master copy (16 bytes/param with Adam, as in the ZeRO paper).
    Activations are not estimated: they depend on the batch and the architecture.
    """
    if n_params < 0:
        raise ValueError(f"n_params={n_params} must be >= 0")
    if precision not in _PRECISIONS:
        raise ValueError(f"precision={precision!r} is not one of {', '.join(_PRECISIONS)}")
    opt = optimizer.lower()
    if opt not in _OPTIMIZER_STATE:
        raise ValueError(f"optimizer={optimizer!r} is not one of {', '.join(_OPTIMIZER_STATE)}")
    half = precision in ("bf16", "fp16") and not autocast
    per = {
        "weights": 2 if half else 4,
        "gradients": 2 if half else 4,
        "optimizer_state": _OPTIMIZER_STATE[opt],
        "master_weights": 4 if half else 0,
    }
    total_per = sum(per.values())
    if half:
        note = f"{precision} weights and gradients with an fp32 master copy; {opt} state in fp32"
    elif precision in ("bf16", "fp16"):
        note = f"autocast {precision}: fp32 weights (they are the master copy) and gradients; {opt} state in fp32"
    else:
        note = f"{precision} weights and gradients; {opt} state in fp32"
    return {
        "n_params": n_params,
        "precision": precision,
        "optimizer": opt,
        "bytes_per_param": {**per, "total": total_per},
        "weights_bytes": per["weights"] * n_params,
        "gradients_bytes": per["gradients"] * n_params,
        "optimizer_bytes": per["optimizer_state"] * n_params,
        "master_weights_bytes": per["master_weights"] * n_params,
        "total_bytes": total_per * n_params,
        "note": note + "; activations not included",
    }


def breakdown_from_measurements(weights: int, after_backward: int, after_step: int, peak: int,
                                reserved: int | None = None) -> dict[str, Any]:
    """A consistent breakdown from allocated bytes at four moments (all relative to the same baseline).

    weights: after moving the model to the device; after_backward: after the first backward
    (weights + gradients); after_step: after the first optimizer step, before zero_grad (weights +
    gradients + optimizer state); peak: max allocated during steady-state steps; reserved: the
    caching allocator's peak reservation. Parts never go negative; `consistent` says whether the
    parts sum to the peak within 5% (they can only miss it when a part had to be clamped).
    """
    for name, value in (("weights", weights), ("after_backward", after_backward),
                        ("after_step", after_step), ("peak", peak)):
        if value < 0:
            raise ValueError(f"{name}={value} bytes must be >= 0")
    notes: list[str] = []
    gradients = after_backward - weights
    if gradients < 0:
        notes.append(f"allocated fell by {-gradients} bytes from weights to after backward; gradients set to 0")
        gradients = 0
    optimizer = after_step - after_backward
    if optimizer < 0:
        notes.append(f"allocated fell by {-optimizer} bytes over the optimizer step; optimizer state set to 0")
        optimizer = 0
    activations = peak - weights - gradients - optimizer
    if activations < 0:
        notes.append(f"peak is {-activations} bytes below weights+gradients+optimizer; activations set to 0")
        activations = 0
    total = weights + gradients + optimizer + activations
    return {
        "weights_bytes": int(weights),
        "gradients_bytes": int(gradients),
        "optimizer_bytes": int(optimizer),
        "activations_bytes": int(activations),  # activations and temporaries
        "peak_bytes": int(peak),
        "cuda_allocated_peak_bytes": int(peak),
        "cuda_reserved_peak_bytes": None if reserved is None else int(reserved),
        "sum_bytes": int(total),
        "consistent": (total == peak) if peak == 0 else abs(total - peak) <= 0.05 * peak,
        "notes": notes,
    }


def fill_memory(memory: Memory, breakdown: dict[str, Any]) -> None:
    """Copy a breakdown's fields that the profile record's Memory has (the rest stays in extra)."""
    names = {f.name for f in dataclasses.fields(Memory)}
    for key, value in breakdown.items():
        if key in names:
            setattr(memory, key, value)
