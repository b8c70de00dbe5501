"""FLOP counting on layers whose count is known exactly, and the peak table."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trainserve.train.flops import achieved_tflops, flops_per_sample, mfu, peak_lookup, peak_tflops

B, IN, OUT = 8, 32, 16


def test_linear_forward_is_2_in_out_per_sample():
    layer = nn.Linear(IN, OUT)
    assert flops_per_sample(layer, torch.randn(B, IN), train=False) == 2 * IN * OUT


def test_linear_training_is_3x_forward_when_the_input_needs_a_gradient():
    layer = nn.Linear(IN, OUT)
    x = torch.randn(B, IN, requires_grad=True)
    # forward 2*in*out, grad of the input 2*in*out, grad of the weight 2*in*out
    assert flops_per_sample(layer, x, train=True) == 3 * 2 * IN * OUT
    assert layer.weight.grad is None  # cleared afterwards


def test_first_layer_training_skips_the_input_gradient():
    layer = nn.Linear(IN, OUT)
    assert flops_per_sample(layer, torch.randn(B, IN), train=True) == 2 * 2 * IN * OUT


def test_two_layer_mlp_and_mode_restored():
    model = nn.Sequential(nn.Linear(IN, 64), nn.ReLU(), nn.Linear(64, OUT))
    model.eval()
    fwd = 2 * (IN * 64 + 64 * OUT)
    assert flops_per_sample(model, torch.randn(B, IN), train=False) == fwd
    # backward: both weight grads, plus the input grad of the second layer only
    assert flops_per_sample(model, torch.randn(B, IN), train=True) == fwd + 2 * (IN * 64 + 64 * OUT) + 2 * 64 * OUT
    assert model.training is False


def test_conv_forward():
    conv = nn.Conv2d(3, 8, kernel_size=3, padding=1, bias=False)
    # per output element: 2 * Cin * k * k; output is 8 x 16 x 16
    assert flops_per_sample(conv, torch.randn(2, 3, 16, 16), train=False) == 2 * 3 * 9 * 8 * 16 * 16


@pytest.mark.parametrize(("name", "precision", "peak"), [
    ("NVIDIA H200", "bf16", 989.5),
    ("NVIDIA H100 80GB HBM3", "bf16", 989.5),
    ("NVIDIA H100 PCIe", "tf32", 378.0),
    ("NVIDIA A100-SXM4-80GB", "fp32", 19.5),
    ("NVIDIA A100 80GB PCIe", "bfloat16", 312.0),
    ("NVIDIA L4", "fp16", 121.0),
    ("NVIDIA L40S", "bf16", 362.05),
    ("NVIDIA A10", "bf16", 125.0),
    ("Tesla T4", "fp16", 65.0),
    ("Tesla V100-SXM2-16GB", "fp16", 125.0),
    ("NVIDIA GeForce RTX 4090", "bf16", 165.2),
])
def test_known_peaks(name, precision, peak):
    assert peak_tflops(name, precision) == peak


def test_unknown_device_or_precision_gives_none_and_a_note():
    lookup = peak_lookup("Some Future Accelerator", "bf16")
    assert lookup.tflops is None and "Some Future Accelerator" in lookup.note
    assert peak_lookup("NVIDIA A10G", "bf16").tflops is None  # not the A10
    assert peak_lookup("Tesla T4", "bf16").note.startswith("T4 has no bf16")
    assert peak_lookup("NVIDIA H200", "int3").tflops is None


def test_mfu():
    assert mfu(achieved_tflops(1e9, 1e5), 989.5) == pytest.approx(100 / 989.5)
    assert mfu(100.0, None) is None and mfu(None, 10.0) is None
