"""Max-batch search against a simulated out-of-memory, and the probes on a tiny CPU model."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from trainserve.train import maxbatch
from trainserve.train.maxbatch import find_max_batch, infer_probe, max_batches, train_step_probe
from trainserve.core.errors import UserError


class SimulatedDevice:
    """A try_batch that runs out of memory above `capacity` and counts its tries and releases."""

    def __init__(self, capacity: int, error: type[BaseException] = torch.OutOfMemoryError) -> None:
        self.capacity = capacity
        self.error = error
        self.tries: list[int] = []

    def __call__(self, n: int) -> None:
        self.tries.append(n)
        if n > self.capacity:
            if self.error is RuntimeError:
                raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
            raise self.error("simulated")


@pytest.mark.parametrize("capacity", [1, 2, 3, 100, 511, 512, 513, 1000, 77_777, 2**20 - 1])
def test_exact_boundary_in_logarithmic_tries(capacity, monkeypatch):
    releases = []
    monkeypatch.setattr(maxbatch, "release_memory", lambda: releases.append(1))
    dev = SimulatedDevice(capacity)
    assert find_max_batch(dev, resolution=0) == capacity
    assert len(dev.tries) <= 2 * math.ceil(math.log2(capacity + 1)) + 2
    assert len(releases) == len(dev.tries)  # memory released after every try


@pytest.mark.parametrize("capacity", [100, 77_777, 2**20 - 1])
def test_default_resolution_stops_within_a_fraction_of_a_percent_in_fewer_tries(capacity, monkeypatch):
    monkeypatch.setattr(maxbatch, "release_memory", lambda: None)
    exact, coarse = SimulatedDevice(capacity), SimulatedDevice(capacity)
    assert find_max_batch(exact, resolution=0) == capacity
    found = find_max_batch(coarse)
    assert capacity * (1 - 1 / 256) - 1 <= found <= capacity
    assert len(coarse.tries) <= len(exact.tries) - (6 if capacity > 10_000 else 0)


def test_runtime_error_saying_out_of_memory_counts():
    assert find_max_batch(SimulatedDevice(300, RuntimeError), start=4) == 300


def test_everything_fits_up_to_the_limit():
    dev = SimulatedDevice(10**9)
    assert find_max_batch(dev, start=3, limit=100) == 100
    assert dev.tries == [3, 6, 12, 24, 48, 96, 100]


def test_other_errors_propagate():
    def broken(n: int) -> None:
        raise ValueError("shape mismatch")

    with pytest.raises(ValueError, match="shape mismatch"):
        find_max_batch(broken)
    with pytest.raises(RuntimeError, match="expected"):
        find_max_batch(lambda n: (_ for _ in ()).throw(RuntimeError("expected scalar type")))


def test_nothing_fits_is_a_user_error():
    with pytest.raises(UserError, match="batch size 8"):
        find_max_batch(SimulatedDevice(4), start=8)


def _tiny() -> tuple[nn.Module, maxbatch.MakeBatch]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))

    def make_batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(n, 6), torch.randint(0, 3, (n,))

    return model, make_batch


def test_probes_run_and_leave_the_model_unchanged():
    model, make_batch = _tiny()
    before = [p.detach().clone() for p in model.parameters()]
    model.eval()
    train_step_probe(model, make_batch, "fp32", "cpu")(16)
    infer_probe(model, make_batch, "bf16", "cpu")(16)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters())
    assert model.training is False


def test_max_batches_on_cpu_with_a_limit():
    model, make_batch = _tiny()
    result = max_batches(model, make_batch, "fp32", "cpu", limit=8, allow_cpu=True)
    assert (result["train"], result["infer"], result["ratio"]) == (8, 8, 1.0)
    with pytest.raises(UserError, match="CUDA"):
        max_batches(model, make_batch, "fp32", "cpu")
