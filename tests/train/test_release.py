"""GPU release accounting (train/release.py) without a GPU: torch.cuda and NVML are faked."""

from __future__ import annotations

import torch

from trainserve.train import release
from trainserve.core.profile import ProfileRecord


def _fake_cuda(monkeypatch, reserved: int) -> list[str]:
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: 0)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: reserved)
    monkeypatch.setattr(torch._C, "_cuda_clearCublasWorkspaces", lambda: calls.append("cublas"), raising=False)
    return calls


def test_released_when_torch_holds_nothing_and_only_the_context_remains(monkeypatch):
    calls = _fake_cuda(monkeypatch, reserved=0)
    monkeypatch.setattr(release, "gpu_memory_used_bytes", lambda i: 1_000 + 500 * 2**20)  # + the CUDA context
    rec = ProfileRecord(phase="train", model="cnn", backend="torch", device="cuda")
    info = release.finish(rec, before_bytes=1_000)
    assert calls[-1] == "empty_cache" and "cublas" in calls
    assert rec.memory.gpu_released is True and rec.memory.gpu_held_bytes == 500 * 2**20
    assert info["process_overhead_bytes"] == 500 * 2**20 and rec.extra["gpu_release"] is info


def test_not_released_when_the_allocator_still_reserves(monkeypatch):
    _fake_cuda(monkeypatch, reserved=64 * 2**20)
    monkeypatch.setattr(release, "gpu_memory_used_bytes", lambda i: 600 * 2**20)
    rec = ProfileRecord(phase="train", model="cnn", backend="torch", device="cuda")
    release.finish(rec, before_bytes=0)
    assert rec.memory.gpu_released is False and rec.memory.gpu_held_bytes == 600 * 2**20


def test_without_nvml_nothing_is_claimed(monkeypatch):
    _fake_cuda(monkeypatch, reserved=0)
    monkeypatch.setattr(release, "gpu_memory_used_bytes", lambda i: None)
    rec = ProfileRecord(phase="train", model="cnn", backend="torch", device="cuda")
    release.finish(rec, before_bytes=None)
    assert rec.memory.gpu_released is None and rec.memory.gpu_held_bytes is None
    assert release.before("cpu") is None
