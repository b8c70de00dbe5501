"""The GPU tier's gate (tests/gpu/conftest.py): skipped without CUDA, failed when the GPU is required."""

from __future__ import annotations

import pytest

from tests.gpu.conftest import REQUIRE_ENV, gate


def test_without_cuda_the_tier_skips_with_the_reason():
    with pytest.raises(pytest.skip.Exception, match="needs CUDA: no GPU here"):
        gate("no GPU here", {})


def test_where_the_gpu_is_required_a_missing_one_fails_the_tier():
    with pytest.raises(pytest.fail.Exception, match=f"{REQUIRE_ENV}=1 but the GPU tier cannot run: no GPU here"):
        gate("no GPU here", {REQUIRE_ENV: "1"})


def test_with_cuda_the_gate_lets_every_test_run():
    gate(None, {REQUIRE_ENV: "1"})
    gate(None, {})
