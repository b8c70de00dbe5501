"""Device and precision: resolve `auto`, refuse what the hardware cannot do, autocast settings."""

from __future__ import annotations

import contextlib
import functools
from typing import Any

from trainserve.core.errors import UserError
from trainserve.core.profile import host_info

DTYPES = {"fp32": None, "bf16": "bfloat16", "fp16": "float16"}


def resolve_device(requested: str) -> str:
    """`auto` -> cuda when a GPU is visible, else cpu; `cuda` without a GPU is the user's mistake."""
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda was requested but no CUDA GPU is visible to PyTorch; "
                        "use --device cpu (or auto), or install the CUDA build of torch")
    return requested


def check_precision(device: str, precision: str) -> None:
    """Raise a UserError when `device` cannot train in `precision`."""
    if precision == "fp32":
        return
    if not precision_supported(device, precision):
        other = "bf16" if precision == "fp16" else "fp16"
        raise UserError(f"--precision {precision} is not supported on this {device} device; "
                        f"use --precision fp32 (or try {other})")


@functools.cache
def precision_supported(device: str, precision: str) -> bool:
    """Whether autocast in `precision` runs a matmul and a conv on `device` (tried, not assumed)."""
    import torch

    if precision == "fp32":
        return True
    dtype = getattr(torch, DTYPES[precision])
    if device == "cuda":
        if precision == "bf16" and not torch.cuda.is_bf16_supported(including_emulation=False):
            return False
    try:
        with torch.autocast(device_type=device, dtype=dtype):
            a = torch.randn(4, 4, device=device)
            torch.nn.functional.conv2d(torch.randn(1, 2, 4, 4, device=device), torch.randn(2, 2, 3, 3, device=device))
            return (a @ a).dtype == dtype
    except (RuntimeError, TypeError):
        return False


def autocast(device: str, precision: str) -> contextlib.AbstractContextManager[Any]:
    """Autocast context for bf16/fp16; a no-op for fp32."""
    import torch

    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device, dtype=getattr(torch, DTYPES[precision]))


def grad_scaler(device: str, precision: str) -> Any:
    """A GradScaler for fp16 (its gradients underflow without one); disabled otherwise."""
    import torch

    return torch.amp.GradScaler(device, enabled=precision == "fp16")


def device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return torch.cuda.get_device_name(0)

    return host_info().get("cpu_model") or "cpu"
