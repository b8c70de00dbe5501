"""FLOPs per sample (counted by torch, not estimated), device peaks, and model FLOP utilization.

MFU = achieved FLOP/s / the device's dense peak for the precision. Peaks are the vendors'
datasheet figures for dense math (the datasheets' larger "with sparsity" numbers are 2x these).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import nn

# Dense peak TFLOP/s by precision, from NVIDIA's product datasheets (tensor cores for tf32/bf16/fp16,
# FP32 accumulate where the datasheet distinguishes; "fp32" is plain CUDA-core FP32).
#   A100 (SXM and PCIe): A100 datasheet — FP32 19.5, TF32 156, BF16/FP16 312.
#   H100 SXM: H100 datasheet — FP32 67, TF32 989 / BF16 1,979 with sparsity -> 494.5 / 989.5 dense.
#   H100 PCIe: FP32 51, TF32 756 / BF16 1,513 with sparsity -> 378 / 756.5.
#   H100 NVL / H200 NVL: FP32 60, TF32 835 / BF16 1,671 with sparsity -> 417.5 / 835.5.
#   H200 SXM: H200 datasheet — same tensor figures as H100 SXM (FP32 67, TF32 494.5, BF16 989.5 dense).
#   L4: FP32 30.3, TF32 120 / BF16 242 with sparsity -> 60 / 121.
#   L40S: FP32 91.6, TF32 183, BF16/FP16 362.05 (dense figures from the L40S datasheet).
#   L40: FP32 90.5, TF32 90.5, BF16/FP16 181.05.
#   A10: FP32 31.2, TF32 62.5, BF16/FP16 125.
#   T4 (Turing): FP32 8.1, FP16 65; no TF32 (matmuls run as FP32) and no BF16 tensor cores.
#   V100 SXM2: FP32 15.7, FP16 125; V100 PCIe: FP32 14, FP16 112; no TF32 / BF16.
#   RTX 4090: Ada whitepaper — FP32 82.6, TF32 82.6, BF16/FP16 (FP32 accumulate) 165.2.
#   RTX 3090: Ampere GA102 whitepaper — FP32 35.6, TF32 35.6, BF16/FP16 (FP32 accumulate) 71.
_PEAKS: dict[str, dict[str, float | None]] = {
    "A100": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
    "H100 SXM": {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5},
    "H100 PCIe": {"fp32": 51.0, "tf32": 378.0, "bf16": 756.5, "fp16": 756.5},
    "H100 NVL": {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5},
    "H200 SXM": {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5},
    "H200 NVL": {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5},
    "L4": {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0},
    "L40S": {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05},
    "L40": {"fp32": 90.5, "tf32": 90.5, "bf16": 181.05, "fp16": 181.05},
    "A10": {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0},
    "T4": {"fp32": 8.1, "tf32": 8.1, "bf16": None, "fp16": 65.0},
    "V100 SXM2": {"fp32": 15.7, "tf32": 15.7, "bf16": None, "fp16": 125.0},
    "V100 PCIe": {"fp32": 14.0, "tf32": 14.0, "bf16": None, "fp16": 112.0},
    "RTX 4090": {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2},
    "RTX 3090": {"fp32": 35.6, "tf32": 35.6, "bf16": 71.0, "fp16": 71.0},
}

# Device-name patterns (lower-cased names as torch.cuda.get_device_name / NVML report them),
# most specific first: "NVIDIA H100 80GB HBM3" is the SXM part, "NVIDIA H200" the SXM part.
_NAME_RULES: list[tuple[str, str]] = [
    (r"h100.*nvl", "H100 NVL"),
    (r"h100.*pcie", "H100 PCIe"),
    (r"h100", "H100 SXM"),
    (r"h200.*nvl", "H200 NVL"),
    (r"h200", "H200 SXM"),
    (r"a100", "A100"),
    (r"l40s", "L40S"),
    (r"\bl40\b", "L40"),
    (r"\bl4\b", "L4"),
    (r"\ba10\b", "A10"),  # not the A10G, whose figures differ and are not in a public datasheet
    (r"\bt4\b", "T4"),
    (r"v100.*pcie", "V100 PCIe"),
    (r"v100", "V100 SXM2"),
    (r"rtx 4090", "RTX 4090"),
    (r"rtx 3090", "RTX 3090"),
]

_PRECISION_ALIASES = {
    "fp32": "fp32", "float32": "fp32", "32": "fp32",
    "tf32": "tf32",
    "bf16": "bf16", "bfloat16": "bf16", "bf16-mixed": "bf16", "amp-bf16": "bf16",
    "fp16": "fp16", "float16": "fp16", "16": "fp16", "fp16-mixed": "fp16", "amp-fp16": "fp16",
}


@dataclass(frozen=True)
class PeakLookup:
    tflops: float | None  # dense peak, TFLOP/s; None when unknown
    device: str | None  # the table entry matched, e.g. "H200 SXM"
    note: str | None  # why tflops is None, for the record's warnings


def peak_lookup(device_name: str, precision: str) -> PeakLookup:
    """The dense peak for a device name and precision, or None with a note saying why."""
    prec = _PRECISION_ALIASES.get(precision.strip().lower())
    if prec is None:
        return PeakLookup(None, None, f"no peak for precision {precision!r}; MFU left null")
    name = device_name.strip().lower()
    entry = next((key for pattern, key in _NAME_RULES if re.search(pattern, name)), None)
    if entry is None:
        return PeakLookup(None, None, f"no known peak for device {device_name!r}; MFU left null")
    tflops = _PEAKS[entry][prec]
    if tflops is None:
        return PeakLookup(None, entry, f"{entry} has no {prec} tensor-core peak; MFU left null")
    return PeakLookup(tflops, entry, None)


def peak_tflops(device_name: str, precision: str) -> float | None:
    """Dense peak TFLOP/s of a known device at a precision ("fp32", "tf32", "bf16", "fp16")."""
    return peak_lookup(device_name, precision).tflops


def mfu(achieved_tflops: float | None, peak: float | None) -> float | None:
    """Model FLOP utilization, 0..1 (achieved over peak); None when either is unknown."""
    if achieved_tflops is None or peak is None or peak <= 0:
        return None
    return achieved_tflops / peak


def achieved_tflops(flops_per_sample: float, samples_per_s: float) -> float:
    return flops_per_sample * samples_per_s / 1e12


def flops_per_sample(model: nn.Module, example_inputs: torch.Tensor | tuple[torch.Tensor, ...],
                     train: bool) -> float:
    """FLOPs of one sample through `model`, counted by torch.utils.flop_counter on a real pass.

    `example_inputs` is one batch (batch first). Training counts forward + backward as autograd
    runs them: about 3x forward, less for the first layer, whose input needs no gradient.
    Matmuls, convolutions and attention are counted; elementwise ops and embeddings are not.
    The model's gradients are cleared afterwards and its train/eval mode is restored.
    """
    from torch.utils.flop_counter import FlopCounterMode

    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    if not inputs or inputs[0].dim() == 0:
        raise ValueError("example_inputs must be one batch of tensors with the batch dimension first")
    batch = inputs[0].shape[0]
    was_training = model.training
    counter = FlopCounterMode(display=False)
    try:
        model.train(train)
        if train:
            with counter:
                out = model(*inputs)
                out = out[0] if isinstance(out, (tuple, list)) else out
                out.float().sum().backward()
        else:
            with torch.no_grad(), counter:
                model(*inputs)
    finally:
        model.train(was_training)
        if train:
            model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / batch
