"""Which math ran, from PyTorch's TF32 switches (set per test, and the GPU's compute capability
monkeypatched: no GPU needed), and the MFU it gives."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from trainserve.train import mathmode
from trainserve.train.mathmode import detect, op_kinds, read_flags
from trainserve.train.record import add_mfu
from trainserve.core.profile import ProfileRecord

H100 = (9, 0)
TURING = (7, 5)


@pytest.fixture(autouse=True)
def switches():
    """Sets PyTorch's TF32 switches for one test (through their public setters) and puts them back."""
    before = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
              torch.get_float32_matmul_precision())

    def set_(conv: bool, matmul: bool) -> None:
        torch.backends.cudnn.allow_tf32 = conv
        torch.backends.cuda.matmul.allow_tf32 = matmul
    yield set_
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before[:2]
    torch.set_float32_matmul_precision(before[2])


@pytest.fixture
def cuda_h100(monkeypatch):
    """mathmode.current as on an H100: compute capability 9.0, without touching a GPU."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: H100)


def test_fp32_with_tf32_allowed_on_cuda_is_tf32(switches, cuda_h100):
    switches(conv=True, matmul=False)  # PyTorch's defaults
    math = mathmode.current("cuda", "fp32", nn.Conv2d(3, 8, 3))
    assert (math.mode, math.conv, math.matmul) == ("tf32", "tf32", None)
    assert math.to_dict()["cudnn_allow_tf32"] is True


def test_allow_tf32_false_is_fp32(switches, cuda_h100):
    switches(conv=False, matmul=False)
    math = mathmode.current("cuda", "fp32", nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.LazyLinear(4)))
    assert (math.mode, math.conv, math.matmul, math.note) == ("fp32", "fp32", "fp32", None)


def test_matmul_precision_high_is_tf32_for_linear_layers(switches, cuda_h100):
    switches(conv=False, matmul=False)
    torch.set_float32_matmul_precision("high")
    math = mathmode.current("cuda", "fp32", nn.Linear(4, 4))
    assert (math.mode, math.conv, math.matmul) == ("tf32", None, "tf32")
    assert math.flags["float32_matmul_precision"] == "high"


def test_convs_in_tf32_and_matmuls_in_fp32_take_the_higher_peak_and_say_so():
    flags = {"cudnn_allow_tf32": True, "matmul_allow_tf32": False}
    math = detect("cuda", "fp32", flags, H100, has_conv=True, has_matmul=True)
    assert (math.mode, math.conv, math.matmul) == ("tf32", "tf32", "fp32")
    assert "tf32 peak" in math.note and "lower bound" in math.note


def test_bf16_autocast_is_bf16_on_gpu_and_cpu():
    flags = {"cudnn_allow_tf32": True, "matmul_allow_tf32": True}
    assert detect("cuda", "bf16", flags, H100).mode == "bf16"
    assert detect("cpu", "bf16", flags, None).mode == "bf16"
    assert detect("cuda", "fp16", flags, H100, has_conv=False).to_dict()["conv"] is None


def test_cpu_fp32_stays_fp32_whatever_the_switches(switches):
    switches(conv=True, matmul=True)
    assert mathmode.current("cpu", "fp32", nn.Linear(4, 4)).mode == "fp32"


def test_gpus_before_ampere_have_no_tf32():
    flags = {"cudnn_allow_tf32": True, "matmul_allow_tf32": True}
    assert detect("cuda", "fp32", flags, TURING).mode == "fp32"


def test_read_flags_follows_the_switches(switches):
    switches(conv=False, matmul=True)
    f = read_flags()
    assert f["cudnn_allow_tf32"] is False and f["matmul_allow_tf32"] is True


def test_read_flags_follows_the_newer_fp32_precision_api(switches):
    if not hasattr(torch.backends.cudnn, "conv") or not hasattr(torch.backends.cudnn.conv, "fp32_precision"):
        pytest.skip("this torch has only the allow_tf32 switches")
    switches(conv=True, matmul=False)
    torch.backends.cudnn.conv.fp32_precision = "ieee"  # mixed with the legacy switch: its getter now raises
    assert read_flags()["cudnn_allow_tf32"] is False


def test_op_kinds_reads_the_layers():
    assert op_kinds(nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU())) == (True, False)
    assert op_kinds(nn.MultiheadAttention(8, 2)) == (False, True)


def _h100_record(math_mode: str, achieved: float) -> ProfileRecord:
    r = ProfileRecord(phase="train", model="cnn", backend="torch", device="cuda",
                      device_name="NVIDIA H100 80GB HBM3", precision="fp32")
    r.settings["math_mode"] = math_mode
    r.speed.achieved_tflops = achieved
    return r


def test_mfu_uses_the_peak_of_the_math_that_ran():
    r = _h100_record("tf32", 80.9)  # the H100 run that printed 120.8% against the fp32 peak
    add_mfu(r, "fp32")
    assert r.speed.peak_tflops == 494.5
    assert r.speed.mfu == pytest.approx(80.9 / 494.5, abs=1e-4)
    assert r.validity.errors == []


def test_mfu_above_100_percent_is_withheld_as_an_error():
    r = _h100_record("fp32", 80.9)
    add_mfu(r, "fp32")
    assert r.speed.mfu is None
    assert len(r.validity.errors) == 1 and "MFU above 100%" in r.validity.errors[0]
    assert "120" not in r.validity.errors[0]
    assert r.extra["out_of_bounds"]["mfu"]["value"] == pytest.approx(80.9 / 67.0, abs=1e-4)


def test_a_cpu_training_record_says_fp32_math(tmp_path):
    from trainserve.train.config import TrainConfig
    from trainserve.train.loop import fit

    cfg = TrainConfig(device="cpu", model="mlp", samples=64, batch_size=32, steps=3, warmup_steps=1)
    rec = fit(cfg, tmp_path / "r").record
    assert rec.settings["math_mode"] == "fp32"
    math = rec.settings["math"]
    assert (math["mode"], math["conv"], math["matmul"], math["note"]) == ("fp32", None, "fp32", None)
    assert {"cudnn_allow_tf32", "matmul_allow_tf32", "float32_matmul_precision"} <= set(math)
    assert rec.validity.errors == [] and rec.speed.mfu is None  # no CPU peak: MFU stays null
