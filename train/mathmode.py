"""Which math a training run's convolutions and matmuls actually ran in, so MFU uses the right peak.

`--precision fp32` is not fp32 math on an Ampere-or-later GPU: PyTorch runs fp32 convolutions on
TF32 tensor cores by default (cuDNN's TF32 switch is on), and fp32 matmuls too once the float32
matmul precision is "high" or "medium". Under autocast both run in its dtype (bf16 or fp16), on
the CPU as on the GPU. TF32 exists only on CUDA devices of compute capability 8.0 and later.

When a model has both convolutions and matmuls and they ran in different math (the PyTorch
default: convs in TF32, matmuls in fp32), MFU is taken against the higher of the two peaks, so
it is a lower bound and never overstated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# From the smallest dense peak to the largest: true of every GPU in train.flops' table
# (where a GPU lacks TF32 its tf32 entry equals its fp32 one).
MODES = ("fp32", "tf32", "fp16", "bf16")
TF32_MIN_CAPABILITY = (8, 0)  # Ampere


@dataclass(frozen=True)
class MathMode:
    """The math MFU's peak is taken for, what each kind of op ran in, and the switches read."""

    mode: str  # "fp32" | "tf32" | "bf16" | "fp16": the peak MFU uses
    conv: str | None  # math of the convolutions; None when the model has none
    matmul: str | None  # math of the matmuls (linear layers, attention); None when the model has none
    flags: dict[str, Any] = field(default_factory=dict)  # PyTorch's switches as read, for the record
    note: str | None = None  # set when conv and matmul differ: which peak was chosen and why

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "conv": self.conv, "matmul": self.matmul, **self.flags, "note": self.note}


def detect(device: str, precision: str, flags: dict[str, Any], capability: tuple[int, int] | None,
           has_conv: bool = True, has_matmul: bool = True) -> MathMode:
    """The math of one run from its device, `--precision`, TF32 switches and GPU compute capability.

    `flags` is `read_flags()`'s dict; `capability` is the CUDA device's (major, minor), None on a CPU.
    A model with neither convolutions nor matmuls (unknown to us) is treated as having both.
    """
    if precision in ("bf16", "fp16"):  # autocast runs convs and matmuls in its dtype
        mode = precision
        return MathMode(mode, mode if has_conv or not has_matmul else None,
                        mode if has_matmul or not has_conv else None, flags)
    if precision != "fp32":
        raise ValueError(f"precision {precision!r} is not one of fp32, bf16, fp16")
    tf32_ok = device == "cuda" and capability is not None and tuple(capability) >= TF32_MIN_CAPABILITY
    if not (has_conv or has_matmul):
        has_conv = has_matmul = True
    conv = ("tf32" if tf32_ok and flags.get("cudnn_allow_tf32") else "fp32") if has_conv else None
    matmul = ("tf32" if tf32_ok and flags.get("matmul_allow_tf32") else "fp32") if has_matmul else None
    used = [m for m in (conv, matmul) if m is not None]
    mode = max(used, key=MODES.index)
    note = None
    if conv is not None and matmul is not None and conv != matmul:
        note = (f"convolutions ran in {conv} and matmuls in {matmul}; MFU is against the {mode} peak, "
                "the higher one, so it is a lower bound")
    return MathMode(mode, conv, matmul, flags, note)


def read_flags() -> dict[str, Any]:
    """PyTorch's TF32 switches as they stand now (legacy allow_tf32 and the newer fp32_precision API)."""
    import torch

    return {
        "cudnn_allow_tf32": _conv_tf32(torch),
        "matmul_allow_tf32": _matmul_tf32(torch),
        "float32_matmul_precision": _safe(torch.get_float32_matmul_precision),
    }


def _conv_tf32(torch: Any) -> bool:
    new = _safe(lambda: torch.backends.cudnn.conv.fp32_precision)  # torch >= 2.9; "none" = not set this way
    if new in ("tf32", "ieee"):
        return new == "tf32"
    try:
        return bool(torch.backends.cudnn.allow_tf32)
    except RuntimeError:  # legacy and new switches mixed: assume TF32, the higher peak, never overstating MFU
        return True


def _matmul_tf32(torch: Any) -> bool:
    new = _safe(lambda: torch.backends.cuda.matmul.fp32_precision)
    if new in ("tf32", "ieee"):
        return new == "tf32"
    try:
        legacy = bool(torch.backends.cuda.matmul.allow_tf32)
    except RuntimeError:
        return True
    # "high" and "medium" both let cuBLAS use TF32 for fp32 matmuls ("medium" has no bf16 path on CUDA)
    return legacy or _safe(torch.get_float32_matmul_precision) in ("high", "medium")


def _safe(get: Any) -> Any:
    try:
        return get()
    except (AttributeError, RuntimeError):
        return None


def op_kinds(model: Any) -> tuple[bool, bool]:
    """(has convolutions, has matmuls) of a torch module, from its layer types."""
    from torch import nn

    mods = list(model.modules())
    has_conv = any(isinstance(m, nn.modules.conv._ConvNd) for m in mods)
    has_matmul = any(isinstance(m, (nn.Linear, nn.Bilinear, nn.MultiheadAttention)) for m in mods)
    return has_conv, has_matmul


def current(device: str, precision: str, model: Any | None = None) -> MathMode:
    """The math of a run in this process now: switches read from torch, capability from the GPU."""
    import torch

    capability = torch.cuda.get_device_capability() if device == "cuda" else None
    has_conv, has_matmul = op_kinds(model) if model is not None else (True, True)
    return detect(device, precision, read_flags(), capability, has_conv, has_matmul)
